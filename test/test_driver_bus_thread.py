"""plag_driver's bus thread (plag_ros.ros.nodes.driver_node), in-process with a real rclpy
context (logical domain 91) and no bus: an open that fails, with a BusError or with any
other exception (a bug), is tried again every second; the thread never ends on it. A dead
thread would leave the node up and silent, with nobody opening the bus or holding the arm."""
from __future__ import annotations

import time

import pytest
from rclpy.parameter import Parameter
from ros_helpers import ros_context, wait_until

from plag_ros.bus.host.driver import BusError
from plag_ros.ros.nodes.driver_node import DriverNode

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
