"""Sustained oscillation of a controlled joint: the sign of an unstable loop.

An impedance loop that has gone unstable (gains outside the sampled loop's region, see
:mod:`plag_ros.core.control.stability`; a payload or a servo that changed) does not drift: it
swings a joint back and forth, ever faster and wider, until the effort saturates in alternating
directions or the joint bangs from limit to limit. Motion a researcher commands does not
look like that: it reverses a few times a second at most.

So the monitor counts *reversals* per joint and trips when one joint has
:attr:`OscillationMonitor.reversals` of them within :attr:`OscillationMonitor.window_s`:

* a **velocity reversal**: the estimated velocity changes sign after a swing whose peak
  speed exceeded ``speed`` (a tenth of the joint's velocity limit by default: encoder noise
  and creeping do not count, a limit-to-limit swing does);
* a **saturation reversal**: a clipped command whose sign is opposite to the previous
  clipped command of that joint (the effort alternating at saturation, or a position goal
  alternating at the step limit).

With the defaults (8 reversals in 0.8 s, i.e. 5 Hz sustained for 4 cycles) the CRANE-X7's
own fastest commanded motion (the demo's 1.5 Hz swings) reverses at most 3 times in the
window, while the oscillation of an unstable loop (10-20 Hz) trips it within a few tenths
of a second.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

__all__ = ['OscillationMonitor']


class OscillationMonitor:
    """Counts reversals per joint over a sliding window.

    Args:
        names: (n,) joint names (for the fault message).
        speed: (n,) [rad/s] peak speed a swing must exceed for its reversal to count.
        window_s: [s] the sliding window.
        reversals: reversals within the window that make a fault, >= 2.
    """

    def __init__(self, names: Sequence[str], speed: np.ndarray, window_s: float = 0.8,
                 reversals: int = 8) -> None:
        if reversals < 2 or not window_s > 0.0:
            raise ValueError('OscillationMonitor needs reversals >= 2 and window_s > 0')
        self.names = tuple(names)
        self.speed = np.asarray(speed, dtype=np.float64).copy()
        if self.speed.shape != (len(self.names),) or not (self.speed > 0.0).all():
            raise ValueError(f'speed must be {len(self.names)} positive values')
        self.window_ns = int(window_s * 1e9)
        self.window_s = float(window_s)
        self.reversals = int(reversals)
        self.reset()

    def reset(self) -> None:
        """Forget every swing (at enable, and after a fault)."""
        n = len(self.names)
        self._sign = np.zeros(n)          # sign of the current swing's velocity
        self._peak = np.zeros(n)          # its peak speed so far
        self._sat_sign = np.zeros(n)      # sign of the last clipped command
        self._times: list[deque[int]] = [deque() for _ in range(n)]

    def update(self, t_ns: int, qd: np.ndarray, command: np.ndarray,
               saturated: np.ndarray) -> str:
        """Take one cycle; return the fault reason, '' while none.

        Args:
            t_ns: the cycle's time [ns].
            qd: (n,) estimated joint velocities [rad/s].
            command: (n,) the law's torque this cycle [N*m] (its sign is the direction of
                a clipped command).
            saturated: (n,) bools, command clipped this cycle.
        """
        sign = np.sign(qd)
        speed = np.abs(qd)
        flipped = (sign != 0) & (self._sign != 0) & (sign != self._sign)
        counted = flipped & (self._peak > self.speed)
        self._peak = np.where(flipped, speed, np.maximum(self._peak, speed))
        self._sign = np.where(sign != 0, sign, self._sign)
        clip = np.where(saturated, np.sign(command), 0.0)
        alternated = (clip != 0) & (self._sat_sign != 0) & (clip != self._sat_sign)
        self._sat_sign = np.where(clip != 0, clip, self._sat_sign)
        for j in np.flatnonzero(counted | alternated):
            times = self._times[j]
            times.append(t_ns)
            while times and t_ns - times[0] > self.window_ns:
                times.popleft()
            if len(times) >= self.reversals:
                kind = 'effort alternating at saturation' if alternated[j] else \
                    f'velocity reversing above {self.speed[j]:.2g} rad/s'
                return (f'oscillation: {self.names[j]} reversed {len(times)} times in '
                        f'{self.window_s:g} s ({kind}): the loop is unstable; lower its '
                        'gains (plag_ros.core.control.stability gives the bounds)')
        return ''
