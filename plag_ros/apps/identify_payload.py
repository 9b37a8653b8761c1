"""The payload runs of ``plag-ros identify``: a payload fitted with the arm held, and the
driver's effort scale (and so each servo's torque constant) from a payload of known mass.

A wrong effort-to-torque factor looks exactly like wrong masses to an identification
(both scale the torque), so the arm's own recordings cannot tell them apart; a payload of
known mass and COM can (docs/tutorials/identify.md, "The driver's effort scale").
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.identification.drive import EFFORT_SCALE_PRIOR, EffortScaleFit
from plag_ros.core.identification.fit import (
    HELD,
    IdentificationPrior,
    Identified,
    predict,
)
from plag_ros.io.bag import BagError, read_trajectory_commands

__all__ = ['effort_scale_section', 'known_payload_model', 'payload_difference',
           'torque_constant_comparison', 'with_payload_prior']


def with_payload_prior(model: RobotModel, link: str, mass: float
                       ) -> tuple[RobotModel, int, dict[int, IdentificationPrior]]:
    """``model`` with a payload body on ``link`` (a first guess: ``mass`` at the link's
    origin, a 2 cm sphere), its index, and the priors that hold every other body and
    leave the payload free (mass within about 1 kg, COM within about 10 cm).

    Raises:
        ValueError: an unknown or unmoving link, a mass that is not positive.
    """
    if not mass > 0.0:
        raise ValueError(f'--payload-mass must be positive, got {mass}')
    guess = model.with_payload('payload', link=link, mass=mass, com=(0.0, 0.0, 0.0),
                               inertia=np.eye(3) * 0.4 * mass * 0.02 ** 2)
    body = guess.n_bodies - 1
    priors = {b: HELD for b in range(body)}
    priors[body] = IdentificationPrior(mass=1.0 / mass, com=0.1 / mass, inertia=100.0)
    return guess, body, priors


def known_payload_model(model: RobotModel, link: str, mass: float, com: list[float],
                        inertia: list[float] | None) -> RobotModel:
    """``model`` with a known payload on ``link``: ``mass`` [kg] at ``com`` (3,) [m] in the
    link's frame, principal inertia ``inertia`` (3,) [kg*m^2] about the COM along the link's
    axes (None: a solid sphere of 1 cm radius, as good as a point mass).

    Raises:
        ValueError: an unknown or unmoving link, a mass that is not positive.
    """
    if mass is None or not mass > 0.0:
        raise ValueError("--effort-scale needs the payload's --payload-mass [kg] (weigh it)")
    principal = [0.4 * mass * 0.01 ** 2] * 3 if inertia is None else inertia
    return model.with_payload('payload', link=link, mass=mass, com=tuple(com),
                              inertia=np.diag(principal))


def _excitation_commands(bag: Path) -> list[tuple[np.ndarray, float]]:
    """(positions (P, J) in name-sorted joint order, time of the first point [s]) of every
    trajectory command of ``bag`` with more than one point: what identifies a replay of
    the same trajectory (the approach to its first point, which depends on where the arm
    was, is left out)."""
    out = []
    for msg in read_trajectory_commands(bag):
        if len(msg.times) < 2:
            continue
        order = np.argsort(msg.joint_names)
        out.append((msg.positions[:, order], msg.start_ns * 1e-9 + float(msg.times[0])))
    return out


def payload_difference(model: RobotModel, loaded: RobotModel, arm: Identified,
                       with_payload: tuple, bag: Path, references: dict[Path, tuple],
                       band: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The inputs of :func:`~plag_ros.core.identification.drive.identify_effort_scale` from a
    recording with the payload on.

    The recording's trajectory command must also have been played without the payload in
    one of ``references`` (the same points, for as many cycles or more or fewer:
    ``plag-ros excite --play`` of the same file); rows are matched by time since the first
    point, over the trajectory proper and the time both runs cover.

    Args:
        model: the arm; loaded: the arm with the known payload; arm: the identified arm
            (its torque at each run's own states is subtracted from that run).
        with_payload: (q, qd, qdd, torque, t) of ``bag``; references: bag ->
            (q, qd, qdd, torque, t) of the recordings without the payload.
        band: (n,) rest band [rad/s]: rows where a joint rests are left out.

    Returns:
        (payload torque, difference, rows), each (N, m) over the actuated joints.

    Raises:
        BagError: ``bag`` has no trajectory command of more than one point; ValueError: no
            reference played its trajectory.
    """
    q, qd, qdd, torque, t = with_payload
    commands = _excitation_commands(bag)
    if not commands:
        raise BagError(f'{bag}: no trajectory command of more than one point (record the '
                       'excitation with plag-ros record)')
    positions, first = commands[-1]
    match = None
    for ref, recording in references.items():
        for ref_positions, ref_first in _excitation_commands(ref):
            common = min(len(ref_positions), len(positions))
            if ref_positions.shape[1:] == positions.shape[1:] and np.allclose(
                    ref_positions[:common], positions[:common], rtol=0.0, atol=1e-9):
                match = (recording, ref_first)
    if match is None:
        raise ValueError(f'{bag}: none of {[str(b) for b in references]} plays its '
                         'trajectory: record the same excitation without the payload')
    (rq, rqd, rqdd, rtorque, rt), ref_first = match
    since, ref_since = t - first, rt - ref_first
    overlap = (since >= 0.0) & (since <= min(ref_since.max(), since.max()))
    act = model.actuated
    residual = rtorque - arm.predict(model, rq, rqd, rqdd)
    unexplained = torque - arm.predict(model, q, qd, qdd)
    difference = np.column_stack([
        unexplained[:, k] - np.interp(since, ref_since, residual[:, k])
        for k in range(residual.shape[1])])
    payload = predict(loaded, q, qd, qdd) - predict(model, q, qd, qdd)
    rows = overlap[:, None] & (np.abs(qd[:, act]) > band[act])
    return payload, difference, rows


def effort_scale_section(model: RobotModel, fit: EffortScaleFit, bag: Path,
                         payload: dict) -> dict:
    """The ``effort_scale`` section of identified.yaml: per actuated joint the factor on
    the driver's effort-to-torque conversion (the model's calibration so far times the
    fitted correction)."""
    before = np.ones(model.n_joints) if model.effort_calibration is None \
        else model.effort_calibration
    before = before[model.actuated]
    return {'bag': str(bag), 'payload': payload,
            'model': 'torque = scale * effort * torque_constant / current_to_effort',
            'prior_std': EFFORT_SCALE_PRIOR,
            'joints': [{'joint': name, 'scale': float(before[k] * fit.scale[k]),
                        'scale_std': float(before[k] * fit.scale_std[k]),
                        'estimate': float(before[k] * fit.estimate[k]),
                        'estimate_std': float(before[k] * fit.estimate_std[k]),
                        'excited': bool(fit.excited[k]),
                        'payload_torque_rms': float(fit.payload_torque_rms[k]),
                        'residual_rms': float(fit.residual_rms[k]),
                        'samples': int(fit.samples[k]),
                        **torque_constant_comparison(name, before[k] * fit.scale[k],
                                                     before[k] * fit.scale_std[k])}
                       for k, name in enumerate(model.actuated_names)]}


def torque_constant_comparison(joint: str, scale: float, scale_std: float) -> dict:
    """The servo's torque constant the effort scale implies [N*m/A], with its standard
    error, and which of the two published figures it is closer to, in standard errors:
    the data sheet's stall torque over stall current (the motor table's, which the scale
    multiplies) or the CRANE-X7 driver's ``current_to_effort``. Empty for a joint that is
    not in the motor table."""
    if not motors.known([joint]):
        return {}
    motor = motors.motor_of(joint)
    constant = float(scale * motor.torque_constant)
    std = float(scale_std * motor.torque_constant)
    published = {'data_sheet': float(motor.torque_constant),
                 'driver': float(motor.current_to_effort)}
    distance = {name: abs(constant - value) / max(std, 1e-12)
                for name, value in published.items()}
    closer = min(distance, key=lambda name: distance[name])
    return {'torque_constant': constant, 'torque_constant_std': std,
            'published_torque_constants': published,
            'closer_to': closer, 'standard_errors_from': distance}
