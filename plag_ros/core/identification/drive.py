"""The drive's own figures from recordings, beside the arm's (:mod:`.fit`): each servo's
position-loop stiffness ``K_s`` (from the commanded and the measured positions), and each
joint's effort scale (from an excitation played with and without a known payload).
Small linear fits, one per joint, with their standard errors.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ['EFFORT_SCALE_PRIOR', 'EffortScaleFit', 'ServoFit', 'identify_effort_scale',
           'identify_servo']


@dataclass(frozen=True)
class ServoFit:
    """Per joint, the servo's position loop fitted by :func:`identify_servo`, (J,) each.

    Attributes:
        stiffness: K_s [N*m/rad]; stiffness_std: its standard error.
        damping: D [N*m*s/rad], the velocity term: the servo's own damping plus K_s times
            any delay between the recorded command and the one the servo acted on.
        offset: c [N*m], a constant torque (an encoder or gravity-model offset).
        samples: rows fitted per joint; residual_rms [N*m]; deflection_rms: RMS of
            q_cmd - q over those rows [rad].
    """

    stiffness: np.ndarray
    stiffness_std: np.ndarray
    damping: np.ndarray
    offset: np.ndarray
    samples: np.ndarray
    residual_rms: np.ndarray
    deflection_rms: np.ndarray


def identify_servo(torque: np.ndarray, deflection: np.ndarray, velocity: np.ndarray, *,
                   moving: np.ndarray | None = None) -> ServoFit:
    """Fit each joint's position loop ``torque = K_s (q_cmd - q) - D qd + c``.

    The torque is the model's (the identified inertial parameters, friction and armature
    at the estimated states): a position servo's output is the torque the joint needs, and
    ``q_cmd - q`` is how far the servo had to be pulled to give it. The gravity load at
    rest poses and the inertial and friction torques in motion both pull, so every joint
    that moves is fitted, not only those gravity loads. The measured effort enters only
    through the model, which was fitted to it: an error in the driver's effort scale is an
    error of the same size in K_s until the scale is identified
    (:func:`identify_effort_scale`) and the model refitted in true torque.

    Args:
        torque: (N, J) model torque [N*m]; deflection: (N, J) commanded minus measured
            position [rad]; velocity: (N, J) [rad/s].
        moving: (N, J) rows to fit per joint (default all): leave out a joint at rest,
            whose stick friction pulls the servo by an amount no model knows.

    Raises:
        ValueError: shapes that differ, or a joint with fewer than 10 rows.
    """
    torque, deflection, velocity = (np.asarray(x, dtype=np.float64)
                                    for x in (torque, deflection, velocity))
    if not (torque.shape == deflection.shape == velocity.shape) or torque.ndim != 2:
        raise ValueError(f'identify_servo needs (N, J) arrays of one shape, got '
                         f'{torque.shape}, {deflection.shape}, {velocity.shape}')
    N, J = torque.shape
    rows = np.ones((N, J), dtype=bool) if moving is None else np.asarray(moving, dtype=bool)
    out = np.zeros((6, J))
    for j in range(J):
        r = rows[:, j]
        if r.sum() < 10:
            raise ValueError(f'joint {j} moves in {int(r.sum())} samples: too few to fit '
                             'its servo')
        X = np.column_stack([deflection[r, j], -velocity[r, j], np.ones(int(r.sum()))])
        coef, *_ = np.linalg.lstsq(X, torque[r, j], rcond=None)
        residual = torque[r, j] - X @ coef
        sigma2 = float(residual @ residual) / max(len(residual) - 3, 1)
        covariance = sigma2 * np.linalg.pinv(X.T @ X)
        out[:, j] = (coef[0], np.sqrt(covariance[0, 0]), coef[1], coef[2],
                     np.sqrt(np.mean(residual ** 2)), np.sqrt(np.mean(deflection[r, j] ** 2)))
    return ServoFit(stiffness=out[0], stiffness_std=out[1], damping=out[2], offset=out[3],
                    samples=rows.sum(axis=0), residual_rms=out[4], deflection_rms=out[5])


EFFORT_SCALE_PRIOR = 0.2
"""1-sigma relative spread of the driver's effort-to-torque conversion before any data:
the CRANE-X7 driver's ``current_to_effort`` is of undocumented origin and the servos'
torque-current curves vary (:mod:`plag_ros.core.dynamics.motors`)."""


@dataclass(frozen=True)
class EffortScaleFit:
    """Per joint, the correction of the driver's effort scale by :func:`identify_effort_scale`,
    (J,) each.

    Attributes:
        scale: the factor to apply to the effort-to-torque conversion (the posterior: 1,
            the conversion as it was, where the data say nothing); scale_std: its standard
            deviation.
        estimate, estimate_std: what the data alone give (NaN where they give nothing);
            the standard error is a delete-one-block jackknife over contiguous blocks, so
            slowly varying model errors count, not only the sample noise.
        excited: the data cut the prior's spread at least in half (as for
            :class:`Identified`).
        payload_torque_rms: RMS of the payload's torque over the fitted rows [N*m]: how
            much the recording loaded the joint; residual_rms [N*m]; samples: rows fitted.
    """

    scale: np.ndarray
    scale_std: np.ndarray
    estimate: np.ndarray
    estimate_std: np.ndarray
    excited: np.ndarray
    payload_torque_rms: np.ndarray
    residual_rms: np.ndarray
    samples: np.ndarray


def identify_effort_scale(payload_torque: np.ndarray, difference: np.ndarray, *,
                          rows: np.ndarray | None = None, blocks: int = 10,
                          prior_std: float = EFFORT_SCALE_PRIOR) -> EffortScaleFit:
    """Fit each joint's effort scale ``s`` from a known payload: ``s * difference =
    payload_torque``.

    A wrong effort-to-torque factor looks exactly like wrong masses to an identification
    (both scale the torque), so the arm's own recordings cannot tell them apart; a payload
    of known mass and COM can. ``difference`` is what the payload adds to the measured
    torque: the run with it minus a run of the same trajectory without it, at the same
    trajectory time, each less the arm model's torque at its own states. Subtracting the
    run without the payload removes the arm model's own errors, which would otherwise
    correlate with the payload's (mostly gravity) torque and bias the scale by several
    percent; subtracting the model at each run's states removes what differs between the
    runs' states (the servos sag under the payload).

    The scale is fitted as ``1/g`` of the least-squares slope ``difference = g *
    payload_torque`` and combined with the prior ``N(1, prior_std^2)``.

    Args:
        payload_torque: (N, J) the payload's torque at the run's states [N*m] (the model
            with the payload minus the model without it).
        difference: (N, J) [N*m in the conversion in use], see above.
        rows: (N, J) rows to fit per joint (default all): leave out a joint at rest,
            whose stick friction differs between the runs by an amount no model knows.
        blocks: contiguous blocks of the jackknife.
        prior_std: see :data:`EFFORT_SCALE_PRIOR`.

    Raises:
        ValueError: shapes that differ, fewer than 2 blocks, a prior that is not positive.
    """
    x, y = (np.asarray(a, dtype=np.float64) for a in (payload_torque, difference))
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f'identify_effort_scale needs (N, J) arrays of one shape, got '
                         f'{x.shape}, {y.shape}')
    if blocks < 2 or not prior_std > 0.0:
        raise ValueError(f'need at least 2 blocks and a positive prior, got {blocks}, {prior_std}')
    N, J = x.shape
    use = np.ones((N, J), dtype=bool) if rows is None else np.asarray(rows, dtype=bool)
    estimate, estimate_std = np.full(J, np.nan), np.full(J, np.nan)
    payload_rms, residual_rms = np.zeros(J), np.full(J, np.nan)
    samples = np.zeros(J, dtype=int)
    for j in range(J):
        r = np.flatnonzero(use[:, j] & np.isfinite(x[:, j]) & np.isfinite(y[:, j]))
        samples[j] = len(r)
        if len(r) < 2 * blocks:
            continue
        xj, yj = x[r, j], y[r, j]
        payload_rms[j] = np.sqrt(np.mean(xj ** 2))
        xy, xx = xj * yj, xj * xj
        slope = xy.sum() / xx.sum() if xx.sum() > 0.0 else np.nan
        if np.isfinite(slope):
            residual_rms[j] = np.sqrt(np.mean((yj - slope * xj) ** 2))
        edges = np.linspace(0, len(r), blocks + 1).astype(int)
        sxy, sxx = (np.add.reduceat(v, edges[:-1]) for v in (xy, xx))
        with np.errstate(divide='ignore', invalid='ignore'):
            left_out = 1.0 / ((xy.sum() - sxy) / (xx.sum() - sxx))
        if not (slope > 0.0 and np.all(np.isfinite(left_out)) and np.all(left_out > 0.0)):
            continue                               # the payload does not load this joint
        estimate[j] = 1.0 / slope
        estimate_std[j] = np.sqrt((blocks - 1) / blocks * np.sum((left_out - left_out.mean())**2))
    found = np.isfinite(estimate) & (estimate_std > 0.0)
    precision = np.where(found, 1.0 / np.where(found, estimate_std, 1.0) ** 2, 0.0)
    prior_precision = 1.0 / prior_std ** 2
    scale = (np.where(found, estimate, 0.0) * precision + prior_precision) \
        / (precision + prior_precision)
    scale_std = 1.0 / np.sqrt(precision + prior_precision)
    return EffortScaleFit(scale=scale, scale_std=scale_std, estimate=estimate,
                          estimate_std=estimate_std, excited=scale_std <= 0.5 * prior_std,
                          payload_torque_rms=payload_rms, residual_rms=residual_rms,
                          samples=samples)
