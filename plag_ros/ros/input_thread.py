"""A subscription served by a thread of its own, outside the node's executor.

rclpy's Python executor rebuilds its wait set from every entity of the node (parameter
services, timers, event handlers) on each wake-up, wraps each callback in a task and
wakes once more on its own guard condition afterwards. For a 200 Hz ``joint_states`` input
that bookkeeping cost about as much CPU as the whole decomposition. :class:`InputThread`
serves the subscription from a thread of its own, so the node's executor (parameters,
timers, other subscriptions) neither delays it nor pays for it. Two ways, chosen per
instance:

* **public** (the default): rclpy's public API only. The subscription belongs to a helper
  node ``<node name>_input`` in the node's context and namespace (no parameter services,
  no rosout, no command-line arguments: the topic is resolved, remaps included, by the
  node itself), spun by a :class:`rclpy.executors.SingleThreadedExecutor` of its own in
  the thread. That executor's wait set holds that one subscription and the executor's
  guard conditions, so its per-message bookkeeping is small and does not grow with the
  node. The helper shows in the graph as the subscriber.
* **private wait set** (opt-in, ``private_wait_set=True``): the thread waits on a wait set
  of rclpy's C extension that holds only the subscription and a stop guard condition
  (``WaitSet`` and ``take_message``, the calls ``rclpy.wait_for_message`` makes on Humble,
  Jazzy and Kilted; not a documented public API), takes every message that is ready and
  calls the callback directly. The subscription is the node's own, in a callback group no
  executor may execute. Before using it the instance checks the running extension against
  the signatures read in those three releases' sources
  (:func:`plag_ros.ros.rclpy_compat.private_wait_set_problem`); where they differ it logs a
  warning saying what differs and takes the public way.
"""
from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable

from rclpy.callback_groups import CallbackGroup
from rclpy.executors import ExternalShutdownException, ShutdownException, SingleThreadedExecutor
from rclpy.guard_condition import GuardCondition
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.node import Node
from rclpy.qos import QoSProfile

from plag_ros.ros.rclpy_compat import private_wait_set_problem, signals_held

__all__ = ['InputThread']

_WAIT_NS = 500_000_000       # re-check the context at least this often [ns]
_WAIT_S = _WAIT_NS * 1e-9
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
        private_wait_set: opt in to the private wait-set way (module docstring); it is
            taken only where the running rclpy passes the check, else the public way is,
            with a logged warning.
    """

    def __init__(self, node: Node, msg_type, topic: str, callback: Callable[[object], None],
                 qos: QoSProfile, *, raw: bool = False, private_wait_set: bool = False
                 ) -> None:
        self._node = node
        self._callback = callback
        self.errors = 0
        self._last_log = -float('inf')
        self._stop = threading.Event()
        problem = private_wait_set_problem() if private_wait_set else ''
        if problem:
            node.get_logger().warning(
                f'{topic}: the private wait set is not used, the public executor serves the '
                f"input thread: this rclpy's wait-set API is not the one checked ({problem})")
        self.private_wait_set = private_wait_set and not problem
        """Whether the private wait-set way serves the subscription (else the public)."""
        self._helper: Node | None = None
        self._executor: SingleThreadedExecutor | None = None
        self._wake: GuardCondition | None = None
        if self.private_wait_set:
            self.subscription = node.create_subscription(
                msg_type, topic, callback, qos, callback_group=_OwnThreadGroup(), raw=raw)
            self._wake = GuardCondition(None, None, context=node.context)
            serve = self._serve_private
        else:
            self._helper = Node(f'{node.get_name()}_input', context=node.context,
                                namespace=node.get_namespace(), use_global_arguments=False,
                                enable_rosout=False, start_parameter_services=False)
            self.subscription = self._helper.create_subscription(
                msg_type, node.resolve_topic_name(topic), self._deliver, qos, raw=raw)
            with signals_held():    # (a node's build takes Ctrl-C: never mid-constructor)
                self._executor = SingleThreadedExecutor(context=node.context)
            self._executor.add_node(self._helper)
            serve = self._serve_public
        self._thread = threading.Thread(
            target=self._run, args=(serve,),
            name=f'{node.get_name()}:{self.subscription.topic_name}', daemon=True)
        self._thread.start()

    @property
    def topic_name(self) -> str:
        """The fully resolved topic."""
        return self.subscription.topic_name

    @property
    def alive(self) -> bool:
        """Whether the thread still serves the subscription (False once :meth:`destroy`
        returned, or after the context was shut down)."""
        return self._thread.is_alive()

    def _run(self, serve: Callable[[], None]) -> None:
        try:
            serve()
        except (RuntimeError, ShutdownException, ExternalShutdownException):
            # rclpy's InvalidHandle and RCLError derive from RuntimeError. The node or the
            # context went away under the wait (shutdown without destroy).
            if not self._stop.is_set() and self._node.context.ok():
                raise

    def _serve_public(self) -> None:
        executor, context = self._executor, self._node.context
        assert executor is not None
        while not self._stop.is_set() and context.ok():
            executor.spin_once(timeout_sec=_WAIT_S)   # calls _deliver for a message

    def _serve_private(self) -> None:
        sub, context, wake = self.subscription, self._node.context, self._wake
        assert wake is not None
        handle, msg_type, raw = sub.handle, sub.msg_type, sub.raw
        if context.handle is None:   # rclpy.init was not called on it, or it is gone
            raise RuntimeError(f'{self.topic_name}: the node has no initialised context')
        wait_set = _rclpy.WaitSet(1, 1, 0, 0, 0, 0, context.handle)
        while not self._stop.is_set() and context.ok():
            # rcl_wait nulls the entries that are not ready: re-add both every round.
            with handle, wake.handle:
                wait_set.clear_entities()
                wait_set.add_subscription(handle)
                wait_set.add_guard_condition(wake.handle)
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
            if self._wake is not None:
                self._wake.trigger()
            if self._executor is not None:
                self._executor.wake()
        except Exception:   # noqa: BLE001 - the context may already be shut down
            pass
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if self._executor is not None and self._helper is not None:
            self._executor.shutdown(timeout_sec=timeout_s)
            self._helper.destroy_node()    # and the subscription with it
        else:
            self._node.destroy_subscription(self.subscription)
        if self._wake is not None:
            self._wake.destroy()
