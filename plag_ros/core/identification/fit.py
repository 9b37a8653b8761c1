"""Identify a robot's inertial parameters, joint friction and armature from its torques.

The torque at the actuated joints is linear in every parameter fitted here::

    tau_act = G^T Y(q, qd, qdd) pi + F_v qd + F_c sign(qd) + I_a qdd

with ``Y`` the joint-torque regressor (:mod:`plag_ros.core.dynamics.regressor`), ``pi`` the bodies'
ten inertial parameters, ``G^T`` folding each mimic joint's torque onto the joint it
follows, and per actuated joint viscous friction ``F_v``, Coulomb friction ``F_c`` and
armature (reflected rotor inertia) ``I_a``; and, where asked for (:class:`MeasurementTerms`),
per joint a constant offset ``c`` (a torque sensor's or current sensor's bias), a Stribeck
term ``F_s sign(qd) exp(-(qd/v_s)^2)`` (friction that is higher near rest; Armstrong-Helouvry,
Dupont and Canudas de Wit, "A survey of models, analysis tools and compensation methods
for the control of machines with friction", Automatica 30(7), 1994,
doi:10.1016/0005-1098(94)90209-7) and a load-dependent term ``k_l sign(qd) |tau_load|``
(gear friction that grows with the torque the gear carries; Duclusaud, Passault, Padois
and Ly, "Extended Friction Models for the Physics Simulation of Servo Actuators",
arXiv:2410.08650, 2024, model M3), with ``tau_load`` the nominal model's rigid-body torque
at the sample (fixed, so the term stays linear). Inside a joint's rest band its Coulomb torque
is the unknown stick reaction, not ``F_c sign`` of the encoder's flicker
(:mod:`plag_ros.core.estimation.friction`): those (sample, joint) rows are left out of the fit.

The fit is a maximum a posteriori estimate with the model's own figures as the prior: a
parameter the data do not excite stays at its nominal value, and the data pull the rest.
A body of the model that no real body can be (:mod:`plag_ros.core.dynamics.consistency`)
is replaced, as the prior's mean, by the nearest consistent one, and named in the result.
Every body stays physically consistent: its pseudo-inertia is constrained to be
positive semi-definite, which holds exactly the mass distributions a real body can have
(positive mass, inertia satisfying the triangle inequalities), and friction is bounded
below by zero. With those linear matrix inequalities the fit is a convex problem, a
semidefinite program with one minimum whatever the start
(:func:`~plag_ros.core.identification.consistent_map.consistent_map`, Clarabel). The
Kinova Gen3 recordings showed why it matters: a smooth but non-convex parameterisation of
the same constraint, solved by a general least-squares solver, stopped at different
points for different terms and priors.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from plag_ros.core.dynamics.consistency import (
    nearest_consistent,
    physically_consistent,
    pseudo_inertia,
)
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix
from plag_ros.core.dynamics.regressor import (
    inertial_parameters,
    joint_torque_regressor,
)
from plag_ros.core.identification.consistent_map import consistent_map

__all__ = ['HELD', 'JOINT_TERMS', 'Identified', 'IdentificationPrior', 'MeasurementTerms',
           'actuated_regressor', 'identify', 'joint_friction', 'measured_moving', 'parameter_rows',
           'physically_consistent', 'predict', 'pseudo_inertia', 'rest_band_rows']


@dataclass(frozen=True)
class IdentificationPrior:
    """How far each kind of parameter may plausibly be from its nominal value (1 sigma).

    Attributes:
        mass: relative mass spread (0.3: 30 % of the nominal mass).
        com: spread of the COM [m]; inertia: relative spread of the rotational inertia
            about the body frame origin (of its largest entry).
        viscous [N*m*s/rad], coulomb [N*m], armature [kg*m^2]: per actuated joint, around
            the URDF's damping and friction and zero armature.
        offset [N*m], stribeck [N*m], load_friction [1]: the optional terms of
            :class:`MeasurementTerms`, around zero.
    """

    mass: float = 0.3
    com: float = 0.02
    inertia: float = 0.5
    viscous: float = 0.5
    coulomb: float = 0.3
    armature: float = 0.01
    offset: float = 1.0
    stribeck: float = 0.3
    load_friction: float = 0.05


JOINT_TERMS = ('viscous', 'coulomb', 'armature', 'offset', 'stribeck', 'load_friction')
"""Per actuated joint terms, in the order of their columns (:func:`parameter_rows`); the
first three are always fitted, the rest where :class:`MeasurementTerms` asks."""


@dataclass(frozen=True)
class MeasurementTerms:
    """Which optional per-joint terms the measured torque is fitted with (module docstring).

    Attributes:
        offset: a constant torque per joint [N*m]. A recording that moves a joint one way
            only cannot tell it from Coulomb friction (both are constant there): the result
            says so through their standard errors.
        offset_joints: with ``offset``, (m,) per actuated joint whether its offset is
            fitted; the others are zero (left out of the problem). None: every joint's.
        stribeck_velocity: v_s [rad/s] of the Stribeck term; 0 leaves it out.
        load_friction: the load-dependent friction term.
    """

    offset: bool = False
    offset_joints: tuple[bool, ...] | None = None
    stribeck_velocity: float = 0.0
    load_friction: bool = False

    def __post_init__(self) -> None:
        if self.offset_joints is not None and not (self.offset and any(self.offset_joints)):
            raise ValueError('offset_joints needs offset=True and at least one joint')
        if not (self.stribeck_velocity >= 0.0 and np.isfinite(self.stribeck_velocity)):
            raise ValueError(f'stribeck_velocity must be >= 0 [rad/s], got '
                             f'{self.stribeck_velocity}')

    @property
    def names(self) -> tuple[str, ...]:
        """The per-joint terms fitted, in column order (a prefix-free pick of
        :data:`JOINT_TERMS`)."""
        wanted = (True, True, True, self.offset, self.stribeck_velocity > 0.0,
                  self.load_friction)
        return tuple(name for name, on in zip(JOINT_TERMS, wanted) if on)


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
        offset, stribeck, load_friction (and ``*_std``): (m,) the optional terms, zero
            (and not excited) where :attr:`terms` leaves them out.
        terms: the terms fitted; repaired: names of the bodies whose nominal inertia no
            real body has, replaced in the prior by the nearest consistent one.
        correlation_samples: the residual's integrated autocorrelation time [samples]:
            the fit counts ``rows / correlation_samples`` independent rows (1 when the
            noise level was given).
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
    offset: np.ndarray | None = None
    stribeck: np.ndarray | None = None
    load_friction: np.ndarray | None = None
    offset_std: np.ndarray | None = None
    stribeck_std: np.ndarray | None = None
    load_friction_std: np.ndarray | None = None
    terms: MeasurementTerms = MeasurementTerms()
    repaired: tuple[str, ...] = ()
    correlation_samples: float = 1.0

    def joint_values(self) -> dict[str, np.ndarray]:
        """Term name -> (m,) value, for every fitted per-joint term."""
        return {name: getattr(self, name) for name in self.terms.names}

    def predict(self, model: RobotModel, q, qd, qdd) -> np.ndarray:
        """(N, m) actuated torque of these figures on ``model`` (the one identified)."""
        return predict(model, q, qd, qdd, inertial=self.inertial, terms=self.terms,
                       **self.joint_values())


HELD = IdentificationPrior(mass=1e-9, com=1e-9, inertia=1e-9, viscous=1e-9, coulomb=1e-9,
                           armature=1e-9)
"""A prior that holds what it applies to at its nominal figures (a known body)."""


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
            terms: MeasurementTerms = MeasurementTerms(), **joint: np.ndarray | None
            ) -> np.ndarray:
    """(N, m) actuated torque of a parameter set: the rows :func:`identify` fits, times the
    parameters. ``joint``: a (m,) value per term of ``terms.names`` (defaults: the model's
    friction, zero for the rest)."""
    inertial = inertial_parameters(model) if inertial is None else inertial
    q, qd, qdd = (np.atleast_2d(x) for x in (q, qd, qdd))
    nominal = _nominal_joint_values(model, terms)
    values = [nominal[name] if joint.get(name) is None else np.asarray(joint[name])
              for name in terms.names]
    return parameter_rows(model, q, qd, qdd, terms) @ np.concatenate(
        [np.ravel(inertial), *values])


def _nominal_joint_values(model: RobotModel, terms: MeasurementTerms) -> dict[str, np.ndarray]:
    """The prior's mean of each per-joint term: the URDF's friction, zero for the rest."""
    m_act = int(model.actuated.sum())
    viscous, coulomb = joint_friction(model)
    return {name: (viscous if name == 'viscous' else coulomb if name == 'coulomb'
                   else np.zeros(m_act)) for name in terms.names}


def rest_band_rows(model: RobotModel, rest_band: np.ndarray | float, rows: int) -> np.ndarray:
    """(rows, m) each row's actuated rest band [rad/s] from a scalar, (n,) or (rows, n)."""
    band = np.broadcast_to(np.asarray(rest_band, dtype=np.float64), (rows, model.n_joints))
    return band[:, model.actuated]


def measured_moving(model: RobotModel, qd: np.ndarray, torque: np.ndarray,
                    rest_band: np.ndarray | float) -> np.ndarray:
    """(N, m) the (sample, actuated joint) rows a fit or a score can use: the joint moves
    outside its rest band (scalar, (n,) or (N, n) [rad/s]) at (N, n) ``qd`` [rad/s], and
    its (N, m) ``torque`` [N*m] was measured (finite)."""
    qd = np.asarray(qd)
    return np.asarray((np.abs(qd[:, model.actuated])
                       > rest_band_rows(model, rest_band, len(qd))) & np.isfinite(torque))


def identify(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
             torque: np.ndarray, *, rest_band: np.ndarray | float = 0.0,
             prior: IdentificationPrior = IdentificationPrior(),
             noise_std: float | None = None,
             body_priors: Mapping[int, IdentificationPrior] | None = None,
             hold_joints: bool = False,
             terms: MeasurementTerms = MeasurementTerms()) -> Identified:
    """Fit the model's parameters to measured actuated-joint torques.

    Args:
        model: the nominal robot (its figures are the prior's mean).
        q, qd, qdd: (N, n) every joint, mimic joints filled [rad, rad/s, rad/s^2].
        torque: (N, m) measured torque of the actuated joints [N*m]; NaN where a
            channel is not to be fitted (those rows are left out).
        rest_band: scalar, (n,) or (N, n) velocity band [rad/s]: a joint inside it is at
            rest and its row is not fitted (its friction is the unknown stick reaction).
        prior: the prior's spreads.
        noise_std: the torque measurement's standard deviation [N*m]; None: estimated
            from a first fit's residual.
        body_priors: body index -> its own spreads (:data:`HELD` holds a body at its
            figures: the arm while a payload is fitted; a broad one frees a payload).
        hold_joints: hold the per-joint terms (friction, armature, ...) at their prior.
        terms: the optional per-joint terms to fit (:class:`MeasurementTerms`).

    Returns:
        :class:`Identified`.
    """
    q, qd, qdd, torque = (np.asarray(x, dtype=np.float64) for x in (q, qd, qdd, torque))
    model, repaired = nearest_consistent(model)
    names = terms.names
    act = np.flatnonzero(model.actuated)
    m_act, B = len(act), model.n_bodies
    if torque.shape != (len(q), m_act):
        raise ValueError(f'torque must be (N, {m_act}) for the actuated joints, got '
                         f'{torque.shape}')
    # (N, m) rows fitted: joints that move, channels that measured something
    moving = measured_moving(model, qd, torque, rest_band)
    # ||Phi x - target||^2 = ||R x - c||^2 + rest: the fit sees (p, p) instead of
    # (rows, p), exactly; built block by block, so ten minutes at 200 Hz stay small
    R, c, rest, rows = None, None, 0.0, 0
    for start in range(0, len(q), BLOCK):
        block = slice(start, start + BLOCK)
        Phi = parameter_rows(model, q[block], qd[block], qdd[block], terms)[moving[block]]
        target = torque[block][moving[block]]
        if R is not None:
            Phi = np.concatenate([R, Phi])
            target = np.concatenate([c, target])
        R, c, more = _compressed(Phi, target)
        rest += more
        rows += int(moving[block].sum())
    if R is None or c is None or rows == 0:
        raise ValueError('nothing to fit: no joint moves outside its rest band')
    pi0 = inertial_parameters(model)
    joint0 = np.concatenate(list(_nominal_joint_values(model, terms).values()))
    spreads = np.stack([_inertial_spread(pi0[b:b + 1], (body_priors or {}).get(b, prior))[0]
                        for b in range(B)])
    held = HELD if hold_joints else prior
    scale = np.concatenate([spreads.ravel(),
                            np.repeat([getattr(held, name) for name in names], m_act)])
    x0 = np.concatenate([pi0.ravel(), joint0])
    # the parameters solved for: all but the offsets of joints that are not to have one
    # (zero, their columns out of the problem)
    keep = np.ones(len(x0), dtype=bool)
    if terms.offset_joints is not None:
        if len(terms.offset_joints) != m_act:
            raise ValueError(f'offset_joints must name {m_act} joints, got '
                             f'{len(terms.offset_joints)}')
        at = 10 * B + m_act * names.index('offset')
        keep[at:at + m_act] = terms.offset_joints
    Rk, x0k, scalek = R[:, keep], x0[keep], scale[keep]

    def rss(x: np.ndarray) -> float:
        return float(np.sum((R @ x - c) ** 2) + rest)

    def full(xk: np.ndarray) -> np.ndarray:
        out = np.zeros(len(x0), dtype=xk.dtype)
        out[keep] = xk
        return out

    # every per-joint term opposes motion (>= 0) but the offset, which has either sign
    lower = np.concatenate([np.full(m_act, -np.inf if name == 'offset' else 0.0)
                            for name in names])[keep[10 * B:]]
    correlation = 1.0
    if noise_std is None:
        # the data's own noise level, first from the fit without the constraints (a linear
        # solve: no noise level is known yet to weigh the data against the prior), counted
        # in independent samples: the residual of a filtered torque against a model that
        # lacks slow effects is far from white, and N correlated rows hold N / tau
        x = full(np.linalg.solve(Rk.T @ Rk + np.diag(scalek ** -2.0),
                                 Rk.T @ c + x0k / scalek ** 2))
        for _ in range(2):      # then once more from the constrained fit's residual
            correlation = _correlation_samples(model, q, qd, qdd, torque, moving, terms, x)
            sigma = max(float(np.sqrt(rss(x) / rows * correlation)), 1e-6)
            x = full(consistent_map(Rk, c, x0k, scalek, lower, B, sigma))
    else:
        sigma = noise_std
        x = full(consistent_map(Rk, c, x0k, scalek, lower, B, sigma))
    # posterior covariance of the linear parameters (the constraints left aside)
    std = full(np.sqrt(np.diag(np.linalg.pinv(Rk.T @ Rk / sigma ** 2
                                              + np.diag(scalek ** -2.0)))))
    excited = full(std[keep] < 0.5 * scalek)
    singular = np.linalg.svd(Rk / np.maximum(np.linalg.norm(Rk, axis=0), 1e-300),
                             compute_uv=False)          # R's columns have Phi's norms
    rank = int((singular > 1e-10 * singular[0]).sum())
    split = 10 * B + m_act * np.arange(len(names))

    def parts(v: np.ndarray, empty) -> dict[str, np.ndarray]:
        inertial, *joint = np.split(v, split)
        out = {name: np.full(m_act, empty) for name in JOINT_TERMS}
        return {'inertial': inertial.reshape(B, 10), **out, **dict(zip(names, joint))}

    values, stds, flags = parts(x, 0.0), parts(std, 0.0), parts(excited, False)
    return Identified(
        **values, **{f'{name}_std': value for name, value in stds.items()},
        excited=flags, condition=float(singular[0] / singular[rank - 1]), rank=rank,
        rows=int(rows), noise_std=float(np.sqrt(rss(x) / rows)), terms=terms,
        correlation_samples=correlation,
        repaired=tuple(finding.body for finding in repaired))


BLOCK = 8192
"""Samples per block of the regressor (about 60 MB of float64 for the CRANE-X7)."""


def parameter_rows(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                   terms: MeasurementTerms = MeasurementTerms()) -> np.ndarray:
    """(N, m, 10 B + k m) rows of the actuated torque: the regressor, then per term of
    ``terms.names`` (k of them) one column block per joint: viscous (qd), Coulomb
    (sign qd), armature (qdd), offset (1), Stribeck (sign qd exp(-(qd/v_s)^2)) and
    load-dependent friction (sign qd |tau_load|, the model's own rigid-body torque)."""
    act = np.flatnonzero(model.actuated)
    m_act = len(act)
    Y = actuated_regressor(model, q, qd, qdd)
    v, a = qd[:, act], qdd[:, act]
    sign = np.sign(v)
    columns = {'viscous': v, 'coulomb': sign, 'armature': a, 'offset': np.ones_like(v)}
    if terms.stribeck_velocity > 0.0:
        columns['stribeck'] = sign * np.exp(-(v / terms.stribeck_velocity) ** 2)
    if terms.load_friction:
        columns['load_friction'] = sign * np.abs(Y @ inertial_parameters(model).ravel())
    names = terms.names
    joint = np.zeros(Y.shape[:2] + (len(names) * m_act,))
    diagonal = np.arange(m_act)
    for k, name in enumerate(names):
        joint[:, diagonal, k * m_act + diagonal] = columns[name]
    return np.concatenate([Y, joint], axis=-1)


def _correlation_samples(model: RobotModel, q, qd, qdd, torque, moving, terms, x) -> float:
    """The residual's integrated autocorrelation time [samples], averaged over the joints
    by their rows: ``tau = 1 + 2 sum_k rho(k)`` up to the first lag ``M >= 5 tau`` (Sokal's
    automatic window; Sokal, "Monte Carlo Methods in Statistical Mechanics", 1997, section
    3), each joint's residual taken over the samples where it moves, in order. A long
    recording is sampled in :data:`CORRELATION_WINDOWS` windows spread over it: the time is
    the noise's property, and evaluating the regressor again on every sample would cost
    as much as the fit."""
    starts = (np.linspace(0, len(q) - BLOCK, CORRELATION_WINDOWS).astype(int)
              if len(q) > CORRELATION_WINDOWS * BLOCK else range(0, len(q), BLOCK))
    windows = [slice(start, start + BLOCK) for start in starts]
    taus, weights = [], []
    for block in windows:
        residual = parameter_rows(model, q[block], qd[block], qdd[block], terms) @ x \
            - torque[block]
        for j in range(residual.shape[1]):
            tau = _integrated_time(residual[moving[block, j], j])
            if tau is not None:
                taus.append(tau)
                weights.append(int(moving[block, j].sum()))
    return float(np.average(taus, weights=weights)) if taus else 1.0


CORRELATION_WINDOWS = 4
"""Windows of :data:`BLOCK` samples the residual's correlation time is taken from."""


def _integrated_time(series: np.ndarray) -> float | None:
    """Integrated autocorrelation time of one series [samples] (see above); None when it is
    too short or constant."""
    if len(series) < 20:
        return None
    series = series - series.mean()
    spectrum = np.fft.rfft(series, 2 * len(series))
    acf = np.fft.irfft(spectrum * np.conj(spectrum))[:len(series)]
    if not acf[0] > 0.0:
        return None
    tau = np.cumsum(2.0 * acf / acf[0]) - 1.0       # tau(M) = 1 + 2 sum_{k=1..M} rho(k)
    window = np.flatnonzero(np.arange(len(tau)) >= 5.0 * tau)
    return float(max(tau[window[0]] if len(window) else tau[-1], 1.0))


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
