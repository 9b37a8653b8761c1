"""plag_driver's bus loop (plag_ros.bus.host.loop_process) with no bus: an open that fails,
with a BusError or with any other exception (a bug), is tried again every second; the loop
never ends on it. A dead loop would leave the node up and silent, with nobody opening the
bus or holding the arm; meanwhile the node's ``~/state`` says why as its fault (in-process
with a real rclpy context, logical domain 91, the loop in its own process)."""
from __future__ import annotations

import contextlib
import json
import pickle
import socket
import threading
import time

import numpy as np
import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from ros_helpers import ros_context, wait_until
from std_msgs.msg import String

from plag_ros.bus.chain_file import CRANE_X7_BUS, BusConfig
from plag_ros.bus.host.driver import BusError, DriverSettings
from plag_ros.bus.host.loop_process import (
    MAX_CALL_BYTES,
    BusLoopProcess,
    DriverRecipe,
    LoopLink,
    call_message,
    run_loop,
)
from plag_ros.ros.nodes.driver_node import DriverNode
from plag_ros.ros.qos import LATCHED

DOMAIN_ID = 91


@pytest.fixture
def context():
    with ros_context(DOMAIN_ID) as context:
        yield context


def test_the_bus_loop_outlives_a_failed_open_of_any_kind(tmp_path, monkeypatch):
    """The loop of the bus process (:func:`run_loop`, here on a thread, over the sockets
    the process uses): an open that fails, with a BusError or any other exception (a
    bug), is tried again every second, each try's state record saying why; the stop call
    ends it, told as a loop that never opened."""
    driver = DriverRecipe(BusConfig.load(CRANE_X7_BUS),
                          DriverSettings(port=str(tmp_path / 'no_bus_here'))).build()
    errors = [RuntimeError('a bug in open'), BusError('no servo answers'),
              ValueError('another bug')]
    calls: list[float] = []

    def failing():
        calls.append(time.monotonic())
        raise errors[min(len(calls), len(errors)) - 1]

    monkeypatch.setattr(driver, 'open', failing)
    node_calls, loop_calls = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    node_records, loop_records = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    loop = threading.Thread(target=run_loop, args=(
        driver, LoopLink(loop_calls, loop_records), 200.0), daemon=True)
    loop.start()
    try:
        wait_until(lambda: len(calls) >= 4, 30.0, 'four tries of the open')
        assert loop.is_alive()
        gaps = [b - a for a, b in zip(calls, calls[1:])]
        assert min(gaps) > 0.9, gaps        # once a second, not in a tight loop
        node_calls.send(call_message(1, 'stop', ()))
        loop.join(5.0)
        assert not loop.is_alive()
        records = []
        node_records.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                records.append(pickle.loads(node_records.recv(1 << 16)))
        states = [r[1] for r in records if r[0] == 'state']
        assert [s['not_open'] for s in states[:3]] == [
            "RuntimeError('a bug in open')", 'no servo answers', "ValueError('another bug')"]
        assert not any(s['is_open'] for s in states)
        assert records[-1] == ('closed', None, 'stop asked')
        assert pickle.loads(node_calls.recv(1 << 16)) == (1, True, None)
    finally:
        for each in (node_calls, loop_calls, node_records, loop_records):
            each.close()


def test_a_malformed_or_late_call_does_not_end_the_loop_nor_act(tmp_path, monkeypatch):
    """What the node sends that the loop cannot take: bytes that are no call are dropped
    (counted) and the loop serves the next call; a call past its deadline (its caller was
    told it failed after its timeout) is answered as refused and not done: a fault clear
    that came late must not clear a fault latched since. Before, a call that could not be
    read raised out of the loop, which ended without a hold."""
    driver = DriverRecipe(BusConfig.load(CRANE_X7_BUS),
                          DriverSettings(port=str(tmp_path / 'no_bus_here'))).build()
    cleared: list[bool] = []
    monkeypatch.setattr(driver, 'clear_fault', lambda: cleared.append(True) or '')
    node_calls, loop_calls = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    node_records, loop_records = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    link = LoopLink(loop_calls, loop_records)
    loop = threading.Thread(target=run_loop, args=(driver, link, 200.0), daemon=True)
    loop.start()
    node_calls.settimeout(10.0)
    try:
        node_calls.send(b'not a call')
        node_calls.send(call_message(1, 'clear_fault', (), time.monotonic() - 0.001))
        node_calls.send(call_message(2, 'request_mode', ('current',), time.monotonic() + 5.0))
        late = pickle.loads(node_calls.recv(1 << 16))
        assert late[:2] == (1, False) and 'after its caller gave up' in late[2], late
        assert pickle.loads(node_calls.recv(1 << 16)) == (2, True, (False, 'no reading yet'))
        assert cleared == [] and link.malformed == 1
        assert loop.is_alive()
        node_calls.send(call_message(3, 'stop', ()))
        loop.join(5.0)
        assert not loop.is_alive()
    finally:
        for each in (node_calls, loop_calls, node_records, loop_records):
            each.close()


def test_a_call_too_large_for_the_socket_is_refused_by_the_node(tmp_path):
    """A trajectory larger than a call may carry (:data:`MAX_CALL_BYTES`, under what a Unix
    socket takes) is refused before it is sent, with the reason; the loop sees nothing."""
    process = BusLoopProcess(DriverRecipe(BusConfig.load(CRANE_X7_BUS), DriverSettings()),
                             200.0, lambda kind, payload: None)
    node_end, loop_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    process._calls = node_end
    try:
        points = [[k + j / 10 for j in range(7)] for k in range(4000)]   # 250 kB pickled
        ok, why = process.call('command_trajectory', list(range(4000)), points, ['j'] * 7)
        assert not ok and f'more than a call may carry ({MAX_CALL_BYTES})' in why, why
        loop_end.setblocking(False)
        with pytest.raises(BlockingIOError):
            loop_end.recv(1 << 16)
    finally:
        node_end.close()
        loop_end.close()


def test_a_bug_out_of_the_loops_own_code_ends_it_holding_and_closed(tmp_path):
    """An exception out of the loop's own code, not out of a cycle (here its records'
    send raising MemoryError after 50 readings), ends the loop through the hold and the
    close, on the emulated bus in real time, the arm in current mode with its gravity
    torque: the servos are back in position mode with their torque on, the port closed
    (the driver's own read-back), and the exception is raised after. Before, it left the
    loop at once, and the servos in current mode to their Bus Watchdog."""
    from torque_rig import EmulatedBus, gravity_feed, move_to, new_driver

    bus = EmulatedBus(tmp_path)
    try:
        driver = new_driver(bus.link, watchdog_s=2.5, failed_reads=100)
        driver.open()
        move_to(driver, np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0]), 1.0, 0.3)
        node_calls, loop_calls = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        node_records, loop_records = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sent = {'reading': 0}
        feed = gravity_feed(driver)          # the pose's gravity torque, as a hold would

        class BrokenLink(LoopLink):
            def send(self, *record):
                if record[0] == 'reading':
                    sent['reading'] += 1
                    if sent['reading'] > 50:
                        sent['modes'] = list(driver.modes)
                        sent['fault'] = driver.fault
                        raise MemoryError('a send that cannot allocate')
                    if sent['reading'] == 10:
                        assert driver.request_mode('current')[0]
                    feed(record[1])
                super().send(*record)

        driver.open = lambda: driver.reading       # open already: the loop starts cycling
        raised: list[BaseException] = []

        def run() -> None:
            try:
                run_loop(driver, BrokenLink(loop_calls, loop_records), 200.0)
            except BaseException as err:  # noqa: BLE001 - what the test looks at
                raised.append(err)

        loop = threading.Thread(target=run, daemon=True)
        loop.start()
        loop.join(30.0)
        assert not loop.is_alive()
        assert [type(e) for e in raised] == [MemoryError], raised
        assert sent['modes'][:7] == ['current'] * 7 and not sent['fault'], sent
        assert 'current' not in driver.modes and not driver.is_open, driver.modes
        for each in (node_calls, loop_calls, node_records, loop_records):
            each.close()
    finally:
        record = bus.stop()
    assert np.all(record['effort'][-50:, 1] != 0.0)       # the tilt still held at the end


def test_a_bus_that_does_not_open_is_the_fault_on_the_state_topic(context, tmp_path):
    """While the bus does not open (no such port), ``~/state`` says why as its fault, over
    DDS, every second: a controller holding the arm hands it back on it, and a researcher
    sees it with ``ros2 topic echo`` (before, nothing was published until the bus opened).
    No state comes before the loop's first: a log line of the loop that came first once
    published the node's empty state, no fault, while the bus was not open."""
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
        # matched before the loop starts: the listener hears every state from the first
        wait_until(lambda: executor.spin_once(timeout_sec=0.05) or
                   node._pub_state.get_subscription_count() >= 1, 30.0, 'the match')
        node.start_bus()
        wait_until(lambda: executor.spin_once(timeout_sec=0.05) or len(states) >= 3, 30.0,
                   'three states')
        assert node.bus.alive()
        for _, state in states:
            assert state['fault'].startswith('bus not open: cannot open '), state['fault']
            assert 'no_bus_here' in state['fault']
            assert list(state['modes']) == node.joints
        gaps = [b[0] - a[0] for a, b in zip(states, states[1:])]
        assert min(gaps) > 0.5, gaps          # once a second, not at every try of a loop
    finally:
        executor.shutdown()
        listener.destroy_node()
        node.destroy_node()
