"""Physical consistency of a body's inertia, and the nearest consistent body to one that is not.

A rigid body's rotational inertia about its centre of mass, in any axes, obeys the
triangle inequalities ``I_xx <= I_yy + I_zz`` (and the two rotations of it): ``I_xx =
integral of (y^2 + z^2) dm`` and ``I_yy + I_zz = integral of (2 x^2 + y^2 + z^2) dm``.
With a positive mass and positive principal moments these are exactly the bodies whose
pseudo-inertia ``[[Sigma, m c], [m c^T, m]]`` is positive semi-definite (Wensing, Kim and
Slotine, "Linear Matrix Inequalities for Physically Consistent Inertial Parameter
Identification", IEEE RA-L 3(1), 2018, doi:10.1109/LRA.2017.2729659). CAD exports often
break them; the dynamics still run (the torque is linear in the figures), but an
identification that keeps every body consistent cannot start from such a body.

:func:`inertia_findings` names each body that breaks an inequality, with the figures;
:func:`nearest_consistent` replaces its inertia by the nearest consistent one: the same
mass, COM and principal axes, and principal moments projected onto the triangle
inequalities in the Euclidean norm (the Frobenius norm of the inertia matrix; the set of
consistent inertias depends on the eigenvalues alone, so the nearest matrix keeps the
eigenvectors), then moved inside by :data:`MARGIN` so that the body is not a flat plate.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from plag_ros.core.dynamics.model import RobotModel, broken_triangle
from plag_ros.core.dynamics.regressor import inertia_about_origin

__all__ = ['MARGIN', 'InertiaFinding', 'inertia_findings',
           'nearest_consistent', 'physically_consistent', 'pseudo_inertia']

MARGIN = 0.01
"""How far inside the broken inequality a repaired body is put: ``I_k = I_i + I_j - MARGIN
* trace / 2``, the trace of the URDF's figures (the body's thinnest second moment of mass
is then about 1 % of the total, not zero: no flat plate)."""

@dataclass(frozen=True)
class InertiaFinding:
    """A body whose inertia no real mass distribution has.

    Attributes:
        body: the body's name (its URDF link); index: its row in the model.
        inequality: the broken one as text, with the figures [kg*m^2].
        moments: (3,) principal moments about the COM [kg*m^2]; repaired: (3,) those of
            :func:`nearest_consistent`.
    """

    body: str
    index: int
    inequality: str
    moments: tuple[float, float, float]
    repaired: tuple[float, float, float]

    def message(self) -> str:
        """One line for a log or a report."""
        return (f'body {self.body!r}: its inertia about the COM breaks the triangle inequality '
                f'{self.inequality}; no real body has it')


def pseudo_inertia(pi: np.ndarray) -> np.ndarray:
    """(..., 10) parameters -> (..., 4, 4) pseudo-inertia ``[[Sigma, h], [h^T, m]]`` with
    ``Sigma = tr(I)/2 E - I`` (the body's second moment of mass about its frame origin)."""
    pi = np.asarray(pi, dtype=np.float64)
    m, h = pi[..., 0], pi[..., 1:4]
    inertia = inertia_about_origin(pi)
    sigma = 0.5 * np.trace(inertia, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) - inertia
    J = np.zeros(pi.shape[:-1] + (4, 4))
    J[..., :3, :3] = sigma
    J[..., :3, 3] = h
    J[..., 3, :3] = h
    J[..., 3, 3] = m
    return J


def physically_consistent(pi: np.ndarray, tol: float = 0.0) -> np.ndarray:
    """(...,) whether each body's pseudo-inertia is positive definite (smallest eigenvalue
    above ``tol``): positive mass and an inertia a real mass distribution can have."""
    return np.linalg.eigvalsh(pseudo_inertia(pi))[..., 0] > tol


def _repaired_moments(moments: np.ndarray) -> np.ndarray:
    """(3,) principal moments -> the nearest moments that keep every triangle inequality
    with :data:`MARGIN` (at most one can be broken: two would need a negative moment)."""
    out = np.maximum(np.asarray(moments, dtype=np.float64), 0.0)
    margin = MARGIN * out.sum() / 2.0
    for k in range(3):
        a = -np.ones(3)
        a[k] = 1.0
        excess = a @ out + margin
        if excess > 0.0:                # Euclidean projection onto a . I <= -margin
            out = out - excess / (a @ a) * a
    return out


def _triple(values: np.ndarray) -> tuple[float, float, float]:
    return float(values[0]), float(values[1]), float(values[2])


def inertia_findings(model: RobotModel) -> list[InertiaFinding]:
    """Every body of ``model`` whose inertia about its COM breaks a triangle inequality
    (a lumped body is checked as a whole, in its joint frame's axes)."""
    findings = []
    for b in range(model.n_bodies):
        inequality = broken_triangle(model.body_inertia[b])
        if inequality is None:
            continue
        moments = np.linalg.eigvalsh(model.body_inertia[b])
        findings.append(InertiaFinding(
            body=str(model.body_names[b]), index=b, inequality=inequality,
            moments=_triple(moments), repaired=_triple(_repaired_moments(moments))))
    return findings


def nearest_consistent(model: RobotModel) -> tuple[RobotModel, list[InertiaFinding]]:
    """``model`` with each inconsistent body's inertia replaced (module docstring), and the
    findings; the model itself when every body is consistent."""
    findings = inertia_findings(model)
    if not findings:
        return model, []
    inertia = model.body_inertia.copy()
    for finding in findings:
        _, axes = np.linalg.eigh(inertia[finding.index])
        inertia[finding.index] = axes @ np.diag(finding.repaired) @ axes.T
    return dataclasses.replace(model, body_inertia=inertia), findings
