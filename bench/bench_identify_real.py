"""Identification on a real arm's recordings: the Kinova Gen3 at 1 kHz, timed against the
least-squares peer in the same run.

The split of ``test/test_identify_real.py`` (fitted on ``RecordTrajectory_quadratic``,
``joint_2_trapez`` and ``joint_4_trapez``; scored on ``RunTrajectory1`` and
``Trajectory1``), the torque derived from the motor current as effort, the URDF as
published, a 5 Hz cut-off. Timed, medians of ``--repeat`` runs: reading and estimating the
five recordings (``read_estimated``), ``identify`` (the physically consistent MAP, two
solves and the residual's correlation), and the peer ``fit_peer`` (Pinocchio's regressor,
one call per sample, and ``numpy.linalg.lstsq``); the ratio is ours / the peer's. Then the
held-out RMS over the joints that move for the nominal model, the identified one and the
peer, and the total mass.

``--folds`` adds leave-one-recording-out: each of the five recordings scored by a fit on
the other four, per joint that moves in it, for the nominal model, ours and the peer;
a fold passes when ours cuts the nominal error by 50 % or more over the moving joints and
is within 1.1x the peer on each of them. ``--select`` has each fold choose its prior width
and offsets as ``plag-ros identify --prior-scale auto --offset auto`` does, by
leave-one-recording-out on its own four (nested: the held-out recording plays no part).
``--prior-scale X`` widens the prior of every fold's fit X times (as ``plag-ros identify
--prior-scale X``; ``--select`` chooses it instead). Each fold gives, for ours and the
peer, the joint-space mass matrix's smallest eigenvalue over the recordings' poses (every
50th, armature included; not positive: the model has the arm accelerate against a torque
there). ``--unconstrained`` fits ours as before but without the bodies' constraint (the
same prior and noise level, the MAP a linear solve: bodies no real body can be, friction
and armature of either sign), to measure what physical consistency costs against the
peer; each fold then gives its bodies' smallest pseudo-inertia eigenvalue over the
magnitude of its trace (negative: no mass distribution has it).

``--spectrum`` prints where each recording's motion and torque have their power (the
reason for the 5 Hz cut-off); ``--channels`` the signs that tell a model's output from a
measurement (:mod:`plag_ros.core.identification.channels`: the fit to the measured
states, the noise floor, and the fraction the commanded trajectory leaves unexplained)
for the measured and the model-computed torque columns of every recording, and the first
two for a simulated torque sensor.

The recordings are found under ``$PLAG_SHARED_DATA/real_arms/kinova_gen3`` or
``../shared/data/real_arms/kinova_gen3`` beside the repository.

Usage: ``PYTHONPATH=$PWD python bench/bench_identify_real.py [--repeat 3] [--folds [--select]
[--prior-scale X] [--unconstrained]] [--spectrum] [--channels]``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np
from timing import median_time_s

from plag_ros.apps.identify import Recording
from plag_ros.apps.identify_input import read_estimated
from plag_ros.apps.identify_report import held_out_errors
from plag_ros.core.dynamics.consistency import pseudo_inertia
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig, estimate_offline
from plag_ros.core.identification.channels import explained_fraction, noise_floor
from plag_ros.core.identification.fit import (
    IdentificationPrior,
    MeasurementTerms,
    identify,
    predict,
)
from plag_ros.core.identification.peer import fit_peer
from plag_ros.core.identification.selection import scaled_prior, select_by_cross_validation
from plag_ros.io.table import ColumnMapping, read_table

REPO = Path(__file__).resolve().parents[1]
FITTED = ('RecordTrajectory_quadratic', 'joint_2_trapez', 'joint_4_trapez')
HELD_OUT = ('RunTrajectory1', 'Trajectory1')
CUTOFF_HZ = 5.0


def data_folder() -> Path:
    places = [Path(os.environ['PLAG_SHARED_DATA'])] if os.environ.get('PLAG_SHARED_DATA') \
        else []
    places.append(REPO.parent / 'shared' / 'data')
    for place in places:
        folder = place / 'real_arms' / 'kinova_gen3'
        if folder.is_dir():
            return folder
    sys.exit(f'bench_identify_real: no Kinova recordings under {places}')


def joined(parts) -> Recording:
    """Estimated recordings stacked as plag-ros identify stacks them (each row keeps its
    own recording's rest band)."""
    recording = Recording()
    for part in parts:
        recording.add(part)
    return recording


def held_out(model: RobotModel, ours, peer, held: Recording) -> dict:
    """plag-ros identify's own held-out figures (``held_out_errors``) of the nominal
    model, ours and the peer on ``held``, over the rows where each joint moves."""
    q, qd, qdd, torque = held.arrays()
    moving = np.abs(qd[:, model.actuated]) > held.bands()[:, model.actuated]
    return held_out_errors(model, {
        'nominal': predict(model, q, qd, qdd),
        'identified': ours.predict(model, q, qd, qdd),
        'least_squares': peer.predict(model, q, qd, qdd)}, torque, moving)


def spectrum(folder: Path, model: RobotModel, columns: ColumnMapping) -> None:
    """Velocity power percentiles (a 50 Hz estimate: the motion, not the filter) and the
    torque's power above the cut-off."""
    for name in FITTED + HELD_OUT:
        table = read_table(folder / f'{name}.csv.gz', columns, model)
        qd = estimate_offline(table.t_ns, table.q, EstimatorConfig(
            rate_hz=table.rate_hz, cutoff_hz=50.0)).qd
        frequency = np.fft.rfftfreq(len(qd), 1.0 / table.rate_hz)
        power = np.cumsum((np.abs(np.fft.rfft(qd - qd.mean(0), axis=0)) ** 2).sum(1))
        effort = table.effort[:, model.actuated]
        torque = np.cumsum((np.abs(np.fft.rfft(effort - effort.mean(0), axis=0)) ** 2).sum(1))
        below = {p: frequency[np.searchsorted(power, p * power[-1])] for p in (0.95, 0.99)}
        above = 1.0 - torque[np.searchsorted(frequency, CUTOFF_HZ)] / torque[-1]
        print(f'{name:28s} velocity power: 95 % below {below[0.95]:5.2f} Hz, 99 % below '
              f'{below[0.99]:5.2f} Hz; torque power above {CUTOFF_HZ:g} Hz: {above:.1%}')


def channels(folder: Path, model: RobotModel, columns: ColumnMapping) -> None:
    """Explained fraction and noise floor per recording and torque column."""
    for name in FITTED + HELD_OUT:
        for column in ('TorqueCur{index}', 'Torque{index}'):
            mapping = dataclasses.replace(columns, effort=column)
            table = read_table(folder / f'{name}.csv.gz', mapping, model)
            effort = table.effort[:, model.actuated]
            if not effort.any():
                print(f'{name:28s} {column:18s} all zero')
                continue
            q, qd, qdd = estimate_offline(table.t_ns, table.q, EstimatorConfig(
                rate_hz=table.rate_hz, cutoff_hz=CUTOFF_HZ))
            joints = np.arange(effort.shape[1])
            assert table.commanded is not None          # the mapping maps the reference
            exact = explained_fraction(model, *table.commanded, effort, joints)
            print(f'{name:28s} {column:18s} unexplained '
                  f'{explained_fraction(model, q, qd, qdd, effort, joints):6.1%}, noise '
                  f'floor {noise_floor(effort):7.3%}; from the commanded trajectory '
                  f'{exact:.1e}')
    crane = RobotModel.from_urdf(default_urdf_path())
    t = np.arange(0.0, 10.0, 0.005)
    q = np.zeros((len(t), crane.n_joints))
    qd, qdd = np.zeros_like(q), np.zeros_like(q)
    for j in range(4):
        w = 2 * np.pi * (0.2 + 0.1 * j)
        q[:, j], qd[:, j], qdd[:, j] = (0.5 * np.sin(w * t), 0.5 * w * np.cos(w * t),
                                        -0.5 * w * w * np.sin(w * t))
    sensor = predict(crane, q, qd, qdd) + np.random.default_rng(0).normal(
        0.0, 0.02, (len(t), int(crane.actuated.sum())))
    joints = np.arange(4)
    print(f'{"simulated torque sensor":28s} {"(CRANE-X7, 0.02)":18s} unexplained '
          f'{explained_fraction(crane, q, qd, qdd, sensor, joints):6.1%}, noise floor '
          f'{noise_floor(sensor[:, joints]):7.3%}')


def linear_map(R, c, x0, scale, lower, B, sigma) -> np.ndarray:
    """``consistent_map``'s objective without its constraints: the linear MAP."""
    return np.linalg.solve(R.T @ R / sigma ** 2 + np.diag(scale ** -2.0),
                           R.T @ c / sigma ** 2 + x0 / scale ** 2)


@contextlib.contextmanager
def unconstrained():
    """``identify`` with :func:`linear_map` in place of its constrained solve (both of
    its passes), for ``--unconstrained``."""
    from plag_ros.core.identification import fit

    solve = fit.consistent_map
    fit.consistent_map = linear_map
    try:
        yield
    finally:
        fit.consistent_map = solve


def mass_matrix_eigenvalues(model: RobotModel, fitted, poses: np.ndarray) -> np.ndarray:
    """(P,) the smallest eigenvalue [kg*m^2] of the actuated joints' mass matrix of the
    ``fitted`` figures (anything with ``predict``: bodies and armature) at each (P, n)
    pose: its columns are the torque of a unit acceleration of each actuated joint (its
    mimic joints following) at rest, less that of none."""
    G, _ = actuation_matrix(model)
    unit = G.T                                   # (m, n): one actuated joint each
    at_rest = np.zeros_like(unit)
    lowest = []
    for pose in poses:
        q = np.repeat(pose[None], len(unit), axis=0)
        M = (fitted.predict(model, q, at_rest, unit)
             - fitted.predict(model, q, at_rest, at_rest)).T
        lowest.append(np.linalg.eigvalsh(0.5 * (M + M.T))[0])
    return np.array(lowest)


def folds(model: RobotModel, recordings: dict, select: bool, free: bool = False,
          prior_scale: float = 1.0) -> None:
    """Leave-one-recording-out (module docstring): a line per fold, its mass matrices,
    then per joint."""
    act = list(model.actuated_names)
    print(f'leave-one-recording-out ({len(recordings)} folds), held-out RMS [N*m] over the '
          'rows where each joint moves: nominal / identified / least squares'
          + ('; prior width and offsets chosen on the other four' if select else '')
          + ("; ours without the bodies' constraint" if free else '')
          + (f'; prior x{prior_scale:g}' if prior_scale != 1.0 else ''))
    poses = np.concatenate([r.q for r in recordings.values()])[::50]
    passed = 0
    for name, held in recordings.items():
        fitted = joined(r for other, r in recordings.items() if other != name)
        q, qd, qdd, torque = fitted.arrays()
        prior, terms = scaled_prior(IdentificationPrior(), prior_scale), MeasurementTerms()
        with unconstrained() if free else contextlib.nullcontext():
            if select:
                # plag-ros identify --prior-scale auto --offset auto on the four, nested
                choice = select_by_cross_validation(
                    model, list(zip(fitted.q, fitted.qd, fitted.qdd, fitted.torque,
                                    fitted.band)), prior=prior, terms=terms)
                prior = scaled_prior(prior, choice.prior_scale)
                terms = MeasurementTerms(**choice.terms_offset)
                offsets = [a for a, on in zip(act, choice.offset_joints) if on]
                print(f'  {name}: chose prior x{choice.prior_scale:g}, offsets on '
                      f'{", ".join(offsets) if offsets else "no joint"}')
            ours = identify(model, q, qd, qdd, torque, rest_band=fitted.bands(),
                            prior=prior, terms=terms)
        peer = fit_peer(model, q, qd, qdd, torque, rest_band=fitted.bands())
        errors = held_out(model, ours, peer, joined([held]))
        overall = errors['over_moving_joints']
        moved = [k for k in range(len(act)) if errors['nominal'][k] is not None]
        ratios = [errors['identified'][k] / errors['least_squares'][k] for k in moved]
        cut = 1.0 - overall['identified'] / overall['nominal']
        ok = cut >= 0.5 and max(ratios) <= 1.1
        passed += ok
        print(f'  {name:28s} {overall["nominal"]:6.3f} / {overall["identified"]:6.3f} / '
              f'{overall["least_squares"]:6.3f} ({cut:.0%} less; worst joint '
              f'{max(ratios):.2f}x the peer) {"pass" if ok else "FAIL"}')
        if free:
            J = pseudo_inertia(ours.inertial)
            smallest = np.linalg.eigvalsh(J)[:, 0] / np.abs(np.trace(J, axis1=-2, axis2=-1))
            print("    bodies' smallest pseudo-inertia eigenvalue / |trace|: "
                  + ', '.join(f'{v:+.0%}' for v in smallest))
        for who, fit in (('ours', ours), ('the peer', peer)):
            lowest = mass_matrix_eigenvalues(model, fit, poses)
            print(f'    mass matrix of {who}: smallest eigenvalue {lowest.min():+.3f} '
                  f'kg*m^2, not positive at {(lowest <= 0.0).sum()} of {len(poses)} poses')
        for k in moved:
            print(f'    {act[k]:26s} {errors["nominal"][k]:6.3f} / {errors["identified"][k]:6.3f}'
                  f' / {errors["least_squares"][k]:6.3f} ({ratios[moved.index(k)]:.2f}x)')
    print(f'folds passed: {passed} of {len(recordings)}')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--folds', action='store_true')
    parser.add_argument('--select', action='store_true',
                        help='--folds: each fold chooses its prior width and offsets by '
                             'cross-validation on its four recordings')
    parser.add_argument('--prior-scale', type=float, default=1.0,
                        help='--folds: the prior width factor of every fold (not with '
                             '--select, which chooses it)')
    parser.add_argument('--unconstrained', action='store_true',
                        help="--folds: ours without the bodies' constraint (a diagnosis: "
                             'what physical consistency costs against the peer)')
    parser.add_argument('--spectrum', action='store_true')
    parser.add_argument('--channels', action='store_true')
    args = parser.parse_args()
    if args.select and args.prior_scale != 1.0:
        parser.error('--prior-scale is a fixed width; --select chooses one (give one of them)')
    folder = data_folder()
    model = RobotModel.from_urdf(folder / 'kinovaGen3.urdf')
    columns = ColumnMapping.from_yaml(REPO / 'config' / 'columns' / 'kinova_gen3.yaml')
    print(f'bench_identify_real: Kinova Gen3 ({model.n_joints} joints), {os.cpu_count()} '
          f'CPUs, load average {os.getloadavg()[0]:.2f}')
    if args.spectrum:
        spectrum(folder, model, columns)
    if args.channels:
        channels(folder, model, columns)

    def read(names):
        return [read_estimated(model, folder / f'{name}.csv.gz', columns=columns,
                               cutoff_hz=CUTOFF_HZ) for name in names]

    reading = median_time_s(lambda: read(FITTED + HELD_OUT), args.repeat)
    fitted, held = read(FITTED), read(HELD_OUT)
    training = joined(fitted)
    band = training.bands()
    q, qd, qdd, torque = training.arrays()
    results = {}

    def ours() -> None:
        results['identified'] = identify(model, q, qd, qdd, torque, rest_band=band)

    def peer() -> None:
        results['peer'] = fit_peer(model, q, qd, qdd, torque, rest_band=band)

    ours_s = median_time_s(ours, args.repeat)
    peer_s = median_time_s(peer, args.repeat)
    print(f'read and estimate {len(FITTED) + len(HELD_OUT)} recordings '
          f'({sum(len(r.q) for r in fitted + held)} samples): {reading:.2f} s')
    print(f'identify on {len(q)} samples: {ours_s:.2f} s; least-squares peer (Pinocchio '
          f'regressor + lstsq): {peer_s:.2f} s; ratio {ours_s / peer_s:.2f}')
    # the report's own figure (plag-ros identify's held_out_rms), not one of the bench's
    overall = held_out(model, results['identified'], results['peer'],
                       joined(held))['over_moving_joints']
    nominal, identified, least = (overall[k] for k in ('nominal', 'identified',
                                                       'least_squares'))
    mass = results['identified'].inertial[:, 0].sum()
    print(f'held-out RMS over the moving joints: nominal {nominal:.3f}, identified '
          f'{identified:.3f} ({1 - identified / nominal:.0%} less), least squares '
          f'{least:.3f} N*m (identified / least squares {identified / least:.2f}); total '
          f'mass {model.body_mass.sum():.3f} -> {mass:.3f} kg '
          f'({mass / model.body_mass.sum() - 1:+.0%})')
    if args.folds:
        folds(model, dict(zip(FITTED + HELD_OUT, fitted + held)), args.select,
              args.unconstrained, args.prior_scale)
    print(f'finished {time.strftime("%Y-%m-%d %H:%M:%S")}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
