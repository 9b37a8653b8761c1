"""The joint-torque regressor against Pinocchio's and against the engine.

``plag_ros.core.dynamics.regressor`` is a Newton-Euler recursion of its own. Checked, in float64 at
seeded random states, on the CRANE-X7 (mimic finger), a 10-DoF chain mixing revolute,
prismatic and continuous joints with fixed links between them, and a branching torso:

* ``Y`` equals ``pin.computeJointTorqueRegressor`` entry for entry (Pinocchio's joint order
  mapped to ours) to 1e-9, and each body's ten parameters equal Pinocchio's
  ``toDynamicParameters`` of the same URDF;
* ``Y @ pi`` is the engine's joint torque, and each body's column block times its
  parameters the engine's partial torque column ([PL] eq. 6: linear in the body's
  parameters), to 1e-9;
* a batch equals the samples one by one.
"""
from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
import torch
from pin_oracle import PinOracle
from robots import serial_chain, two_arm_torso

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.regressor import inertial_parameters, joint_torque_regressor

TOL = 1e-9
ROBOTS = {'crane_x7': default_urdf_path().read_text(), 'serial10': serial_chain(seed=4),
          'two_arm_torso': two_arm_torso(seed=6)}


def _samples(model: RobotModel, count: int, seed: int):
    rng = np.random.default_rng(seed)
    lo = np.where(np.isfinite(model.joint_lower), model.joint_lower, -np.pi)
    hi = np.where(np.isfinite(model.joint_upper), model.joint_upper, np.pi)
    q = np.stack([model.fill_mimic(rng.uniform(lo, hi)) for _ in range(count)])
    qd = np.stack([model.fill_mimic(rng.uniform(-2, 2, model.n_joints)) for _ in range(count)])
    qdd = np.stack([model.fill_mimic(rng.uniform(-5, 5, model.n_joints))
                    for _ in range(count)])
    return q, qd, qdd


@pytest.mark.parametrize('name', ROBOTS)
def test_regressor_equals_pinocchios(name):
    model = RobotModel.from_urdf(ROBOTS[name])
    oracle = PinOracle(ROBOTS[name], model)
    if sorted(int(j) for j in model.body_joint) != list(range(model.n_joints)):
        pytest.skip('Pinocchio lumps every link of a joint into one inertia')
    block = {i: int(oracle.pin_of_ours[model.body_joint[i]]) for i in range(model.n_bodies)}
    expected_pi = np.array([oracle.pin.inertias[block[i] + 1].toDynamicParameters()
                            for i in range(model.n_bodies)])
    np.testing.assert_allclose(inertial_parameters(model), expected_pi, rtol=0, atol=TOL)
    data = oracle.pin.createData()
    for q, qd, qdd in zip(*_samples(model, 5, seed=11)):
        theirs = pin.computeJointTorqueRegressor(oracle.pin, data, oracle.config(q),
                                                 oracle.tangent(qd), oracle.tangent(qdd))
        ours = joint_torque_regressor(model, q, qd, qdd)
        for i, b in block.items():
            np.testing.assert_allclose(ours[:, 10 * i:10 * i + 10],
                                       np.asarray(theirs)[oracle.pin_of_ours,
                                                          10 * b:10 * b + 10],
                                       rtol=0, atol=TOL, err_msg=f'body {i}')


@pytest.mark.parametrize('name', ROBOTS)
def test_regressor_times_parameters_is_the_engines_torque_and_partial(name):
    model = RobotModel.from_urdf(ROBOTS[name])
    engine = PartialLagrangian(model, dtype=torch.float64)
    pi = inertial_parameters(model)
    q, qd, qdd = _samples(model, 6, seed=12)
    Y = joint_torque_regressor(model, q, qd, qdd)
    assert Y.shape == (6, model.n_joints, 10 * model.n_bodies)
    for k in range(6):
        out = engine.decompose(q[k], qd[k], qdd[k]).numpy()
        np.testing.assert_allclose(Y[k] @ pi.ravel(), out['torque'], rtol=0, atol=TOL)
        columns = np.stack([Y[k, :, 10 * i:10 * i + 10] @ pi[i]
                            for i in range(model.n_bodies)], axis=1)
        np.testing.assert_allclose(columns, out['partial'], rtol=0, atol=TOL)
        np.testing.assert_array_equal(Y[k], joint_torque_regressor(model, q[k], qd[k],
                                                                   qdd[k]))


@pytest.mark.parametrize('name', ROBOTS)
def test_body_figures_invert_the_parameters(name):
    """Mass, COM and inertia about the COM back from each body's ten parameters."""
    from plag_ros.core.dynamics.regressor import body_figures

    model = RobotModel.from_urdf(ROBOTS[name])
    for i, pi in enumerate(inertial_parameters(model)):
        mass, com, inertia = body_figures(pi)
        assert mass == model.body_mass[i]
        np.testing.assert_allclose(com, model.body_com[i], rtol=0, atol=1e-15)
        np.testing.assert_allclose(inertia, model.body_inertia[i], rtol=0, atol=1e-15)
