"""The servo model: the simulator's servo and the controller's model of it agree per joint.

The expected figures are derived here from the documented numbers of the motor table
(ROBOTIS e-manual: 12 V stall torque 4.1 N*m for the XM430-W350, 10.6 N*m for the
XM540-W270 on the shoulder tilt; Position P Gain ``KPP = P / 128`` acting on a PWM value of
full scale 885; 4096 encoder pulses per turn; the driver's P = 800; no-load speed 46 rpm,
the URDF velocity limit), not from the functions under test.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from plag_ros.core.control import stability
from plag_ros.core.control.config import ImpedanceConfig
from plag_ros.core.control.impedance import PartialImpedanceController
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix, default_urdf_path
from plag_ros.core.simulation.simulator import Simulator

TILT = 'crane_x7_shoulder_revolute_part_tilt_joint'
XM430_STALL, XM540_STALL = 4.1, 10.6          # [N*m] at 12 V
NO_LOAD_SPEED = 46.0 * 2.0 * math.pi / 60.0   # [rad/s]


def documented_stiffness(stall: float, p_gain: float = 800.0) -> float:
    """K_s [N*m/rad]: torque per PWM unit times PWM units per pulse, per pulse in rad."""
    torque_per_pwm = stall / 885.0
    pwm_per_pulse = p_gain / 128.0
    return torque_per_pwm * pwm_per_pulse * 4096.0 / (2.0 * math.pi)


@pytest.fixture(scope='module')
def engine() -> PartialLagrangian:
    return PartialLagrangian(RobotModel.from_urdf(default_urdf_path()), dtype=torch.float64)


@pytest.fixture(scope='module')
def expected(engine):
    """(stall torque, stiffness, back-EMF damping) per actuated joint, from the documents."""
    model = engine.model
    names = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    assert len(names) == 8 and names[1] == TILT
    stall = np.array([XM540_STALL if n == TILT else XM430_STALL for n in names])
    stiffness = np.array([documented_stiffness(s) for s in stall])
    return stall, stiffness, stall / NO_LOAD_SPEED


def test_documented_figures_match_the_motor_tables_quoted_values(expected):
    _, stiffness, damping = expected
    assert stiffness[0] == pytest.approx(18.9, abs=0.05)     # XM430-W350 at P = 800
    assert stiffness[1] == pytest.approx(48.8, abs=0.05)     # XM540-W270
    assert damping[0] == pytest.approx(0.85, abs=0.005)


def test_simulator_servo_matches_the_documented_servo(engine, expected):
    stall, stiffness, damping = expected
    sim = Simulator(engine.model, engine=engine)
    np.testing.assert_allclose(sim.kp, stiffness, rtol=1e-12)
    np.testing.assert_allclose(sim.kd, damping, rtol=1e-8)   # URDF limit to 9 digits
    np.testing.assert_array_equal(sim.effort_limit, stall)
    sim.set_p_gain(5.0)                                      # the driver's stop gain
    np.testing.assert_allclose(sim.kp, [documented_stiffness(s, 5.0) for s in stall],
                               rtol=1e-12)


def test_controller_and_stability_model_the_same_servo_as_the_simulator(engine, expected):
    _, stiffness, damping = expected
    model = engine.model
    sim = Simulator(model, engine=engine)
    ctl = PartialImpedanceController(engine, ImpedanceConfig(command_interface='position'))
    np.testing.assert_allclose(ctl.servo_stiffness, stiffness, rtol=1e-12)
    np.testing.assert_array_equal(ctl.servo_stiffness, sim.kp)
    # The stability analysis the controller's gain check runs: joint damping = URDF damping
    # (a mimic joint's folded onto the joint it follows) + the servo's back-EMF damping.
    G, _ = actuation_matrix(model)
    urdf_damping = np.diag(G.T @ np.diag(model.damping) @ G)
    loops = stability.joint_loops(model, 'position', 200.0, engine=engine)
    np.testing.assert_allclose([loop.servo_stiffness for loop in loops], stiffness,
                               rtol=1e-12)
    np.testing.assert_allclose([loop.damping for loop in loops], urdf_damping + damping,
                               rtol=1e-8)
    np.testing.assert_allclose([loop.damping for loop in loops], urdf_damping + sim.kd,
                               rtol=1e-15)
