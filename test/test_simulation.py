"""Simulator: energy, round trip through inverse dynamics, servo, stops, mimic, commands.

Oracles: energy conservation / dissipation (physics), the engine's inverse dynamics (the
simulator must produce accelerations the engine maps back to the applied torques), static
equilibrium of the servo spring against gravity, and the Coulomb stick band.

Last, the real-time loops that step the simulator against the wall clock (the simulator
node's publish tick, :meth:`DriverEmulation.tick`, and the emulated servo bus's loop,
:meth:`PtyBus.serve`): a late step catches up faster than real time up to a bound, and
beyond it the rest is skipped, counted and logged with the lag (throttled). The tick takes
its clock reading as an argument, so its test sets the instants; the bus's test makes its
loop late with a step callback that sleeps and runs until the counter says so (a deadline
only against a hang).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time

import numpy as np
import pytest
import robots
import torch

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.emulator.arm import BusArm
from plag_ros.bus.emulator.server import PtyBus
from plag_ros.core.common.rejections import LOG_THROTTLE_S
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.motors import (
    DEFAULT_POSITION_RESOLUTION,
    DEFAULT_VELOCITY_RESOLUTION,
    servo_gains,
    servo_saturation,
)
from plag_ros.core.simulation.driver import DriverEmulation
from plag_ros.core.simulation.settings import SimSettings
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig, mechanical_energy

FREE = SimulatorConfig(friction=False, joint_limits=False)
FINGER_A, FINGER_B = 7, 8


@pytest.fixture(scope='module')
def crane() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def planar() -> RobotModel:
    return RobotModel.from_urdf(robots.planar_arm([0.3, 0.25], [0.15, 0.12], [1.0, 0.7],
                                                  [0.01, 0.005]))


def _energies(sim: Simulator, seconds: float, every: int = 1) -> np.ndarray:
    """Total energy [J] at the start and after every ``every`` physics steps."""
    out = [sum(sim.energy())]
    for k in range(1, round(seconds / sim.config.dt) + 1):
        sim.step()
        if k % every == 0:
            out.append(sum(sim.energy()))
    return np.array(out)


def _random_pose(sim: Simulator, rng: np.random.Generator, shrink: float = 0.6) -> np.ndarray:
    lo = np.maximum(sim.model.joint_lower[sim.model.actuated], -2.0)
    hi = np.minimum(sim.model.joint_upper[sim.model.actuated], 2.0)
    mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
    return mid + shrink * half * rng.uniform(-1.0, 1.0, size=lo.size)


def test_energy_helper_matches_partial_lagrangians(crane):
    sim = Simulator(crane)
    rng = np.random.default_rng(0)
    q, qd = crane.fill_mimic(rng.uniform(-1, 1, 9)), crane.fill_mimic(rng.normal(size=9),
                                                                      derivative=True)
    lagrangian, potential = PartialLagrangian(crane).lagrangians(torch.tensor(q),
                                                                 torch.tensor(qd))
    kinetic_ref = float((lagrangian + potential).sum())
    kinetic, pot = mechanical_energy(sim.engine, q, qd)
    assert kinetic == pytest.approx(kinetic_ref, rel=1e-12, abs=1e-14)
    assert pot == pytest.approx(float(potential.sum()), rel=1e-12, abs=1e-14)


def test_free_fall_conserves_energy_crane_x7(crane):
    # Arm tipped 1.2 rad and released, no friction, no stops: it swings through the table
    # plane for 1 s (peak kinetic energy ~4.8 J, distal joints up to ~40 rad/s). First-order
    # symplectic Euler at 1 kHz keeps the energy within 5 % of the exchanged energy
    # (measured ~2.4 %).
    sim = Simulator(crane, FREE)
    sim.reset([0.0, 1.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    energy = _energies(sim, 1.0, every=5)
    exchanged = energy[0] - sum(mechanical_energy(sim.engine, sim.state.q, 0 * sim.state.q))
    drift = np.max(np.abs(energy - energy[0]))
    assert abs(exchanged) > 1.0
    assert drift < 0.05 * 4.8, f'energy drift {drift:.4f} J'


def test_free_fall_energy_error_is_first_order_in_dt(planar):
    # Double pendulum: drift < 1 % of the exchanged energy at 1 kHz (measured 0.75 %), and it
    # shrinks at least as fast as dt (a bug in the dynamics would not converge away).
    drifts = []
    for dt in (1e-3, 5e-4):
        sim = Simulator(planar, dataclasses.replace(FREE, dt=dt, kp=10.0, kd=1.0))
        sim.reset([0.3, 0.5])
        energy = _energies(sim, 1.0, every=5)
        drifts.append(np.max(np.abs(energy - energy[0])))
    assert drifts[0] < 0.01 * 2.7
    assert drifts[1] < 0.6 * drifts[0], drifts


@pytest.mark.parametrize('variant', ['urdf_friction_and_stops', 'viscous_only'])
def test_dissipation_makes_energy_decrease_monotonically(crane, variant):
    if variant == 'viscous_only':
        model = dataclasses.replace(crane, damping=np.full(9, 0.02), friction=np.zeros(9))
        config = SimulatorConfig(joint_limits=False)
    else:
        model, config = crane, SimulatorConfig()
    sim = Simulator(model, config)
    sim.reset([0.0, 1.2, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    energy = _energies(sim, 1.0)
    increase = np.max(np.diff(energy))
    assert increase <= 1e-9, f'energy rose by {increase} J in one step'
    assert energy[-1] < energy[0] - 0.5


@pytest.mark.parametrize('seed, mode', [(1, 'effort'), (2, 'effort'), (3, 'position'),
                                        (4, 'position')])
def test_forward_then_inverse_dynamics_round_trip(crane, seed, mode):
    # One step from a random moving state under random commands: the engine's inverse
    # dynamics of the simulated acceleration plus the friction the simulator applied must
    # give back the applied torques (generalized: the mimic finger's load goes to finger_a).
    rng = np.random.default_rng(seed)
    sim = Simulator(crane, SimulatorConfig(joint_limits=False))
    G, _ = sim.coordinate_map
    limit = sim.effort_limit
    z0 = _random_pose(sim, rng)
    v0 = rng.uniform(0.5, 2.0, size=8) * rng.choice([-1.0, 1.0], size=8)
    sim.reset(z0, v0)  # start moving: the round trip must hold with Coriolis terms
    before = sim.state
    if mode == 'effort':
        tau = rng.uniform(-0.5, 0.5, size=8) * limit + sim.gravity_effort()
        after = sim.step(effort=tau)
        np.testing.assert_allclose(after.effort, np.clip(tau, -limit, limit))
    else:
        goal = z0 + rng.uniform(-0.05, 0.05, size=8)
        after = sim.step(position_command=goal)
        # The servo law at the end of the step (implicit P and D terms).
        servo = sim.kp * (goal - after.q[:8]) - sim.kd * after.qd[:8]
        np.testing.assert_allclose(after.effort, np.clip(servo, -limit, limit), atol=1e-12)
    tau_id = sim.engine.inverse_dynamics(before.q, before.qd, after.qdd)
    np.testing.assert_allclose(G.T @ tau_id + after.friction, after.effort,
                               rtol=0, atol=1e-9 * (1 + np.abs(after.effort).max()))
    # Where a joint slides, the friction is the URDF law at the new velocity.
    fric = G.T @ sim.engine.friction_torque(after.qd)
    slip = np.abs(after.qd[:8]) > 1e-9
    assert slip.sum() >= 4   # light joints may stop (stick) within the step
    np.testing.assert_allclose(after.friction[slip], fric[slip], rtol=1e-12, atol=1e-12)


def test_gravity_torque_holds_the_arm_still(crane):
    rng = np.random.default_rng(4)
    sim = Simulator(crane, FREE)
    z0 = _random_pose(sim, rng)
    sim.reset(z0)
    hold = sim.gravity_effort()
    state = sim.step(0.5, effort=hold)
    np.testing.assert_allclose(state.q[:8], z0, atol=1e-8)
    np.testing.assert_allclose(state.qd, 0.0, atol=1e-7)


def test_coulomb_friction_sticks_below_and_slips_above_its_level(crane):
    sim = Simulator(crane)
    z0 = np.array([0.3, 0.6, -0.4, -1.2, 0.5, 0.7, -0.2, 0.4])
    sim.reset(z0)
    hold = sim.gravity_effort()
    f = sim.coulomb
    state = sim.step(0.3, effort=hold + 0.9 * f)
    np.testing.assert_array_equal(state.q[:8], z0)  # exactly still: no creep, no chatter
    np.testing.assert_allclose(np.abs(state.friction), 0.9 * f, rtol=1e-6)
    state = sim.step(0.005, effort=hold + 1.5 * f)
    assert np.all(state.qd[:8] != 0.0), state.qd  # every joint breaks away


def test_position_loop_settles_at_static_equilibrium(crane):
    rng = np.random.default_rng(5)
    sim = Simulator(crane, FREE)
    sim.reset(_random_pose(sim, rng))
    target = _random_pose(sim, rng, shrink=0.5)
    state = sim.step(2.0, position_command=target)
    # The servo spring balances gravity: Kp (q_cmd - q) = g(q), q within the servo sag.
    # (2 s leave the slowest servo mode, tilt with zeta ~0.4, at ~1e-5 of its start.)
    np.testing.assert_allclose(sim.kp * (target - state.q[:8]), sim.gravity_effort(),
                               atol=1e-4)
    np.testing.assert_allclose(state.qd, 0.0, atol=1e-4)
    np.testing.assert_allclose(state.q[:8], target, atol=0.05)
    np.testing.assert_allclose(state.effort, sim.gravity_effort(), atol=1e-4)


def test_position_loop_with_friction_stops_inside_the_stick_band(crane):
    rng = np.random.default_rng(6)
    sim = Simulator(crane)
    sim.reset(_random_pose(sim, rng))
    target = _random_pose(sim, rng, shrink=0.5)
    state = sim.step(2.0, position_command=target)
    residual = sim.kp * (target - state.q[:8]) - sim.gravity_effort()
    assert np.all(np.abs(residual) <= sim.coulomb + 1e-9), residual
    np.testing.assert_allclose(state.qd, 0.0, atol=1e-9)


def test_servo_gains_from_dynamixel_p_gain(crane):
    # Motor table, not URDF effort limits: 12 V stall torques of the ROBOTIS e-manual,
    # XM430-W350 4.1 N*m on the pan and elbow, XM540-W270 10.6 N*m on the tilt only.
    kp, kd = servo_gains(crane)
    xm430 = 800 / 128 * 4.1 / 885 / (2 * math.pi / 4096)
    assert kp[0] == pytest.approx(xm430) and kp[0] == pytest.approx(18.876, abs=1e-3)
    assert kp[3] == pytest.approx(xm430)
    assert kp[1] == pytest.approx(xm430 * 10.6 / 4.1)
    assert kd[2] == pytest.approx(4.1 / 4.81710873)
    np.testing.assert_array_equal(servo_saturation(crane), [4.1, 10.6] + [4.1] * 6)


def test_p_gain_drop_makes_the_arm_limp(crane):
    # The driver writes P = 5 on deactivation: the servo spring falls by 800 / 5.
    sim = Simulator(crane)
    kp800 = sim.kp
    sim.set_p_gain(5.0)
    np.testing.assert_allclose(sim.kp, kp800 * 5.0 / 800.0, rtol=1e-12)
    assert sim.p_gain == 5.0
    with pytest.raises(ValueError, match='p_gain'):
        sim.set_p_gain(0.0)


def test_mimic_constraint_holds_throughout(crane):
    rng = np.random.default_rng(7)
    sim = Simulator(crane)
    sim.reset(_random_pose(sim, rng))
    for k in range(40):
        if k % 2:
            state = sim.step(0.01, position_command=_random_pose(sim, rng))
        else:
            state = sim.step(0.01, effort=rng.uniform(-2, 2, size=8))
        assert state.q[FINGER_B] == state.q[FINGER_A]
        assert state.qd[FINGER_B] == state.qd[FINGER_A]
        assert state.qdd[FINGER_B] == state.qdd[FINGER_A]


def test_mimic_multiplier_and_offset_are_honoured():
    xml = robots.planar_arm([0.3, 0.2, 0.1], [0.1, 0.1, 0.05], [1.0, 0.5, 0.1],
                            [0.01, 0.004, 0.001]).replace(
        '<joint name="joint3" type="continuous">',
        '<joint name="joint3" type="continuous"><mimic joint="joint2" multiplier="-0.5" '
        'offset="0.1"/>')
    model = RobotModel.from_urdf(xml)
    sim = Simulator(model, SimulatorConfig(kp=5.0, kd=0.5))
    sim.reset([0.2, 0.4])
    for _ in range(5):
        state = sim.step(0.05, effort=[0.3, -0.1])
        assert state.q[2] == pytest.approx(-0.5 * state.q[1] + 0.1, abs=1e-15)
        assert state.qd[2] == pytest.approx(-0.5 * state.qd[1], abs=1e-15)
    with pytest.raises(ValueError, match='mimic law'):
        sim.reset([0.2, 0.4, 0.0])


def test_effort_saturation(crane):
    sim = Simulator(crane)
    sim.reset([0.0, 0.3, 0.0, -1.0, 0.0, 0.5, 0.0, 0.2])
    state = sim.step(effort=np.full(8, 100.0))
    stall = np.array([4.1, 10.6] + [4.1] * 6)   # motor table (e-manual stall torques)
    np.testing.assert_array_equal(state.effort, stall)
    # The servo output saturates too: a far goal asks for more than the motor has.
    state = sim.step(0.01, position_command=[2.5, -1.5, 2.5, -2.7, 2.5, -1.5, 2.8, 1.5])
    assert np.all(np.abs(state.effort) <= stall)
    assert np.any(np.abs(state.effort) == stall)
    unsaturated = Simulator(crane, SimulatorConfig(effort_saturation=False))
    state = unsaturated.step(effort=np.full(8, 100.0))
    np.testing.assert_array_equal(state.effort, np.full(8, 100.0))


def test_joint_stops_hold_without_penetration(crane):
    sim = Simulator(crane)
    sim.reset([0.0, 1.4, 0.0, -0.2, 0.0, 0.0, 0.0, 1.4])
    push = np.array([0.0, 10.0, 0.0, -4.0, 0.0, 0.0, 0.0, -4.0])
    for _ in range(30):
        state = sim.step(0.01, effort=push)
        assert np.all(state.q >= crane.joint_lower) and np.all(state.q <= crane.joint_upper)
    assert state.q[1] == crane.joint_upper[1] and state.q[3] == crane.joint_lower[3]
    assert state.q[FINGER_A] == crane.joint_lower[FINGER_A] == state.q[FINGER_B]
    np.testing.assert_array_equal(state.qd[[1, 3, FINGER_A]], 0.0)


def test_quantised_measurement(crane):
    config = SimulatorConfig(quantize_position=True, quantize_velocity=True)
    sim = Simulator(crane, config)
    sim.reset([0.1, 0.7, 0.0, -1.0, 0.0, 0.3, 0.0, 0.3])
    sim.step(0.05)
    meas = sim.measure()
    steps_q = meas.q / DEFAULT_POSITION_RESOLUTION
    steps_qd = meas.qd / DEFAULT_VELOCITY_RESOLUTION
    np.testing.assert_allclose(steps_q, np.round(steps_q), atol=1e-9)
    np.testing.assert_allclose(steps_qd, np.round(steps_qd), atol=1e-9)
    np.testing.assert_allclose(meas.q, sim.state.q[:8], atol=DEFAULT_POSITION_RESOLUTION / 2)
    assert np.any(meas.qd != 0.0)
    exact = Simulator(crane)
    exact.reset([0.1, 0.7, 0.0, -1.0, 0.0, 0.3, 0.0, 0.3])
    exact.step(0.05)
    np.testing.assert_array_equal(exact.measure().q, exact.state.q[:8])


def test_bad_commands_are_rejected_and_leave_the_command_alone(crane):
    sim = Simulator(crane)
    sim.set_effort_command(np.full(8, 0.1))
    with pytest.raises(ValueError, match='8 entries'):
        sim.set_effort_command(np.zeros(7))
    with pytest.raises(ValueError, match='crane_x7_wrist_joint'):
        sim.set_position_command([0, 0, 0, 0, 0, 0, math.nan, 0])
    with pytest.raises(ValueError, match='not finite'):
        sim.step(effort=[0, 0, 0, math.inf, 0, 0, 0, 0])
    with pytest.raises(ValueError, match='either'):
        sim.step(effort=np.zeros(8), position_command=np.zeros(8))
    with pytest.raises(ValueError, match='dt'):
        sim.step(0.0)
    with pytest.raises(ValueError, match='dt'):
        sim.step(math.nan)
    with pytest.raises(ValueError, match='outside the joint limits.*rotate_joint'):
        sim.reset([0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match='kp'):
        Simulator(crane, SimulatorConfig(kp=[1.0, 2.0]))
    with pytest.raises(ValueError, match='dt'):
        SimulatorConfig(dt=-1e-3)
    assert sim.mode == 'effort'
    np.testing.assert_array_equal(sim.step().effort, np.full(8, 0.1))


def test_step_splits_long_intervals_into_physics_steps(crane):
    sim = Simulator(crane)
    sim.reset([0.0, 0.5, 0.0, -1.0, 0.0, 0.5, 0.0, 0.2])
    state = sim.step(0.0105)
    assert sim.steps == 11 and state.t == pytest.approx(0.0105)


@pytest.mark.parametrize('friction', [False, True])
def test_stiff_finger_servo_is_stable_without_overshoot_or_chatter(crane, friction):
    # The finger's reduced inertia (both fingers through the mimic) is ~3.6e-5 kg*m^2: the
    # servo's back-EMF damping makes Kd / I * dt ~ 23 at 1 kHz, far past the explicit
    # Euler limit of 2. The implicit treatment must give a smooth, overdamped approach.
    sim = Simulator(crane, SimulatorConfig(friction=friction))
    start = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2])
    sim.reset(start)
    G, o = sim.coordinate_map
    M = sim.engine.mass_matrix(G @ start + o)
    inertia = (G.T @ M @ G)[FINGER_A, FINGER_A]
    assert sim.kd[FINGER_A] / inertia * sim.config.dt > 10.0
    goal = start.copy()
    goal[FINGER_A] = 0.6
    q, qd = [], []
    for _ in range(400):
        state = sim.step(position_command=goal)
        q.append(state.q[FINGER_A])
        qd.append(state.qd[FINGER_A])
    q, qd = np.array(q), np.array(qd)
    # Rest point: the spring balances gravity (and, with friction, the Coulomb level).
    rest = 0.6 - (sim.gravity_effort()[FINGER_A] + sim.coulomb[FINGER_A] * friction) / sim.kp[
        FINGER_A]
    assert np.all(np.diff(q) >= -1e-12), 'finger moved backwards (oscillation)'
    assert q.max() <= rest + 1e-9, 'overshoot'
    assert abs(q[-1] - rest) < 1e-3 and abs(qd[-1]) < 0.01
    signs = np.sign(qd[np.abs(qd) > 0])
    assert np.count_nonzero(np.diff(signs)) == 0, 'finger velocity chatters'


def test_steps_at_exact_rest_are_skipped_without_changing_the_result(crane):
    q0 = np.array([0.0, 0.5, 0.0, -0.9, 0.0, 0.4, 0.0, 0.2])
    goal = q0 + 0.1
    runs = []
    for skip in (True, False):
        sim = Simulator(crane, SimulatorConfig(skip_rest=skip))
        sim.reset(q0)
        sim.set_position_command(q0)
        sim.step(1.0)                 # sags under gravity, then sticks
        assert not sim.state.qd.any()
        before = sim.evaluations
        sim.step(0.5)
        idle = sim.evaluations - before
        sim.set_position_command(q0)  # the same command again: still at rest
        sim.step(0.1)
        sim.set_position_command(goal)
        moving = sim.step(0.05)
        runs.append((sim.state, idle, sim.evaluations - before))
    (rested, idle_skip, total_skip), (computed, idle_full, total_full) = runs
    assert idle_skip == 0 and idle_full == 500
    assert total_skip == 50 and total_full == 650
    assert np.any(moving.qd != 0.0)
    for field in ('q', 'qd', 'qdd', 'effort', 'friction'):
        np.testing.assert_array_equal(getattr(rested, field), getattr(computed, field))
    assert rested.t == pytest.approx(computed.t)


@pytest.mark.parametrize('position', [True, False])
def test_joint_commands_with_one_mode_everywhere_equal_that_mode(crane, position):
    """Per-joint commands (the emulated servos' path) with every joint in one mode give the
    whole-arm mode's trajectory to the bit; mixed, each joint gets its own law."""
    q0 = np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0, 0.0])
    rng = np.random.default_rng(3)
    goal, effort = q0 + rng.uniform(-0.2, 0.2, 8), rng.uniform(-0.5, 0.5, 8)
    whole, mixed = Simulator(crane), Simulator(crane)
    whole.reset(q0)
    mixed.reset(q0)
    mask = np.full(8, position)
    for _ in range(300):
        if position:
            whole.step(position_command=goal)
        else:
            whole.step(effort=effort)
        mixed.set_joint_commands(goal, effort, mask, whole.kp, whole.effort_limit)
        mixed.step()
    np.testing.assert_array_equal(mixed.state.q, whole.state.q)
    np.testing.assert_array_equal(mixed.state.effort, whole.state.effort)


def test_joint_commands_mix_springs_and_torques(crane):
    sim = Simulator(crane)
    q0 = np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0, 0.0])
    sim.reset(q0)
    mask = np.array([True, False, True, True, True, True, True, True])
    gravity = sim.gravity_effort()
    limit = sim.effort_limit.copy()
    limit[3] = 0.05                        # the elbow's spring cannot carry its load
    for _ in range(500):
        sim.set_joint_commands(q0, gravity, mask, sim.kp, limit)
        sim.step()
    effort = sim.state.effort
    assert effort[1] == pytest.approx(gravity[1])          # the tilt gets its torque
    assert abs(effort[3]) == pytest.approx(0.05)           # saturated at its own limit
    assert abs(sim.state.q[3] - q0[3]) > 0.05              # and sags
    with pytest.raises(ValueError):
        sim.set_joint_commands(q0, gravity, mask, -sim.kp, limit)


# ---------------------------------------------------------------------- real-time catch-up
BENT = np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0, 0.0])


def test_a_late_tick_runs_at_most_its_bound_and_is_counted_and_logged(crane):
    settings = SimSettings()                   # 1 kHz physics, 200 Hz ticks, <= 10 steps
    dt, bound = 1.0 / settings.physics_rate_hz, settings.max_steps_per_tick
    sim = Simulator(crane, settings.simulator_config())
    sim.reset(BENT)
    lines: list[str] = []
    driver = DriverEmulation(sim, settings, lines.append, lambda: 0.0)
    # Instants in the future of the clock: the tick's CPU budget (80 % of its period,
    # measured from `now`) can then never cut the steps short, whatever the machine's load.
    base = time.monotonic() + 1000.0
    period = 1.0 / settings.publish_rate_hz
    half = 0.5 * dt                            # off the step boundaries: no rounding ties
    driver.tick(base)                          # the schedule starts here
    for k in range(1, 5):                      # on time: every step due is run
        driver.tick(base + half + k * period)
    assert driver.counters['late_ticks'] == 0 and driver.counters['overrun_steps'] == 0
    assert lines == []
    on_time = sim.steps

    late = base + half + 4 * period + 0.100    # a tick 100 ms after the last one
    driver.tick(late)
    assert sim.steps - on_time == bound        # faster than real time, up to the bound
    assert driver.counters['late_ticks'] == 1
    assert driver.counters['overrun_steps'] == 100 - bound       # the rest is skipped
    assert driver.largest_lag_s == pytest.approx(0.100, abs=1.5 * dt)
    assert len(lines) == 1 and 'physics 100 ms behind wall time' in lines[0], lines
    assert f'skipped {100 - bound}' in lines[0], lines

    driver.tick(late + 0.050)                  # late again within the throttle: counted only
    assert driver.counters['late_ticks'] == 2 and len(lines) == 1
    driver.tick(late + 0.050 + LOG_THROTTLE_S + 0.050)   # and after it: logged again
    assert driver.counters['late_ticks'] == 3 and len(lines) == 2, lines
    assert 'physics 2050 ms behind' in lines[1] and '3 late ticks' in lines[1], lines
    driver.tick(late + 0.050 + LOG_THROTTLE_S + 0.050 + period)   # the schedule goes on
    assert driver.counters['late_ticks'] == 3

    _, _, values, line = driver.report()
    assert values['late_ticks'] == 3 and values['largest_lag_s'] == driver.largest_lag_s
    assert f'{driver.counters["overrun_steps"]} steps dropped in 3 late ticks' in line


def test_a_late_bus_step_catches_up_at_most_its_bound_and_is_counted_and_logged(
        crane, caplog):
    dt = 0.002
    arm = BusArm(Simulator(crane, SimulatorConfig(dt=dt)), BusConfig.load())
    stall = 10 * dt

    def slow_step(_arm: BusArm) -> None:
        time.sleep(stall)                      # every step makes the next one late

    with PtyBus(arm, dt) as bus, caplog.at_level(logging.WARNING, 'plag_ros.bus.emulator.server'):
        began = time.monotonic()
        deadline = began + 60.0                # against a hang only
        bus.serve(lambda: bus.late_steps >= 4 or time.monotonic() > deadline, slow_step)
        elapsed = time.monotonic() - began
    assert bus.late_steps >= 4, (bus.late_steps, bus.steps)
    # A late step takes at most max_catch_up of simulated time (two steps): the rest,
    # at least the stall less two steps per late step that follows a stall, is skipped and
    # counted. The first step follows none: a loaded machine alone can make it late, by
    # less than the stall (seen: 4.6 ms behind, 0.6 ms skipped).
    assert bus.max_catch_up == pytest.approx(2 * dt)
    assert arm.t <= bus.steps * bus.max_catch_up + 1e-12
    assert bus.dropped_s >= (bus.late_steps - 1) * (stall - 2 * dt) - 1e-9
    assert bus.largest_lag >= stall
    records = [r for r in caplog.records if r.name == 'plag_ros.bus.emulator.server']
    lines = [r.getMessage() for r in records]
    assert lines and all(r.levelno == logging.WARNING for r in records), lines
    assert 'ms behind wall time' in lines[0] and 'skipped' in lines[0], lines
    assert len(lines) <= 1 + math.floor(elapsed / LOG_THROTTLE_S), (len(lines), elapsed)
