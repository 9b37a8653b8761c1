"""Joint friction as reported: the model while a joint slides, the stick reaction at rest.

The engine evaluates friction as a function of velocity, ``d qd + f sign(qd)`` (the URDF's
damping and Coulomb friction beside the Lagrangian; the damping is the Rayleigh dissipation
term of the worked example in T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient
Extension and Reconstruction of Multi-DoF Systems and Efficient Analysis Using Automatic
Differentiation", Robotics 2022, 11(6), 149, doi:10.3390/robotics11060149). That is right
while a joint slides. At rest Coulomb friction is set-valued: the joint sticks and friction is
whatever reaction keeps it still, anywhere in ``[-f, f]``. A still joint's velocity
*estimate* is not zero either: its encoder reading flips between neighbouring counts and
the estimator turns that into a small velocity of either sign, so ``f sign(qd)`` becomes a
square wave of amplitude ``f`` that the joint never felt.

The rule applied to everything published or plotted (:func:`report_friction`):

* **Band.** A joint is *at rest* while ``|qd| <= band`` (and it has Coulomb friction).
  The band (:func:`rest_band`) is the largest velocity the estimator can produce from a
  joint that does not move: readings that stay within half an encoder count of a constant
  give ``|qd| <= (resolution / 2) * ||h||_1``, with ``h`` the estimator's velocity impulse
  response (five-point derivative and the estimator's own Butterworth sections, as in
  :func:`plag_ros.core.control.stability.velocity_filter`) and the resolution the encoder step (or
  the drive's velocity step for ``velocity_source='measured'``). CRANE-X7 defaults (4096
  counts per turn, 200 Hz, 10 Hz order 3): 0.044 rad/s.
* **Sliding** (outside the band): the model value ``d qd + f sign(qd)``.
* **Stick** (inside the band, the joint's own effort measured): the reaction the motor
  supplies beyond the rigid-body torque, ``clip(tau_measured - tau_rigid, -f, f)``.
* **Unresolved** (inside the band, no measurement of the joint's own effort: no effort in
  the joint states, a mimic joint, or the master of one): reported as 0 and marked, never
  as ``+-f`` and never as NaN.

Units: N*m (revolute) or N (prismatic); velocities rad/s or m/s.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np
from scipy import signal

from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.motors import DEFAULT_POSITION_RESOLUTION, DEFAULT_VELOCITY_RESOLUTION
from plag_ros.core.estimation.filters import (
    FIVE_POINT,
    EstimatorConfig,
    design_lowpass,
    settling_samples,
)

__all__ = ['FRICTION_STATES', 'SLIDING', 'STICK', 'UNRESOLVED', 'RestFriction',
           'effort_scale', 'own_effort_joints', 'report_friction', 'rest_band']

SLIDING, STICK, UNRESOLVED = 0, 1, 2
FRICTION_STATES = ('sliding', 'stick', 'unresolved')
"""Names of the per-joint friction states (index = the state code)."""

# A memory cap on the impulse response: filters whose slowest pole needs longer to decay by
# e^-30 (cut-offs below about 1e-5 of the rate at order 3) are summed over this many only.
_MAX_IMPULSE_SAMPLES = 1_000_000


@functools.lru_cache(maxsize=32)
def _velocity_gain(estimator: EstimatorConfig) -> float:
    """``||h||_1`` [1/s for positions, 1 for measured velocity] of the velocity estimate."""
    # The estimator's own second-order sections, not velocity_filter's single polynomial:
    # that form loses all precision for high orders at low cut-offs (order 8 at 0.5 Hz).
    sos = design_lowpass(estimator)
    # summed until the slowest pole has decayed by e^-30 (~1e-13), past the stencil's taps
    length = min(_MAX_IMPULSE_SAMPLES, settling_samples(sos, 30.0) + FIVE_POINT.size)
    impulse = np.zeros(length)
    impulse[0] = 1.0
    h = signal.sosfilt(sos, impulse)
    if estimator.velocity_source == 'position':
        h = np.convolve(h, FIVE_POINT * estimator.rate_hz)[:length]
    return float(np.abs(h).sum())


def rest_band(model: RobotModel, estimator: EstimatorConfig, *,
              position_resolution: float = DEFAULT_POSITION_RESOLUTION,
              velocity_resolution: float = DEFAULT_VELOCITY_RESOLUTION) -> np.ndarray:
    """(n,) velocity band [rad/s or m/s] inside which a joint counts as at rest.

    The largest ``|qd|`` the estimator gives for a joint whose readings stay within half a
    resolution step of a constant: ``(step / 2) * ||h||_1`` (exact bound: the velocity
    filter has zero DC gain on positions, so the constant drops out).

    Args:
        model: the robot (its joint count).
        estimator: the estimator whose velocity is tested (rate, cut-off, order, source).
        position_resolution: encoder step [rad] (default: 4096 counts per turn).
        velocity_resolution: drive velocity step [rad/s], used when the estimator filters
            the measured velocity (default: Dynamixel, 0.229 rev/min).
    """
    if position_resolution <= 0.0 or velocity_resolution <= 0.0:
        raise ValueError('resolutions must be > 0, got '
                         f'{position_resolution}, {velocity_resolution}')
    step = (position_resolution if estimator.velocity_source == 'position'
            else velocity_resolution)
    return np.full(model.n_joints, 0.5 * step * _velocity_gain(estimator))


def own_effort_joints(model: RobotModel) -> np.ndarray:
    """(n,) bool: joints whose measured effort is their own joint's torque.

    Not a mimic joint, and no mimic joint follows it (a master's drive also moves its mimics,
    so its effort mixes their friction in)."""
    own = model.mimic_source < 0
    own[model.mimic_source[~own]] = False
    return own


def effort_scale(model: RobotModel) -> np.ndarray:
    """(n,) factor from ``joint_states`` effort to joint torque
    (:func:`plag_ros.core.dynamics.motors.driver_effort_to_torque`); NaN where a joint's effort is
    not its own (:func:`own_effort_joints`)."""
    return np.where(own_effort_joints(model), motors.driver_effort_to_torque(model), np.nan)


def report_friction(friction: np.ndarray, qd: np.ndarray, band: np.ndarray,
                    coulomb: np.ndarray, *, reaction: np.ndarray | None = None,
                    out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The friction to report and each joint's state (module docstring's rule).

    Args:
        friction: (..., n) the model's ``d qd + f sign(qd)`` [N*m or N].
        qd: (..., n) estimated velocity [rad/s or m/s].
        band: (n,) rest band (:func:`rest_band`).
        coulomb: (n,) Coulomb level f >= 0 (``RobotModel.friction``); joints with f == 0
            have no stick phase and always report the model.
        reaction: (..., n) measured motor torque minus the rigid-body torque, NaN (or None
            for all) where there is no measurement.
        out: where to write the reported friction (may be ``friction`` itself).

    Returns:
        (reported (..., n), state (..., n) int8: :data:`SLIDING`, :data:`STICK` or
        :data:`UNRESOLVED`).
    """
    coulomb = np.asarray(coulomb, dtype=np.float64)
    rest = np.where(coulomb > 0.0, np.asarray(band, dtype=np.float64), -1.0)
    return _report(friction, qd, rest, coulomb, reaction, out)


def _report(friction: np.ndarray, qd: np.ndarray, rest_band: np.ndarray, coulomb: np.ndarray,
            reaction: np.ndarray | None, out: np.ndarray | None
            ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`report_friction` with the band already -1 where f == 0 (never at rest)."""
    values = np.array(friction, dtype=np.float64) if out is None else out
    if out is not None and out is not friction:
        values[...] = friction
    n = values.shape[-1]
    # (rows, n) views for the compiled loop; a non-contiguous ``out`` is written back
    rows = values.reshape(-1, n)
    speeds = np.ascontiguousarray(np.broadcast_to(qd, values.shape)).reshape(-1, n)
    state = np.empty(rows.shape, dtype=np.int8)
    if reaction is None:
        _apply_rule(rows, speeds, rest_band, coulomb, _NO_REACTION, False, state)
    else:
        moved = np.ascontiguousarray(np.broadcast_to(reaction, values.shape)).reshape(-1, n)
        _apply_rule(rows, speeds, rest_band, coulomb, moved, True, state)
    if not np.shares_memory(rows, values):
        values[...] = rows.reshape(values.shape)
    return values, state.reshape(values.shape)


_NO_REACTION = np.zeros((1, 1))


@numba.njit(cache=True, nogil=True)
def _apply_rule(friction, qd, rest_band, coulomb, reaction, has_reaction, state):
    """The rule per joint and sample, in place on (rows, n) ``friction``; fills ``state``.

    One compiled pass: on the node's (1, n) sample it costs about a microsecond, where the
    same rule as whole-array numpy calls costs 10-20 (each call ~1 us on small arrays)."""
    for t in range(friction.shape[0]):
        for k in range(friction.shape[1]):
            if not abs(qd[t, k]) <= rest_band[k]:     # NaN: not at rest
                state[t, k] = SLIDING
                continue
            r = reaction[t, k] if has_reaction else math.nan
            if math.isfinite(r):
                friction[t, k] = min(max(r, -coulomb[k]), coulomb[k])
                state[t, k] = STICK
            else:
                friction[t, k] = 0.0
                state[t, k] = UNRESOLVED


class RestFriction:
    """:func:`report_friction` bound to one model and estimator (what a node keeps).

    Args:
        model: the robot (Coulomb levels, which joints have their own effort).
        estimator: the estimator the velocities come from (sets the band).
        position_resolution, velocity_resolution: as in :func:`rest_band`.
    """

    def __init__(self, model: RobotModel, estimator: EstimatorConfig, *,
                 position_resolution: float = DEFAULT_POSITION_RESOLUTION,
                 velocity_resolution: float = DEFAULT_VELOCITY_RESOLUTION) -> None:
        self.band = rest_band(model, estimator, position_resolution=position_resolution,
                              velocity_resolution=velocity_resolution)
        self.coulomb = np.asarray(model.friction, dtype=np.float64).copy()
        self.effort_scale = effort_scale(model)
        self._rest_band = np.where(self.coulomb > 0.0, self.band, -1.0)

    def apply(self, friction: np.ndarray, qd: np.ndarray, torque: np.ndarray,
              effort: np.ndarray | None = None) -> np.ndarray:
        """Rewrite ``friction`` (..., n) in place by the rule; returns the states (..., n).

        Args:
            friction: (..., n) the engine's model friction, overwritten.
            qd: (..., n) estimated velocity; torque: (..., n) rigid-body joint torque.
            effort: (..., n) ``joint_states`` effort in model order (NaN where absent), or
                None when the input had none.
        """
        reaction = None if effort is None else effort * self.effort_scale - torque
        if friction.ndim != 1 or not friction.flags.c_contiguous:
            return _report(friction, qd, self._rest_band, self.coulomb, reaction, friction)[1]
        # one sample (the node's hot path): straight into the compiled loop, no broadcasting
        state = np.empty((1, friction.size), dtype=np.int8)
        _apply_rule(friction.reshape(1, -1), np.reshape(qd, (1, -1)), self._rest_band,
                    self.coulomb, _NO_REACTION if reaction is None else reaction.reshape(1, -1),
                    reaction is not None, state)
        return state[0]
