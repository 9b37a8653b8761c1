"""Identified figures go back into the model, the simulator, the controller and every node.

The "true" arm here is built without the URDF writer: its masses and COMs are set on the
model's arrays directly (``dataclasses.replace``), its friction on the joint arrays. The
file written from it and applied to the nominal URDF must give that arm's parameters and
torques (1e-12 / 1e-9); the simulator's armature must show in the acceleration a torque step
gives (``qdd = tau / (M_jj + I_a)`` on the base joint, about a vertical axis); and each node
started with ``model.parameters`` must use the file's figures.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from identified_files import write_identified
from ros_domains import domain

from plag_ros.core.control.config import ImpedanceConfig
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix, default_urdf_path
from plag_ros.core.dynamics.model_parameters import (
    ModelSettings,
    load_model_parameters,
    model_with_parameters,
)
from plag_ros.core.dynamics.motors import servo_gains
from plag_ros.core.dynamics.regressor import inertial_parameters
from plag_ros.core.identification.fit import joint_friction
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

ARMATURE = 0.004
STIFFNESS = 23.5


@pytest.fixture(scope='module')
def nominal() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def true_arm(nominal) -> RobotModel:
    mass, com = nominal.body_mass.copy(), nominal.body_com.copy()
    mass[[1, 3]] *= (1.2, 0.8)
    com[3] += (0.004, -0.003, 0.006)
    return dataclasses.replace(nominal, body_mass=mass, body_com=com,
                               damping=nominal.damping + 0.05,
                               friction=nominal.friction * 2.0)


def _write(path, model: RobotModel, **sections) -> str:
    act = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    return write_identified(path, model, armature=ARMATURE, stiffness={act[1]: STIFFNESS},
                            **sections)


def test_the_file_gives_the_true_arm(nominal, true_arm, tmp_path):
    path = _write(tmp_path / 'identified.yaml', true_arm)
    applied, parameters = model_with_parameters(nominal, path)
    np.testing.assert_allclose(inertial_parameters(applied), inertial_parameters(true_arm),
                               rtol=1e-11, atol=1e-14)
    for got, want in zip(joint_friction(applied), joint_friction(true_arm)):
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert applied.friction[~applied.actuated].tolist() == [0.0]     # folded, not twice
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.uniform(-1, 1, (20, nominal.n_joints)) for _ in range(3))
    with torch.inference_mode():
        want = PartialLagrangian(true_arm).inverse_dynamics(q, qd, qdd).numpy()
        got = PartialLagrangian(applied).inverse_dynamics(q, qd, qdd).numpy()
    np.testing.assert_allclose(got, want, atol=1e-9)
    assert 'held-out torque RMS 0.02' in parameters.summary()
    assert model_with_parameters(nominal, '') == (nominal, None)


def test_a_wrong_file_is_refused_clearly(nominal, true_arm, tmp_path):
    path = tmp_path / 'x.yaml'
    path.write_text('a: 1\n')
    with pytest.raises(ValueError, match='not an identified.yaml'):
        load_model_parameters(path)
    _write(path, true_arm, bodies=[{'link': 'elsewhere_link', 'parameters': [1.0] * 10}])
    with pytest.raises(ValueError, match='identified on another robot'):
        model_with_parameters(nominal, path)
    _write(path, true_arm, joints=[{'joint': 'j', 'viscous': 0, 'coulomb': 0,
                                    'armature': -1.0}])
    with pytest.raises(ValueError, match='negative'):
        load_model_parameters(path)
    with pytest.raises(ValueError, match='not a file'):
        ModelSettings(parameters=str(tmp_path / 'missing.yaml'))
    _write(path, true_arm, payload={'link': 'crane_x7_gripper_base_link', 'mass': -0.1,
                                    'com': [0, 0, 0], 'inertia_about_com': np.eye(3).tolist()})
    with pytest.raises(ValueError, match='positive mass'):
        load_model_parameters(path)
    _write(path, true_arm, payload={'link': 'nowhere', 'mass': 0.1, 'com': [0, 0, 0],
                                    'inertia_about_com': (1e-5 * np.eye(3)).tolist()})
    with pytest.raises(ValueError, match='not a link'):
        model_with_parameters(nominal, path)


def test_the_simulator_and_the_controller_take_armature_and_servo_stiffness(
        nominal, true_arm, tmp_path):
    applied, parameters = model_with_parameters(nominal, _write(tmp_path / 'i.yaml', true_arm))
    config = SimulatorConfig().with_model_parameters(parameters, applied)
    kp = np.array(config.kp)
    np.testing.assert_array_equal(np.array(config.armature), ARMATURE)
    expected = servo_gains(applied)[0].copy()
    expected[1] = STIFFNESS
    np.testing.assert_allclose(kp, expected)
    control = ImpedanceConfig(stiffness=5.0, damping=0.5).with_model_parameters(parameters,
                                                                                applied)
    assert np.asarray(control.servo_stiffness)[1] == STIFFNESS
    # armature shows in the dynamics: a torque step on the base joint, friction and
    # gravity out of the way (a vertical axis), from rest
    for armature in (0.0, ARMATURE):
        sim = Simulator(applied, dataclasses.replace(config, friction=False,
                                                     armature=armature))
        tau = np.zeros(sim.n_actuated)
        tau[0] = 0.5
        state = sim.step(1e-3, effort=tau)
        zero = np.zeros(applied.n_joints)
        with torch.inference_mode():
            M, bias = (x.numpy() for x in PartialLagrangian(applied).mass_matrix_and_bias(
                zero, zero))
        G, _ = actuation_matrix(applied)
        A = G.T @ M @ G + armature * np.eye(sim.n_actuated)
        np.testing.assert_allclose(state.qdd[0], np.linalg.solve(A, tau - G.T @ bias)[0],
                                   rtol=1e-9)


def test_every_node_takes_the_figures(nominal, true_arm, tmp_path):
    import rclpy
    from rclpy.context import Context
    from rclpy.parameter import Parameter

    from plag_ros.ros.nodes.dynamics_node import DynamicsNode
    from plag_ros.ros.nodes.impedance_node import ImpedanceNode
    from plag_ros.ros.nodes.sim_node import SimNode

    path = _write(tmp_path / 'identified.yaml', true_arm)
    context = Context()
    rclpy.init(context=context, domain_id=domain(57))
    figures = [Parameter('model.parameters', value=path)]
    try:
        node = DynamicsNode(context=context, parameter_overrides=[
            Parameter('robot_description_source', value='file'), *figures])
        np.testing.assert_allclose(inertial_parameters(node.model),
                                   inertial_parameters(true_arm), rtol=1e-11, atol=1e-14)
        node.destroy_node()
        node = ImpedanceNode(context=context, parameter_overrides=[
            Parameter('robot_description_source', value='file'), *figures])
        assert np.asarray(node.controller.config.servo_stiffness)[1] == STIFFNESS
        # and keeps them through a parameter change (one dropped them before: the tilt's
        # K_s went back to the motor table's 48.8, stepping the position command)
        result = node.set_parameters([Parameter('stiffness', value=[5.0])])[0]
        assert result.successful, result.reason
        assert np.asarray(node.controller.config.servo_stiffness)[1] == STIFFNESS
        assert float(node.controller.config.stiffness) == 5.0
        np.testing.assert_allclose(joint_friction(node.model)[1],
                                   joint_friction(true_arm)[1], rtol=1e-12)
        node.destroy_node()
        node = SimNode(context=context, parameter_overrides=figures)
        assert node.sim.kp[1] == STIFFNESS
        np.testing.assert_array_equal(np.diag(node.sim._armature), ARMATURE)
        node.destroy_node()
        with pytest.raises(ValueError, match='not a file'):
            DynamicsNode(context=context, parameter_overrides=[
                Parameter('model.parameters', value=str(tmp_path / 'none.yaml'))])
    finally:
        context.try_shutdown()


def test_the_effort_scale_reaches_every_reader_of_the_drivers_effort(nominal, tmp_path):
    """An ``effort_scale`` section becomes the model's calibration; the friction report, the
    impedance node's conversion (:func:`motors.driver_effort_to_torque`) and ``identify``
    read effort through it, and the simulator's driver writes effort through it, so a
    simulated arm with the file reads back its own torque."""
    from plag_ros.core.dynamics import motors
    from plag_ros.core.estimation.filters import EstimatorConfig
    from plag_ros.core.estimation.friction import RestFriction
    from plag_ros.core.simulation.driver import DriverEmulation
    from plag_ros.core.simulation.settings import SimSettings

    act = nominal.actuated_names
    scale = {act[0]: 0.9, act[3]: 1.1}
    path = _write(tmp_path / 'scaled.yaml', nominal,
                  effort_scale={'joints': [{'joint': j, 'scale': v} for j, v in scale.items()]})
    model, parameters = model_with_parameters(nominal, path)
    assert parameters.effort_scale == scale and 'effort scale of 2 joints' in parameters.summary()
    want = np.array([scale.get(j, 1.0) for j in nominal.joint_names])
    np.testing.assert_array_equal(model.effort_calibration, want)
    table = motors.driver_effort_to_torque(nominal)
    np.testing.assert_array_equal(motors.driver_effort_to_torque(model), table * want)
    np.testing.assert_array_equal(RestFriction(model, EstimatorConfig()).effort_scale[:7],
                                  (table * want)[:7])
    sim = Simulator(model, SimulatorConfig())
    q0 = 0.5 * (model.joint_lower + model.joint_upper)[model.actuated]
    sim.reset(q0)
    sim.set_position_command(q0)                   # the servos hold the arm up
    for _ in range(20):
        sim.step()
    driver = DriverEmulation(sim, SimSettings(), log=print, now_s=lambda: 0.0)
    names, _, _, effort = driver.joint_state()
    torque = sim.measure().effort
    assert np.abs(torque).max() > 0.5              # gravity loads the arm
    read = effort[[names.index(j) for j in act]] * motors.driver_effort_to_torque(model)[
        model.actuated]
    np.testing.assert_allclose(read, torque, rtol=1e-12)
    for bad, match in (({'joints': [{'joint': act[0], 'scale': -1.0}]}, 'positive'),
                       ({'joints': [{'joint': 'elsewhere', 'scale': 1.0}]}, 'another robot')):
        _write(tmp_path / 'bad.yaml', nominal, effort_scale=bad)
        with pytest.raises(ValueError, match=match):
            model_with_parameters(nominal, tmp_path / 'bad.yaml')
