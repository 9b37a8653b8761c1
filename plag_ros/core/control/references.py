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
           'SineReference', 'reference_bounds', 'slew_step']

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


def slew_step(q: np.ndarray, qd: np.ndarray, target: tuple[np.ndarray, np.ndarray, np.ndarray],
              dt: float, max_velocity: np.ndarray, max_acceleration: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One step [s] of a set point (q, qd) (n,) [rad, rad/s] towards ``target`` (q, qd, qdd)
    (n,), at most ``max_velocity`` fast and ``max_acceleration`` [rad/s^2] hard per joint.

    Per joint, the speed aimed for is the target's plus the one from which braking at the
    limit, step by step (``q += qd dt``), stops on the target: the braking distance
    ``h (sqrt(1/4 + 2 |e| / (h dt)) - 1/2)`` with ``h = a dt`` is that of the discrete
    motion, so the set point arrives within a step of the continuous trapezoid's time
    (``D / v + v / a``, or ``2 sqrt(D / a)`` when the speed limit is not reached); a step
    longer than the last (the receive clock's jitter) that would carry it past the target
    stops it there. Within a step's braking of the target (``a dt^2`` and ``a dt``) the set
    point is on it and follows it exactly (its qdd included). The target's velocity counts
    only once the set point heads its way.

    Returns:
        The new (q, qd, qdd) (n,); qdd is the step's acceleration, or the target's.
    """
    q_t, qd_t, qdd_t = target
    qd_t = np.clip(qd_t, -max_velocity, max_velocity)
    qdd_t = np.clip(qdd_t, -max_acceleration, max_acceleration)
    h = max_acceleration * dt
    e = q_t - q
    with np.errstate(divide='ignore', invalid='ignore'):
        braking = np.where(h > 0.0, h * (np.sqrt(0.25 + 2.0 * np.abs(e) / (h * dt)) - 0.5),
                           0.0)
    # the target's velocity counts once the set point is on it or heading its way: against
    # the error it would hold the set point short of the target
    along = np.where(qd_t * e < 0.0, 0.0, qd_t)
    aim = np.clip(along + np.sign(e) * braking, -max_velocity, max_velocity)
    dv = np.clip(aim - qd, -h, h)
    qd_new = qd + dv
    q_new = q + qd_new * dt
    # a step longer than the last may carry it past: it stops on the target instead
    q_new = np.where(np.sign(q_t - q_new) != np.sign(e), q_t, q_new)
    # on the target: within a step's braking of it, at a speed one step can change to its
    arrived = (np.abs(q_t - q_new) <= np.minimum(h, max_velocity) * dt) \
        & (np.abs(qd_t - qd) <= h)
    qdd = np.where(arrived, qdd_t, dv / dt if dt > 0.0 else 0.0)
    return np.where(arrived, q_t, q_new), np.where(arrived, qd_t, qd_new), qdd
