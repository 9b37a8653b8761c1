"""The partial Lagrangian engine on float64 numpy arrays, without torch.

:class:`ArrayLagrangian` runs the compiled loop of :mod:`plag_ros.core.dynamics.kernel`
(the closed form of :mod:`plag_ros.core.dynamics.engine`) on numpy arrays and returns numpy
arrays. It is what the live nodes and the controller call: importing torch costs a node
about 2 s of start-up and 200 MB of resident memory, and on a single sample every
tensor wrapped and unwrapped is time taken from the control cycle.

:class:`plag_ros.core.dynamics.engine.PartialLagrangian` owns one (its ``arrays``) and
wraps its results in tensors on its compiled path; the torch form (float32, GPUs,
autograd) stays there. Inputs may be numpy arrays, nested lists or CPU tensors: a tensor is
recognised by its type's module, so accepting one never imports torch.
"""
from __future__ import annotations

import math
from typing import Any, cast

import numpy as np

from plag_ros.core.dynamics import kernel
from plag_ros.core.dynamics.model import RobotModel

__all__ = ['FIELDS', 'ArrayLagrangian', 'arrays_of', 'host_array']

FIELDS = ('torque', 'partial', 'acceleration', 'velocity', 'gravity', 'friction')
"""Field names of a decomposition, in order (the keys of
:meth:`ArrayLagrangian.decompose_arrays` and the fields of
:class:`plag_ros.core.dynamics.engine.Decomposition`)."""

JointValues = Any
"""Joint values: numpy arrays, (nested) lists, floats, or CPU torch tensors."""


def host_array(x: JointValues) -> np.ndarray:
    """float64 numpy view of an array-like or a CPU tensor (no copy when already so)."""
    if type(x).__module__.startswith('torch'):     # a tensor, without importing torch
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def check_shapes(shapes: dict[str, tuple[int, ...]], n: int) -> tuple[int, ...]:
    """Broadcast shape of (..., n) inputs; ValueError naming them when impossible."""
    for name, shape in shapes.items():
        if len(shape) == 0 or shape[-1] != n:
            raise ValueError(f'{name} must have shape (..., {n}), got {shape}')
    try:
        return tuple(np.broadcast_shapes(*shapes.values()))
    except ValueError as err:
        listed = ', '.join(f'{k} {s}' for k, s in shapes.items())
        raise ValueError(f'input shapes do not broadcast: {listed}') from err


def not_finite(model: RobotModel, name: str, finite: np.ndarray) -> ValueError:
    """The error for an input with NaN or inf, naming the joints that have them."""
    bad = np.flatnonzero((~finite).reshape(-1, model.n_joints).any(0))
    names = [model.joint_names[k] for k in bad]
    return ValueError(f'{name} is not finite for joints {names}')


class ArrayLagrangian:
    """The compiled float64 partial Lagrangian engine of a :class:`RobotModel`, on numpy.

    Args:
        model: the robot.
        threads: worker threads of the compiled loop on batches of 64 samples or more, as
            :class:`plag_ros.core.dynamics.engine.PartialLagrangian`'s (None: measured).

    Every method takes (..., n) joint values (numpy arrays, lists, CPU tensors) and returns
    float64 numpy arrays with the same batch dimensions; units and index order are those of
    :class:`plag_ros.core.dynamics.engine.Decomposition`. NaN or inf inputs raise a
    ValueError naming the joints.
    """

    def __init__(self, model: RobotModel, *, threads: int | None = None) -> None:
        self.model = model
        self.threads = kernel.resolve_threads(threads)
        self.all_bodies = np.arange(model.n_bodies)
        self.kernel = kernel.KernelModel.build(model, self.all_bodies, model.gravity)
        self._damping = np.asarray(model.damping, dtype=np.float64)
        self._coulomb = np.asarray(model.friction, dtype=np.float64)
        # (batch, arrays, flat views) of the last checked decompose_arrays(out=...)
        self._views: tuple[tuple[int, ...], list[np.ndarray], dict[str, np.ndarray]] | None \
            = None

    # ------------------------------------------------------------------ inputs
    def prepare(self, **arrays: JointValues) -> tuple[list[np.ndarray], tuple[int, ...]]:
        """Validate (..., n) inputs, broadcast them and flatten to C-contiguous float64
        numpy (N, n) for the compiled loop; returns them and the batch shape.

        Raises:
            ValueError: wrong trailing size, shapes that do not broadcast, NaN or inf
                (naming the joints).
        """
        host = {name: host_array(x) for name, x in arrays.items()}
        shape = check_shapes({k: tuple(x.shape) for k, x in host.items()},
                             self.model.n_joints)
        flat = []
        for name, x in host.items():
            finite = np.isfinite(x)
            if not finite.all():
                raise not_finite(self.model, name, finite)
            if x.shape != shape:
                x = np.broadcast_to(x, shape)
            flat.append(np.ascontiguousarray(x.reshape(-1, shape[-1])))
        return flat, shape[:-1]

    # ------------------------------------------------------------------ decomposition
    def empty_arrays(self, batch: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
        """Uninitialised float64 arrays for ``decompose_arrays(..., out=...)``: torque and
        friction (*batch, n), partial and gravity (*batch, n, B), acceleration and velocity
        (*batch, n, B, n)."""
        return {name: np.empty(shape) for name, shape in self.out_shapes(batch).items()}

    def out_shapes(self, batch: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        """Shape of every field for ``batch``: the compiled loop's per-sample shapes."""
        return {name: (*batch, *shape[1:])
                for name, shape in self.kernel.output_shapes(1).items()}

    def decompose_arrays(self, q: JointValues, qd: JointValues, qdd: JointValues, *,
                         out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Joint torques split by body and by motion source, keyed by :data:`FIELDS`.

        Args:
            q, qd, qdd: (..., n) joint positions, velocities, accelerations.
            out: arrays to write into instead of allocating (:meth:`empty_arrays` of the
                batch shape, or an earlier result): writeable, C-contiguous float64 of
                exactly the result's shapes; the compiled loop writes into them directly.

        Returns:
            torque and friction (..., n), partial and gravity (..., n, B), acceleration and
            velocity (..., n, B, n); ``out`` itself when given.

        Raises:
            ValueError: wrong trailing size, shapes that do not broadcast, NaN or inf; an
                ``out`` array of the wrong shape, dtype or layout (nothing is written then).
        """
        single = self._single_sample(q, qd, qdd, out)
        if single is not None:
            return single
        (qf, qdf, qddf), batch = self.prepare(q=q, qd=qd, qdd=qdd)
        if out is None:
            flat = kernel.decompose_into(self.kernel, qf, qdf, qddf, threads=self.threads)
            return {name: a.reshape(*batch, *a.shape[1:]) for name, a in flat.items()}
        kernel.decompose_unchecked(self.kernel, qf, qdf, qddf, self._out_views(out, batch),
                                   threads=self.threads)
        return out

    def columns_arrays(self, q: JointValues, qd: JointValues, qdd: JointValues,
                       bodies: np.ndarray) -> tuple[dict[str, np.ndarray], tuple[int, ...]]:
        """The decomposition restricted to the body columns ``bodies`` ((B',) int64), over
        the flat batch: fields (N, ...) with B' columns, and the batch shape."""
        (qf, qdf, qddf), batch = self.prepare(q=q, qd=qd, qdd=qdd)
        every = bodies is self.all_bodies or np.array_equal(bodies, self.all_bodies)
        km = self.kernel if every else kernel.KernelModel.build(self.model, bodies,
                                                                 self.model.gravity)
        return kernel.decompose_into(km, qf, qdf, qddf, threads=self.threads), batch

    def _out_views(self, out: dict[str, np.ndarray],
                   batch: tuple[int, ...]) -> dict[str, np.ndarray]:
        """Flat (N, ...) views of checked ``out`` arrays for the compiled loop.

        The check and the views are kept for the arrays last seen (by identity), so a
        caller reusing one set of buffers pays for them once.
        """
        arrays = [out.get(name) for name in FIELDS] if isinstance(out, dict) else []
        cached = self._views
        if (cached is not None and cached[0] == batch and len(arrays) == len(FIELDS)
                and all(a is b for a, b in zip(arrays, cached[1], strict=True))):
            return cached[2]
        kernel.check_out_arrays(out, self.out_shapes(batch))
        N = math.prod(batch)
        views = {name: out[name].reshape(N, *out[name].shape[len(batch):]) for name in FIELDS}
        self._views = (batch, [out[name] for name in FIELDS], views)
        return views

    def _single_sample(self, q: JointValues, qd: JointValues, qdd: JointValues,
                       out: dict[str, np.ndarray] | None = None,
                       ) -> dict[str, np.ndarray] | None:
        """decompose_arrays of one finite (n,) float64 sample, or None for anything else.

        The live node's case, without the broadcasting and validation of prepare: at
        200 Hz with cold caches each skipped numpy call is several microseconds. Anything
        unusual (other shapes or dtypes, a non-finite value, whose error message names the
        joints) takes the general path.
        """
        n = self.model.n_joints
        for x in (q, qd, qdd):
            if type(x) is not np.ndarray or x.shape != (n,) or x.dtype != np.float64:
                return None
        if out is None:
            B = self.model.n_bodies
            target = {'torque': np.empty(n), 'partial': np.empty((n, B)),
                      'acceleration': np.empty((n, B, n)), 'velocity': np.empty((n, B, n)),
                      'gravity': np.empty((n, B)), 'friction': np.empty(n)}
        else:
            self._out_views(out, ())                 # checks out (once per buffer set)
            target = out
        q_, qd_, qdd_ = cast('tuple[np.ndarray, np.ndarray, np.ndarray]', (q, qd, qdd))
        if not kernel.decompose_sample(self.kernel, q_, qd_, qdd_, target):
            return None          # NaN/inf, nothing written: the general path names joints
        return target

    # ------------------------------------------------------------------ helpers
    def inverse_dynamics(self, q: JointValues, qd: JointValues,
                         qdd: JointValues) -> np.ndarray:
        """Rigid-body joint torques (..., n), friction excluded (== RNEA)."""
        return self.decompose_arrays(q, qd, qdd)['torque']

    def mass_matrix_and_bias(self, q: JointValues,
                             qd: JointValues) -> tuple[np.ndarray, np.ndarray]:
        """M(q) (..., n, n) and bias C(q, qd) qd + g(q) (..., n) from one kinematics pass."""
        (qf, qdf), batch = self.prepare(q=q, qd=qd)
        M, bias = kernel.mass_matrix_and_bias_into(self.kernel, qf, qdf, threads=self.threads)
        n = self.model.n_joints
        return M.reshape(*batch, n, n), bias.reshape(*batch, n)

    def mass_matrix(self, q: JointValues) -> np.ndarray:
        """Joint-space mass matrix M(q) = sum_i M_i(q), (..., n) -> (..., n, n)."""
        return self.mass_matrix_and_bias(q, _at_rest(q))[0]

    def bias(self, q: JointValues, qd: JointValues) -> np.ndarray:
        """Velocity-product plus gravity torques C(q, qd) qd + g(q), (..., n)."""
        return self.mass_matrix_and_bias(q, qd)[1]

    def gravity_torque(self, q: JointValues) -> np.ndarray:
        """Gravity torques g(q) = tau(q, 0, 0), (..., n)."""
        return self.mass_matrix_and_bias(q, _at_rest(q))[1]

    def friction_torque(self, qd: JointValues, *, smoothing: float = 0.0) -> np.ndarray:
        """Viscous plus Coulomb joint friction (..., n) from URDF damping and friction.

        Args:
            qd: (..., n) joint velocities.
            smoothing: velocity scale [rad/s] of a tanh approximation of sign(qd); 0 keeps
                the exact (discontinuous) Coulomb law.
        """
        qd = host_array(qd)
        sign = np.tanh(qd / smoothing) if smoothing > 0.0 else np.sign(qd)
        return self._damping * qd + self._coulomb * sign

    def link_poses(self, q: JointValues) -> np.ndarray:
        """World pose T_world_link of every URDF link, (..., n) -> (..., L, 4, 4)."""
        (qf,), batch = self.prepare(q=q)
        poses = kernel.link_poses(self.kernel, qf, self.model.link_joint,
                                  self.model.T_joint_link)
        return poses.reshape(*batch, *poses.shape[1:])


def _at_rest(q: JointValues) -> np.ndarray:
    """Zero velocities of ``q``'s shape (a non-finite ``q`` fails its own check first)."""
    return 0.0 * host_array(q)


def arrays_of(engine: object) -> ArrayLagrangian:
    """The numpy engine of ``engine``: itself, or a
    :class:`~plag_ros.core.dynamics.engine.PartialLagrangian`'s ``arrays`` (float64 on the
    CPU whatever the torch engine's dtype and device)."""
    return cast(ArrayLagrangian, getattr(engine, 'arrays', engine))
