"""Desired trajectories for the partial-impedance controller, in actuated coordinates.

A reference is sampled by the controller every cycle at the time since enable, with the
position the arm had at enable as its ``anchor``: :class:`HoldReference` keeps that pose,
:class:`SineReference` swings about it (or about a set centre), :class:`PointReference` is
one fixed set point with its velocity and acceleration (what a node's command topic sets).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import ArrayLike

__all__ = ['REFERENCE_MARGIN', 'HoldReference', 'PointReference', 'Reference',
           'SineReference', 'reference_bounds']

REFERENCE_MARGIN = 0.1
"""A reference stays this far [rad or m] inside each joint's limits (at most a tenth of the
range): farther in than the torque-mode driver's stopping-point margin (0.06 rad,
:class:`plag_ros.bus.host.driver.DriverSettings`), so an arm that tracks its reference with
a little overshoot never meets the driver's envelope."""


def reference_bounds(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (n,) bounds [rad or m] a reference must stay within: the joint limits less
    :data:`REFERENCE_MARGIN`, or less a tenth of the range where that is smaller. An
    unlimited side (infinite) stays unlimited."""
    lower, upper = np.asarray(lower, dtype=np.float64), np.asarray(upper, dtype=np.float64)
    margin = np.minimum(REFERENCE_MARGIN, 0.1 * (upper - lower))
    return lower + margin, upper - margin


class Reference(Protocol):
    """Desired trajectory in actuated coordinates, sampled at time since enable."""

    def sample(self, t_s: float, anchor: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                               np.ndarray]:
        """q_d, qd_d, qdd_d (n_act,) at ``t_s`` [s]; ``anchor`` is q at enable."""
        ...


class HoldReference:
    """Hold the position the arm had when the controller was enabled."""

    def sample(self, t_s: float, anchor: np.ndarray):
        zero = np.zeros_like(anchor)
        return anchor.copy(), zero, zero.copy()


@dataclass(frozen=True)
class SineReference:
    """``q_d = center + amplitude * sin(2 pi f t)`` per joint (center None = anchor).

    Attributes:
        amplitude: (n_act,) [rad]; 0 holds that joint.
        frequency_hz: (n_act,) or scalar [Hz].
        center: (n_act,) [rad] or None for the position at enable.
    """

    amplitude: ArrayLike
    frequency_hz: ArrayLike
    center: ArrayLike | None = None

    def sample(self, t_s: float, anchor: np.ndarray):
        a = np.asarray(self.amplitude, dtype=np.float64)
        w = 2.0 * np.pi * np.asarray(self.frequency_hz, dtype=np.float64)
        c = anchor if self.center is None else np.asarray(self.center, dtype=np.float64)
        s, co = np.sin(w * t_s), np.cos(w * t_s)
        return c + a * s, a * w * co, -a * w * w * s


@dataclass(frozen=True)
class PointReference:
    """One set point: q_d, qd_d, qdd_d (n_act,) [rad, rad/s, rad/s^2], whatever the time."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray

    def sample(self, t_s: float, anchor: np.ndarray):
        return self.q, self.qd, self.qdd
