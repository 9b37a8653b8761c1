"""Friction reported honestly at rest (plag_ros.core.estimation.friction): the band against the
estimator, the rule on hand-made cases, and the stick reaction against the simulator's own.

References: the live estimator itself (the band must bound what it makes of a still
joint's encoder flicker, and be reached), the rule written out in friction_rule.py, and
the simulator's exact stick-slip friction (plag_ros.core.simulation.simulator solves it as a
set-valued law), which the analysis must recover from the positions and efforts the servos report.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from friction_rule import expected_friction
from scipy import signal

from plag_ros.core.control.stability import velocity_filter
from plag_ros.core.decomposition.analysis import AnalysisOptions, analyze_arrays
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator
from plag_ros.core.estimation.friction import (
    FRICTION_STATES,
    SLIDING,
    STICK,
    UNRESOLVED,
    RestFriction,
    effort_scale,
    own_effort_joints,
    report_friction,
    rest_band,
)
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

COUNT = 2.0 * math.pi / 4096.0     # CRANE-X7 encoder step [rad]
RATE_HZ = 200.0


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _estimate(config: EstimatorConfig, q: np.ndarray, qd: np.ndarray | None = None
              ) -> np.ndarray:
    """The live estimator's velocity (samples, joints) on a 200 Hz grid; NaN in warm-up."""
    estimator = JointStateEstimator(q.shape[1], config)
    out = np.full(q.shape, np.nan)
    for k in range(len(q)):
        sample = estimator.update(k * 5_000_000, q[k], None if qd is None else qd[k])
        if sample is not None:
            out[k] = sample.qd
    return out


@pytest.mark.parametrize('cutoff_hz, order', [(10.0, 3), (10.0, 2), (15.0, 3), (5.0, 1)])
def test_band_bounds_the_estimate_of_a_still_joint_and_is_reached(model, cutoff_hz, order):
    """Readings within half a count of a constant (two neighbouring counts): the estimate
    stays inside the band, and the worst such sequence, the sign pattern of the impulse
    response, reaches it (so the band is the bound, not a loose one)."""
    config = EstimatorConfig(cutoff_hz=cutoff_hz, order=order, rate_hz=RATE_HZ)
    band = rest_band(model, config)[0]
    b, a = velocity_filter(config)
    impulse = np.zeros(600)
    impulse[0] = 1.0
    h = signal.lfilter(b, a, impulse)
    rng = np.random.default_rng(3)
    still, worst = 300, h.size
    base = 0.3 + 0.5 * COUNT           # halfway between two counts
    random = base + COUNT * (rng.integers(0, 2, (still + worst, 1)) - 0.5)
    adversarial = np.full((still + worst, 1), base)
    # v_N = sum_j h_j q_{N-j}: q_{N-j} = base + COUNT/2 sign(h_j) makes every term add up
    adversarial[still:, 0] += 0.5 * COUNT * np.sign(h[::-1])
    adversarial[:still, 0] = base - 0.5 * COUNT   # a still past: the filter has settled
    flicker = _estimate(config, np.vstack([random, adversarial]))
    settled = flicker[still:]         # past the warm-up and the filter's memory
    assert np.nanmax(np.abs(settled)) <= band * (1 + 1e-9)
    assert abs(flicker[-1, 0]) >= 0.99 * band, (flicker[-1, 0], band)
    print(f'\n[{cutoff_hz:g} Hz, order {order}] band {band:.4f} rad/s, random flicker '
          f'max {np.nanmax(np.abs(settled[:worst])):.4f}, worst case {abs(flicker[-1, 0]):.4f}')


def test_band_of_a_slow_high_order_filter_bounds_its_estimate(model):
    """Order 8 at 1 Hz: the band comes from the filter's sections (a single polynomial of
    that filter has lost its precision) and still bounds the live estimate of flicker."""
    config = EstimatorConfig(cutoff_hz=1.0, order=8, rate_hz=RATE_HZ)
    band = rest_band(model, config)[0]
    assert 0.0 < band < rest_band(model, EstimatorConfig(rate_hz=RATE_HZ))[0]
    rng = np.random.default_rng(4)
    count = 6000                       # 30 s: the filter's memory is about 10 s
    q = 0.3 + 0.5 * COUNT + COUNT * (rng.integers(0, 2, (count, 1)) - 0.5)
    q[:2000] = 0.3                     # a still past
    flicker = _estimate(config, q)
    assert np.nanmax(np.abs(flicker[2000:])) <= band


def test_band_follows_the_velocity_source_and_resolution(model):
    config = EstimatorConfig(rate_hz=RATE_HZ)
    band = rest_band(model, config)
    assert band.shape == (model.n_joints,)
    assert band[0] == pytest.approx(0.0445, abs=5e-4)     # README figure, 10 Hz order 3
    assert rest_band(model, config, position_resolution=2 * COUNT)[0] == \
        pytest.approx(2 * band[0], rel=1e-12)
    measured = EstimatorConfig(rate_hz=RATE_HZ, velocity_source='measured')
    # The low-pass alone on a velocity that flickers by one 0.024 rad/s step: its l1 gain
    # is at least 1 (unit DC gain), so the band is at least half a step.
    vband = rest_band(model, measured)[0]
    assert 0.5 * 0.02398 <= vband <= 2 * 0.02398
    qd = 0.5 * 0.02398 * np.sign(np.random.default_rng(1).standard_normal((500, 1)))
    est = _estimate(measured, np.zeros((500, 1)), qd)
    assert np.nanmax(np.abs(est[100:])) <= vband * (1 + 1e-9)
    with pytest.raises(ValueError, match='resolutions'):
        rest_band(model, config, position_resolution=0.0)


def test_rule_on_hand_made_cases():
    band = np.full(4, 0.05)
    coulomb = np.array([0.2, 0.2, 0.2, 0.0])
    qd = np.array([[0.3, 0.01, -0.02, 0.01],     # sliding, at rest x2, no Coulomb
                   [-0.3, 0.05, 0.0, 0.0]])
    model_value = 1e-3 * qd + coulomb * np.sign(qd)
    # no effort: at rest is unresolved and reported as 0
    got, state = report_friction(model_value, qd, band, coulomb)
    assert state.tolist() == [[SLIDING, UNRESOLVED, UNRESOLVED, SLIDING],
                              [SLIDING, UNRESOLVED, UNRESOLVED, SLIDING]]
    np.testing.assert_array_equal(got, [[model_value[0, 0], 0, 0, model_value[0, 3]],
                                        [model_value[1, 0], 0, 0, 0]])
    # effort: the reaction, clipped to +-f; NaN means no measurement for that joint
    reaction = np.array([[9.0, 0.07, -0.5, 1.0],
                         [9.0, np.nan, 0.19, 1.0]])
    buffer = model_value.copy()
    got, state = report_friction(buffer, qd, band, coulomb, reaction=reaction, out=buffer)
    assert got is buffer
    assert state.tolist() == [[SLIDING, STICK, STICK, SLIDING],
                              [SLIDING, UNRESOLVED, STICK, SLIDING]]
    np.testing.assert_array_equal(got, [[model_value[0, 0], 0.07, -0.2, model_value[0, 3]],
                                        [model_value[1, 0], 0.0, 0.19, 0.0]])
    assert FRICTION_STATES[STICK] == 'stick'


def test_effort_of_its_own_only_where_no_mimic_shares_the_drive(model):
    own = own_effort_joints(model)
    fingers = [k for k, name in enumerate(model.joint_names) if 'finger' in name]
    assert not own[fingers].any() and own.sum() == model.n_joints - 2
    scale = effort_scale(model)
    arm = [k for k in range(model.n_joints) if k not in fingers]
    np.testing.assert_allclose(
        scale[arm], motors.effort_to_torque([model.joint_names[k] for k in arm]), rtol=0,
        atol=0)
    assert np.isnan(scale[fingers]).all()


def _simulate(model, seconds: float = 3.0):
    """The simulated arm held by its servos with one joint (the wrist) swinging: every
    sample's quantised positions, driver-unit efforts (model order, NaN for the mimic
    finger) and the simulator's exact friction on each actuated joint."""
    sim = Simulator(model, SimulatorConfig(quantize_position=True))
    actuated = np.flatnonzero(model.actuated)
    names = [model.joint_names[k] for k in actuated]
    wrist = names.index('crane_x7_wrist_joint')
    q0 = np.array([0.2, 0.6, 0.0, -1.4, 0.0, -0.5, 0.0, 0.0])
    sim.reset(q0)
    to_driver = 1.0 / motors.effort_to_torque(names)
    steps = int(seconds * RATE_HZ)
    t_ns = np.arange(steps, dtype=np.int64) * 5_000_000
    q = np.zeros((steps, model.n_joints))
    effort = np.full((steps, model.n_joints), np.nan)
    truth = np.zeros((steps, model.n_joints))
    for k in range(steps):
        command = q0.copy()
        command[wrist] += 0.6 * math.sin(2 * math.pi * 0.5 * k / RATE_HZ)
        state = sim.step(1.0 / RATE_HZ, position_command=command)
        measured = sim.measure()
        q[k, actuated] = measured.q
        effort[k, actuated] = measured.effort * to_driver
        truth[k, actuated] = state.friction
    return t_ns, model.fill_mimic(q), effort, truth, model.joint_names.index(names[wrist])


def test_stick_reaction_is_the_simulators_and_sliding_stays_the_model(model):
    t_ns, q, effort, truth, wrist = _simulate(model)
    options = AnalysisOptions(causal=True, estimator=EstimatorConfig(), progress=False)
    analysis = analyze_arrays(model, t_ns, q, effort=effort, options=options)
    rows = analysis.index
    settled = t_ns[rows] >= 1_000_000_000
    arm = [k for k in range(7) if k != wrist]
    state, friction, sim = analysis.friction_state, analysis.friction, truth[rows]
    # The still arm joints: stuck, reported as the simulator's stick reaction. The error
    # is the rigid-body torque's: gravity at the quantised pose and the estimated coupling
    # from the swinging wrist (0.5 Hz, 0.6 rad).
    assert (state[settled][:, arm] == STICK).all()
    error = np.abs(friction[settled][:, arm] - sim[settled][:, arm]).max()
    print(f'\nstick reaction vs the simulator: largest error {error:.2e} N m; '
          f'reactions up to {np.abs(sim[settled][:, arm]).max():.3f} N m (f = 0.2)')
    assert error < 5e-3
    assert np.abs(sim[settled][:, arm]).max() > 0.02     # not a trivially zero reaction
    # The wrist away from its turning points slides: the model's value, the simulator's.
    fast = settled & (np.abs(analysis.qd[:, wrist]) > 0.2)
    assert fast.sum() > 100 and (state[fast, wrist] == SLIDING).all()
    np.testing.assert_allclose(friction[fast, wrist], sim[fast, wrist], rtol=0, atol=1e-3)
    # Without efforts the still joints are unresolved: 0, where f sign(qd) would have
    # flipped between +-f on the estimate's noise.
    blind = analyze_arrays(model, t_ns, q, options=options)
    assert (blind.friction_state[settled][:, arm] == UNRESOLVED).all()
    assert (blind.friction[settled][:, arm] == 0.0).all()
    counts = blind.friction_states()
    assert counts['unresolved'] > 0 and sum(counts.values()) == blind.friction.size
    # The same rule written out independently (friction_rule.py).
    expect = expected_friction(model, analysis.qd, analysis.torque,
                               rest_band(model, EstimatorConfig()),
                               effort[rows] * effort_scale(model))
    np.testing.assert_allclose(analysis.friction, expect, rtol=0, atol=1e-12)


def test_rest_friction_rewrites_in_place_and_counts(model):
    rule = RestFriction(model, EstimatorConfig())
    qd = np.zeros(model.n_joints)
    friction = model.friction * 1.0          # what f sign(qd) of noise would have said
    state = rule.apply(friction, qd, np.zeros(model.n_joints))
    assert (state == UNRESOLVED).all() and (friction == 0.0).all()


def test_one_sample_path_equals_the_batch_path(model):
    """The node's per-sample path (compiled loop on (n,)) and the batch path agree, NaN
    efforts and velocities on both sides of the band included."""
    rule = RestFriction(model, EstimatorConfig())
    rng = np.random.default_rng(8)
    m, n = 200, model.n_joints
    qd = rng.uniform(-2.0, 2.0, (m, n)) * rule.band
    torque = rng.normal(0.0, 0.5, (m, n))
    effort = rng.normal(0.0, 0.5, (m, n))
    effort[rng.random((m, n)) < 0.2] = np.nan
    model_value = model.damping * qd + model.friction * np.sign(qd)
    batch = model_value.copy()
    batch_state = rule.apply(batch, qd, torque, effort)
    for k in range(m):
        row = model_value[k].copy()
        state = rule.apply(row, qd[k], torque[k], effort[k])
        np.testing.assert_array_equal(row, batch[k])
        np.testing.assert_array_equal(state, batch_state[k])
    np.testing.assert_allclose(batch, expected_friction(model, qd, torque, rule.band,
                                                        effort * effort_scale(model)),
                               rtol=0, atol=1e-15)
    assert {SLIDING, STICK, UNRESOLVED} <= set(np.unique(batch_state).tolist())


def test_an_effort_the_node_cannot_use_never_rejects_the_sample(model):
    """``optional_effort`` after an accepted ``read``: absent or wrong-length efforts give
    None, a NaN marks only its joint, the mimic finger is NaN; nothing raises."""
    from plag_ros.ros import messages as msgs

    reader = msgs.JointStateReader(model)
    names = [name for k, name in enumerate(model.joint_names) if model.mimic_source[k] < 0]
    position = np.zeros(len(names))
    msg = msgs.joint_state(names, position, t_ns=1)
    reader.read(msg)
    assert reader.optional_effort(msg) is None
    msg.effort = [0.5] * (len(names) - 1)
    reader.read(msg)                                  # the positions are still fine
    assert reader.optional_effort(msg) is None
    effort = np.arange(len(names), dtype=np.float64)
    effort[2] = np.nan
    msg.effort = effort.tolist()
    got = reader.optional_effort(msg)
    k_nan = model.joint_names.index(names[2])
    finger_b = int(np.flatnonzero(model.mimic_source >= 0)[0])
    assert np.isnan(got[[k_nan, finger_b]]).all()
    assert np.isfinite(np.delete(got, [k_nan, finger_b])).all()
    for i, name in enumerate(names):
        if i != 2:
            assert got[model.joint_names.index(name)] == effort[i]
