"""The torque-mode envelope (plag_ros.bus.host.envelope) against closed forms: the stopping
point of a constant deceleration, each bound's fault at and beside its edge, and the
defaults the driver builds from the e-manual's figures and the chain file."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.host.envelope import Envelope
from plag_ros.core.dynamics.motors import MOTORS, PULSE_RAD

JOINTS = ('a', 'b')


def envelope(**change) -> Envelope:
    values = dict(lower=[-1.0, -2.0], upper=[1.0, 0.0], margin=[0.05, 0.05],
                  deceleration=[10.0, 20.0], velocity=[2.0, 3.0], torque_step=[0.5, 0.25],
                  temperature=[70.0, 70.0])
    values.update(change)
    return Envelope(JOINTS, **{k: np.array(v, dtype=float) for k, v in values.items()})


def test_the_stopping_point_is_the_constant_deceleration_distance():
    env = envelope()
    q, v = np.array([0.2, -1.0]), np.array([1.5, -2.0])
    # s = q + v |v| / (2 a): 0.2 + 2.25 / 20, -1 - 4 / 40
    np.testing.assert_allclose(env.stopping_point(q, v), [0.3125, -1.1], rtol=0, atol=1e-15)


@pytest.mark.parametrize('v, faults', [(1.4, False), (1.5, True), (-1.5, False)])
def test_a_joint_that_cannot_stop_inside_the_margin_is_a_fault(v, faults):
    """Joint a at 0.85 rad: moving up at 1.4 rad/s it stops at 0.948 (inside 0.95); at
    1.5 at 0.9625 (outside); moving away, never."""
    env = envelope()
    why = env.motion_fault(np.array([0.85, -1.0]), np.array([v, 0.0]), np.array([True, True]))
    assert bool(why) == faults, why
    if faults:
        assert why.startswith('position limit ahead: a at 0.850 rad, +1.50 rad/s stops at '
                              '0.963'), why


def test_a_joint_already_past_the_margin_is_a_fault_at_rest():
    env = envelope()
    assert env.motion_fault(np.array([0.0, -0.04]), np.zeros(2), np.array([True, True]))
    assert not env.motion_fault(np.array([0.0, -0.06]), np.zeros(2), np.array([True, True]))


def test_only_the_checked_joints_are_judged():
    env = envelope()
    beyond = np.array([0.99, -1.0]), np.array([5.0, 0.0])
    assert env.motion_fault(*beyond, np.array([True, False]))
    assert not env.motion_fault(*beyond, np.array([False, True]))


@pytest.mark.parametrize('v, faults', [(3.0, False), (3.0001, True), (-3.0001, True),
                                       (math.nan, True)])
def test_velocity_bound(v, faults):
    env = envelope(deceleration=[10.0, 1e6])   # the stop distance out of the way
    why = env.motion_fault(np.array([0.0, -1.0]), np.array([0.0, v]), np.array([True, True]))
    assert bool(why) == faults, why
    if faults:
        assert why.startswith('velocity beyond the envelope: b'), why


@pytest.mark.parametrize('step, faults', [(0.25, False), (0.2501, True), (-0.3, True),
                                          (math.nan, True)])
def test_torque_step_bound(step, faults):
    env = envelope()
    previous = np.array([1.0, 0.25])      # sums exact in binary
    why = env.torque_step_fault(previous, previous + np.array([0.5, step]),
                                np.array([True, True]))
    assert bool(why) == faults, why


@pytest.mark.parametrize('cycles, step, faults', [(1.5, 0.375, False), (1.5, 0.3751, True),
                                                  (2.0, 0.5, False), (40.0, 0.5001, True),
                                                  (0.2, 0.25, False), (0.2, 0.2501, True)])
def test_a_late_write_carries_at_most_one_missed_cycle_of_torque_step(cycles, step, faults):
    """A write 1.5 periods after the last may change by 1.5 bounds, one 40 periods late by
    two at most (the servo applies it as one step); one sooner than a period still by one."""
    env = envelope()
    previous = np.array([1.0, 0.25])
    why = env.torque_step_fault(previous, previous + np.array([0.0, step]),
                                np.array([True, True]), cycles=cycles)
    assert bool(why) == faults, why


def test_temperature_at_the_bound_is_a_fault():
    env = envelope()
    assert not env.temperature_fault(np.array([69.0, 35.0]))
    assert env.temperature_fault(np.array([70.0, 35.0])).startswith('temperature: a +70')


@pytest.mark.parametrize('change', [{'margin': [0.5, 1.5]}, {'velocity': [0.0, 1.0]},
                                    {'deceleration': [1.0, math.nan]},
                                    {'torque_step': [0.1]}])
def test_bad_bounds_are_refused(change):
    with pytest.raises(ValueError, match='envelope'):
        envelope(**change)


def test_the_drivers_defaults_are_the_chain_limits_and_the_e_manuals_speeds():
    """The envelope the driver builds (plag_ros.bus.host.driver) with default settings: the
    chain file's position limits, 0.06 rad, 15 rad/s^2, the no-load speeds (46 and 30
    rev/min at 12 V), 1 N*m a cycle, 70 degC before open() reads each servo's limit."""
    pytest.importorskip('dynamixel_sdk')
    from plag_ros.bus.host.driver import BusDriver

    config = BusConfig.load()
    env = BusDriver(config).envelope
    counts = np.array([s.position_limits for s in config.servos], dtype=float)
    np.testing.assert_allclose(env.lower, (counts[:, 0] - 2048) * PULSE_RAD, atol=1e-15)
    np.testing.assert_allclose(env.upper, (counts[:, 1] - 2048) * PULSE_RAD, atol=1e-15)
    speed = {'XM430-W350': 46 * 2 * math.pi / 60, 'XM540-W270': 30 * 2 * math.pi / 60}
    np.testing.assert_allclose(env.velocity, [speed[s.model] for s in config.servos],
                               rtol=1e-15)
    assert env.velocity[0] == pytest.approx(4.817, abs=1e-3)    # the URDF's velocity limit
    np.testing.assert_array_equal(env.margin, 0.06)
    np.testing.assert_array_equal(env.deceleration, 15.0)
    # the margin covers the hold's overshoot below 3 rad/s (envelope docstring): the pan's
    # spring-damper from the motor table, one cycle late
    import torch

    from plag_ros.core.dynamics.engine import PartialLagrangian
    from plag_ros.core.dynamics.model import RobotModel, actuation_matrix, default_urdf_path
    from plag_ros.core.dynamics.motors import back_emf_damping, position_loop_stiffness

    model = RobotModel.from_urdf(default_urdf_path())
    G, offset = actuation_matrix(model)
    stretched = np.zeros(G.shape[1])
    stretched[1] = math.pi / 2                  # the tilt lays the arm out horizontally
    M = PartialLagrangian(model, dtype=torch.float64).mass_matrix(
        torch.tensor(G @ stretched + offset)).numpy()
    motor = MOTORS['XM430-W350']
    inertia = float((G.T @ M @ G)[0, 0]) + motor.armature     # the pan's, the largest
    assert inertia == pytest.approx(0.169, abs=0.002)
    k_s = float(position_loop_stiffness(motor.stall_torque, 800))
    zeta = back_emf_damping(motor.stall_torque, motor.no_load_speed) / (2 * math.sqrt(
        k_s * inertia))
    wd = math.sqrt(1 - zeta ** 2)
    per_speed = math.sqrt(inertia / k_s) * math.exp(-zeta / wd * math.atan2(wd, zeta))
    v = np.linspace(0.0, 3.0, 301)
    assert np.all(v ** 2 / (2 * env.deceleration[0]) + env.margin[0]
                  > (per_speed + 0.005) * v)
    np.testing.assert_array_equal(env.torque_step, 1.0)
    np.testing.assert_array_equal(env.temperature, 70.0)
    assert MOTORS['XM540-W270'].continuous_torque == pytest.approx(5.3)
