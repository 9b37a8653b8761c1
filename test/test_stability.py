"""Closed-loop stability of the impedance law (issue: a controller that stays stable and
notices when it is not).

* the linear model's pieces against independent references: the velocity filter against
  the live estimator itself, the sampled loop's eigenvalues against a time-domain run of
  the same joint (fine RK4 integration, the real estimator in the loop);
* the shipped gains and estimator inside the region with margin, the old default outside;
* the gain check and the servo-stiffness default;
* the acceptance scenario on the simulator (1 Hz elbow sine, the elbow -> tilt paths
  compensated), both command paths, and the oscillation monitor on the issue's unstable
  configuration.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from scipy import signal

from plag_ros.core.control import stability
from plag_ros.core.control.config import (
    CONTROL_ESTIMATOR,
    ImpedanceConfig,
    OscillationLimits,
    propagation_mask,
)
from plag_ros.core.control.impedance import PartialImpedanceController
from plag_ros.core.control.oscillation import OscillationMonitor
from plag_ros.core.control.references import SineReference
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator
from plag_ros.core.simulation import closed_loop

REPO = Path(__file__).resolve().parent.parent
TILT = 'crane_x7_shoulder_revolute_part_tilt_joint'
ELBOW = 'crane_x7_upper_arm_revolute_part_rotate_joint'
LOWER_ARM = 'crane_x7_lower_arm_revolute_part_joint'
ACTUATED = [*motors.ARM_JOINTS, motors.GRIPPER_JOINT]
Q_SCENARIO = np.array([0.0, 1.0, 0.0, -1.2, 0.0, 0.0, 0.0, 0.0])
"""Upper arm forward and down, forearm bent: well inside every limit, gravity-loaded."""


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def engine(model) -> PartialLagrangian:
    torch.set_num_threads(1)
    return PartialLagrangian(model, dtype=torch.float64)


def shipped() -> dict:
    """config/impedance.yaml's parameters."""
    text = (REPO / 'config' / 'impedance.yaml').read_text()
    return yaml.safe_load(text)['/**/plag_impedance']['ros__parameters']


def shipped_estimator(rate_hz: float) -> EstimatorConfig:
    f = shipped()['filter']
    return EstimatorConfig(cutoff_hz=f['cutoff_hz'], order=f['order'], rate_hz=rate_hz,
                           velocity_source=f['velocity_source'])


# ------------------------------------------------------------------ the linear model
@pytest.mark.parametrize('source', ['position', 'measured'])
@pytest.mark.parametrize('order, cutoff, rate', [(1, 10.0, 200.0), (2, 10.0, 200.0),
                                                 (3, 15.0, 200.0), (2, 10.0, 100.0)])
def test_velocity_filter_is_the_estimators_impulse_response(source, order, cutoff, rate):
    """An impulse through the live estimator (even stamps, after its warm-up) is the
    transfer function's impulse response to rounding."""
    config = EstimatorConfig(cutoff_hz=cutoff, order=order, rate_hz=rate,
                             velocity_source=source)
    b, a = stability.velocity_filter(config)
    estimator = JointStateEstimator(1, config)
    x = np.zeros(300)
    x[20] = 1.0
    period_ns = round(1e9 / rate)
    got = []
    for k, value in enumerate(x):
        q, qd = (np.zeros(1), np.array([value])) if source == 'measured' else \
            (np.array([value]), None)
        sample = estimator.update(k * period_ns, q, qd)
        got.append(np.nan if sample is None else sample.qd[0])
    want = signal.lfilter(b, a, x)
    scale = np.abs(want).max()
    np.testing.assert_allclose(np.array(got)[10:], want[10:], rtol=0, atol=1e-12 * scale)


def _time_domain(loop: stability.JointLoop, K: float, D: float, config: EstimatorConfig,
                 periods: int) -> np.ndarray:
    """|q| of the same joint run in the time domain: RK4 at 200 substeps per period, the
    real estimator, the command acting ``delay_periods`` after its sample. Starts 0.01
    rad off with the estimator warmed up at rest there."""
    T = 1.0 / loop.rate_hz
    h = T / 200
    m, c, Ks = loop.inertia, loop.damping, loop.servo_stiffness

    def accel(q, v, u):
        force = u if Ks is None else Ks * (u - q)
        return (force - c * v) / m

    estimator = JointStateEstimator(1, config)
    q, v = 0.01, 0.0
    for k in range(8):                      # warm-up at rest
        estimator.update(k * round(T * 1e9), np.array([q]), np.array([v]))
    hold = 0.0 if Ks is None else q         # the command in force before the first
    pending: list[tuple[float, float]] = []  # (time it acts, command)
    t = 0.0
    out = []
    for k in range(periods):
        sample = estimator.update((k + 8) * round(T * 1e9), np.array([q]), np.array([v]))
        tau = -K * q - D * sample.qd[0]
        pending.append((t + loop.delay_periods * T, tau if Ks is None else q + tau / Ks))
        out.append(abs(q))
        for _ in range(200):
            while pending and pending[0][0] <= t + 1e-12:
                hold = pending.pop(0)[1]
            k1 = (v, accel(q, v, hold))
            k2 = (v + h / 2 * k1[1], accel(q + h / 2 * k1[0], v + h / 2 * k1[1], hold))
            k3 = (v + h / 2 * k2[1], accel(q + h / 2 * k2[0], v + h / 2 * k2[1], hold))
            k4 = (v + h * k3[1], accel(q + h * k3[0], v + h * k3[1], hold))
            q += h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
            v += h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
            t += h
    return np.array(out)


@pytest.mark.parametrize('case', [
    # (inertia, damping, K_s, delay, K, D, source, order, cutoff): stable and unstable,
    # effort and position paths, whole and fractional delays.
    (3.7e-4, 1e-6, None, 0.0, 0.3, 0.008, 'position', 2, 10.0),
    (3.7e-4, 1e-6, None, 0.0, 4.0, 0.06, 'position', 3, 15.0),
    (3.7e-4, 1e-6, None, 0.4, 1.0, 0.02, 'measured', 2, 10.0),
    (3.0e-3, 0.85, 18.88, 1.0, 10.0, 0.6, 'measured', 2, 10.0),
    (3.0e-3, 0.85, 18.88, 1.0, 10.0, 3.0, 'measured', 3, 15.0),
])
def test_spectral_radius_is_the_growth_rate_of_a_time_domain_run(case):
    m, c, Ks, delay, K, D, source, order, cutoff = case
    loop = stability.JointLoop(m, c, Ks, 200.0, delay)
    config = EstimatorConfig(cutoff_hz=cutoff, order=order, velocity_source=source)
    radius = stability.spectral_radius(loop, K, D, config)
    q = _time_domain(loop, K, D, config, 400)
    # The envelope over 40-sample windows (longer than any oscillation here) falls or
    # grows by radius per sample once the slower modes are gone: to 3 % of the log rate
    # (a window's peak sample is not the oscillation's peak), plus 1e-3.
    early, late = q[200:240].max(), q[360:400].max()
    rate = (late / early) ** (1 / 160)
    assert abs(math.log(rate) - math.log(radius)) < 0.03 * abs(math.log(radius)) + 1e-3, \
        (rate, radius)
    assert (rate < 1.0) == (radius < 1.0)


def test_gain_margin_is_where_the_loop_turns_unstable():
    loop = stability.JointLoop(3.0e-3, 0.85, 18.88, 200.0, 1.0)
    config = CONTROL_ESTIMATOR
    s = stability.gain_margin(loop, 10.0, 0.6, config, upper=50.0)
    assert 1.0 < s < 50.0
    assert stability.spectral_radius(loop, 0.99 * s * 10.0, 0.99 * s * 0.6, config) < 1.0
    assert stability.spectral_radius(loop, 1.01 * s * 10.0, 1.01 * s * 0.6, config) > 1.0
    k = stability.stiffness_bound(loop, 0.6, config)
    assert stability.spectral_radius(loop, 0.99 * k, 0.6, config) < 1.0
    assert stability.spectral_radius(loop, 1.01 * k, 0.6, config) > 1.0


# ------------------------------------------------------------------ the shipped defaults
def test_shipped_gains_keep_a_margin_of_two_on_the_arms_position_path(model):
    """The real arm's path (servo spring from the motor table, 200 Hz, the delay the
    file's check assumes: 3 periods) with config/impedance.yaml's gains and filter: every
    arm joint keeps a gain margin >= 2; the order-3, 15 Hz filter shipped before does not
    (the issue's finding). (At 100 Hz the same gains pass only up to 1.5 periods of delay,
    which nobody has measured there: the real-arm tutorial says so.)"""
    rate = 200.0
    params = shipped()
    assert params['command_interface'] == 'position'
    K, D = np.array(params['stiffness']), np.array(params['damping'])
    loops = stability.joint_loops(model, 'position', rate,
                                  delay_periods=params['delay_periods'])
    margins = [stability.gain_margin(loop, k, d, shipped_estimator(rate), upper=10.0)
               for loop, k, d in zip(loops, K, D)]
    print(f'\n[{rate:g} Hz] gain margins {np.round(margins, 2).tolist()}')
    assert min(margins) >= stability.MIN_GAIN_MARGIN
    # What shipped before: order 3 at 15 Hz, and 2.0 and 0.8 damping on tilt and elbow.
    old = EstimatorConfig(cutoff_hz=15.0, order=3, rate_hz=rate, velocity_source='measured')
    D_old = D.copy()
    D_old[1], D_old[3] = 2.0, 0.8
    assert min(stability.gain_margin(loop, k, d, old, upper=10.0)
               for loop, k, d in zip(loops, K, D_old)) < 1.6


def test_the_library_default_estimator_is_the_controllers():
    assert ImpedanceConfig().estimator == CONTROL_ESTIMATOR
    assert (CONTROL_ESTIMATOR.order, CONTROL_ESTIMATOR.cutoff_hz) == (2, 10.0)
    f = shipped()['filter']
    assert (f['order'], f['cutoff_hz']) == (CONTROL_ESTIMATOR.order,
                                            CONTROL_ESTIMATOR.cutoff_hz)


def test_servo_stiffness_defaults_to_the_motor_table_and_a_far_value_is_reported(engine):
    cfg = ImpedanceConfig(stiffness=5.0, damping=0.1, command_interface='position')
    ctl = PartialImpedanceController(engine, cfg)
    np.testing.assert_allclose(ctl.servo_stiffness, motors.servo_stiffness(ACTUATED),
                               rtol=1e-12)
    assert ctl.warnings == []
    assert ctl.servo_stiffness[1] == pytest.approx(48.8, abs=0.05)    # the tilt's XM540
    # The old library default (20 for every joint) is 0.41 x the tilt's table value.
    ctl = PartialImpedanceController(engine, cfg.replace(servo_stiffness=20.0))
    assert len(ctl.warnings) == 1
    assert ctl.warnings[0].startswith(f'{TILT}: servo_stiffness 20 N*m/rad is 0.41 x')


# ------------------------------------------------------------------ the gain check
def test_gains_outside_the_region_are_refused_with_the_joint_gain_and_bound(engine):
    K = np.array(shipped()['stiffness'])
    D = np.array(shipped()['damping'])
    effort = ImpedanceConfig(stiffness=K, damping=D, command_interface='effort')
    with pytest.raises(ValueError) as err:
        PartialImpedanceController(engine, effort)
    message = str(err.value)
    assert f'{LOWER_ARM}: K = 4 N*m/rad, D = 0.06 N*m*s/rad have a gain margin of' in message
    assert 'stable with' in message and 'effort interface at 200 Hz' in message
    ctl = PartialImpedanceController(engine, effort.replace(gain_check='warn'))
    assert any(w.startswith(f'{LOWER_ARM}: K = 4') for w in ctl.warnings)
    # At run time: a refused reconfigure changes nothing.
    position = effort.replace(command_interface='position')
    ctl = PartialImpedanceController(engine, position)
    assert ctl.warnings == []
    too_damped = D.copy()
    too_damped[3] = 3.0
    with pytest.raises(ValueError, match=f'{ELBOW}: K = 10 N.m/rad, D = 3 N.m.s/rad'):
        ctl.reconfigure(position.replace(damping=too_damped))
    assert ctl.config is position


def test_the_reported_bound_is_the_edge_of_the_region(engine, model):
    K = np.zeros(8)
    D = np.zeros(8)
    K[3], D[3] = 10.0, 3.0
    cfg = ImpedanceConfig(stiffness=K, damping=D, command_interface='position',
                          gain_check='warn')
    (warning,) = PartialImpedanceController(engine, cfg).warnings
    bound = float(warning.split('D up to ')[1].split(' ')[0])
    loop = stability.joint_loops(model, 'position', 200.0, delay_periods=cfg.delay_periods)[3]
    assert stability.gain_margin(loop, 10.0, 0.95 * bound, CONTROL_ESTIMATOR) > 1.0
    assert stability.spectral_radius(loop, 10.0, 1.05 * bound, CONTROL_ESTIMATOR) > 1.0


# ------------------------------------------------------------------ the acceptance scenario
def effort_gains(model) -> tuple[np.ndarray, np.ndarray]:
    """Soft effort-interface gains: damping ratio 0.7 on each joint's lightest inertia,
    the stiffness a little under the largest the check passes at delay 0."""
    K = np.array([0.05, 5.0, 0.035, 1.0, 0.03, 0.08, 0.012, 0.008])
    D = 2 * 0.7 * np.sqrt(K * stability.smallest_inertia(model))
    return K, D


def tilt_deviation(engine, cfg, *, delay: int) -> tuple[float, closed_loop.LoopRun]:
    """RMS of the tilt's q - q_d over 1-4 s while the elbow swings 0.5 rad at 1 Hz."""
    amplitude = np.zeros(8)
    amplitude[3] = 0.5
    run = closed_loop.run(engine, cfg.replace(ramp_s=0.0), q0=Q_SCENARIO, seconds=4.0,
                          reference=SineReference(amplitude, 1.0), delay_periods=delay)
    after = run.t >= 1.0
    tilt = run.column(TILT)
    error = run.q[after, tilt] - run.q_desired[after, tilt]
    return float(np.sqrt(np.mean(error ** 2))), run


@pytest.mark.parametrize('interface', ['effort', 'position'])
def test_compensation_cuts_the_tilt_deviation_by_ninety_percent(engine, model, interface):
    """Gravity compensation on, the elbow swinging, the elbow -> tilt acceleration and
    velocity paths compensated from the measured motion, the simulator with its friction.
    Effort: soft gains inside the region (the issue's K = 4, D = 0.06 on the lower arm is
    far outside it, see the test above), no delay (the loop runs in one process).
    Position: built from the library's defaults alone (estimator, servo stiffness from
    the motor table) with the shipped gains, one period of delay as on the arm."""
    path = propagation_mask(model, [f'{TILT}<-{ELBOW}'])
    if interface == 'effort':
        K, D = effort_gains(model)
        base = ImpedanceConfig(stiffness=K, damping=D, delay_periods=0.0,
                               command_interface='effort')
        delay = 0
    else:
        K, D = np.array(shipped()['stiffness']), np.array(shipped()['damping'])
        base = ImpedanceConfig(stiffness=K, damping=D, command_interface='position')
        delay = 1
    compensated = base.replace(acceleration_mask=path, velocity_mask=path)
    plain_rms, plain = tilt_deviation(engine, base, delay=delay)
    comp_rms, comp = tilt_deviation(engine, compensated, delay=delay)
    print(f'\n[{interface}] tilt |q - q_d| rms: plain {plain_rms * 1e3:.2f} mrad, '
          f'compensated {comp_rms * 1e3:.2f} mrad ({1 - comp_rms / plain_rms:.1%} less)')
    for run in (plain, comp):
        assert set(run.state[run.t > 0.1]) == {'enabled'}, set(run.reason)
        assert not run.saturated[run.t >= 0.5].any()    # (the enable may meet the step limit)
        elbow = run.column(ELBOW)
        assert np.ptp(run.q[run.t >= 1.0, elbow]) > 0.5      # the elbow really swings
    assert comp_rms < 0.1 * plain_rms


def test_the_issues_configuration_is_caught_within_a_second(engine, model):
    """The issue's loop: effort interface, the shipped (position-path) gains, K = 4 and
    D = 0.06 on the lower arm, order 3 at 15 Hz, run anyway (gain_check 'warn'). A joint
    swings from limit to limit in the simulator (the lower arm with the effort clipped at
    the URDF limits, the elbow with it clipped at the servos' continuous torque); the
    monitor latches within a second and the controller holds from then on. So it does with
    the saturation check on as well (the tilt, swinging at its clip, then moves 0.05 rad
    against its clipped effort while not braked by it: that check may latch first)."""
    K, D = np.array(shipped()['stiffness']), np.array(shipped()['damping'])
    path = propagation_mask(model, [f'{TILT}<-{ELBOW}'])
    cfg = ImpedanceConfig(stiffness=K, damping=D, gain_check='warn', delay_periods=0.0,
                          command_interface='effort', acceleration_mask=path, velocity_mask=path,
                          estimator=EstimatorConfig(cutoff_hz=15.0, order=3))
    no_saturation = dataclasses.replace(cfg.fault, saturation_travel=0.0)
    for checks, kinds in ((cfg.replace(fault=no_saturation), ('oscillation',)),
                          (cfg, ('oscillation', 'saturation'))):
        _, run = tilt_deviation(engine, checks, delay=0)
        first = run.first_fault()
        assert first is not None and first < 1.0, first
        reason = run.reason[np.flatnonzero(run.state == 'fault')[0]]
        print(f'first fault at {first:.3f} s: {reason}')
        assert reason.split(':')[0] in kinds, reason
        assert set(run.state[run.t >= first]) == {'fault'}
    # Without the monitor (and without the saturation check, which would catch the swing
    # later: a joint moving against its clipped effort) the run oscillates to the end.
    _, free = tilt_deviation(engine, cfg.replace(oscillation=OscillationLimits(reversals=0),
                                                 fault=no_saturation), delay=0)
    assert np.ptp(free.q[free.t >= 3.0], axis=0).max() > 1.0


def test_the_simulator_demo_never_trips_the_monitor(engine, model):
    """`plag-ros sim --control`'s run (shipped config, elbow 0.4 rad at 0.5 Hz, position
    path) for 12 s: no fault."""
    params = shipped()
    path = propagation_mask(model, params['compensate']['acceleration'])
    cfg = ImpedanceConfig(stiffness=np.array(params['stiffness']),
                          damping=np.array(params['damping']), command_interface='position',
                          acceleration_mask=path, velocity_mask=path,
                          estimator=shipped_estimator(200.0),
                          max_position_step=params['max_position_step'][0],
                          ramp_s=params['ramp_s'])
    amplitude = np.zeros(8)
    amplitude[3] = 0.4
    run = closed_loop.run(engine, cfg, q0=Q_SCENARIO, seconds=12.0, delay_periods=1,
                          reference=SineReference(amplitude, 0.5))
    assert run.first_fault() is None, set(run.reason)
    assert np.ptp(run.q[:, run.column(ELBOW)]) > 0.7


# ------------------------------------------------------------------ the monitor alone
def _feed(monitor: OscillationMonitor, qd: np.ndarray, command=None, saturated=None,
          rate: float = 200.0) -> float | None:
    """Feed (N, n) rows; return the time of the first trip [s]."""
    n = qd.shape[1]
    for k, row in enumerate(qd):
        reason = monitor.update(round(k * 1e9 / rate), row,
                                np.zeros(n) if command is None else command[k],
                                np.zeros(n, bool) if saturated is None else saturated[k])
        if reason:
            return k / rate
    return None


def test_monitor_leaves_commanded_motion_and_noise_alone():
    t = np.arange(0, 10, 1 / 200)[:, None]
    monitor = OscillationMonitor(['a'], np.array([0.48]))
    swing = 0.5 * 2 * math.pi * 1.5 * np.cos(2 * math.pi * 1.5 * t)   # 1.5 Hz, 4.7 rad/s
    assert _feed(monitor, swing) is None
    rng = np.random.default_rng(0)
    assert _feed(monitor, rng.normal(0, 0.1, (2000, 1))) is None     # fast, but slow speeds


def test_monitor_trips_on_a_fast_swing_and_on_alternating_saturation():
    t = np.arange(0, 3, 1 / 200)[:, None]
    monitor = OscillationMonitor(['a'], np.array([0.48]))
    first = _feed(monitor, 2.0 * np.sin(2 * math.pi * 10 * t))      # 10 Hz, 2 rad/s
    assert first is not None and first < 0.5
    monitor = OscillationMonitor(['a'], np.array([0.48]))
    sign = np.where((np.arange(600) // 10) % 2 == 0, 1.0, -1.0)[:, None]   # 10 Hz square
    first = _feed(monitor, np.zeros((600, 1)), command=sign, saturated=np.ones((600, 1), bool))
    assert first is not None and first < 0.5


def test_an_identified_armature_reaches_the_effort_paths_gain_check(model, tmp_path):
    """The gain check of the effort path takes the motor table's low-end armature, or the
    armature of an identified.yaml: gains refused on the table's figure pass with a heavier
    identified rotor, through ImpedanceConfig.with_model_parameters."""
    from plag_ros.core.dynamics.model_parameters import load_model_parameters

    K, D = np.zeros(8), np.zeros(8)
    K[3], D[3] = 8.0, 0.35                 # the elbow: margin about 1.3 on the table's 0.008
    config = ImpedanceConfig(stiffness=K, damping=D, delay_periods=1.0,
                             command_interface='effort')
    loops = stability.joint_loops(model, 'effort', 200.0)
    # the Schur complement: a diagonal armature a adds at least a to the effective inertia
    assert loops[3].inertia >= stability.smallest_inertia(model)[3] + 0.008
    assert stability.check_gains(loops, model.actuated_names, K, D, config.estimator)
    act = model.actuated_names
    path = tmp_path / 'identified.yaml'
    path.write_text(yaml.safe_dump({'bodies': [], 'joints': [
        {'joint': name, 'viscous': 0.0, 'coulomb': 0.0, 'armature': 0.05} for name in act]}))
    parameters = load_model_parameters(path)
    heavier = config.with_model_parameters(parameters, model)
    assert np.allclose(heavier.armature, 0.05)
    loops = stability.joint_loops(model, 'effort', 200.0, armature=heavier.armature)
    assert not stability.check_gains(loops, act, K, D, config.estimator)
