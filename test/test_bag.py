"""plag_ros.io.bag: reading JointState bags of every storage and distro, errors, bulk CDR.

Every bag is written here into ``tmp_path`` with ``rosbags`` (no binary fixtures): sqlite3
and mcap storage, message definitions from the Humble, Jazzy and Kilted typestores, joint
names in a driver's shuffled order without the mimic finger, and an extra topic. The bulk
CDR parser is checked against ``rosbags``' own per-message deserializer, and the bulk CDR
writer against ``rclpy.serialization.serialize_message`` of the ``plag_ros.ros.messages``
builders. No DDS here, and no domain: nothing in this module starts a node.
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from rosbags.typesys import Stores, get_typestore
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray
from visualization_msgs.msg import MarkerArray

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.io.bag import (
    JOINT_STATE_TYPE,
    BagReadError,
    MissingJointsError,
    NotABagError,
    OutputExistsError,
    TopicError,
    bag_robot_description,
    bag_topics,
    prepare_output,
    qos_profile,
    read_joint_states,
    typestore_for,
)
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate, cdr_encode
from plag_ros.ros import messages as msgs
from plag_ros.ros.output_bag import write_joint_state_bag

T0_NS = 1_700_000_000_123_456_789
PERIOD_NS = 5_000_000


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _driver_names(model: RobotModel) -> list[str]:
    """The 8 actuated joints in a shuffled order (the mimic finger is not published)."""
    names = [name for name, act in zip(model.joint_names, model.actuated) if act]
    order = np.random.default_rng(3).permutation(len(names))
    assert not np.array_equal(order, np.arange(len(names)))
    return [names[i] for i in order]


def _trajectory(count: int, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(count)[:, None] * PERIOD_NS * 1e-9
    q = 0.6 * np.sin(2 * np.pi * rng.uniform(0.1, 0.8, n) * t + rng.uniform(0, 6, n))
    return q, np.gradient(q, PERIOD_NS * 1e-9, axis=0)


def _write_bag(path, model, *, storage='mcap', distro='jazzy', count=300, extra=True,
               receive_offset_ns=1_000_000, big_endian_every=0, reorder_every=0):
    """A bag as a CRANE-X7 driver records it; returns (names, q_driver, qd_driver, t)."""
    names = _driver_names(model)
    q, qd = _trajectory(count, len(names))
    t = T0_NS + np.arange(count, dtype=np.int64) * PERIOD_NS
    store = typestore_for(distro)
    JS = store.types[JOINT_STATE_TYPE]
    Header = store.types['std_msgs/msg/Header']
    Time = store.types['builtin_interfaces/msg/Time']
    String = store.types['std_msgs/msg/String']
    with BagWriter(path, storage=storage, typestore=store) as writer:
        conn = writer.add_topic('/joint_states', JOINT_STATE_TYPE, qos=qos_profile(depth=50))
        chatter = writer.add_topic('/chatter', 'std_msgs/msg/String') if extra else None
        for k in range(count):
            order = np.arange(len(names))
            if reorder_every and k % reorder_every == 1:
                order = order[::-1]   # a second name layout inside the same topic
            msg = JS(header=Header(stamp=Time(sec=int(t[k] // 10**9),
                                              nanosec=int(t[k] % 10**9)),
                                   frame_id='base'),
                     name=[names[i] for i in order], position=q[k, order],
                     velocity=qd[k, order], effort=np.zeros(0))
            little = not (big_endian_every and k % big_endian_every == 2)
            data = store.serialize_cdr(msg, JOINT_STATE_TYPE, little_endian=little)
            writer.write(conn, int(t[k]) + receive_offset_ns + 7 * (k % 3), data)
            if chatter is not None and k % 50 == 0:
                writer.write(chatter, int(t[k]), store.serialize_cdr(String(data=f'hi {k}'),
                                                                     'std_msgs/msg/String'))
    return names, q, qd, t


def _model_order(model, names, x, *, derivative=False):
    out = np.zeros((len(x), model.n_joints))
    out[:, model.joint_index(names)] = x
    return model.fill_mimic(out, derivative=derivative)


# --- reading ------------------------------------------------------------------------------


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
@pytest.mark.parametrize('distro', ['humble', 'jazzy', 'kilted'])
def test_read_joint_states_every_storage_and_distro(tmp_path, model, storage, distro):
    names, q, qd, t = _write_bag(tmp_path / 'bag', model, storage=storage, distro=distro)
    js = read_joint_states(tmp_path / 'bag', model)
    assert js.topic == '/joint_states'
    assert js.t_ns.dtype == np.int64
    np.testing.assert_array_equal(js.t_ns, t)
    np.testing.assert_array_equal(js.header_ns, t)
    np.testing.assert_array_equal(js.q, _model_order(model, names, q))
    np.testing.assert_array_equal(js.qd, _model_order(model, names, qd, derivative=True))
    assert js.effort is None
    # The mimic finger follows finger a (multiplier and offset of the URDF).
    b = model.joint_names.index('crane_x7_gripper_finger_b_joint')
    a = model.mimic_source[b]
    np.testing.assert_allclose(js.q[:, b], model.mimic_multiplier[b] * js.q[:, a]
                               + model.mimic_offset[b], rtol=0, atol=0)
    # Receive time instead of the header stamp.
    js = read_joint_states(tmp_path / 'bag', model, stamp='receive')
    np.testing.assert_array_equal(js.t_ns, t + 1_000_000 + 7 * (np.arange(len(t)) % 3))


def test_bulk_parse_equals_rosbags_deserializer(tmp_path, model):
    """Mixed name layouts and big-endian messages take the per-message path; every value
    equals what rosbags' own deserializer gives."""
    names, q, qd, t = _write_bag(tmp_path / 'bag', model, count=200, reorder_every=7,
                                 big_endian_every=11)
    js = read_joint_states(tmp_path / 'bag', model)
    np.testing.assert_array_equal(js.t_ns, t)
    np.testing.assert_array_equal(js.q, _model_order(model, names, q))
    np.testing.assert_array_equal(js.qd, _model_order(model, names, qd, derivative=True))
    # Independent decode, message by message, with rosbags.
    from rosbags.rosbag2 import Reader
    store = get_typestore(Stores.ROS2_JAZZY)
    with Reader(tmp_path / 'bag') as reader:
        conns = [c for c in reader.connections if c.topic == '/joint_states']
        decoded = [store.deserialize_cdr(raw, JOINT_STATE_TYPE)
                   for _, _, raw in reader.messages(connections=conns)]
    for k, msg in enumerate(decoded):
        row = np.zeros(model.n_joints)
        row[model.joint_index(msg.name)] = msg.position
        np.testing.assert_array_equal(js.q[k], model.fill_mimic(row))


def test_extra_and_single_file_bags(tmp_path, model):
    names, q, _, t = _write_bag(tmp_path / 'bag', model, storage='mcap')
    topics = bag_topics(tmp_path / 'bag')
    assert topics['/chatter'][0] == 'std_msgs/msg/String'
    assert topics['/joint_states'] == (JOINT_STATE_TYPE, len(t))
    # A bare .mcap file, and a bag directory whose metadata.yaml was never written.
    js = read_joint_states(tmp_path / 'bag' / 'bag.mcap', model)
    np.testing.assert_array_equal(js.q, _model_order(model, names, q))
    (tmp_path / 'bag' / 'metadata.yaml').unlink()
    js = read_joint_states(tmp_path / 'bag', model)
    np.testing.assert_array_equal(js.t_ns, t)


def test_only_joint_state_topic_is_found_by_type(tmp_path, model):
    names = list(model.joint_names)
    q, _ = _trajectory(20, model.n_joints)
    t = T0_NS + np.arange(20) * PERIOD_NS
    write_joint_state_bag(tmp_path / 'bag', t, names, q, topic='/arm/joint_states',
                          storage='sqlite3', distro='humble')
    js = read_joint_states(tmp_path / 'bag', model)
    assert js.topic == '/arm/joint_states'
    np.testing.assert_array_equal(js.q, model.fill_mimic(q))


def test_unsorted_and_repeated_stamps_are_sorted_and_counted(tmp_path, model):
    q, _ = _trajectory(10, model.n_joints)
    t = T0_NS + np.array([0, 1, 2, 4, 3, 5, 6, 6, 7, 8], dtype=np.int64) * PERIOD_NS
    write_joint_state_bag(tmp_path / 'bag', t, model.joint_names, q,
                          receive_ns=T0_NS + np.arange(10) * PERIOD_NS)
    with pytest.warns(UserWarning, match='1 /joint_states messages repeat the stamp'):
        js = read_joint_states(tmp_path / 'bag', model)
    np.testing.assert_array_equal(js.t_ns, T0_NS + np.arange(9) * PERIOD_NS)
    np.testing.assert_array_equal(js.q[3], model.fill_mimic(q[4]))


# --- errors -------------------------------------------------------------------------------


def test_not_a_bag(tmp_path, model):
    with pytest.raises(NotABagError, match='no such file'):
        read_joint_states(tmp_path / 'missing', model)
    (tmp_path / 'notes.txt').write_text('hello')
    with pytest.raises(NotABagError, match='not a rosbag2 bag'):
        read_joint_states(tmp_path / 'notes.txt', model)
    (tmp_path / 'empty').mkdir()
    with pytest.raises(NotABagError, match='no metadata.yaml'):
        read_joint_states(tmp_path / 'empty', model)


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_truncated_or_corrupt_bag(tmp_path, model, storage):
    _write_bag(tmp_path / 'bag', model, storage=storage, count=400)
    data_file = next(p for p in (tmp_path / 'bag').iterdir() if p.suffix in ('.mcap', '.db3'))
    size = data_file.stat().st_size
    with open(data_file, 'r+b') as f:
        f.truncate(size // 2)
    with pytest.raises(BagReadError, match='bag'):
        read_joint_states(tmp_path / 'bag', model)
    data_file.write_bytes(b'\x00garbage' * 100)
    with pytest.raises(BagReadError, match=str(tmp_path / 'bag')):
        read_joint_states(tmp_path / 'bag', model)


def test_no_joint_state_topic_lists_topics(tmp_path, model):
    store = typestore_for('kilted')
    String = store.types['std_msgs/msg/String']
    with BagWriter(tmp_path / 'bag', typestore=store) as writer:
        conn = writer.add_topic('/chatter', 'std_msgs/msg/String')
        writer.write(conn, T0_NS, store.serialize_cdr(String(data='x'), 'std_msgs/msg/String'))
    with pytest.raises(TopicError, match=r'no sensor_msgs/msg/JointState topic.*/chatter'):
        read_joint_states(tmp_path / 'bag', model)
    with pytest.raises(TopicError, match=r"no topic '/js'.*/chatter"):
        read_joint_states(tmp_path / 'bag', model, topic='/js')
    with pytest.raises(TopicError, match='is std_msgs/msg/String'):
        read_joint_states(tmp_path / 'bag', model, topic='/chatter')


def test_missing_joints_are_named(tmp_path, model):
    names = [n for n in model.joint_names if n != 'crane_x7_wrist_joint']
    q, _ = _trajectory(10, len(names))
    write_joint_state_bag(tmp_path / 'bag', T0_NS + np.arange(10) * PERIOD_NS, names, q)
    with pytest.raises(MissingJointsError, match="lacks joints \\['crane_x7_wrist_joint'\\]"):
        read_joint_states(tmp_path / 'bag', model)


def test_zero_header_stamps_suggest_receive_time(tmp_path, model):
    q, _ = _trajectory(10, model.n_joints)
    write_joint_state_bag(tmp_path / 'bag', np.zeros(10, dtype=np.int64), model.joint_names,
                          q, receive_ns=T0_NS + np.arange(10) * PERIOD_NS)
    with pytest.raises(BagReadError, match='--stamp receive'):
        read_joint_states(tmp_path / 'bag', model)
    js = read_joint_states(tmp_path / 'bag', model, stamp='receive')
    assert len(js.t_ns) == 10


def test_output_is_never_overwritten_without_force(tmp_path):
    out = tmp_path / 'out'
    out.mkdir()
    (out / 'keep.txt').write_text('precious')
    with pytest.raises(OutputExistsError, match='--force'):
        prepare_output(out)
    assert (out / 'keep.txt').read_text() == 'precious'
    with pytest.raises(OutputExistsError):
        BagWriter(out)
    prepare_output(out, force=True)
    assert not out.exists()


# --- bulk CDR -----------------------------------------------------------------------------


def _assert_same_cdr(mine: bytes, msg, template: CdrTemplate) -> None:
    """Canonical bytes exactly; rclpy's bytes equal outside alignment padding."""
    assert mine == cdr_encode(msg)
    ref = serialize_message(msg)
    assert len(ref) >= len(mine)
    mask = np.ones(len(mine), dtype=bool)
    for start, stop in template.padding:
        mask[start:stop] = False
    a = np.frombuffer(mine, dtype=np.uint8)
    b = np.frombuffer(ref[:len(mine)], dtype=np.uint8)
    np.testing.assert_array_equal(a[mask], b[mask])
    # float32 fields (colours) round on the wire, so compare decoded with decoded.
    assert deserialize_message(mine, type(msg)) == deserialize_message(ref, type(msg))


def test_cdr_template_equals_builders(model):
    rng = np.random.default_rng(7)
    n, b = model.n_joints, model.n_bodies
    names = list(model.joint_names)
    t = np.array([0, 1, 999_999_999, T0_NS, -1_500_000_000], dtype=np.int64)

    template = CdrTemplate(msgs.joint_state(names, np.zeros(n), np.zeros(n), np.zeros(n),
                                            t_ns=TEMPLATE_NS, frame_id='world'))
    q, qd, tau = rng.normal(size=(3, len(t), n))
    rows = template.fill(t, {'position': q, 'velocity': qd, 'effort': tau})
    for r in range(len(t)):
        _assert_same_cdr(rows[r].tobytes(), msgs.joint_state(names, q[r], qd[r], tau[r],
                                                             t_ns=int(t[r]), frame_id='world'),
                         template)

    for shape, labels in (((n, b, n), ('joint', 'body', 'source')), ((n,), ('joint',))):
        layout = msgs.array_layout(shape, labels)
        template = CdrTemplate(msgs.float64_multi_array(np.zeros(shape), layout=layout))
        data = rng.normal(size=(len(t),) + shape)
        rows = template.fill(t, {'data': data.reshape(len(t), -1)})
        for r in range(len(t)):
            msg = msgs.float64_multi_array(data[r], layout=layout)
            _assert_same_cdr(rows[r].tobytes(), msg, template)
            assert isinstance(deserialize_message(rows[r].tobytes(), Float64MultiArray),
                              Float64MultiArray)

    partial = rng.normal(size=(len(t), n, b))
    templates = msgs.body_joint_states(names, np.zeros((n, b)), t_ns=TEMPLATE_NS,
                                       frame_id='world')
    for i, tmpl_msg in enumerate(templates):
        template = CdrTemplate(tmpl_msg)
        rows = template.fill(t, {'effort': partial[:, :, i]})
        for r in range(len(t)):
            expected = msgs.body_joint_states(names, partial[r], t_ns=int(t[r]),
                                              frame_id='world')[i]
            _assert_same_cdr(rows[r].tobytes(), expected, template)
            assert isinstance(deserialize_message(rows[r].tobytes(), JointState), JointState)


def test_cdr_encode_of_markers_and_image(model):
    """The canonical encoder handles every field kind the node publishes."""
    import torch

    from plag_ros.core.dynamics.engine import PartialLagrangian

    engine = PartialLagrangian(model, dtype=torch.float64)
    q = np.linspace(-0.5, 0.5, model.n_joints)
    poses = engine.link_poses(q).numpy()
    values = {c: np.linspace(-1, 1, model.n_joints) for c in msgs.COMPONENTS}
    markers = msgs.MarkerBuilder(model, frame_id='world').build(poses, values, t_ns=T0_NS)
    _assert_same_cdr(cdr_encode(markers), markers, CdrTemplate(markers, stamp_ns=T0_NS))
    assert len(deserialize_message(cdr_encode(markers), MarkerArray).markers) == \
        len(msgs.COMPONENTS) * model.n_joints
    image = msgs.PartialImageBuilder(model.n_joints, model.n_bodies).build(
        np.arange(model.n_joints * model.n_bodies, dtype=float).reshape(model.n_joints, -1),
        t_ns=T0_NS)
    _assert_same_cdr(cdr_encode(image), image, CdrTemplate(image, stamp_ns=T0_NS))
    assert deserialize_message(cdr_encode(image), Image) == image


@pytest.mark.parametrize('storage,compression', [('mcap', 'none'), ('mcap', 'lz4'),
                                                 ('mcap', 'zstd'), ('sqlite3', 'none')])
def test_written_bag_reads_back_with_rosbags(tmp_path, model, storage, compression):
    """Bulk rows written through BagWriter (several MCAP chunks, compressed or not) decode
    with rosbags' typestore."""
    names = list(model.joint_names)
    q, qd = _trajectory(5000, model.n_joints)
    t = T0_NS + np.arange(5000) * PERIOD_NS
    path = tmp_path / storage
    write_joint_state_bag(path, t, names, q, qd, storage=storage, distro='kilted',
                          compression=compression)
    if compression != 'none':
        data = (path / f'{storage}.mcap').read_bytes()
        assert struct.pack('<I', len(compression)) + compression.encode() in data
    js = read_joint_states(path, model)
    np.testing.assert_array_equal(js.q, model.fill_mimic(q))
    np.testing.assert_array_equal(js.qd, model.fill_mimic(qd, derivative=True))
    from rosbags.rosbag2 import Reader
    store = get_typestore(Stores.ROS2_KILTED)
    with Reader(path) as reader:
        (conn,) = reader.connections
        assert conn.ext.offered_qos_profiles[0].depth == 50
        first = next(reader.messages())[2]
        msg = store.deserialize_cdr(first, JOINT_STATE_TYPE)
        assert list(msg.name) == names
        count = sum(1 for _ in reader.messages())
    assert count == len(t)


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_the_robot_description_a_bag_holds(tmp_path, model, storage):
    """The last /robot_description String of a bag (what replay.launch.py hands to
    robot_state_publisher), None when the bag has none."""
    from std_msgs.msg import String

    bare = write_joint_state_bag(tmp_path / 'bare', np.array([1, 2], dtype=np.int64),
                                 ['a'], np.zeros((2, 1)), storage=storage)
    assert bag_robot_description(bare) is None
    with BagWriter(tmp_path / 'with', storage=storage) as writer:
        conn = writer.add_topic('/robot_description', 'std_msgs/msg/String',
                                qos=qos_profile(depth=1, transient_local=True))
        writer.write(conn, 1, cdr_encode(String(data='<robot name="old"/>')))
        writer.write(conn, 2, cdr_encode(String(data=model.urdf_xml)))
    assert bag_robot_description(tmp_path / 'with') == model.urdf_xml
