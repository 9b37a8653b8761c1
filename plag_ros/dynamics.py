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
  O(n^2 B) per sample. For float64 on the CPU the same formulas run as one compiled loop
  per sample (:mod:`plag_ros.kernel`); the torch form serves float32, GPUs and autograd.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from . import kernel
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


@dataclass(frozen=True)
class _FlatDecomposition:
    """Decomposition over a flat batch (N, ...) in one array library, plus the per-pair
    mass-matrix entries ``mass`` (N, n, P) = M_i[k, s] for each pair p = (i, s)."""

    torque: Any
    partial: Any
    acceleration: Any
    velocity: Any
    gravity: Any
    friction: Any
    mass: Any

    def reshape(self, batch: tuple[int, ...], convert=lambda x: x) -> Decomposition:
        def r(t):
            return convert(t.reshape(*batch, *t.shape[1:]))

        return Decomposition(r(self.torque), r(self.partial), r(self.acceleration),
                             r(self.velocity), r(self.gravity), r(self.friction))


class _TorchOps:
    """Array operations of the closed form for torch tensors (float32, GPUs, autograd)."""

    sin, cos, tanh, sign = torch.sin, torch.cos, torch.tanh, torch.sign
    cross = staticmethod(torch.linalg.cross)
    broadcast_to = staticmethod(torch.broadcast_to)

    @staticmethod
    def concat(arrays, axis):
        return torch.cat(arrays, dim=axis)

    @staticmethod
    def stack(arrays, axis):
        return torch.stack(arrays, dim=axis)

    @staticmethod
    def zeros(shape, like):
        return like.new_zeros(shape)


def _skew(v: np.ndarray) -> np.ndarray:
    """(..., 3) -> (..., 3, 3) with skew(v) @ x == v x x."""
    out = np.zeros(v.shape + (3,))
    out[..., 0, 1], out[..., 0, 2], out[..., 1, 2] = -v[..., 2], v[..., 1], -v[..., 0]
    return out - np.swapaxes(out, -1, -2)


def _cross_motion(ops, a, b):
    """Spatial motion cross product a x b, (..., 6) angular first."""
    wa, va, wb, vb = a[..., :3], a[..., 3:], b[..., :3], b[..., 3:]
    return ops.concat([ops.cross(wa, wb), ops.cross(wa, vb) + ops.cross(va, wb)], -1)


def _cross_force(ops, a, f):
    """Spatial force cross product a x* f, (..., 6) angular (moment) first."""
    wa, va, n, lin = a[..., :3], a[..., 3:], f[..., :3], f[..., 3:]
    return ops.concat([ops.cross(wa, n) + ops.cross(va, lin), ops.cross(wa, lin)], -1)


@dataclass(frozen=True)
class _Constants:
    """Everything the closed form needs about the model, in one array library.

    A *pair* p = (body i, source joint s) exists for every joint s on the path from the
    root to body i; only pairs carry non-zero acceleration/velocity parts, so the closed
    form works on pairs (44 of 81 for the CRANE-X7) and scatters them into the table.
    """

    ops: type
    parent: tuple[int, ...]
    axis: Any                  # (n, 3) joint axes in the joint frames
    K: Any                     # (n, 3, 3) skew(axis); K2 = K @ K (Rodrigues)
    K2: Any
    T_parent_joint: Any        # (n, 4, 4)
    homogeneous_row: Any       # (1, 4)
    eye3: Any                  # (3, 3)
    revolute: Any              # (n,) 1.0 for revolute/continuous, 0.0 for prismatic
    joint_anc: Any             # (n, n) joint_anc[j, s] = 1 if s is j or an ancestor of j
    gravity: Any               # (3,)
    damping: Any               # (n,)
    coulomb: Any               # (n,)
    n_bodies: int
    body_joint: Any            # (B,) int
    mass: Any                  # (B,)
    com: Any                   # (B, 3) in the joint child frame
    inertia: Any               # (B, 3, 3) about the COM, joint child frame
    mask_ki: Any               # (n, B) joint k on body i's path
    pair_body: Any             # (P,) int
    pair_source: Any           # (P,) int
    pair_joint: Any            # (P,) int, joint body i rides on
    pair_flat: Any             # (P,) int, i * n + s
    pair_mask_k: Any           # (n, P) joint k on the path of the pair's body
    pair_onehot_source: Any    # (P, n) sums pairs into mass-matrix columns

    @classmethod
    def build(cls, model: RobotModel, bodies: np.ndarray, *, ops, convert, index) -> _Constants:
        n = model.n_joints
        joint_anc = np.zeros((n, n))
        for j in range(n):
            joint_anc[j, model.root_path(j)] = 1.0
        anc = joint_anc[model.body_joint[bodies]]                               # (B, n)
        pair_body, pair_source = np.nonzero(anc)
        K = _skew(model.joint_axis)
        return cls(
            ops=ops,
            parent=tuple(int(p) for p in model.joint_parent),
            axis=convert(model.joint_axis), K=convert(K), K2=convert(K @ K),
            T_parent_joint=convert(model.T_parent_joint),
            homogeneous_row=convert([[0.0, 0.0, 0.0, 1.0]]), eye3=convert(np.eye(3)),
            revolute=convert([t != 'prismatic' for t in model.joint_types]),
            joint_anc=convert(joint_anc), gravity=convert(GRAVITY),
            damping=convert(model.damping), coulomb=convert(model.friction),
            n_bodies=len(bodies),
            body_joint=index(model.body_joint[bodies]),
            mass=convert(model.body_mass[bodies]), com=convert(model.body_com[bodies]),
            inertia=convert(model.body_inertia[bodies]), mask_ki=convert(anc.T),
            pair_body=index(pair_body), pair_source=index(pair_source),
            pair_joint=index(model.body_joint[bodies][pair_body]),
            pair_flat=index(pair_body * n + pair_source),
            pair_mask_k=convert(anc[pair_body].T),
            pair_onehot_source=convert(np.eye(n)[pair_source]),
        )


def _body_frames(c: _Constants, q):
    """World pose of each joint's child frame, (N, n) -> (N, n, 4, 4)."""
    ops = c.ops
    N, n = q.shape
    s, co = ops.sin(q)[..., None, None], ops.cos(q)[..., None, None]
    # Rodrigues for revolute joints, identity rotation and a slide for prismatic ones.
    R = c.eye3 + c.revolute[:, None, None] * (s * c.K + (1.0 - co) * c.K2)    # (N, n, 3, 3)
    p = ((1.0 - c.revolute) * q)[..., None] * c.axis                            # (N, n, 3)
    # Built out of place so the same code runs under torch.func transforms.
    bottom = ops.broadcast_to(c.homogeneous_row, (N, n, 1, 4))
    local = ops.concat([ops.concat([R, p[..., None]], -1), bottom], -2)
    A = c.T_parent_joint @ local                                                # parent->child
    frames = []
    for j, parent in enumerate(c.parent):
        frames.append(A[:, j] if parent < 0 else frames[parent] @ A[:, j])
    return ops.stack(frames, 1)


def _motion_subspaces(c: _Constants, T):
    """Joint motion subspaces S (N, n, 6) in world coordinates from the body frames."""
    axis_w = (T[..., :3, :3] @ c.axis[..., None])[..., 0]                     # (N, n, 3)
    rev = c.revolute[:, None]
    linear = rev * c.ops.cross(T[..., :3, 3], axis_w) + (1.0 - rev) * axis_w
    return c.ops.concat([rev * axis_w, linear], -1)


def _body_inertials(c: _Constants, T):
    """World COM (N, B, 3) and rotational inertia about it (N, B, 3, 3) of each body."""
    Tb = T[:, c.body_joint]                                                     # (N, B, 4, 4)
    R = Tb[..., :3, :3]
    com = Tb[..., :3, 3] + (R @ c.com[..., None])[..., 0]
    return com, R @ c.inertia @ R.swapaxes(-1, -2)


def _apply_inertia(ops, mass, com, I_com, x):
    """Spatial inertia times motion vector: (..., 6) momentum at the world origin.

    For x = (w, v): linear momentum m (v + w x c), angular I_c w + c x (linear).
    """
    w, v = x[..., :3], x[..., 3:]
    linear = mass[..., None] * (v + ops.cross(w, com))
    angular = (I_com @ w[..., None])[..., 0] + ops.cross(com, linear)
    return ops.concat([angular, linear], -1)


def _closed_form(c: _Constants, q, qd, qdd, *, tables: bool = True) -> _FlatDecomposition:
    """The closed form of the module docstring over a flat batch (N, n) of one library.

    With ``tables=False`` only ``torque`` and the pair mass entries are returned (the
    forward-dynamics case): the dense (n, B, n) tables are never built.
    """
    ops = c.ops
    N, n = q.shape
    B = c.n_bodies
    T = _body_frames(c, q)
    S = _motion_subspaces(c, T)                                                 # (N, n, 6)
    com, I_com = _body_inertials(c, T)                                          # (N, B, 3)
    v = c.joint_anc @ (S * qd[..., None])                                       # (N, n, 6)

    # Per pair p = (i, s): I_i S_s and the velocity-part vector F_p.
    pb, ps = c.pair_body, c.pair_source
    m_p, c_p, I_p = c.mass[pb], com[:, pb], I_com[:, pb]
    S_s, v_i = S[:, ps], v[:, c.pair_joint]                                     # (N, P, 6)
    IS = _apply_inertia(ops, m_p, c_p, I_p, S_s)
    h = _apply_inertia(ops, c.mass, com, I_com, v[:, c.body_joint])             # (N, B, 6)
    X = _cross_motion(ops, 2.0 * v[:, ps] - v_i, S_s)
    F = (_apply_inertia(ops, m_p, c_p, I_p, X) + _cross_force(ops, v_i, IS)
         + _cross_force(ops, S_s, h[:, pb]))
    # Project on every joint k at once: (N, n, 2P), then keep k on body i's path.
    Z = S @ ops.concat([IS, F], 1).swapaxes(1, 2)
    P = pb.shape[0]
    M_pairs = Z[..., :P] * c.pair_mask_k                                        # (N, n, P)
    acc_pairs = M_pairs * qdd[:, None, ps]
    vel_pairs = 0.5 * Z[..., P:] * c.pair_mask_k * qd[:, None, ps]

    # gravity[k, i] = -S_k . I_i a_g with a_g = (0, g): wrench (c x -m g, -m g)
    mg = ops.broadcast_to(-c.mass[:, None] * c.gravity, com.shape)             # (N, B, 3)
    wrench = ops.concat([ops.cross(com, mg), mg], -1)                           # (N, B, 6)
    gravity = (S @ wrench.swapaxes(1, 2)) * c.mask_ki                           # (N, n, B)
    if not tables:
        torque = (acc_pairs + vel_pairs).sum(-1) + gravity.sum(-1)
        return _FlatDecomposition(torque, None, None, None, None, None, M_pairs)

    def dense(pairs):
        out = ops.zeros((N, n, B * n), pairs)
        out[..., c.pair_flat] = pairs
        return out.reshape(N, n, B, n)

    acceleration, velocity = dense(acc_pairs), dense(vel_pairs)
    partial = acceleration.sum(-1) + velocity.sum(-1) + gravity
    return _FlatDecomposition(partial.sum(-1), partial, acceleration, velocity, gravity,
                              _friction(c, qd, 0.0), M_pairs)


def _friction(c: _Constants, qd, smoothing: float):
    sign = c.ops.tanh(qd / smoothing) if smoothing > 0.0 else c.ops.sign(qd)
    return c.damping * qd + c.coulomb * sign


class PartialLagrangian:
    """Partial Lagrangian inverse dynamics of a :class:`RobotModel`, batched over samples.

    Args:
        model: the robot.
        dtype: floating dtype of every computation (float64 for analysis; float32 is
            allowed for throughput).
        device: torch device (CPU by default).
        compiled: run float64 on the CPU through the compiled loop of
            :mod:`plag_ros.kernel` (the default); False forces the torch form, as float32
            and GPUs always use it (a reference for tests and benchmarks).

    Inputs may be numpy arrays or torch tensors; results are torch tensors of ``dtype``.
    """

    chunk_size: int = 512
    """Samples per vectorised pass of the torch form (cache-sized; see bench/)."""

    def __init__(self, model: RobotModel, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, compiled: bool = True) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f'dtype must be floating point, got {dtype}')
        self.model = model
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device('cpu')
        self._all_bodies = np.arange(model.n_bodies)
        self._torch = self._constants(self._all_bodies)
        # float64 on the CPU runs the compiled loop (plag_ros.kernel) on numpy views
        self._host = compiled and dtype == torch.float64 and self.device.type == 'cpu'
        self._kernel = (kernel.KernelModel.build(model, self._all_bodies, GRAVITY)
                        if self._host else None)
        self._link_joint = torch.as_tensor(model.link_joint, device=self.device)
        self._T_joint_link = torch.as_tensor(model.T_joint_link, dtype=dtype,
                                             device=self.device)

    @property
    def compiled(self) -> bool:
        """True when :meth:`decompose` runs the compiled float64 loop (results share
        memory with numpy arrays; long batches need no chunking)."""
        return self._host

    def _constants(self, bodies: np.ndarray) -> _Constants:
        return _Constants.build(
            self.model, bodies, ops=_TorchOps,
            convert=lambda x: torch.as_tensor(np.asarray(x, dtype=np.float64),
                                              dtype=self.dtype, device=self.device),
            index=lambda x: torch.as_tensor(np.asarray(x, dtype=np.int64), device=self.device))

    # ------------------------------------------------------------------ inputs
    def _prepare(self, **arrays) -> tuple[list, tuple[int, ...]]:
        """Validate (..., n) inputs, broadcast them and flatten to (N, n).

        Returns the flat arrays (C-contiguous float64 numpy on the host path, torch tensors
        of the engine's dtype and device otherwise) and the batch shape.

        Raises:
            ValueError: wrong trailing size, shapes that do not broadcast, NaN or inf
                (naming the joints).
        """
        n = self.model.n_joints
        host = self._host
        arrays = {name: self._host_array(x) if host else torch.as_tensor(
            x.detach() if torch.is_tensor(x) else x, dtype=self.dtype, device=self.device)
            for name, x in arrays.items()}
        for name, x in arrays.items():
            if x.ndim == 0 or x.shape[-1] != n:
                raise ValueError(f'{name} must have shape (..., {n}), got {tuple(x.shape)}')
        try:
            shape = (np.broadcast_shapes if host else torch.broadcast_shapes)(
                *(x.shape for x in arrays.values()))
        except (ValueError, RuntimeError) as err:
            shapes = ', '.join(f'{k} {tuple(x.shape)}' for k, x in arrays.items())
            raise ValueError(f'input shapes do not broadcast: {shapes}') from err
        flat = []
        for name, x in arrays.items():
            finite = np.isfinite(x) if host else torch.isfinite(x)
            if not finite.all():
                bad = (~finite).reshape(-1, n).any(0)
                bad = np.flatnonzero(bad if host else bad.cpu().numpy())
                names = [self.model.joint_names[k] for k in bad]
                raise ValueError(f'{name} is not finite for joints {names}')
            if x.shape != shape:
                x = np.broadcast_to(x, shape) if host else x.expand(shape)
            x = x.reshape(-1, n)
            flat.append(np.ascontiguousarray(x) if host else x)
        return flat, tuple(shape[:-1])

    @staticmethod
    def _host_array(x) -> np.ndarray:
        """float64 numpy view of an array-like or CPU tensor (no copy when already so)."""
        if torch.is_tensor(x):
            x = x.detach().cpu().numpy()
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def _to_torch(x):
        return torch.from_numpy(x) if isinstance(x, np.ndarray) else x

    # ------------------------------------------------------------------ closed form
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
        (q, qd, qdd), batch = self._prepare(q=q, qd=qd, qdd=qdd)
        return self._decompose_flat(self._all_bodies, q, qd, qdd).reshape(batch,
                                                                          self._to_torch)

    def decompose_arrays(self, q, qd, qdd) -> dict[str, np.ndarray]:
        """:meth:`decompose` as float64 numpy arrays, ``Decomposition.numpy()``'s keys.

        The live nodes' call: on the compiled path the arrays come straight from the loop,
        without wrapping them in tensors and unwrapping them again (~25 torch calls, a
        tenth of a live sample's cost).
        """
        if not self._host:
            return self.decompose(q, qd, qdd).numpy()
        single = self._single_sample(q, qd, qdd)
        if single is not None:
            return single
        (q, qd, qdd), batch = self._prepare(q=q, qd=qd, qdd=qdd)
        out = self._decompose_flat(self._all_bodies, q, qd, qdd).reshape(batch)
        return {f.name: getattr(out, f.name) for f in dataclasses.fields(out)}

    def _single_sample(self, q, qd, qdd) -> dict[str, np.ndarray] | None:
        """decompose_arrays of one finite (n,) float64 sample, or None for anything else.

        The live node's case, without the broadcasting and validation of _prepare: at
        200 Hz with cold caches each skipped numpy call is several microseconds. Anything
        unusual (other shapes or dtypes, a non-finite value, whose error message names the
        joints) takes the general path.
        """
        n = self.model.n_joints
        for x in (q, qd, qdd):
            if type(x) is not np.ndarray or x.shape != (n,) or x.dtype != np.float64:
                return None
        # One finite sum for the three (inf - inf is NaN, so no cancellation hides one).
        if not math.isfinite(q.sum() + qd.sum() + qdd.sum()):
            return None
        out = kernel.decompose_into(self._kernel, np.ascontiguousarray(q).reshape(1, n),
                                    np.ascontiguousarray(qd).reshape(1, n),
                                    np.ascontiguousarray(qdd).reshape(1, n),
                                    threads=1)
        single = {name: value[0] for name, value in out.items()}
        single['friction'] = self._host_friction(qd)
        return single

    def _host_friction(self, qd: np.ndarray) -> np.ndarray:
        """_friction (exact Coulomb law) for float64 numpy velocities (..., n)."""
        return self.model.damping * qd + self.model.friction * np.sign(qd)

    def _decompose_flat(self, bodies: np.ndarray, q, qd, qdd) -> _FlatDecomposition:
        """The split of the body columns ``bodies`` for flat (N, n) inputs from _prepare."""
        every = bodies is self._all_bodies or (len(bodies) == self.model.n_bodies
                                                and np.array_equal(bodies, self._all_bodies))
        if self._host:
            km = self._kernel if every else kernel.KernelModel.build(self.model, bodies, GRAVITY)
            out = kernel.decompose_into(km, q, qd, qdd, threads=torch.get_num_threads())
            return _FlatDecomposition(out['torque'], out['partial'], out['acceleration'],
                                      out['velocity'], out['gravity'],
                                      self._host_friction(qd), None)
        c = self._torch if every else self._constants(bodies)
        with torch.inference_mode():
            N, size = q.shape[0], self.chunk_size
            if N <= size:
                return _closed_form(c, q, qd, qdd)
            # Long batches go through in cache-sized chunks: on a whole bag every pair
            # intermediate would spill to memory (measured about 2x slower).
            parts = [_closed_form(c, q[a:a + size], qd[a:a + size], qdd[a:a + size])
                     for a in range(0, N, size)]
            return _FlatDecomposition(*(torch.cat(f) for f in zip(*(
                (p.torque, p.partial, p.acceleration, p.velocity, p.gravity, p.friction,
                 p.mass) for p in parts), strict=True)))

    # ------------------------------------------------------------------ helpers
    def inverse_dynamics(self, q, qd, qdd) -> Tensor:
        """Rigid-body joint torques (..., n), friction excluded (== RNEA)."""
        return self.decompose(q, qd, qdd).torque

    def mass_matrix_and_bias(self, q, qd) -> tuple[Tensor, Tensor]:
        """M(q) (..., n, n) and bias C(q, qd) qd + g(q) (..., n) from one kinematics pass."""
        (q, qd), batch = self._prepare(q=q, qd=qd)
        n = self.model.n_joints
        if self._host:
            M, bias = kernel.mass_matrix_and_bias_into(self._kernel, q, qd,
                                                       threads=torch.get_num_threads())
        else:
            c = self._torch
            with torch.inference_mode():
                flat = _closed_form(c, q, qd, 0.0 * q, tables=False)
            M, bias = flat.mass @ c.pair_onehot_source, flat.torque
        return (self._to_torch(M.reshape(*batch, n, n)),
                self._to_torch(bias.reshape(*batch, n)))

    def mass_matrix(self, q) -> Tensor:
        """Joint-space mass matrix M(q) = sum_i M_i(q), (..., n) -> (..., n, n)."""
        return self.mass_matrix_and_bias(q, 0.0 * torch.as_tensor(q))[0]

    def bias(self, q, qd) -> Tensor:
        """Velocity-product plus gravity torques C(q, qd) qd + g(q), (..., n)."""
        return self.mass_matrix_and_bias(q, qd)[1]

    def gravity_torque(self, q) -> Tensor:
        """Gravity torques g(q) = tau(q, 0, 0), (..., n)."""
        return self.mass_matrix_and_bias(q, 0.0 * torch.as_tensor(q))[1]

    def friction_torque(self, qd, *, smoothing: float = 0.0) -> Tensor:
        """Viscous plus Coulomb joint friction (..., n) from URDF damping and friction.

        Args:
            qd: (..., n) joint velocities.
            smoothing: velocity scale [rad/s] of a tanh approximation of sign(qd); 0 keeps
                the exact (discontinuous) Coulomb law.
        """
        qd = torch.as_tensor(qd, dtype=self.dtype, device=self.device)
        return _friction(self._torch, qd, smoothing)

    def link_poses(self, q) -> Tensor:
        """World pose T_world_link of every URDF link, (..., n) -> (..., L, 4, 4)."""
        (q,), batch = self._prepare(q=q)
        if self._host:
            poses = kernel.link_poses(self._kernel, q, self.model.link_joint,
                                      self.model.T_joint_link)
            return torch.from_numpy(poses.reshape(*batch, *poses.shape[1:]))
        T = _body_frames(self._torch, q)
        eye = torch.eye(4, dtype=self.dtype, device=self.device).expand(T.shape[0], 1, 4, 4)
        frames = torch.cat([eye, T], dim=1)[:, self._link_joint + 1]            # root = 0
        return (frames @ self._T_joint_link).reshape(*batch, -1, 4, 4)

    # ------------------------------------------------------------------ extension
    def columns(self, q, qd, qdd, bodies) -> Decomposition:
        """Decomposition restricted to the body columns ``bodies`` (kinematics shared).

        ``partial``, ``acceleration``, ``velocity`` and ``gravity`` have ``len(bodies)``
        columns; ``torque`` is the sum over those columns only.
        """
        (q, qd, qdd), batch = self._prepare(q=q, qd=qd, qdd=qdd)
        bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        return self._decompose_flat(bodies, q, qd, qdd).reshape(batch, self._to_torch)

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
        c = self._torch

        def pose(q_: Tensor) -> tuple[Tensor, Tensor]:
            T = _body_frames(c, q_[None])[0][c.body_joint]                      # (B, 4, 4)
            R = T[:, :3, :3]
            return R, T[:, :3, 3] + (R @ c.com[..., None])[..., 0]

        (R, com), (R_dot, com_dot) = torch.func.jvp(pose, (q,), (qd,))
        W = R_dot @ R.transpose(-1, -2)                     # [w]x = R' R^T
        w = torch.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], dim=-1)
        I_world = R @ c.inertia @ R.transpose(-1, -2)
        kinetic = 0.5 * c.mass * (com_dot * com_dot).sum(-1) + 0.5 * (
            w * (I_world @ w[..., None])[..., 0]).sum(-1)
        potential = -c.mass * (com @ c.gravity)
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
        (q, qd, qdd), batch = self._prepare(q=q, qd=qd, qdd=qdd)
        q, qd, qdd = (torch.as_tensor(x, dtype=self.dtype, device=self.device)
                      for x in (q, qd, qdd))
        partial, acceleration, velocity, gravity = torch.func.vmap(self._autograd_single)(
            q, qd, qdd)
        flat = _FlatDecomposition(partial.sum(-1), partial, acceleration, velocity, gravity,
                                  self.friction_torque(qd), None)
        return flat.reshape(batch)
