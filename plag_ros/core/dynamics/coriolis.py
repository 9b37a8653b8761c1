"""Coriolis matrix C(q, qd) in Christoffel form, from the engine's mass matrix derivative.

For ``M(q) qdd + C(q, qd) qd + g(q) = tau`` (friction apart) the Christoffel symbols of
the first kind are

    Gamma[i, j, k] = 1/2 (dM_ij/dq_k + dM_ik/dq_j - dM_jk/dq_i)

and ``C[i, j] = sum_k Gamma[i, j, k] qd_k`` (Virgala and Filakovský [VF]; Heins [L3W];
Spong, Hutchinson and Vidyasagar, "Robot Modeling and Control", sec. 7.3). This choice
among the matrices that give the same ``C qd`` is the one for which ``Mdot - 2 C`` is
skew-symmetric, the property passivity-based controllers rely on. ``C qd`` equals the
velocity-product torques of :class:`plag_ros.core.dynamics.engine.PartialLagrangian` (the sum of
its ``velocity`` parts).

``dM/dq`` is obtained by forward-mode differentiation (``torch.func.jacfwd``) of the
engine's closed-form mass matrix (:func:`plag_ros.core.dynamics.torch_form.pair_terms`, the same
formulas the compiled loop runs), in float64: exact to rounding, no finite differences.
Cost O(n) closed-form passes per sample; meant for analysis and control design, not the
1 kHz loop.

Shapes: batch dimensions ``...`` first; n joints (mimic joints are coordinates like any
other). Units: M [kg m^2 | kg m | kg], dM/dq and Gamma per [rad | m], C [N m s/rad | ...]
so that ``C qd`` is in [N m | N].

[VF] I. Virgala, F. Filakovský, "Algorithm of Euler-Lagrange method for designing of
dynamic model".

[L3W] A. Heins, "Implementing Lagrangian Mechanics Three Ways" (manual, automatic and
symbolic differentiation of a planar mobile manipulator's Lagrangian),
https://adamheins.com/blog/lagrangian-mechanics-three-ways.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from plag_ros.core.dynamics import torch_form
from plag_ros.core.dynamics.engine import JointValues, PartialLagrangian

__all__ = ['Coriolis', 'coriolis_matrix']


class Coriolis:
    """Mass matrix, its derivative, Christoffel symbols and C(q, qd) of one engine's model.

    Args:
        engine: the partial Lagrangian engine (its model and gravity; float64 is used
            whatever the engine's dtype).
    """

    def __init__(self, engine: PartialLagrangian) -> None:
        self.engine = engine
        model = engine.model
        self.n = model.n_joints
        self._c = torch_form.Constants.build(model, np.arange(model.n_bodies), model.gravity,
                                     torch.float64, engine.device)

    def _flat(self, x: JointValues) -> tuple[Tensor, tuple[int, ...]]:
        t = torch.as_tensor(x, dtype=torch.float64, device=self.engine.device)
        if t.shape[-1:] != (self.n,):
            raise ValueError(f'expected (..., {self.n}) joint values, got {tuple(t.shape)}')
        if not bool(torch.isfinite(t).all()):
            raise ValueError('joint values must be finite')
        return t.reshape(-1, self.n), tuple(t.shape[:-1])

    def _mass_single(self, q: Tensor) -> Tensor:
        zero = torch.zeros_like(q)[None]
        M_pairs = torch_form.pair_terms(self._c, q[None], zero, zero)[0]
        return (M_pairs @ self._c.pair_onehot_source)[0]

    def mass_matrix(self, q: JointValues) -> Tensor:
        """M(q): (..., n) -> (..., n, n), float64."""
        flat, batch = self._flat(q)
        M = torch.func.vmap(self._mass_single)(flat)
        return M.reshape(*batch, self.n, self.n)

    def mass_matrix_derivative(self, q: JointValues) -> Tensor:
        """``dM[..., i, j, k] = dM_ij / dq_k``: (..., n) -> (..., n, n, n)."""
        flat, batch = self._flat(q)
        dM = torch.func.vmap(torch.func.jacfwd(self._mass_single))(flat)
        return dM.reshape(*batch, self.n, self.n, self.n)

    def christoffel(self, q: JointValues) -> Tensor:
        """``Gamma[..., i, j, k] = 1/2 (dM_ij/dq_k + dM_ik/dq_j - dM_jk/dq_i)``,
        (..., n) -> (..., n, n, n); symmetric in j and k."""
        dM = self.mass_matrix_derivative(q)
        # dM[..., j, k, i] moved to [..., i, j, k]
        rolled = dM.permute(*range(dM.dim() - 3), -1, -3, -2)
        return 0.5 * (dM + dM.transpose(-1, -2) - rolled)

    def coriolis_matrix(self, q: JointValues, qd: JointValues) -> Tensor:
        """``C[..., i, j] = sum_k Gamma[..., i, j, k] qd_k``: (..., n), (..., n) -> (..., n, n).

        ``C qd`` is the velocity-product torque; ``Mdot - 2 C`` is skew-symmetric.
        """
        qd_t, _ = self._flat(qd)
        Gamma = self.christoffel(q)
        return (Gamma * qd_t.reshape(*Gamma.shape[:-3], 1, 1, self.n)).sum(-1)

    def mass_matrix_dot(self, q: JointValues, qd: JointValues) -> Tensor:
        """``Mdot = sum_k dM/dq_k qd_k``: (..., n), (..., n) -> (..., n, n)."""
        qd_t, _ = self._flat(qd)
        dM = self.mass_matrix_derivative(q)
        return (dM * qd_t.reshape(*dM.shape[:-3], 1, 1, self.n)).sum(-1)


def coriolis_matrix(engine: PartialLagrangian, q: JointValues, qd: JointValues) -> Tensor:
    """C(q, qd) in Christoffel form, (..., n), (..., n) -> (..., n, n) (see :class:`Coriolis`;
    build a :class:`Coriolis` once when calling repeatedly)."""
    return Coriolis(engine).coriolis_matrix(q, qd)
