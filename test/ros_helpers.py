"""Helpers for tests that talk to real nodes over DDS on this machine.

* :func:`start_node` runs a plag_ros node as a subprocess (``python -m plag_ros.ros.nodes.X``,
  no dependence on PATH) in a given ROS domain, and :class:`NodeProcess` stops it with
  SIGINT (the node's own shutdown path) and returns its output.
* :class:`RosClient` is the test's side of the graph: its own rclpy ``Context`` (so tests
  never touch the global one and can pick their domain), one node, a background executor
  thread, publishers and message collectors, and service calls that survive discovery.

Every domain id given to these helpers is a logical one (or a :class:`ros_domains.Domain`):
it reaches DDS as the physical id :func:`ros_domains.domain` gives, one that no other
process on this machine holds.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_domains import Domain, domain, physical

from plag_ros.apps.bringup import NodeProcess, NodeSpec
from plag_ros.ros.rclpy_compat import confine_to_localhost

__all__ = ['LATCHED', 'LATCHED_ALL', 'RELIABLE', 'REPO', 'Domain', 'NodeProcess',
           'RosClient', 'domain', 'physical', 'publish_at_rate', 'ros_context', 'ros_env',
           'start_node', 'wait_until']

REPO = Path(__file__).resolve().parents[1]
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
# LATCHED, keeping every sample until taken: a collector on a loaded machine, with a
# depth of 1, sees a newer sample replace one it had not yet taken
LATCHED_ALL = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)


def wait_until(predicate: Callable[[], object], timeout_s: float, what: str = '',
               poll_s: float = 0.02):
    """Poll ``predicate`` until it returns something truthy, and return that.

    The replacement for sleep-then-assert: the test goes on as soon as the condition holds
    and fails with a message naming ``what`` only after ``timeout_s`` seconds without it.

    Raises:
        AssertionError: the condition did not hold within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f'timed out after {timeout_s} s waiting for '
                                 f'{what or predicate}')
        time.sleep(poll_s)


@contextlib.contextmanager
def ros_context(domain_id: int) -> Iterator[Context]:
    """A started rclpy ``Context`` of its own in ``domain_id``, for nodes built in the
    test's process; shut down on exit."""
    context = Context()
    rclpy.init(context=context, domain_id=domain(domain_id))
    try:
        yield context
    finally:
        context.try_shutdown()


def ros_env(domain_id: int, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for a node subprocess: this machine only, Fast DDS, the physical domain
    of ``domain_id`` (:func:`ros_domains.domain`)."""
    env = dict(os.environ)
    confine_to_localhost(env)
    env.update({'ROS_DOMAIN_ID': str(domain(domain_id)),
                'RMW_IMPLEMENTATION': 'rmw_fastrtps_cpp',
                'PYTHONUNBUFFERED': '1'})
    env['PYTHONPATH'] = os.pathsep.join(filter(None, [str(REPO), env.get('PYTHONPATH')]))
    env.update(extra or {})
    return env


class NodeUnderTest(NodeProcess):
    """A node process of a test: :meth:`stop` waits :data:`STOP_TIMEOUT_S` for the node to
    end on SIGINT before it sends SIGKILL.

    NodeProcess gives it 10 s. A node's shutdown is its own business (a hanging one exits
    with 1 after ``SHUTDOWN_DEADLINE_S``, which the tests see), but a process given a
    seventh of a core on a loaded 2-core machine needs longer than 10 s of wall time to
    finish its interpreter, and a SIGKILL then reads as a shutdown bug (exit -9).
    """

    def stop(self, timeout: float | None = None, signum: int = signal.SIGINT) -> int:
        return super().stop(STOP_TIMEOUT_S if timeout is None else timeout, signum)


STOP_TIMEOUT_S = 120.0


def start_node(module: str, *, domain_id: int, log_dir: Path, params_file: Path | None = None,
               params: Mapping[str, object] | None = None,
               remaps: Mapping[str, str] | None = None) -> NodeUnderTest:
    """Start ``python -m plag_ros.ros.nodes.<module> --ros-args ...`` in ``domain_id``.

    Args:
        module: node module name, e.g. ``'dynamics_node'``.
        domain_id: the test's logical domain id (or a :class:`Domain`).
        log_dir: folder for the node's output log.
        params_file: a ``--params-file``.
        params: ``-p name:=value`` overrides (values are written as YAML scalars).
        remaps: ``-r from:=to`` remappings.
    """
    spec = NodeSpec(module, params_file, dict(params or {}), dict(remaps or {}))
    return NodeUnderTest(spec.command(), Path(log_dir) / f'{module}.log', label=module,
                    env=ros_env(domain_id), cwd=REPO)


class RosClient:
    """The test's own node in its own rclpy context and domain, spun in a thread.

    Args:
        domain_id: the test's logical domain id (or a :class:`Domain`).
        name: node name.
    """

    def __init__(self, domain_id: int, name: str = 'plag_test_client') -> None:
        self.domain_id = domain(domain_id)
        os.environ['ROS_DOMAIN_ID'] = str(self.domain_id)
        self.context = Context()
        rclpy.init(context=self.context, domain_id=self.domain_id)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self._lock = threading.Lock()
        self._clients: dict = {}
        self._stop = False
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop and self.context.ok():
            self.executor.spin_once(timeout_sec=0.05)

    def subscribe(self, msg_type, topic: str, callback: Callable, qos: QoSProfile | int =
                  RELIABLE, *, raw: bool = False):
        """``node.create_subscription`` made safely while the executor thread spins."""
        with self._lock:
            return self.node.create_subscription(msg_type, topic, callback, qos, raw=raw)

    def collect(self, msg_type, topic: str, qos: QoSProfile = RELIABLE) -> list:
        """Subscribe and return the list that received messages are appended to.

        Each entry is ``(receipt time.time_ns(), message)``. The receipt time measures this
        process's executor as much as the sender: rates and latencies come from the
        messages' own stamps.
        """
        received: list = []

        def callback(msg) -> None:
            received.append((time.time_ns(), msg))

        with self._lock:
            self.node.create_subscription(msg_type, topic, callback, qos)
        return received

    def relay(self, msg_type, topic: str, to_topic: str, qos: QoSProfile = RELIABLE) -> list:
        """Collect ``topic`` as :meth:`collect` does and republish each message, unchanged,
        on ``to_topic``.

        A node under test that reads ``to_topic`` then sees exactly the messages in the
        returned list, in its order, whatever each participant's discovery timing: a
        reference computed from the list starts from the same samples as the node.
        """
        out = self.publisher(msg_type, to_topic, qos)
        received: list = []

        def callback(msg) -> None:
            received.append((time.time_ns(), msg))
            out.publish(msg)

        with self._lock:
            self.node.create_subscription(msg_type, topic, callback, qos)
        return received

    def gated_relay(self, msg_type, topic: str, to_topic: str) -> tuple[list[str], list, Any]:
        """Republish ``topic`` on ``to_topic`` through a gate: returns ``(mode, held,
        publisher)``, where ``mode[0]`` says what happens to each message (``'live'``, the
        start: sent on; ``'hold'``: kept in ``held``, as a stalled DDS path keeps a backlog;
        anything else: dropped, as a path that stopped), and ``publisher`` is the one on
        ``to_topic`` (to send ``held`` on with)."""
        out = self.publisher(msg_type, to_topic)
        mode, held = ['live'], []

        def callback(msg) -> None:
            if mode[0] == 'hold':
                held.append(msg)
            elif mode[0] == 'live':
                out.publish(msg)

        self.subscribe(msg_type, topic, callback)
        return mode, held, out

    def publisher(self, msg_type, topic: str, qos: QoSProfile = RELIABLE):
        with self._lock:
            return self.node.create_publisher(msg_type, topic, qos)

    def call(self, srv_type, name: str, request, timeout: float = 60.0, *,
             once: bool = False, resend_s: float = 5.0, probe: str | None = None):
        """Call service ``name`` and return its response (AssertionError after ``timeout``).

        A request sent before the server has matched this client is lost (the client's own
        side is matched once ``wait_for_service`` is true, on Fast DDS; the server's side
        may not be yet). So:

        * by default the request goes again every ``resend_s`` without an answer, every
          earlier one still awaited (the first answer wins): right for a query and for a
          request that sets a value, where a second copy changes nothing;
        * ``once=True`` is for a request that must not act twice (``~/enable``, a
          controller switch): it goes out once, after the server has been seen to match
          this client both ways (:meth:`_wait_server_matched`, through the query service
          ``probe`` of the same node, by default its ``get_parameters``).

        A server killed a moment ago still counts as ready until its DDS lease ends: for a
        query, the re-sending also covers the one that comes back.
        """
        deadline = time.monotonic() + timeout
        cli = self._client(srv_type, name)
        self._wait_for_service(cli, name, deadline)
        if once:
            self._wait_server_matched(name, probe, deadline)
        return self._answer(cli, name, request, deadline, None if once else resend_s)

    def _wait_for_service(self, cli, name: str, deadline: float) -> None:
        if not cli.wait_for_service(timeout_sec=max(deadline - time.monotonic(), 0.1)):
            raise AssertionError(f'service {name} not available')

    def _answer(self, cli, name: str, request, deadline: float, resend_s: float | None):
        """Send ``request`` on ``cli`` (again every ``resend_s`` unless None) until a reply;
        every request still pending is dropped when one is answered or at ``deadline``."""
        futures = [cli.call_async(request)]
        next_send = time.monotonic() + (resend_s or 0.0)
        try:
            while True:
                done = next((f for f in futures if f.done()), None)
                if done is not None:
                    return done.result()
                now = time.monotonic()
                if now >= deadline:
                    raise AssertionError(f'no answer from {name} within the deadline '
                                         f'({len(futures)} request(s) sent)')
                if resend_s is not None and now >= next_send:
                    futures.append(cli.call_async(request))
                    next_send = now + resend_s
                time.sleep(0.01)
        finally:
            for future in futures:
                if not future.done():
                    cli.remove_pending_request(future)

    def _wait_server_matched(self, name: str, probe: str | None, deadline: float) -> None:
        """Until the server of ``name`` has matched this process's client of it both ways.

        A participant announces its endpoints on reliable builtin topics in creation order,
        and a server takes a request only from a client whose request writer it has
        matched, and can answer only a reply reader it has matched. A client made *after*
        the one of ``name``, for a query service of the same node (``probe``), that gets an
        answer therefore proves that the server has matched the earlier client's writer and
        reader too. The probe is a query, so it is sent again until answered.
        """
        from rcl_interfaces.srv import GetParameters

        probe = probe or name.rsplit('/', 1)[0] + '/get_parameters'
        with self._lock:
            cli = self.node.create_client(GetParameters, probe)
        try:
            self._wait_for_service(cli, probe, deadline)
            self._answer(cli, probe, GetParameters.Request(), deadline, 2.0)
        finally:
            with self._lock:
                self.node.destroy_client(cli)

    def _client(self, srv_type, name: str):
        """One client per service, kept: a second call to a service goes out at once, with
        no new client to discover and match."""
        key = (srv_type, name)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self.node.create_client(srv_type, name)
            return self._clients[key]

    def set_double_parameter(self, node: str, name: str, value: float) -> None:
        """Set the double parameter ``name`` of the running node ``node`` ('/plag_sim')."""
        self.set_parameters(node, {name: float(value)})

    def set_parameters(self, node: str, values: Mapping[str, object],
                       timeout: float = 60.0) -> None:
        """Set parameters of the running node ``node``, each typed from its Python value
        (rclpy's ``Parameter``: bool, float, str, ...), in one request, sent once (a node's
        parameter callback may act on a change)."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[
            Parameter(name, value=value).to_parameter_msg() for name, value in values.items()])
        results = self.call(SetParameters, f'{node}/set_parameters', request, timeout,
                            once=True).results
        refused = [f'{name} = {value}: {r.reason}' for (name, value), r in
                   zip(values.items(), results, strict=True) if not r.successful]
        assert not refused, f'{node} refused {refused}'

    @staticmethod
    def wait_for(predicate: Callable[[], bool], timeout: float, what: str = '') -> None:
        """Poll ``predicate`` until true; AssertionError naming ``what`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.02)
        raise AssertionError(f'timed out after {timeout} s waiting for {what or predicate}')

    def wait_for_subscribers(self, publisher, count: int = 1, timeout: float = 60.0) -> None:
        self.wait_for(lambda: publisher.get_subscription_count() >= count, timeout,
                      f'{count} subscriber(s) on {publisher.topic_name}')

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=5.0)
        self.executor.shutdown()
        self.node.destroy_node()
        self.context.try_shutdown()

    def __enter__(self) -> RosClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def publish_at_rate(publisher, messages: Iterable, rate_hz: float) -> int:
    """Publish ``messages`` on a fixed-rate schedule (sleeping between); returns the count."""
    period = 1.0 / rate_hz
    start = time.perf_counter()
    count = 0
    for count, msg in enumerate(messages, 1):
        delay = start + (count - 1) * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        publisher.publish(msg)
    return count


def answered_at_once(coroutine):
    """The answer of a service callback's ``coroutine`` that awaits nothing (an
    ``~/enable`` refused before its switch)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError('the callback awaited something: it was not answered at once')


def node_statuses(collected: list, name: str) -> list[tuple[int, dict]]:
    """The ``/diagnostics`` statuses named ``name`` among ``collected`` arrays, each as
    ``(level, content)``: the key-values read back into the nested mapping ``~/state``'s
    JSON has (a dotted key is a nested one; a value that parses as JSON is that value, any
    other a string). Written here from the documented form, not with the node's encoder."""
    out = []
    for _, array in collected:
        for status in array.status:
            if status.name != name:
                continue
            content: dict = {}
            for kv in status.values:
                *path, leaf = kv.key.split('.')
                node = content
                for part in path:
                    node = node.setdefault(part, {})
                try:
                    node[leaf] = json.loads(kv.value)
                except ValueError:
                    node[leaf] = kv.value
            out.append((int.from_bytes(status.level, 'little'), content))
    return out

