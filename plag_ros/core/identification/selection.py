"""The fit's prior width and its offsets, chosen by cross-validation on the recordings.

How far the fit may leave the URDF is a choice the data can make better than a default:
a prior as narrow as the URDF's own figures deserve (:class:`~.fit.IdentificationPrior`)
holds an arm whose URDF is far off near it, and one that is too wide lets the fit follow the
recordings' noise and their unexcited directions. A constant offset per joint fits a
sensor's bias, but on a joint that sweeps one way only it trades with Coulomb friction and
then predicts the other way wrong. On five real Kinova Gen3 recordings, holding each out
and choosing by the other four, the choice cut the worst joint's error against the
least-squares peer from 1.18-1.78x to 0.51-1.21x (``bench/bench_identify_real.py --folds``).

The rule: each candidate (a width factor times every spread of the prior, with or without
the offsets) is fitted leaving out one recording at a time (recordings of the arm at rest
are no fold; a single moving recording: each of :data:`CV_BLOCKS` contiguous blocks of
it) and scored on the one left out, over the rows
where a joint moves with a measured effort. The width is the winning candidate's, by the
mean squared error over all those rows (a tie to the narrower prior, then to no offset).
If the winner has the offsets, each joint's is then judged at that width against the fit
with every joint's offset: it is kept only if dropping it alone raises that joint's own
cross-validated error, by more than :data:`OFFSET_GAIN` (one more fit per joint and
fold). Judged against the fit with no offsets instead, a bias on one channel would buy
offsets for the others (it pulls the shared inertial figures, and every joint's error with
them). Judged joint by joint from the start, without the pooled error's verdict first,
offsets were kept on 1-4 joints of the Kinova folds and the fifth recording's error went
up (the worst joint 1.12 -> 2.29x the peer): what they fitted in the four recordings
was no bias the fifth shared.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.identification.fit import (
    IdentificationPrior,
    MeasurementTerms,
    identify,
    measured_moving,
)

__all__ = ['CV_BLOCKS', 'OFFSET_GAIN', 'ONE_WAY_SHARE', 'PRIOR_SCALES', 'Part', 'Selection',
           'one_way_joints', 'scaled_prior', 'select_by_cross_validation']

PRIOR_SCALES = (1.0, 3.0, 10.0, 100.0)
"""Width factors tried for ``--prior-scale auto``: the URDF's prior, then wider by about
half a decade each, up to a prior that barely holds the excited directions."""

OFFSET_GAIN = 0.01
"""A joint keeps its offset only where dropping it raises that joint's cross-validated
RMS by more than this fraction. A simulated arm with no bias on a joint gives differences
of 0.001-0.05 % there, either way; a 0.3 N*m bias on 0.02 N*m of noise, 20-1400 %."""

CV_BLOCKS = 4
"""Folds of a single recording: contiguous blocks (neighbouring samples are correlated, so
rows picked at random would score a fit on samples it nearly saw)."""

ONE_WAY_SHARE = 0.05
"""A joint with fewer of its moving rows than this share in one direction sweeps one way:
its sign(qd) column is then within a few per cent of a constant, and Coulomb friction and
an offset cannot be told apart."""

Part = tuple[np.ndarray, ...]
"""One recording's rows: q, qd, qdd (N, n) [rad, rad/s, rad/s^2], the measured actuated
torque (N, m) [N*m] (NaN: not measured) and the rest band (N, n) [rad/s]."""


@dataclass(frozen=True)
class Selection:
    """The candidate chosen, and every candidate's score.

    Attributes:
        prior_scale: the width factor chosen; offset: whether any offset is fitted.
        offset_joints: (m,) per actuated joint whether its offset is fitted.
        joint_scores: per candidate, (m,) cross-validated RMS per joint [N*m] (NaN: no
            moving, measured row of it was left out).
        folds: how many fits each candidate was scored by; fold_kind: what each left out,
            'recordings' or 'blocks' (of a single recording).
        scores: per candidate (prior_scale, offset, cross-validated RMS [N*m]), in the
            order tried.
    """

    prior_scale: float
    offset: bool
    offset_joints: tuple[bool, ...]
    folds: int
    fold_kind: str
    scores: tuple[tuple[float, bool, float], ...]
    joint_scores: tuple[tuple[float, ...], ...]

    @property
    def terms_offset(self) -> dict:
        """The :class:`~.fit.MeasurementTerms` fields that say which offsets are fitted."""
        if not self.offset:
            return {'offset': False, 'offset_joints': None}
        return {'offset': True, 'offset_joints': None if all(self.offset_joints)
                else self.offset_joints}


def scaled_prior(prior: IdentificationPrior, factor: float) -> IdentificationPrior:
    """``prior`` with every spread multiplied by ``factor`` (> 0)."""
    if not (factor > 0.0 and np.isfinite(factor)):
        raise ValueError(f'a prior width factor must be positive and finite, got {factor}')
    return dataclasses.replace(prior, **{f.name: getattr(prior, f.name) * factor
                                         for f in dataclasses.fields(prior)})


def _folds(model: RobotModel, parts: Sequence[Part]) -> tuple[list[Part], str]:
    """The folds: the recordings with a moving, measured row (one at rest has nothing to
    fit or to score: left out of every fold, it left a fit of it alone raising), or the
    blocks of the only one."""
    moving = [p for p in parts if measured_moving(model, p[1], p[3], p[4]).any()]
    if not moving:
        raise ValueError('cross-validation: no recording has a joint that moves with a '
                         'measured effort')
    if len(moving) >= 2:
        return moving, 'recordings'
    (whole,) = moving
    edges = np.linspace(0, len(whole[0]), CV_BLOCKS + 1).astype(int)
    return [tuple(x[a:b] for x in whole) for a, b in zip(edges[:-1], edges[1:])], 'blocks'


def _stacked(parts: Sequence[Part]) -> Part:
    return tuple(np.concatenate(x) for x in zip(*parts))


def _cv_squares(model: RobotModel, folds: Sequence[Part], prior: IdentificationPrior,
                terms: MeasurementTerms) -> tuple[np.ndarray, np.ndarray]:
    """(m,) squared held-out errors summed over the folds, and (m,) rows scored, per
    actuated joint: each fold left out of a fit on the others, scored on its rows where the
    joint moves with a measured effort."""
    m = int(model.actuated.sum())
    squares, rows = np.zeros(m), np.zeros(m, dtype=np.int64)
    for k, left in enumerate(folds):
        hq, hqd, hqdd, htorque, hband = left
        scored = measured_moving(model, hqd, htorque, hband)
        if not scored.any():
            continue
        q, qd, qdd, torque, band = _stacked([f for i, f in enumerate(folds) if i != k])
        fit = identify(model, q, qd, qdd, torque, rest_band=band, prior=prior, terms=terms)
        error = fit.predict(model, hq, hqd, hqdd) - htorque
        squares += np.sum(np.where(scored, error, 0.0) ** 2, axis=0)
        rows += scored.sum(axis=0)
    return squares, rows


def select_by_cross_validation(model: RobotModel, parts: Sequence[Part], *,
                               prior: IdentificationPrior, terms: MeasurementTerms,
                               scales: Sequence[float] = PRIOR_SCALES,
                               offsets: Sequence[bool] = (False, True)) -> Selection:
    """Choose the prior's width factor and the offsets (module docstring).

    Args:
        model: the nominal robot; parts: the fitted recordings (:data:`Part`), one or more.
        prior: the prior the factors scale; terms: the other optional terms, kept as given
            (their ``offset`` is replaced by each candidate's).
        scales: width factors to try; offsets: with and/or without the offsets.

    Raises:
        ValueError: no parts, no candidates, or no fold with a moving, measured row left out
            (from :func:`~.fit.identify` when a fold leaves nothing to fit).
    """
    if not parts or not scales or not offsets:
        raise ValueError('cross-validation needs recordings and candidates')
    folds, kind = _folds(model, parts)
    candidates = [(float(s), bool(o)) for s in scales for o in offsets]
    scored = [_cv_squares(model, folds, scaled_prior(prior, s),
                          dataclasses.replace(terms, offset=o, offset_joints=None))
              for s, o in candidates]
    squares, rows = np.array([x[0] for x in scored]), scored[0][1]
    if not rows.any():
        raise ValueError('cross-validation: no left-out part has a joint that moves with a '
                         'measured effort')
    rms = np.sqrt(squares.sum(axis=1) / rows.sum())
    best = int(np.argmin(rms))          # the first of equals: narrower, then no offset
    with np.errstate(invalid='ignore', divide='ignore'):
        per_joint = np.sqrt(squares / rows)         # NaN where a joint was never scored
    scale, offset = candidates[best]
    joints = [offset and rows[j] > 0 for j in range(len(rows))]
    if offset and False in offsets:
        # the offsets won together; each is judged with every other joint's in the fit:
        # kept only where dropping it alone raises that joint's own error
        every = per_joint[candidates.index((scale, True))]
        for j in np.flatnonzero(rows):
            mask = tuple(i != j for i in range(len(rows)))
            if any(mask):
                alone, _ = _cv_squares(model, folds, scaled_prior(prior, scale),
                                       dataclasses.replace(terms, offset=True,
                                                           offset_joints=mask))
                without = np.sqrt(alone[j] / rows[j])
            else:
                without = per_joint[candidates.index((scale, False))][j]
            joints[j] = bool(without > (1.0 + OFFSET_GAIN) * every[j])
    return Selection(prior_scale=scale, offset=any(joints),
                     offset_joints=tuple(bool(x) for x in joints),
                     folds=len(folds), fold_kind=kind,
                     scores=tuple((s, o, float(r)) for (s, o), r in zip(candidates, rms)),
                     joint_scores=tuple(tuple(float(x) for x in row) for row in per_joint))


def one_way_joints(model: RobotModel, qd: np.ndarray, torque: np.ndarray, band: np.ndarray
                   ) -> list[dict]:
    """Actuated joints that sweep one way in the fitted rows (:data:`ONE_WAY_SHARE`).

    Args:
        qd: (N, n) [rad/s]; torque: (N, m) measured [N*m] (NaN: not measured); band: rest
            band, scalar, (n,) or (N, n) [rad/s].

    Returns:
        Per such joint {'joint', 'moving_rows', 'positive_share'}: the rows where it moves
        with a measured effort and the share of them at qd > 0.
    """
    velocity = np.asarray(qd)[:, model.actuated]
    moving = measured_moving(model, qd, torque, band)
    out = []
    for k, name in enumerate(model.actuated_names):
        rows = int(moving[:, k].sum())
        if rows == 0:
            continue
        positive = float((velocity[moving[:, k], k] > 0.0).mean())
        if min(positive, 1.0 - positive) < ONE_WAY_SHARE:
            out.append({'joint': name, 'moving_rows': rows, 'positive_share': positive})
    return out
