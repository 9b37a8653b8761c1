"""Helpers for tests that talk to real nodes over DDS on this machine.

* :func:`start_node` runs a plag_ros node as a subprocess (``python -m plag_ros.ros.nodes.X``,
  no dependence on PATH) in a given ROS domain, and :class:`NodeProcess` stops it with
  SIGINT (the node's own shutdown path) and returns its output.
* :class:`RosClient` is the test's side of the graph: its own rclpy ``Context`` (so tests
  never touch the global one and can pick their domain), one node, a background executor
  thread, publishers and message collectors.

Every domain id given to these helpers is a logical one (or a :class:`ros_domains.Domain`):
it reaches DDS as the physical id :func:`ros_domains.domain` gives, one that no other
process on this machine holds.
"""
from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_domains import Domain, domain, physical

from plag_ros.apps.bringup import NodeProcess, NodeSpec
from plag_ros.ros.rclpy_compat import confine_to_localhost

__all__ = ['LATCHED', 'RELIABLE', 'REPO', 'Domain', 'NodeProcess', 'RosClient', 'domain',
           'physical', 'publish_at_rate', 'ros_env', 'start_node', 'wait_until']

REPO = Path(__file__).resolve().parents[1]
RELIABLE = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
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


def start_node(module: str, *, domain_id: int, log_dir: Path, params_file: Path | None = None,
               params: Mapping[str, object] | None = None,
               remaps: Mapping[str, str] | None = None) -> NodeProcess:
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
    return NodeProcess(spec.command(), Path(log_dir) / f'{module}.log', label=module,
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

        Each entry is ``(receipt time.time_ns(), message)``.
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

    def publisher(self, msg_type, topic: str, qos: QoSProfile = RELIABLE):
        with self._lock:
            return self.node.create_publisher(msg_type, topic, qos)

    def call(self, srv_type, name: str, request, timeout: float = 15.0, tries: int = 1):
        """Call service ``name`` and return its response (AssertionError on a timeout).

        ``tries`` > 1 sends the request again after each ``timeout``: only for requests that
        change nothing (a query). A request sent while the server has not matched this new
        client yet is lost, and a server killed a moment ago still counts as ready until
        its DDS lease ends.
        """
        cli = self._client(srv_type, name)
        assert cli.wait_for_service(timeout_sec=30.0), name
        for attempt in range(1, tries + 1):
            future = cli.call_async(request)
            try:
                self.wait_for(future.done, timeout, f'{name} response')
            except AssertionError:
                cli.remove_pending_request(future)
                if attempt == tries:
                    raise
                continue
            return future.result()
        raise AssertionError('tries must be at least 1')

    def _client(self, srv_type, name: str):
        """One client per service, kept: a second call to a service goes out at once, with
        no new client to discover and match (a timed call measures the server, not DDS)."""
        key = (srv_type, name)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = self.node.create_client(srv_type, name)
            return self._clients[key]

    def set_double_parameter(self, node: str, name: str, value: float) -> None:
        """Set the double parameter ``name`` of the running node ``node`` ('/plag_sim')."""
        self.set_parameters(node, {name: float(value)})

    def set_parameters(self, node: str, values: Mapping[str, object]) -> None:
        """Set parameters of the running node ``node``, each typed from its Python value
        (rclpy's ``Parameter``: bool, float, str, ...), in one request."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        request = SetParameters.Request(parameters=[
            Parameter(name, value=value).to_parameter_msg() for name, value in values.items()])
        results = self.call(SetParameters, f'{node}/set_parameters', request).results
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

    def wait_for_subscribers(self, publisher, count: int = 1, timeout: float = 30.0) -> None:
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
