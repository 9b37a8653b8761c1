"""plag_driver's bus thread (plag_ros.ros.nodes.driver_node), in-process with a real rclpy
context (logical domain 91) and no bus: an open that fails, with a BusError or with any
other exception (a bug), is tried again every second; the thread never ends on it. A dead
thread would leave the node up and silent, with nobody opening the bus or holding the arm;
meanwhile its ``~/state`` says why as its fault."""
from __future__ import annotations

import json
import time

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from ros_helpers import ros_context, wait_until
from std_msgs.msg import String

from plag_ros.bus.host.driver import BusError
from plag_ros.ros.nodes.driver_node import DriverNode
from plag_ros.ros.qos import LATCHED

DOMAIN_ID = 91


@pytest.fixture
def context():
    with ros_context(DOMAIN_ID) as context:
        yield context


def test_the_bus_thread_outlives_a_failed_open_of_any_kind(context, tmp_path, monkeypatch):
    node = DriverNode(context=context, parameter_overrides=[
        Parameter('port', value=str(tmp_path / 'no_bus_here')),
        Parameter('robot_description_source', value='file')])
    errors = [RuntimeError('a bug in open'), BusError('no servo answers'),
              ValueError('another bug')]
    calls: list[float] = []

    def failing():
        calls.append(time.monotonic())
        raise errors[min(len(calls), len(errors)) - 1]

    monkeypatch.setattr(node.driver, 'open', failing)
    try:
        node.start_bus()
        wait_until(lambda: len(calls) >= 4, 30.0, 'four tries of the open')
        assert node._thread.is_alive()
        gaps = [b - a for a, b in zip(calls, calls[1:])]
        assert min(gaps) > 0.9, gaps        # once a second, not in a tight loop
    finally:
        node.destroy_node()
    assert not node._thread.is_alive()


def test_a_bus_that_does_not_open_is_the_fault_on_the_state_topic(context, tmp_path):
    """While the bus does not open (no such port), ``~/state`` says why as its fault, over
    DDS, every second: a controller holding the arm hands it back on it, and a researcher
    sees it with ``ros2 topic echo`` (before, nothing was published until the bus opened)."""
    node = DriverNode(context=context, parameter_overrides=[
        Parameter('port', value=str(tmp_path / 'no_bus_here')),
        Parameter('robot_description_source', value='file')])
    listener = rclpy.create_node('state_listener', context=context)
    states: list[tuple[float, dict]] = []
    listener.create_subscription(
        String, '/plag_driver/state',
        lambda msg: states.append((time.monotonic(), json.loads(msg.data))), LATCHED)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(listener)
    try:
        node.start_bus()
        wait_until(lambda: executor.spin_once(timeout_sec=0.05) or len(states) >= 3, 30.0,
                   'three states')
        assert node._thread.is_alive() and not node.driver.is_open
        for _, state in states:
            assert state['fault'].startswith('bus not open: cannot open '), state['fault']
            assert 'no_bus_here' in state['fault']
            assert list(state['modes']) == node.driver.joints
        gaps = [b[0] - a[0] for a, b in zip(states, states[1:])]
        assert min(gaps) > 0.5, gaps          # once a second, not at every try of a loop
    finally:
        executor.shutdown()
        listener.destroy_node()
        node.destroy_node()
