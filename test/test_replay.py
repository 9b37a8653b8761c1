"""``plag-ros replay`` and ``plag-ros record`` over DDS (logical domain 23).

Replay: a bag written here is replayed by the real command in a subprocess; this test's own
node receives every message (raw bytes) in order, and ``/clock`` carries the bag time. The
schedule (each message at its recorded offset, scaled by ``--rate``; ``/clock`` at 40 Hz
of bag time) is checked on a clock that moves only when the replay waits
(``test_replay_schedule_on_a_fake_clock``): over DDS, when messages reach this test's
executor measures the machine as much as the replay, so there it is printed, not judged.

Round trip: ``plag-ros replay`` feeds the real dynamics node, ``plag-ros record`` records
``/joint_states`` and the node's outputs, and ``plag-ros analyze --causal`` of the recorded
bag reproduces what the node published for the same messages.
"""
from __future__ import annotations

import math
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from ros_helpers import REPO, RosClient, ros_env, start_node, wait_until
from rosbags.rosbag2 import Reader
from rosgraph_msgs.msg import Clock
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String

from plag_ros.apps.bag_analysis import analyze_bag
from plag_ros.core.decomposition.analysis import AnalysisOptions
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.io.bag import qos_profile, read_joint_states, typestore_for
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import cdr_encode
from plag_ros.ros import messages as msgs
from plag_ros.ros.output_bag import write_joint_state_bag

DOMAIN_ID = 23
T0_NS = 1_700_000_000_000_000_000
NODE = '/plag_dynamics'
ARRAYS = ('partial', 'acceleration', 'velocity', 'gravity', 'friction')


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def client():
    with RosClient(DOMAIN_ID, 'plag_replay_test') as c:
        yield c


def _motion(model, count, period_ns, seed=0):
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    names = [names[i] for i in np.random.default_rng(seed).permutation(len(names))]
    t = T0_NS + np.arange(count, dtype=np.int64) * period_ns
    s = (t - T0_NS)[:, None] * 1e-9
    k = model.joint_index(names)       # around mid-range: a motion within the joint limits
    middle = 0.5 * (model.joint_lower[k] + model.joint_upper[k])
    q = middle + 0.4 * np.sin(2 * np.pi * np.linspace(0.3, 1.2, len(names)) * s
                              + np.arange(len(names)))
    return names, t, q


def _cli(*args):
    return subprocess.Popen([sys.executable, '-m', 'plag_ros.apps.cli', *map(str, args)],
                            env=ros_env(DOMAIN_ID), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _raw_collector(client, topic, msg_type, qos=None):
    received = []
    qos = qos or QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    client.subscribe(msg_type, topic, lambda data: received.append((time.perf_counter(), data)),
                     qos, raw=True)
    return received


def test_replay_delivers_every_message_in_order_on_time(tmp_path, client, model):
    names, t, q = _motion(model, 200, 10_000_000)
    # Irregular gaps (one 150 ms pause) so the timing check is not just a fixed rate.
    t[120:] += 150_000_000
    path = tmp_path / 'bag'
    write_joint_state_bag(path, t, names, q, storage='sqlite3', distro='humble')
    with Reader(path) as reader:
        sent = [bytes(raw) for _, _, raw in reader.messages()]
    received = _raw_collector(client, '/joint_states', JointState)
    clocks = []
    client.subscribe(Clock, '/clock', lambda m: clocks.append(
        m.clock.sec * 1_000_000_000 + m.clock.nanosec), 1000)
    # --delay: the replay waits for its writer to match this test's reader; the reader's
    # side of the match (without which the first messages are lost to it) gets 3 s more.
    proc = _cli('replay', path, '--clock', '--wait-subscribers', '1', '--delay', '3.0')
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    try:
        client.wait_for(lambda: len(received) >= len(sent), 60.0, 'every replayed message')
    except AssertionError as err:
        index = [sent.index(data) for _, data in received]
        raise AssertionError(f'{err}: got {len(received)} of {len(sent)}: {index}') from err
    assert [data for _, data in received] == sent
    arrival = np.array([r for r, _ in received])
    late = (arrival - arrival[0]) - (t - t[0]) * 1e-9
    late -= np.median(late)
    print(f'\nlateness at this subscriber: p90 {np.percentile(np.abs(late), 90) * 1e3:.1f} ms, '
          f'max {np.max(np.abs(late)) * 1e3:.1f} ms, drift '
          f'{(np.median(late[-20:]) - np.median(late[:20])) * 1e3:.1f} ms')
    client.wait_for(lambda: clocks and clocks[-1] == t[-1], 60.0, 'final /clock')
    assert np.all(np.diff(clocks) >= 0)
    # (/clock is kept last-only by its publisher, as ros2 bag play's: a reader that is
    # late skips ticks, so the 40 Hz is the fake clock's to check)
    assert clocks[0] >= t[0] and len(clocks) >= 2


class _FakeTime:
    """Stands in for ``time`` in plag_ros.apps.replay: a clock that moves only when waited on."""

    def __init__(self, start_ns: int) -> None:
        self.now_ns = start_ns

    def perf_counter_ns(self) -> int:
        return self.now_ns


class _Waiter:
    """Stands in for the stop event: ``wait(s)`` advances the fake clock by ``s``."""

    def __init__(self, clock: _FakeTime) -> None:
        self.clock = clock

    def wait(self, seconds: float) -> bool:
        self.clock.now_ns += max(1, math.ceil(seconds * 1e9))
        return False

    def is_set(self) -> bool:
        return False


class _Recorder:
    def __init__(self, clock: _FakeTime, sink: list) -> None:
        self.clock, self.sink = clock, sink

    def publish(self, data) -> None:
        self.sink.append((self.clock.now_ns, data))


@pytest.mark.parametrize('rate', [1.0, 2.0, 0.5])
def test_replay_schedule_on_a_fake_clock(monkeypatch, rate):
    """The schedule itself, free of machine load: on a clock that advances only when the
    replay waits, message m is published at start + (t_m - t_0) / rate (to the 1 ns of
    rounding a wait in seconds), in bag order; /clock carries the bag time at the same
    scaled instants, never goes back, is never more than 25 ms of bag time (40 Hz) apart,
    and reaches each message's time before the message goes out."""
    from plag_ros.apps import replay as replay_module
    from plag_ros.apps.replay import ReplaySchedule, _play_once

    t = T0_NS + np.cumsum(np.r_[0, np.full(30, 10_000_000)])
    t[20:] += 150_000_000            # a pause of 150 ms: /clock must keep ticking through it
    t[25] = t[24]                    # two messages at the same time
    data = [f'm{k}'.encode() for k in range(len(t))]
    schedule = ReplaySchedule(topics=(('/a', 'std_msgs/msg/String', True, False),
                                      ('/b', 'std_msgs/msg/String', True, False)),
                              t_ns=[int(x) for x in t], topic=[k % 2 for k in range(len(t))],
                              data=data)
    start = 1_000_000_007
    clock = _FakeTime(start)
    monkeypatch.setattr(replay_module, 'time', clock)
    sent, clocks = [], []
    publishers = [_Recorder(clock, sent), _Recorder(clock, sent)]
    count = _play_once(schedule, publishers, _Recorder(clock, clocks), rate, _Waiter(clock))
    assert count == len(t)
    assert [d for _, d in sent] == data
    due = start + (t - t[0]) / rate
    np.testing.assert_allclose([w for w, _ in sent], due, rtol=0, atol=1.0)
    bag_time = np.array([c.clock.sec * 10**9 + c.clock.nanosec for _, c in clocks])
    at = np.array([w for w, _ in clocks])
    np.testing.assert_allclose(at, start + (bag_time - t[0]) / rate, rtol=0, atol=1.0)
    assert np.all(np.diff(bag_time) >= 0) and bag_time[0] == t[0] and bag_time[-1] == t[-1]
    assert np.max(np.diff(bag_time)) <= 25_000_000
    for (wall, _), t_m in zip(sent, t, strict=True):   # the latest /clock is the message's
        assert bag_time[at <= wall].max() == t_m


def test_replay_rate_and_loop(tmp_path, client, model):
    names, t, q = _motion(model, 20, 20_000_000)
    path = tmp_path / 'bag'
    write_joint_state_bag(path, t, names, q, topic='/arm/joint_states')
    received = _raw_collector(client, '/arm/joint_states', JointState)
    with Reader(path) as reader:
        sent = [bytes(raw) for _, _, raw in reader.messages()]
    proc = _cli('replay', path, '--rate', '4', '--loop', '--wait-subscribers', '1')
    loops = 5
    # The first loop may reach this reader only in part (its side of the match can come
    # after the replay's): the loops counted start at the first whole one.
    try:
        client.wait_for(lambda: len(received) >= (loops + 1) * len(t), 60.0, f'{loops} loops')
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    first = next(k for k, (_, data) in enumerate(received) if data == sent[0])
    whole = received[first:first + loops * len(t)]
    assert [data for _, data in whole] == sent * loops               # the bag, again and again
    arrival = np.array([r for r, _ in whole]).reshape(loops, len(t))
    # Four times faster: 19 steps of 20 ms in 95 ms (380 ms at rate 1, 47 ms at rate 8); the
    # schedule itself is the fake clock's to check. Here, that --rate reached the replay:
    # a loop at this subscriber lasts the scheduled 95 ms plus how late its last message
    # came, less how late its first one did. A stall of this machine stretches or shortens
    # one loop; the fastest of five is then still well under rate 1's 380 ms, the slowest
    # still over rate 8's 47 ms.
    spans = arrival[:, -1] - arrival[:, 0]
    print(f'\nloop spans at this subscriber [ms]: {np.round(spans * 1e3, 1).tolist()}')
    assert spans.min() < 0.19 and spans.max() > 0.06, spans


def test_replay_into_a_namespace_keeps_clock_in_the_root(tmp_path, client, model):
    """--namespace arm1: the joint states go to /arm1/joint_states, /clock stays the
    root's (rclpy's time source listens on the absolute /clock)."""
    names, t, q = _motion(model, 10, 20_000_000)
    path = tmp_path / 'bag'
    write_joint_state_bag(path, t, names, q)
    received = _raw_collector(client, '/arm1/joint_states', JointState)
    root = _raw_collector(client, '/joint_states', JointState)
    clocks = _raw_collector(client, '/clock', Clock, QoSProfile(depth=100))
    proc = _cli('replay', path, '--namespace', 'arm1', '--clock', '--wait-subscribers', '1')
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    client.wait_for(lambda: len(received) == len(t) and clocks, 30.0, 'the namespaced replay')
    assert not root
    proc = _cli('replay', path, '--namespace', 'arm-1')
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and 'is not a ROS namespace' in out, out


def test_replay_and_record_refuse_bad_paths(tmp_path):
    (tmp_path / 'notes.txt').write_text('x')
    proc = _cli('replay', tmp_path / 'notes.txt')
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and 'not a rosbag2 bag' in out
    (tmp_path / 'taken').mkdir()
    proc = _cli('record', tmp_path / 'taken', '--duration', '1')
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and 'exists; use --force' in out


@pytest.mark.long
def test_replay_node_record_analyze_round_trip(tmp_path, client, model):
    """Bag -> replay -> dynamics node -> record -> analyze --causal == the node's outputs."""
    names, t, q = _motion(model, 300, 5_000_000, seed=4)
    path = tmp_path / 'in'
    # Joint states plus an extra topic; replay publishes only the joint states.
    with BagWriter(path, typestore=typestore_for('jazzy')) as writer:
        states = writer.add_topic('/joint_states', 'sensor_msgs/msg/JointState',
                                  qos=qos_profile(depth=50))
        chatter = writer.add_topic('/chatter', 'std_msgs/msg/String')
        for k in range(len(t)):
            writer.write(states, t[k], cdr_encode(msgs.joint_state(names, q[k],
                                                                   t_ns=int(t[k]))))
            if k % 50 == 0:
                writer.write(chatter, t[k], cdr_encode(String(data=f'k={k}')))
    chatter_seen = _raw_collector(client, '/chatter', String)
    # This test watches the node's outputs too, to know when the last one has been sent.
    seen = {name: _raw_collector(client, f'{NODE}/{name}', Float64MultiArray)
            for name in ARRAYS}
    seen['joint_states'] = _raw_collector(client, f'{NODE}/joint_states', JointState)
    node = start_node('dynamics_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                      params_file=REPO / 'config' / 'crane_x7.yaml',
                      params={'robot_description_source': 'file', 'publish_bodies': False,
                              'input_depth': 1000, 'output_depth': 1000})
    recorded = tmp_path / 'recorded'
    recorder = _cli('record', recorded, '--storage', 'sqlite3')
    try:
        client.wait_for(lambda: client.node.count_publishers(f'{NODE}/partial') > 0
                        and client.node.count_subscribers('/joint_states') > 0, 60.0,
                        'dynamics node up')
        client.wait_for(lambda: all(client.node.count_subscribers(f'{NODE}/{name}') >= 2
                                    for name in ARRAYS + ('joint_states',)), 60.0,
                        'recorder (and this test) subscribed to the node outputs')
        # Both subscribers of /joint_states matched, then time for the node's publishers to
        # match the recorder's subscriptions (discovery is slower on a loaded machine).
        replay = _cli('replay', path, '--wait-subscribers', '2', '--delay', '3.0')
        out, _ = replay.communicate(timeout=120)
        assert replay.returncode == 0, out
        # Every input gives one output after the five-point warm-up. Wait until this test
        # has the output of the last input on every topic; the recorder subscribes to the
        # same reliable publishers, so it has been sent everything the bag must hold.
        m = len(t) - 4

        def last_output_seen() -> bool:
            states = seen['joint_states']
            return (all(len(seen[name]) >= m for name in ARRAYS) and len(states) >= m
                    and msgs.stamp_to_ns(deserialize_message(
                        states[-1][1], JointState).header.stamp) == t[-1])

        try:
            wait_until(last_output_seen, 60.0, f'{m} outputs of the node on every topic')
        except AssertionError as err:
            # Which messages went missing says where: the first ones (a reader matched
            # late), the last ones (a writer gone before its acknowledgements), the node.
            stamps = [msgs.stamp_to_ns(deserialize_message(data, JointState).header.stamp)
                      for _, data in seen['joint_states']]
            index = [int(np.searchsorted(t, s)) for s in stamps]
            missing = sorted(set(range(4, len(t))) - set(index))
            counts = {name: len(v) for name, v in seen.items()}
            raise AssertionError(f'{err}: seen {counts}; input samples without an output '
                                 f'state: {missing[:20]} ({len(missing)}); replay said: '
                                 f'{out!r}; node log: {node.log_path.read_text()[-3000:]}'
                                 ) from err
    finally:
        recorder.send_signal(signal.SIGINT)
        rec_out, _ = recorder.communicate(timeout=30)
        node_code = node.stop()
    assert recorder.returncode == 0, rec_out
    assert node_code == 0, node.log_path.read_text()
    assert not chatter_seen
    # The recorded bag: every replayed joint state, in order.
    js = read_joint_states(recorded, model)
    np.testing.assert_array_equal(js.t_ns, t)
    with Reader(recorded) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        got = {name: [] for name in ARRAYS + ('joint_states',)}
        for conn, _, raw in reader.messages():
            key = conn.topic.removeprefix(f'{NODE}/')
            if conn.topic.startswith(NODE) and key in got:
                got[key].append(bytes(raw))
    assert topics['/joint_states'] == 'sensor_msgs/msg/JointState'
    assert topics[f'{NODE}/partial'] == 'std_msgs/msg/Float64MultiArray'
    assert topics[f'{NODE}/names'] == 'std_msgs/msg/String'
    # analyze --causal of the recording == what the node published.
    analysis, _, _ = analyze_bag(recorded, tmp_path / 'out', model=model,
                              options=AnalysisOptions(causal=True, progress=False,
                                                      products=frozenset({'summary'})))
    assert len(analysis.t_ns) == m
    for name in ARRAYS:
        assert len(got[name]) == m, name
        for k in range(m):
            values, _ = msgs.multi_array_to_numpy(deserialize_message(got[name][k],
                                                                      Float64MultiArray))
            np.testing.assert_allclose(values, getattr(analysis, name)[k], rtol=0,
                                       atol=1e-9, err_msg=f'{name}[{k}]')
    for k in range(m):
        state = deserialize_message(got['joint_states'][k], JointState)
        assert msgs.stamp_to_ns(state.header.stamp) == analysis.t_ns[k]
        np.testing.assert_allclose(np.array(state.effort), analysis.torque[k], rtol=0,
                                   atol=1e-9)
