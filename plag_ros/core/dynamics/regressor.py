"""The joint-torque regressor: the torque is linear in each body's ten inertial parameters.

``torque(q, qd, qdd) = Y(q, qd, qdd) @ pi`` with ``pi`` the bodies' parameters stacked,
ten per body in Pinocchio's order (``pin.Inertia.toDynamicParameters``)::

    [m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]

in the body's frame (its joint's child frame), the inertia about that frame's origin, not
the COM. Column block ``i`` of ``Y`` is body ``i``'s partial torque column per unit
parameter: ``partial[:, i] = Y[:, 10 i:10 i + 10] @ pi_i`` ([PL] eq. 6 is linear in the
body's mass distribution), which is what makes the identification of a body's figures
from measured torques a linear least-squares problem.

Computed with the Newton-Euler recursion in body coordinates, independently of the
partial Lagrangian engine: each body's velocity, angular acceleration and origin
acceleration (gravity entered as an upward base acceleration), then its wrench at the
frame origin per unit parameter (force ``m a + (S(alpha) + S(omega)^2) h``, moment
``I alpha + omega x I omega + h x a``, ``h = m c``), carried to every joint on its path to
the root and projected on the joint's axis. Batched in numpy over samples.

[PL] Kusaka & Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction of
Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 11(6)
149, 2022, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import numpy as np

from plag_ros.core.dynamics.model import RobotModel

__all__ = ['PARAMETER_NAMES', 'body_figures', 'inertia_about_origin', 'inertial_parameters',
           'joint_torque_regressor']

PARAMETER_NAMES = ('m', 'mc_x', 'mc_y', 'mc_z', 'I_xx', 'I_xy', 'I_yy', 'I_xz', 'I_yz',
                   'I_zz')
"""Each body's ten parameters, in order [kg, kg*m, kg*m^2]."""


def inertial_parameters(model: RobotModel) -> np.ndarray:
    """(B, 10) each body's parameters (:data:`PARAMETER_NAMES`) from the model's figures."""
    m = model.body_mass
    c = model.body_com
    # inertia about the frame origin: the parallel-axis theorem from the COM
    I_o = model.body_inertia + m[:, None, None] * (
        np.einsum('bi,bi->b', c, c)[:, None, None] * np.eye(3) - np.einsum('bi,bj->bij', c, c))
    return np.column_stack([m, m[:, None] * c, I_o[:, 0, 0], I_o[:, 0, 1], I_o[:, 1, 1],
                            I_o[:, 0, 2], I_o[:, 1, 2], I_o[:, 2, 2]])


def inertia_about_origin(pi: np.ndarray) -> np.ndarray:
    """(..., 10) parameters -> (..., 3, 3) rotational inertia about the frame origin."""
    pi = np.asarray(pi, dtype=np.float64)
    return np.stack([np.stack([pi[..., 4], pi[..., 5], pi[..., 7]], -1),
                     np.stack([pi[..., 5], pi[..., 6], pi[..., 8]], -1),
                     np.stack([pi[..., 7], pi[..., 8], pi[..., 9]], -1)], -2)


def body_figures(pi: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """One body's (10,) parameters -> (mass [kg], COM (3,) [m], inertia about the COM
    (3, 3) [kg*m^2]): the inverse of :func:`inertial_parameters` for one body."""
    m = float(pi[0])
    c = np.asarray(pi[1:4], dtype=np.float64) / m
    return m, c, inertia_about_origin(pi) - m * (c @ c * np.eye(3) - np.outer(c, c))


def _skew(w: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 3) cross-product matrices, ``skew(w) @ x == w x x``."""
    z = np.zeros(w.shape[:-1])
    return np.stack([np.stack([z, -w[..., 2], w[..., 1]], -1),
                     np.stack([w[..., 2], z, -w[..., 0]], -1),
                     np.stack([-w[..., 1], w[..., 0], z], -1)], -2)


def _inertia_map(w: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 6) with ``L(w) @ [Ixx, Ixy, Iyy, Ixz, Iyz, Izz] == I @ w``."""
    x, y, z = w[..., 0], w[..., 1], w[..., 2]
    o = np.zeros(w.shape[:-1])
    return np.stack([np.stack([x, y, o, z, o, o], -1),
                     np.stack([o, x, y, o, z, o], -1),
                     np.stack([o, o, o, x, y, z], -1)], -2)


def _rotation(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """(3,) unit axis, (N,) angles -> (N, 3, 3) rotations (Rodrigues)."""
    K = _skew(axis)
    s, c = np.sin(angle)[:, None, None], np.cos(angle)[:, None, None]
    return np.eye(3) + s * K + (1.0 - c) * (K @ K)


def joint_torque_regressor(model: RobotModel, q: np.ndarray, qd: np.ndarray,
                           qdd: np.ndarray) -> np.ndarray:
    """The regressor ``Y`` with ``torque = Y @ inertial_parameters(model).ravel()``.

    Args:
        model: the robot (n joints, B bodies; mimic joints as their own joints, filled).
        q, qd, qdd: (n,) or (N, n) positions [rad or m], velocities, accelerations.

    Returns:
        (n, 10 B) for one sample, (N, n, 10 B) for N [N*m or N per parameter unit].
    """
    single = np.ndim(q) == 1
    q, qd, qdd = (np.atleast_2d(np.asarray(x, dtype=np.float64)) for x in (q, qd, qdd))
    N, n = q.shape
    revolute = np.array([t in ('revolute', 'continuous') for t in model.joint_types])
    # per joint: rotation R (child axes in the parent frame) and origin p (parent frame)
    R = np.empty((n, N, 3, 3))
    p = np.empty((n, N, 3))
    omega, alpha, acc = np.empty((n, N, 3)), np.empty((n, N, 3)), np.empty((n, N, 3))
    base_acc = -np.asarray(model.gravity, dtype=np.float64)
    for j in range(n):
        T0 = model.T_parent_joint[j]
        axis = model.joint_axis[j]
        if revolute[j]:
            R[j] = T0[:3, :3] @ _rotation(axis, q[:, j])
            p[j] = T0[:3, 3]
        else:
            R[j] = T0[:3, :3]
            p[j] = T0[:3, 3] + q[:, j, None] * (T0[:3, :3] @ axis)
        parent = int(model.joint_parent[j])
        if parent < 0:
            w_p, dw_p = np.zeros((N, 3)), np.zeros((N, 3))
            a_p = np.broadcast_to(base_acc, (N, 3))
        else:
            w_p, dw_p, a_p = omega[parent], alpha[parent], acc[parent]
        Rt = np.swapaxes(R[j], -1, -2)
        # the parent's origin acceleration carried to this joint's origin, in its axes
        a = np.einsum('nij,nj->ni', Rt, a_p + np.cross(dw_p, p[j])
                      + np.cross(w_p, np.cross(w_p, p[j])))
        w = np.einsum('nij,nj->ni', Rt, w_p)
        dw = np.einsum('nij,nj->ni', Rt, dw_p)
        if revolute[j]:
            spin = axis * qd[:, j, None]
            omega[j] = w + spin
            alpha[j] = dw + axis * qdd[:, j, None] + np.cross(w, spin)
            acc[j] = a
        else:
            slide = axis * qd[:, j, None]
            omega[j], alpha[j] = w, dw
            acc[j] = a + axis * qdd[:, j, None] + 2.0 * np.cross(w, slide)
    B = model.n_bodies
    Y = np.zeros((N, n, 10 * B))
    for i in range(B):
        j = int(model.body_joint[i])
        w, dw, a = omega[j], alpha[j], acc[j]
        # body i's wrench at its frame origin per unit parameter: force (N, 3, 10) and
        # moment (N, 3, 10) rows
        Sw = _skew(w)
        force = np.zeros((N, 3, 10))
        force[:, :, 0] = a
        force[:, :, 1:4] = _skew(dw) + Sw @ Sw
        moment = np.zeros((N, 3, 10))
        moment[:, :, 1:4] = -_skew(a)
        moment[:, :, 4:] = _inertia_map(dw) + Sw @ _inertia_map(w)
        k = j
        while k >= 0:
            axis = model.joint_axis[k]
            Y[:, k, 10 * i:10 * i + 10] = np.einsum(
                'i,nip->np', axis, moment if revolute[k] else force)
            # carry the wrench to the parent joint's frame
            Rk = R[k]
            force = Rk @ force
            moment = Rk @ moment + _skew(p[k]) @ force
            k = int(model.joint_parent[k])
    return Y[0] if single else Y
