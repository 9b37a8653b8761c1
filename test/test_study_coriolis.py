"""Coriolis matrix in Christoffel form (plag_ros.core.dynamics.coriolis): C qd against the engine's
velocity-product torques, Mdot - 2C skew-symmetric, Pinocchio's computeCoriolisMatrix, and
the mobile manipulator of Heins [L3W] against the closed forms printed in that post.

[L3W] A. Heins, "Implementing Lagrangian Mechanics Three Ways" (manual, automatic and
symbolic differentiation of a planar mobile manipulator's Lagrangian),
https://adamheins.com/blog/lagrangian-mechanics-three-ways.
"""
from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from pin_oracle import PinOracle
from robots import serial_chain, two_arm_torso

from plag_ros.core.dynamics.coriolis import Coriolis, coriolis_matrix
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel

ROBOTS = {'serial': lambda: serial_chain(3, n=6), 'tree': lambda: two_arm_torso(2)}


def _states(n, batch=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.5, 1.5, (2, batch, n))


@pytest.mark.parametrize('robot', sorted(ROBOTS))
def test_c_qd_is_the_velocity_product_torque_and_mdot_minus_2c_is_skew(robot):
    engine = PartialLagrangian(RobotModel.from_urdf(ROBOTS[robot]()))
    cor = Coriolis(engine)
    q, qd = _states(engine.model.n_joints)
    C = cor.coriolis_matrix(q, qd).numpy()
    assert C.shape == (5, engine.model.n_joints, engine.model.n_joints)
    d = engine.decompose(q, qd, np.zeros_like(q)).numpy()
    velocity_products = d['velocity'].sum((-1, -2))
    np.testing.assert_allclose(np.einsum('bij,bj->bi', C, qd), velocity_products,
                               rtol=0, atol=1e-11)
    assert np.abs(velocity_products).max() > 0.05
    S = cor.mass_matrix_dot(q, qd).numpy() - 2 * C
    np.testing.assert_allclose(S, -S.transpose(0, 2, 1), rtol=0, atol=1e-11)
    np.testing.assert_allclose(cor.mass_matrix(q).numpy(), engine.mass_matrix(q).numpy(),
                               rtol=0, atol=1e-12)
    Gamma = cor.christoffel(q).numpy()
    np.testing.assert_allclose(Gamma, Gamma.transpose(0, 1, 3, 2), rtol=0, atol=1e-12)
    # module function, one sample, same result
    np.testing.assert_allclose(coriolis_matrix(engine, q[0], qd[0]).numpy(), C[0],
                               rtol=0, atol=1e-13)


@pytest.mark.parametrize('robot', sorted(ROBOTS))
def test_against_pinocchio_compute_coriolis_matrix(robot):
    xml = ROBOTS[robot]()
    model = RobotModel.from_urdf(xml)
    oracle = PinOracle(xml, model)
    cor = Coriolis(PartialLagrangian(model))
    data = oracle.pin.createData()
    for q, qd in zip(*_states(model.n_joints, seed=4), strict=True):
        ours = cor.coriolis_matrix(q, qd).numpy()
        theirs = oracle.ours(pin.computeCoriolisMatrix(oracle.pin, data, oracle.config(q),
                                                       oracle.tangent(qd)))
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-11)


def test_bad_input_is_refused():
    cor = Coriolis(PartialLagrangian(RobotModel.from_urdf(serial_chain(1, n=3))))
    with pytest.raises(ValueError, match='joint values'):
        cor.coriolis_matrix(np.zeros(2), np.zeros(2))
    with pytest.raises(ValueError, match='finite'):
        cor.christoffel(np.array([0.0, np.nan, 0.0]))


# ------------------------------------------------------------------ [L3W]
M1, M2, M3 = 3.0, 2.0, 1.0           # the post's parameters
LX, LY, L2, L3 = 0.1, 0.1, 1.0, 0.5
I2, I3 = M2 * L2 ** 2 / 12, M3 * L3 ** 2 / 12
G = 9.8


def mobile_manipulator_urdf() -> str:
    """[L3W]'s planar mobile manipulator in the x-y plane (gravity -y): a base sliding
    along x, a two-link arm at (LX, LY) on it, joints about +z, rods with CoM mid-link."""
    def link(name, mass, com, izz):
        return (f'<link name="{name}"><inertial><origin xyz="{com} 0 0"/>'
                f'<mass value="{mass}"/><inertia ixx="1e-9" iyy="1e-9" izz="{izz!r}" '
                'ixy="0" ixz="0" iyz="0"/></inertial></link>')
    return '\n'.join([
        '<robot name="mobile_manipulator">', '<link name="world"/>',
        link('base', M1, 0.0, 1e-9), link('link2', M2, L2 / 2, I2), link('link3', M3, L3 / 2, I3),
        '<joint name="x1" type="prismatic"><parent link="world"/><child link="base"/>'
        '<axis xyz="1 0 0"/><limit lower="-10" upper="10" effort="100" velocity="10"/></joint>',
        '<joint name="theta2" type="continuous"><parent link="base"/><child link="link2"/>'
        f'<origin xyz="{LX} {LY} 0"/><axis xyz="0 0 1"/></joint>',
        '<joint name="theta3" type="continuous"><parent link="link2"/><child link="link3"/>'
        f'<origin xyz="{L2} 0 0"/><axis xyz="0 0 1"/></joint>',
        '</robot>'])


def printed_mass_matrix(q):
    _, t2, t3 = q
    t23 = t2 + t3
    m12 = -(0.5 * M2 + M3) * L2 * np.sin(t2) - 0.5 * M3 * L3 * np.sin(t23)
    m13 = -0.5 * M3 * L3 * np.sin(t23)
    m22 = ((0.25 * M2 + M3) * L2 ** 2 + 0.25 * M3 * L3 ** 2 + M3 * L2 * L3 * np.cos(t3)
           + I2 + I3)
    m23 = 0.5 * M3 * L3 * (0.5 * L3 + L2 * np.cos(t3)) + I3
    m33 = 0.25 * M3 * L3 ** 2 + I3
    return np.array([[M1 + M2 + M3, m12, m13], [m12, m22, m23], [m13, m23, m33]])


def printed_dM(q):
    """The post's manual dM/dq, stacked as [k] = dM/dq_k."""
    _, t2, t3 = q
    t23 = t2 + t3
    a = -0.5 * M2 * L2 * np.cos(t2) - M3 * L2 * np.cos(t2) - 0.5 * M3 * L3 * np.cos(t23)
    b = -0.5 * M3 * L3 * np.cos(t23)
    e, f = -M3 * L2 * L3 * np.sin(t3), -0.5 * M3 * L2 * L3 * np.sin(t3)
    return np.array([np.zeros((3, 3)),
                     [[0, a, b], [a, 0, 0], [b, 0, 0]],
                     [[0, b, b], [b, e, f], [b, f, 0]]])


def printed_gravity(q):
    _, t2, t3 = q
    t23 = t2 + t3
    return np.array([0.0, (0.5 * M2 + M3) * G * L2 * np.cos(t2)
                     + 0.5 * M3 * L3 * G * np.cos(t23), 0.5 * M3 * L3 * G * np.cos(t23)])


def printed_coriolis(q, qd):
    """The post's C = qd . (dMdq^T - dMdq / 2): C[i, k] = sum_j (dM_ij/dq_k - dM_jk/dq_i / 2)
    qd_j."""
    dMdq = printed_dM(q)
    return np.dot(qd, dMdq.T - 0.5 * dMdq)


@pytest.fixture(scope='module')
def mobile():
    model = RobotModel.from_urdf(mobile_manipulator_urdf(), gravity=(0.0, -G, 0.0))
    assert model.joint_names == ('x1', 'theta2', 'theta3')
    return PartialLagrangian(model)


def test_mobile_manipulator_mass_matrix_gravity_and_derivatives(mobile):
    cor = Coriolis(mobile)
    rng = np.random.default_rng(40)
    for q in rng.uniform(-2, 2, (6, 3)):
        np.testing.assert_allclose(mobile.mass_matrix(q).numpy(), printed_mass_matrix(q),
                                   rtol=0, atol=1e-8)     # 1e-9 kg m^2 filler inertias
        np.testing.assert_allclose(mobile.gravity_torque(q).numpy(), printed_gravity(q),
                                   rtol=0, atol=1e-12)
        dM = cor.mass_matrix_derivative(q).numpy()               # [i, j, k] = dM_ij/dq_k
        np.testing.assert_allclose(dM.transpose(2, 0, 1), printed_dM(q), rtol=0, atol=1e-12)


def test_mobile_manipulator_coriolis(mobile):
    """The post's C gives the same C qd (and torques); as a matrix it is another
    factorisation, not the Christoffel one, and Mdot - 2 C is not skew for it."""
    cor = Coriolis(mobile)
    rng = np.random.default_rng(41)
    skew_post = []
    for q, qd, qdd in rng.uniform(-2, 2, (6, 3, 3)):
        ours, post = cor.coriolis_matrix(q, qd).numpy(), printed_coriolis(q, qd)
        np.testing.assert_allclose(ours @ qd, post @ qd, rtol=0, atol=1e-11)
        tau_post = printed_mass_matrix(q) @ qdd + post @ qd + printed_gravity(q)
        np.testing.assert_allclose(mobile.inverse_dynamics(q, qd, qdd).numpy(), tau_post,
                                   rtol=0, atol=1e-7)
        S = cor.mass_matrix_dot(q, qd).numpy() - 2 * post
        skew_post.append(np.abs(S + S.T).max())
        assert np.abs(ours - post).max() > 1e-3
    assert min(skew_post) > 1e-3
