"""Excitation trajectories for identification: periodic, inside the limits, well conditioned.

Each excited joint follows a finite Fourier series of base frequency ``w = 2 pi / period``
(Swevers, Ganseman, Tukel, De Schutter and Van Brussel, "Optimal Robot Excitation and
Identification", IEEE T-RA 13(5), 1997, doi:10.1109/70.631234)::

    q_j(t)   = q0_j + sum_l  a_jl / (l w) sin(l w t) - b_jl / (l w) cos(l w t)
    qd_j(t)  =        sum_l  a_jl cos(l w t) + b_jl sin(l w t)
    qdd_j(t) =        sum_l  l w (b_jl cos(l w t) - a_jl sin(l w t))

The first harmonic's coefficients are fixed by the others so that every joint is at rest
at ``t = 0`` (``sum_l a_jl = 0``, ``sum_l l b_jl = 0``): a trajectory controller can bring
the arm to ``q(0)`` and start the series there, and each period ends where it began.

:func:`design_excitation` chooses the coefficients for the identification of
:mod:`plag_ros.core.identification.fit`: it minimises the condition number of the regressor
(inertial base parameters, viscous and Coulomb friction, armature; columns scaled to unit
norm) on the trajectory's samples, under the joint position, velocity and acceleration
limits, which are linear in the coefficients (scipy SLSQP). :func:`check_excitation` then
checks the whole trajectory densely, with the torque the model predicts against the
servos' saturation and the height of every link frame above the base plane.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
import torch
from scipy.optimize import minimize

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix
from plag_ros.core.dynamics.motors import servo_saturation
from plag_ros.core.identification.fit import parameter_rows, predict

__all__ = ['ExcitationLimits', 'FourierExcitation', 'ExcitationCheck', 'check_excitation',
           'design_excitation', 'excitation_points', 'regressor_condition']


@dataclass(frozen=True)
class ExcitationLimits:
    """What an excitation trajectory must respect.

    Attributes:
        position_margin: distance kept from each URDF position limit [rad].
        velocity: |qd| bound [rad/s] (the CRANE-X7's URDF allows 4.82).
        acceleration: |qdd| bound [rad/s^2] (MoveIt's CRANE-X7 limit is 4.4).
        effort_fraction: the model's torque stays below this share of each servo's
            saturation torque.
        min_height: every link frame's origin stays this high above the base plane [m].
    """

    position_margin: float = 0.15
    velocity: float = 1.5
    acceleration: float = 3.0
    effort_fraction: float = 0.6
    min_height: float = 0.05

    def __post_init__(self) -> None:
        for name in ('position_margin', 'velocity', 'acceleration', 'effort_fraction'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f'ExcitationLimits.{name} must be positive, got {value}')
        if not self.effort_fraction <= 1.0:
            raise ValueError('ExcitationLimits.effort_fraction must be at most 1')


@dataclass(frozen=True)
class FourierExcitation:
    """A periodic excitation trajectory (see the module doc).

    Attributes:
        joints: names of the excited joints (J,); the model's other actuated joints hold
            ``hold`` (in ``held_joints`` order).
        period: [s]; offset: (J,) q0 [rad]; a, b: (J, L) coefficients [rad/s].
    """

    joints: tuple[str, ...]
    period: float
    offset: np.ndarray
    a: np.ndarray
    b: np.ndarray
    held_joints: tuple[str, ...] = ()
    hold: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def harmonics(self) -> int:
        return int(self.a.shape[1])

    def sample(self, t: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, qd, qdd), each (N, J), of the excited joints at times ``t`` [s] (N,)."""
        t = np.atleast_1d(np.asarray(t, dtype=np.float64))
        w = 2.0 * math.pi / self.period
        lw = w * np.arange(1, self.harmonics + 1)                       # (L,)
        s, c = np.sin(np.outer(t, lw)), np.cos(np.outer(t, lw))         # (N, L)
        q = self.offset + s @ (self.a / lw).T - c @ (self.b / lw).T
        qd = c @ self.a.T + s @ self.b.T
        qdd = c @ (self.b * lw).T - s @ (self.a * lw).T
        return q, qd, qdd

    def full_state(self, model: RobotModel, t: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, qd, qdd), each (N, n), of every joint of ``model``: excited, held and
        mimic joints filled."""
        q_e, qd_e, qdd_e = self.sample(t)
        act = model.actuated_names
        G, offset = actuation_matrix(model)
        z = np.zeros((len(q_e), len(act)))
        zd, zdd = np.zeros_like(z), np.zeros_like(z)
        for k, name in enumerate(self.joints):
            i = act.index(name)
            z[:, i], zd[:, i], zdd[:, i] = q_e[:, k], qd_e[:, k], qdd_e[:, k]
        for k, name in enumerate(self.held_joints):
            z[:, act.index(name)] = self.hold[k]
        return z @ G.T + offset, zd @ G.T, zdd @ G.T

    def to_dict(self) -> dict:
        """Plain data (for yaml)."""
        return {'joints': list(self.joints), 'period': float(self.period),
                'offset': self.offset.tolist(), 'a': self.a.tolist(), 'b': self.b.tolist(),
                'held_joints': list(self.held_joints), 'hold': self.hold.tolist()}

    @classmethod
    def from_dict(cls, data: dict) -> FourierExcitation:
        """The inverse of :meth:`to_dict`, checked.

        Raises:
            ValueError: missing keys, wrong shapes, non-finite values, or coefficients
                that do not start at rest.
        """
        try:
            joints = tuple(str(j) for j in data['joints'])
            period = float(data['period'])
            offset = np.asarray(data['offset'], dtype=np.float64)
            a = np.asarray(data['a'], dtype=np.float64)
            b = np.asarray(data['b'], dtype=np.float64)
            held = tuple(str(j) for j in data.get('held_joints', ()))
            hold = np.asarray(data.get('hold', []), dtype=np.float64).reshape(-1)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f'not an excitation trajectory: {exc}') from exc
        J = len(joints)
        if (offset.shape != (J,) or a.ndim != 2 or a.shape[0] != J or b.shape != a.shape
                or hold.shape != (len(held),) or not J or not a.shape[1]):
            raise ValueError(f'excitation trajectory: shapes do not match {J} joints')
        if not (np.isfinite(period) and period > 0 and np.isfinite(offset).all()
                and np.isfinite(a).all() and np.isfinite(b).all() and np.isfinite(hold).all()):
            raise ValueError('excitation trajectory: non-finite or non-positive values')
        excitation = cls(joints, period, offset, a, b, held, hold)
        _, qd0, qdd0 = excitation.sample(0.0)
        if np.abs(qd0).max() > 1e-9 or np.abs(qdd0).max() > 1e-9:
            raise ValueError('excitation trajectory does not start at rest')
        return excitation


def _basis(period: float, harmonics: int, t: np.ndarray) -> tuple[np.ndarray, ...]:
    """(N, p) maps from one joint's free coefficients x = [q0, a_2..a_L, b_2..b_L] to its
    q, qd and qdd at ``t``, with the first harmonic set so that the joint starts at rest
    (``h``: the harmonic's number)."""
    w = 2.0 * math.pi / period
    L = harmonics
    s = [np.sin(h * w * t) for h in range(1, L + 1)]
    c = [np.cos(h * w * t) for h in range(1, L + 1)]
    one, zero = np.ones_like(t), np.zeros_like(t)
    # a_1 = -sum_{h>1} a_h, b_1 = -sum_{h>1} h b_h (rest at t = 0)
    Bq = [one] + [s[h - 1] / (h * w) - s[0] / w for h in range(2, L + 1)] \
        + [-c[h - 1] / (h * w) + h * c[0] / w for h in range(2, L + 1)]
    Bv = [zero] + [c[h - 1] - c[0] for h in range(2, L + 1)] \
        + [s[h - 1] - h * s[0] for h in range(2, L + 1)]
    Ba = [zero] + [w * (s[0] - h * s[h - 1]) for h in range(2, L + 1)] \
        + [h * w * (c[h - 1] - c[0]) for h in range(2, L + 1)]
    return tuple(np.stack(B, axis=1) for B in (Bq, Bv, Ba))


def _coefficients(x: np.ndarray, J: int, L: int, period: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offset, a, b) of the free coefficients ``x`` (J * (2 L - 1),)."""
    x = x.reshape(J, 2 * L - 1)
    a = np.zeros((J, L))
    b = np.zeros((J, L))
    a[:, 1:], b[:, 1:] = x[:, 1:L], x[:, L:]
    a[:, 0] = -a[:, 1:].sum(axis=1)
    b[:, 0] = -(b[:, 1:] * np.arange(2, L + 1)).sum(axis=1)
    return x[:, 0].copy(), a, b


def _base_columns(rows: np.ndarray) -> np.ndarray:
    """Indices of a set of independent columns spanning ``rows`` (pivoted QR)."""
    norm = np.linalg.norm(rows, axis=0)
    used = np.flatnonzero(norm > 1e-12 * max(norm.max(), 1e-300))
    _, R, pivot = scipy.linalg.qr(rows[:, used] / norm[used], mode='economic', pivoting=True)
    d = np.abs(np.diag(R))
    return np.sort(used[pivot[:int((d > 1e-8 * d[0]).sum())]])


def regressor_condition(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                        columns: np.ndarray | None = None) -> float:
    """Condition number of the identification regressor on (N, n) samples.

    The rows are :func:`~plag_ros.core.identification.fit.parameter_rows` (inertial, viscous,
    Coulomb, armature columns), restricted to ``columns`` (default: a base set found on the
    samples themselves) and scaled to unit norm.
    """
    rows = parameter_rows(model, q, qd, qdd)
    rows = rows.reshape(-1, rows.shape[-1])
    cols = _base_columns(rows) if columns is None else columns
    Phi = rows[:, cols]
    Phi = Phi / np.maximum(np.linalg.norm(Phi, axis=0), 1e-300)
    s = np.linalg.svd(Phi, compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


def _link_heights(engine: PartialLagrangian, q: np.ndarray) -> np.ndarray:
    """(K, L) height of every link frame's origin above the base plane [m]."""
    with torch.inference_mode():
        return engine.link_poses(q).numpy()[:, :, 2, 3]


def _moving_up_or_down(z: np.ndarray) -> np.ndarray:
    """Indices of the link frames whose height ``z`` (K, L) changes: one that never moves
    up or down (on a vertical axis at the base) hits nothing."""
    return np.flatnonzero(np.ptp(z, axis=0) > 1e-9)


class _Heights:
    """Heights of the link frames that move up or down, and their gradient in the joints.

    A link frame's origin ``p_l`` moves with joint ``j`` upstream of it at
    ``d p_l / d q_j = u_j x (p_l - o_j)`` (``u_j`` the world axis, ``o_j`` the origin of
    the joint's frame, its child link's frame in a URDF): the height's gradient is the
    third component.
    """

    def __init__(self, model: RobotModel, engine: PartialLagrangian, q: np.ndarray) -> None:
        self.model, self.engine = model, engine
        self.links = _moving_up_or_down(_link_heights(engine, q))
        self.child = np.array([model.link_names.index(b) for b in
                               model.body_names[:model.n_joints]])
        up = np.zeros((len(self.links), model.n_joints), dtype=bool)
        for row, link in enumerate(self.links):
            up[row, model.root_path(int(model.link_joint[link]))] = True
        self.upstream = up

    def __call__(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(K, links) heights [m] and (K, links, n) their gradient in q [m/rad]."""
        with torch.inference_mode():
            poses = self.engine.link_poses(q).numpy()
        p = poses[:, self.links][..., :3, 3]                             # (K, l, 3)
        frames = poses[:, self.child]                                    # (K, n, 4, 4)
        u = np.einsum('knij,nj->kni', frames[:, :, :3, :3], self.model.joint_axis)
        o = frames[:, :, :3, 3]
        lever = p[:, :, None, :] - o[:, None, :, :]                      # (K, l, n, 3)
        dz = u[:, None, :, 0] * lever[..., 1] - u[:, None, :, 1] * lever[..., 0]
        return p[..., 2], dz * self.upstream


@dataclass(frozen=True)
class ExcitationCheck:
    """What :func:`check_excitation` found on a dense sampling of one period.

    Attributes:
        position_margin: smallest distance to a URDF position limit [rad] (negative: beyond).
        velocity, acceleration: largest |qd| [rad/s] and |qdd| [rad/s^2].
        effort_fraction: largest model torque over the servo saturation torque.
        min_height: lowest origin of a link frame that moves up or down [m] above the
            base plane (inf when none does).
        problems: what breaks the limits, one line each (empty: safe to play).
    """

    position_margin: float
    velocity: float
    acceleration: float
    effort_fraction: float
    min_height: float
    problems: tuple[str, ...]


def check_excitation(model: RobotModel, excitation: FourierExcitation,
                     limits: ExcitationLimits = ExcitationLimits(),
                     rate_hz: float = 200.0, engine: PartialLagrangian | None = None
                     ) -> ExcitationCheck:
    """Check one period of ``excitation`` at ``rate_hz`` against ``limits`` and the model.

    A link frame that never moves up or down (a vertical axis at the base) hits nothing
    and is not checked for height.

    Raises:
        ValueError: a joint of the trajectory is not an actuated joint of ``model``.
    """
    act = model.actuated_names
    unknown = [j for j in (*excitation.joints, *excitation.held_joints) if j not in act]
    if unknown:
        raise ValueError(f'excitation joints {unknown} are not actuated joints of '
                         f'{model.name}: {act}')
    t = np.arange(0.0, excitation.period, 1.0 / rate_hz)
    q, qd, qdd = excitation.full_state(model, t)
    idx = [model.joint_names.index(j) for j in excitation.joints]
    lo, hi = model.joint_lower[idx], model.joint_upper[idx]
    qe = q[:, idx]
    margin = float(np.min(np.minimum(qe - lo, hi - qe)))
    velocity = float(np.abs(qd[:, idx]).max())
    acceleration = float(np.abs(qdd[:, idx]).max())
    torque = predict(model, q, qd, qdd)
    effort = float((np.abs(torque) / servo_saturation(model)).max())
    z = _link_heights(engine or PartialLagrangian(model), q)
    moving = _moving_up_or_down(z)
    height = float(z[:, moving].min()) if moving.size else math.inf
    problems = []
    for what, value, bound, unit, below in (
            ('position margin', margin, limits.position_margin - 1e-9, 'rad', True),
            ('velocity', velocity, limits.velocity + 1e-9, 'rad/s', False),
            ('acceleration', acceleration, limits.acceleration + 1e-9, 'rad/s^2', False),
            ('torque / saturation', effort, limits.effort_fraction, '', False),
            ('link height', height, limits.min_height, 'm', True)):
        if (value < bound) if below else (value > bound):
            problems.append(f'{what} {value:.4g} {unit} is beyond the limit {bound:.4g}')
    return ExcitationCheck(margin, velocity, acceleration, effort, height, tuple(problems))


def design_excitation(model: RobotModel, joints: Sequence[str], *, period: float = 10.0,
                      harmonics: int = 5, limits: ExcitationLimits = ExcitationLimits(),
                      hold: dict[str, float] | None = None, samples: int = 100,
                      starts: int = 8, max_iterations: int = 60, seed: int = 0,
                      ) -> tuple[FourierExcitation, float]:
    """The Fourier excitation of ``joints`` with the best-conditioned regressor found.

    Random starting coefficients (``starts`` of them, seeded) are scaled into the limits;
    the best conditioned is refined by SLSQP under the linear position, velocity and
    acceleration limits at ``samples`` points of the period. The result is then scaled
    about its offsets until :func:`check_excitation` finds it inside every limit, so the
    returned trajectory always passes that check.

    Args:
        model: the robot (its nominal figures set the regressor).
        joints: actuated joints to excite; the others hold ``hold`` (default: 0 clipped
            into their limits).
        period: [s]; harmonics: L.

    Returns:
        (excitation, condition number of its regressor on the design samples).

    Raises:
        ValueError: an unknown joint, or no trajectory inside the limits (e.g. a height
            limit no pose of these joints satisfies).
    """
    act = model.actuated_names
    joints = tuple(joints)
    unknown = [j for j in joints if j not in act]
    if unknown or not joints or harmonics < 2:
        raise ValueError(f'excite {list(joints)} with >= 2 harmonics: they must be actuated '
                         f'joints of {model.name}: {act}')
    held = tuple(j for j in act if j not in joints)
    hold = hold or {}
    hold_values = np.array([float(np.clip(hold.get(j, 0.0),
                                          model.joint_lower[model.joint_names.index(j)],
                                          model.joint_upper[model.joint_names.index(j)]))
                            for j in held])
    J, L = len(joints), harmonics
    p = 2 * L - 1
    idx = [model.joint_names.index(j) for j in joints]
    # the design's samples are 3 % inside the limits: the dense check between them passes
    lo = model.joint_lower[idx] + limits.position_margin + 0.02
    hi = model.joint_upper[idx] - limits.position_margin - 0.02
    if np.any(lo >= hi):
        raise ValueError('the position margin leaves no room to move')
    t = np.linspace(0.0, period, samples, endpoint=False)
    Bq, Bv, Ba = _basis(period, L, t)
    eye = np.eye(J)
    # A x >= b for every joint's q, qd, qdd bounds at every sample (linear)
    A = np.concatenate([np.kron(eye, Bq), -np.kron(eye, Bq), np.kron(eye, Bv),
                        -np.kron(eye, Bv), np.kron(eye, Ba), -np.kron(eye, Ba)])
    bound = np.concatenate([np.repeat(lo, samples), -np.repeat(hi, samples),
                            np.full(2 * J * samples, -0.97 * limits.velocity),
                            np.full(2 * J * samples, -0.97 * limits.acceleration)])

    def excitation(x: np.ndarray) -> FourierExcitation:
        offset, a, b = _coefficients(x, J, L, period)
        return FourierExcitation(joints, period, offset, a, b, held, hold_values)

    rng = np.random.default_rng(seed)
    # start about 0, or about the nearest point with a quarter of the range to each side
    # (a joint whose limit is at 0, the CRANE-X7's elbow, would have no room to move)
    quarter = 0.25 * (hi - lo)
    centre = np.clip(np.zeros(J), lo + quarter, hi - quarter)
    engine = PartialLagrangian(model)
    Bq_joint = np.zeros((model.n_joints, J))
    Bq_joint[idx, np.arange(J)] = 1.0
    draws = [np.concatenate([np.zeros((J, 1)), rng.normal(size=(J, p - 1))], axis=1)
             for _ in range(max(starts, 1))]
    # the base columns from a rich motion (the limits do not matter for which parameter
    # combinations the robot's structure lets the data tell apart)
    rich = draws[0].copy()
    rich[:, 0] = centre
    q0, qd0, qdd0 = excitation(rich.ravel()).full_state(model, t)
    heights = _Heights(model, engine, q0)
    rows0 = parameter_rows(model, q0, qd0, qdd0)
    columns = _base_columns(rows0.reshape(-1, rows0.shape[-1]))

    def height(x: np.ndarray) -> np.ndarray:
        z, _ = heights(excitation(x).full_state(model, t)[0])
        return (z - limits.min_height - 0.01).ravel()

    def height_gradient(x: np.ndarray) -> np.ndarray:
        _, dz = heights(excitation(x).full_state(model, t)[0])           # (K, l, n)
        dz = dz @ Bq_joint                                               # (K, l, J)
        return np.einsum('klj,kp->kljp', dz, Bq).reshape(-1, J * p)

    def feasible(x: np.ndarray) -> np.ndarray:
        """``x`` scaled about its offsets into the limits (linear ones, then heights)."""
        x = x.reshape(J, p).copy()
        x[:, 0] = centre
        for _ in range(100):
            if np.all(A @ x.ravel() >= bound - 1e-12) and np.all(height(x.ravel()) >= 0.0):
                break
            x[:, 1:] *= 0.9
        return x.ravel()

    candidates = [feasible(x) for x in draws]

    def cost(x: np.ndarray) -> float:
        q, qd, qdd = excitation(x).full_state(model, t)
        return math.log(regressor_condition(model, q, qd, qdd, columns))

    def inside(x: np.ndarray) -> bool:
        # SLSQP meets its constraints to about 1e-6; the design's samples keep a margin
        # and the dense check below shrinks what still reaches past a limit
        return bool(np.all(A @ x >= bound - 1e-4) and np.all(height(x) >= -1e-4))

    x = min(candidates, key=cost)
    if max_iterations > 0:
        result = minimize(cost, x, method='SLSQP', constraints=[
            {'type': 'ineq', 'fun': lambda v: A @ v - bound, 'jac': lambda v: A},
            {'type': 'ineq', 'fun': height, 'jac': height_gradient}],
            options={'maxiter': max_iterations, 'ftol': 1e-4})
        if inside(result.x) and (not inside(x) or cost(result.x) < cost(x)):
            x = result.x
    x = x.reshape(J, p)

    def scaled(k: float) -> FourierExcitation:
        y = x.copy()
        y[:, 1:] *= k
        return excitation(y.ravel())

    # the dense check; shrink about the offsets (bisection on the scale) until it passes
    found = check_excitation(model, scaled(1.0), limits, engine=engine)
    k = 1.0
    if found.problems:
        low, high = 0.0, 1.0
        for _ in range(10):
            k = 0.5 * (low + high)
            if check_excitation(model, scaled(k), limits, engine=engine).problems:
                high = k
            else:
                low = k
        k = low
        if k == 0.0:
            raise ValueError(f'no excitation of {list(joints)} inside the limits: '
                             f'{"; ".join(found.problems)}')
    best = scaled(k)
    q, qd, qdd = best.full_state(model, t)
    return best, regressor_condition(model, q, qd, qdd, columns)


def excitation_points(excitation: FourierExcitation, command_joints: Sequence[str],
                      start: np.ndarray, *, cycles: int, rate_hz: float = 50.0,
                      approach_speed: float = 0.3
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trajectory controller's points that play ``cycles`` periods from ``start``.

    The first point is ``q(0)`` at rest, reached from ``start`` by the controller's cubic
    segment at a peak speed of about ``approach_speed`` (its peak is 1.5 times the mean),
    at least 2 s after the start; then a point every ``1 / rate_hz`` s with positions and
    velocities, ending at rest where the first period began. Held joints get their hold
    value all along.

    Args:
        command_joints: (C,) the controller's joints, each excited or held.
        start: (C,) the arm's measured position [rad].

    Returns:
        (times (P,) [s] from the start, positions (P, C) [rad], velocities (P, C) [rad/s]).

    Raises:
        ValueError: a controller joint the trajectory does not name, a bad count or rate.
    """
    names = list(command_joints)
    missing = [j for j in names if j not in excitation.joints + excitation.held_joints]
    if missing or cycles < 1 or not rate_hz > 0.0 or not approach_speed > 0.0:
        raise ValueError(f'cannot play: joints {missing} not in the trajectory, or cycles '
                         f'{cycles} < 1, or a rate or speed that is not positive')
    start = np.asarray(start, dtype=np.float64)
    t = np.arange(0, int(round(cycles * excitation.period * rate_hz)) + 1) / rate_hz
    q_e, qd_e, _ = excitation.sample(t)
    positions = np.empty((len(t), len(names)))
    velocities = np.zeros((len(t), len(names)))
    for c, name in enumerate(names):
        if name in excitation.joints:
            k = excitation.joints.index(name)
            positions[:, c], velocities[:, c] = q_e[:, k], qd_e[:, k]
        else:
            positions[:, c] = excitation.hold[excitation.held_joints.index(name)]
    velocities[-1] = 0.0                       # a whole number of periods: back at rest
    approach = max(2.0, 1.5 * float(np.abs(positions[0] - start).max()) / approach_speed)
    return t + approach, positions, velocities
