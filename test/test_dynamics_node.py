"""The plag_dynamics node over real DDS: outputs equal the library run on the same input.

One dynamics node runs as a subprocess for the module (logical domain 12), its model taken
from a ``robot_description`` the test publishes latched. The test publishes
``joint_states`` at 200 Hz in a shuffled (non-URDF) joint order without the mimic finger,
like the CRANE-X7 driver, and reproduces every output in-process with the same reader,
estimator configuration and engine: they must agree to 1e-9.
"""
from __future__ import annotations

import math
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from diagnostic_msgs.msg import DiagnosticArray
from friction_rule import expected_friction
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from ros_helpers import (
    LATCHED,
    REPO,
    RosClient,
    domain,
    publish_at_rate,
    start_node,
    wait_until,
)
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator
from plag_ros.core.estimation.friction import rest_band
from plag_ros.ros import messages as msgs

DOMAIN_ID = 12
IN_PROCESS_DOMAIN_ID = DOMAIN_ID + 50
"""Logical domain of the nodes built in the test's own process, which need no peers:
their participants are made and torn down away from the module graph's traffic
(Fast DDS's open deadlock reports are of participants deleted beside busy ones in
one process)."""
NODE = '/plag_dynamics'
RATE_HZ = 200.0
PERIOD_NS = 5_000_000
ARRAYS = ('partial', 'acceleration', 'velocity', 'gravity', 'friction')
TOL = 1e-9
COMPONENTS = ('acceleration', 'velocity', 'gravity', 'friction')   # ~/component/<name>


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module', params=[True, False], ids=['low_latency', 'executor'])
def graph(model, tmp_path_factory, request):
    """(client, node process, collected outputs by topic) shared by the module's tests.

    Every test runs twice: joint_states served by the input thread (``low_latency: true``)
    and by the executor that spins the node (``low_latency: false``).
    """
    client = RosClient(DOMAIN_ID)
    description = client.publisher(String, 'robot_description', LATCHED)
    description.publish(String(data=model.urdf_xml))
    out = {name: client.collect(Float64MultiArray, f'{NODE}/{name}') for name in ARRAYS}
    out['joint_states'] = client.collect(JointState, f'{NODE}/joint_states')
    out['names'] = client.collect(String, f'{NODE}/names', LATCHED)
    out['markers'] = client.collect(MarkerArray, f'{NODE}/markers')
    out['image'] = client.collect(Image, f'{NODE}/partial_image')
    out['diagnostics'] = client.collect(DiagnosticArray, '/diagnostics')
    out['bodies'] = {body: client.collect(JointState, f'{NODE}/body/{body}')
                     for body in model.body_names}
    out['components'] = {name: client.collect(JointState, f'{NODE}/component/{name}')
                         for name in COMPONENTS}
    node = start_node('dynamics_node', domain_id=DOMAIN_ID,
                      log_dir=tmp_path_factory.mktemp('dynamics_node'),
                      params_file=REPO / 'config' / 'crane_x7.yaml',
                      params={'robot_description_source': 'topic',
                              'robot_description_timeout': 0.0,
                              'visualization_rate_hz': 40.0, 'diagnostics_period': 0.25,
                              # Deep queues: a busy CI machine may slow the node or this
                              # client below 200 Hz for a moment; nothing may be lost.
                              'input_depth': 1000, 'output_depth': 1000,
                              'low_latency': request.param})
    joint_states = client.publisher(JointState, 'joint_states')
    try:
        client.wait_for(lambda: out['names'], 60.0, f'{NODE}/names (node log: see below)')
        client.wait_for_subscribers(joint_states)
        # The node has published and subscribed; let discovery of every output settle.
        client.wait_for(lambda: all(client.node.count_publishers(f'{NODE}/{name}') for name
                                    in ARRAYS), 30.0, 'output publishers')
        yield client, node, joint_states, out
    except AssertionError as err:
        raise AssertionError(f'{err}\n--- node log ---\n{node.output()}') from err
    finally:
        code = node.stop()
        client.close()
    assert code == 0, f'node exited with {code}\n{node.output()}'


def _driver_names(model: RobotModel) -> list[str]:
    """The 8 actuated joints in a fixed shuffled order that is not the URDF's."""
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    order = np.random.default_rng(7).permutation(len(names))
    assert list(order) != sorted(order)
    return [names[i] for i in order]


def _trajectory(model: RobotModel, names: list[str], t0_ns: int, count: int) -> list:
    """``count`` JointState messages of a smooth motion, stamped every 5 ms from t0."""
    rng = np.random.default_rng(11)
    amp, freq, phase = (rng.uniform(0.1, 0.6, len(names)), rng.uniform(0.3, 1.5, len(names)),
                        rng.uniform(0, 2 * np.pi, len(names)))
    out = []
    k_model = model.joint_index(names)   # around mid-range: within the joint limits
    middle = 0.5 * (model.joint_lower[k_model] + model.joint_upper[k_model])
    for k in range(count):
        t_ns = t0_ns + k * PERIOD_NS
        q = middle + amp * np.sin(2 * np.pi * freq * (t_ns - t0_ns) * 1e-9 + phase)
        out.append(msgs.joint_state(names, q, t_ns=t_ns))
    return out


def _reproduce(model: RobotModel, sent: list[JointState]) -> list[tuple[int, dict]]:
    """The library's answer for the same messages: (stamp, arrays) per accepted sample."""
    reader = msgs.JointStateReader(model)
    config = EstimatorConfig(cutoff_hz=10.0, order=3, rate_hz=200.0, gap_periods=5.0,
                             velocity_source='position', min_spacing_periods=0.2)
    estimator = JointStateEstimator(model.n_joints, config)   # config/crane_x7.yaml
    engine = PartialLagrangian(model, dtype=torch.float64)
    band = rest_band(model, config)
    expected = []
    for msg in sent:
        try:
            t_ns, q, _, _ = reader.read(msg)
        except msgs.JointStateError:
            continue
        sample = estimator.update(t_ns, q)
        if sample is None:
            continue
        out = engine.decompose(sample.q, sample.qd, sample.qdd).numpy()
        out.update(q=sample.q, qd=sample.qd)
        out['friction'] = expected_friction(model, sample.qd, out['torque'], band,
                                            _motor_torque(model, msg))
        expected.append((t_ns, out))
    return expected


def _motor_torque(model: RobotModel, msg: JointState) -> np.ndarray | None:
    """(n,) motor torque of a message's effort in model order (the CRANE-X7 driver's effort
    is current * current_to_effort), NaN for the gripper (a mimic pair: neither finger's
    effort is its own); None without effort."""
    if not len(msg.effort):
        return None
    torque = np.full(model.n_joints, np.nan)
    for name, effort in zip(msg.name, msg.effort, strict=True):
        if 'gripper' not in name:
            torque[model.joint_names.index(name)] = effort * motors.effort_to_torque([name])[0]
    return torque


def _diagnostic_values(entry) -> dict[str, str]:
    for status in entry[1].status:
        if status.name.startswith(NODE):
            return {kv.key: kv.value for kv in status.values}
    return {}


def _latest_counts(out) -> dict[str, str]:
    for entry in reversed(out['diagnostics']):
        values = _diagnostic_values(entry)
        if values:
            return values
    return {}


def _clear(out) -> None:
    for key, value in out.items():
        if key in ('bodies', 'components'):
            for lst in value.values():
                lst.clear()
        elif key != 'names':
            value.clear()


def _has_last(out, name: str, last: tuple[int, dict]) -> bool:
    """Whether topic ``name`` has received the output of the last expected sample."""
    if not out[name]:
        return False
    t_ns, want = last
    msg = out[name][-1][1]
    if name == 'joint_states':
        return msgs.stamp_to_ns(msg.header.stamp) == t_ns
    values, _ = msgs.multi_array_to_numpy(msg)
    return values.shape == want[name].shape and np.allclose(values, want[name], rtol=0,
                                                            atol=TOL)


def _stream(graph, model, sent: list[JointState], expected: list[tuple[int, dict]]):
    """Publish ``sent`` at 200 Hz; wait until every topic has the output of the last sample.

    The last message sent must be the one that gives the last expected output. Each topic's
    publisher is reliable and in order, so once that output has arrived on a topic, every
    earlier one has too, and anything extra the node published for these inputs is there
    to be counted: no sleep needed to make sure "nothing more arrives".
    """
    client, node, joint_states, out = graph
    assert msgs.stamp_to_ns(sent[-1].header.stamp) == expected[-1][0]
    publish_at_rate(joint_states, sent, RATE_HZ)
    try:
        wait_until(lambda: all(_has_last(out, name, expected[-1])
                               for name in ('joint_states', *ARRAYS))
                   and all(b for b in out['bodies'].values())
                   and all(len(c) == len(expected) for c in out['components'].values()),
                   30.0, "the last sample's output on every topic")
    except AssertionError as err:
        counts = {k: len(v) for k, v in out.items() if k not in ('bodies', 'components')}
        raise AssertionError(f'{err}: got {counts}\n{node.output()[-3000:]}') from err


def _check_outputs(model, out, expected) -> None:
    """Every output message equals the library's arrays; nothing NaN, nothing partial."""
    n, B = model.n_joints, model.n_bodies
    assert len(out['joint_states']) == len(expected)
    for name in ARRAYS:
        assert len(out[name]) == len(expected), name
    shapes = {'partial': (n, B), 'acceleration': (n, B, n), 'velocity': (n, B, n),
              'gravity': (n, B), 'friction': (n,)}
    for index, (t_ns, want) in enumerate(expected):
        state = out['joint_states'][index][1]
        assert msgs.stamp_to_ns(state.header.stamp) == t_ns
        assert state.header.frame_id == model.root_link
        assert list(state.name) == list(model.joint_names)
        for field, key in (('position', 'q'), ('velocity', 'qd'), ('effort', 'torque')):
            got = np.array(getattr(state, field))
            assert np.isfinite(got).all()
            np.testing.assert_allclose(got, want[key], rtol=0, atol=TOL, err_msg=field)
        for name in ARRAYS:
            values, labels = msgs.multi_array_to_numpy(out[name][index][1])
            assert values.shape == shapes[name] and labels == msgs.ARRAY_LABELS[name]
            assert np.isfinite(values).all()
            np.testing.assert_allclose(values, want[name], rtol=0, atol=TOL, err_msg=name)
    # Per-component states, every sample, read by joint name as a plotting tool does: the
    # acceleration, velocity and gravity parts add up to the joint torque of ~/joint_states
    # of the same stamp, joint by joint; each part and the friction are the library's.
    torque_by_stamp = {msgs.stamp_to_ns(m.header.stamp): dict(zip(m.name, m.effort))
                       for _, m in out['joint_states']}
    for name in COMPONENTS:
        assert len(out['components'][name]) == len(expected), name
    for index, (t_ns, want) in enumerate(expected):
        parts = {}
        for name in COMPONENTS:
            msg = out['components'][name][index][1]
            assert msgs.stamp_to_ns(msg.header.stamp) == t_ns, name
            assert msg.header.frame_id == model.root_link and not msg.position, name
            parts[name] = dict(zip(msg.name, msg.effort, strict=True))
            assert sorted(parts[name]) == sorted(model.joint_names), name
        library = {'acceleration': want['acceleration'].sum(axis=(1, 2)),
                   'velocity': want['velocity'].sum(axis=(1, 2)),
                   'gravity': want['gravity'].sum(axis=1), 'friction': want['friction']}
        for k, joint in enumerate(model.joint_names):
            rigid = sum(parts[name][joint] for name in ('acceleration', 'velocity', 'gravity'))
            assert abs(rigid - torque_by_stamp[t_ns][joint]) <= TOL, (joint, t_ns)
            for name in COMPONENTS:
                assert abs(parts[name][joint] - library[name][k]) <= TOL, (name, joint)
    # Per-body states come at the visualization rate (rviz2), each equal to its column of
    # the partial table of the sample with the same stamp.
    by_stamp = dict(expected)
    for i, body in enumerate(model.body_names):
        states = out['bodies'][body]
        assert 0 < len(states) < len(expected), body
        for _, msg in states:
            want = by_stamp[msgs.stamp_to_ns(msg.header.stamp)]
            assert list(msg.name) == list(model.joint_names)
            np.testing.assert_allclose(np.array(msg.effort), want['partial'][:, i], rtol=0,
                                       atol=TOL, err_msg=body)


def test_names_are_latched_and_complete(graph, model):
    out = graph[3]
    payload = msgs.parse_names(out['names'][0][1])
    assert payload['joints'] == list(model.joint_names)
    assert payload['bodies'] == list(model.body_names)
    assert payload['sources'] == list(model.joint_names)
    assert set(payload['components']) == {'torque', 'acceleration', 'velocity', 'gravity',
                                          'friction'}
    # A late subscriber still gets the names (transient local).
    client = graph[0]
    late = client.collect(String, f'{NODE}/names', LATCHED)
    client.wait_for(lambda: late, 10.0, 'latched names for a late subscriber')


def test_outputs_equal_library_decomposition(graph, model):
    client, node, _, out = graph
    _clear(out)
    names = _driver_names(model)
    sent = _trajectory(model, names, t0_ns=1_000_000_000_000, count=200)
    expected = _reproduce(model, sent)
    assert len(expected) == 200 - 4   # five-point stencil: the first output at sample 5
    _stream(graph, model, sent, expected)
    _check_outputs(model, out, expected)
    # rviz outputs at the visualization rate: markers and the heat map.
    client.wait_for(lambda: out['markers'] and out['image'], 60.0, 'markers and image')
    array = out['markers'][-1][1]
    assert {m.ns for m in array.markers} == set(msgs.COMPONENTS)
    assert len(array.markers) == len(msgs.COMPONENTS) * model.n_joints
    image = out['image'][-1][1]
    assert (image.height, image.width) == (16 * model.n_joints, 16 * model.n_bodies)
    assert len(out['markers']) <= 1 + 40.0 * 200 / RATE_HZ  # throttled, not per sample
    # The node reports its model source and rates in /diagnostics.
    client.wait_for(lambda: _latest_counts(out).get('model_source') == 'topic', 60.0,
                    'diagnostics with model_source topic')


def test_friction_at_rest_is_the_stick_reaction_not_the_sign_of_noise(graph, model):
    """A still arm whose encoders flicker by one count: ~/friction is the stick reaction
    from the effort (clipped to +-f), or 0 where the message has no effort for the joint;
    never +-f. One joint swings fast: its friction stays the model's."""
    _, _, _, out = graph
    _clear(out)
    names = _driver_names(model)
    k_model = model.joint_index(names)
    middle = 0.5 * (model.joint_lower[k_model] + model.joint_upper[k_model])
    rng = np.random.default_rng(5)
    count = 120
    flicker = rng.integers(0, 2, (count, len(names))) * (2 * np.pi / 4096)
    # The band bounds the estimate of flicker that has lasted longer than the filter's
    # memory: the first samples seed the estimator's state, so they hold still.
    flicker[:30] = 0.0
    moving = names.index('crane_x7_upper_arm_revolute_part_rotate_joint')
    # effort: driver units; the reactions it implies run past +-f on most joints, not on
    # the pan joint (its axis is vertical: no gravity torque)
    effort = rng.uniform(-3.0, 3.0, len(names))
    effort[names.index('crane_x7_shoulder_fixed_part_pan_joint')] = 0.1
    sent = []
    for k in range(count):
        t_ns = 1_500_000_000_000 + k * PERIOD_NS   # between the neighbouring tests' stamps
        q = middle + flicker[k]
        q[moving] = middle[moving] + 0.5 * np.sin(2 * np.pi * 1.5 * k * PERIOD_NS * 1e-9)
        # the effort only on the second half: the first half's rest is unresolved
        sent.append(msgs.joint_state(names, q, effort=effort if k >= count // 2 else None,
                                     t_ns=t_ns))
    expected = _reproduce(model, sent)
    _stream(graph, model, sent, expected)
    _check_outputs(model, out, expected)
    friction = np.array([msgs.multi_array_to_numpy(m)[0] for _, m in out['friction']])
    qd = np.array([w['qd'] for _, w in expected])
    k_moving = model.joint_names.index(names[moving])
    fast = np.abs(qd[:, k_moving]) > 0.1
    assert fast.sum() > 20
    np.testing.assert_allclose(np.abs(friction[fast, k_moving]), model.friction[k_moving],
                               rtol=0, atol=0.01)
    still = [k for k in range(model.n_joints) if k != k_moving]
    assert (np.abs(friction[:, still]) <= model.friction[still] + 1e-12).all()
    first = len(expected) - count // 2    # outputs of the messages without effort
    assert (friction[:first, still] == 0.0).all()
    clipped = np.isclose(np.abs(friction[first:, still]), model.friction[still], rtol=0,
                         atol=1e-12)
    assert clipped.any() and not clipped.all()
    graph[0].wait_for(lambda: int(_latest_counts(out).get('friction_stick', 0)) > 0, 60.0,
                      'diagnostics counting stick reactions')
    assert int(_latest_counts(out)['friction_unresolved']) > 0


def test_bad_input_is_counted_and_never_published(graph, model):
    client, node, _, out = graph
    client.wait_for(lambda: _latest_counts(out), 60.0, 'a diagnostics message')
    before = {k: int(v) for k, v in _latest_counts(out).items() if k.startswith('rejected')}
    _clear(out)
    names = _driver_names(model)
    good = _trajectory(model, names, t0_ns=2_000_000_000_000, count=120)
    sent = list(good)

    def bad_like(k: int, **change) -> JointState:
        t_ns, msg_names, q, _, _ = msgs.joint_state_arrays(good[k])
        msg_names, q = change.get('names', msg_names), change.get('q', q)
        msg = msgs.joint_state(msg_names, q if len(q) == len(msg_names) else np.zeros(
            len(msg_names)), t_ns=change.get('t_ns', t_ns + 1_000_000))
        if len(q) != len(msg_names):
            msg.position = msgs.float64_array(q)
        return msg

    nan_q = np.array(good[30].position)
    nan_q[2] = math.nan
    insertions = {   # index in the good stream -> bad message inserted after it
        30: bad_like(30, q=nan_q),
        40: bad_like(40, names=names[:-1] + ['crane_x7_elbow_of_doom']),
        50: bad_like(50, names=names[:-1], q=np.array(good[50].position)[:-1]),
        60: bad_like(60, q=np.array(good[60].position)[:-1]),   # 8 names, 7 positions
        70: bad_like(70, t_ns=msgs.stamp_to_ns(good[70].header.stamp) - 2 * PERIOD_NS),
        80: bad_like(80, t_ns=msgs.stamp_to_ns(good[80].header.stamp)),   # same stamp
    }
    for index in sorted(insertions, reverse=True):
        sent.insert(index + 1, insertions[index])
    expected = _reproduce(model, sent)
    assert len(expected) == len(good) - 4     # every bad message dropped, none published
    _stream(graph, model, sent, expected)
    _check_outputs(model, out, expected)

    want = {'rejected.nonfinite': 1, 'rejected.unknown_name': 1, 'rejected.missing_name': 1,
            'rejected.length_mismatch': 1, 'rejected.stamp_not_increasing': 2}

    def counted() -> bool:
        now = _latest_counts(out)
        return all(int(now.get(key, -1)) - before.get(key, 0) == count
                   for key, count in want.items())

    client.wait_for(counted, 60.0, f'diagnostics counting {want}')
    now = _latest_counts(out)
    assert int(now['rejected']) - before['rejected'] == sum(want.values())
    assert 'stamp_not_increasing' in node.output() and 'elbow_of_doom' in node.output()


def test_parameters_are_validated_live(graph):
    """An invalid filter setting is refused by the running node; a valid one is taken."""
    client = graph[0]

    def set_cutoff(value: float):
        return _set(client, 'filter.cutoff_hz', ParameterValue(
            type=ParameterType.PARAMETER_DOUBLE, double_value=value))

    refused = set_cutoff(150.0)   # above Nyquist of the 200 Hz design rate
    assert not refused.successful and 'cutoff_hz' in refused.reason
    assert set_cutoff(10.0).successful


def _set(client, name: str, value: ParameterValue):
    """One parameter of the running node set, its result (sent once the node has matched
    the client both ways: a request sent before is lost, RosClient.call)."""
    return client.call(SetParameters, f'{NODE}/set_parameters', SetParameters.Request(
        parameters=[Parameter(name=name, value=value)]), once=True).results[0]


def test_output_rate_decimates_outputs_not_the_estimator(graph, model):
    client, node, _, out = graph
    rate = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=50.0)
    assert _set(client, 'output_rate_hz', rate).successful
    try:
        _clear(out)
        sent = _trajectory(model, _driver_names(model), t0_ns=3_000_000_000_000, count=101)
        every = _reproduce(model, sent)          # the estimator runs on every sample
        expected, due = [], 0
        for t_ns, values in every:               # 50 Hz on the stamps, phase kept
            if t_ns >= due:
                expected.append((t_ns, values))
                due = due + 20_000_000 if due + 20_000_000 > t_ns else t_ns + 20_000_000
        # Estimates at samples 4..100 (5 ms apart); every 4th one is due: 4, 8, ..., 100.
        # The last sample sent is an output, so _stream's wait covers every output.
        assert [t for t, _ in expected] == [3_000_000_000_000 + k * PERIOD_NS
                                            for k in range(4, 101, 4)]
        _stream(graph, model, sent, expected)
        _check_outputs(model, out, expected)      # exactly these 25: nothing in between
    finally:
        rate.double_value = 0.0
        assert _set(client, 'output_rate_hz', rate).successful


def _in_process_node(overrides: dict):
    """A DynamicsNode in its own context, namespace and domain: it needs no peers, and its
    DDS participant, made and torn down at once, stays away from the module graph's
    participants in this process (test_sim_node.py's refusal tests say why)."""
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter as RclpyParameter

    from plag_ros.ros.nodes.dynamics_node import DynamicsNode

    context = Context()
    rclpy.init(context=context, domain_id=domain(IN_PROCESS_DOMAIN_ID))
    params = [RclpyParameter(name, value=value) for name, value in overrides.items()]
    try:
        return context, DynamicsNode(context=context, namespace='/in_process',
                                     parameter_overrides=params)
    except Exception:
        context.try_shutdown()
        raise


def test_model_sources_and_invalid_parameters(model):
    """'parameter' and 'file' load at once; 'topic' falls back to the file on timeout."""
    import rclpy

    context, node = _in_process_node({'robot_description_source': 'parameter',
                                      'robot_description': model.urdf_xml})
    try:
        assert node.model_source == 'parameter'
        assert node.model.joint_names == model.joint_names
    finally:
        node.destroy_node()
        context.try_shutdown()

    context, node = _in_process_node({'robot_description_source': 'topic',
                                      'robot_description_timeout': 0.2})
    try:
        assert node.model is None
        executor = rclpy.executors.SingleThreadedExecutor(context=context)
        executor.add_node(node)

        def loaded() -> bool:
            executor.spin_once(timeout_sec=0.05)
            return node.model is not None

        wait_until(loaded, 60.0, 'the fallback model after the 0.2 s topic timeout', poll_s=0)
        assert node.model_source.startswith('fallback:')
        assert node.model.joint_names == model.joint_names
        executor.shutdown()
    finally:
        node.destroy_node()
        context.try_shutdown()

    for overrides, match in (
            ({'robot_description_source': 'database'}, 'robot_description_source'),
            ({'robot_description_source': 'parameter'}, 'robot_description is empty'),
            ({'urdf_path': '/nonexistent/arm.urdf'}, 'not a file'),
            ({'stamp_source': 'gps'}, 'stamp_source'),
            ({'filter.cutoff_hz': 120.0}, 'cutoff_hz')):
        with pytest.raises(ValueError, match=match):
            _in_process_node(overrides)


class _ManualClock:
    """Stands in for the node's rclpy clock: ``now()`` is whatever the test set."""

    def __init__(self) -> None:
        self.t_ns = 0

    def now(self) -> SimpleNamespace:
        return SimpleNamespace(nanoseconds=self.t_ns)


def test_receive_stamps_for_unstamped_publishers(model):
    """stamp_source 'receive': zero header stamps are replaced by the arrival time.

    The node's clock is replaced by one the test sets before each message (arrivals exactly
    5 ms apart), so the result does not depend on how fast this machine runs the loop.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    context, node = _in_process_node({'robot_description_source': 'file',
                                      'stamp_source': 'receive'})
    clock = _ManualClock()
    # rclpy has no public way to give a node a clock of the caller's own: the arrival
    # times must be exact, whatever this machine's speed.
    node._clock = clock
    topic = '/in_process/plag_dynamics/joint_states'
    listener = rclpy.create_node('plag_test_listener', context=context)
    outputs: list[JointState] = []
    listener.create_subscription(JointState, topic, outputs.append, 50)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(listener)
    try:
        # one context, one participant: the node sees the listener's reader at once
        RosClient.wait_for(lambda: node.count_subscribers(topic) > 0, 60.0, 'the listener')
        sent = _trajectory(model, _driver_names(model), t0_ns=0, count=10)
        arrivals = [1_700_000_000_000_000_000 + k * PERIOD_NS for k in range(len(sent))]
        for msg, arrival in zip(sent, arrivals, strict=True):
            msg.header.stamp = msgs.ns_to_stamp(0)
            clock.t_ns = arrival
            node.on_joint_state(msg)
        # 10 samples, the first output at the fifth (five-point stencil): 6 outputs.
        assert node.counters()['published'] == 10 - 4 and sum(node.rejected.values()) == 0

        def received() -> bool:
            executor.spin_once(timeout_sec=0.05)
            return len(outputs) >= 10 - 4

        wait_until(received, 60.0, 'the six outputs', poll_s=0)
        assert [msgs.stamp_to_ns(m.header.stamp) for m in outputs] == arrivals[4:]
    finally:
        executor.shutdown()
        listener.destroy_node()
        node.destroy_node()
        context.try_shutdown()


def test_a_failing_callback_is_reported_and_the_input_goes_on(model, monkeypatch):
    """On the input thread a callback that raises is logged, counted and shown as ERROR."""
    import gc

    import rclpy

    switch_interval = sys.getswitchinterval()
    # low_latency: the input thread (and the process-wide tuning, undone below)
    context, node = _in_process_node({'robot_description_source': 'file',
                                      'low_latency': True})
    feeder = rclpy.create_node('plag_test_feeder', context=context)
    try:
        publisher = feeder.create_publisher(JointState, '/in_process/joint_states', 10)
        RosClient.wait_for(lambda: publisher.get_subscription_count() > 0, 60.0, 'the node')
        sent = iter(_trajectory(model, _driver_names(model), t0_ns=10**12, count=20))

        def fail(*args, **kwargs):
            raise RuntimeError('estimator bug')

        monkeypatch.setattr(JointStateEstimator, 'update', fail)
        for msg in [next(sent) for _ in range(3)]:
            publisher.publish(msg)
        RosClient.wait_for(lambda: node.callback_errors == 3, 60.0, 'three callback errors')
        monkeypatch.undo()
        publish_at_rate(publisher, sent, RATE_HZ)
        # 17 good messages after the failures; the first output at the fifth: 13.
        wait_until(lambda: node.counters()['published'] == 17 - 4, 60.0, 'outputs after it')
        status = node.publish_diagnostics().status[0]
        values = {kv.key: kv.value for kv in status.values}
        assert status.level == msgs.DiagnosticLevel.ERROR and 'raised 3 times' in status.message
        assert values['callback_errors'] == '3'
        # no new errors: back to the usual level
        assert node.publish_diagnostics().status[0].level != msgs.DiagnosticLevel.ERROR
    finally:
        feeder.destroy_node()
        node.destroy_node()
        context.try_shutdown()
        sys.setswitchinterval(switch_interval)
        gc.unfreeze()


@pytest.mark.parametrize('private,rclpy_differs,expect', [
    (False, True, 'public'),      # the shipped setting needs nothing private of rclpy
    (True, False, 'private'),     # the opt-in, on the rclpy it was checked against
    (True, True, 'fallback'),     # the opt-in where rclpy differs: public, with a warning
])
def test_low_latency_input_thread_paths(model, monkeypatch, capfd, private, rclpy_differs,
                                        expect):
    """low_latency serves joint_states on its own thread through public rclpy API unless
    private_wait_set asks for rclpy's private wait set, which is only taken on an rclpy
    whose private API is the checked one; the node decomposes every way."""
    import gc

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from plag_ros.ros import input_thread

    if rclpy_differs:
        monkeypatch.setattr(input_thread, 'private_wait_set_problem',
                            lambda: '_rclpy.WaitSet.wait differs')
    switch_interval = sys.getswitchinterval()
    context, node = _in_process_node({'robot_description_source': 'file',
                                      'low_latency': True, 'private_wait_set': private})
    feeder = rclpy.create_node('plag_test_feeder', context=context)
    outputs = []
    listener = rclpy.create_node('plag_test_listener', context=context)
    listener.create_subscription(JointState, '/in_process/plag_dynamics/joint_states',
                                 outputs.append, 50)
    executor = SingleThreadedExecutor(context=context)
    for each in (node, listener):
        executor.add_node(each)
    try:
        assert sys.getswitchinterval() < switch_interval   # the low-latency tuning is on
        publisher = feeder.create_publisher(JointState, '/in_process/joint_states', 50)
        RosClient.wait_for(lambda: publisher.get_subscription_count() > 0, 60.0, 'the node')
        for msg in _trajectory(model, _driver_names(model), t0_ns=10**12, count=20):
            publisher.publish(msg)
            executor.spin_once(timeout_sec=0.01)
        deadline = time.monotonic() + 60.0
        while len(outputs) < 16 and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert len(outputs) == 16    # 20 samples, the first output at the fifth
        log = capfd.readouterr().err
        assert 'on its own thread' in log
        assert ('on its own thread (private wait set)' in log) == (expect == 'private')
        assert ('_rclpy.WaitSet.wait differs' in log) == (expect == 'fallback')
    finally:
        executor.shutdown()
        for each in (feeder, listener, node):
            each.destroy_node()
        context.try_shutdown()
        sys.setswitchinterval(switch_interval)
        gc.unfreeze()   # low_latency's gc.freeze() is public and stays on
