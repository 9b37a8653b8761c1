"""Compiled closed form of the partial Lagrangian split, one fused loop per sample.

The same mathematics as :func:`plag_ros.core.dynamics.torch_form.closed_form` (formulas in
:mod:`plag_ros.core.dynamics.engine`), written as scalar loops and compiled with numba: the
vectorised array form spends most of its time materialising per-pair intermediates in memory, while
this loop keeps a sample's kinematics (a few hundred doubles) in cache and writes each table entry
once. Used for float64 on the CPU; the torch form stays for float32, GPUs and as the cross-check in
the tests.

Frames: spatial vectors in world coordinates, angular part first, taken at the world
origin. Shapes below: N samples, n joints, B bodies, L the longest root-to-body path.

Size (over ~600 lines): one compiled unit. The per-sample loop, its batch and thread
drivers and the thread choice that times them share the packed layout
(:class:`KernelModel`) and numba's on-disk cache of this file.
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

if TYPE_CHECKING:
    from plag_ros.core.dynamics.model import RobotModel

__all__ = ['KernelModel', 'ThreadChoice', 'check_out_arrays', 'decompose_into',
           'decompose_sample', 'decompose_unchecked', 'link_poses', 'mass_matrix_and_bias_into',
           'parallel_threshold', 'resolve_threads', 'thread_choice']

parallel_threshold = 64
"""Batches at least this long are split over threads (numba's pool)."""

# numba's default thread pool must not be entered from two Python threads at once.
_pool_lock = threading.Lock()


@dataclass(frozen=True)
class KernelModel:
    """Model constants in the flat float64/int64 form the compiled loops take.

    Attributes:
        parent: (n,) parent joint, -1 at the root; parents come before children.
        axis: (n, 3) unit joint axes in the joint frames.
        revolute: (n,) 1 for revolute/continuous, 0 for prismatic.
        T_parent_joint: (n, 4, 4) joint frame in its parent's frame at q = 0.
        body_joint: (B,) joint each body rides on.
        mass: (B,) [kg]; com: (B, 3) [m] and inertia: (B, 3, 3) [kg m^2] about the COM,
            both in the joint's child frame.
        path: (B, L) joints from the root to each body's joint, root first, padded with -1;
            path_len: (B,) entries used.
        gravity: (3,) world gravity [m/s^2].
        damping: (n,) viscous [N*m*s/rad]; coulomb: (n,) Coulomb friction [N*m].
        ints, reals: every constant above packed once into one int64 and one float64
            vector (:func:`_unpack` reads them back as views), so that a compiled call
            takes two constant arguments instead of eleven: numba unboxes each argument
            on every call, about a microsecond for the eleven on this machine.
    """

    parent: np.ndarray
    axis: np.ndarray
    revolute: np.ndarray
    T_parent_joint: np.ndarray
    body_joint: np.ndarray
    mass: np.ndarray
    com: np.ndarray
    inertia: np.ndarray
    path: np.ndarray
    path_len: np.ndarray
    gravity: np.ndarray
    damping: np.ndarray
    coulomb: np.ndarray
    ints: np.ndarray
    reals: np.ndarray

    @classmethod
    def build(cls, model: RobotModel, bodies: np.ndarray,
              gravity: Sequence[float] | np.ndarray) -> KernelModel:
        """Constants for the body columns ``bodies`` (indices into ``model``'s bodies)."""
        paths = [model.root_path(model.body_joint[i]) for i in bodies]
        longest = max((len(p) for p in paths), default=0)
        path = np.full((len(paths), max(longest, 1)), -1, dtype=np.int64)
        for b, chain in enumerate(paths):
            path[b, :len(chain)] = chain

        def f64(x: Any) -> np.ndarray:
            return np.ascontiguousarray(x, dtype=np.float64)

        parent = np.ascontiguousarray(model.joint_parent, dtype=np.int64)
        revolute = np.array([t != 'prismatic' for t in model.joint_types], dtype=np.int64)
        body_joint = np.ascontiguousarray(model.body_joint[bodies], dtype=np.int64)
        path_len = np.array([len(p) for p in paths], dtype=np.int64)
        axis, T = f64(model.joint_axis), f64(model.T_parent_joint)
        mass, com = f64(model.body_mass[bodies]), f64(model.body_com[bodies])
        inertia, g = f64(model.body_inertia[bodies]), f64(gravity)
        damping, coulomb = f64(model.damping), f64(model.friction)
        n, B, L = len(parent), len(body_joint), path.shape[1]
        ints = np.concatenate([[n, B, L], parent, revolute, body_joint, path_len,
                               path.ravel()]).astype(np.int64)
        reals = np.concatenate([axis.ravel(), T.ravel(), mass, com.ravel(), inertia.ravel(),
                                g, damping, coulomb])
        return cls(parent=parent, axis=axis, revolute=revolute, T_parent_joint=T,
                   body_joint=body_joint, mass=mass, com=com, inertia=inertia, path=path,
                   path_len=path_len, gravity=g, damping=damping, coulomb=coulomb,
                   ints=ints, reals=reals)

    @property
    def work(self) -> int:
        """Per-sample work in table entries, sum over bodies of path length squared (at
        least 1): the size measure of :class:`ThreadChoice`."""
        return max(1, int((self.path_len ** 2).sum()))

    def output_shapes(self, N: int) -> dict[str, tuple[int, ...]]:
        """Shapes of :func:`decompose_into`'s outputs for a flat batch of N samples."""
        n, B = self.parent.shape[0], self.body_joint.shape[0]
        return {'torque': (N, n), 'partial': (N, n, B), 'acceleration': (N, n, B, n),
                'velocity': (N, n, B, n), 'gravity': (N, n, B), 'friction': (N, n)}


@numba.njit(cache=True, nogil=True)
def _unpack(ints, reals):
    """KernelModel.ints/reals -> parent, axis, revolute, T_parent_joint, body_joint, mass,
    com, inertia, path, path_len, gravity, damping, coulomb (views, no copy)."""
    n, B, L = ints[0], ints[1], ints[2]
    a = 3
    parent, revolute = ints[a:a + n], ints[a + n:a + 2 * n]
    a += 2 * n
    body_joint, path_len = ints[a:a + B], ints[a + B:a + 2 * B]
    a += 2 * B
    path = ints[a:a + B * L].reshape((B, L))
    axis = reals[0:3 * n].reshape((n, 3))
    b = 3 * n
    T = reals[b:b + 16 * n].reshape((n, 4, 4))
    b += 16 * n
    mass = reals[b:b + B]
    b += B
    com = reals[b:b + 3 * B].reshape((B, 3))
    b += 3 * B
    inertia = reals[b:b + 9 * B].reshape((B, 3, 3))
    b += 9 * B
    gravity = reals[b:b + 3]
    b += 3
    damping, coulomb = reals[b:b + n], reals[b + n:b + 2 * n]
    return (parent, axis, revolute, T, body_joint, mass, com, inertia, path, path_len,
            gravity, damping, coulomb)


# --------------------------------------------------------------------------- kinematics
@numba.njit(cache=True, nogil=True)
def _kinematics(q, qd, parent, axis, revolute, T_parent_joint, R, p, S, v):
    """World rotation R (n, 3, 3) and origin p (n, 3) of each joint's child frame, motion
    subspaces S (n, 6) and spatial velocities v (n, 6) of the joints' child bodies."""
    n = q.shape[0]
    Rl = np.empty((3, 3))
    A = np.empty((3, 3))
    t = np.empty(3)
    for j in range(n):
        a0, a1, a2 = axis[j, 0], axis[j, 1], axis[j, 2]
        if revolute[j]:
            # Rodrigues, R = I + sin K + (1 - cos) K^2 with K = [axis]x and |axis| = 1
            s, c1 = np.sin(q[j]), 1.0 - np.cos(q[j])
            Rl[0, 0] = 1.0 - c1 * (a1 * a1 + a2 * a2)
            Rl[1, 1] = 1.0 - c1 * (a0 * a0 + a2 * a2)
            Rl[2, 2] = 1.0 - c1 * (a0 * a0 + a1 * a1)
            Rl[0, 1] = -s * a2 + c1 * a0 * a1
            Rl[1, 0] = s * a2 + c1 * a0 * a1
            Rl[0, 2] = s * a1 + c1 * a0 * a2
            Rl[2, 0] = -s * a1 + c1 * a0 * a2
            Rl[1, 2] = -s * a0 + c1 * a1 * a2
            Rl[2, 1] = s * a0 + c1 * a1 * a2
            slide = 0.0
        else:
            for r in range(3):
                for k in range(3):
                    Rl[r, k] = 1.0 if r == k else 0.0
            slide = q[j]
        # parent -> child: T_parent_joint @ [Rl, slide * axis; 0, 1]
        T = T_parent_joint[j]
        for r in range(3):
            for k in range(3):
                A[r, k] = T[r, 0] * Rl[0, k] + T[r, 1] * Rl[1, k] + T[r, 2] * Rl[2, k]
            t[r] = T[r, 3] + slide * (T[r, 0] * a0 + T[r, 1] * a1 + T[r, 2] * a2)
        pa = parent[j]
        for r in range(3):
            if pa < 0:
                p[j, r] = t[r]
                for k in range(3):
                    R[j, r, k] = A[r, k]
            else:
                p[j, r] = p[pa, r] + R[pa, r, 0] * t[0] + R[pa, r, 1] * t[1] + R[pa, r, 2] * t[2]
                for k in range(3):
                    R[j, r, k] = (R[pa, r, 0] * A[0, k] + R[pa, r, 1] * A[1, k]
                                  + R[pa, r, 2] * A[2, k])
        w0 = R[j, 0, 0] * a0 + R[j, 0, 1] * a1 + R[j, 0, 2] * a2
        w1 = R[j, 1, 0] * a0 + R[j, 1, 1] * a1 + R[j, 1, 2] * a2
        w2 = R[j, 2, 0] * a0 + R[j, 2, 1] * a1 + R[j, 2, 2] * a2
        if revolute[j]:
            S[j, 0], S[j, 1], S[j, 2] = w0, w1, w2
            S[j, 3] = p[j, 1] * w2 - p[j, 2] * w1          # p x w: the axis passes through p
            S[j, 4] = p[j, 2] * w0 - p[j, 0] * w2
            S[j, 5] = p[j, 0] * w1 - p[j, 1] * w0
        else:
            S[j, 0] = S[j, 1] = S[j, 2] = 0.0
            S[j, 3], S[j, 4], S[j, 5] = w0, w1, w2
        for r in range(6):
            v[j, r] = S[j, r] * qd[j] + (v[pa, r] if pa >= 0 else 0.0)


@numba.njit(cache=True, nogil=True)
def _spatial_inertia(R, p, m, com, inertia, I6):
    """Spatial inertia (6, 6) at the world origin of a body on a frame (R, p); returns the
    world COM (3,). For x = (w, v): momentum (I_c w + c x m(v + w x c), m(v + w x c)), i.e.
    [[I_c - m [c]x[c]x, m [c]x], [-m [c]x, m 1]]."""
    c = np.empty(3)
    RI = np.empty((3, 3))
    for r in range(3):
        c[r] = p[r] + R[r, 0] * com[0] + R[r, 1] * com[1] + R[r, 2] * com[2]
        for k in range(3):
            RI[r, k] = R[r, 0] * inertia[0, k] + R[r, 1] * inertia[1, k] + R[r, 2] * inertia[2, k]
    for r in range(3):
        for k in range(3):
            I6[r, k] = RI[r, 0] * R[k, 0] + RI[r, 1] * R[k, 1] + RI[r, 2] * R[k, 2]
    cx, cy, cz = c[0], c[1], c[2]
    # - m [c]x [c]x = m (|c|^2 1 - c c^T)
    cc = cx * cx + cy * cy + cz * cz
    for r in range(3):
        for k in range(3):
            I6[r, k] += m * ((cc if r == k else 0.0) - c[r] * c[k])
    # m [c]x in the upper right, its transpose -m [c]x in the lower left
    mx, my, mz = m * cx, m * cy, m * cz
    I6[0, 3], I6[0, 4], I6[0, 5] = 0.0, -mz, my
    I6[1, 3], I6[1, 4], I6[1, 5] = mz, 0.0, -mx
    I6[2, 3], I6[2, 4], I6[2, 5] = -my, mx, 0.0
    for r in range(3):
        for k in range(3):
            I6[3 + r, k] = I6[k, 3 + r]
            I6[3 + r, 3 + k] = m if r == k else 0.0
    return c


@numba.njit(cache=True, nogil=True, inline='always')
def _mul6(I6, x, out):
    for r in range(6):
        out[r] = (I6[r, 0] * x[0] + I6[r, 1] * x[1] + I6[r, 2] * x[2]
                  + I6[r, 3] * x[3] + I6[r, 4] * x[4] + I6[r, 5] * x[5])


@numba.njit(cache=True, nogil=True, inline='always')
def _dot6(a, b):
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3] + a[4] * b[4] + a[5] * b[5]


@numba.njit(cache=True, nogil=True, inline='always')
def _add_cross_force(a, f, out):
    """out += a x* f for a motion vector a and a force f (angular first)."""
    out[0] += a[1] * f[2] - a[2] * f[1] + a[4] * f[5] - a[5] * f[4]
    out[1] += a[2] * f[0] - a[0] * f[2] + a[5] * f[3] - a[3] * f[5]
    out[2] += a[0] * f[1] - a[1] * f[0] + a[3] * f[4] - a[4] * f[3]
    out[3] += a[1] * f[5] - a[2] * f[4]
    out[4] += a[2] * f[3] - a[0] * f[5]
    out[5] += a[0] * f[4] - a[1] * f[3]


# --------------------------------------------------------------------------- one sample
@numba.njit(cache=True, nogil=True)
def _sample(q, qd, qdd, parent, axis, revolute, T_parent_joint, body_joint, mass, com,
            inertia, path, path_len, gravity, tables, R, p, S, v, I6, scratch,
            torque, partial, acceleration, velocity, grav, M):
    """Decompose one sample into the given output rows (tables) or into torque and the
    mass matrix M (n, n) only (``tables`` False; ``partial`` ... ``grav`` are not touched).
    """
    n = q.shape[0]
    _kinematics(q, qd, parent, axis, revolute, T_parent_joint, R, p, S, v)
    h, IS, X, F, fg = scratch[0], scratch[1], scratch[2], scratch[3], scratch[4]
    for k in range(n):
        torque[k] = 0.0
    if tables:
        partial[:] = 0.0
        acceleration[:] = 0.0
        velocity[:] = 0.0
        grav[:] = 0.0
    else:
        M[:] = 0.0
    for i in range(body_joint.shape[0]):
        b = body_joint[i]
        c = _spatial_inertia(R[b], p[b], mass[i], com[i], inertia[i], I6)
        vb = v[b]
        _mul6(I6, vb, h)                                   # body momentum
        # gravity wrench of the body at the origin: (c x m g, m g), sign so that
        # S_k . fg is the gravity torque d P_i / d q_k
        m = mass[i]
        g0, g1, g2 = -m * gravity[0], -m * gravity[1], -m * gravity[2]
        fg[0] = c[1] * g2 - c[2] * g1
        fg[1] = c[2] * g0 - c[0] * g2
        fg[2] = c[0] * g1 - c[1] * g0
        fg[3], fg[4], fg[5] = g0, g1, g2
        L = path_len[i]
        for a in range(L):
            k = path[i, a]
            gk = _dot6(S[k], fg)
            torque[k] += gk
            if tables:
                grav[k, i] = gk
                partial[k, i] += gk
        for e in range(L):
            s = path[i, e]
            Ss = S[s]
            _mul6(I6, Ss, IS)
            # X = (2 v_s - v_b) x S_s (motion cross product)
            u0, u1, u2 = 2.0 * v[s, 0] - vb[0], 2.0 * v[s, 1] - vb[1], 2.0 * v[s, 2] - vb[2]
            u3, u4, u5 = 2.0 * v[s, 3] - vb[3], 2.0 * v[s, 4] - vb[4], 2.0 * v[s, 5] - vb[5]
            X[0] = u1 * Ss[2] - u2 * Ss[1]
            X[1] = u2 * Ss[0] - u0 * Ss[2]
            X[2] = u0 * Ss[1] - u1 * Ss[0]
            X[3] = u1 * Ss[5] - u2 * Ss[4] + u4 * Ss[2] - u5 * Ss[1]
            X[4] = u2 * Ss[3] - u0 * Ss[5] + u5 * Ss[0] - u3 * Ss[2]
            X[5] = u0 * Ss[4] - u1 * Ss[3] + u3 * Ss[1] - u4 * Ss[0]
            _mul6(I6, X, F)
            _add_cross_force(vb, IS, F)
            _add_cross_force(Ss, h, F)
            qdd_s, half_qd_s = qdd[s], 0.5 * qd[s]
            for a in range(L):
                k = path[i, a]
                Mks = _dot6(S[k], IS)
                acc = Mks * qdd_s
                vel = _dot6(S[k], F) * half_qd_s
                torque[k] += acc + vel
                if tables:
                    acceleration[k, i, s] = acc
                    velocity[k, i, s] = vel
                    partial[k, i] += acc + vel
                else:
                    M[k, s] += Mks


@numba.njit(cache=True, nogil=True)
def _batch(q, qd, qdd, ints, reals, tables, start, stop,
           torque, partial, acceleration, velocity, grav, friction, M):
    (parent, axis, revolute, T_parent_joint, body_joint, mass, com, inertia, path, path_len,
     gravity, damping, coulomb) = _unpack(ints, reals)
    n = q.shape[1]
    R = np.empty((n, 3, 3))
    p = np.empty((n, 3))
    S = np.empty((n, 6))
    v = np.empty((n, 6))
    I6 = np.empty((6, 6))
    scratch = np.empty((5, 6))
    for t in range(start, stop):
        _sample(q[t], qd[t], qdd[t], parent, axis, revolute, T_parent_joint, body_joint,
                mass, com, inertia, path, path_len, gravity, tables, R, p, S, v, I6, scratch,
                torque[t], partial[t], acceleration[t], velocity[t], grav[t], M[t])
        if tables:
            # viscous + Coulomb friction (np.sign: 0 at rest), apart from the Lagrangian
            for k in range(n):
                w = qd[t, k]
                friction[t, k] = damping[k] * w + coulomb[k] * (
                    1.0 if w > 0.0 else (-1.0 if w < 0.0 else 0.0))


@numba.njit(cache=True, nogil=True, parallel=True)
def _batch_parallel(q, qd, qdd, ints, reals, tables, blocks,
                    torque, partial, acceleration, velocity, grav, friction, M):
    N = q.shape[0]
    size = (N + blocks - 1) // blocks
    for b in numba.prange(blocks):
        _batch(q, qd, qdd, ints, reals, tables, b * size, min(N, (b + 1) * size),
               torque, partial, acceleration, velocity, grav, friction, M)


@numba.njit(cache=True, nogil=True)
def _one(q, qd, qdd, ints, reals, torque, partial, acceleration, velocity, grav, friction):
    """One (n,) sample into (n, ...) outputs; False, writing nothing, if an input is not
    finite."""
    n = q.shape[0]
    for k in range(n):
        if not (np.isfinite(q[k]) and np.isfinite(qd[k]) and np.isfinite(qdd[k])):
            return False
    (parent, axis, revolute, T_parent_joint, body_joint, mass, com, inertia, path, path_len,
     gravity, damping, coulomb) = _unpack(ints, reals)
    _sample(q, qd, qdd, parent, axis, revolute, T_parent_joint, body_joint, mass, com,
            inertia, path, path_len, gravity, True, np.empty((n, 3, 3)), np.empty((n, 3)),
            np.empty((n, 6)), np.empty((n, 6)), np.empty((6, 6)), np.empty((5, 6)),
            torque, partial, acceleration, velocity, grav, np.empty((0, 0)))
    for k in range(n):
        w = qd[k]
        friction[k] = damping[k] * w + coulomb[k] * (1.0 if w > 0.0 else (
            -1.0 if w < 0.0 else 0.0))
    return True


# numba's dispatchers, typed as what they are to the Python caller
_one_call: Any = _one
_batch_call: Any = _batch
_batch_parallel_call: Any = _batch_parallel
_max_threads: int = getattr(numba.config, 'NUMBA_NUM_THREADS')  # noqa: B009 - untyped


class ThreadChoice:
    """Serial or parallel for a batch, chosen by measuring both, so that the automatic
    choice does not lose to one thread.

    On an idle machine two threads halve a batch's time. With another process busy on a
    core they are slower, and not evenly: most calls may still take half the time while
    some wait a scheduler slice for the busy core and take 4-20x as long (numba splits the
    batch in equal blocks; the block on the busy core finishes last). The loss depends on
    the machine's load, not on the model, so the choice is measured, per size class (log2
    of samples x per-sample work, and whether the tables are wanted or only M and the
    bias):

    * serial is measured first (one thread is the safe default), and a call expected to
      take under :attr:`MIN_PARALLEL_S` (5 ms) on one thread stays there: a slice lost to
      a busy core costs about that much, 2-20x such a call (measured here), against a gain
      of at most half of it on an idle machine;
    * each option's figure is the *mean* of its last :attr:`WINDOW` calls (seconds per work
      unit): the throughput a caller gets, stalls included, which a median would hide;
    * parallel is used only when its figure beats serial's by :attr:`MARGIN` (10 %);
    * the option not in use is measured afresh on :attr:`BURST` consecutive calls after
      4, 8, 16 ... 512 calls: doubling while it keeps losing, or when it wins a burst and
      loses within :attr:`WINDOW` calls (lucky calls); back to 4 when the option in use
      gets slower. Once settled under 1 % of the calls go to the slower option.

    :func:`_run` also measures both on the first large batch of a class, on two slices of
    it, before running the rest (an analysis decomposes a whole recording in one call).
    """

    MARGIN = 0.9
    MIN_PARALLEL_S = 0.005
    WINDOW = 4
    BURST = 2
    FIRST_INTERVAL = 4
    MAX_INTERVAL = 512

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._classes: dict[tuple[int, bool], _ClassFigures] = {}

    def _figures(self, size_class: tuple[int, bool]) -> _ClassFigures:
        return self._classes.setdefault(size_class, _ClassFigures(self.FIRST_INTERVAL))

    def unmeasured(self, size_class: tuple[int, bool]) -> bool:
        """Whether an option of this class has no figure yet."""
        with self._lock:
            figures = self._classes.get(size_class)
            return figures is None or not (figures.serial and figures.parallel)

    def serial_only(self, size_class: tuple[int, bool], units: float) -> bool:
        """Whether a call of ``units`` work units is measured to be too short for parallel:
        it then runs on one thread untimed (no bookkeeping on calls that cannot switch)."""
        f = self._classes.get(size_class)
        return f is not None and len(f.serial) >= self.WINDOW and self._too_short(f, units)

    def _too_short(self, f: _ClassFigures, units: float) -> bool:
        """Whether one thread is expected to take under MIN_PARALLEL_S for ``units``."""
        return _mean(f.serial) * units < self.MIN_PARALLEL_S

    def pick(self, size_class: tuple[int, bool], units: float) -> bool:
        """Whether to run this call of ``units`` work units in parallel."""
        with self._lock:
            f = self._figures(size_class)
            if not f.serial:
                return False                       # serial first, then parallel
            if self._too_short(f, units):
                return False                       # too short to risk a lost slice
            if not f.parallel:
                return True
            if f.probing:
                return not f.in_use_parallel       # the rest of a retry burst
            f.countdown -= 1
            if f.countdown > 0:
                return f.in_use_parallel
            f.probing = self.BURST                 # the other option, measured afresh
            return not f.in_use_parallel

    def record(self, size_class: tuple[int, bool], parallel: bool,
               seconds_per_unit: float) -> None:
        with self._lock:
            f = self._figures(size_class)
            times = f.parallel if parallel else f.serial
            probe = f.probing > 0 and parallel != f.in_use_parallel
            if probe and f.probing == self.BURST:
                times.clear()                      # a fresh look, not an old figure
            times.append(seconds_per_unit)
            del times[:-self.WINDOW]
            if probe:
                f.probing -= 1
                if f.probing:
                    return                         # decide at the end of the burst
            if not (f.serial and f.parallel):
                return
            faster_parallel = _mean(f.parallel) < self.MARGIN * _mean(f.serial)
            changed = faster_parallel != f.in_use_parallel
            if probe and changed:
                f.trial = self.WINDOW              # the new choice has to hold
            elif probe or (changed and f.trial > 0):
                # the other option lost again, or won a burst and lost right after
                f.interval = min(2 * f.interval, self.MAX_INTERVAL)
                f.trial = 0
            elif changed:
                f.interval = self.FIRST_INTERVAL  # the option in use got slower: look again
            else:
                f.trial = max(0, f.trial - 1)
            if probe or changed:
                f.countdown = f.interval
            f.in_use_parallel = faster_parallel

    def parallel_share(self, size_class: tuple[int, bool]) -> float | None:
        """Measured parallel / serial time of a size class (None before both ran)."""
        with self._lock:
            f = self._classes.get(size_class)
            if f is None or not (f.serial and f.parallel):
                return None
            return _mean(f.parallel) / _mean(f.serial)


class _ClassFigures:
    """One size class's measurements (seconds per work unit, newest last)."""

    def __init__(self, interval: int) -> None:
        self.serial: list[float] = []
        self.parallel: list[float] = []
        self.in_use_parallel = False
        self.interval = interval
        self.countdown = interval
        self.probing = 0          # calls left in a burst of the option not in use
        self.trial = 0            # calls a choice made by a burst has yet to hold


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


thread_choice = ThreadChoice()
"""The process-wide measured choice used by ``threads=None`` (automatic)."""


def resolve_threads(threads: int | None) -> int | None:
    """Check a ``threads`` setting: None (automatic) or an int >= 1 (at most that many).

    Raises:
        ValueError: anything else.
    """
    if threads is None:
        return None
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise ValueError(f'threads must be None (automatic) or an integer >= 1, got {threads!r}')
    return int(threads)


def _run(km: KernelModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tables: bool,
         threads: int | None, outputs: tuple[np.ndarray, ...]) -> None:
    """``threads``: None measures serial against parallel (:class:`ThreadChoice`); an int
    caps the threads (1: serial)."""
    N = q.shape[0]
    cap = _max_threads if threads is None else min(threads, _max_threads)
    if N < parallel_threshold or cap <= 1:
        _batch_call(q, qd, qdd, km.ints, km.reals, tables, 0, N, *outputs)
        return
    if threads is not None:
        _rows(km, q, qd, qdd, tables, outputs, 0, N, cap)
        return
    size_class = (int(math.log2(N * km.work)), tables)
    if thread_choice.serial_only(size_class, N * km.work):
        _batch_call(q, qd, qdd, km.ints, km.reals, tables, 0, N, *outputs)
        return
    start = 0
    if N >= _PROBE_SLICES * parallel_threshold and thread_choice.unmeasured(size_class):
        # The first large batch of its class: serial on one slice, parallel on the next
        # when a slice is long enough to risk it, then the rest with the faster (a
        # recording is often decomposed in one call).
        size = N // _PROBE_SLICES
        for parallel in (False, True):
            elapsed = _rows(km, q, qd, qdd, tables, outputs, start, start + size,
                            cap if parallel else 1)
            thread_choice.record(size_class, parallel, elapsed / size / km.work)
            start += size
            if elapsed < ThreadChoice.MIN_PARALLEL_S:
                break
    parallel = thread_choice.pick(size_class, (N - start) * km.work)
    elapsed = _rows(km, q, qd, qdd, tables, outputs, start, N, cap if parallel else 1)
    thread_choice.record(size_class, parallel, elapsed / (N - start) / km.work)


_PROBE_SLICES = 16
"""A batch of at least this many times ``parallel_threshold`` samples measures both options
on a 1/16 slice each when its class has no figures yet."""


def _rows(km: KernelModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, tables: bool,
          outputs: tuple[np.ndarray, ...], start: int, stop: int, threads: int) -> float:
    """Rows ``start:stop`` on ``threads`` threads (1: serial); returns the seconds taken."""
    if threads <= 1:
        t0 = time.perf_counter()
        _batch_call(q, qd, qdd, km.ints, km.reals, tables, start, stop, *outputs)
        return time.perf_counter() - t0
    part = slice(start, stop)
    with _pool_lock:
        previous = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            t0 = time.perf_counter()
            # a few blocks per thread so an uneven thread still finishes together
            _batch_parallel_call(q[part], qd[part], qdd[part], km.ints, km.reals, tables,
                                 min(stop - start, 4 * threads), *(o[part] for o in outputs))
            return time.perf_counter() - t0
        finally:
            numba.set_num_threads(previous)


def decompose_into(km: KernelModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray, *,
                   threads: int | None = 1,
                   out: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Closed-form split of a flat batch, into fresh arrays or into ``out``.

    Args:
        km: model constants.
        q, qd, qdd: (N, n) C-contiguous float64.
        threads: for batches of at least :data:`parallel_threshold`: None measures
            serial against parallel and takes the faster (:class:`ThreadChoice`); an int
            caps the worker threads (1: always serial).
        out: arrays to write into, keyed as the return value, with exactly
            :meth:`KernelModel.output_shapes` (N), float64 and C-contiguous; every entry is
            overwritten. Other keys are ignored.

    Returns:
        torque (N, n), partial (N, n, B), acceleration and velocity (N, n, B, n),
        gravity (N, n, B), friction (N, n); units as in
        :class:`plag_ros.core.dynamics.engine.Decomposition`. ``out`` itself when given.

    Raises:
        ValueError: an ``out`` array of the wrong shape, dtype or layout.
    """
    shapes = km.output_shapes(q.shape[0])
    if out is None:
        out = {name: np.empty(shape) for name, shape in shapes.items()}
    else:
        check_out_arrays(out, shapes)
    decompose_unchecked(km, q, qd, qdd, out, threads=threads)
    return out


def check_out_arrays(out: object, shapes: dict[str, tuple[int, ...]]) -> None:
    """ValueError unless ``out`` is a dict holding, for every key of ``shapes``, a
    writeable C-contiguous float64 array of exactly that shape: what the compiled loop may
    write into (and reshape to views, never copies) without going out of bounds."""
    for name, shape in shapes.items():
        a = out.get(name) if isinstance(out, dict) else None
        if (not isinstance(a, np.ndarray) or a.shape != shape or a.dtype != np.float64
                or not a.flags.c_contiguous or not a.flags.writeable):
            got = 'missing' if a is None else f'{getattr(a, "shape", None)} ' \
                f'{getattr(a, "dtype", type(a).__name__)}'
            raise ValueError(f'out[{name!r}] must be a writeable C-contiguous float64 '
                             f'array of shape {shape}, got {got}')


def decompose_unchecked(km: KernelModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                        out: dict[str, np.ndarray], *, threads: int | None = 1) -> None:
    """:func:`decompose_into` without checking ``out``: for callers that checked it once
    (:func:`check_out_arrays`) and reuse it (a wrong array here is written out of bounds)."""
    _run(km, q, qd, qdd, True, threads, (out['torque'], out['partial'], out['acceleration'],
                                         out['velocity'], out['gravity'], out['friction'],
                                         _no_mass(q.shape[0])))


def decompose_sample(km: KernelModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                     out: dict[str, np.ndarray]) -> bool:
    """One sample, unchecked: the live path's call, with the fewest Python steps.

    Args:
        q, qd, qdd: (n,) float64 (any stride).
        out: torque and friction (n,), partial and gravity (n, B), acceleration and
            velocity (n, B, n), float64, written in place; the caller checked them.

    Returns:
        False, with nothing written, when an input is NaN or infinite.
    """
    return bool(_one_call(q, qd, qdd, km.ints, km.reals, out['torque'], out['partial'],
                          out['acceleration'], out['velocity'], out['gravity'],
                          out['friction']))


def _no_mass(N: int) -> np.ndarray:
    """An (N, 0, 0) stand-in for the mass-matrix output the tables path never writes."""
    return np.empty((N, 0, 0))


def mass_matrix_and_bias_into(km: KernelModel, q: np.ndarray, qd: np.ndarray, *,
                              threads: int | None = 1) -> tuple[np.ndarray, np.ndarray]:
    """Mass matrix (N, n, n) and bias torque C(q, qd) qd + g(q) (N, n) of a flat batch."""
    N, n = q.shape
    torque, M = np.empty((N, n)), np.empty((N, n, n))
    unused = np.empty((N, 0, 0))
    _run(km, q, qd, np.zeros_like(q), False, threads,
         (torque, unused, np.empty((N, 0, 0, 0)), np.empty((N, 0, 0, 0)), unused,
          np.empty((N, 0)), M))
    return M, torque


@numba.njit(cache=True, nogil=True)
def _link_poses(q, parent, axis, revolute, T_parent_joint, link_joint, T_joint_link, out):
    n = q.shape[1]
    R = np.empty((n, 3, 3))
    p = np.empty((n, 3))
    S = np.empty((n, 6))
    v = np.empty((n, 6))
    zero = np.zeros(n)
    for t in range(q.shape[0]):
        _kinematics(q[t], zero, parent, axis, revolute, T_parent_joint, R, p, S, v)
        for k in range(link_joint.shape[0]):
            j = link_joint[k]
            L = T_joint_link[k]
            for r in range(3):
                for c in range(4):
                    if j < 0:             # fixed to the root: the URDF pose as it is
                        out[t, k, r, c] = L[r, c]
                    else:
                        x = R[j, r, 0] * L[0, c] + R[j, r, 1] * L[1, c] + R[j, r, 2] * L[2, c]
                        out[t, k, r, c] = x + (p[j, r] if c == 3 else 0.0)
            out[t, k, 3, 0] = out[t, k, 3, 1] = out[t, k, 3, 2] = 0.0
            out[t, k, 3, 3] = 1.0


_link_poses_call: Any = _link_poses


def link_poses(km: KernelModel, q: np.ndarray, link_joint: np.ndarray,
               T_joint_link: np.ndarray) -> np.ndarray:
    """World pose of every URDF link, (N, n) -> (N, L, 4, 4).

    Args:
        link_joint: (L,) moving joint each link rides on (-1: the root).
        T_joint_link: (L, 4, 4) link frame in that joint's child frame.
    """
    out = np.empty((q.shape[0], link_joint.shape[0], 4, 4))
    _link_poses_call(q, km.parent, km.axis, km.revolute, km.T_parent_joint,
                np.ascontiguousarray(link_joint, dtype=np.int64),
                np.ascontiguousarray(T_joint_link, dtype=np.float64), out)
    return out
