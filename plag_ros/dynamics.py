"""Partial Lagrangian engine: joint torques split by body and by motion source.

For body ``i`` with partial Lagrangian ``L_i = K_i - P_i`` (seed 000 eq. 6) and the operator
``D_k = d/dt d/dqd_k - d/dq_k``, the partial torque ``partial[k, i] = D_k L_i`` is the torque
at joint ``k`` caused by the motion of body ``i``; summed over bodies it is the joint torque
(== RNEA). Seed 002 (eq. 1 and 10) splits each partial torque by the joint whose motion
propagates it:

    acceleration[k, i, s] = M_i[k, s] qdd_s
    velocity[k, i, s]     = 1/2 d partial[k, i]/d qd_s * qd_s    (Euler: the parts of a
                                                                  degree-2 form sum to it)
    gravity[k, i]         = d P_i / d q_k

and ``sum_s acceleration + sum_s velocity + gravity == partial``. Index order is always
``[..., joint k, body i, source joint s]`` with batch dimensions first.

Two implementations agree to rounding:

* :meth:`PartialLagrangian.decompose_autograd` builds every ``L_i(q, qd)`` from the body
  energies and differentiates it with ``torch.func``, as the papers do.
* :meth:`PartialLagrangian.decompose` is the closed form used live and on long bags. With
  spatial vectors in world coordinates (angular first, at the world origin), joint motion
  subspaces ``S_k``, body velocities ``v_i`` and spatial inertias ``I_i``:

      partial[k, i]           = S_k . (I_i a_i + v_i x* I_i v_i - I_i a_g)
      M_i[k, s]               = S_k . I_i S_s
      velocity[k, i, s] / qd_s = 1/2 S_k . [I_i((2 v_s - v_i) x S_s)
                                           + v_i x* I_i S_s + S_s x* I_i v_i]
      gravity[k, i]           = -S_k . I_i a_g

  for joints ``k, s`` on the path from the root to body ``i`` (zero elsewhere; for a tree
  this is the block sparsity of seed 001's partial torque tensor). The velocity formula is
  the symmetric quadratic form of the Coriolis/centrifugal terms differentiated by ``qd_s``:
  kinematics is computed once per sample and every body and source in one vectorised pass,
  O(n^2 B) per sample.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .model import RobotModel

__all__ = ['Decomposition', 'PartialLagrangian', 'GRAVITY']

GRAVITY = (0.0, 0.0, -9.81)
"""Gravity in the world (root link) frame [m/s^2]."""


@dataclass(frozen=True)
class Decomposition:
    """Joint torques of one or many samples, split by body and by motion source.

    Attributes (batch dims ``...``, n joints, B bodies; [N*m] for revolute, [N] prismatic):
        torque: (..., n) rigid-body joint torque (== RNEA), friction excluded.
        partial: (..., n, B) ``partial[k, i] = D_k L_i``.
        acceleration: (..., n, B, n) ``M_i[k, s] * qdd_s``.
        velocity: (..., n, B, n) ``1/2 d partial[k, i] / d qd_s * qd_s``.
        gravity: (..., n, B) ``d P_i / d q_k``.
        friction: (..., n) viscous + Coulomb joint friction (Rayleigh dissipation, seed
            000), reported apart from the Lagrangian terms.
    """

    torque: Tensor
    partial: Tensor
    acceleration: Tensor
    velocity: Tensor
    gravity: Tensor
    friction: Tensor

    def numpy(self) -> dict[str, np.ndarray]:
        """All fields as float64 numpy arrays (for messages, bags and plots)."""
        return {f.name: getattr(self, f.name).detach().cpu().double().numpy()
                for f in dataclasses.fields(self)}


def _cross_motion(a: Tensor, b: Tensor) -> Tensor:
    """Spatial motion cross product a x b, (..., 6) angular first."""
    wa, va, wb, vb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return torch.cat([torch.linalg.cross(wa, wb),
                      torch.linalg.cross(wa, vb) + torch.linalg.cross(va, wb)], dim=-1)


def _cross_force(a: Tensor, f: Tensor) -> Tensor:
    """Spatial force cross product a x* f, (..., 6) angular (moment) first."""
    wa, va, n, lin = a[..., :3], a[..., 3:], f[..., :3], f[..., 3:]
    return torch.cat([torch.linalg.cross(wa, n) + torch.linalg.cross(va, lin),
                      torch.linalg.cross(wa, lin)], dim=-1)


def _skew(v: Tensor) -> Tensor:
    """(..., 3) -> (..., 3, 3) with skew(v) @ x == v x x."""
    zero = torch.zeros_like(v[..., 0])
    return torch.stack([
        torch.stack([zero, -v[..., 2], v[..., 1]], dim=-1),
        torch.stack([v[..., 2], zero, -v[..., 0]], dim=-1),
        torch.stack([-v[..., 1], v[..., 0], zero], dim=-1),
    ], dim=-2)


class PartialLagrangian:
    """Partial Lagrangian inverse dynamics of a :class:`RobotModel`, batched over samples.

    Args:
        model: the robot.
        dtype: floating dtype of every computation (float64 for analysis, float32 is
            allowed for throughput).
        device: torch device (CPU by default).
    """

    chunk_size: int = 512
    """Samples per vectorised pass in :meth:`decompose` (cache-sized; see benchmarks)."""

    def __init__(self, model: RobotModel, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f'dtype must be floating point, got {dtype}')
        self.model = model
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device('cpu')
        n, B = model.n_joints, model.n_bodies

        def tensor(x) -> Tensor:
            return torch.as_tensor(np.asarray(x), dtype=dtype, device=self.device)

        self._parent = [int(p) for p in model.joint_parent]
        self._axis = tensor(model.joint_axis)                                   # (n, 3)
        self._K = _skew(self._axis)                                             # (n, 3, 3)
        self._K2 = self._K @ self._K
        self._T_parent_joint = tensor(model.T_parent_joint)                     # (n, 4, 4)
        self._homogeneous_row = tensor([[0.0, 0.0, 0.0, 1.0]])
        prismatic = np.array([t == 'prismatic' for t in model.joint_types])
        self._revolute = tensor(~prismatic)                                     # (n,)
        self._prismatic = tensor(prismatic)

        # ancestor-or-self masks: joint_anc[j, s] (n, n), body_anc[i, s] (B, n)
        joint_anc = np.zeros((n, n))
        for j in range(n):
            s = j
            while s >= 0:
                joint_anc[j, s] = 1.0
                s = model.joint_parent[s]
        self._joint_anc = tensor(joint_anc)
        body_anc = joint_anc[model.body_joint]
        self._body_anc_np = body_anc
        self._gravity = tensor(GRAVITY)
        self._set_bodies(np.arange(B))
        self._damping = tensor(model.damping)
        self._coulomb = tensor(model.friction)
        self._link_joint = torch.as_tensor(model.link_joint, device=self.device)
        self._T_joint_link = tensor(model.T_joint_link)

    def _set_bodies(self, bodies: np.ndarray) -> None:
        """Cache the inertial figures and index tables of the body columns ``bodies``.

        A *pair* p = (body i, source joint s) exists for every joint s on the path from the
        root to body i; only pairs carry non-zero acceleration/velocity parts, so the fast
        path works on pairs (44 of 81 for the CRANE-X7) and scatters into the dense table.
        """
        model = self.model
        n = model.n_joints

        def tensor(x) -> Tensor:
            return torch.as_tensor(np.asarray(x), dtype=self.dtype, device=self.device)

        def index(x) -> Tensor:
            return torch.as_tensor(np.asarray(x, dtype=np.int64), device=self.device)

        anc = self._body_anc_np[bodies]                                         # (B, n)
        pair_body, pair_source = np.nonzero(anc)
        self._bodies = bodies
        self._n_body_columns = len(bodies)
        self._body_joint = index(model.body_joint[bodies])
        self._mass = tensor(model.body_mass[bodies])                             # (B,)
        self._com = tensor(model.body_com[bodies])                              # (B, 3)
        self._inertia = tensor(model.body_inertia[bodies])                      # (B, 3, 3)
        self._mask_ki = tensor(anc.T)                                           # (n, B)
        self._pair_body = index(pair_body)                                      # (P,)
        self._pair_source = index(pair_source)
        self._pair_joint = index(model.body_joint[bodies][pair_body])
        self._pair_flat = index(pair_body * n + pair_source)                    # into B*n
        self._pair_mask_k = tensor(anc[pair_body].T)                            # (n, P)

    # ------------------------------------------------------------------ inputs
    def _as_batch(self, x, name: str) -> Tensor:
        t = torch.as_tensor(x, dtype=self.dtype, device=self.device)
        n = self.model.n_joints
        if t.ndim == 0 or t.shape[-1] != n:
            raise ValueError(f'{name} must have shape (..., {n}), got {tuple(t.shape)}')
        if not torch.isfinite(t).all():
            bad = torch.nonzero(~torch.isfinite(t).reshape(-1, n).all(0)).flatten().tolist()
            names = [self.model.joint_names[k] for k in bad]
            raise ValueError(f'{name} is not finite for joints {names}')
        return t

    def _inputs(self, q, qd, qdd) -> tuple[Tensor, Tensor, Tensor, tuple[int, ...]]:
        q, qd, qdd = self._as_batch(q, 'q'), self._as_batch(qd, 'qd'), self._as_batch(qdd, 'qdd')
        try:
            shape = torch.broadcast_shapes(q.shape, qd.shape, qdd.shape)
        except RuntimeError as err:
            raise ValueError(f'q, qd, qdd shapes do not broadcast: {tuple(q.shape)}, '
                             f'{tuple(qd.shape)}, {tuple(qdd.shape)}') from err
        n = self.model.n_joints
        flat = [x.expand(shape).reshape(-1, n) for x in (q, qd, qdd)]
        return flat[0], flat[1], flat[2], shape[:-1]

    # ------------------------------------------------------------------ kinematics
    def _body_frames(self, q: Tensor) -> Tensor:
        """World pose of each joint's child frame, (N, n) -> (N, n, 4, 4)."""
        N, n = q.shape
        s, c = torch.sin(q)[..., None, None], torch.cos(q)[..., None, None]
        rev = self._revolute[:, None, None]
        # Rodrigues for revolute joints, identity rotation for prismatic ones.
        R = torch.eye(3, dtype=self.dtype, device=self.device) + rev * (
            s * self._K + (1.0 - c) * self._K2)                                 # (N, n, 3, 3)
        p = (self._prismatic * q)[..., None] * self._axis                       # (N, n, 3)
        # Built out of place so the same code runs under torch.func transforms.
        bottom = self._homogeneous_row.expand(N, n, 1, 4)
        local = torch.cat([torch.cat([R, p[..., None]], dim=-1), bottom], dim=-2)
        A = self._T_parent_joint @ local                                        # parent->child
        frames: list[Tensor] = []
        for j, parent in enumerate(self._parent):
            frames.append(A[:, j] if parent < 0 else frames[parent] @ A[:, j])
        return torch.stack(frames, dim=1)

    def _motion_subspaces(self, T: Tensor) -> Tensor:
        """Joint motion subspaces S (N, n, 6) in world coordinates from body frames."""
        axis_w = (T[..., :3, :3] @ self._axis[..., None])[..., 0]              # (N, n, 3)
        origin = T[..., :3, 3]
        rev = self._revolute[:, None]
        angular = rev * axis_w
        linear = rev * torch.linalg.cross(origin, axis_w) + (1.0 - rev) * axis_w
        return torch.cat([angular, linear], dim=-1)

    def _body_inertials(self, T: Tensor) -> tuple[Tensor, Tensor]:
        """World COM (N, B, 3) and rotational inertia about it (N, B, 3, 3) of each body."""
        Tb = T[:, self._body_joint]                                             # (N, B, 4, 4)
        R = Tb[..., :3, :3]
        com = Tb[..., :3, 3] + (R @ self._com[..., None])[..., 0]
        return com, R @ self._inertia @ R.transpose(-1, -2)

    @staticmethod
    def _apply_inertia(mass: Tensor, com: Tensor, I_com: Tensor, x: Tensor) -> Tensor:
        """Spatial inertia times motion vector: (..., 6) momentum at the world origin.

        For x = (w, v): linear momentum m (v + w x c), angular I_c w + c x (linear).
        """
        w, v = x[..., :3], x[..., 3:]
        linear = mass[..., None] * (v + torch.linalg.cross(w, com))
        angular = (I_com @ w[..., None])[..., 0] + torch.linalg.cross(com, linear)
        return torch.cat([angular, linear], dim=-1)

    # ------------------------------------------------------------------ fast path
    def decompose(self, q, qd, qdd) -> Decomposition:
        """Split joint torques by body and by motion source (closed form, batched).

        Args:
            q: (..., n) joint positions [rad or m].
            qd: (..., n) joint velocities [rad/s or m/s].
            qdd: (..., n) joint accelerations [rad/s^2 or m/s^2].

        Returns:
            :class:`Decomposition` with torque (..., n), partial (..., n, B), acceleration
            and velocity (..., n, B, n), gravity (..., n, B), friction (..., n).

        Raises:
            ValueError: wrong trailing size, shapes that do not broadcast, NaN or inf.
        """
        q, qd, qdd, batch = self._inputs(q, qd, qdd)
        with torch.inference_mode():
            if q.shape[0] <= self.chunk_size:
                return self._decompose_flat(q, qd, qdd).reshape(batch)
            # Long batches go through in cache-sized chunks: the pair tensors of a whole
            # bag would spill every intermediate to memory (measured ~2x slower).
            parts = [self._decompose_flat(q[a:a + self.chunk_size], qd[a:a + self.chunk_size],
                                          qdd[a:a + self.chunk_size])
                     for a in range(0, q.shape[0], self.chunk_size)]
            fields = ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction')
            joined = {f: torch.cat([getattr(p, f) for p in parts]) for f in fields}
            return _FlatDecomposition(**joined, mass=None).reshape(batch)

    def _decompose_flat(self, q: Tensor, qd: Tensor, qdd: Tensor) -> _FlatDecomposition:
        N, n = q.shape
        B = self._n_body_columns
        T = self._body_frames(q)
        S = self._motion_subspaces(T)                                           # (N, n, 6)
        com, I_com = self._body_inertials(T)                                    # (N, B, 3)
        v = self._joint_anc @ (S * qd[..., None])                               # (N, n, 6)

        # Per pair p = (i, s): I_i S_s and the velocity-part vector F_p (module docstring).
        pb, ps = self._pair_body, self._pair_source
        m_p, c_p, I_p = self._mass[pb], com[:, pb], I_com[:, pb]
        S_s, v_i = S[:, ps], v[:, self._pair_joint]                             # (N, P, 6)
        IS = self._apply_inertia(m_p, c_p, I_p, S_s)
        h = self._apply_inertia(self._mass, com, I_com, v[:, self._body_joint])  # (N, B, 6)
        X = _cross_motion(2.0 * v[:, ps] - v_i, S_s)
        F = (self._apply_inertia(m_p, c_p, I_p, X) + _cross_force(v_i, IS)
             + _cross_force(S_s, h[:, pb]))
        # Project on every joint k at once: (N, n, 2P), then keep k on body i's path.
        Z = S @ torch.cat([IS, F], dim=1).transpose(1, 2)
        P = pb.shape[0]
        M_pairs = Z[..., :P] * self._pair_mask_k                                # (N, n, P)
        acc_pairs = M_pairs * qdd[:, None, ps]
        vel_pairs = 0.5 * Z[..., P:] * self._pair_mask_k * qd[:, None, ps]

        def dense(pairs: Tensor) -> Tensor:
            out = pairs.new_zeros(N, n, B * n)
            out[..., self._pair_flat] = pairs
            return out.view(N, n, B, n)

        acceleration, velocity = dense(acc_pairs), dense(vel_pairs)
        # gravity[k, i] = -S_k . I_i a_g with a_g = (0, g): wrench (c x -m g, -m g)
        mg = -self._mass[:, None] * self._gravity                               # (B, 3)
        wrench = torch.cat([torch.linalg.cross(com, mg.expand_as(com)),
                            mg.expand_as(com)], dim=-1)                         # (N, B, 6)
        gravity = (S @ wrench.transpose(1, 2)) * self._mask_ki                  # (N, n, B)
        partial = acceleration.sum(-1) + velocity.sum(-1) + gravity
        return _FlatDecomposition(partial.sum(-1), partial, acceleration, velocity, gravity,
                                  self.friction_torque(qd), M_pairs)

    def _mass_from_pairs(self, M_pairs: Tensor) -> Tensor:
        """M(q) (N, n, n) = sum over bodies of the pair entries M_i[k, s]."""
        N, n, _ = M_pairs.shape
        return M_pairs.new_zeros(N, n, n).index_add_(2, self._pair_source, M_pairs)

    # ------------------------------------------------------------------ helpers
    def inverse_dynamics(self, q, qd, qdd) -> Tensor:
        """Rigid-body joint torques (..., n), friction excluded (== RNEA)."""
        return self.decompose(q, qd, qdd).torque

    def mass_matrix(self, q) -> Tensor:
        """Joint-space mass matrix M(q) = sum_i M_i(q), (..., n) -> (..., n, n)."""
        q = self._as_batch(q, 'q')
        batch, n = q.shape[:-1], self.model.n_joints
        qf = q.reshape(-1, n)
        zero = torch.zeros_like(qf)
        return self._mass_from_pairs(self._decompose_flat(qf, zero, zero).mass).reshape(
            *batch, n, n)

    def mass_matrix_and_bias(self, q, qd) -> tuple[Tensor, Tensor]:
        """M(q) (..., n, n) and bias C(q, qd) qd + g(q) (..., n) from one kinematics pass."""
        q, qd, _, batch = self._inputs(q, qd, torch.zeros_like(torch.as_tensor(q)))
        flat = self._decompose_flat(q, qd, torch.zeros_like(q))
        n = self.model.n_joints
        return (self._mass_from_pairs(flat.mass).reshape(*batch, n, n),
                flat.torque.reshape(*batch, n))

    def bias(self, q, qd) -> Tensor:
        """Velocity-product plus gravity torques C(q, qd) qd + g(q), (..., n)."""
        return self.mass_matrix_and_bias(q, qd)[1]

    def gravity_torque(self, q) -> Tensor:
        """Gravity torques g(q) = tau(q, 0, 0), (..., n)."""
        zero = torch.zeros_like(torch.as_tensor(q, dtype=self.dtype))
        return self.decompose(q, zero, zero).torque

    def friction_torque(self, qd, *, smoothing: float = 0.0) -> Tensor:
        """Viscous plus Coulomb joint friction (..., n) from URDF damping and friction.

        Args:
            qd: (..., n) joint velocities.
            smoothing: velocity scale [rad/s] of a tanh approximation of sign(qd); 0 keeps
                the exact (discontinuous) Coulomb law.
        """
        qd = torch.as_tensor(qd, dtype=self.dtype, device=self.device)
        sign = torch.tanh(qd / smoothing) if smoothing > 0.0 else torch.sign(qd)
        return self._damping * qd + self._coulomb * sign

    def link_poses(self, q) -> Tensor:
        """World pose T_world_link of every URDF link, (..., n) -> (..., L, 4, 4)."""
        q = self._as_batch(q, 'q')
        batch = q.shape[:-1]
        T = self._body_frames(q.reshape(-1, self.model.n_joints))
        eye = torch.eye(4, dtype=self.dtype, device=self.device).expand(T.shape[0], 1, 4, 4)
        frames = torch.cat([eye, T], dim=1)[:, self._link_joint + 1]            # root = 0
        return (frames @ self._T_joint_link).reshape(*batch, -1, 4, 4)

    # ------------------------------------------------------------------ extension
    def columns(self, q, qd, qdd, bodies) -> Decomposition:
        """Decomposition restricted to the body columns ``bodies`` (kinematics shared).

        ``partial``, ``acceleration``, ``velocity`` and ``gravity`` have ``len(bodies)``
        columns; ``torque`` is the sum over those columns only.
        """
        bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        saved = self._bodies
        self._set_bodies(bodies)
        try:
            return self.decompose(q, qd, qdd)
        finally:
            self._set_bodies(saved)

    def extend(self, previous: Decomposition, previous_model: RobotModel, q, qd,
               qdd) -> Decomposition:
        """Decomposition for this engine's model, reusing columns of unchanged bodies.

        Seed 000's extension and reconstruction: adding a body adds a column and replacing
        a body replaces one; the other columns of ``previous`` (computed with
        ``previous_model`` on the same ``q, qd, qdd``) are kept as they are.

        Raises:
            ValueError: the joints differ, or a body of ``previous_model`` was removed.
        """
        model = self.model
        if (previous_model.joint_names != model.joint_names
                or previous_model.body_names != model.body_names[:previous_model.n_bodies]):
            raise ValueError('extend needs the same joints and the previous bodies in order')
        fresh = [i for i in range(model.n_bodies) if i >= previous_model.n_bodies or not (
            previous_model.body_joint[i] == model.body_joint[i]
            and previous_model.body_mass[i] == model.body_mass[i]
            and np.array_equal(previous_model.body_com[i], model.body_com[i])
            and np.array_equal(previous_model.body_inertia[i], model.body_inertia[i]))]
        if not fresh:
            return previous
        new = self.columns(q, qd, qdd, fresh)
        B_old = previous_model.n_bodies
        keep = [i for i in range(model.n_bodies) if i not in fresh]

        def splice(old: Tensor, part: Tensor, axis: int) -> Tensor:
            shape = list(old.shape)
            shape[axis] = model.n_bodies
            out = old.new_zeros(shape)
            index = [slice(None)] * len(shape)
            index[axis] = keep
            out[tuple(index)] = old.index_select(axis, torch.as_tensor(
                keep, device=old.device)) if keep else old.narrow(axis, 0, 0)
            index[axis] = fresh
            out[tuple(index)] = part
            return out

        nb = previous.partial.ndim - 1  # axis of the body index in partial
        partial = splice(previous.partial, new.partial, nb)
        assert previous.partial.shape[nb] == B_old
        return Decomposition(
            torque=partial.sum(-1),
            partial=partial,
            acceleration=splice(previous.acceleration, new.acceleration, nb),
            velocity=splice(previous.velocity, new.velocity, nb),
            gravity=splice(previous.gravity, new.gravity, nb),
            friction=previous.friction,
        )

    # ------------------------------------------------------------------ autograd path
    def lagrangians(self, q: Tensor, qd: Tensor) -> tuple[Tensor, Tensor]:
        """Partial Lagrangians and potentials of one sample: (n,), (n,) -> L (B,), P (B,).

        ``K_i = 1/2 m_i |c_i'|^2 + 1/2 w_i . I_i w_i`` with the COM velocity and angular
        velocity taken by forward-mode differentiation of the forward kinematics along qd;
        ``P_i = -m_i g . c_i``.
        """
        def pose(q_: Tensor) -> tuple[Tensor, Tensor]:
            T = self._body_frames(q_[None])[0][self._body_joint]                # (B, 4, 4)
            R = T[:, :3, :3]
            return R, T[:, :3, 3] + (R @ self._com[..., None])[..., 0]

        (R, com), (R_dot, com_dot) = torch.func.jvp(pose, (q,), (qd,))
        W = R_dot @ R.transpose(-1, -2)                     # [w]x = R' R^T
        w = torch.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], dim=-1)
        I_world = R @ self._inertia @ R.transpose(-1, -2)
        kinetic = 0.5 * self._mass * (com_dot * com_dot).sum(-1) + 0.5 * (
            w * (I_world @ w[..., None])[..., 0]).sum(-1)
        potential = -self._mass * (com @ self._gravity)
        return kinetic - potential, potential

    def _autograd_single(self, q: Tensor, qd: Tensor, qdd: Tensor):
        func = torch.func

        def lagrangian(q_, qd_):
            return self.lagrangians(q_, qd_)[0]

        def dL_dqd(q_, qd_):
            return func.jacfwd(lagrangian, argnums=1)(q_, qd_)                  # (B, n)

        def partial_fn(q_, qd_, qdd_):
            # D_k L_i = d/dt dL_i/dqd_k - dL_i/dq_k, the time derivative along (qd, qdd)
            ddt = func.jvp(dL_dqd, (q_, qd_), (qd_, qdd_))[1]
            return (ddt - func.jacfwd(lagrangian, argnums=0)(q_, qd_)).T         # (n, B)

        partial = partial_fn(q, qd, qdd)
        hessian = func.jacfwd(dL_dqd, argnums=1)(q, qd)                          # (B, k, s)
        acceleration = hessian.permute(1, 0, 2) * qdd
        velocity = 0.5 * func.jacfwd(partial_fn, argnums=1)(q, qd, qdd) * qd
        gravity = func.jacfwd(lambda q_: self.lagrangians(q_, qd)[1])(q).T
        return partial, acceleration, velocity, gravity

    def decompose_autograd(self, q, qd, qdd) -> Decomposition:
        """Same as :meth:`decompose`, by differentiating each ``L_i`` with torch.func.

        Faithful to seeds 000/002 (the Euler-Lagrange operator applied to each partial
        Lagrangian by automatic differentiation), vmapped over the batch. Slower than the
        closed form; it is the reference the fast path is tested against.
        """
        q, qd, qdd, batch = self._inputs(q, qd, qdd)
        partial, acceleration, velocity, gravity = torch.func.vmap(self._autograd_single)(
            q, qd, qdd)
        flat = _FlatDecomposition(partial.sum(-1), partial, acceleration, velocity, gravity,
                                  self.friction_torque(qd), None)
        return flat.reshape(batch)


@dataclass(frozen=True)
class _FlatDecomposition:
    """Decomposition over a flat batch (N, ...), plus the per-body mass matrices."""

    torque: Tensor
    partial: Tensor
    acceleration: Tensor
    velocity: Tensor
    gravity: Tensor
    friction: Tensor
    mass: Tensor | None  # (N, n, P) M_i[k, s] per pair p = (i, s)

    def reshape(self, batch: tuple[int, ...]) -> Decomposition:
        def r(t: Tensor) -> Tensor:
            return t.reshape(*batch, *t.shape[1:])

        return Decomposition(r(self.torque), r(self.partial), r(self.acceleration),
                             r(self.velocity), r(self.gravity), r(self.friction))
