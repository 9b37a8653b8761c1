"""The partial Lagrangian engine against Pinocchio, closed forms and physics identities.

Tolerances: float64 results must agree with Pinocchio and between our two paths to
``RTOL = 1e-10`` relative to the largest magnitude in the compared table (absolute floor
1e-12), i.e. to rounding; float32 to ``F32_RTOL`` = 64 float32 epsilons relative (why: at
its definition). The torch form (float32 and GPU path) is checked as such: against the
compiled loop to RTOL in float64, in float32 against float64, and over batches longer
than its chunk size.
"""
from __future__ import annotations

import re

import numpy as np
import pinocchio as pin
import pytest
import torch
from pin_oracle import PathForest, PinOracle
from robots import planar_arm, serial_chain, two_arm_torso

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

RTOL = 1e-10
G = 9.81


def assert_close(actual, expected, *, rtol=RTOL, what=''):
    actual = np.asarray(actual.detach().cpu() if torch.is_tensor(actual) else actual)
    expected = np.asarray(expected.detach().cpu() if torch.is_tensor(expected) else expected)
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    scale = max(np.abs(expected).max(initial=0.0), 1.0)
    err = np.abs(actual - expected).max(initial=0.0)
    assert err <= rtol * scale + 1e-12, f'{what}: max error {err:.3e} (scale {scale:.3e})'


ROBOTS = {
    'crane_x7': lambda: default_urdf_path().read_text(),
    'serial10': lambda: serial_chain(seed=3, n=10),
    'two_arm_torso': lambda: two_arm_torso(seed=5),
}


@pytest.fixture(scope='module', params=list(ROBOTS))
def robot(request):
    xml = ROBOTS[request.param]()
    model = RobotModel.from_urdf(xml)
    return model, PartialLagrangian(model), PinOracle(xml, model)


def random_states(model, count, seed=0):
    rng = np.random.default_rng(seed)
    n = model.n_joints
    return (rng.uniform(-2.0, 2.0, (count, n)), rng.uniform(-3.0, 3.0, (count, n)),
            rng.uniform(-10.0, 10.0, (count, n)))


def test_torque_equals_pinocchio_rnea(robot):
    model, engine, oracle = robot
    q, qd, qdd = random_states(model, 8)
    out = engine.decompose(q, qd, qdd)
    for b in range(len(q)):
        assert_close(out.torque[b], oracle.rnea(q[b], qd[b], qdd[b]), what='torque')


def test_each_column_is_rnea_of_that_body_alone(robot):
    model, engine, oracle = robot
    q, qd, qdd = random_states(model, 3, seed=1)
    out = engine.decompose(q, qd, qdd)
    for i in range(model.n_bodies):
        alone = oracle.single_body(i)
        for b in range(len(q)):
            assert_close(out.partial[b, :, i], oracle.rnea(q[b], qd[b], qdd[b], alone),
                         what=f'column {model.body_names[i]}')


def test_split_matches_pinocchio_mass_matrix_and_rnea_derivatives(robot):
    """acceleration[k,i,s] = M_i[k,s] qdd_s and velocity = 1/2 dtau_i/dqd[k,s] qd_s, entrywise."""
    model, engine, oracle = robot
    q, qd, qdd = random_states(model, 2, seed=2)
    out = engine.decompose(q, qd, qdd)
    for i in range(model.n_bodies):
        alone = oracle.single_body(i)
        for b in range(len(q)):
            M_i = oracle.crba(q[b], alone)
            assert_close(out.acceleration[b, :, i], M_i * qdd[b], what='acceleration')
            dtau = oracle.dtau_dqd(q[b], qd[b], qdd[b], alone)
            assert_close(out.velocity[b, :, i], 0.5 * dtau * qd[b], what='velocity')
            gravity = oracle.rnea(q[b], 0 * qd[b], 0 * qdd[b], alone)
            assert_close(out.gravity[b, :, i], gravity, what='gravity column')


def test_gravity_equals_rnea_at_rest_and_velocity_part_is_the_bias(robot):
    model, engine, oracle = robot
    q, qd, qdd = random_states(model, 4, seed=3)
    out = engine.decompose(q, qd, qdd)
    zero = np.zeros(model.n_joints)
    for b in range(len(q)):
        g = oracle.rnea(q[b], zero, zero)
        assert_close(out.gravity[b].sum(-1), g, what='gravity')
        assert_close(engine.gravity_torque(q[b]), g, what='gravity_torque')
        bias = oracle.rnea(q[b], qd[b], zero)
        assert_close(out.velocity[b].sum((-1, -2)), bias - g, what='velocity part')
        assert_close(engine.bias(q[b], qd[b]), bias, what='bias')
        assert_close(engine.mass_matrix(q[b]), oracle.crba(q[b]), what='mass matrix')


def test_autograd_path_equals_fast_path(robot):
    model, engine, _ = robot
    q, qd, qdd = random_states(model, 3, seed=4)
    fast = engine.decompose(q, qd, qdd)
    slow = engine.decompose_autograd(q, qd, qdd)
    for field in ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction'):
        assert_close(getattr(slow, field), getattr(fast, field), what=field)


def test_autograd_parts_sum_to_partial_and_columns_to_torque(robot):
    """Identities on the autograd path, whose parts are computed independently."""
    model, engine, oracle = robot
    q, qd, qdd = random_states(model, 3, seed=5)
    out = engine.decompose_autograd(q, qd, qdd)
    parts = out.acceleration.sum(-1) + out.velocity.sum(-1) + out.gravity
    assert_close(parts, out.partial, what='parts sum')
    for b in range(len(q)):
        assert_close(out.partial[b].sum(-1), oracle.rnea(q[b], qd[b], qdd[b]), what='sum')


def test_zero_pattern_follows_the_tree(robot):
    """Body i loads only joints on its path to the root; only those joints are sources."""
    model, engine, _ = robot
    q, qd, qdd = random_states(model, 2, seed=6)
    out = engine.decompose(q, qd, qdd)
    n = model.n_joints
    on_path = np.zeros((model.n_bodies, n), bool)
    for i, j in enumerate(model.body_joint):
        while j >= 0:
            on_path[i, j] = True
            j = model.joint_parent[j]
    loaded = out.partial.abs().amax(0).numpy() > 0
    np.testing.assert_array_equal(loaded, on_path.T)
    acc = out.acceleration.abs().amax(0).numpy() > 0
    np.testing.assert_array_equal(acc, on_path.T[:, :, None] & on_path[None, :, :])
    if model.name == 'crane_x7':
        # A serial arm plus two fingers: the arm part of the table is upper triangular and
        # no finger loads the other finger's joint (the branch blocks of Kusaka and Tanaka
        # 2025 [PTT]).
        arm = loaded[:7, :7]
        np.testing.assert_array_equal(arm, np.triu(np.ones((7, 7), bool)))
        assert not loaded[7, 8] and not loaded[8, 7]


def test_batched_equals_looped_and_batch_shapes(robot):
    model, engine, _ = robot
    q, qd, qdd = random_states(model, 6, seed=7)
    batched = engine.decompose(q.reshape(2, 3, -1), qd.reshape(2, 3, -1), qdd.reshape(2, 3, -1))
    n, B = model.n_joints, model.n_bodies
    assert batched.velocity.shape == (2, 3, n, B, n)
    assert batched.gravity.shape == (2, 3, n, B)
    for b in range(6):
        single = engine.decompose(q[b], qd[b], qdd[b])
        assert single.partial.shape == (n, B)
        assert_close(batched.partial.reshape(6, n, B)[b], single.partial, what='partial')
        assert_close(batched.velocity.reshape(6, n, B, n)[b], single.velocity, what='velocity')


@pytest.mark.parametrize('dtype', [torch.float64, torch.float32])
def test_torch_form_chunks_long_batches(robot, monkeypatch, dtype):
    """The torch form (float32 and GPU path) splits batches longer than ``chunk_size`` into
    chunks; the chunked result must equal one pass over the whole batch, row for row.

    Runs the torch form explicitly (``compiled=False``): the compiled loop ignores
    ``chunk_size``. A small chunk size on the instance keeps the test fast; the number of
    closed-form passes shows the chunk branch ran (3 full chunks and a remainder).
    """
    from plag_ros.core.dynamics import torch_form

    model = robot[0]
    chunked = PartialLagrangian(model, dtype=dtype, compiled=False)
    chunked.chunk_size = 16
    whole = PartialLagrangian(model, dtype=dtype, compiled=False)
    whole.chunk_size = 10_000
    assert not chunked.compiled and not whole.compiled
    q, qd, qdd = random_states(model, 3 * 16 + 5, seed=8)
    passes = []
    closed_form = torch_form.closed_form

    def counting(c, *args, **kwargs):
        passes.append(args[0].shape[0])
        return closed_form(c, *args, **kwargs)

    monkeypatch.setattr(torch_form, 'closed_form', counting)
    out = chunked.decompose(q, qd, qdd)
    assert passes == [16, 16, 16, 5], passes
    passes.clear()
    ref = whole.decompose(q, qd, qdd)
    assert passes == [53]
    for field in ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction'):
        a, b = getattr(out, field), getattr(ref, field)
        assert a.dtype == dtype and a.shape == b.shape
        # the same arithmetic on the same rows: equal to the last bit
        assert torch.equal(a, b), field
    # and the default chunk size, above which the node-sized batches of analyze run
    long = PartialLagrangian(model, dtype=dtype, compiled=False)
    N = long.chunk_size + 37
    q, qd, qdd = random_states(model, N, seed=18)
    passes.clear()
    out = long.decompose(q, qd, qdd)
    assert passes == [long.chunk_size, 37]
    tail = long.decompose(q[-37:], qd[-37:], qdd[-37:])
    assert torch.equal(out.velocity[-37:], tail.velocity)
    assert torch.equal(out.torque[-37:], tail.torque)


# float32 tolerance, relative to the largest entry of each table: 64 float32 epsilons
# (7.6e-6). The closed form composes up to ~10 rigid transforms down a chain and sums
# O(n) products per entry, so a few epsilons of relative error are expected; measured on
# these three robots over 2000 samples the worst field was 6.5e-7 (5.4 eps, the velocity
# table of two_arm_torso), so the bound has a 10x margin and still fails on any
# formula or indexing error (those are O(1) relative).
F32_RTOL = 64 * torch.finfo(torch.float32).eps


def test_float32_within_tolerance(robot):
    """The float32 torch form (the GPU path) against the float64 compiled loop on the same
    (float32-rounded) inputs, over a batch longer than ``chunk_size`` so the chunked
    branch is part of what is checked."""
    model, engine, _ = robot
    f32 = PartialLagrangian(model, dtype=torch.float32)
    assert not f32.compiled
    q, qd, qdd = (x.astype(np.float32) for x in random_states(model, f32.chunk_size + 88,
                                                              seed=9))
    ref = engine.decompose(q.astype(np.float64), qd.astype(np.float64),
                           qdd.astype(np.float64))
    out = f32.decompose(q, qd, qdd)
    for field in ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction'):
        got = getattr(out, field)
        assert got.dtype == torch.float32
        expected = getattr(ref, field)
        scale = float(expected.abs().max())
        err = float((got.double() - expected).abs().max())
        assert err <= F32_RTOL * scale, f'float32 {field}: {err:.2e} of {scale:.2e}'


def test_friction_is_viscous_plus_coulomb_and_not_in_torque():
    xml = serial_chain(seed=2, n=4)
    model = RobotModel.from_urdf(xml)
    engine = PartialLagrangian(model)
    qd = np.array([0.5, -2.0, 0.0, 1e-3])
    expected = model.damping * qd + model.friction * np.sign(qd)
    assert_close(engine.friction_torque(qd), expected, what='friction')
    smooth = engine.friction_torque(qd, smoothing=0.01).numpy()
    assert_close(smooth, model.damping * qd + model.friction * np.tanh(qd / 0.01),
                 what='smoothed friction')
    assert np.abs(expected).max() > 0.1       # friction is not negligible here
    q = np.array([0.3, -0.1, 0.7, -1.2])
    qdd = np.array([1.0, -2.0, 0.5, 3.0])
    # torque is the Lagrangian part only: Pinocchio's RNEA ignores the URDF <dynamics>
    # damping and friction, so it is an independent frictionless reference.
    oracle = PinOracle(xml, model)
    frictionless = oracle.rnea(q, qd, qdd)
    for compiled in (True, False):
        out = PartialLagrangian(model, compiled=compiled).decompose(q, qd, qdd)
        assert_close(out.friction, expected, what='reported friction')
        assert_close(out.torque, frictionless, what='torque excludes friction')


# --------------------------------------------------------------------------- closed form
TABLE2 = dict(l=0.25, lg=0.125, m=0.6, I=5.0e-3)  # Gunji, Kusaka and Tanaka 2025 [MPF], Table 2


def planar_two_link_closed_form(q, qd, qdd, l1, lc1, lc2, m1, m2, I1, I2):
    """Partial Lagrangian split of a vertical-plane 2R arm, derived by hand.

    Joints rotate about +y, links lie along +x at q = 0, so the height of a point at
    distance r along link 1 is -r sin(q1); gravity -z. With h = m2 l1 lc2 sin(q2):
      partial[0,0] = (m1 lc1^2 + I1) qdd1 - m1 g lc1 cos q1
      partial[0,1] = [m2 (l1^2 + lc2^2 + 2 l1 lc2 cos q2) + I2] qdd1
                     + [m2 (lc2^2 + l1 lc2 cos q2) + I2] qdd2
                     - h (2 qd1 qd2 + qd2^2) - m2 g (l1 cos q1 + lc2 cos(q1 + q2))
      partial[1,1] = [m2 (lc2^2 + l1 lc2 cos q2) + I2] qdd1 + (m2 lc2^2 + I2) qdd2
                     + h qd1^2 - m2 g lc2 cos(q1 + q2)
    and the velocity parts by source: 1/2 d/dqd_s (c) qd_s of each quadratic form c.
    """
    q1, q2 = q
    d1, d2 = qd
    c2, h = np.cos(q2), m2 * l1 * lc2 * np.sin(q2)
    acc = np.zeros((2, 2, 2))
    vel = np.zeros((2, 2, 2))
    grav = np.zeros((2, 2))
    acc[0, 0, 0] = (m1 * lc1 ** 2 + I1) * qdd[0]
    acc[0, 1] = [(m2 * (l1 ** 2 + lc2 ** 2 + 2 * l1 * lc2 * c2) + I2) * qdd[0],
                 (m2 * (lc2 ** 2 + l1 * lc2 * c2) + I2) * qdd[1]]
    acc[1, 1] = [(m2 * (lc2 ** 2 + l1 * lc2 * c2) + I2) * qdd[0],
                 (m2 * lc2 ** 2 + I2) * qdd[1]]
    vel[0, 1] = [-h * d1 * d2, -h * (d1 + d2) * d2]
    vel[1, 1] = [h * d1 ** 2, 0.0]
    grav[0, 0] = -m1 * G * lc1 * np.cos(q1)
    grav[0, 1] = -m2 * G * (l1 * np.cos(q1) + lc2 * np.cos(q1 + q2))
    grav[1, 1] = -m2 * G * lc2 * np.cos(q1 + q2)
    return acc, vel, grav


@pytest.mark.parametrize('path', ['decompose', 'decompose_autograd'])
def test_planar_two_link_closed_form(path):
    p = TABLE2
    model = RobotModel.from_urdf(planar_arm([p['l']] * 2, [p['lg']] * 2, [p['m']] * 2,
                                            [p['I']] * 2))
    engine = PartialLagrangian(model)
    rng = np.random.default_rng(11)
    for _ in range(5):
        q, qd, qdd = rng.uniform(-3, 3, 2), rng.uniform(-4, 4, 2), rng.uniform(-20, 20, 2)
        out = getattr(engine, path)(q, qd, qdd)
        acc, vel, grav = planar_two_link_closed_form(
            q, qd, qdd, p['l'], p['lg'], p['lg'], p['m'], p['m'], p['I'], p['I'])
        assert_close(out.acceleration, acc, what='acceleration')
        assert_close(out.velocity, vel, what='velocity')
        assert_close(out.gravity, grav, what='gravity')
        assert_close(out.partial, acc.sum(-1) + vel.sum(-1) + grav, what='partial')


# --------------------------------------------------------------------------- payloads
def test_payload_adds_one_column_and_matches_pinocchio_appended_body():
    xml = default_urdf_path().read_text()
    model = RobotModel.from_urdf(xml)
    oracle = PinOracle(xml, model)
    rng = np.random.default_rng(12)
    com = np.array([0.01, -0.02, 0.05])
    A = rng.normal(size=(3, 3))
    inertia = 1e-4 * (A @ A.T + 3 * np.eye(3))
    loaded = model.with_payload('tool', link='crane_x7_gripper_base_link', mass=0.3,
                                com=com, inertia=inertia)
    assert loaded.n_bodies == model.n_bodies + 1 and loaded.body_names[-1] == 'tool'
    assert model.n_bodies == 9  # the original is untouched (frozen)

    wrist = int(oracle.pin_of_ours[model.joint_index(['crane_x7_wrist_joint'])[0]]) + 1
    pm = oracle.pin.copy()
    pm.appendBodyToJoint(wrist, pin.Inertia(0.3, com, inertia), pin.SE3.Identity())
    q, qd, qdd = random_states(model, 3, seed=13)
    out = PartialLagrangian(loaded).decompose(q, qd, qdd)
    for b in range(3):
        assert_close(out.torque[b], oracle.rnea(q[b], qd[b], qdd[b], pm), what='payload')


def test_extension_and_reconstruction_reuse_unchanged_columns(monkeypatch):
    model = RobotModel.from_urdf(default_urdf_path())
    q, qd, qdd = random_states(model, 5, seed=14)
    base = PartialLagrangian(model).decompose(q, qd, qdd)

    loaded = model.with_payload('tool', link='crane_x7_gripper_base_link', mass=0.25,
                                com=[0.0, 0.0, 0.06], inertia=np.diag([2e-4, 2e-4, 1e-4]))
    engine = PartialLagrangian(loaded)
    computed = []
    original = engine.columns

    def spy(q_, qd_, qdd_, bodies):
        computed.append(list(np.asarray(bodies)))
        return original(q_, qd_, qdd_, bodies)

    monkeypatch.setattr(engine, 'columns', spy)
    extended = engine.extend(base, model, q, qd, qdd)
    assert computed == [[9]], 'only the new body column is computed'
    full = PartialLagrangian(loaded).decompose(q, qd, qdd)
    for field in ('torque', 'partial', 'acceleration', 'velocity', 'gravity'):
        assert_close(getattr(extended, field), getattr(full, field), what=f'extend {field}')
    # reused columns are the previous tensors' values, bit for bit
    assert torch.equal(extended.partial[..., :9], base.partial)

    heavier = loaded.with_body('tool', mass=0.5, com=[0.0, 0.01, 0.06],
                               inertia=np.diag([3e-4, 3e-4, 1e-4]))
    engine2 = PartialLagrangian(heavier)
    computed.clear()
    original2 = engine2.columns
    monkeypatch.setattr(engine2, 'columns',
                        lambda *a: computed.append(list(np.asarray(a[3]))) or original2(*a))
    rebuilt = engine2.extend(full, loaded, q, qd, qdd)
    assert computed == [[9]]
    assert_close(rebuilt.partial, PartialLagrangian(heavier).decompose(q, qd, qdd).partial,
                 what='reconstruction')


# --------------------------------------------------------------------------- bad input
@pytest.fixture(scope='module')
def crane():
    return PartialLagrangian(RobotModel.from_urdf(default_urdf_path()))


@pytest.mark.parametrize('shape', [(8,), (3, 10), ()])
def test_wrong_shapes_raise(crane, shape):
    bad = np.zeros(shape)
    with pytest.raises(ValueError, match=r'shape \(\.\.\., 9\)'):
        crane.decompose(bad, np.zeros(9), np.zeros(9))


def test_non_broadcasting_batches_raise(crane):
    with pytest.raises(ValueError, match='broadcast'):
        crane.decompose(np.zeros((3, 9)), np.zeros((4, 9)), np.zeros(9))


@pytest.mark.parametrize('value', [np.nan, np.inf, -np.inf])
def test_non_finite_input_names_the_joint(crane, value):
    qd = np.zeros((2, 9))
    qd[1, 4] = value
    with pytest.raises(ValueError, match='qd is not finite.*crane_x7_lower_arm_fixed_part_joint'):
        crane.decompose(np.zeros(9), qd, np.zeros(9))


def test_bad_payloads_raise():
    model = RobotModel.from_urdf(default_urdf_path())
    ok = dict(mass=0.1, com=[0, 0, 0], inertia=np.eye(3) * 1e-5)
    with pytest.raises(ValueError, match="unknown link 'nowhere'"):
        model.with_payload('p', link='nowhere', **ok)
    with pytest.raises(ValueError, match='fixed to the root'):
        model.with_payload('p', link='base_link', **ok)
    with pytest.raises(ValueError, match='already exists'):
        model.with_payload('crane_x7_wrist_link', link='crane_x7_wrist_link', **ok)
    with pytest.raises(ValueError, match='positive definite'):
        model.with_payload('p', link='crane_x7_wrist_link', mass=0.1, com=[0, 0, 0],
                           inertia=np.diag([1e-5, -1e-5, 1e-5]))
    with pytest.raises(ValueError, match='mass must be positive'):
        model.with_payload('p', link='crane_x7_wrist_link', mass=0.0, com=[0, 0, 0],
                           inertia=np.eye(3))
    with pytest.raises(ValueError, match='com is not finite'):
        model.with_payload('p', link='crane_x7_wrist_link', mass=0.1, com=[0, np.nan, 0],
                           inertia=np.eye(3))
    with pytest.raises(ValueError, match="unknown body 'ghost'"):
        model.with_body('ghost', **ok)


def test_single_sample_arrays_equal_the_general_path(robot, monkeypatch):
    """decompose_arrays of one (n,) float64 sample skips the numpy engine's prepare; same
    numbers, same errors; other inputs still go the general way."""
    model, engine, _ = robot
    reference = PartialLagrangian(model, compiled=False)
    q, qd, qdd = random_states(model, 5, seed=21)
    n = model.n_joints
    expected = [reference.decompose(q[i], qd[i], qdd[i]).numpy() for i in range(5)]
    # private: the test is about skipping this internal step, so it spies on it
    general = engine.arrays.prepare

    def no_prepare(**arrays):
        raise AssertionError('a finite (n,) float64 sample went through prepare')

    monkeypatch.setattr(engine.arrays, 'prepare', no_prepare)
    for i in range(5):
        strided = np.stack([qd[i], qd[i]], axis=1)[:, 0]      # (n,) but not contiguous
        got = engine.decompose_arrays(q[i], strided, qdd[i])
        assert set(got) == set(expected[i])
        for field, value in expected[i].items():
            assert got[field].shape == value.shape
            assert_close(got[field], value, what=field)
    monkeypatch.setattr(engine.arrays, 'prepare', general)
    bad = qdd[0].copy()
    bad[n - 1] = np.inf
    with pytest.raises(ValueError, match=re.escape(f'qdd is not finite for joints '
                                                   f'{[model.joint_names[-1]]}')):
        engine.decompose_arrays(q[0], qd[0], bad)
    for other in (q[0].astype(np.float32), list(q[0]), q[:1]):
        got = engine.decompose_arrays(other, qd[0], qdd[0])
        assert_close(got['torque'].reshape(n), expected[0]['torque'], rtol=1e-5,
                     what=type(other).__name__)


def test_compiled_loop_equals_torch_form(robot):
    """float64 on the CPU runs the compiled loop; it must equal the torch array form, for a
    single sample, a batch split over threads, a column subset and the mass matrix."""
    model, engine, _ = robot
    reference = PartialLagrangian(model, compiled=False)
    q, qd, qdd = random_states(model, 200, seed=15)
    threads = torch.get_num_threads()
    for batch, workers in ((slice(0, 1), 1), (slice(0, 200), 1), (slice(0, 200), 2)):
        torch.set_num_threads(workers)                # the loop takes torch's thread count
        try:
            fast = engine.decompose(q[batch], qd[batch], qdd[batch])
        finally:
            torch.set_num_threads(threads)
        slow = reference.decompose(q[batch], qd[batch], qdd[batch])
        for field in ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction'):
            assert getattr(fast, field).dtype == torch.float64
            assert_close(getattr(fast, field), getattr(slow, field), what=field)
    bodies = [model.n_bodies - 1, 0]
    assert_close(engine.columns(q, qd, qdd, bodies).velocity,
                 reference.columns(q, qd, qdd, bodies).velocity, what='column subset')
    M, bias = engine.mass_matrix_and_bias(q[:7], qd[:7])
    M2, bias2 = reference.mass_matrix_and_bias(q[:7], qd[:7])
    assert_close(M, M2, what='mass matrix')
    assert_close(bias, bias2, what='bias')
    assert_close(engine.link_poses(q[:5].reshape(5, 1, -1)),
                 reference.link_poses(q[:5].reshape(5, 1, -1)), what='link poses')


@pytest.mark.parametrize('name', ['crane_x7', 'chain12'])
def test_every_table_equals_pinocchio_path_forest(name):
    """Pinocchio's one-call equivalent of the split (each body on its own copy of its root
    path, one computeRNEADerivatives): torque, partial, acceleration, velocity and gravity
    tables equal ours to 1e-10 on seeded random float64 states."""
    xml = default_urdf_path().read_text() if name == 'crane_x7' else serial_chain(seed=3, n=12)
    model = RobotModel.from_urdf(xml)
    forest = PathForest(PinOracle(xml, model))
    engine = PartialLagrangian(model, dtype=torch.float64)
    rng = np.random.default_rng(1717)
    for _ in range(5):
        q, qd, qdd = (rng.uniform(-2.0, 2.0, model.n_joints) for _ in range(3))
        ours = engine.decompose_arrays(q, qd, qdd)
        for field, value in forest.tables(q, qd, qdd).items():
            np.testing.assert_allclose(ours[field], value, rtol=0, atol=1e-10, err_msg=field)
