"""InputThread: a subscription served by a thread of its own, over real DDS.

ROS_DOMAIN_ID 15 is this module's. The publisher is a test client spun by an executor in
another context; the subscribing node is spun by an executor too, which must leave the
input thread's subscription alone (each message is delivered once, in the input thread).
"""
from __future__ import annotations

import threading
import time

import pytest
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.serialization import serialize_message
from ros_helpers import RELIABLE, RosClient
from std_msgs.msg import Int64

from plag_ros.ros.input_thread import InputThread

DOMAIN_ID = 15
COUNT = 200


@pytest.fixture()
def graph():
    """(publishing client, subscribing node, its executor) in two contexts."""
    client = RosClient(DOMAIN_ID, 'plag_test_input_pub')
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    node = rclpy.create_node('plag_test_input_sub', context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set() and context.ok():
            executor.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        yield client, node
    finally:
        stop.set()
        spinner.join(5.0)
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
        client.close()


def _publish(client: RosClient, values, raw_topic: str = 'numbers',
             subscribers: int = 1) -> None:
    publisher = client.publisher(Int64, raw_topic)
    client.wait_for_subscribers(publisher, subscribers)
    for value in values:
        publisher.publish(Int64(data=value))
        time.sleep(0.001)


def test_every_message_once_in_order_on_the_input_thread(graph):
    client, node = graph
    got: list[tuple[str, int]] = []
    inputs = InputThread(node, Int64, 'numbers',
                         lambda msg: got.append((threading.current_thread().name, msg.data)),
                         RELIABLE)
    # A witness the executor does serve, on the same topic: once it has every message the
    # executor has been through the rounds in which it would have run the input thread's
    # subscription too (both are ready together), so a duplicate would be in `got` by then.
    witnessed: list[int] = []
    node.create_subscription(Int64, 'numbers', lambda msg: witnessed.append(msg.data),
                             RELIABLE)
    assert inputs.topic_name == '/numbers'
    _publish(client, range(COUNT), subscribers=2)
    client.wait_for(lambda: len(got) >= COUNT, 20.0, f'{COUNT} numbers')
    client.wait_for(lambda: len(witnessed) >= COUNT, 20.0, f'{COUNT} numbers, executor')
    assert witnessed == list(range(COUNT))
    assert [value for _, value in got] == list(range(COUNT))
    assert {name for name, _ in got} == {'plag_test_input_sub:/numbers'}
    inputs.destroy()
    inputs.destroy()   # idempotent
    assert not inputs._thread.is_alive()
    client.wait_for(lambda: client.node.count_subscribers('/numbers') == 1, 10.0,
                    'the subscription to leave the graph (the witness stays)')


def test_raw_delivery_and_failing_callback(graph):
    """raw=True gives the CDR bytes; a callback that raises is counted and the input goes on."""
    client, node = graph
    got: list[bytes] = []

    def callback(raw: bytes) -> None:
        if len(got) % 2:
            got.append(b'')
            raise RuntimeError('odd message')
        got.append(raw)

    inputs = InputThread(node, Int64, 'numbers', callback, RELIABLE, raw=True)
    try:
        _publish(client, range(20))
        client.wait_for(lambda: len(got) >= 20, 20.0, '20 numbers')
        assert inputs.errors == 10
        assert got[::2] == [serialize_message(Int64(data=v)) for v in range(0, 20, 2)]
    finally:
        inputs.destroy()


def test_context_shutdown_ends_the_thread():
    """Shutting the context down without destroy() ends the thread quietly."""
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    node = rclpy.create_node('plag_test_input_shutdown', context=context)
    inputs = InputThread(node, Int64, 'numbers', lambda msg: None, RELIABLE)
    context.shutdown()
    inputs._thread.join(5.0)
    assert not inputs._thread.is_alive()


def test_shutdown_under_a_publishing_callback_is_quiet():
    """Ctrl-C shuts the context down while the callback publishes: not an error.

    rclpy's SIGINT handler shuts the context down from its own thread; the callback's
    publish then raises. That is the shutdown, not a failing callback: nothing is counted
    or logged (the log would fail too: rosout's publisher is gone) and the thread ends.
    """
    client = RosClient(DOMAIN_ID, 'plag_test_input_race_pub')
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN_ID)
    node = rclpy.create_node('plag_test_input_race', context=context)
    echo = node.create_publisher(Int64, 'echo', RELIABLE)
    entered, shut = threading.Event(), threading.Event()
    raised: list[Exception] = []

    def callback(msg) -> None:
        entered.set()
        shut.wait(10.0)
        try:
            echo.publish(msg)
        except Exception as err:
            raised.append(err)
            raise

    inputs = InputThread(node, Int64, 'race', callback, RELIABLE)
    try:
        _publish(client, [1], raw_topic='race')
        client.wait_for(entered.is_set, 20.0, 'the callback to run')
        context.shutdown()
        shut.set()
        inputs._thread.join(5.0)
        assert not inputs._thread.is_alive()
        assert raised, 'the publish after shutdown did not fail: the test shows nothing'
        assert inputs.errors == 0
    finally:
        shut.set()
        client.close()
