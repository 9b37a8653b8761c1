"""Partial Lagrangian engine: joint torques split by body and by motion source.

For body ``i`` with partial Lagrangian ``L_i = K_i - P_i`` (Kusaka and Tanaka 2022 [PL],
eq. 6) and the operator ``D_k = d/dt d/dqd_k - d/dq_k``, the partial torque
``partial[k, i] = D_k L_i`` is the torque at joint ``k`` caused by the motion of body ``i``;
summed over bodies it is the joint torque (== RNEA). Gunji, Kusaka and Tanaka 2025 [MPF]
(eq. 1 and 10) split each partial torque by the joint whose motion propagates it:

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
  this is the block sparsity of the partial torque tensor of Kusaka and Tanaka 2025 [PTT]).
  The velocity formula is the symmetric quadratic form of the Coriolis/centrifugal terms
  differentiated by ``qd_s``: kinematics is computed once per sample and every body and
  source in one vectorised pass, O(n^2 B) per sample. For float64 on the CPU the same
  formulas run as one compiled loop per sample (:mod:`plag_ros.core.dynamics.kernel`); the torch
  form serves float32, GPUs and autograd.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[PTT] T. Kusaka, T. Tanaka, "Partial Torque Tensor and Its Building Block Representation
for Dynamics of Branching Structures Using Computational Graph", Robotics 2025, 14(3), 31,
doi:10.3390/robotics14030031.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from plag_ros.core.dynamics import kernel, torch_form
from plag_ros.core.dynamics.arrays import FIELDS, ArrayLagrangian, check_shapes, not_finite
from plag_ros.core.dynamics.column_reuse import ExtensionPlan, plan_extension, splice_tables
from plag_ros.core.dynamics.model import RobotModel

__all__ = ['Decomposition', 'ExtensionPlan', 'PartialLagrangian', 'GRAVITY', 'FIELDS']

GRAVITY = (0.0, 0.0, -9.81)
"""Default gravity in the world (root link) frame [m/s^2]; the engine uses
``RobotModel.gravity``."""

JointValues = np.ndarray | Tensor | Sequence[float] | Sequence[Sequence[float]] | float
"""Joint values in any form ``torch.as_tensor`` takes: arrays, tensors, (nested) lists."""


@dataclass(frozen=True)
class Decomposition:
    """Joint torques of one or many samples, split by body and by motion source.

    Attributes (batch dims ``...``, n joints, B bodies; [N*m] for revolute, [N] prismatic):
        torque: (..., n) rigid-body joint torque (== RNEA), friction excluded.
        partial: (..., n, B) ``partial[k, i] = D_k L_i``.
        acceleration: (..., n, B, n) ``M_i[k, s] * qdd_s``.
        velocity: (..., n, B, n) ``1/2 d partial[k, i] / d qd_s * qd_s``.
        gravity: (..., n, B) ``d P_i / d q_k``.
        friction: (..., n) viscous + Coulomb joint friction (Rayleigh dissipation, [PL]),
            reported apart from the Lagrangian terms.
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

    @classmethod
    def from_flat(cls, flat: dict[str, Tensor], batch: tuple[int, ...]) -> Decomposition:
        """Fields given over a flat batch (N, ...) reshaped to ``batch`` + (...)."""
        return cls(**{name: flat[name].reshape(*batch, *flat[name].shape[1:])
                      for name in FIELDS})


class PartialLagrangian:
    """Partial Lagrangian inverse dynamics of a :class:`RobotModel`, batched over samples.

    Args:
        model: the robot.
        dtype: floating dtype of every computation (float64 for analysis; float32 is
            allowed for throughput).
        device: torch device (CPU by default).
        compiled: run float64 on the CPU through the compiled loop of
            :mod:`plag_ros.core.dynamics.kernel` (the default); False forces the torch form, as
            float32 and GPUs always use it (a reference for tests and benchmarks).
        threads: worker threads of the compiled loop on batches of 64 samples or more:
            None (the default) measures one thread against all and keeps the faster
            (:class:`plag_ros.core.dynamics.kernel.ThreadChoice`: two threads halve an idle
            machine's time but can triple it when another process holds a core); an int caps them
            (1: always one). Single samples always run on the calling thread.

    Attributes:
        compiled: True when the engine runs the compiled float64 loop (results share
            memory with numpy arrays; long batches need no chunking), False when it runs
            the torch form.
        last_extension: the :class:`ExtensionPlan` of the latest :meth:`extend` (None
            before the first).
        arrays: the numpy engine of the compiled path
            (:class:`plag_ros.core.dynamics.arrays.ArrayLagrangian`, always float64 on the
            CPU), for callers that want arrays and no torch.

    Inputs may be numpy arrays or torch tensors; results are torch tensors of ``dtype``.
    """

    chunk_size: int = 512
    """Samples per vectorised pass of the torch form (cache-sized; see bench/)."""

    def __init__(self, model: RobotModel, *, dtype: torch.dtype = torch.float64,
                 device: torch.device | str | None = None, compiled: bool = True,
                 threads: int | None = None) -> None:
        if not dtype.is_floating_point:
            raise ValueError(f'dtype must be floating point, got {dtype}')
        self.arrays = ArrayLagrangian(model, threads=threads)
        self.model = model
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device('cpu')
        self.compiled = compiled and dtype == torch.float64 and self.device.type == 'cpu'
        self.last_extension: ExtensionPlan | None = None
        self._all_bodies = self.arrays.all_bodies
        self._torch = torch_form.Constants.build(model, self._all_bodies, model.gravity, dtype,
                                         self.device)
        self._link_joint = torch.as_tensor(model.link_joint, device=self.device)
        self._T_joint_link = torch.as_tensor(model.T_joint_link, dtype=dtype,
                                             device=self.device)

    @property
    def threads(self) -> int | None:
        """The compiled loop's thread setting (``arrays``'; None: measured per batch)."""
        return self.arrays.threads

    # ------------------------------------------------------------------ inputs
    def _prepare_tensors(self, **arrays: JointValues) -> tuple[list[Tensor], tuple[int, ...]]:
        """:meth:`_prepare` for the torch form: (N, n) tensors of the engine's dtype and
        device, same checks and errors."""
        tensors = {name: torch.as_tensor(x.detach() if torch.is_tensor(x) else x,
                                         dtype=self.dtype, device=self.device)
                   for name, x in arrays.items()}
        shape = check_shapes({k: tuple(x.shape) for k, x in tensors.items()},
                             self.model.n_joints)
        flat = []
        for name, x in tensors.items():
            finite = torch.isfinite(x)
            if not finite.all():
                raise not_finite(self.model, name, finite.cpu().numpy())
            flat.append(x.expand(shape).reshape(-1, shape[-1]))
        return flat, shape[:-1]

    # ------------------------------------------------------------------ closed form
    def decompose(self, q: JointValues, qd: JointValues, qdd: JointValues, *,
                  out: Decomposition | None = None) -> Decomposition:
        """Split joint torques by body and by motion source (closed form, batched).

        Args:
            q: (..., n) joint positions [rad or m].
            qd: (..., n) joint velocities [rad/s or m/s].
            qdd: (..., n) joint accelerations [rad/s^2 or m/s^2].
            out: a :class:`Decomposition` to write into (e.g. :meth:`empty` or an earlier
                result of the same batch shape), whose tensors have the engine's dtype and
                device and are contiguous; reused memory instead of a fresh allocation.

        Returns:
            :class:`Decomposition` with torque (..., n), partial (..., n, B), acceleration
            and velocity (..., n, B, n), gravity (..., n, B), friction (..., n); ``out``
            itself when given.

        Raises:
            ValueError: wrong trailing size, shapes that do not broadcast, NaN or inf; an
                ``out`` of the wrong shape, dtype, device or layout.
        """
        if out is None:
            if self.compiled:
                arrays = self.arrays.decompose_arrays(q, qd, qdd)
                return Decomposition(**{name: torch.from_numpy(arrays[name])
                                        for name in FIELDS})
            return self.columns(q, qd, qdd, self._all_bodies)
        self._check_out_tensors(out)
        if self.compiled:
            self.arrays.decompose_arrays(q, qd, qdd, out={name: getattr(out, name).numpy()
                                                          for name in FIELDS})
            return out
        fresh = self.columns(q, qd, qdd, self._all_bodies)
        for name in FIELDS:
            target, value = getattr(out, name), getattr(fresh, name)
            if target.shape != value.shape:
                raise ValueError(f'out.{name} has shape {tuple(target.shape)}, the result '
                                 f'{tuple(value.shape)}')
        with torch.inference_mode():     # out may be an earlier (inference) result
            for name in FIELDS:
                getattr(out, name).copy_(getattr(fresh, name))
        return out

    def _check_out_tensors(self, out: Decomposition) -> None:
        for name in FIELDS:
            t = getattr(out, name)
            if (not torch.is_tensor(t) or t.dtype != self.dtype or t.device != self.device
                    or not t.is_contiguous() or t.requires_grad):
                raise ValueError(f'out.{name} must be a contiguous {self.dtype} tensor on '
                                 f'{self.device} without grad')

    def empty(self, batch: tuple[int, ...] = ()) -> Decomposition:
        """Uninitialised output tensors for ``decompose(..., out=...)`` of ``batch``."""
        return Decomposition(**{name: torch.from_numpy(a) if self.compiled else
                                torch.as_tensor(a, dtype=self.dtype, device=self.device)
                                for name, a in self.empty_arrays(batch).items()})

    def empty_arrays(self, batch: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
        """Uninitialised float64 arrays for ``decompose_arrays(..., out=...)``
        (:meth:`ArrayLagrangian.empty_arrays`)."""
        return self.arrays.empty_arrays(batch)

    def decompose_arrays(self, q: JointValues, qd: JointValues, qdd: JointValues, *,
                         out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """:meth:`decompose` as float64 numpy arrays, keyed by :data:`FIELDS`.

        The live nodes' call: on the compiled path the arrays come straight from the loop,
        without wrapping them in tensors and unwrapping them again (~25 torch calls, a
        tenth of a live sample's cost).

        Args:
            q, qd, qdd: (..., n) as in :meth:`decompose`.
            out: arrays to write into instead of allocating (:meth:`empty_arrays` of the
                batch shape, or an earlier result): writeable, C-contiguous float64 of
                exactly the result's shapes. The compiled loop writes into them directly;
                the torch form copies its result in.

        Returns:
            torque and friction (..., n), partial and gravity (..., n, B), acceleration and
            velocity (..., n, B, n); ``out`` itself when given.

        Raises:
            ValueError: as :meth:`decompose`; an ``out`` array of the wrong shape, dtype or
                layout (nothing is written then).
        """
        if self.compiled:
            return self.arrays.decompose_arrays(q, qd, qdd, out=out)
        result = self.decompose(q, qd, qdd).numpy()
        if out is None:
            return result
        kernel.check_out_arrays(out, self.arrays.out_shapes(result['torque'].shape[:-1]))
        for name in FIELDS:
            np.copyto(out[name], result[name])
        return out

    def _torch_columns(self, c: torch_form.Constants, q: Tensor, qd: Tensor,
                       qdd: Tensor) -> dict[str, Tensor]:
        """Every field for flat (N, n) tensors from :meth:`_prepare_tensors`, by the torch
        form, for the body columns ``c`` was built for."""
        with torch.inference_mode():
            N, size = q.shape[0], self.chunk_size
            if N <= size:
                out = torch_form.closed_form(c, q, qd, qdd)
            else:
                # Long batches go through in cache-sized chunks: on a whole bag every pair
                # intermediate would spill to memory (measured about 2x slower).
                parts = [torch_form.closed_form(c, q[a:a + size], qd[a:a + size], qdd[a:a + size])
                         for a in range(0, N, size)]
                out = {name: torch.cat([p[name] for p in parts]) for name in parts[0]}
            out['friction'] = torch_form.friction(c, qd, 0.0)
        return out

    # ------------------------------------------------------------------ helpers
    def inverse_dynamics(self, q: JointValues, qd: JointValues, qdd: JointValues) -> Tensor:
        """Rigid-body joint torques (..., n), friction excluded (== RNEA)."""
        return self.decompose(q, qd, qdd).torque

    def mass_matrix_and_bias(self, q: JointValues, qd: JointValues) -> tuple[Tensor, Tensor]:
        """M(q) (..., n, n) and bias C(q, qd) qd + g(q) (..., n) from one kinematics pass."""
        n = self.model.n_joints
        if self.compiled:
            M_np, bias_np = self.arrays.mass_matrix_and_bias(q, qd)
            return torch.from_numpy(M_np), torch.from_numpy(bias_np)
        (qt, qdt), batch = self._prepare_tensors(q=q, qd=qd)
        c = self._torch
        with torch.inference_mode():
            M_pairs, acc, vel, grav = torch_form.pair_terms(c, qt, qdt, torch.zeros_like(qt))
        M, bias = M_pairs @ c.pair_onehot_source, (acc + vel).sum(-1) + grav.sum(-1)
        return M.reshape(*batch, n, n), bias.reshape(*batch, n)

    def mass_matrix(self, q: JointValues) -> Tensor:
        """Joint-space mass matrix M(q) = sum_i M_i(q), (..., n) -> (..., n, n)."""
        return self.mass_matrix_and_bias(q, 0.0 * torch.as_tensor(q))[0]

    def bias(self, q: JointValues, qd: JointValues) -> Tensor:
        """Velocity-product plus gravity torques C(q, qd) qd + g(q), (..., n)."""
        return self.mass_matrix_and_bias(q, qd)[1]

    def gravity_torque(self, q: JointValues) -> Tensor:
        """Gravity torques g(q) = tau(q, 0, 0), (..., n)."""
        return self.mass_matrix_and_bias(q, 0.0 * torch.as_tensor(q))[1]

    def friction_torque(self, qd: JointValues, *, smoothing: float = 0.0) -> Tensor:
        """Viscous plus Coulomb joint friction (..., n) from URDF damping and friction.

        Args:
            qd: (..., n) joint velocities.
            smoothing: velocity scale [rad/s] of a tanh approximation of sign(qd); 0 keeps
                the exact (discontinuous) Coulomb law.
        """
        qd = torch.as_tensor(qd, dtype=self.dtype, device=self.device)
        return torch_form.friction(self._torch, qd, smoothing)

    def link_poses(self, q: JointValues) -> Tensor:
        """World pose T_world_link of every URDF link, (..., n) -> (..., L, 4, 4)."""
        if self.compiled:
            return torch.from_numpy(self.arrays.link_poses(q))
        (qt,), batch = self._prepare_tensors(q=q)
        T = torch_form.body_frames(self._torch, qt)
        eye = torch.eye(4, dtype=self.dtype, device=self.device).expand(T.shape[0], 1, 4, 4)
        frames = torch.cat([eye, T], dim=1)[:, self._link_joint + 1]            # root = 0
        return (frames @ self._T_joint_link).reshape(*batch, -1, 4, 4)

    # ------------------------------------------------------------------ extension
    def columns(self, q: JointValues, qd: JointValues, qdd: JointValues,
                bodies: Sequence[int] | np.ndarray) -> Decomposition:
        """Decomposition restricted to the body columns ``bodies`` (kinematics shared).

        ``partial``, ``acceleration``, ``velocity`` and ``gravity`` have ``len(bodies)``
        columns; ``torque`` is the sum over those columns only.
        """
        bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        if self.compiled:
            arrays, batch = self.arrays.columns_arrays(q, qd, qdd, bodies)
            flat = {name: torch.from_numpy(value) for name, value in arrays.items()}
        else:
            (qt, qdt, qddt), batch = self._prepare_tensors(q=q, qd=qd, qdd=qdd)
            every = bodies is self._all_bodies or np.array_equal(bodies, self._all_bodies)
            c = self._torch if every else torch_form.Constants.build(
                self.model, bodies, self.model.gravity, self.dtype, self.device)
            flat = self._torch_columns(c, qt, qdt, qddt)
        return Decomposition.from_flat(flat, batch)

    def plan_extension(self, previous_model: RobotModel) -> ExtensionPlan:
        """Which body columns :meth:`extend` can take from a result of ``previous_model``
        (see :func:`plag_ros.core.dynamics.column_reuse.plan_extension`)."""
        return plan_extension(self.model, previous_model)

    def extend(self, previous: Decomposition, previous_model: RobotModel, q: JointValues,
               qd: JointValues, qdd: JointValues) -> Decomposition:
        """Decomposition for this engine's model, reusing the columns of unchanged bodies.

        [PL]'s extension and reconstruction: ``previous`` was computed with
        ``previous_model`` on the same motion (each joint both models share has the same
        q, qd, qdd; ``q, qd, qdd`` here are in this model's joint order). Columns that
        :meth:`plan_extension` finds unchanged are copied, with their rows and sources
        moved to this model's joint indices (zero for joints off the body's root path,
        e.g. an appended joint); the others are recomputed with :meth:`columns`. Friction
        is recomputed. The plan is kept in :attr:`last_extension`.

        Raises:
            ValueError: ``previous`` does not have ``previous_model``'s table shape or the
                batch shape of ``q, qd, qdd``.
        """
        plan = self.plan_extension(previous_model)
        self.last_extension = plan
        n = self.model.n_joints
        old_n, old_B = previous_model.n_joints, previous_model.n_bodies
        if tuple(previous.partial.shape[-2:]) != (old_n, old_B):
            raise ValueError(f'previous tables have shape {tuple(previous.partial.shape)}, '
                             f'not (..., {old_n}, {old_B}) of the previous model')
        batch = tuple(previous.partial.shape[:-2])
        (_, qd_flat, _), in_batch = self._prepare_tensors(q=q, qd=qd, qdd=qdd)
        if in_batch != batch:
            raise ValueError(f'previous was computed on batch {batch}, q on {in_batch}')
        fresh = list(plan.recomputed_columns)
        new = self.columns(q, qd, qdd, fresh) if fresh else None
        names = ('partial', 'acceleration', 'velocity', 'gravity')
        tables = splice_tables(
            plan, self.model, previous_model,
            {name: getattr(previous, name).to(dtype=self.dtype, device=self.device)
             for name in names},
            None if new is None else {name: getattr(new, name) for name in names}, batch)
        return Decomposition(
            torque=tables['partial'].sum(-1), **tables,
            friction=torch_form.friction(self._torch, qd_flat, 0.0).reshape(*batch, n))

    # ------------------------------------------------------------------ autograd path
    def lagrangians(self, q: Tensor, qd: Tensor) -> tuple[Tensor, Tensor]:
        """Partial Lagrangians and potentials of one sample: (n,), (n,) -> L (B,), P (B,).

        ``K_i = 1/2 m_i |c_i'|^2 + 1/2 w_i . I_i w_i`` with the COM velocity and angular
        velocity taken by forward-mode differentiation of the forward kinematics along qd;
        ``P_i = -m_i g . c_i``.
        """
        c = self._torch

        def pose(q_: Tensor) -> tuple[Tensor, Tensor]:
            T = torch_form.body_frames(c, q_[None])[0][c.body_joint]            # (B, 4, 4)
            R = T[:, :3, :3]
            return R, T[:, :3, 3] + (R @ c.com[..., None])[..., 0]

        primal, tangent = torch.func.jvp(pose, (q,), (qd,))[:2]
        (R, com), (R_dot, com_dot) = primal, tangent
        W = R_dot @ R.transpose(-1, -2)                     # [w]x = R' R^T
        w = torch.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], dim=-1)
        I_world = R @ c.inertia @ R.transpose(-1, -2)
        kinetic = 0.5 * c.mass * (com_dot * com_dot).sum(-1) + 0.5 * (
            w * (I_world @ w[..., None])[..., 0]).sum(-1)
        potential = -c.mass * (com @ c.gravity)
        return kinetic - potential, potential

    def _autograd_single(self, q: Tensor, qd: Tensor,
                         qdd: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        func = torch.func

        def lagrangian(q_: Tensor, qd_: Tensor) -> Tensor:
            return self.lagrangians(q_, qd_)[0]

        def dL_dqd(q_: Tensor, qd_: Tensor) -> Tensor:
            return func.jacfwd(lagrangian, argnums=1)(q_, qd_)                  # (B, n)

        def partial_fn(q_: Tensor, qd_: Tensor, qdd_: Tensor) -> Tensor:
            # D_k L_i = d/dt dL_i/dqd_k - dL_i/dq_k, the time derivative along (qd, qdd)
            ddt = func.jvp(dL_dqd, (q_, qd_), (qd_, qdd_))[1]
            return (ddt - func.jacfwd(lagrangian, argnums=0)(q_, qd_)).T         # (n, B)

        partial = partial_fn(q, qd, qdd)
        hessian = func.jacfwd(dL_dqd, argnums=1)(q, qd)                          # (B, k, s)
        acceleration = hessian.permute(1, 0, 2) * qdd
        velocity = 0.5 * func.jacfwd(partial_fn, argnums=1)(q, qd, qdd) * qd
        gravity = func.jacfwd(lambda q_: self.lagrangians(q_, qd)[1])(q).T
        return partial, acceleration, velocity, gravity

    def decompose_autograd(self, q: JointValues, qd: JointValues,
                           qdd: JointValues) -> Decomposition:
        """Same as :meth:`decompose`, by differentiating each ``L_i`` with torch.func.

        Faithful to [PL] and [MPF] (the Euler-Lagrange operator applied to each partial
        Lagrangian by automatic differentiation), vmapped over the batch. Slower than the
        closed form; it is the reference the fast path is tested against.
        """
        (qt, qdt, qddt), batch = self._prepare_tensors(q=q, qd=qd, qdd=qdd)
        partial, acceleration, velocity, gravity = torch.func.vmap(self._autograd_single)(
            qt, qdt, qddt)
        flat = {'torque': partial.sum(-1), 'partial': partial, 'acceleration': acceleration,
                'velocity': velocity, 'gravity': gravity,
                'friction': torch_form.friction(self._torch, qdt, 0.0)}
        return Decomposition.from_flat(flat, batch)
