"""InputThread: a subscription served by a thread of its own, over real DDS.

Logical domain 15 is this module's. The publisher is a test client spun by an executor in
another context; the subscribing node is spun by an executor too, which must leave the
input thread's subscription alone (each message is delivered once, in the input thread).
The tests run on both ways of serving it: the public executor (the default) and the
opt-in private wait set.
"""
from __future__ import annotations

import gc
import itertools
import sys
import threading
import time
from pathlib import Path

import pytest
import rclpy
from parameter_files import node_parameters
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.serialization import serialize_message
from ros_helpers import RELIABLE, RosClient, domain, wait_until
from std_msgs.msg import Int64

from plag_ros.ros import input_thread
from plag_ros.ros.input_thread import InputThread

DOMAIN_ID = 15
COUNT = 200
CONFIG = Path(__file__).resolve().parents[1] / 'config' / 'crane_x7.yaml'
WAYS = pytest.mark.parametrize('private', [False, True], ids=['public', 'private_wait_set'])


_TOPICS = itertools.count()


@pytest.fixture()
def topic() -> str:
    """A topic of this test's own. A test that only shuts its context down leaves its
    subscription's DDS participant behind until it is garbage collected; on a shared topic
    a publisher waiting for "one subscriber" could count that one and publish before this
    test's subscription is matched, and the message would be lost to it."""
    return f'numbers_{next(_TOPICS)}'


@pytest.fixture()
def graph():
    """(publishing client, subscribing node, its executor) in two contexts."""
    client = RosClient(DOMAIN_ID, 'plag_test_input_pub')
    context = Context()
    rclpy.init(context=context, domain_id=domain(DOMAIN_ID))
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


def _publish(client: RosClient, values, raw_topic: str, readers: list) -> None:
    """Publish ``values`` once every subscription in ``readers`` (this process's) and the
    publisher have matched each other: a message sent before a reader has matched the
    writer is lost to it, though the writer already counts it."""
    publisher = client.publisher(Int64, raw_topic)
    client.wait_for_subscribers(publisher, len(readers))
    client.wait_for(lambda: all(r.get_publisher_count() >= 1 for r in readers
                                if hasattr(r, 'get_publisher_count')), 60.0,
                    f'the subscriptions of {raw_topic} to match the publisher')
    for value in values:
        publisher.publish(Int64(data=value))
        time.sleep(0.001)


def _subscriber_nodes(node, topic: str) -> list[str]:
    return sorted(info.node_name for info in node.get_subscriptions_info_by_topic(topic))


@WAYS
def test_every_message_once_in_order_on_the_input_thread(graph, private, topic):
    client, node = graph
    got: list[tuple[str, int]] = []
    inputs = InputThread(node, Int64, topic,
                         lambda msg: got.append((threading.current_thread().name, msg.data)),
                         RELIABLE, private_wait_set=private)
    assert inputs.private_wait_set is private
    # The public way subscribes from its helper node, the private one from the node itself.
    owner = 'plag_test_input_sub' if private else 'plag_test_input_sub_input'
    wait_until(lambda: owner in _subscriber_nodes(node, f'/{topic}'), 60.0, owner)
    # A witness the executor does serve, on the same topic: once it has every message the
    # executor has been through the rounds in which it would have run the input thread's
    # subscription too (both are ready together), so a duplicate would be in `got` by then.
    witnessed: list[int] = []
    witness = node.create_subscription(Int64, topic, lambda msg: witnessed.append(msg.data),
                                       RELIABLE)
    assert inputs.topic_name == f'/{topic}'
    _publish(client, range(COUNT), topic, [inputs.subscription, witness])
    client.wait_for(lambda: len(got) >= COUNT, 60.0, f'{COUNT} numbers')
    client.wait_for(lambda: len(witnessed) >= COUNT, 60.0, f'{COUNT} numbers, executor')
    assert witnessed == list(range(COUNT))
    assert [value for _, value in got] == list(range(COUNT))
    assert {name for name, _ in got} == {f'plag_test_input_sub:/{topic}'}
    inputs.destroy()
    inputs.destroy()   # idempotent
    assert not inputs.alive
    client.wait_for(lambda: client.node.count_subscribers(f'/{topic}') == 1, 60.0,
                    'the subscription to leave the graph (the witness stays)')


@WAYS
def test_raw_delivery_and_failing_callback(graph, private, topic):
    """raw=True gives the CDR bytes; a callback that raises is counted and the input goes on."""
    client, node = graph
    got: list[bytes] = []

    def callback(raw: bytes) -> None:
        if len(got) % 2:
            got.append(b'')
            raise RuntimeError('odd message')
        got.append(raw)

    inputs = InputThread(node, Int64, topic, callback, RELIABLE, raw=True,
                         private_wait_set=private)
    try:
        _publish(client, range(20), topic, [inputs.subscription])
        client.wait_for(lambda: len(got) >= 20, 60.0, '20 numbers')
        assert inputs.errors == 10
        assert got[::2] == [serialize_message(Int64(data=v)) for v in range(0, 20, 2)]
    finally:
        inputs.destroy()


@WAYS
def test_context_shutdown_ends_the_thread(private, topic):
    """Shutting the context down without destroy() ends the thread quietly."""
    context = Context()
    rclpy.init(context=context, domain_id=domain(DOMAIN_ID))
    node = rclpy.create_node('plag_test_input_shutdown', context=context)
    inputs = InputThread(node, Int64, topic, lambda msg: None, RELIABLE,
                         private_wait_set=private)
    context.shutdown()
    wait_until(lambda: not inputs.alive, 60.0, 'the input thread to end')


@WAYS
def test_shutdown_under_a_publishing_callback_is_quiet(private, topic):
    """Ctrl-C shuts the context down while the callback publishes: not an error.

    rclpy's SIGINT handler shuts the context down from its own thread; the callback's
    publish then raises. That is the shutdown, not a failing callback: nothing is counted
    or logged (the log would fail too: rosout's publisher is gone) and the thread ends.
    """
    client = RosClient(DOMAIN_ID, 'plag_test_input_race_pub')
    context = Context()
    rclpy.init(context=context, domain_id=domain(DOMAIN_ID))
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

    inputs = InputThread(node, Int64, topic, callback, RELIABLE, private_wait_set=private)
    try:
        _publish(client, [1], topic, [inputs.subscription])
        client.wait_for(entered.is_set, 60.0, 'the callback to run')
        context.shutdown()
        shut.set()
        wait_until(lambda: not inputs.alive, 60.0, 'the input thread to end')
        assert raised, 'the publish after shutdown did not fail: the test shows nothing'
        assert inputs.errors == 0
    finally:
        shut.set()
        client.close()


def test_private_wait_set_falls_back_to_the_public_executor_where_rclpy_differs(
        graph, monkeypatch, capfd, topic):
    """Asked for the private wait set on an rclpy whose extension is not the checked one,
    the input thread says why and serves the subscription the public way."""
    client, node = graph
    monkeypatch.setattr(input_thread, 'private_wait_set_problem',
                        lambda: '_rclpy.WaitSet.wait differs')
    got: list[int] = []
    inputs = InputThread(node, Int64, topic, lambda msg: got.append(msg.data), RELIABLE,
                         private_wait_set=True)
    try:
        assert not inputs.private_wait_set
        _publish(client, range(20), topic, [inputs.subscription])
        client.wait_for(lambda: len(got) >= 20, 60.0, '20 numbers')
        assert got == list(range(20))
        log = capfd.readouterr().err
        assert 'the private wait set is not used' in log
        assert '_rclpy.WaitSet.wait differs' in log
    finally:
        inputs.destroy()


def test_shipped_config_serves_joint_states_the_public_way():
    """config/crane_x7.yaml turns low_latency on; what it turns on is the public input
    thread: joint_states is subscribed by the helper node of the public executor, not by a
    private wait set on the dynamics node itself."""
    from rclpy.parameter import Parameter

    from plag_ros.ros.nodes.dynamics_node import DynamicsNode

    shipped = node_parameters(CONFIG, 'plag_dynamics')
    assert shipped['low_latency'] is True     # else this test shows nothing
    shipped['robot_description_source'] = 'file'   # no robot_description publisher here
    switch_interval = sys.getswitchinterval()
    context = Context()
    rclpy.init(context=context, domain_id=domain(DOMAIN_ID))
    node = None
    try:
        node = DynamicsNode(context=context, namespace='/shipped', parameter_overrides=[
            Parameter(name, value=value) for name, value in shipped.items()])
        wait_until(lambda: _subscriber_nodes(node, '/shipped/joint_states'), 60.0,
                   'the joint_states subscription')
        assert _subscriber_nodes(node, '/shipped/joint_states') == \
            [f'{node.get_name()}_input']
    finally:
        if node is not None:
            node.destroy_node()
        context.try_shutdown()
        sys.setswitchinterval(switch_interval)   # low_latency's process-wide tuning
        gc.unfreeze()
