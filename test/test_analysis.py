"""plag_ros.core.decomposition.analysis: ``plag-ros analyze`` against the library on the same
arrays.

A CRANE-X7 bag is written into ``tmp_path`` (driver's shuffled joint order, no mimic finger,
an extra topic; mcap with Kilted definitions and sqlite3 with Humble ones). The analysis
products must equal the library run on the same arrays (zero-phase estimate + engine), the
output bag must hold every topic the live dynamics node publishes with the node's types,
names, layouts and rates, decoding to the same numbers, and ``--causal`` must equal the
node's per-message library path (the DDS run of the node itself is in test_replay.py).
No DDS in this module: the command line it runs gets a domain of its own all the same
(logical 22), should it ever start a node.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch
from friction_rule import expected_friction
from pin_oracle import PinOracle
from rclpy.serialization import deserialize_message
from ros_domains import domain
from rosbags.rosbag2 import Reader
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from visualization_msgs.msg import MarkerArray

from plag_ros.apps import bag_analysis as analyze_tool
from plag_ros.apps.bag_analysis import analyze_bag
from plag_ros.core.decomposition.analysis import (
    AnalysisOptions,
    analyze_arrays,
    own_source_propagation,
    propagation_paths,
)
from plag_ros.core.dynamics.compact import load_analysis
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator, estimate_offline
from plag_ros.core.estimation.friction import rest_band
from plag_ros.io.bag import OutputExistsError, read_joint_states, typestore_for
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import cdr_encode
from plag_ros.ros import messages as msgs
from plag_ros.ros.output_bag import write_joint_state_bag

DOMAIN_ID = 22
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

T0_NS = 1_700_000_000_000_000_000
PERIOD_NS = 5_000_000
COUNT = 400
NODE = '/plag_dynamics'
ARRAYS = ('partial', 'acceleration', 'velocity', 'gravity', 'friction')
TOL = 1e-9


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _driver_names(model):
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    return [names[i] for i in np.random.default_rng(5).permutation(len(names))]


def _write(path, model, *, storage='mcap', distro='kilted', jitter=True):
    """A 2 s, 200 Hz recording with stamp jitter and an extra /chatter topic."""
    names = _driver_names(model)
    rng = np.random.default_rng(1)
    t = T0_NS + np.arange(COUNT, dtype=np.int64) * PERIOD_NS
    if jitter:
        t += rng.integers(-200_000, 200_000, COUNT)
    s = (t - T0_NS)[:, None] * 1e-9
    # around the middle of each joint's range: a motion the arm can make (the analysis
    # leaves out samples beyond the URDF limits, e.g. joint 4 above 0 rad)
    k = model.joint_index(names)
    middle = 0.5 * (model.joint_lower[k] + model.joint_upper[k])
    q = middle + rng.uniform(0.1, 0.6, len(names)) * np.sin(
        2 * np.pi * rng.uniform(0.3, 1.5, len(names)) * s + rng.uniform(0, 6, len(names)))
    write_joint_state_bag(path, t, names, q, storage=storage, distro=distro,
                          receive_ns=t + 300_000)
    return names, t, q


@pytest.fixture(scope='module')
def analysed(model, tmp_path_factory):
    """One zero-phase analysis shared by the product tests."""
    root = tmp_path_factory.mktemp('analysis')
    names, t, q = _write(root / 'bag', model)
    _add_extra_topic(root / 'bag')
    options = AnalysisOptions(chunk=64, progress=False)
    analysis, written, _ = analyze_bag(root / 'bag', root / 'out', model=model, options=options)
    return root, names, t, q, analysis, written


def _add_extra_topic(path):
    """Rewrite the bag with an extra /chatter String topic every 100 ms."""
    store = typestore_for('kilted')
    tmp = path.with_name(path.name + '_x')
    with Reader(path) as reader, BagWriter(tmp, typestore=store) as writer:
        (conn,) = reader.connections
        out = writer.add_topic(conn.topic, conn.msgtype, qos=conn.ext.offered_qos_profiles[0])
        chatter = writer.add_topic('/chatter', 'std_msgs/msg/String')
        for k, (_, t, raw) in enumerate(reader.messages()):
            writer.write(out, t, bytes(raw))
            if k % 20 == 0:
                writer.write(chatter, t, cdr_encode(String(data=f'k={k}')))
    shutil.rmtree(path)
    tmp.rename(path)


def _library(model, t, q_driver, names):
    """The library on the same arrays: model order, mimic filled, zero-phase, engine."""
    q = np.zeros((len(t), model.n_joints))
    q[:, model.joint_index(names)] = q_driver
    q = model.fill_mimic(q)
    est = estimate_offline(t, q, EstimatorConfig())
    out = PartialLagrangian(model, dtype=torch.float64).decompose(est.q, est.qd,
                                                                  est.qdd).numpy()
    out.update(q=est.q, qd=est.qd, qdd=est.qdd)
    out['friction'] = expected_friction(model, est.qd, out['torque'],
                                        rest_band(model, EstimatorConfig()))
    return out


def test_analysis_equals_library_on_same_arrays(analysed, model):
    root, names, t, q, analysis, written = analysed
    want = _library(model, t, q, names)
    np.testing.assert_array_equal(analysis.t_ns, t)
    with np.load(written['npz']) as npz:
        for name in ('q', 'qd', 'qdd', 'torque', 'partial', 'acceleration', 'velocity',
                     'gravity', 'friction'):
            np.testing.assert_allclose(npz[name], want[name], rtol=0, atol=1e-12,
                                       err_msg=name)
            np.testing.assert_array_equal(npz[name], getattr(analysis, name))
        np.testing.assert_array_equal(npz['t_ns'], t)
        assert list(npz['joint_names']) == list(model.joint_names)
        assert list(npz['body_names']) == list(model.body_names)
    assert zipfile.ZipFile(written['npz']).infolist()[0].compress_type == zipfile.ZIP_DEFLATED
    # Independent of the engine: Pinocchio's RNEA on the same estimated states gives the
    # torque, and at rest its gravity part (rows at the start, middle and end).
    oracle = PinOracle(default_urdf_path().read_text(), model)
    zero = np.zeros(model.n_joints)
    for k in (0, len(t) // 2, len(t) - 1):
        q_k, qd_k, qdd_k = analysis.q[k], analysis.qd[k], analysis.qdd[k]
        np.testing.assert_allclose(analysis.torque[k], oracle.rnea(q_k, qd_k, qdd_k),
                                   rtol=0, atol=1e-9, err_msg=f'torque row {k}')
        np.testing.assert_allclose(analysis.gravity[k].sum(-1), oracle.rnea(q_k, zero, zero),
                                   rtol=0, atol=1e-9, err_msg=f'gravity row {k}')
    # The array function gives the same as the bag function, also through the torch form
    # in chunks (what float32 and GPU engines take).
    js = read_joint_states(root / 'bag', model)
    torch_form = PartialLagrangian(model, compiled=False)
    again = analyze_arrays(model, js.t_ns, js.q, options=AnalysisOptions(chunk=100),
                           engine=torch_form)
    for name in ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction'):
        np.testing.assert_allclose(getattr(again, name), getattr(analysis, name), rtol=0,
                                   atol=1e-12, err_msg=name)


def _bag_messages(path):
    out: dict[str, list] = {}
    with Reader(path) as reader:
        types = {c.topic: c.msgtype for c in reader.connections}
        for conn, t, raw in reader.messages():
            out.setdefault(conn.topic, []).append((t, bytes(raw)))
    return out, types


def test_output_bag_holds_every_node_topic(analysed, model):
    root, names, t, q, analysis, written = analysed
    bag, types = _bag_messages(root / 'out' / 'bag')
    expected = {'/joint_states': 'sensor_msgs/msg/JointState',
                f'{NODE}/joint_states': 'sensor_msgs/msg/JointState',
                f'{NODE}/names': 'std_msgs/msg/String',
                f'{NODE}/markers': 'visualization_msgs/msg/MarkerArray',
                f'{NODE}/partial_image': 'sensor_msgs/msg/Image',
                '/diagnostics': 'diagnostic_msgs/msg/DiagnosticArray'}
    expected.update({f'{NODE}/{name}': 'std_msgs/msg/Float64MultiArray' for name in ARRAYS})
    expected.update({f'{NODE}/body/{b}': 'sensor_msgs/msg/JointState'
                     for b in model.body_names})
    expected.update({f'{NODE}/component/{c}': 'sensor_msgs/msg/JointState'
                     for c in ('acceleration', 'velocity', 'gravity', 'friction')})
    assert types == expected
    # The input joint states byte for byte, with their receive times.
    with Reader(root / 'bag') as reader:
        conns = [c for c in reader.connections if c.topic == '/joint_states']
        original = [(ts, bytes(raw)) for _, ts, raw in reader.messages(connections=conns)]
    assert bag['/joint_states'] == original
    m = len(analysis.t_ns)
    receive = t + 300_000
    n, b = model.n_joints, model.n_bodies
    shapes = {'partial': (n, b), 'acceleration': (n, b, n), 'velocity': (n, b, n),
              'gravity': (n, b), 'friction': (n,)}
    for name in ARRAYS:
        assert len(bag[f'{NODE}/{name}']) == m
        for k in (0, 1, m // 2, m - 1):
            ts, raw = bag[f'{NODE}/{name}'][k]
            assert ts == receive[k]
            values, labels = msgs.multi_array_to_numpy(deserialize_message(raw,
                                                                           Float64MultiArray))
            assert labels == msgs.ARRAY_LABELS[name] and values.shape == shapes[name]
            np.testing.assert_array_equal(values, getattr(analysis, name)[k])
    states = bag[f'{NODE}/joint_states']
    assert len(states) == m
    for k in (0, m - 1):
        expected_msg = msgs.joint_state(model.joint_names, analysis.q[k], analysis.qd[k],
                                        analysis.torque[k], t_ns=int(t[k]),
                                        frame_id=model.root_link)
        assert states[k][1] == cdr_encode(expected_msg)
    # per-body states follow the node's visualization gating (20 Hz by default)
    period, vis, last = int(1e9 / 20.0), [], 0
    for k, stamp in enumerate(analysis.t_ns.tolist()):
        if stamp - last >= period:
            vis.append(k)
            last = stamp
    assert 0 < len(vis) < m
    for i, body in enumerate(model.body_names):
        rows = bag[f'{NODE}/body/{body}']
        assert len(rows) == len(vis)
        for j in (0, -1):
            msg = deserialize_message(rows[j][1], JointState)
            assert msgs.stamp_to_ns(msg.header.stamp) == analysis.t_ns[vis[j]]
            np.testing.assert_array_equal(np.array(msg.effort),
                                          analysis.partial[vis[j]][:, i])
    names_msg = deserialize_message(bag[f'{NODE}/names'][0][1], String)
    assert msgs.parse_names(names_msg)['bodies'] == list(model.body_names)
    # per-joint components every sample, as the node publishes them: by joint name, the
    # acceleration, velocity and gravity parts add up to the joint torque
    parts = {'acceleration': analysis.acceleration.sum(axis=(2, 3)),
             'velocity': analysis.velocity.sum(axis=(2, 3)),
             'gravity': analysis.gravity.sum(axis=2), 'friction': analysis.friction}
    for name, value in parts.items():
        rows = bag[f'{NODE}/component/{name}']
        assert len(rows) == m and [ts for ts, _ in rows] == receive[:m].tolist()
        for k in (0, m // 2, m - 1):
            msg = deserialize_message(rows[k][1], JointState)
            assert msgs.stamp_to_ns(msg.header.stamp) == analysis.t_ns[k]
            assert list(msg.name) == list(model.joint_names)
            np.testing.assert_allclose(np.array(msg.effort), value[k], rtol=0, atol=1e-12)
    rigid = sum(parts[c] for c in ('acceleration', 'velocity', 'gravity'))
    np.testing.assert_allclose(rigid, analysis.torque, rtol=0, atol=1e-9)


def test_markers_and_image_follow_the_node(analysed, model):
    """Node's gating at visualization_rate_hz (20 Hz default) and the builders' bytes."""
    root, names, t, q, analysis, written = analysed
    bag, _ = _bag_messages(root / 'out' / 'bag')
    period = int(1e9 / 20.0)
    rows, last = [], 0
    for k, stamp in enumerate(analysis.t_ns.tolist()):
        if stamp - last >= period:
            rows.append(k)
            last = stamp
    markers, images = bag[f'{NODE}/markers'], bag[f'{NODE}/partial_image']
    assert len(markers) == len(images) == len(rows)
    engine = PartialLagrangian(model, dtype=torch.float64)
    builder = msgs.MarkerBuilder(model, frame_id=model.root_link)
    image = msgs.PartialImageBuilder(model.n_joints, model.n_bodies,
                                     frame_id=model.root_link)
    for j in (0, len(rows) // 2, len(rows) - 1):
        k = rows[j]
        poses = engine.link_poses(analysis.q[k]).numpy()
        values = {'torque': analysis.torque[k],
                  'acceleration': analysis.acceleration[k].sum(axis=(-1, -2)),
                  'velocity': analysis.velocity[k].sum(axis=(-1, -2)),
                  'gravity': analysis.gravity[k].sum(axis=-1),
                  'friction': analysis.friction[k]}
        want = builder.build(poses, values, t_ns=int(analysis.t_ns[k]))
        assert markers[j][1] == cdr_encode(want)
        got = deserialize_message(markers[j][1], MarkerArray)
        assert len(got.markers) == len(want.markers)
        for a, w in zip(got.markers, want.markers):
            assert (a.ns, a.id, a.header.stamp, a.header.frame_id) == \
                (w.ns, w.id, w.header.stamp, w.header.frame_id)
            np.testing.assert_allclose([[p.x, p.y, p.z] for p in a.points],
                                       [[p.x, p.y, p.z] for p in w.points], rtol=0, atol=1e-12)
        want_image = image.build(analysis.partial[k], t_ns=int(analysis.t_ns[k]))
        assert images[j][1] == cdr_encode(want_image)
        assert msgs.image_to_numpy(deserialize_message(images[j][1], Image)).shape == \
            (16 * model.n_joints, 16 * model.n_bodies, 3)


def test_csv_plots_and_summary(analysed, model):
    root, names, t, q, analysis, written = analysed
    lines = (root / 'out' / 'torques.csv').read_text().splitlines()
    header = lines[0].split(',')
    assert header[:2] == ['t_ns', 't_s']
    assert header[2:2 + model.n_joints] == [f'torque[{j}]' for j in model.joint_names]
    assert len(lines) == 1 + len(analysis.t_ns)
    first = lines[1].split(',')
    assert int(first[0]) == analysis.t_ns[0]
    np.testing.assert_allclose([float(x) for x in first[2:2 + model.n_joints]],
                               analysis.torque[0], rtol=1e-8, atol=1e-12)
    col = header.index(f'partial[{model.joint_names[1]}][{model.body_names[3]}]')
    np.testing.assert_allclose(float(lines[-1].split(',')[col]), analysis.partial[-1, 1, 3],
                               rtol=1e-8, atol=1e-12)
    for png in ('joint_torques.png', 'propagation.png', 'partial_heatmap.png',
                'own_source_propagation.png'):
        data = (root / 'out' / png).read_bytes()
        assert data[:8] == b'\x89PNG\r\n\x1a\n' and len(data) > 10_000, png
    summary = (root / 'out' / 'summary.txt').read_text()
    assert f'{COUNT} samples' in summary and 'zero-phase' in summary
    top = propagation_paths(analysis, top=1)[0]
    assert f'{model.joint_names[top[3]]} -> {model.joint_names[top[2]]}' in summary


def test_figures_from_a_child_process_equal_the_inline_ones(analysed, model, tmp_path):
    """Long recordings write the csv and figures in a forked child: same files."""
    root, *_ = analysed
    options = AnalysisOptions(progress=False, figures_process=True,
                              products=frozenset({'csv', 'plots'}))
    _, written, _ = analyze_bag(root / 'bag', tmp_path / 'out', model=model, options=options)
    assert set(written) == {'csv', 'plots'}
    assert (tmp_path / 'out' / 'torques.csv').read_bytes() == \
        (root / 'out' / 'torques.csv').read_bytes()
    for png in ('joint_torques.png', 'propagation.png', 'partial_heatmap.png',
                'own_source_propagation.png'):
        assert (tmp_path / 'out' / png).stat().st_size > 10_000, png


def test_own_source_propagation_is_pinocchio_with_one_joint_moving(model):
    """tau^p_1j(theta_j) (Gunji, Kusaka and Tanaka 2025 [MPF], figs. 8-9): with only joint j
    moving and only the links riding on joint j massive, Pinocchio's RNEA at joint 1
    without gravity is that link's velocity part (qdd = 0) or acceleration part (qd = 0).
    Float64, seeded; 1e-10."""
    import pinocchio as pin

    oracle = PinOracle(default_urdf_path().read_text(), model)
    engine = PartialLagrangian(model)
    rng = np.random.default_rng(15)
    q = rng.uniform(-1.0, 1.0, model.n_joints)
    n = model.n_joints
    for j in range(1, n):
        riding = [i for i in range(model.n_bodies) if model.body_joint[i] == j]
        pin_model = oracle.pin.copy()
        keep = {int(oracle.pin_of_ours[j]) + 1}
        for k in range(1, pin_model.njoints):
            if k not in keep:
                pin_model.inertias[k] = pin.Inertia.Zero()
        pin_model.gravity = pin.Motion.Zero()
        step = np.zeros(n)
        step[j] = rng.uniform(0.5, 2.0)
        d = engine.decompose(q, step, step).numpy()
        vel = own_source_propagation(model, d['velocity'][None], 0)[0]
        acc = own_source_propagation(model, d['acceleration'][None], 0)[0]
        expected_vel = oracle.rnea(q, step, np.zeros(n), pin_model)[0]
        expected_acc = oracle.rnea(q, np.zeros(n), step, pin_model)[0]
        assert riding, j
        assert abs(vel[j] - expected_vel) <= 1e-10, j
        assert abs(acc[j] - expected_acc) <= 1e-10, j
    with pytest.raises(ValueError, match='outside'):
        own_source_propagation(model, d['velocity'][None], n)


def test_child_process_errors_reach_the_caller():
    # private: the fork helper behind write_outputs; its error paths have no public trigger
    with pytest.raises(ZeroDivisionError):
        analyze_tool._in_child_process(divmod, 1, 0)
    with pytest.raises(RuntimeError, match='exit code 3'):
        analyze_tool._in_child_process(os._exit, 3)
    assert analyze_tool._in_child_process(divmod, 7, 2) == (3, 1)


def test_causal_equals_live_node_library_path(tmp_path, model):
    """--causal: per message, what the dynamics node computes (JointStateReader, the
    streaming estimator with config/crane_x7.yaml settings, one decompose per sample)."""
    names, t, q = _write(tmp_path / 'bag', model, storage='sqlite3', distro='humble')
    options = AnalysisOptions(causal=True, progress=False, npz_level=0,
                              products=frozenset({'bag', 'npz'}))
    analysis, written, _ = analyze_bag(tmp_path / 'bag', tmp_path / 'out', model=model,
                                    options=options)
    reader = msgs.JointStateReader(model)
    estimator = JointStateEstimator(model.n_joints, EstimatorConfig(
        cutoff_hz=10.0, order=3, rate_hz=200.0, gap_periods=5.0, velocity_source='position',
        min_spacing_periods=0.2))
    engine = PartialLagrangian(model, dtype=torch.float64)
    band = rest_band(model, EstimatorConfig())
    expected = []
    with Reader(tmp_path / 'bag') as bag:
        for _, _, raw in bag.messages():
            t_ns, qm, _, _ = reader.read(deserialize_message(bytes(raw), JointState))
            sample = estimator.update(t_ns, qm)
            if sample is not None:
                out = engine.decompose(sample.q, sample.qd, sample.qdd).numpy()
                out.update(q=sample.q, qd=sample.qd, t_ns=t_ns)
                out['friction'] = expected_friction(model, sample.qd, out['torque'], band)
                expected.append(out)
    assert len(expected) == len(analysis.t_ns) == COUNT - 4   # five-sample warm-up
    for k, want in enumerate(expected):
        assert analysis.t_ns[k] == want['t_ns']
        for name in ('q', 'qd', 'torque', 'partial', 'acceleration', 'velocity', 'gravity',
                     'friction'):
            np.testing.assert_allclose(getattr(analysis, name)[k], want[name], rtol=0,
                                       atol=TOL, err_msg=name)
    assert not (tmp_path / 'out' / 'torques.csv').exists()
    with zipfile.ZipFile(written['npz']) as zf:   # --npz-level 0: stored, still an npz
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_STORED}
    with np.load(written['npz']) as npz:
        np.testing.assert_array_equal(npz['partial'], analysis.partial)


def _cli(*args, timeout=300):
    env = dict(os.environ, PYTHONPATH=REPO, ROS_DOMAIN_ID=str(domain(DOMAIN_ID)))
    return subprocess.run([sys.executable, '-m', 'plag_ros.apps.cli', *map(str, args)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_cli_analyze_and_its_errors(tmp_path, model):
    _write(tmp_path / 'bag', model, storage='mcap', distro='jazzy')
    out = tmp_path / 'out'
    done = _cli('analyze', tmp_path / 'bag', '-o', out, '--skip', 'plots', '--skip', 'bag')
    assert done.returncode == 0, done.stderr
    assert 'RMS per component' in done.stdout and 'decompose' in done.stdout
    assert (out / 'analysis.npz').is_file() and not (out / 'bag').exists()
    stamp = (out / 'analysis.npz').stat().st_mtime_ns
    done = _cli('analyze', tmp_path / 'bag', '-o', out, '--skip', 'plots')
    assert done.returncode == 2 and 'exists; use --force' in done.stderr
    assert (out / 'analysis.npz').stat().st_mtime_ns == stamp
    done = _cli('analyze', tmp_path / 'bag', '-o', out, '--force', '--skip', 'plots',
                '--skip', 'bag', '--causal')
    assert done.returncode == 0, done.stderr
    assert 'causal' in (out / 'summary.txt').read_text()
    (tmp_path / 'notes.txt').write_text('x')
    done = _cli('analyze', tmp_path / 'notes.txt', '-o', tmp_path / 'o2')
    assert done.returncode == 2 and 'not a rosbag2 bag' in done.stderr
    assert not (tmp_path / 'o2').exists()


def test_output_inside_input_and_existing_output_are_refused(tmp_path, model):
    _write(tmp_path / 'bag', model)
    with pytest.raises(Exception, match='overwrite the input bag'):
        analyze_bag(tmp_path / 'bag', tmp_path / 'bag' / 'out', model=model)
    (tmp_path / 'out').mkdir()
    with pytest.raises(OutputExistsError):
        analyze_bag(tmp_path / 'bag', tmp_path / 'out', model=model)


def test_compact_npz_reads_back_as_the_dense_one(analysed, model, tmp_path):
    """`--npz-layout compact` keeps the tree's non-zero entries and their index maps:
    load_analysis gives the very arrays of the dense file. Deflate already squeezes the
    dense zeros (compact about 6 % smaller at level 1); stored uncompressed the tables
    shrink to 0.39 of their size."""
    root, *_ = analysed
    sizes = {}
    for layout in ('dense', 'compact'):
        for level in (0, 1):
            options = AnalysisOptions(chunk=64, progress=False, products=frozenset({'npz'}),
                                      npz_layout=layout, npz_level=level)
            out = tmp_path / f'{layout}{level}'
            _, written, _ = analyze_bag(root / 'bag', out, model=model, options=options)
            sizes[layout, level] = written['npz'].stat().st_size
    dense = load_analysis(root / 'out' / 'analysis.npz')
    for layout, level in sizes:
        loaded = load_analysis(tmp_path / f'{layout}{level}' / 'analysis.npz')
        assert set(loaded) == set(dense)
        assert all(np.array_equal(loaded[k], dense[k]) for k in dense), (layout, level)
    assert sizes['compact', 1] < sizes['dense', 1]
    assert sizes['compact', 0] < 0.6 * sizes['dense', 0]
    with pytest.raises(ValueError, match='npz_layout'):
        AnalysisOptions(npz_layout='sparse')


def test_output_rate_decimates_like_the_node(tmp_path, model):
    """--output-rate-hz: the node's rule (estimator sees every sample, outputs at most the
    rate in stamp time, phase kept), written independently here."""
    _write(tmp_path / 'bag', model)
    analysis, _, _ = analyze_bag(tmp_path / 'bag', tmp_path / 'out', model=model,
                              options=AnalysisOptions(causal=True, output_rate_hz=60.0,
                                                      progress=False,
                                                      products=frozenset({'bag'})))
    reader = msgs.JointStateReader(model)
    estimator = JointStateEstimator(model.n_joints, EstimatorConfig())
    engine = PartialLagrangian(model, dtype=torch.float64)
    period, due, kept = int(1e9 / 60.0), 0, []
    with Reader(tmp_path / 'bag') as bag:
        for _, _, raw in bag.messages():
            t_ns, qm, _, _ = reader.read(deserialize_message(bytes(raw), JointState))
            sample = estimator.update(t_ns, qm)
            if sample is None or t_ns < due:
                continue
            due = due + period if due + period > t_ns else t_ns + period
            kept.append((t_ns, engine.decompose(sample.q, sample.qd, sample.qdd).numpy()))
    assert 0.2 * COUNT < len(kept) < 0.4 * COUNT
    np.testing.assert_array_equal(analysis.t_ns, [t for t, _ in kept])
    for k, (_, want) in enumerate(kept):
        np.testing.assert_allclose(analysis.partial[k], want['partial'], rtol=0, atol=TOL)
    out, _ = _bag_messages(tmp_path / 'out' / 'bag')
    assert len(out[f'{NODE}/partial']) == len(kept)
