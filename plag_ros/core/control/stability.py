"""Closed-loop stability of the joint impedance law, per joint, linearised and sampled.

The controller runs once per ``joint_states`` sample; its damping term sees the velocity
through the estimator (five-point derivative and Butterworth low-pass,
:class:`~plag_ros.core.estimation.filters.JointStateEstimator`), whose lag costs phase; the command
acts a little later and is held until the next one. Whether ``tau = K (q_d - q) - D qd_hat`` is
stable on a joint is therefore a property of the sampled loop, not of ``K`` and ``D``
alone: a damping that is plenty at 1 kHz with a raw velocity pumps energy in at 200 Hz
behind a 15 Hz third-order filter.

Model of one actuated joint ``a`` (all others held; linear, about a gravity-compensated
equilibrium, so gravity and the compensation paths drop out):

* effort path: ``m qdd = tau - c qd``;
* position path (the CRANE-X7 driver): the servo is a spring ``K_s`` with the motor's
  back-EMF damping ``c_s``, ``m qdd = K_s (q_cmd - q) - (c + c_s) qd``, and the controller
  commands ``q_cmd = q_k + tau_k / K_s`` (:mod:`plag_ros.core.control.impedance`);
* ``tau`` is computed from sample ``k`` (raw ``q_k``, the estimator's ``qd_hat_k``), acts
  from ``delay_periods`` periods after the sample and is held for one period (zero-order
  hold, exact discretisation of the continuous joint);
* ``m`` is the joint's smallest effective inertia over the workspace, ``1 / (M^-1)_aa``
  (the other joints free: the lightest the joint can be), over seeded poses; the URDF has
  no rotor inertia, so a real geared joint is heavier, which makes it more stable.

The closed loop is one linear map ``x_{k+1} = A x_k`` over the joint, the estimator's
filter and the pending commands; it is stable when every eigenvalue of ``A`` lies inside
the unit circle. Coulomb friction is left out: it sticks small oscillations (a linearly
unstable loop may look quiet in a friction simulation until something excites it), so the
linear answer is the conservative one.

The *gain margin* of a (K, D) pair is the largest factor ``s`` with ``(s' K, s' D)``
stable for every ``s'`` in (0, s]: 2 means the gains can double before the loop goes
unstable.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from scipy import linalg, signal

from plag_ros.core.dynamics.arrays import ArrayLagrangian, arrays_of
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix
from plag_ros.core.dynamics.motors import armature as motor_armature
from plag_ros.core.dynamics.motors import servo_gains
from plag_ros.core.estimation.filters import FIVE_POINT, EstimatorConfig, design_lowpass

if TYPE_CHECKING:
    from plag_ros.core.dynamics.engine import PartialLagrangian

__all__ = ['MIN_GAIN_MARGIN', 'GainCheck', 'JointLoop', 'check_gains', 'closed_loop_matrix',
           'damping_bound', 'gain_margin', 'joint_loops', 'smallest_inertia',
           'spectral_radius', 'stiffness_bound', 'velocity_filter']

MIN_GAIN_MARGIN = 2.0
"""Gain margin the controller asks of every joint's (K, D) (6 dB: the inertia, the delay
and the servo stiffness are model figures, not identified ones)."""


_POSES = 64
"""Seeded random poses over which a joint's smallest effective inertia is taken."""


@dataclass(frozen=True)
class JointLoop:
    """Linear model of one actuated joint under the impedance law.

    Attributes:
        inertia: effective inertia m [kg*m^2] > 0.
        damping: viscous damping c on the joint [N*m*s/rad] >= 0 (URDF damping, plus the
            servo's back-EMF on the position path).
        servo_stiffness: K_s [N*m/rad] of the servo's position loop (position path), or
            None for the effort path.
        rate_hz: control (and ``joint_states``) rate [Hz].
        delay_periods: from a sample to its command taking effect, in periods, >= 0.
    """

    inertia: float
    damping: float
    servo_stiffness: float | None
    rate_hz: float
    delay_periods: float = 1.0

    def __post_init__(self) -> None:
        if not (self.inertia > 0.0 and math.isfinite(self.inertia)):
            raise ValueError(f'JointLoop.inertia must be > 0, got {self.inertia!r}')
        if not (self.damping >= 0.0 and math.isfinite(self.damping)):
            raise ValueError(f'JointLoop.damping must be >= 0, got {self.damping!r}')
        if self.servo_stiffness is not None and not self.servo_stiffness > 0.0:
            raise ValueError(f'JointLoop.servo_stiffness must be > 0 or None, got '
                             f'{self.servo_stiffness!r}')
        if not (self.rate_hz > 0.0 and math.isfinite(self.rate_hz)):
            raise ValueError(f'JointLoop.rate_hz must be > 0, got {self.rate_hz!r}')
        if not (self.delay_periods >= 0.0 and math.isfinite(self.delay_periods)):
            raise ValueError(f'JointLoop.delay_periods must be >= 0, got '
                             f'{self.delay_periods!r}')


def velocity_filter(estimator: EstimatorConfig, rate_hz: float | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Transfer function ``B(z^-1) / A(z^-1)`` of the estimator's velocity on an even grid.

    From the positions (``velocity_source='position'``: Butterworth of the five-point
    derivative) or from the measured velocity (``'measured'``: the Butterworth alone).

    Args:
        estimator: the estimator's settings.
        rate_hz: sample rate [Hz]; default the estimator's.

    Returns:
        b, a: coefficients in powers of z^-1, same length, ``a[0] == 1``.
    """
    config = estimator if rate_hz is None else dataclasses.replace(estimator, rate_hz=rate_hz)
    b, a = signal.sos2tf(design_lowpass(config))     # the estimator's own design
    if config.velocity_source == 'position':
        b = np.convolve(b, FIVE_POINT * config.rate_hz)
    n = max(a.size, b.size)
    return np.pad(b, (0, n - b.size)), np.pad(a, (0, n - a.size))


def _discrete_joint(loop: JointLoop, fraction: float
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zero-order-hold discretisation over one period with the input switching at
    ``fraction`` of the period: ``x+ = Phi x + G_old u_old + G_new u_new``."""
    m, c, Ks = loop.inertia, loop.damping, loop.servo_stiffness
    if Ks is None:
        A = np.array([[0.0, 1.0], [0.0, -c / m]])
        B = np.array([0.0, 1.0 / m])
    else:
        A = np.array([[0.0, 1.0], [-Ks / m, -c / m]])
        B = np.array([0.0, Ks / m])
    T = 1.0 / loop.rate_hz

    def hold(tau: float) -> tuple[np.ndarray, np.ndarray]:
        """(e^{A tau}, int_0^tau e^{A s} ds B) from one augmented exponential."""
        aug = np.zeros((3, 3))
        aug[:2, :2], aug[:2, 2] = A * tau, B * tau
        e = linalg.expm(aug)
        return e[:2, :2], e[:2, 2]

    phi_new, g_new = hold((1.0 - fraction) * T)
    phi_old, g_old = hold(fraction * T)
    return phi_new @ phi_old, phi_new @ g_old, g_new


@functools.lru_cache(maxsize=1024)
def _parts(loop: JointLoop, estimator: EstimatorConfig) -> tuple[np.ndarray, ...]:
    """What the loop matrix needs that does not depend on the gains: the velocity
    filter's state space and the joint's discretisation (both frozen inputs, cached)."""
    b, a = velocity_filter(estimator, loop.rate_hz)
    Ae, Be, Ce, De = signal.tf2ss(b, a)
    whole = math.floor(loop.delay_periods)
    phi, g_old, g_new = _discrete_joint(loop, loop.delay_periods - whole)
    return Ae, Be, Ce, De, phi, g_old, g_new


def closed_loop_matrix(loop: JointLoop, stiffness: float, damping: float,
                       estimator: EstimatorConfig) -> np.ndarray:
    """State matrix of the sampled closed loop of one joint.

    State: the joint (q, qd), the estimator's velocity filter, and the commands not yet in
    effect (``floor(delay) + 1`` of them).

    Args:
        loop: the joint.
        stiffness: K [N*m/rad]. damping: D [N*m*s/rad].
        estimator: the controller's estimator (run at ``loop.rate_hz``).

    Returns:
        (N, N) matrix A with ``x_{k+1} = A x_k``.
    """
    Ae, Be, Ce, De, phi, g_old, g_new = _parts(loop, estimator)
    ne = Ae.shape[0]
    # The filter's input: the position, or the measured velocity.
    pick = np.array([1.0, 0.0]) if estimator.velocity_source == 'position' \
        else np.array([0.0, 1.0])
    # Command c_k = Cc xe + Dc x (a torque on the effort path, a position goal about the
    # joint's equilibrium on the position path).
    Ks = loop.servo_stiffness
    scale = 1.0 if Ks is None else 1.0 / Ks
    Dc = -scale * (np.array([stiffness, 0.0]) + damping * De[0, 0] * pick)
    if Ks is not None:
        Dc[0] += 1.0
    Cc = -scale * damping * Ce[0]
    whole = int(math.floor(loop.delay_periods))
    L = whole + 1                                  # c_{k-1} ... c_{k-whole-1}
    N = 2 + ne + L
    A = np.zeros((N, N))
    command = np.zeros(N)
    command[:2], command[2:2 + ne] = Dc, Cc

    def past(j: int) -> np.ndarray:
        """Row giving c_{k-j} from the state."""
        if j == 0:
            return command
        row = np.zeros(N)
        row[2 + ne + j - 1] = 1.0
        return row

    A[:2, :2] = phi
    A[:2] += np.outer(g_new, past(whole)) + np.outer(g_old, past(whole + 1))
    A[2:2 + ne, 2:2 + ne] = Ae
    A[2:2 + ne, :2] = np.outer(Be[:, 0], pick)
    A[2 + ne] = command
    for i in range(1, L):
        A[2 + ne + i, 2 + ne + i - 1] = 1.0
    return A


def spectral_radius(loop: JointLoop, stiffness: float, damping: float,
                    estimator: EstimatorConfig) -> float:
    """Largest eigenvalue magnitude of the closed loop: < 1 is stable."""
    return float(np.abs(np.linalg.eigvals(
        closed_loop_matrix(loop, stiffness, damping, estimator))).max())


def _stable(loop, K, D, estimator) -> bool:
    return spectral_radius(loop, K, D, estimator) < 1.0 - 1e-9


def _largest_stable(stable, upper: float, lower: float = 0.0, steps: int = 48,
                    rel: float = 1e-3) -> float:
    """Largest x in (lower, upper] with ``stable(x')`` for every x' on a geometric scan
    up to it, refined by bisection to ``rel``; ``lower`` if the first scan point fails."""
    grid = np.geomspace(upper * 1e-4, upper, steps)
    good = lower
    for x in grid:
        if x <= lower:
            continue
        if not stable(x):
            hi = x
            while hi - good > rel * hi:
                mid = 0.5 * (good + hi)
                good, hi = (mid, hi) if stable(mid) else (good, mid)
            return good
        good = x
    return good


def gain_margin(loop: JointLoop, stiffness: float, damping: float,
                estimator: EstimatorConfig, upper: float = 100.0) -> float:
    """Largest s <= ``upper`` with (s' K, s' D) stable for all s' up to it (see the module
    docstring); 0 when even small multiples are unstable."""
    if stiffness == 0.0 and damping == 0.0:
        return upper
    return _largest_stable(lambda s: _stable(loop, s * stiffness, s * damping, estimator),
                           upper)


def stiffness_bound(loop: JointLoop, damping: float, estimator: EstimatorConfig,
                    upper: float = 1e4) -> float:
    """Largest K [N*m/rad] stable (with every smaller K) at damping ``D``."""
    return _largest_stable(lambda k: _stable(loop, k, damping, estimator), upper)


def damping_bound(loop: JointLoop, stiffness: float, estimator: EstimatorConfig,
                  upper: float = 1e3) -> float:
    """Largest D [N*m*s/rad] stable (with every smaller D) at stiffness ``K``."""
    return _largest_stable(lambda d: _stable(loop, stiffness, d, estimator), upper)


def joint_loops(model: RobotModel, command_interface: str, rate_hz: float, *,
                servo_stiffness: ArrayLike | None = None,
                servo_damping: ArrayLike | None = None,
                delay_periods: float = 1.0,
                engine: ArrayLagrangian | PartialLagrangian | None = None,
                armature: ArrayLike | None = None) -> list[JointLoop]:
    """One :class:`JointLoop` per actuated joint of ``model`` (model order).

    Args:
        model: the robot.
        command_interface: ``'effort'`` or ``'position'``.
        rate_hz: control rate [Hz].
        servo_stiffness: K_s per actuated joint (position path); default the servo model's
            (:func:`plag_ros.core.dynamics.motors.servo_gains`, the motor table for the CRANE-X7).
        servo_damping: the servo's back-EMF damping (position path); default likewise.
        delay_periods: sample-to-effect delay [periods].
        engine: the model's engine (built if None).
        armature: (n_act,) reflected rotor inertia [kg*m^2] on each joint's own inertia.
            Default: on the effort path the low end of the motor table's range
            (:func:`plag_ros.core.dynamics.motors.armature`, 0 outside the table), the end
            that allows the smaller gains; on the position path none (its margins were
            verified on the rigid-body simulator; with armature the servo spring's own
            loop rings more, which is checked apart, in bench/bench_stability.py).

    Returns:
        The loops, inertia the smallest effective one over seeded poses, armature included.
    """

    G, _ = actuation_matrix(model)
    act = np.flatnonzero(model.actuated)
    if armature is None and command_interface == 'effort':
        armature = motor_armature(model, 'low')
    inertia = smallest_inertia(model, engine, armature)
    # A mimic joint's damping acts on the joint it follows (times its multiplier squared).
    damping = np.diag(G.T @ np.diag(model.damping) @ G)
    Ks: np.ndarray | list[None]
    if command_interface == 'position':
        kp, kd = servo_gains(model)
        Ks = kp if servo_stiffness is None else np.broadcast_to(
            np.asarray(servo_stiffness, dtype=np.float64), kp.shape)
        cs = kd if servo_damping is None else np.broadcast_to(
            np.asarray(servo_damping, dtype=np.float64), kd.shape)
        damping = damping + cs
    elif command_interface == 'effort':
        Ks = [None] * act.size
    else:
        raise ValueError(f"command_interface must be 'effort' or 'position', got "
                         f'{command_interface!r}')
    return [JointLoop(float(m), float(c), None if k is None else float(k), rate_hz,
                      delay_periods) for m, c, k in zip(inertia, damping, Ks)]


_INERTIA_CACHE: dict[tuple[str, str, tuple[float, ...]], np.ndarray] = {}


def smallest_inertia(model: RobotModel,
                     engine: ArrayLagrangian | PartialLagrangian | None = None,
                     armature: ArrayLike | None = None) -> np.ndarray:
    """(n_act,) each actuated joint's smallest effective inertia ``1 / (M^-1)_aa`` over
    the zero pose and seeded random poses within the limits [kg*m^2] (cached per URDF and
    armature). ``armature``: (n_act,) added to the reduced mass matrix's diagonal (default
    none: the rigid bodies alone)."""

    extra = np.zeros(int(model.actuated.sum())) if armature is None else np.broadcast_to(
        np.asarray(armature, dtype=np.float64), (int(model.actuated.sum()),))
    key = (model.name, model.urdf_xml, tuple(extra.tolist()))
    if key not in _INERTIA_CACHE:
        arrays = arrays_of(engine) if engine is not None else ArrayLagrangian(model)
        G, offset = actuation_matrix(model)
        act = np.flatnonzero(model.actuated)
        lower, upper = model.joint_lower[act], model.joint_upper[act]
        lower = np.where(np.isfinite(lower), lower, -math.pi)
        upper = np.where(np.isfinite(upper), upper, math.pi)
        rng = np.random.default_rng(0)
        poses = [np.clip(np.zeros(act.size), lower, upper)]
        poses += list(lower + (upper - lower) * rng.random((_POSES, act.size)))
        inertia = np.full(act.size, np.inf)
        for z in poses:
            M = G.T @ arrays.mass_matrix(G @ z + offset) @ G + np.diag(extra)
            inertia = np.minimum(inertia, 1.0 / np.diag(np.linalg.inv(M)))
        inertia.setflags(write=False)
        _INERTIA_CACHE[key] = inertia
    return _INERTIA_CACHE[key]


@dataclass(frozen=True)
class GainCheck:
    """The verdict on one joint's gains.

    Attributes:
        joint: the joint's name.
        stiffness, damping: the gains checked.
        margin: their gain margin (see the module docstring).
        stiffness_bound: largest stable K at this D; damping_bound: largest stable D at
            this K (the loop goes unstable above them).
    """

    joint: str
    stiffness: float
    damping: float
    margin: float
    stiffness_bound: float
    damping_bound: float

    def message(self, required: float) -> str:
        """One line naming the joint, its gains, their margin and the bounds."""
        k = (f'K up to {self.stiffness_bound:.3g}' if self.stiffness_bound > 0 else
             'no K')
        d = (f'D up to {self.damping_bound:.3g}' if self.damping_bound > 0 else 'no D')
        return (f'{self.joint}: K = {self.stiffness:g} N*m/rad, D = {self.damping:g} '
                f'N*m*s/rad have a gain margin of {self.margin:.2g} (< {required:g}); '
                f'the sampled loop is stable with {k} at this D, {d} at this K')


def check_gains(loops: Sequence[JointLoop], names: Sequence[str], stiffness: np.ndarray,
                damping: np.ndarray, estimator: EstimatorConfig,
                required: float = MIN_GAIN_MARGIN, only: np.ndarray | None = None
                ) -> list[GainCheck]:
    """The joints whose (K, D) have a gain margin below ``required``.

    Args:
        loops, names: one per actuated joint.
        stiffness, damping: (n_act,) gains.
        estimator: the controller's estimator.
        required: the smallest acceptable gain margin.
        only: (n_act,) bools, the joints to check (default all).

    Returns:
        One :class:`GainCheck` per failing joint (empty: all pass).
    """
    out = []
    for a, (loop, name) in enumerate(zip(loops, names)):
        if only is not None and not only[a]:
            continue
        K, D = float(stiffness[a]), float(damping[a])
        margin = gain_margin(loop, K, D, estimator, upper=2.0 * required)
        if margin < required:
            out.append(GainCheck(name, K, D, margin, stiffness_bound(loop, D, estimator),
                                 damping_bound(loop, K, estimator)))
    return out
