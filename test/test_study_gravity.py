"""Gravity is a model option (Kusaka and Tanaka 2022 [PL] use g = 9.8): engine, autograd
path, extension and simulator energy all read ``RobotModel.gravity``; checked against
Pinocchio with the same gravity vector.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import PinOracle
from robots import serial_chain

from plag_ros.core.dynamics.engine import GRAVITY, PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.simulation.simulator import mechanical_energy

TILTED = (1.5, -0.7, -9.6)          # [m/s^2] not along an axis, so no sign can hide


def _state(n, seed=3):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (3, n))


def test_default_is_the_old_constant():
    model = RobotModel.from_urdf(serial_chain(1, n=4))
    assert model.gravity == GRAVITY == (0.0, 0.0, -9.81)


@pytest.mark.parametrize('compiled', [True, False])
def test_engine_uses_model_gravity_against_pinocchio(compiled):
    xml = serial_chain(2, n=5)
    model = RobotModel.from_urdf(xml, gravity=TILTED)
    q, qd, qdd = _state(model.n_joints)
    engine = PartialLagrangian(model, compiled=compiled)
    oracle = PinOracle(xml, model)
    oracle.pin.gravity = pin.Motion(np.array(TILTED), np.zeros(3))
    tau = engine.decompose(q, qd, qdd).torque.numpy()
    np.testing.assert_allclose(tau, oracle.rnea(q, qd, qdd), rtol=0, atol=1e-10)
    # the gravity parts alone: g(q) from Pinocchio with qd = qdd = 0
    zero = np.zeros_like(q)
    np.testing.assert_allclose(engine.decompose(q, qd, qdd).gravity.numpy().sum(-1),
                               oracle.rnea(q, zero, zero), rtol=0, atol=1e-10)
    auto = engine.decompose_autograd(q, qd, qdd).torque.numpy()
    np.testing.assert_allclose(auto, tau, rtol=0, atol=1e-10)


def test_partial_lagrangian_paper_value_scales_the_gravity_torque():
    xml = serial_chain(4, n=3)
    q = _state(3)[0]
    g981 = PartialLagrangian(RobotModel.from_urdf(xml)).gravity_torque(q).numpy()
    g98 = PartialLagrangian(RobotModel.from_urdf(xml, gravity=(0, 0, -9.8))).gravity_torque(q)
    np.testing.assert_allclose(g98.numpy(), g981 * 9.8 / 9.81, rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize('bad', [(0, 0), (0, 0, float('nan')), 'down'])
def test_bad_gravity_is_refused(bad):
    with pytest.raises(ValueError, match='gravity'):
        RobotModel.from_urdf(serial_chain(1, n=2), gravity=bad)


def test_changed_gravity_recomputes_every_column():
    xml = serial_chain(5, n=4)
    old = RobotModel.from_urdf(xml)
    new = RobotModel.from_urdf(xml, gravity=TILTED)
    q, qd, qdd = _state(old.n_joints)
    previous = PartialLagrangian(old).decompose(q, qd, qdd)
    engine = PartialLagrangian(new)
    out = engine.extend(previous, old, q, qd, qdd)
    assert engine.last_extension.reused == ()
    assert all('gravity' in why for why in engine.last_extension.recomputed.values())
    np.testing.assert_allclose(out.partial.numpy(), engine.decompose(q, qd, qdd).partial.numpy(),
                               rtol=0, atol=1e-12)


def test_simulator_energy_uses_model_gravity():
    xml = serial_chain(6, n=3)
    q = _state(3)[0]
    a, b = (PartialLagrangian(RobotModel.from_urdf(xml, gravity=g))
            for g in ((0, 0, -9.81), (0, 0, -2 * 9.81)))
    _, pa = mechanical_energy(a, q, np.zeros(3))
    _, pb = mechanical_energy(b, q, np.zeros(3))
    assert pb == pytest.approx(2 * pa, rel=1e-12) and abs(pa) > 1e-3
