"""Excitation trajectories and the trajectory controller's interpolation.

Checked against closed forms and finite differences, not against the code's own output:

* the Fourier series starts at rest, its velocity and acceleration are the time
  derivatives of its position (central differences), and one period ends where it began;
* the designed trajectory stays inside every limit on a sampling four times denser than the
  design's, and is far better conditioned than a random trajectory scaled into the limits;
* the analytic gradient of the link heights equals finite differences;
* the trajectory controller's segments: linear without velocities, the cubic Hermite
  polynomial (written out here) with them, the start state before, the last point after;
* the points for the controller approach from the arm's pose and then follow the series.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.identification.excitation import (
    ExcitationLimits,
    FourierExcitation,
    _Heights,
    check_excitation,
    design_excitation,
    excitation_points,
    regressor_condition,
)
from plag_ros.core.simulation.joint_trajectory import TrajectoryCommand


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def designed(model):
    return design_excitation(model, motors.ARM_JOINTS, max_iterations=25, seed=0)


def _random(model, seed: int) -> FourierExcitation:
    """A start-at-rest series with random coefficients (through from_dict's check)."""
    rng = np.random.default_rng(seed)
    J, L = 3, 4
    a, b = rng.normal(scale=0.2, size=(J, L)), rng.normal(scale=0.2, size=(J, L))
    a[:, 0] = -a[:, 1:].sum(axis=1)
    b[:, 0] = -(b[:, 1:] * np.arange(2, L + 1)).sum(axis=1)
    return FourierExcitation.from_dict({
        'joints': list(motors.ARM_JOINTS[:J]), 'period': 6.0,
        'offset': rng.uniform(-0.3, 0.3, J).tolist(), 'a': a.tolist(), 'b': b.tolist()})


def test_the_series_starts_at_rest_and_its_derivatives_are_its_derivatives(model):
    excitation = _random(model, 1)
    q, qd, qdd = excitation.sample(np.array([0.0, excitation.period]))
    np.testing.assert_allclose(qd, 0.0, atol=1e-12)
    np.testing.assert_allclose(qdd, 0.0, atol=1e-12)
    np.testing.assert_allclose(q[0], q[1], atol=1e-12)            # periodic
    t = np.linspace(0.3, 5.7, 37)
    h = 1e-5
    q_plus, qd_plus, _ = excitation.sample(t + h)
    q_minus, qd_minus, _ = excitation.sample(t - h)
    _, qd, qdd = excitation.sample(t)
    np.testing.assert_allclose((q_plus - q_minus) / (2 * h), qd, atol=1e-8)
    np.testing.assert_allclose((qd_plus - qd_minus) / (2 * h), qdd, atol=1e-7)
    again = FourierExcitation.from_dict(excitation.to_dict())
    np.testing.assert_array_equal(again.sample(t)[0], excitation.sample(t)[0])


def test_a_file_that_does_not_start_at_rest_or_is_malformed_is_refused(model):
    data = _random(model, 2).to_dict()
    data['a'][0][0] += 0.1
    with pytest.raises(ValueError, match='rest'):
        FourierExcitation.from_dict(data)
    with pytest.raises(ValueError, match='not an excitation'):
        FourierExcitation.from_dict({'joints': ['x']})
    bad = _random(model, 2).to_dict()
    bad['offset'] = [float('nan')] * 3
    with pytest.raises(ValueError, match='non-finite'):
        FourierExcitation.from_dict(bad)


@pytest.mark.long
def test_the_design_keeps_every_limit_and_conditions_the_regressor(model, designed):
    excitation, condition = designed
    limits = ExcitationLimits()
    found = check_excitation(model, excitation, limits, rate_hz=800.0)    # 4x denser
    assert not found.problems, found
    assert found.velocity <= limits.velocity and found.acceleration <= limits.acceleration
    assert found.position_margin >= limits.position_margin
    assert found.min_height >= limits.min_height
    assert found.effort_fraction <= limits.effort_fraction
    # the ordered excitation moves every arm joint and the regressor is well conditioned,
    # far better than random coefficients scaled into the same limits
    _, qd, _ = excitation.sample(np.linspace(0, excitation.period, 400))
    assert (np.abs(qd).max(axis=0) > 0.3).all()
    assert condition < 400.0, condition
    rng = np.random.default_rng(5)
    a = rng.normal(scale=0.05, size=excitation.a.shape)
    b = rng.normal(scale=0.05, size=excitation.b.shape)
    a[:, 0] = -a[:, 1:].sum(axis=1)
    b[:, 0] = -(b[:, 1:] * np.arange(2, b.shape[1] + 1)).sum(axis=1)
    plain = FourierExcitation(excitation.joints, excitation.period, excitation.offset, a, b,
                              excitation.held_joints, excitation.hold)
    t = np.linspace(0, excitation.period, 100, endpoint=False)
    assert regressor_condition(model, *plain.full_state(model, t)) > 5 * condition


def test_the_height_gradient_is_the_derivative_of_the_heights(model):
    engine = PartialLagrangian(model)
    rng = np.random.default_rng(3)
    q = rng.uniform(-1.0, 1.0, size=(4, model.n_joints))
    heights = _Heights(model, engine, rng.uniform(-1.0, 1.0, size=(20, model.n_joints)))
    z, dz = heights(q)
    h = 1e-6
    for j in range(model.n_joints):
        step = np.zeros(model.n_joints)
        step[j] = h
        with torch.inference_mode():
            numeric = (heights(q + step)[0] - heights(q - step)[0]) / (2 * h)
        np.testing.assert_allclose(dz[:, :, j], numeric, atol=1e-7)
    assert heights.links.size >= 8           # every link beyond the shoulder moves up/down


def test_an_impossible_height_is_refused(model):
    with pytest.raises(ValueError, match='no excitation'):
        design_excitation(model, motors.ARM_JOINTS[:2], limits=ExcitationLimits(
            min_height=5.0), max_iterations=2, starts=1)
    with pytest.raises(ValueError, match='actuated'):
        design_excitation(model, ['no_such_joint'])


def _hermite(t0, t1, q0, q1, v0, v1, t):
    """The cubic through (t0, q0, v0) and (t1, q1, v1), written out."""
    h = t1 - t0
    s = (t - t0) / h
    return ((2 * s ** 3 - 3 * s ** 2 + 1) * q0 + (s ** 3 - 2 * s ** 2 + s) * h * v0
            + (-2 * s ** 3 + 3 * s ** 2) * q1 + (s ** 3 - s ** 2) * h * v1)


def test_the_trajectory_controller_segments():
    start = np.array([0.0, 1.0])
    times = np.array([1.0, 3.0])
    positions = np.array([[1.0, -1.0], [0.5, 0.0]])
    linear = TrajectoryCommand(10.0, start, times, positions)
    np.testing.assert_allclose(linear.position(9.0), start)                # before: start
    np.testing.assert_allclose(linear.position(10.5), [0.5, 0.0])
    np.testing.assert_allclose(linear.position(12.0), [0.75, -0.5])
    np.testing.assert_allclose(linear.position(20.0), positions[-1])       # after: last
    velocities = np.array([[0.5, -1.0], [0.0, 0.0]])
    cubic = TrajectoryCommand(10.0, start, times, positions, velocities)
    for t in (10.25, 10.8):
        np.testing.assert_allclose(cubic.position(t), _hermite(
            0.0, 1.0, start, positions[0], 0.0, velocities[0], t - 10.0), atol=1e-12)
    for t in (11.3, 12.9):
        np.testing.assert_allclose(cubic.position(t), _hermite(
            1.0, 3.0, positions[0], positions[1], velocities[0], velocities[1], t - 10.0),
            atol=1e-12)
    with pytest.raises(ValueError, match='increasing'):
        TrajectoryCommand(0.0, start, np.array([2.0, 1.0]), positions)
    with pytest.raises(ValueError, match='positions'):
        TrajectoryCommand(0.0, start, times, positions[:, :1])


@pytest.mark.long
def test_the_points_approach_then_follow_the_series(model, designed):
    excitation, _ = designed
    start = np.full(len(motors.ARM_JOINTS), 0.05)
    times, positions, velocities = excitation_points(
        excitation, motors.ARM_JOINTS, start, cycles=2, rate_hz=50.0, approach_speed=0.3)
    approach = times[0]
    assert approach >= 2.0
    assert approach >= 1.5 * np.abs(positions[0] - start).max() / 0.3 - 1e-12
    np.testing.assert_allclose(times[-1] - approach, 2 * excitation.period)
    q, qd, _ = excitation.sample(times - approach)
    order = [excitation.joints.index(j) for j in motors.ARM_JOINTS]
    np.testing.assert_allclose(positions, q[:, order], atol=1e-12)
    np.testing.assert_allclose(velocities[:-1], qd[:-1, order], atol=1e-12)
    np.testing.assert_allclose(velocities[[0, -1]], 0.0, atol=1e-9)       # rest at both ends
    # the controller's cubic segments between the points reproduce the series closely
    command = TrajectoryCommand(0.0, start, times, positions, velocities)
    t = np.linspace(approach, times[-1], 3001)
    np.testing.assert_allclose(command.position(t), excitation.sample(t - approach)[0][:, order],
                               atol=2e-5)
    with pytest.raises(ValueError, match='not in the trajectory'):
        excitation_points(excitation, ['other_joint'], start[:1], cycles=1)
