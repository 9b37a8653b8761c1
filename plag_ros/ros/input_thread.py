"""A subscription served by a thread of its own, outside the node's executor.

rclpy's Python executor rebuilds its wait set from every entity of the node (parameter
services, timers, event handlers) on each wake-up, wraps each callback in a task and
wakes once more on its own guard condition afterwards. For a 200 Hz ``joint_states`` input
that bookkeeping cost about as much CPU as the whole decomposition. The thread here waits
on a wait set that holds only the subscription and a stop guard condition, takes every
message that is ready and calls the callback directly; the node's executor still serves
everything else (parameters, timers, other subscriptions).

The subscription lives in a callback group that no executor may execute, so an executor
spinning the node leaves it alone, and it still shows in the graph like any other.
It uses ``WaitSet`` and ``take_message`` from rclpy's C extension, the same calls
``rclpy.wait_for_message`` makes on Humble, Jazzy and Kilted.
"""
from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

from rclpy.callback_groups import CallbackGroup
from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile

__all__ = ['InputThread']

_WAIT_NS = 500_000_000       # re-check the context at least this often [ns]
_LOG_THROTTLE_S = 2.0


class _OwnThreadGroup(CallbackGroup):
    """A callback group no executor runs: its entities are served by :class:`InputThread`."""

    def can_execute(self, entity) -> bool:
        return False

    def beginning_execution(self, entity) -> bool:
        return False

    def ending_execution(self, entity) -> None:
        pass


class InputThread:
    """Subscribe to ``topic`` and call ``callback(msg)`` from a dedicated thread.

    Args:
        node: the node the subscription belongs to (name resolution, remaps, graph).
        msg_type: message class.
        topic: topic name, resolved like ``Node.create_subscription`` resolves it.
        callback: called with each message in arrival order, in the thread; it must
            guard state it shares with the executor's callbacks. An exception it raises is
            logged (throttled) and counted in ``errors``; the thread goes on.
        qos: the subscription's QoS.
        raw: deliver the serialized CDR ``bytes`` instead of a message object.
    """

    def __init__(self, node: Node, msg_type, topic: str, callback: Callable[[object], None],
                 qos: QoSProfile, *, raw: bool = False) -> None:
        self._node = node
        self._callback = callback
        self.errors = 0
        self._last_log = -float('inf')
        self._stop = threading.Event()
        self.subscription = node.create_subscription(
            msg_type, topic, callback, qos, callback_group=_OwnThreadGroup(), raw=raw)
        self._wake = GuardCondition(None, None, context=node.context)
        self._thread = threading.Thread(
            target=self._run, name=f'{node.get_name()}:{self.subscription.topic_name}',
            daemon=True)
        self._thread.start()

    @property
    def topic_name(self) -> str:
        """The fully resolved topic."""
        return self.subscription.topic_name

    def _run(self) -> None:
        try:
            self._serve()
        except RuntimeError:   # rclpy's InvalidHandle and RCLError derive from it
            # The node or the context went away under the wait (shutdown without destroy).
            if not self._stop.is_set() and self._node.context.ok():
                raise

    def _serve(self) -> None:
        sub, context = self.subscription, self._node.context
        handle, msg_type, raw = sub.handle, sub.msg_type, sub.raw
        if context.handle is None:   # rclpy.init was not called on it, or it is gone
            raise RuntimeError(f'{self.topic_name}: the node has no initialised context')
        wait_set = _rclpy.WaitSet(1, 1, 0, 0, 0, 0, context.handle)
        while not self._stop.is_set() and context.ok():
            # rcl_wait nulls the entries that are not ready: re-add both every round.
            with handle, self._wake.handle:
                wait_set.clear_entities()
                wait_set.add_subscription(handle)
                wait_set.add_guard_condition(self._wake.handle)
                wait_set.wait(_WAIT_NS)     # releases the GIL while it blocks
                if self._stop.is_set() or not wait_set.get_ready_entities('subscription'):
                    continue
                while not self._stop.is_set() and context.ok():
                    taken = handle.take_message(msg_type, raw)
                    if taken is None:
                        break
                    self._deliver(taken[0])

    def _deliver(self, msg) -> None:
        try:
            self._callback(msg)
        except Exception:   # noqa: BLE001 - a bug in one message must not end the input
            if self._stop.is_set() or not self._node.context.ok():
                # Shut down under the callback (rclpy's SIGINT handler shuts the context
                # down from its own thread): its publish failed because the context is
                # gone, and so would the log line. Not an error; the loop ends.
                return
            self.errors += 1
            now = time.monotonic()
            if now - self._last_log >= _LOG_THROTTLE_S:
                self._last_log = now
                self._node.get_logger().error(
                    f'{self.topic_name} callback failed ({self.errors} so far):\n'
                    f'{traceback.format_exc()}')

    def destroy(self, timeout_s: float = 5.0) -> None:
        """Stop and join the thread, then destroy the subscription (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        try:
            self._wake.trigger()
        except Exception:   # noqa: BLE001 - the context may already be shut down
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._node.destroy_subscription(self.subscription)
        self._wake.destroy()
