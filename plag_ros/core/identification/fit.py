"""Identify a robot's inertial parameters, joint friction and armature from its torques.

The torque at the actuated joints is linear in every parameter fitted here::

    tau_act = G^T Y(q, qd, qdd) pi + F_v qd + F_c sign(qd) + I_a qdd

with ``Y`` the joint-torque regressor (:mod:`plag_ros.core.dynamics.regressor`), ``pi`` the bodies'
ten inertial parameters, ``G^T`` folding each mimic joint's torque onto the joint it
follows, and per actuated joint viscous friction ``F_v``, Coulomb friction ``F_c`` and
armature (reflected rotor inertia) ``I_a``. Inside a joint's rest band its Coulomb torque
is the unknown stick reaction, not ``F_c sign`` of the encoder's flicker
(:mod:`plag_ros.core.estimation.friction`): those (sample, joint) rows are left out of the fit.

The fit is a maximum a posteriori estimate with the model's own figures as the prior: a
parameter the data do not excite stays at its nominal value, and the data pull the rest.
Every body stays physically consistent by construction: its parameters are those of the
pseudo-inertia ``J = U U^T`` with ``U`` upper triangular with a positive diagonal (the
log-Cholesky parameters of Rucker and Wensing, "Smooth Parameterization of Rigid-Body
Inertia", IEEE RA-L 7(2), 2022, doi:10.1109/LRA.2022.3144517), which holds exactly the
mass distributions a real body can have (positive mass, inertia satisfying the triangle
inequalities). Friction and armature are bounded below by zero. The solver is scipy's
``least_squares`` (trust region reflective); nothing here is an optimizer of its own.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from plag_ros.core.dynamics.model import RobotModel, actuation_matrix
from plag_ros.core.dynamics.regressor import (
    inertia_about_origin,
    inertial_parameters,
    joint_torque_regressor,
)

__all__ = ['EFFORT_SCALE_PRIOR', 'HELD', 'EffortScaleFit', 'Identified', 'IdentificationPrior',
           'ServoFit', 'actuated_regressor', 'identify', 'identify_effort_scale',
           'identify_servo', 'joint_friction', 'parameter_rows', 'physically_consistent',
           'predict', 'pseudo_inertia']


@dataclass(frozen=True)
class IdentificationPrior:
    """How far each kind of parameter may plausibly be from its nominal value (1 sigma).

    Attributes:
        mass: relative mass spread (0.3: 30 % of the nominal mass).
        com: spread of the COM [m]; inertia: relative spread of the rotational inertia
            about the body frame origin (of its largest entry).
        viscous [N*m*s/rad], coulomb [N*m], armature [kg*m^2]: per actuated joint, around
            the URDF's damping and friction and zero armature.
    """

    mass: float = 0.3
    com: float = 0.02
    inertia: float = 0.5
    viscous: float = 0.5
    coulomb: float = 0.3
    armature: float = 0.01


@dataclass(frozen=True)
class Identified:
    """The result of :func:`identify`.

    Attributes:
        inertial: (B, 10) identified body parameters (:data:`PARAMETER_NAMES`).
        viscous, coulomb, armature: (m,) per actuated joint.
        inertial_std, viscous_std, coulomb_std, armature_std: standard errors (the
            posterior's, linearised at the estimate).
        excited: dict name -> bool arrays of the same shapes: the data cut the prior's
            standard deviation at least in half.
        condition: condition number of the data's regressor (columns scaled to unit
            norm) on what the data identify: the largest singular value over the smallest
            of the ``rank`` above 1e-10 of it.
        rank: how many independent parameter combinations the data identify (of
            10 B + 3 m); the rest stays at the prior.
        rows: (sample, joint) rows fitted (moving joints only); noise_std: the fitted
            residual's RMS [N*m].
    """

    inertial: np.ndarray
    viscous: np.ndarray
    coulomb: np.ndarray
    armature: np.ndarray
    inertial_std: np.ndarray
    viscous_std: np.ndarray
    coulomb_std: np.ndarray
    armature_std: np.ndarray
    excited: dict
    condition: float
    rank: int
    rows: int
    noise_std: float

    def predict(self, model: RobotModel, q, qd, qdd) -> np.ndarray:
        """(N, m) actuated torque of these figures on ``model`` (the one identified)."""
        return predict(model, q, qd, qdd, inertial=self.inertial, viscous=self.viscous,
                       coulomb=self.coulomb, armature=self.armature)


HELD = IdentificationPrior(mass=1e-9, com=1e-9, inertia=1e-9, viscous=1e-9, coulomb=1e-9,
                           armature=1e-9)
"""A prior that holds what it applies to at its nominal figures (a known body)."""


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


def _from_pseudo_inertia(J: np.ndarray) -> np.ndarray:
    m, h, sigma = J[..., 3, 3], J[..., :3, 3], J[..., :3, :3]
    i = np.trace(sigma, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) - sigma
    return np.stack([m, h[..., 0], h[..., 1], h[..., 2], i[..., 0, 0], i[..., 0, 1],
                     i[..., 1, 1], i[..., 0, 2], i[..., 1, 2], i[..., 2, 2]], -1)


_UPPER = np.triu_indices(4)
_DIAG = np.array([k for k, (i, j) in enumerate(zip(*_UPPER)) if i == j])


def _to_cholesky(pi: np.ndarray) -> np.ndarray:
    """(B, 10) consistent parameters -> (B, 10) log-Cholesky coordinates (the upper
    factor's entries, its diagonal as logarithms)."""
    J = pseudo_inertia(pi)
    flip = J[:, ::-1, ::-1]
    U = np.linalg.cholesky(flip)[:, ::-1, ::-1]        # J = U U^T, U upper triangular
    theta = U[:, _UPPER[0], _UPPER[1]]
    theta[:, _DIAG] = np.log(theta[:, _DIAG])
    return theta


def _from_cholesky(theta: np.ndarray) -> np.ndarray:
    values = theta.copy()
    values[:, _DIAG] = np.exp(values[:, _DIAG])
    U = np.zeros((len(theta), 4, 4), dtype=theta.dtype)
    U[:, _UPPER[0], _UPPER[1]] = values
    return _from_pseudo_inertia(U @ np.swapaxes(U, -1, -2))


def _cholesky_jacobian(theta: np.ndarray) -> np.ndarray:
    """(B, 10, 10) d parameters / d log-Cholesky coordinates, per body, by the complex
    step (exact to rounding: the map is analytic)."""
    step = 1e-30
    out = np.empty(theta.shape + (10,))
    for k in range(10):
        shifted = theta.astype(np.complex128)
        shifted[:, k] += 1j * step
        out[:, :, k] = _from_cholesky(shifted).imag / step
    return out


def actuated_regressor(model: RobotModel, q: np.ndarray, qd: np.ndarray,
                       qdd: np.ndarray) -> np.ndarray:
    """(N, m, 10 B) regressor of the actuated joints' torque: mimic rows folded onto the
    joint each follows (times the mimic multiplier), as its motor carries them."""
    G, _ = actuation_matrix(model)
    return np.einsum('ja,njp->nap', G, joint_torque_regressor(model, q, qd, qdd))


def joint_friction(model: RobotModel) -> tuple[np.ndarray, np.ndarray]:
    """(m,) viscous and (m,) Coulomb friction of each actuated joint, generalized: a mimic
    joint's friction is carried by the joint it follows (``(G^2)^T d`` and ``|G|^T f``,
    as the simulator integrates it), which is what :func:`identify` fits."""
    G, _ = actuation_matrix(model)
    return (G ** 2).T @ model.damping, np.abs(G).T @ model.friction


def predict(model: RobotModel, q, qd, qdd, *, inertial: np.ndarray | None = None,
            viscous=None, coulomb=None, armature=None) -> np.ndarray:
    """(N, m) actuated torque of a parameter set (defaults: the model's, zero armature):
    the rows :func:`identify` fits, times the parameters."""
    act = model.actuated
    inertial = inertial_parameters(model) if inertial is None else inertial
    generalized = joint_friction(model)
    viscous = generalized[0] if viscous is None else viscous
    coulomb = generalized[1] if coulomb is None else coulomb
    armature = np.zeros(int(act.sum())) if armature is None else armature
    q, qd, qdd = (np.atleast_2d(x) for x in (q, qd, qdd))
    return parameter_rows(model, q, qd, qdd) @ np.concatenate(
        [np.ravel(inertial), viscous, coulomb, armature])


def identify(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
             torque: np.ndarray, *, rest_band: np.ndarray | float = 0.0,
             prior: IdentificationPrior = IdentificationPrior(),
             noise_std: float | None = None,
             body_priors: Mapping[int, IdentificationPrior] | None = None,
             hold_joints: bool = False) -> Identified:
    """Fit the model's parameters to measured actuated-joint torques.

    Args:
        model: the nominal robot (its figures are the prior's mean).
        q, qd, qdd: (N, n) every joint, mimic joints filled [rad, rad/s, rad/s^2].
        torque: (N, m) measured torque of the actuated joints [N*m].
        rest_band: (n,) or scalar velocity band [rad/s]: a joint inside it is at rest and
            its row is not fitted (its friction is the unknown stick reaction).
        prior: the prior's spreads.
        noise_std: the torque measurement's standard deviation [N*m]; None: estimated
            from a first fit's residual.
        body_priors: body index -> its own spreads (:data:`HELD` holds a body at its
            figures: the arm while a payload is fitted; a broad one frees a payload).
        hold_joints: hold friction and armature at the model's figures.

    Returns:
        :class:`Identified`.
    """
    q, qd, qdd, torque = (np.asarray(x, dtype=np.float64) for x in (q, qd, qdd, torque))
    act = np.flatnonzero(model.actuated)
    m_act, B = len(act), model.n_bodies
    if torque.shape != (len(q), m_act):
        raise ValueError(f'torque must be (N, {m_act}) for the actuated joints, got '
                         f'{torque.shape}')
    band = np.broadcast_to(np.asarray(rest_band, dtype=np.float64), (model.n_joints,))[act]
    moving = np.abs(qd[:, act]) > band                    # (N, m) rows fitted
    # ||Phi x - target||^2 = ||R x - c||^2 + rest: the fit sees (p, p) instead of
    # (rows, p), exactly; built block by block, so ten minutes at 200 Hz stay small
    R, c, rest, rows = None, None, 0.0, 0
    for start in range(0, len(q), BLOCK):
        block = slice(start, start + BLOCK)
        Phi = parameter_rows(model, q[block], qd[block], qdd[block])[moving[block]]
        target = torque[block][moving[block]]
        if R is not None:
            Phi = np.concatenate([R, Phi])
            target = np.concatenate([c, target])
        R, c, more = _compressed(Phi, target)
        rest += more
        rows += int(moving[block].sum())
    if R is None or rows == 0:
        raise ValueError('nothing to fit: no joint moves outside its rest band')
    pi0 = inertial_parameters(model)
    joint0 = np.concatenate([*joint_friction(model), np.zeros(m_act)])
    spreads = np.stack([_inertial_spread(pi0[b:b + 1], (body_priors or {}).get(b, prior))[0]
                        for b in range(B)])
    held = HELD if hold_joints else prior
    scale = np.concatenate([spreads.ravel(),
                            np.repeat([held.viscous, held.coulomb, held.armature], m_act)])
    theta0 = np.concatenate([_to_cholesky(pi0).ravel(), joint0])

    def parameters(theta: np.ndarray) -> np.ndarray:
        return np.concatenate([_from_cholesky(theta[:10 * B].reshape(B, 10)).ravel(),
                               theta[10 * B:]])

    x0 = np.concatenate([pi0.ravel(), joint0])

    def rss(x: np.ndarray) -> float:
        return float(np.sum((R @ x - c) ** 2) + rest)

    lower = np.concatenate([np.full(10 * B, -np.inf), np.zeros(3 * m_act)])
    # the Cholesky factor's log-diagonal has a weak prior of its own: without it the fit
    # may flatten a body towards a degenerate mass distribution (a plane, a line), whose
    # pseudo-inertia is singular, for a vanishing gain in the parameters
    diagonal = (10 * np.arange(B)[:, None] + _DIAG).ravel()

    def solve(sigma: float, start: np.ndarray) -> np.ndarray:
        def residual(theta: np.ndarray) -> np.ndarray:
            x = parameters(theta)
            return np.concatenate([(R @ x - c) / sigma, (x - x0) / scale,
                                   (theta[diagonal] - theta0[diagonal]) / LOG_SPREAD])

        def jacobian(theta: np.ndarray) -> np.ndarray:
            D = np.eye(len(theta))              # dx / dtheta: a 10x10 block per body
            blocks = _cholesky_jacobian(theta[:10 * B].reshape(B, 10))
            for b in range(B):
                D[10 * b:10 * b + 10, 10 * b:10 * b + 10] = blocks[b]
            return np.concatenate([R @ D / sigma, D / scale[:, None],
                                   np.eye(len(theta))[diagonal] / LOG_SPREAD])

        return least_squares(residual, np.maximum(start, lower), jac=jacobian,
                             bounds=(lower, np.inf), method='dogbox', x_scale='jac',
                             max_nfev=1000).x

    sigma = noise_std if noise_std is not None else 1.0
    theta = solve(sigma, theta0)
    if noise_std is None:           # the data's own noise level, then the final fit
        sigma = max(float(np.sqrt(rss(parameters(theta)) / rows)), 1e-6)
        theta = solve(sigma, theta)     # from the first fit: it is near
    x = parameters(theta)
    # posterior covariance of the linear parameters, linearised at the estimate
    std = np.sqrt(np.diag(np.linalg.pinv(R.T @ R / sigma ** 2 + np.diag(scale ** -2.0))))
    excited = std < 0.5 * scale
    singular = np.linalg.svd(R / np.maximum(np.linalg.norm(R, axis=0), 1e-300),
                             compute_uv=False)          # R's columns have Phi's norms
    rank = int((singular > 1e-10 * singular[0]).sum())
    split = [10 * B, 10 * B + m_act, 10 * B + 2 * m_act]

    def parts(v: np.ndarray) -> list[np.ndarray]:
        a, b, c, d = np.split(v, split)
        return [a.reshape(B, 10), b, c, d]

    values, stds, flags = parts(x), parts(std), parts(excited)
    return Identified(
        inertial=values[0], viscous=values[1], coulomb=values[2], armature=values[3],
        inertial_std=stds[0], viscous_std=stds[1], coulomb_std=stds[2], armature_std=stds[3],
        excited=dict(zip(('inertial', 'viscous', 'coulomb', 'armature'), flags)),
        condition=float(singular[0] / singular[rank - 1]), rank=rank, rows=int(rows),
        noise_std=float(np.sqrt(rss(x) / rows)))


LOG_SPREAD = 3.0
"""Prior spread of the log-Cholesky diagonal: a body's extent along each principal
direction is a priori within a factor e^3 (about 20) of the URDF's, one sigma."""

BLOCK = 8192
"""Samples per block of the regressor (about 60 MB of float64 for the CRANE-X7)."""


def parameter_rows(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray
                   ) -> np.ndarray:
    """(N, m, 10 B + 3 m) rows of the actuated torque: the regressor, then per joint
    viscous (qd), Coulomb (sign qd) and armature (qdd) columns."""
    act = np.flatnonzero(model.actuated)
    m_act = len(act)
    Y = actuated_regressor(model, q, qd, qdd)
    joint = np.zeros(Y.shape[:2] + (3 * m_act,))
    for j in range(m_act):
        joint[:, j, j] = qd[:, act[j]]
        joint[:, j, m_act + j] = np.sign(qd[:, act[j]])
        joint[:, j, 2 * m_act + j] = qdd[:, act[j]]
    return np.concatenate([Y, joint], axis=-1)


def _compressed(Phi: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(R, c, rest)`` with ``||Phi x - target||^2 == ||R x - c||^2 + rest`` for every x
    (a thin QR of Phi: R is (p, p) however many rows Phi has)."""
    Q, R = np.linalg.qr(Phi, mode='reduced')
    c = Q.T @ target
    return R, c, float(max(target @ target - c @ c, 0.0))


def _inertial_spread(pi0: np.ndarray, prior: IdentificationPrior) -> np.ndarray:
    """(B, 10) prior standard deviation of each body parameter."""
    m = pi0[:, 0]
    inertia = np.abs(pi0[:, 4:]).max(axis=1)
    spread = np.empty_like(pi0)
    spread[:, 0] = prior.mass * m
    # h = m c: the COM's spread times the mass, plus the mass spread at the nominal COM
    spread[:, 1:4] = np.hypot(prior.com * m[:, None], prior.mass * np.abs(pi0[:, 1:4]))
    spread[:, 4:] = (prior.inertia * inertia)[:, None] + prior.com ** 2 * m[:, None]
    return np.maximum(spread, 1e-9)



@dataclass(frozen=True)
class ServoFit:
    """Per joint, the servo's position loop fitted by :func:`identify_servo`, (J,) each.

    Attributes:
        stiffness: K_s [N*m/rad]; stiffness_std: its standard error.
        damping: D [N*m*s/rad], the velocity term: the servo's own damping plus K_s times
            any delay between the recorded command and the one the servo acted on.
        offset: c [N*m], a constant torque (an encoder or gravity-model offset).
        samples: rows fitted per joint; residual_rms [N*m]; deflection_rms: RMS of
            q_cmd - q over those rows [rad].
    """

    stiffness: np.ndarray
    stiffness_std: np.ndarray
    damping: np.ndarray
    offset: np.ndarray
    samples: np.ndarray
    residual_rms: np.ndarray
    deflection_rms: np.ndarray


def identify_servo(torque: np.ndarray, deflection: np.ndarray, velocity: np.ndarray, *,
                   moving: np.ndarray | None = None) -> ServoFit:
    """Fit each joint's position loop ``torque = K_s (q_cmd - q) - D qd + c``.

    The torque is the model's (the identified inertial parameters, friction and armature
    at the estimated states): a position servo's output is the torque the joint needs, and
    ``q_cmd - q`` is how far the servo had to be pulled to give it. The gravity load at
    rest poses and the inertial and friction torques in motion both pull, so every joint
    that moves is fitted, not only those gravity loads. The measured effort enters only
    through the model, which was fitted to it: an error in the driver's effort scale is an
    error of the same size in K_s until the scale is identified
    (:func:`identify_effort_scale`) and the model refitted in true torque.

    Args:
        torque: (N, J) model torque [N*m]; deflection: (N, J) commanded minus measured
            position [rad]; velocity: (N, J) [rad/s].
        moving: (N, J) rows to fit per joint (default all): leave out a joint at rest,
            whose stick friction pulls the servo by an amount no model knows.

    Raises:
        ValueError: shapes that differ, or a joint with fewer than 10 rows.
    """
    torque, deflection, velocity = (np.asarray(x, dtype=np.float64)
                                    for x in (torque, deflection, velocity))
    if not (torque.shape == deflection.shape == velocity.shape) or torque.ndim != 2:
        raise ValueError(f'identify_servo needs (N, J) arrays of one shape, got '
                         f'{torque.shape}, {deflection.shape}, {velocity.shape}')
    N, J = torque.shape
    rows = np.ones((N, J), dtype=bool) if moving is None else np.asarray(moving, dtype=bool)
    out = np.zeros((6, J))
    for j in range(J):
        r = rows[:, j]
        if r.sum() < 10:
            raise ValueError(f'joint {j} moves in {int(r.sum())} samples: too few to fit '
                             'its servo')
        X = np.column_stack([deflection[r, j], -velocity[r, j], np.ones(int(r.sum()))])
        coef, *_ = np.linalg.lstsq(X, torque[r, j], rcond=None)
        residual = torque[r, j] - X @ coef
        sigma2 = float(residual @ residual) / max(len(residual) - 3, 1)
        covariance = sigma2 * np.linalg.pinv(X.T @ X)
        out[:, j] = (coef[0], np.sqrt(covariance[0, 0]), coef[1], coef[2],
                     np.sqrt(np.mean(residual ** 2)), np.sqrt(np.mean(deflection[r, j] ** 2)))
    return ServoFit(stiffness=out[0], stiffness_std=out[1], damping=out[2], offset=out[3],
                    samples=rows.sum(axis=0), residual_rms=out[4], deflection_rms=out[5])


EFFORT_SCALE_PRIOR = 0.2
"""1-sigma relative spread of the driver's effort-to-torque conversion before any data:
the CRANE-X7 driver's ``current_to_effort`` is of undocumented origin and the servos'
torque-current curves vary (:mod:`plag_ros.core.dynamics.motors`)."""


@dataclass(frozen=True)
class EffortScaleFit:
    """Per joint, the correction of the driver's effort scale by :func:`identify_effort_scale`,
    (J,) each.

    Attributes:
        scale: the factor to apply to the effort-to-torque conversion (the posterior: 1,
            the conversion as it was, where the data say nothing); scale_std: its standard
            deviation.
        estimate, estimate_std: what the data alone give (NaN where they give nothing);
            the standard error is a delete-one-block jackknife over contiguous blocks, so
            slowly varying model errors count, not only the sample noise.
        excited: the data cut the prior's spread at least in half (as for
            :class:`Identified`).
        payload_torque_rms: RMS of the payload's torque over the fitted rows [N*m]: how
            much the recording loaded the joint; residual_rms [N*m]; samples: rows fitted.
    """

    scale: np.ndarray
    scale_std: np.ndarray
    estimate: np.ndarray
    estimate_std: np.ndarray
    excited: np.ndarray
    payload_torque_rms: np.ndarray
    residual_rms: np.ndarray
    samples: np.ndarray


def identify_effort_scale(payload_torque: np.ndarray, difference: np.ndarray, *,
                          rows: np.ndarray | None = None, blocks: int = 10,
                          prior_std: float = EFFORT_SCALE_PRIOR) -> EffortScaleFit:
    """Fit each joint's effort scale ``s`` from a known payload: ``s * difference =
    payload_torque``.

    A wrong effort-to-torque factor looks exactly like wrong masses to an identification
    (both scale the torque), so the arm's own recordings cannot tell them apart; a payload
    of known mass and COM can. ``difference`` is what the payload adds to the measured
    torque: the run with it minus a run of the same trajectory without it, at the same
    trajectory time, each less the arm model's torque at its own states. Subtracting the
    run without the payload removes the arm model's own errors, which would otherwise
    correlate with the payload's (mostly gravity) torque and bias the scale by several
    percent; subtracting the model at each run's states removes what differs between the
    runs' states (the servos sag under the payload).

    The scale is fitted as ``1/g`` of the least-squares slope ``difference = g *
    payload_torque`` and combined with the prior ``N(1, prior_std^2)``.

    Args:
        payload_torque: (N, J) the payload's torque at the run's states [N*m] (the model
            with the payload minus the model without it).
        difference: (N, J) [N*m in the conversion in use], see above.
        rows: (N, J) rows to fit per joint (default all): leave out a joint at rest,
            whose stick friction differs between the runs by an amount no model knows.
        blocks: contiguous blocks of the jackknife.
        prior_std: see :data:`EFFORT_SCALE_PRIOR`.

    Raises:
        ValueError: shapes that differ, fewer than 2 blocks, a prior that is not positive.
    """
    x, y = (np.asarray(a, dtype=np.float64) for a in (payload_torque, difference))
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f'identify_effort_scale needs (N, J) arrays of one shape, got '
                         f'{x.shape}, {y.shape}')
    if blocks < 2 or not prior_std > 0.0:
        raise ValueError(f'need at least 2 blocks and a positive prior, got {blocks}, '
                         f'{prior_std}')
    N, J = x.shape
    use = np.ones((N, J), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    estimate, estimate_std = np.full(J, np.nan), np.full(J, np.nan)
    payload_rms, residual_rms = np.zeros(J), np.full(J, np.nan)
    samples = np.zeros(J, dtype=int)
    for j in range(J):
        r = np.flatnonzero(use[:, j] & np.isfinite(x[:, j]) & np.isfinite(y[:, j]))
        samples[j] = len(r)
        if len(r) < 2 * blocks:
            continue
        xj, yj = x[r, j], y[r, j]
        payload_rms[j] = np.sqrt(np.mean(xj ** 2))
        xy, xx = xj * yj, xj * xj
        slope = xy.sum() / xx.sum() if xx.sum() > 0.0 else np.nan
        if np.isfinite(slope):
            residual_rms[j] = np.sqrt(np.mean((yj - slope * xj) ** 2))
        edges = np.linspace(0, len(r), blocks + 1).astype(int)
        sxy = np.add.reduceat(xy, edges[:-1])
        sxx = np.add.reduceat(xx, edges[:-1])
        with np.errstate(divide='ignore', invalid='ignore'):
            left_out = 1.0 / ((xy.sum() - sxy) / (xx.sum() - sxx))
        if not (slope > 0.0 and np.all(np.isfinite(left_out)) and np.all(left_out > 0.0)):
            continue                               # the payload does not load this joint
        estimate[j] = 1.0 / slope
        estimate_std[j] = np.sqrt((blocks - 1) / blocks
                                  * np.sum((left_out - left_out.mean()) ** 2))
    found = np.isfinite(estimate) & (estimate_std > 0.0)
    precision = np.where(found, 1.0 / np.where(found, estimate_std, 1.0) ** 2, 0.0)
    prior_precision = 1.0 / prior_std ** 2
    scale = (np.where(found, estimate, 0.0) * precision + prior_precision) \
        / (precision + prior_precision)
    scale_std = 1.0 / np.sqrt(precision + prior_precision)
    return EffortScaleFit(scale=scale, scale_std=scale_std, estimate=estimate,
                          estimate_std=estimate_std, excited=scale_std <= 0.5 * prior_std,
                          payload_torque_rms=payload_rms, residual_rms=residual_rms,
                          samples=samples)
