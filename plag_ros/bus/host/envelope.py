"""The torque-mode envelope: the bounds the driver checks every cycle before it writes.

In current mode (0) a servo makes the torque it is told and nothing else: no position limit,
no speed limit of its own. :class:`Envelope` is what stands in for them. Each bound is a
fault of :class:`~plag_ros.bus.host.driver.BusDriver`, which then holds every joint in position
mode where it is (:meth:`~plag_ros.bus.host.driver.BusDriver.cycle`):

* **position, with the distance to stop**: a joint in current mode must be able to stop
  inside its limits. With velocity ``v`` [rad/s] and the stated deceleration ``a``
  [rad/s^2], it stops ``v |v| / (2 a)`` further on; that point must stay ``margin`` [rad]
  inside the position limits (the chain file's, or the servo's Min/Max Position Limit
  where tighter). Defaults (``DriverSettings``): 15 rad/s^2 and 0.06 rad, from the
  CRANE-X7's figures:

  - at its stall torque, less the largest gravity torque, each servo decelerates its joint
    at 24 rad/s^2 or more (the pan, stretched out: 0.17 kg*m^2 with the armature; the
    model's mass matrix over 2000 poses, the motor table's armature). An arm 20 % heavier
    than the model, with twice the armature, can fall to about 20 (a review's check over
    500 poses), so the default keeps a quarter below that;
  - below 3 rad/s, where the hold does not saturate, it is a spring (K_s = 18.9 N*m/rad
    for an XM430-W350 at P = 800) with the motor's back-EMF damping (0.85 N*m*s/rad:
    damping ratio 0.24 on the pan), which overshoots its goal by 0.068 s x v, and one 5 ms
    cycle passes before the hold: 0.073 s x v in all. ``v^2 / 30 + 0.06`` is larger at
    every speed (closest at 1.1 rad/s, by 20 mrad).
* **velocity**: ``|v|`` at most a bound per joint; by default the servo's no-load speed at
  12 V (the e-manual's 46 rev/min for the XM430-W350, 30 for the XM540-W270): a joint
  faster than its own motor can drive it is falling or being pushed.
* **torque step**: a current joint's command may change by at most ``torque_step`` [N*m]
  from one write to the next (1.0 by default, 200 N*m/s at 200 Hz); a write that comes
  late (a busy host) may carry the time since the last one, up to :data:`LATE_CYCLES`
  periods' worth and no more (the servo applies the change as one step). The shipped law's
  largest step in the elbow-swing scenario is 0.63 N*m, when the swing starts without a
  ramp (its damping meets the reference's 3.1 rad/s at once); a jump beyond the bound is a
  controller gone wrong, not a law.
* **temperature**: Present Temperature (146) of every servo, in every mode, below its
  Temperature Limit (31, 80 degC by default) less ``temperature_margin``: the fault comes
  before the servo's own overheating shutdown, which turns its torque off (e-manual
  "Shutdown", default 52 includes Overheating). It warns, it does not cool: the hold
  carries the same gravity load, so the servo keeps warming; lower the arm to rest and
  let it cool (the e-manual asks 20 minutes or more).

Everything here is arithmetic on one cycle's numbers (no bus, no clock): the driver reads,
this module judges, the driver acts.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ['LATE_CYCLES', 'Envelope']

LATE_CYCLES = 2.0
"""The most periods of ``torque_step`` one late write may carry: one cycle late (the step
that faulted a real-time run of the shipped law, -1.62 N*m, came from such a cycle), never
a long gap's worth."""


@dataclass(frozen=True)
class Envelope:
    """Bounds per servo, chain order (n servos).

    Attributes:
        joints: (n,) joint names.
        lower, upper: (n,) position limits [rad].
        margin: (n,) [rad] the stopping point's distance from the limits.
        deceleration: (n,) [rad/s^2] the deceleration the stopping point assumes.
        velocity: (n,) [rad/s] the largest speed.
        torque_step: (n,) [N*m] the largest change of a command from one cycle to the next.
        temperature: (n,) [degC] the Present Temperature at which the driver faults.
    """

    joints: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    margin: np.ndarray
    deceleration: np.ndarray
    velocity: np.ndarray
    torque_step: np.ndarray
    temperature: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.joints)
        for name in ('lower', 'upper', 'margin', 'deceleration', 'velocity', 'torque_step',
                     'temperature'):
            value = np.asarray(getattr(self, name), dtype=np.float64)
            if value.shape != (n,) or not np.all(np.isfinite(value)):
                raise ValueError(f'envelope {name}: need {n} finite values, got {value}')
            object.__setattr__(self, name, value)
        for name in ('deceleration', 'velocity', 'torque_step'):
            if np.any(getattr(self, name) <= 0.0):
                raise ValueError(f'envelope {name} must be positive, got '
                                 f'{getattr(self, name).tolist()}')
        if np.any(self.margin < 0.0) or np.any(self.lower + self.margin
                                               >= self.upper - self.margin):
            raise ValueError(f'envelope margin {self.margin.tolist()} leaves no room '
                             'between the position limits')

    def stopping_point(self, position: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        """(n,) where each joint stops [rad] from ``position`` [rad] at ``velocity``
        [rad/s] decelerating at :attr:`deceleration`."""
        return position + velocity * np.abs(velocity) / (2.0 * self.deceleration)

    def velocity_fault(self, velocity: np.ndarray, checked: np.ndarray) -> str:
        """'' or which of the ``checked`` (n,) joints move faster than their bound."""
        fast = checked & ~(np.abs(velocity) <= self.velocity)      # NaN is a fault too
        if fast.any():
            return 'velocity beyond the envelope: ' + _listed(
                self.joints, fast, velocity, self.velocity, 'rad/s')
        return ''

    def motion_fault(self, position: np.ndarray, velocity: np.ndarray,
                     checked: np.ndarray) -> str:
        """'' or why the motion of the ``checked`` (n,) joints leaves the envelope."""
        fast = self.velocity_fault(velocity, checked)
        if fast:
            return fast
        stop = self.stopping_point(position, velocity)
        out = checked & ~((stop >= self.lower + self.margin)
                          & (stop <= self.upper - self.margin))
        if out.any():
            k = np.flatnonzero(out)
            what = ', '.join(
                f'{self.joints[int(j)]} at {position[j]:.3f} rad, {velocity[j]:+.2f} rad/s stops '
                f'at {stop[j]:.3f} (limits {self.lower[j]:.3f}..{self.upper[j]:.3f} less '
                f'{self.margin[j]:g})' for j in k)
            return f'position limit ahead: {what}'
        return ''

    def torque_step_fault(self, previous: np.ndarray, command: np.ndarray,
                          checked: np.ndarray, cycles: float = 1.0) -> str:
        """'' or which of the ``checked`` joints' command [N*m] jumps from ``previous``,
        written ``cycles`` nominal periods ago. A cycle that comes late may carry the change
        of one period it missed, no more: the servo held the old current through the gap,
        so the new one lands as one step however long the gap was."""
        cycles = min(max(1.0, cycles), LATE_CYCLES)
        bound = self.torque_step * cycles
        jump = checked & ~(np.abs(command - previous) <= bound)
        if not jump.any():
            return ''
        return 'torque step beyond the envelope: ' + _listed(
            self.joints, jump, command - previous, bound, f'N*m in {cycles:.3g} cycles')

    def temperature_fault(self, temperature: np.ndarray) -> str:
        """'' or which servos are at or above their fault temperature [degC]."""
        hot = ~(temperature < self.temperature)
        if not hot.any():
            return ''
        return 'temperature: ' + _listed(self.joints, hot, temperature, self.temperature,
                                         'degC')


def _listed(joints: Sequence[str], which: np.ndarray, values: np.ndarray,
            bounds: np.ndarray, unit: str) -> str:
    return ', '.join(f'{joints[int(j)]} {values[j]:+.3g} (bound {bounds[j]:g} {unit})'
                     for j in np.flatnonzero(which))
