"""Array <-> message conversions of plag_ros.ros.messages (no ROS graph needed)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros import messages as msgs


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _shuffled(model: RobotModel, rng: np.random.Generator) -> list[str]:
    """Actuated joint names in a random order that is not the model's."""
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    while True:
        order = list(rng.permutation(len(names)))
        if order != sorted(order):
            return [names[i] for i in order]


def test_stamp_round_trip():
    for t_ns in (0, 1, 999_999_999, 1_000_000_000, 1_732_000_000_123_456_789):
        stamp = msgs.ns_to_stamp(t_ns)
        assert 0 <= stamp.nanosec < 1_000_000_000
        assert msgs.stamp_to_ns(stamp) == t_ns


def test_layout_strides_follow_std_msgs_doc():
    layout = msgs.array_layout((9, 10, 7), ('joint', 'body', 'source'))
    assert [d.label for d in layout.dim] == ['joint', 'body', 'source']
    assert [d.size for d in layout.dim] == [9, 10, 7]
    # stride[0] is the total size; stride[i] = product of the sizes from i on.
    assert [d.stride for d in layout.dim] == [9 * 10 * 7, 10 * 7, 7]
    assert layout.data_offset == 0
    # Element (k, i, s) sits at data[stride[1] * k + stride[2] * i + s] (row-major).
    values = np.arange(630.0).reshape(9, 10, 7)
    msg = msgs.float64_multi_array(values, layout=layout)
    k, i, s = 4, 7, 3
    assert msg.data[layout.dim[1].stride * k + layout.dim[2].stride * i + s] == values[k, i, s]
    with pytest.raises(ValueError, match='labels'):
        msgs.array_layout((2, 3), ('joint',))


@pytest.mark.parametrize('shape,labels', [((9,), ('joint',)), ((9, 9), ('joint', 'body')),
                                          ((9, 9, 9), ('joint', 'body', 'source')),
                                          ((0, 3), ('joint', 'body'))])
def test_multi_array_round_trip(shape, labels):
    values = np.random.default_rng(1).standard_normal(shape)
    msg = msgs.float64_multi_array(values, labels)
    back, back_labels = msgs.multi_array_to_numpy(msg)
    assert back_labels == labels
    np.testing.assert_array_equal(back, values)


def test_multi_array_rejects_bad_layout():
    msg = msgs.float64_multi_array(np.zeros((2, 3)), ('joint', 'body'))
    msg.layout.dim[1].stride = 2
    with pytest.raises(ValueError, match='stride'):
        msgs.multi_array_to_numpy(msg)
    msg = msgs.float64_multi_array(np.zeros((2, 3)), ('joint', 'body'))
    msg.data = msg.data[:-1]
    with pytest.raises(ValueError, match='needs 6 values'):
        msgs.multi_array_to_numpy(msg)


def test_joint_state_round_trip_through_reader(model):
    rng = np.random.default_rng(2)
    names = _shuffled(model, rng)
    q = rng.uniform(-1, 1, len(names))
    qd = rng.uniform(-1, 1, len(names))
    effort = rng.uniform(-1, 1, len(names))
    msg = msgs.joint_state(names, q, qd, effort, t_ns=123_000_000_456, frame_id='world')
    t_ns, back_names, bq, bqd, beff = msgs.joint_state_arrays(msg)
    assert (t_ns, back_names, msg.header.frame_id) == (123_000_000_456, names, 'world')
    np.testing.assert_array_equal(bq, q)
    np.testing.assert_array_equal(bqd, qd)
    np.testing.assert_array_equal(beff, effort)

    reader = msgs.JointStateReader(model)
    t_ns, q_model, qd_model, eff_model = reader.read(msg, velocity=True, effort=True)
    assert t_ns == 123_000_000_456
    index = model.joint_index(names)
    expected = np.zeros(model.n_joints)
    expected[index] = q
    np.testing.assert_array_equal(q_model, model.fill_mimic(expected))
    expected[index] = qd
    np.testing.assert_array_equal(qd_model, model.fill_mimic(expected, derivative=True))
    expected[index] = effort
    np.testing.assert_array_equal(eff_model, model.fill_mimic(expected, derivative=True))
    # The mimic finger follows finger a.
    mimic = int(np.flatnonzero(model.mimic_source >= 0)[0])
    source = int(model.mimic_source[mimic])
    assert q_model[mimic] == pytest.approx(
        model.mimic_multiplier[mimic] * q_model[source] + model.mimic_offset[mimic])
    # Velocity/effort are optional.
    assert reader.read(msg)[2:] == (None, None)


def test_reader_rejects_bad_messages(model):
    reader = msgs.JointStateReader(model)
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    n = len(names)
    good = msgs.joint_state(names, np.zeros(n), t_ns=1)
    reader.read(good)

    def reason(msg, **kw) -> str:
        with pytest.raises(msgs.JointStateError) as info:
            reader.read(msg, **kw)
        return info.value.reason, str(info.value)

    r, text = reason(msgs.joint_state(names[:-1] + ['elbow_of_doom'], np.zeros(n), t_ns=1))
    assert r == 'unknown_name' and 'elbow_of_doom' in text
    r, text = reason(msgs.joint_state(names[1:], np.zeros(n - 1), t_ns=1))
    assert r == 'missing_name' and names[0] in text
    r, _ = reason(msgs.joint_state(names + names[:1], np.zeros(n + 1), t_ns=1))
    assert r == 'duplicate_name'
    bad = msgs.joint_state(names, np.zeros(n), t_ns=1)
    bad.position = bad.position[:-1]
    assert reason(bad)[0] == 'length_mismatch'
    assert reason(good, velocity=True)[0] == 'length_mismatch'  # velocity empty
    q = np.zeros(n)
    q[3] = math.nan
    r, text = reason(msgs.joint_state(names, q, t_ns=1))
    assert r == 'nonfinite' and names[3] in text
    # A good message after the bad ones still reads.
    assert reader.read(good)[1].shape == (model.n_joints,)


def test_joint_state_builder_checks_lengths():
    with pytest.raises(ValueError, match='position has 2 values for 3 names'):
        msgs.joint_state(['a', 'b', 'c'], np.zeros(2), t_ns=0)


def test_body_joint_states(model):
    partial = np.random.default_rng(3).standard_normal((model.n_joints, model.n_bodies))
    out = msgs.body_joint_states(model.joint_names, partial, t_ns=5, frame_id='world')
    assert len(out) == model.n_bodies
    for i, msg in enumerate(out):
        assert list(msg.name) == list(model.joint_names)
        assert msgs.stamp_to_ns(msg.header.stamp) == 5
        np.testing.assert_array_equal(np.array(msg.effort), partial[:, i])


def test_names_message(model):
    msg = msgs.names_message(model)
    # The data is plain JSON: a consumer without plag_ros (rviz plugin, jq, another
    # language) decodes it with any JSON parser and gets the whole index, nothing more.
    payload = json.loads(msg.data)
    assert msgs.parse_names(msg) == payload
    # Every array indexes [..., joint k, body i, source s] in that order (the engine's
    # layout: the joint the torque acts on, the body it comes from, the joint moving it).
    joint_body_source = ['joint', 'body', 'source']
    assert payload == {
        'joints': list(model.joint_names),
        'bodies': list(model.body_names),
        'sources': list(model.joint_names),
        'components': ['torque', 'acceleration', 'velocity', 'gravity', 'friction'],
        'arrays': {'partial': ['joint', 'body'], 'acceleration': joint_body_source,
                   'velocity': joint_body_source, 'gravity': ['joint', 'body'],
                   'friction': ['joint'], 'torque': ['joint']},
        'root_link': model.root_link,
    }


def test_markers_point_along_joint_axes(model):
    engine = PartialLagrangian(model)
    rng = np.random.default_rng(4)
    q = model.fill_mimic(rng.uniform(-1, 1, model.n_joints))
    poses = engine.link_poses(q).numpy()
    torque = rng.uniform(-2, 2, model.n_joints)
    builder = msgs.MarkerBuilder(model, frame_id='world', scale=0.05)
    values = {'torque': torque, 'gravity': 0.5 * torque}
    array = builder.build(poses, values, t_ns=9)
    assert len(array.markers) == 2 * model.n_joints
    assert {(m.ns, m.id) for m in array.markers} == {
        (c, k) for c in ('torque', 'gravity') for k in range(model.n_joints)}
    for marker in array.markers:
        k = marker.id
        T = poses[model.link_index(model.body_link[k])]
        start = np.array([marker.points[0].x, marker.points[0].y, marker.points[0].z])
        end = np.array([marker.points[1].x, marker.points[1].y, marker.points[1].z])
        np.testing.assert_allclose(start, T[:3, 3], atol=1e-12)
        expected = T[:3, :3] @ model.joint_axis[k] * values[marker.ns][k] * 0.05
        np.testing.assert_allclose(end - start, expected, atol=1e-12)
        assert marker.header.frame_id == 'world' and marker.type == marker.ARROW
    with pytest.raises(ValueError, match='unknown marker components'):
        msgs.MarkerBuilder(model, frame_id='world', components=('torque', 'magic'))


def test_serialized_markers_are_the_built_message(model):
    """The node publishes markers as template bytes: they must decode to build()'s message,
    for every component set and for stamps and values that change between calls."""
    from rclpy.serialization import deserialize_message
    from visualization_msgs.msg import MarkerArray

    from plag_ros.io.cdr import cdr_encode

    engine = PartialLagrangian(model)
    rng = np.random.default_rng(5)
    builder = msgs.MarkerBuilder(model, frame_id='world', scale=0.03)
    reference = msgs.MarkerBuilder(model, frame_id='world', scale=0.03)
    for t_ns, components in ((1_700_000_000_123_456_789, msgs.COMPONENTS),
                             (1_700_000_000_223_456_789, ('torque', 'gravity')),
                             (5, msgs.COMPONENTS)):
        q = model.fill_mimic(rng.uniform(-1, 1, model.n_joints))
        poses = engine.link_poses(q).numpy()
        values = {c: rng.uniform(-3, 3, model.n_joints) for c in components}
        raw = builder.serialize(poses, values, t_ns=t_ns)
        built = reference.build(poses, values, t_ns=t_ns)
        assert raw == cdr_encode(built)           # cdr_encode == rclpy's bytes: test_bag
        back = deserialize_message(raw, MarkerArray)
        assert [(m.ns, m.id) for m in back.markers] == [(m.ns, m.id) for m in built.markers]
        for got, want in zip(back.markers, built.markers, strict=True):
            assert msgs.stamp_to_ns(got.header.stamp) == t_ns
            assert [(p.x, p.y, p.z) for p in got.points] == \
                [(p.x, p.y, p.z) for p in want.points]


def test_serialized_image_is_the_built_message(model):
    from rclpy.serialization import deserialize_message
    from sensor_msgs.msg import Image

    from plag_ros.io.cdr import cdr_encode

    rng = np.random.default_rng(7)
    builder = msgs.PartialImageBuilder(model.n_joints, model.n_bodies, cell=5, frame_id='w')
    for t_ns in (1_700_000_000_000_000_001, 42):
        table = rng.normal(size=(model.n_joints, model.n_bodies))
        raw = builder.serialize(table, t_ns=t_ns)
        built = builder.build(table, t_ns=t_ns)
        assert raw == cdr_encode(built)
        assert deserialize_message(raw, Image) == built


def test_marker_components_sum_the_tables(model):
    engine = PartialLagrangian(model)
    rng = np.random.default_rng(6)
    q, qd, qdd = (rng.uniform(-1, 1, (4, model.n_joints)) for _ in range(3))
    out = engine.decompose(q, qd, qdd).numpy()
    parts = msgs.marker_components(out)
    np.testing.assert_allclose(parts['acceleration'] + parts['velocity'] + parts['gravity'],
                               parts['torque'], atol=1e-12)
    single = msgs.marker_components({k: v[2] for k, v in out.items()})
    for name in msgs.COMPONENTS:
        np.testing.assert_array_equal(single[name], parts[name][2])


def test_partial_image(model):
    n, B = model.n_joints, model.n_bodies
    builder = msgs.PartialImageBuilder(n, B, cell=4, frame_id='world')
    partial = np.zeros((n, B))
    partial[0, 0] = 3.0
    partial[1, 2] = -3.0
    msg = builder.build(partial, t_ns=1)
    assert (msg.height, msg.width, msg.encoding, msg.step) == (4 * n, 4 * B, 'rgb8', 12 * B)
    rgb = msgs.image_to_numpy(msg)
    assert rgb.shape == (4 * n, 4 * B, 3)
    red, blue, zero = rgb[0, 0], rgb[4, 8], rgb[4 * n - 1, 4 * B - 1]
    assert red[0] > red[2] and blue[2] > blue[0]                 # diverging: sign by hue
    assert zero.min() > 240                                      # zero is (near) white
    np.testing.assert_array_equal(rgb[:4, :4], np.broadcast_to(red, (4, 4, 3)))
    # Antisymmetric input gives mirrored colours.
    np.testing.assert_array_equal(red, builder.colours(-partial)[4, 8])
    with pytest.raises(ValueError, match='shape'):
        builder.build(np.zeros((n, B + 1)), t_ns=1)


def test_diagnostics():
    status = msgs.diagnostic_status('plag_dynamics: estimator', msgs.DiagnosticLevel.WARN,
                                    'rejected input', {'rate_hz': 199.87654321, 'count': 3},
                                    hardware_id='crane_x7')
    array = msgs.diagnostic_array([status], t_ns=2_000_000_001)
    assert array.header.stamp.sec == 2 and array.header.stamp.nanosec == 1
    values = {kv.key: kv.value for kv in array.status[0].values}
    assert values == {'rate_hz': '199.877', 'count': '3'}
    assert array.status[0].level == msgs.DiagnosticLevel.WARN


def test_a_nodes_state_in_both_forms():
    """~/state's JSON and one /diagnostics status with the same content: nested keys
    dotted, strings as they are, everything else its JSON text (a float exactly)."""
    state = {'state': 'fault', 'reason': 'stale', 'alpha': 0.1 + 0.2, 'saturated': ['a'],
             'driver_fault': '', 'model': {'digest': 'f00d', 'changed': False},
             'rejected': {}, 'commands': 7, 'none': None}
    text, array = msgs.node_state('/plag_impedance', state, msgs.DiagnosticLevel.WARN,
                                  'fault: stale', hardware_id='crane_x7', t_ns=3_000_000_000)
    assert json.loads(text.data) == state
    (status,) = array.status
    assert (status.name, status.message, status.hardware_id, status.level) == (
        '/plag_impedance', 'fault: stale', 'crane_x7', msgs.DiagnosticLevel.WARN)
    assert array.header.stamp.sec == 3
    assert [(kv.key, kv.value) for kv in status.values] == [
        ('state', 'fault'), ('reason', 'stale'), ('alpha', '0.30000000000000004'),
        ('saturated', '["a"]'), ('driver_fault', ''), ('model.digest', 'f00d'),
        ('model.changed', 'false'), ('rejected', '{}'), ('commands', '7'), ('none', 'null')]


def test_decomposition_arrays_round_trip(model):
    """The engine's arrays survive the message round trip bit for bit."""
    engine = PartialLagrangian(model, dtype=torch.float64)
    rng = np.random.default_rng(5)
    q, qd, qdd = (model.fill_mimic(rng.uniform(-1, 1, model.n_joints)) for _ in range(3))
    out = engine.decompose(q, qd, qdd).numpy()
    for name, labels in msgs.ARRAY_LABELS.items():
        back, back_labels = msgs.multi_array_to_numpy(msgs.float64_multi_array(out[name],
                                                                               labels))
        assert back_labels == labels
        np.testing.assert_array_equal(back, out[name])


def test_decomposition_messages_are_the_builders_messages(model):
    """The node publishes DecompositionMessages' bytes: each must be the CDR of what the
    pure builders make for the same sample."""
    from plag_ros.io.cdr import cdr_encode

    engine = PartialLagrangian(model, dtype=torch.float64)
    rng = np.random.default_rng(8)
    live = msgs.DecompositionMessages(model, frame_id='world')
    names = list(model.joint_names)
    for t_ns in (1_700_000_000_987_654_321, 17):
        q, qd, qdd = (model.fill_mimic(rng.uniform(-1, 1, model.n_joints)) for _ in range(3))
        out = engine.decompose_arrays(q, qd, qdd)
        live.fill(t_ns, q, qd, out)
        assert live.joint_state == cdr_encode(msgs.joint_state(
            names, q, qd, out['torque'], t_ns=t_ns, frame_id='world'))
        for name, labels in msgs.ARRAY_LABELS.items():
            if name in live.arrays:
                assert live.arrays[name] == cdr_encode(msgs.float64_multi_array(out[name],
                                                                                labels))
        bodies = msgs.body_joint_states(names, out['partial'], t_ns=t_ns, frame_id='world')
        assert live.bodies == [cdr_encode(m) for m in bodies]
        parts = {'acceleration': out['acceleration'].sum(axis=(1, 2)),
                 'velocity': out['velocity'].sum(axis=(1, 2)),
                 'gravity': out['gravity'].sum(axis=1), 'friction': out['friction']}
        assert set(live.components) == set(parts)
        for name, value in parts.items():
            assert live.components[name] == cdr_encode(msgs.joint_state(
                names, effort=value, t_ns=t_ns, frame_id='world')), name
