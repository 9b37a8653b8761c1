"""Plausibility limits on joint-state input: readings the arm cannot physically produce.

A finite number is not yet a possible reading: a position of 1e300 rad, a velocity twenty
times what the servo can reach, or a step between two samples that no motion within the
velocity limit covers come from a corrupted message, a driver fault or a wrong joint
mapping. Computing torques from them, or a motor command, would be computing from garbage.
:class:`PlausibilityGate` checks each sample against the model's URDF limits and names the
first reason it fails:

``position_out_of_range``
    a limited joint's position lies beyond ``[lower, upper]`` by more than
    ``position_margin`` (the real arm overshoots its software limits a little, e.g. joint 4
    of the CRANE-X7 easily leaves the servo range, hence a margin and not the bare limits);
``continuous_out_of_range``
    a continuous joint's position has ``|q| > continuous_bound`` (an unwrapped angle may
    grow, but not without bound);
``velocity_out_of_range``
    a measured velocity exceeds ``velocity_factor`` times the URDF velocity limit;
``position_jump``
    the step from the last accepted sample, over the time between their stamps, is faster
    than ``velocity_factor`` times the velocity limit, plus ``jump_slack`` for encoder
    quantisation.

A sample stamped no later than the anchor is passed on unjudged and leaves the anchor
alone: refusing out-of-order stamps is the estimator's job, and it counts them. A rejected
jump does not freeze the gate on a stale anchor: when ``reanchor_samples``
consecutive rejected samples agree with each other (each step plausible), the arm really
is there (a driver restart, a recalibration) and the gate accepts the latest of them.

Pure numpy, no ROS: the dynamics node, the impedance node and ``plag-ros analyze`` share it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from plag_ros.core.common.options import option
from plag_ros.core.dynamics.model import RobotModel

__all__ = ['PLAUSIBILITY_REASONS', 'PlausibilityConfig', 'PlausibilityGate']

PLAUSIBILITY_REASONS = ('position_out_of_range', 'continuous_out_of_range',
                        'velocity_out_of_range', 'position_jump')
"""Rejection reasons, in the order they are checked."""


@dataclass(frozen=True)
class PlausibilityConfig:
    """Margins of the plausibility checks; defaults suit the CRANE-X7 and the simulator.

    Attributes:
        position_margin: allowed excess beyond the URDF position limits [rad or m].
        continuous_bound: largest ``|q|`` of a continuous joint [rad].
        velocity_factor: allowed multiple of the URDF velocity limit, for measured
            velocities and for the step between samples. The CRANE-X7 servos cannot exceed
            their no-load speed (4.8 rad/s); 2 leaves room for estimation and stamp jitter.
        jump_slack: allowed step on top of the velocity bound [rad or m]: a few encoder
            counts (4096 per turn: 1.5 mrad each).
        reanchor_samples: consecutive mutually consistent rejected samples after which the
            gate accepts the arm's new position (0: never).
        enabled: False turns every check off.
    """

    position_margin: float = option(0.1, 'allowed excess beyond the URDF position limits '
                                    '[rad or m]', low=0.0, high=100.0, read_only=True)
    continuous_bound: float = option(1000.0, 'largest |q| of a continuous joint [rad]',
                                     low=0.0, high=1e9, read_only=True)
    velocity_factor: float = option(2.0, 'allowed multiple of the URDF velocity limit '
                                    '(measured velocity, step between samples)', low=0.01,
                                    high=1000.0, read_only=True)
    jump_slack: float = option(0.01, 'allowed step on top of the velocity bound [rad or m]',
                               low=0.0, high=100.0, read_only=True)
    reanchor_samples: int = option(3, 'consecutive consistent rejected samples after which '
                                   "the arm's new position is accepted; 0: never", low=0,
                                   high=100000, read_only=True)
    enabled: bool = option(True, 'reject joint states the arm cannot produce (beyond the URDF '
                           'limits, too fast, impossible jumps), counted per reason',
                           read_only=True)

    def __post_init__(self) -> None:
        for name in ('position_margin', 'continuous_bound', 'velocity_factor', 'jump_slack'):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0.0):
                raise ValueError(f'PlausibilityConfig.{name} must be a finite number >= 0, '
                                 f'got {value!r}')
        if self.velocity_factor <= 0.0:
            raise ValueError('PlausibilityConfig.velocity_factor must be > 0')
        if not isinstance(self.reanchor_samples, int) or self.reanchor_samples < 0:
            raise ValueError('PlausibilityConfig.reanchor_samples must be an integer >= 0, '
                             f'got {self.reanchor_samples!r}')


class PlausibilityGate:
    """Accepts or rejects joint-state samples in time order, counting rejections by reason.

    Args:
        model: the robot; its joint types and URDF position and velocity limits are used.
        config: margins (default :class:`PlausibilityConfig`).

    Attributes:
        rejected: reason -> count since construction (``reset`` keeps it).
        reanchors: how often rejected samples that agreed with each other were accepted as
            the arm's new position (``reset`` keeps it). A controller compares it around
            :meth:`check`: a jump that persisted is no reading to resume from.
    """

    def __init__(self, model: RobotModel, config: PlausibilityConfig | None = None) -> None:
        self.config = config or PlausibilityConfig()
        c = self.config
        continuous = np.array([t == 'continuous' for t in model.joint_types])
        self._lower = np.where(continuous, -c.continuous_bound,
                               model.joint_lower - c.position_margin)
        self._upper = np.where(continuous, c.continuous_bound,
                               model.joint_upper + c.position_margin)
        self._continuous = continuous
        vmax = np.asarray(model.velocity_limit, dtype=np.float64)
        # joints without a (positive, finite) velocity limit get no velocity or jump check
        self._vmax = np.where(np.isfinite(vmax) & (vmax > 0.0), vmax * c.velocity_factor,
                              np.inf)
        self.joint_names = tuple(model.joint_names)
        self.rejected = dict.fromkeys(PLAUSIBILITY_REASONS, 0)
        self.reanchors = 0
        self.reset()

    def reset(self) -> None:
        """Forget the last accepted sample (after a gap the jump check starts afresh)."""
        self._anchor: tuple[int, np.ndarray] | None = None
        self._pending: list[tuple[int, np.ndarray]] = []

    def reason(self, q: np.ndarray, qd: np.ndarray | None = None) -> str | None:
        """The first static reason ``(q, qd)`` is impossible, or None (no state, no count).

        Args:
            q: (n,) finite positions [rad or m]; qd: (n,) finite velocities or None.
        """
        if not self.config.enabled:
            return None
        out = (q < self._lower) | (q > self._upper)
        if out.any():
            return 'continuous_out_of_range' if self._continuous[out].all() \
                else 'position_out_of_range'
        if qd is not None and (np.abs(qd) > self._vmax).any():
            return 'velocity_out_of_range'
        return None

    def _step_ok(self, a: tuple[int, np.ndarray], b: tuple[int, np.ndarray]) -> bool:
        dt = abs(b[0] - a[0]) * 1e-9
        return bool((np.abs(b[1] - a[1]) <= self._vmax * dt + self.config.jump_slack).all())

    def check(self, t_ns: int, q: np.ndarray, qd: np.ndarray | None = None) -> str | None:
        """Check one sample (in stamp order); returns the rejection reason or None.

        Args:
            t_ns: stamp [ns]; q: (n,) finite positions; qd: (n,) finite velocities or None.

        Returns:
            None when the sample is plausible (it becomes the jump check's anchor), else
            the reason, which is counted in :attr:`rejected`.
        """
        reason = self.reason(q, qd)
        if reason is None and self.config.enabled:
            sample = (int(t_ns), np.array(q, dtype=np.float64))
            if self._anchor is not None and sample[0] <= self._anchor[0]:
                return None     # not after the anchor: the stamp checks downstream refuse it
            if self._anchor is None or self._step_ok(self._anchor, sample):
                self._anchor, self._pending = sample, []
                return None
            if self._pending and not self._step_ok(self._pending[-1], sample):
                self._pending = []
            self._pending.append(sample)
            if 0 < self.config.reanchor_samples <= len(self._pending):
                self._anchor, self._pending = sample, []
                self.reanchors += 1
                return None
            reason = 'position_jump'
        if reason is not None:
            self.rejected[reason] += 1
        return reason

    def check_batch(self, t_ns: np.ndarray, q: np.ndarray,
                    qd: np.ndarray | None = None) -> np.ndarray:
        """Check a recording in order, as :meth:`check` would sample by sample.

        Args:
            t_ns: (N,) int64 stamps [ns]; q: (N, n) positions; qd: (N, n) or None.

        Returns:
            (N,) int array: 0 for an accepted sample, else 1 + the index of its reason in
            :data:`PLAUSIBILITY_REASONS`.
        """
        t_ns = np.asarray(t_ns, dtype=np.int64)
        q = np.asarray(q, dtype=np.float64)
        codes = np.zeros(len(t_ns), dtype=np.int64)
        if not self.config.enabled or not len(t_ns):
            return codes
        # Fast path, vectorised: every sample statically plausible and every step between
        # neighbours within the bound means each sample is checked against its neighbour,
        # exactly what the sequential rule does. Only from the first problem on does the
        # anchor logic need the loop.
        static = ((q < self._lower) | (q > self._upper)).any(axis=1)
        if qd is not None:
            static |= (np.abs(qd) > self._vmax).any(axis=1)
        dt = np.diff(t_ns) * 1e-9
        steps_ok = (np.abs(np.diff(q, axis=0))
                    <= self._vmax * dt[:, None] + self.config.jump_slack).all(axis=1)
        if self._anchor is not None:
            first_ok = self._step_ok(self._anchor, (int(t_ns[0]), q[0]))
        else:
            first_ok = True
        bad = np.flatnonzero(static | ~np.r_[first_ok, steps_ok])
        start = int(bad[0]) if bad.size else len(t_ns)
        if start > 0:
            self._anchor, self._pending = (int(t_ns[start - 1]), q[start - 1].copy()), []
        for i in range(start, len(t_ns)):
            reason = self.check(int(t_ns[i]), q[i], None if qd is None else qd[i])
            if reason is not None:
                codes[i] = 1 + PLAUSIBILITY_REASONS.index(reason)
        return codes
