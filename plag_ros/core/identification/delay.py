"""The delay between a recording's effort and its states, estimated.

A driver often stamps the effort and the positions at different instants (the current is
sampled in another part of the servo cycle, filtered in the drive, or published from an
older cycle). An identification that pairs them sample by sample then fits a model to a
shifted torque and reads the shift as friction or inertia. The delay is the shift of the
effort against the states that leaves the smallest least-squares residual of the same
rows the identification fits (rigid body and friction, every joint that moves): the
states are fixed, only the target moves, so one QR of the rows serves every shift.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.identification.fit import MeasurementTerms, parameter_rows

__all__ = ['DelayEstimate', 'estimate_delay', 'shift_effort']


@dataclass(frozen=True)
class DelayEstimate:
    """Result of :func:`estimate_delay`.

    Attributes:
        delay_s: the effort's delay behind the states [s] (positive: the effort sample
            ``k + d`` belongs to the states of sample ``k``); samples: the same in samples.
        bracket_s: (2,) the shifts whose residual is within 1 % of the smallest [s]: how
            sharply the data say it.
        shifts_s: (S,) the shifts tried [s]; rss: (S,) the residual sum of squares of each.
        at_edge: the smallest residual is at the end of the range searched.
    """

    delay_s: float
    samples: int
    bracket_s: tuple[float, float]
    shifts_s: np.ndarray
    rss: np.ndarray
    at_edge: bool


def shift_effort(effort: np.ndarray, samples: int) -> np.ndarray:
    """(N, m) effort moved ``samples`` earlier (the delay removed), NaN where none is left."""
    out = np.full_like(np.asarray(effort, dtype=np.float64), np.nan)
    if samples >= 0:
        out[:len(out) - samples] = effort[samples:]
    else:
        out[-samples:] = effort[:samples]
    return out


def estimate_delay(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                   effort: np.ndarray, rate_hz: float, *, rest_band: np.ndarray | float,
                   max_delay_s: float = 0.05,
                   terms: MeasurementTerms | None = None) -> DelayEstimate:
    """Estimate the effort's delay behind the states of one recording (module docstring).

    Args:
        model: the robot; q, qd, qdd: (N, n) estimated states, evenly sampled at
            ``rate_hz``; effort: (N, m) actuated effort [N*m]; a channel with a NaN is
            left out.
        rest_band: (n,) or scalar [rad/s]: rows of joints inside it are not used.
        max_delay_s: shifts from -max to +max are tried, one sample apart.
        terms: the per-joint terms of the rows (default: friction and armature).

    Raises:
        ValueError: the recording is not longer than twice the range searched, or no
            measured joint moves.
    """
    terms = terms or MeasurementTerms()
    effort = np.asarray(effort, dtype=np.float64)
    reach = int(round(max_delay_s * rate_hz))
    N = len(q)
    if N <= 2 * reach + 10:
        raise ValueError(f'{N} samples: too short to search a delay of +-{max_delay_s} s')
    act = np.flatnonzero(model.actuated)
    band = np.broadcast_to(np.asarray(rest_band, dtype=np.float64), (model.n_joints,))[act]
    inner = slice(reach, N - reach)                     # states every shift can pair
    measured = np.isfinite(effort).all(axis=0)
    moving = (np.abs(qd[inner][:, act]) > band) & measured
    effort = np.where(measured, effort, 0.0)
    if not moving.any():
        raise ValueError('no joint moves outside its rest band: no delay to estimate')
    Phi = parameter_rows(model, q[inner], qd[inner], qdd[inner], terms)[moving]
    Q, _ = np.linalg.qr(Phi, mode='reduced')
    shifts = np.arange(-reach, reach + 1)
    rss = np.empty(len(shifts))
    for k, d in enumerate(shifts):
        target = effort[reach + d:N - reach + d][moving]
        projected = Q.T @ target
        rss[k] = target @ target - projected @ projected
    best = int(np.argmin(rss))
    close = shifts[rss <= rss[best] * 1.01] / rate_hz
    return DelayEstimate(delay_s=float(shifts[best] / rate_hz), samples=int(shifts[best]),
                         bracket_s=(float(close.min()), float(close.max())),
                         shifts_s=shifts / rate_hz, rss=rss,
                         at_edge=best in (0, len(shifts) - 1))
