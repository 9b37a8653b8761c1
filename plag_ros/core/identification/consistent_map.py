"""The maximum a posteriori inertial parameters with every body physically consistent.

The identification's prior and data make a quadratic; physical consistency makes each
body's pseudo-inertia positive semi-definite, a linear matrix inequality in the parameters
(Wensing, Kim and Slotine, "Linear Matrix Inequalities for Physically Consistent Inertial
Parameter Identification", IEEE RA-L 3(1), 2018, doi:10.1109/LRA.2017.2729659). The
problem is convex, a semidefinite program: one minimum, whatever the start. It is solved
by Clarabel (Goulart and Chen, "Clarabel: An interior-point solver for conic programs with
quadratic objectives", arXiv:2405.12762, 2024), a maintained interior-point solver with
positive semi-definite cones. Two home-made solvers were tried first and dropped: ADMM
took 10^4-10^5 steps when the data pin some parameters 10^8 times harder than others (real
recordings do), and a log-barrier Newton method lost its descent direction to the same
conditioning.
"""
from __future__ import annotations

import numpy as np
from scipy import optimize, sparse

from plag_ros.core.dynamics.consistency import pseudo_inertia

__all__ = ['MARGIN', 'FitNotSolved', 'consistent_map']

MARGIN = 1e-6
"""Each scaled pseudo-inertia keeps its smallest eigenvalue at least this large (in units of
the prior's diagonal): a body does not become exactly flat, so its pseudo-inertia stays
positive definite."""

# Clarabel's PSD triangle: the upper triangle column by column, off-diagonals times sqrt 2
_ROWS, _COLS = np.array([(i, j) for j in range(4) for i in range(j + 1)]).T
_WEIGHTS = np.where(_ROWS == _COLS, 1.0, np.sqrt(2.0))


class FitNotSolved(RuntimeError):
    """The consistent fit's solver stopped without a solution (its status in the message):
    an input error to report, not a crash."""


def _svec(J: np.ndarray) -> np.ndarray:
    """(..., 4, 4) symmetric -> (..., 10) in Clarabel's PSD-triangle order."""
    return J[..., _ROWS, _COLS] * _WEIGHTS


def consistent_map(R: np.ndarray, c: np.ndarray, x0: np.ndarray, scale: np.ndarray,
                   lower: np.ndarray, B: int, sigma: float) -> np.ndarray:
    """The minimiser of ``|R x - c|^2 / sigma^2 + |(x - x0) / scale|^2`` subject to each
    body's pseudo-inertia being positive semi-definite (with :data:`MARGIN`) and the
    per-joint terms at or above ``lower``.

    Posed in the prior's units ``y = (x - x0) / scale``, with the data residual as
    variables of their own (``w = A y - b``, so the objective is ``(|w|^2 + |y|^2) / 2``
    and ``A^T A``, which squares the data's condition, is never formed), and each
    pseudo-inertia scaled as ``D J D``, ``D`` the inverse square roots of the prior's
    diagonal (a congruence: positive semi-definiteness is kept).

    Args:
        R (r, p), c (r,): the data's compressed rows; x0, scale (p,): the prior;
        lower (p - 10 B,): bounds of the per-joint terms (-inf: none); B: bodies;
        sigma: noise [N*m].

    Returns:
        (p,) the parameters.

    Raises:
        FitNotSolved: the solver did not reach a solution (with its status).
    """
    import clarabel

    p, r = len(x0), len(R)
    A = R * scale / sigma
    b = (c - R @ x0) / sigma
    J0 = pseudo_inertia(x0[:10 * B].reshape(B, 10))
    D = 1.0 / np.sqrt(np.maximum(np.abs(np.diagonal(J0, axis1=-2, axis2=-1)), 1e-12))
    K0 = D[:, :, None] * J0 * D[:, None, :] - MARGIN * np.eye(4)
    unit = pseudo_inertia(np.eye(10))                                   # (10, 4, 4)
    F = (D[:, None, :, None] * unit[None] * D[:, None, None, :]
         * scale[:10 * B].reshape(B, 10)[:, :, None, None])            # (B, 10, 4, 4)
    floor = (lower - x0[10 * B:]) / scale[10 * B:]
    bounded = np.flatnonzero(np.isfinite(floor))
    # variables v = [y (p), w (r)]; constraints A_c v + s = b_c with s in the cones
    blocks, rhs, cones = [], [], []
    blocks.append(np.hstack([A, -np.eye(r)]))                          # A y - w = b
    rhs.append(b)
    cones.append(clarabel.ZeroConeT(r))
    if len(bounded):                                                   # y_j - floor_j >= 0
        rows = np.zeros((len(bounded), p + r))
        rows[np.arange(len(bounded)), 10 * B + bounded] = -1.0
        blocks.append(rows)
        rhs.append(-floor[bounded])
        cones.append(clarabel.NonnegativeConeT(len(bounded)))
    for body in range(B):                                              # svec(K_b(y)) in PSD
        rows = np.zeros((10, p + r))
        rows[:, 10 * body:10 * body + 10] = -_svec(F[body]).T
        blocks.append(rows)
        rhs.append(_svec(K0[body]))
        cones.append(clarabel.PSDTriangleConeT(4))
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    settings.tol_gap_abs = settings.tol_gap_rel = 1e-10
    settings.tol_feas = 1e-10
    solver = clarabel.DefaultSolver(sparse.identity(p + r, format='csc'), np.zeros(p + r),
                                    sparse.csc_matrix(np.vstack(blocks)),
                                    np.concatenate(rhs), cones, settings)
    solution = solver.solve()
    if str(solution.status) not in ('Solved', 'AlmostSolved'):
        raise FitNotSolved(f'the consistent fit did not converge: Clarabel says '
                           f'{solution.status}')
    y = np.asarray(solution.x)[:p]
    # An interior-point answer sits a little inside every bound, by up to about 1e-4 prior
    # deviations for a term the data do not touch (an unmoved joint's friction): the
    # per-joint terms are solved once more, exactly, given the bodies (a bounded linear
    # least-squares problem, scipy's BVLS active set).
    if p == 10 * B:
        return x0 + scale * y
    joint = slice(10 * B, p)
    polished = optimize.lsq_linear(
        np.vstack([A[:, joint], np.eye(p - 10 * B)]),
        np.concatenate([b - A[:, :10 * B] @ y[:10 * B], np.zeros(p - 10 * B)]),
        bounds=(np.where(np.isfinite(floor), floor, -np.inf), np.inf), method='bvls',
        tol=1e-14)
    y[joint] = polished.x
    return x0 + scale * y
