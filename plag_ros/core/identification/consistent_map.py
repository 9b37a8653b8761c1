"""The maximum a posteriori inertial parameters with every body physically consistent.

The identification's prior and data make a quadratic; physical consistency makes each
body's pseudo-inertia positive semi-definite, a linear matrix inequality in the parameters
(Wensing, Kim and Slotine, "Linear Matrix Inequalities for Physically Consistent Inertial
Parameter Identification", IEEE RA-L 3(1), 2018, doi:10.1109/LRA.2017.2729659). The
problem is convex: one minimum, whatever the start. scipy has no solver for matrix
inequalities, so :func:`consistent_map` is the alternating direction method of
multipliers, which needs only a linear solve and an eigen-decomposition of 4x4 matrices
per step.
"""
from __future__ import annotations

import numpy as np
from scipy import linalg

from plag_ros.core.dynamics.consistency import pseudo_inertia

__all__ = ['RELAXATION', 'consistent_map']

RELAXATION = 1.6
"""ADMM's over-relaxation factor (1.5-1.8 is the usual range)."""


_ROWS, _COLS = np.triu_indices(4)
_WEIGHTS = np.where(_ROWS == _COLS, 1.0, np.sqrt(2.0))


def _vec(J: np.ndarray) -> np.ndarray:
    """(..., 4, 4) symmetric -> (..., 10) with ``|vec(J)| == |J|_F`` (off-diagonals times
    sqrt 2), the coordinates the projection onto the PSD cone is Euclidean in."""
    return J[..., _ROWS, _COLS] * _WEIGHTS


def _unvec(v: np.ndarray) -> np.ndarray:
    J = np.zeros(v.shape[:-1] + (4, 4))
    J[..., _ROWS, _COLS] = v / _WEIGHTS
    J[..., _COLS, _ROWS] = v / _WEIGHTS
    return J


def consistent_map(R: np.ndarray, c: np.ndarray, x0: np.ndarray, scale: np.ndarray,
                    lower: np.ndarray, B: int, sigma: float, *, tol: float = 1e-9,
                    max_iter: int = 50000) -> np.ndarray:
    """The maximum a posteriori parameters with every body physically consistent.

    Minimises ``|R x - c|^2 / sigma^2 + |(x - x0) / scale|^2`` subject to each body's
    pseudo-inertia being positive semi-definite (Wensing, Kim and Slotine, "Linear Matrix
    Inequalities for Physically Consistent Inertial Parameter Identification", IEEE RA-L
    3(1), 2018, doi:10.1109/LRA.2017.2729659) with a margin of 1e-6 of the prior's, and
    the per-joint terms above ``lower``. The problem is convex, so its minimum is unique
    and found from any start; it is solved by the alternating direction method of
    multipliers (Boyd et al., "Distributed Optimization and Statistical Learning via the
    Alternating Direction Method of Multipliers", Found. Trends Mach. Learn. 3(1), 2011,
    doi:10.1561/2200000016, sections 3 and 5: a quadratic step, then a projection of each
    body's pseudo-inertia onto the PSD cone by clipping its eigenvalues, with the penalty
    balanced between the two residuals). Everything is in the prior's units ``y = (x -
    x0) / scale`` and each pseudo-inertia in the units of the prior's, ``D J D`` with ``D``
    the inverse square roots of the prior's diagonal (a congruence: PSD is kept).

    Args:
        R (p, p), c (p,): the data's compressed rows; x0, scale (p,): the prior;
        lower (p - 10 B,): bounds of the per-joint terms; B: bodies; sigma: noise [N*m].
    """
    p = len(x0)
    A = R * scale / sigma
    g = A.T @ ((c - R @ x0) / sigma)
    H = A.T @ A + np.eye(p)
    # constraint map: y -> the bodies' scaled pseudo-inertias and the per-joint terms
    J0 = pseudo_inertia(x0[:10 * B].reshape(B, 10))
    D = 1.0 / np.sqrt(np.maximum(np.abs(np.diagonal(J0, axis1=-2, axis2=-1)), 1e-12))
    M = np.zeros((p, p))
    w0 = np.zeros(len(M))
    unit = np.eye(10)
    for b in range(B):
        DJD = D[b][:, None] * pseudo_inertia(unit) * D[b][None, :]       # (10, 4, 4)
        M[10 * b:10 * b + 10, 10 * b:10 * b + 10] = _vec(DJD).T * scale[10 * b:10 * b + 10]
        w0[10 * b:10 * b + 10] = _vec(D[b][:, None] * J0[b] * D[b][None, :])
    M[10 * B:, 10 * B:] = np.eye(p - 10 * B)
    floor_joint = (lower - x0[10 * B:]) / scale[10 * B:]
    margin = 1e-6

    def project(w: np.ndarray) -> np.ndarray:
        out = w.copy()
        values, vectors = np.linalg.eigh(_unvec(w[:10 * B].reshape(B, 10)))
        clipped = (vectors * np.maximum(values, margin)[:, None, :]) @ np.swapaxes(
            vectors, -1, -2)
        out[:10 * B] = _vec(clipped).ravel()
        out[10 * B:] = np.maximum(w[10 * B:], floor_joint)
        return out

    rho = 1.0
    y = np.linalg.solve(H, g)
    z = project(M @ y + w0)
    u = np.zeros(len(M))
    factor = linalg.cho_factor(H + rho * M.T @ M)
    for iteration in range(max_iter):
        y = linalg.cho_solve(factor, g + rho * M.T @ (z - w0 - u))
        # over-relaxed (Boyd et al., section 3.4.3): the same fixed point, fewer steps
        Mw = RELAXATION * (M @ y + w0) + (1.0 - RELAXATION) * z
        z_old = z
        z = project(Mw + u)
        u += Mw - z
        primal = float(np.linalg.norm(M @ y + w0 - z))
        dual = rho * float(np.linalg.norm(M.T @ (z - z_old)))
        if primal < tol * max(1.0, float(np.linalg.norm(z))) \
                and dual < tol * max(1.0, float(np.linalg.norm(g))):
            break
        if iteration % 50 == 49 and (primal > 10 * dual or dual > 10 * primal):
            change = 2.0 if primal > dual else 0.5
            rho *= change
            u /= change
            factor = linalg.cho_factor(H + rho * M.T @ M)
    # the last projection is feasible; map it back (the per-body map is invertible)
    y_inertial = np.linalg.lstsq(M[:10 * B, :10 * B], z[:10 * B] - w0[:10 * B],
                                 rcond=None)[0]
    return x0 + scale * np.concatenate([y_inertial, z[10 * B:]])
