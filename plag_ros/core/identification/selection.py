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
the offsets) is fitted leaving out one recording at a time (a single recording: each of
:data:`CV_BLOCKS` contiguous blocks of it) and scored on the one left out, over the rows
where a joint moves with a measured effort; the candidate with the lowest mean squared
error over all those rows wins; a tie goes to the narrower prior, then to no offset.
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
    rest_band_rows,
)

__all__ = ['CV_BLOCKS', 'ONE_WAY_SHARE', 'PRIOR_SCALES', 'Part', 'Selection',
           'one_way_joints', 'scaled_prior', 'select_by_cross_validation']

PRIOR_SCALES = (1.0, 3.0, 10.0, 100.0)
"""Width factors tried for ``--prior-scale auto``: the URDF's prior, then wider by about
half a decade each, up to a prior that barely holds the excited directions."""

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
        prior_scale: the width factor chosen; offset: whether the offsets are fitted.
        folds: how many fits each candidate was scored by; fold_kind: what each left out,
            'recordings' or 'blocks' (of a single recording).
        scores: per candidate (prior_scale, offset, cross-validated RMS [N*m]), in the
            order tried.
    """

    prior_scale: float
    offset: bool
    folds: int
    fold_kind: str
    scores: tuple[tuple[float, bool, float], ...]


def scaled_prior(prior: IdentificationPrior, factor: float) -> IdentificationPrior:
    """``prior`` with every spread multiplied by ``factor`` (> 0)."""
    if not (factor > 0.0 and np.isfinite(factor)):
        raise ValueError(f'a prior width factor must be positive and finite, got {factor}')
    return dataclasses.replace(prior, **{f.name: getattr(prior, f.name) * factor
                                         for f in dataclasses.fields(prior)})


def _folds(parts: Sequence[Part]) -> tuple[list[Part], str]:
    if len(parts) >= 2:
        return list(parts), 'recordings'
    (whole,) = parts
    edges = np.linspace(0, len(whole[0]), CV_BLOCKS + 1).astype(int)
    return [tuple(x[a:b] for x in whole) for a, b in zip(edges[:-1], edges[1:])], 'blocks'


def _stacked(parts: Sequence[Part]) -> Part:
    return tuple(np.concatenate(x) for x in zip(*parts))


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
    folds, kind = _folds(parts)
    candidates = [(float(s), bool(o)) for s in scales for o in offsets]
    squares = np.zeros(len(candidates))
    rows = 0
    for k, left in enumerate(folds):
        q, qd, qdd, torque, band = _stacked([f for i, f in enumerate(folds) if i != k])
        hq, hqd, hqdd, htorque, hband = left
        act = model.actuated
        scored = (np.abs(hqd[:, act]) > rest_band_rows(model, hband, len(hqd))) \
            & np.isfinite(htorque)
        if not scored.any():
            continue
        rows += int(scored.sum())
        for c, (scale, offset) in enumerate(candidates):
            fit = identify(model, q, qd, qdd, torque, rest_band=band,
                           prior=scaled_prior(prior, scale),
                           terms=dataclasses.replace(terms, offset=offset))
            error = fit.predict(model, hq, hqd, hqdd) - htorque
            squares[c] += float(np.sum(np.where(scored, error, 0.0) ** 2))
    if rows == 0:
        raise ValueError('cross-validation: no left-out part has a joint that moves with a '
                         'measured effort')
    rms = np.sqrt(squares / rows)
    best = int(np.argmin(rms))          # the first of equals: narrower, then no offset
    return Selection(prior_scale=candidates[best][0], offset=candidates[best][1],
                     folds=len(folds), fold_kind=kind,
                     scores=tuple((s, o, float(r)) for (s, o), r in zip(candidates, rms)))


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
    act = np.flatnonzero(model.actuated)
    velocity = np.asarray(qd)[:, act]
    moving = (np.abs(velocity) > rest_band_rows(model, band, len(velocity))) \
        & np.isfinite(torque)
    out = []
    for k, name in enumerate(model.actuated_names):
        rows = int(moving[:, k].sum())
        if rows == 0:
            continue
        positive = float((velocity[moving[:, k], k] > 0.0).mean())
        if min(positive, 1.0 - positive) < ONE_WAY_SHARE:
            out.append({'joint': name, 'moving_rows': rows, 'positive_share': positive})
    return out
