"""One physics step of :class:`~plag_ros.core.simulation.simulator.Simulator`, compiled.

The step of the simulator's module docstring (semi-implicit Euler on the actuated
coordinates ``z`` with ``q = G z + o``; the new velocity ``w`` solves the monotone inclusion
``A w + R(w) ∋ c`` with ``A = G^T M G + armature`` and ``c = A v + dt (tau_const - G^T b)``)
as one numba function, given the mass matrix ``M`` and bias ``b`` of the engine's compiled
loop (:func:`plag_ros.core.dynamics.kernel.mass_matrix_and_bias_into`): the servo law, the
warm-started active-set solve with its globalised semi-smooth Newton and Gauss-Seidel
fallbacks, and the update. Written as numpy code it spent ~90 % of a step in Python and
array overheads on 8-vectors (about 230 us a step at 1 kHz, 5 % of it the dynamics); here
the step is two compiled calls. (Two, not one: numba's on-disk cache of a function does not
notice a change in a function of another file that it calls, so this file calls no compiled
function of the kernel's.)

Per-coordinate law (one entry per actuated coordinate), as in the simulator:
``R(w) = dt (d w + f sgn(w) - sat(g - h w, T)) + N_[lo, hi](w)``, ``d`` damping, ``f``
Coulomb friction, ``g - h w`` the implicit servo torque (servo coordinates only), ``T`` its
saturation, ``[lo, hi]`` the velocities that keep the joint inside its stops.

Each operation is the numpy code's, in its order, so a step agrees with it to rounding: the
sums of the small matrix products and the 8x8 solve are ordered differently from BLAS and
LAPACK. Over 2 s of the CRANE-X7 at 1 kHz (position, effort and mixed commands, stops,
stick-slip) positions differ by 4e-16 to 2e-12 rad, what a 1e-16 rad change of the start
pose makes of the numpy code itself; a frictionless free swing is chaotic and amplifies
either to ~1e-3 rad in 2 s. Only numpy and numba features of the Humble floor (numpy 1.21,
numba 0.55) are used: there the same inputs give bit-identical steps.
"""
from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

__all__ = ['COMMAND_ROWS', 'COORD_ROWS', 'EFFORT', 'FRICTION', 'JOINT_LIMITS', 'MIXED',
           'POSITION', 'SATURATION', 'step']

COORD_ROWS = ('lower', 'upper', 'damping', 'coulomb', 'effort_limit', 'kp', 'kd', 'armature')
"""Rows of the (8, m) per-coordinate constants :func:`step` takes."""
COMMAND_ROWS = ('effort', 'position', 'servo', 'kp', 'torque_limit')
"""Rows of the (5, m) command :func:`step` takes (the last three: mixed mode's per-joint
servo mask as 1.0 / 0.0, stiffness and torque limit)."""
EFFORT, POSITION, MIXED = 0, 1, 2
"""Command modes."""
FRICTION, JOINT_LIMITS, SATURATION = 1, 2, 4
"""Option bits: damping and Coulomb friction, joint stops, effort saturation."""

_LO, _HI, _DAMP, _COUL, _LIMIT, _KP, _KD, _ARM = range(8)
_C_EFFORT, _C_POSITION, _C_SERVO, _C_KP, _C_LIMIT = range(5)


# --------------------------------------------------------------------------- scalars
@numba.njit(cache=True, nogil=True, error_model='numpy', inline='always')
def _clip(x, lo, hi):
    """np.minimum(np.maximum(x, lo), hi) of scalars (NaN propagates like numpy's)."""
    y = x if (x >= lo or x != x) else lo
    return y if (y <= hi or y != y) else hi


@numba.njit(cache=True, nogil=True, error_model='numpy', inline='always')
def _sign(x):
    """np.sign of a scalar."""
    if x > 0.0:
        return 1.0
    if x < 0.0:
        return -1.0
    return x            # 0.0, -0.0 or NaN, as np.sign


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _law_value(d, f, g, h, T, lo, hi, servo, w, side, dt):
    """R(w) of one coordinate with one-sided limits (side -1: left, +1: right, 0: interior)."""
    sgn = 1.0 if w > 0.0 else (-1.0 if w < 0.0 else side)
    torque = _clip(g - h * w, -T, T) if servo else 0.0
    value = dt * (d * w + f * sgn - torque)
    if side < 0 and w <= lo:
        value = -np.inf
    elif side > 0 and w >= hi:
        value = np.inf
    return value


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _solve_1d(d, f, g, h, T, lo, hi, servo, a, r, dt, bp):
    """Solve ``a w + R(w) ∋ r`` for one coordinate.

    Returns:
        (w, pinned, alpha, beta): pinned when w sits on a breakpoint of R, else the linear
        piece ``R = alpha w + beta`` holding w. ``bp`` is a (5,) scratch.
    """
    nan = np.nan
    kinks = servo and math.isfinite(T)
    k1 = (g - T) / h if kinks else nan     # IEEE division (error_model='numpy'), as numpy
    k2 = (g + T) / h if kinks else nan
    bp[0] = lo if math.isfinite(lo) else nan
    bp[1] = hi if math.isfinite(hi) else nan
    bp[2] = 0.0
    bp[3] = k1
    bp[4] = k2
    for j in range(5):
        if not (bp[j] >= lo and bp[j] <= hi):
            bp[j] = nan
    for j in range(1, 5):               # insertion sort, NaN last (np.sort)
        x = bp[j]
        i = j - 1
        while i >= 0 and (bp[i] > x or (bp[i] != bp[i] and x == x)):
            bp[i + 1] = bp[i]
            i -= 1
        bp[i + 1] = x
    count = 0
    below = 0
    first_on = -1
    for j in range(5):
        x = bp[j]
        if math.isfinite(x):
            count += 1
        F_left = a * x + _law_value(d, f, g, h, T, lo, hi, servo, x, -1.0, dt)
        F_right = a * x + _law_value(d, f, g, h, T, lo, hi, servo, x, 1.0, dt)
        if F_left <= r and r <= F_right and first_on < 0:
            first_on = j
        if F_right < r:
            below += 1
    pinned = first_on >= 0
    w_pin = bp[first_on] if pinned else bp[0]
    left = bp[max(below - 1, 0)] if below > 0 else -np.inf
    right = bp[min(below, 4)] if below < count else np.inf
    if math.isfinite(left) and math.isfinite(right):
        sample = 0.5 * (left + right)
    elif math.isfinite(left):
        sample = left + 1.0
    elif math.isfinite(right):
        sample = right - 1.0
    else:
        sample = 0.0
    if pinned:
        sample = 0.0
    unsat = servo and abs(g - h * sample) < T
    alpha = dt * (d + (h if unsat else 0.0))
    beta = _law_value(d, f, g, h, T, lo, hi, servo, sample, 0.0, dt) - alpha * sample
    w = w_pin if pinned else (r - beta) / (a + alpha)
    return w, pinned, alpha, beta


# --------------------------------------------------------------------------- vectors
@numba.njit(cache=True, nogil=True, error_model='numpy')
def _lu_solve(K, b, x):
    """x = K^-1 b by Gaussian elimination with partial pivoting (K and b are overwritten)."""
    m = K.shape[0]
    for col in range(m):
        pivot = col
        best = abs(K[col, col])
        for r in range(col + 1, m):
            if abs(K[r, col]) > best:
                best = abs(K[r, col])
                pivot = r
        if pivot != col:
            for c in range(m):
                K[col, c], K[pivot, c] = K[pivot, c], K[col, c]
            b[col], b[pivot] = b[pivot], b[col]
        for r in range(col + 1, m):
            factor = K[r, col] / K[col, col]
            if factor != 0.0:
                for c in range(col + 1, m):
                    K[r, c] -= factor * K[col, c]
                b[r] -= factor * b[col]
    for r in range(m - 1, -1, -1):
        s = b[r]
        for c in range(r + 1, m):
            s -= K[r, c] * x[c]
        x[r] = s / K[r, r]


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _linear(A, c, pinned, alpha, beta, w_pin, w):
    """Solve the linear system of one guess of pieces into ``w`` (pinned coordinates held
    at ``w_pin``)."""
    m = A.shape[0]
    free = np.empty(m, dtype=np.int64)
    k = 0
    for i in range(m):
        if pinned[i]:
            w[i] = w_pin[i]
        else:
            w[i] = 0.0
            free[k] = i
            k += 1
    if k == 0:
        return
    K = np.empty((k, k))
    rhs = np.empty(k)
    for a in range(k):
        i = free[a]
        for b in range(k):
            K[a, b] = A[i, free[b]]
        K[a, a] += alpha[i]
        s = 0.0
        for j in range(m):
            if pinned[j]:
                s += A[i, j] * w[j]
        rhs[a] = c[i] - beta[i] - s if k < m else c[i] - beta[i]
    x = np.empty(k)
    _lu_solve(K, rhs, x)
    for a in range(k):
        w[free[a]] = x[a]


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _solved(A, c, d, f, g, h, T, lo, hi, servo, w, dt, tol_f):
    """Whether ``c - A w`` lies in R(w) (within tol_f) and w inside [lo, hi]."""
    m = A.shape[0]
    for i in range(m):
        s = 0.0
        for j in range(m):
            s += A[i, j] * w[j]
        lam = c[i] - s
        wi = w[i]
        base = d[i] * wi
        if servo[i]:
            base = base - _clip(g[i] - h[i] * wi, -T[i], T[i])
        sgn = _sign(wi)
        left = dt * (base + f[i] * (-1.0 if wi == 0.0 else sgn))
        right = dt * (base + f[i] * (1.0 if wi == 0.0 else sgn))
        if wi <= lo[i]:
            left = -np.inf
        if wi >= hi[i]:
            right = np.inf
        if not (lo[i] <= wi and wi <= hi[i] and left - tol_f <= lam and lam <= right + tol_f):
            return False
    return True


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _objective(A, c, d, f, g, h, T, servo, w, dt):
    """Convex function whose minimiser on [lo, hi] solves ``A w + R(w) ∋ c``:
    ``1/2 w.A w - c.w + dt sum(d w^2 / 2 + f |w| + Psi(g - h w) / h)``, ``Psi`` the
    primitive of the saturation."""
    m = A.shape[0]
    quad = 0.0
    for j in range(m):
        s = 0.0
        for i in range(m):
            s += 0.5 * w[i] * A[i, j]
        quad += s * w[j]
    lin = 0.0
    for i in range(m):
        lin += c[i] * w[i]
    total = 0.0
    for i in range(m):
        term = 0.0
        if servo[i]:
            u = g[i] - h[i] * w[i]
            if abs(u) <= T[i]:
                psi = 0.5 * u * u
            else:
                psi = T[i] * abs(u) - 0.5 * T[i] ** 2
            term = psi / h[i]
        total += 0.5 * d[i] * w[i] * w[i] + f[i] * abs(w[i]) + term
    return quad - lin + dt * total


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _sweep(A, c, d, f, g, h, T, lo, hi, servo, a, w, dt, pinned, alpha, beta, bp):
    """One Gauss-Seidel sweep (exact coordinate minimisation) over w in place; returns the
    largest change."""
    m = A.shape[0]
    change = 0.0
    for i in range(m):
        s = 0.0
        for j in range(m):
            s += A[i, j] * w[j]
        r_i = c[i] - s + a[i] * w[i]
        wi, p_i, al_i, be_i = _solve_1d(d[i], f[i], g[i], h[i], T[i], lo[i], hi[i],
                                        servo[i], a[i], r_i, dt, bp)
        delta = abs(wi - w[i])
        if delta > change or delta != delta:     # NaN propagates, as np.max
            change = delta
        w[i], pinned[i], alpha[i], beta[i] = wi, p_i, al_i, be_i
    return change


@numba.njit(cache=True, nogil=True, error_model='numpy')
def _solve(A, c, d, f, g, h, T, lo, hi, servo, dt, previous, w):
    """Solve ``A w + R(w) ∋ c`` into ``w``: the pieces of ``previous`` (warm start), then a
    globalised semi-smooth Newton, then Gauss-Seidel. Returns (Newton iterations, whether
    Gauss-Seidel ran)."""
    m = A.shape[0]
    a = np.empty(m)
    scale_v = 0.0
    scale_f = 0.0
    for i in range(m):
        a[i] = A[i, i]
        scale_v = max(scale_v, abs(c[i] / a[i]))
        scale_f = max(scale_f, abs(c[i]))
    tol_v = 1e-12 * (1.0 + scale_v)
    tol_f = 1e-12 * (1.0 + scale_f)
    pinned = np.empty(m, dtype=np.bool_)
    alpha, beta, w_pin = np.empty(m), np.empty(m), np.empty(m)
    # 1. Pieces of the previous step's solution (they rarely change from step to step).
    for i in range(m):
        wp = previous[i]
        pinned[i] = wp == lo[i] or wp == hi[i] or wp == 0.0
        drive = g[i] - h[i] * wp
        unsat = servo[i] and abs(drive) < T[i]
        sat = T[i] if drive > 0.0 else -T[i]
        alpha[i] = dt * (d[i] + (h[i] if unsat else 0.0))
        beta[i] = dt * (f[i] * _sign(wp) - ((g[i] if unsat else sat) if servo[i] else 0.0))
        w_pin[i] = _clip(wp, lo[i], hi[i])
    _linear(A, c, pinned, alpha, beta, w_pin, w)
    if _solved(A, c, d, f, g, h, T, lo, hi, servo, w, dt, tol_f):
        return 0, False
    # 2. Globalised semi-smooth Newton: a Gauss-Seidel sweep identifies the pieces, a Newton
    #    step on them with a backtracking line search on the convex objective follows. Both
    #    steps descend, so guesses cannot cycle.
    bp = np.empty(5)
    w_newton, trial = np.empty(m), np.empty(m)
    for i in range(m):
        w[i] = _clip(w[i], lo[i], hi[i])
    iterations = 0
    for _ in range(30):
        iterations += 1
        if _sweep(A, c, d, f, g, h, T, lo, hi, servo, a, w, dt, pinned, alpha, beta,
                  bp) <= tol_v:
            return iterations, False
        _linear(A, c, pinned, alpha, beta, w, w_newton)
        if _solved(A, c, d, f, g, h, T, lo, hi, servo, w_newton, dt, tol_f):
            w[:] = w_newton
            return iterations, False
        j0, t = _objective(A, c, d, f, g, h, T, servo, w, dt), 1.0
        while t > 1e-3:
            for i in range(m):
                trial[i] = w[i] + t * (_clip(w_newton[i], lo[i], hi[i]) - w[i])
            if _objective(A, c, d, f, g, h, T, servo, trial, dt) < j0:
                w[:] = trial
                break
            t *= 0.5
    # 3. Gauss-Seidel: exact coordinate minimisation of a strictly convex function.
    for _ in range(1000):
        if _sweep(A, c, d, f, g, h, T, lo, hi, servo, a, w, dt, pinned, alpha, beta,
                  bp) <= tol_v:
            break
    return iterations, True


# --------------------------------------------------------------------------- the step
@numba.njit(cache=True, nogil=True, error_model='numpy')
def _step(M, bias, G, coords, command, mode, options, dt, z, v):
    n, m = G.shape
    out = np.empty((5, m))
    for i in range(m):
        if not (math.isfinite(z[i]) and math.isfinite(v[i])):
            return out, -1, False, False
    # A = G^T M G + armature, G^T bias
    GtM = np.zeros((m, n))
    for a in range(m):
        for j in range(n):
            if G[j, a] != 0.0:
                for s in range(n):
                    GtM[a, s] += G[j, a] * M[j, s]
    A = np.zeros((m, m))
    Gtb = np.zeros(m)
    for a in range(m):
        for s in range(n):
            for b in range(m):
                if G[s, b] != 0.0:
                    A[a, b] += GtM[a, s] * G[s, b]
            if G[s, a] != 0.0:
                Gtb[a] += G[s, a] * bias[s]
        A[a, a] += coords[_ARM, a]
    # the law of each coordinate and the constant torque
    friction_on, limits_on = options & FRICTION, options & JOINT_LIMITS
    d, f, g_s, h_s, T = np.empty(m), np.empty(m), np.empty(m), np.empty(m), np.empty(m)
    lo, hi, tau_const = np.empty(m), np.empty(m), np.empty(m)
    servo = np.empty(m, dtype=np.bool_)
    for i in range(m):
        limit = coords[_LIMIT, i] if options & SATURATION else np.inf
        if mode == EFFORT:
            tau_const[i] = _clip(command[_C_EFFORT, i], -limit, limit)
            g_s[i], h_s[i], servo[i] = 0.0, 0.0, False
        elif mode == MIXED:
            servo[i] = command[_C_SERVO, i] != 0.0
            limit = min(limit, command[_C_LIMIT, i])
            kp = command[_C_KP, i]
            if servo[i]:
                tau_const[i] = 0.0
                g_s[i] = kp * (command[_C_POSITION, i] - z[i])
                h_s[i] = kp * dt + coords[_KD, i]
            else:
                tau_const[i] = _clip(command[_C_EFFORT, i], -limit, limit)
                g_s[i], h_s[i] = 0.0, 0.0
        else:
            # tau = sat(Kp (q_cmd - q - dt w) - Kd w) with w the new velocity (implicit)
            tau_const[i] = 0.0
            g_s[i] = coords[_KP, i] * (command[_C_POSITION, i] - z[i])
            h_s[i] = coords[_KP, i] * dt + coords[_KD, i]
            servo[i] = True
        T[i] = limit
        if limits_on:
            lo[i], hi[i] = (coords[_LO, i] - z[i]) / dt, (coords[_HI, i] - z[i]) / dt
        else:
            lo[i], hi[i] = -np.inf, np.inf
        d[i] = coords[_DAMP, i] if friction_on else 0.0
        f[i] = coords[_COUL, i] if friction_on else 0.0
    c = np.empty(m)
    for i in range(m):
        s = 0.0
        for j in range(m):
            s += A[i, j] * v[j]
        c[i] = s + dt * (tau_const[i] - Gtb[i])
    z_new, w, acc, effort, friction = out[0], out[1], out[2], out[3], out[4]
    iterations, fallback = _solve(A, c, d, f, g_s, h_s, T, lo, hi, servo, dt, v, w)
    still = True
    for i in range(m):
        if mode == EFFORT or not servo[i]:
            effort[i] = tau_const[i]
        else:
            effort[i] = _clip(g_s[i] - h_s[i] * w[i], -T[i], T[i])
        # generalized friction: R(w) = dt (friction - servo torque) + stop reaction
        s = 0.0
        for j in range(m):
            s += A[i, j] * w[j]
        reaction = (c[i] - s) / dt + (effort[i] if servo[i] else 0.0)
        if abs(w[i]) > 1e-12:
            friction[i] = d[i] * w[i] + f[i] * _sign(w[i])
        else:
            friction[i] = _clip(reaction, -f[i], f[i])
        acc[i] = (w[i] - v[i]) / dt
        zi = z[i] + dt * w[i]
        if limits_on:
            zi = _clip(zi, coords[_LO, i], coords[_HI, i])
        z_new[i] = zi
        still = still and v[i] == 0.0 and w[i] == 0.0 and zi == z[i]
    return out, iterations, fallback, still


_step_call: Any = _step     # numba's dispatcher, typed as what it is to the Python caller


def step(M: np.ndarray, bias: np.ndarray, G: np.ndarray, coords: np.ndarray,
         command: np.ndarray, mode: int, options: int, dt: float, z: np.ndarray,
         v: np.ndarray) -> tuple[np.ndarray, int, bool, bool]:
    """One physics step from actuated position ``z`` and velocity ``v`` (m,).

    Args:
        M: (n, n) mass matrix [kg*m^2] and bias: (n,) ``C(q, qd) qd + g(q)`` [N*m] of the
            full joints at ``q = G z + o``, ``qd = G v``.
        G: (n, m) the coordinate map.
        coords: (8, m) per-coordinate constants, rows :data:`COORD_ROWS` (stops [rad],
            damping [N*m*s/rad], Coulomb [N*m], saturation [N*m], servo stiffness
            [N*m/rad] and damping, armature [kg*m^2]).
        command: (5, m) the command in force, rows :data:`COMMAND_ROWS`.
        mode: :data:`EFFORT`, :data:`POSITION` or :data:`MIXED`.
        options: :data:`FRICTION` | :data:`JOINT_LIMITS` | :data:`SATURATION`.
        dt: the step [s].
        z, v: (m,) [rad, rad/s] (any float64 arrays; not written).

    Returns:
        (out, iterations, fallback, still): out (5, m), a new array whose rows are the new
        position, velocity, mean acceleration, motor torque and generalized friction;
        the Newton iterations the solve needed (0 when the warm start held; -1, with
        nothing computed, when ``z`` or ``v`` is not finite), whether it fell back on
        Gauss-Seidel, and whether the step left the arm exactly where it was with zero
        velocity before and after.
    """
    return _step_call(M, bias, G, coords, command, mode, options, dt, z, v)
