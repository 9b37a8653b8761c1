"""The closed form of the partial Lagrangian split as torch array operations.

The formulas are those of :mod:`plag_ros.core.dynamics.engine` (see its docstring; Kusaka and
Tanaka 2022 [PL], eq. 6; Gunji, Kusaka and Tanaka 2025 [MPF], eq. 1 and 10), vectorised
over a flat batch (N, n) and over every (body, source) pair at once. This form serves
float32, GPUs and ``torch.func`` (the autograd path builds its Lagrangians from
:func:`body_frames`); float64 on the CPU runs the compiled loop of
:mod:`plag_ros.core.dynamics.kernel` instead, and the tests hold the two equal to 1e-10.

Frames: spatial vectors in world coordinates, angular part first, taken at the world
origin. Shapes: N samples, n joints, B bodies, P (body, source) pairs.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from plag_ros.core.dynamics.model import RobotModel

__all__ = ['Constants', 'body_frames', 'closed_form', 'friction', 'pair_terms']


def _skew(v: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 3) with skew(v) @ x == v x x."""
    out = np.zeros(v.shape + (3,))
    out[..., 0, 1], out[..., 0, 2], out[..., 1, 2] = -v[..., 2], v[..., 1], -v[..., 0]
    return out - np.swapaxes(out, -1, -2)


def _cross(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.cross(a, b)


def _cross_motion(a: Tensor, b: Tensor) -> Tensor:
    """Spatial motion cross product a x b, (..., 6) angular first."""
    wa, va, wb, vb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return torch.cat([_cross(wa, wb), _cross(wa, vb) + _cross(va, wb)], -1)


def _cross_force(a: Tensor, f: Tensor) -> Tensor:
    """Spatial force cross product a x* f, (..., 6) angular (moment) first."""
    wa, va, n, lin = a[..., :3], a[..., 3:], f[..., :3], f[..., 3:]
    return torch.cat([_cross(wa, n) + _cross(va, lin), _cross(wa, lin)], -1)


@dataclass(frozen=True)
class Constants:
    """Everything the torch form of the closed form needs about the model, as tensors of
    the engine's dtype and device.

    A *pair* p = (body i, source joint s) exists for every joint s on the path from the
    root to body i; only pairs carry non-zero acceleration/velocity parts, so the closed
    form works on pairs (44 of 81 for the CRANE-X7) and scatters them into the table.
    """

    parent: tuple[int, ...]
    axis: Tensor               # (n, 3) joint axes in the joint frames
    K: Tensor                  # (n, 3, 3) skew(axis); K2 = K @ K (Rodrigues)
    K2: Tensor
    T_parent_joint: Tensor     # (n, 4, 4)
    homogeneous_row: Tensor    # (1, 4)
    eye3: Tensor               # (3, 3)
    revolute: Tensor           # (n,) 1.0 for revolute/continuous, 0.0 for prismatic
    joint_anc: Tensor          # (n, n) joint_anc[j, s] = 1 if s is j or an ancestor of j
    gravity: Tensor            # (3,)
    damping: Tensor            # (n,)
    coulomb: Tensor            # (n,)
    n_bodies: int
    body_joint: Tensor         # (B,) int
    mass: Tensor               # (B,)
    com: Tensor                # (B, 3) in the joint child frame
    inertia: Tensor            # (B, 3, 3) about the COM, joint child frame
    mask_ki: Tensor            # (n, B) joint k on body i's path
    pair_body: Tensor          # (P,) int
    pair_source: Tensor        # (P,) int
    pair_joint: Tensor         # (P,) int, joint body i rides on
    pair_flat: Tensor          # (P,) int, i * n + s
    pair_mask_k: Tensor        # (n, P) joint k on the path of the pair's body
    pair_onehot_source: Tensor  # (P, n) sums pairs into mass-matrix columns

    @classmethod
    def build(cls, model: RobotModel, bodies: np.ndarray, gravity: Sequence[float],
              dtype: torch.dtype, device: torch.device) -> Constants:
        """Constants of the body columns ``bodies`` (indices into ``model``'s bodies) with
        world gravity ``gravity`` (3,) [m/s^2]."""
        def real(x: Any) -> Tensor:
            return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=dtype, device=device)

        def index(x: Any) -> Tensor:
            return torch.as_tensor(np.asarray(x, dtype=np.int64), device=device)

        n = model.n_joints
        joint_anc = np.zeros((n, n))
        for j in range(n):
            joint_anc[j, model.root_path(j)] = 1.0
        anc = joint_anc[model.body_joint[bodies]]                               # (B, n)
        pair_body, pair_source = np.nonzero(anc)
        K = _skew(model.joint_axis)
        return cls(
            parent=tuple(int(p) for p in model.joint_parent),
            axis=real(model.joint_axis), K=real(K), K2=real(K @ K),
            T_parent_joint=real(model.T_parent_joint),
            homogeneous_row=real([[0.0, 0.0, 0.0, 1.0]]), eye3=real(np.eye(3)),
            revolute=real([t != 'prismatic' for t in model.joint_types]),
            joint_anc=real(joint_anc), gravity=real(gravity),
            damping=real(model.damping), coulomb=real(model.friction),
            n_bodies=len(bodies),
            body_joint=index(model.body_joint[bodies]),
            mass=real(model.body_mass[bodies]), com=real(model.body_com[bodies]),
            inertia=real(model.body_inertia[bodies]), mask_ki=real(anc.T),
            pair_body=index(pair_body), pair_source=index(pair_source),
            pair_joint=index(model.body_joint[bodies][pair_body]),
            pair_flat=index(pair_body * n + pair_source),
            pair_mask_k=real(anc[pair_body].T),
            pair_onehot_source=real(np.eye(n)[pair_source]),
        )


def body_frames(c: Constants, q: Tensor) -> Tensor:
    """World pose of each joint's child frame, (N, n) -> (N, n, 4, 4)."""
    N, n = q.shape
    s, co = torch.sin(q)[..., None, None], torch.cos(q)[..., None, None]
    # Rodrigues for revolute joints, identity rotation and a slide for prismatic ones.
    R = c.eye3 + c.revolute[:, None, None] * (s * c.K + (1.0 - co) * c.K2)    # (N, n, 3, 3)
    p = ((1.0 - c.revolute) * q)[..., None] * c.axis                            # (N, n, 3)
    # Built out of place so the same code runs under torch.func transforms.
    bottom = torch.broadcast_to(c.homogeneous_row, (N, n, 1, 4))
    local = torch.cat([torch.cat([R, p[..., None]], -1), bottom], -2)
    A = c.T_parent_joint @ local                                                # parent->child
    frames: list[Tensor] = []
    for j, parent in enumerate(c.parent):
        frames.append(A[:, j] if parent < 0 else frames[parent] @ A[:, j])
    return torch.stack(frames, 1)


def _motion_subspaces(c: Constants, T: Tensor) -> Tensor:
    """Joint motion subspaces S (N, n, 6) in world coordinates from the body frames."""
    axis_w = (T[..., :3, :3] @ c.axis[..., None])[..., 0]                     # (N, n, 3)
    rev = c.revolute[:, None]
    linear = rev * _cross(T[..., :3, 3], axis_w) + (1.0 - rev) * axis_w
    return torch.cat([rev * axis_w, linear], -1)


def _body_inertials(c: Constants, T: Tensor) -> tuple[Tensor, Tensor]:
    """World COM (N, B, 3) and rotational inertia about it (N, B, 3, 3) of each body."""
    Tb = T[:, c.body_joint]                                                     # (N, B, 4, 4)
    R = Tb[..., :3, :3]
    com = Tb[..., :3, 3] + (R @ c.com[..., None])[..., 0]
    return com, R @ c.inertia @ R.swapaxes(-1, -2)


def _apply_inertia(mass: Tensor, com: Tensor, I_com: Tensor, x: Tensor) -> Tensor:
    """Spatial inertia times motion vector: (..., 6) momentum at the world origin.

    For x = (w, v): linear momentum m (v + w x c), angular I_c w + c x (linear).
    """
    w, v = x[..., :3], x[..., 3:]
    linear = mass[..., None] * (v + _cross(w, com))
    angular = (I_com @ w[..., None])[..., 0] + _cross(com, linear)
    return torch.cat([angular, linear], -1)


def pair_terms(c: Constants, q: Tensor, qd: Tensor,
                qdd: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The closed form of :mod:`plag_ros.core.dynamics.engine` per pair, over a flat batch (N, n).

    Returns:
        M_pairs (N, n, P) = M_i[k, s] of each pair p = (i, s); the acceleration and velocity
        parts of each pair (N, n, P); gravity (N, n, B).
    """
    T = body_frames(c, q)
    S = _motion_subspaces(c, T)                                                 # (N, n, 6)
    com, I_com = _body_inertials(c, T)                                          # (N, B, 3)
    v = c.joint_anc @ (S * qd[..., None])                                       # (N, n, 6)

    # Per pair p = (i, s): I_i S_s and the velocity-part vector F_p.
    pb, ps = c.pair_body, c.pair_source
    m_p, c_p, I_p = c.mass[pb], com[:, pb], I_com[:, pb]
    S_s, v_i = S[:, ps], v[:, c.pair_joint]                                     # (N, P, 6)
    IS = _apply_inertia(m_p, c_p, I_p, S_s)
    h = _apply_inertia(c.mass, com, I_com, v[:, c.body_joint])                  # (N, B, 6)
    X = _cross_motion(2.0 * v[:, ps] - v_i, S_s)
    F = _apply_inertia(m_p, c_p, I_p, X) + _cross_force(v_i, IS) + _cross_force(S_s, h[:, pb])
    # Project on every joint k at once: (N, n, 2P), then keep k on body i's path.
    Z = S @ torch.cat([IS, F], 1).swapaxes(1, 2)
    P = pb.shape[0]
    M_pairs = Z[..., :P] * c.pair_mask_k                                        # (N, n, P)
    acc_pairs = M_pairs * qdd[:, None, ps]
    vel_pairs = 0.5 * Z[..., P:] * c.pair_mask_k * qd[:, None, ps]

    # gravity[k, i] = -S_k . I_i a_g with a_g = (0, g): wrench (c x -m g, -m g)
    mg = torch.broadcast_to(-c.mass[:, None] * c.gravity, com.shape)           # (N, B, 3)
    wrench = torch.cat([_cross(com, mg), mg], -1)                               # (N, B, 6)
    gravity = (S @ wrench.swapaxes(1, 2)) * c.mask_ki                           # (N, n, B)
    return M_pairs, acc_pairs, vel_pairs, gravity


def closed_form(c: Constants, q: Tensor, qd: Tensor, qdd: Tensor) -> dict[str, Tensor]:
    """Dense tables (every field but friction) of a flat batch (N, n) by the torch form."""
    N, n = q.shape
    _, acc_pairs, vel_pairs, gravity = pair_terms(c, q, qd, qdd)

    def dense(pairs: Tensor) -> Tensor:
        out = pairs.new_zeros((N, n, c.n_bodies * n))
        out[..., c.pair_flat] = pairs
        return out.reshape(N, n, c.n_bodies, n)

    acceleration, velocity = dense(acc_pairs), dense(vel_pairs)
    partial = acceleration.sum(-1) + velocity.sum(-1) + gravity
    return {'torque': partial.sum(-1), 'partial': partial, 'acceleration': acceleration,
            'velocity': velocity, 'gravity': gravity}


def friction(c: Constants, qd: Tensor, smoothing: float) -> Tensor:
    """Viscous plus Coulomb joint friction (..., n); ``smoothing`` > 0 [rad/s] replaces
    sign(qd) by tanh(qd / smoothing)."""
    sign = torch.tanh(qd / smoothing) if smoothing > 0.0 else torch.sign(qd)
    return c.damping * qd + c.coulomb * sign
