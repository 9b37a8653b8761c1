"""``plag-ros identify RECORDING... -o OUT``: the arm's inertial parameters, friction and
armature from its recordings.

A recording is a bag (the driver's ``joint_states``; its ``effort`` becomes motor torque
through the motor table, :func:`plag_ros.core.dynamics.motors.effort_to_torque`) or a table
(CSV, gzip CSV, Parquet, read through ``--columns MAPPING``: docs/howto/tabular-recordings.md).
Each is estimated at its own rate, its effort filtered as its states, its effort channels
audited and its effort's delay estimated (:mod:`plag_ros.apps.identify_input`). Any URDF is
accepted: a body no real body can be is named and the fit starts from the nearest
consistent one. The fit is :func:`plag_ros.core.identification.fit.identify` (the URDF as
prior, every body physically consistent, the optional terms ``--offset``, ``--stribeck``,
``--load-friction``). The held-out data are the ``--holdout`` recordings, else the last
``--holdout-fraction`` of each; on them the nominal, the identified and a least-squares
peer on Pinocchio's regressor are compared per joint that moves
(:mod:`plag_ros.apps.identify_report`).

``--effort-scale BAG`` corrects the driver's effort-to-torque conversion per joint: BAG
plays one of the fitted excitations again with a known payload on the gripper
(``--payload-mass``, ``--payload-com``, ``--payload-inertia``); the payload's torque against
what it added to the measured torque (the run without it subtracted at the same trajectory
time) gives each joint's scale (:func:`~plag_ros.core.identification.drive.identify_effort_scale`),
and the arm is fitted again in true torque. The factors go into ``identified.yaml``
(``effort_scale``) and from there into every reader of the driver's effort; the report
also says which of the servo's two published torque constants the result is closer to.

Written to OUT:

* ``identified.yaml``: per body mass, COM and inertia about the COM in its joint frame,
  with standard errors and whether the data excite them; per actuated joint each fitted
  term; the model checks, the recordings (rate, channels left out, delay), the held-out
  errors of the three models, how believable the figures are, and the provenance;
* ``identified.urdf``: the nominal URDF with each body's figures on its link (links lumped
  into it by fixed joints lose theirs, so the dynamics are the same) and the joints'
  ``damping``/``friction``; armature has no URDF element and is in the yaml only;
* ``held_out.png``: measured against predicted torque per joint, for the three models.

Exit codes: 0, 2 on a recording or input error (no effort, nothing moving).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

from plag_ros.apps.identify_input import Estimated, read_estimated
from plag_ros.apps.identify_payload import (
    effort_scale_section,
    known_payload_model,
    payload_difference,
    with_payload_prior,
)
from plag_ros.apps.identify_report import write_report, write_urdf
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.consistency import inertia_findings
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import (
    ModelParameters,
    apply_model_parameters,
    load_model_parameters,
)
from plag_ros.core.identification.channels import parse_declared
from plag_ros.core.identification.consistent_map import FitNotSolved
from plag_ros.core.identification.drive import identify_effort_scale, identify_servo
from plag_ros.core.identification.fit import (
    IdentificationPrior,
    Identified,
    MeasurementTerms,
    identify,
    measured_moving,
)
from plag_ros.core.identification.peer import fit_peer
from plag_ros.core.identification.selection import (
    CV_BLOCKS,
    PRIOR_SCALES,
    one_way_joints,
    scaled_prior,
    select_by_cross_validation,
)
from plag_ros.core.simulation.joint_trajectory import TrajectoryCommand
from plag_ros.io.bag import BagError, read_trajectory_commands
from plag_ros.io.table import ColumnMapping

__all__ = ['configure', 'run']


class Recording:
    """Estimated states, measured actuated torque and the rest band of one or more
    recordings (rows stacked; each row keeps its own recording's band)."""

    def __init__(self) -> None:
        self.q: list[np.ndarray] = []
        self.qd: list[np.ndarray] = []
        self.qdd: list[np.ndarray] = []
        self.torque: list[np.ndarray] = []
        self.band: list[np.ndarray] = []

    def add(self, part: Estimated) -> None:
        for store, value in ((self.q, part.q), (self.qd, part.qd), (self.qdd, part.qdd),
                             (self.torque, part.torque),
                             (self.band, np.broadcast_to(part.band, part.q.shape))):
            store.append(value)

    def bands(self) -> np.ndarray:
        """(N, n) the rest band of each row [rad/s]."""
        return np.concatenate(self.band)

    def rescale(self, scale: np.ndarray) -> None:
        """Multiply the torques by ``scale`` (m,) (an identified effort scale)."""
        self.torque = [torque * scale for torque in self.torque]

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(x) for x in (self.q, self.qd, self.qdd, self.torque))

    def __len__(self) -> int:
        return sum(len(x) for x in self.q)

    def measured_motion(self, model: RobotModel) -> np.ndarray:
        """(m,) bool per actuated joint: some row has it moving (outside its recording's
        rest band) with a measured torque, so it can be fitted or scored there."""
        _, qd, _, torque = self.arrays()
        return np.asarray(measured_moving(model, qd, torque, self.bands()).any(axis=0))


def commanded_positions(model: RobotModel, bag: Path, t: np.ndarray, q: np.ndarray
                        ) -> tuple[list[str], np.ndarray]:
    """The positions the bag's trajectory commands asked for at times ``t`` [s].

    Each recorded JointTrajectory is sampled as the controller samples it
    (:class:`~plag_ros.core.simulation.joint_trajectory.TrajectoryCommand`) from its first point to
    its last, until the next message replaces it; elsewhere (the approach from wherever
    the arm was, holds after the end) the rows are NaN and not fitted.

    Returns:
        (joint names J, (N, J) commanded positions [rad], NaN where none applies).

    Raises:
        BagError: no trajectory commands in the bag; ValueError: commands for joints the
            model lacks, or for different joint sets.
    """
    messages = read_trajectory_commands(bag)
    if not messages:
        raise BagError(f'{bag}: its trajectory command topic has no messages')
    names = list(messages[0].joint_names)
    unknown = [j for j in names if j not in model.joint_names]
    if unknown or any(sorted(m.joint_names) != sorted(names) for m in messages):
        raise ValueError(f'{bag}: trajectory commands for joints {unknown or "that change"}; '
                         f'the model has {list(model.joint_names)}')
    cols = [model.joint_names.index(j) for j in names]
    commanded = np.full((len(t), len(names)), np.nan)
    starts = [m.start_ns * 1e-9 for m in messages] + [np.inf]
    for k, msg in enumerate(messages):
        if not len(msg.times):
            continue
        order = [list(msg.joint_names).index(j) for j in names]
        start = starts[k]
        at = int(np.clip(np.searchsorted(t, start), 0, len(t) - 1))
        command = TrajectoryCommand(
            start, q[at, cols], msg.times, msg.positions[:, order],
            None if msg.velocities is None else msg.velocities[:, order])
        rows = (t >= command.first_point_s) & (t <= command.end_s) & (t < starts[k + 1])
        commanded[rows] = command.position(t[rows])
    return names, commanded


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros identify``."""
    parser.add_argument('bag', type=Path, nargs='+', metavar='RECORDING',
                        help='recordings with effort: bags, or tables (.csv, .csv.gz, '
                             '.parquet) read through --columns')
    parser.add_argument('-o', '--output', type=Path, required=True, help='output folder')
    parser.add_argument('--holdout', type=Path, nargs='*', default=[],
                        help='recordings held out from the fit, for the error report')
    parser.add_argument('--holdout-fraction', type=float, default=0.2,
                        help='without --holdout: the last part of each recording held out')
    parser.add_argument('--columns', type=Path, metavar='MAPPING',
                        help='column mapping of the tables (YAML; config/columns/ has '
                             'examples, docs/howto/tabular-recordings.md every key)')
    parser.add_argument('--cutoff', type=float, metavar='HZ',
                        help="the estimator's low-pass cut-off, designed at each "
                             "recording's own rate (default 10 Hz); the effort is "
                             'filtered the same way')
    parser.add_argument('--position-resolution', type=float, metavar='RAD',
                        help="the encoder's step, for the rest band (default: 4096 counts "
                             "a turn for bags, the recording's smallest step for tables)")
    parser.add_argument('--delay', default='none', metavar='none|auto|SECONDS',
                        help="the effort's delay behind the states: always estimated and "
                             "reported; 'auto' removes the estimate, a number that delay")
    parser.add_argument('--effort-is', action='append', default=[],
                        metavar='[JOINT=]measured|model',
                        help="what the effort channels are, over the audit's verdict: "
                             "'measured' keeps a channel the audit takes for a model's "
                             "output (a clean torque sensor can look like one), 'model' "
                             'leaves it out; without JOINT= every channel; repeatable')
    parser.add_argument('--offset', nargs='?', const='on', default='off',
                        choices=('on', 'off', 'auto'),
                        help="fit a constant torque offset per joint (a sensor bias); "
                             "'auto': on each joint where cross-validation on the "
                             "recordings says the data support it")
    parser.add_argument('--prior-scale', default='1', metavar='FACTOR|auto',
                        help="every spread of the prior times FACTOR (how far the fit may "
                             "leave the URDF); 'auto': chosen by cross-validation, leaving "
                             'out one recording at a time (a single recording: each of '
                             f'{CV_BLOCKS} blocks), from '
                             f'{", ".join(f"{s:g}" for s in PRIOR_SCALES)}')
    parser.add_argument('--stribeck', type=float, default=0.0, metavar='V_S',
                        help='fit a Stribeck friction term with this velocity [rad/s]')
    parser.add_argument('--load-friction', action='store_true',
                        help='fit load-dependent friction (grows with the torque the gear '
                             'carries)')
    parser.add_argument('--mass-prior', type=float, default=IdentificationPrior.mass,
                        metavar='REL', help="one standard deviation of each body's mass, "
                                            'relative (a per-robot choice: how good its URDF is)')
    parser.add_argument('--com-prior', type=float, default=IdentificationPrior.com,
                        metavar='M', help="one standard deviation of each body's COM [m]")
    parser.add_argument('--urdf', type=Path, help='nominal URDF (default: bundled CRANE-X7)')
    parser.add_argument('--model', type=Path,
                        help='an earlier identified.yaml as the starting figures (the prior)')
    parser.add_argument('--payload', action='store_true',
                        help='fit a payload on --payload-link with the arm held at its '
                             'figures (the URDF or --model): record with the payload on')
    parser.add_argument('--payload-link', default='crane_x7_gripper_base_link',
                        help='the link the payload is fixed to')
    parser.add_argument('--payload-mass', type=float, metavar='KG',
                        help='--payload: a first guess of its mass (default 0.2; the prior '
                             'is 1 kg wide around it); --effort-scale: its weighed mass')
    parser.add_argument('--effort-scale', type=Path, metavar='BAG',
                        help="fit each joint's effort scale from BAG: an excitation played "
                             'with a known payload on --payload-link (--payload-mass, '
                             '--payload-com), and played without it in one of the bags')
    parser.add_argument('--payload-com', type=float, nargs=3, default=[0.0, 0.0, 0.0],
                        metavar=('X', 'Y', 'Z'),
                        help="--effort-scale: the payload's COM in --payload-link's frame [m]")
    parser.add_argument('--payload-inertia', type=float, nargs=3, metavar=('IXX', 'IYY', 'IZZ'),
                        help='--effort-scale: its principal inertia about the COM along the '
                             "link's axes [kg m^2] (default: a 1 cm sphere's, about a point "
                             'mass)')
    parser.add_argument('--servo', action='store_true',
                        help="also fit each servo's position-loop stiffness K_s from the "
                             'recorded trajectory commands (plag-ros excite --play)')


def carried_sections(start: ModelParameters | None) -> dict:
    """The sections of the ``--model`` file that this run does not fit again, carried over:
    the effort scale (the efforts were read through it, so the new figures hold only with
    it) and the servos' K_s. Replaced by ``--effort-scale`` and ``--servo``."""
    if start is None:
        return {}
    out: dict = {}
    if start.effort_scale:
        out['effort_scale'] = {'from': start.path, 'joints': [
            {'joint': j, 'scale': v} for j, v in start.effort_scale.items()]}
    if start.servo_stiffness:
        out['servo'] = {'from': start.path, 'joints': [
            {'joint': j, 'stiffness': v} for j, v in start.servo_stiffness.items()]}
    return out


def servo_section(model: RobotModel, result: Identified, recordings: list[tuple]) -> dict:
    """The ``servo`` section of identified.yaml: K_s per commanded joint (see
    :func:`~plag_ros.core.identification.drive.identify_servo`), from the rows where the joint
    moves (at rest its friction, the stick reaction, is part of the deflection and no
    model predicts it)."""
    names = recordings[0][0]
    torque, deflection, velocity, bands = [], [], [], []
    act = model.actuated_names
    cols_act = [act.index(j) for j in names]
    cols = [model.joint_names.index(j) for j in names]
    for joints, commanded, q, qd, qdd, band in recordings:
        if joints != names:
            raise ValueError('the bags command different joints')
        rows = np.isfinite(commanded).all(axis=1)
        fitted = result.predict(model, q[rows], qd[rows], qdd[rows])
        torque.append(fitted[:, cols_act])
        deflection.append(commanded[rows] - q[rows][:, cols])
        velocity.append(qd[rows][:, cols])
        bands.append(np.broadcast_to(band[cols], (int(rows.sum()), len(cols))))
    velocities = np.concatenate(velocity)
    fit = identify_servo(np.concatenate(torque), np.concatenate(deflection), velocities,
                         moving=np.abs(velocities) > np.concatenate(bands))
    table = motors.servo_stiffness(names) if motors.known(names) else np.full(len(names),
                                                                                np.nan)
    return {'samples': fit.samples.tolist(), 'model': 'torque = K_s (q_cmd - q) - D qd + c',
            'joints': [{'joint': name, 'stiffness': float(fit.stiffness[k]),
                        'stiffness_std': float(fit.stiffness_std[k]),
                        'stiffness_motor_table': float(table[k]),
                        'damping_and_delay': float(fit.damping[k]),
                        'offset': float(fit.offset[k]),
                        'residual_rms': float(fit.residual_rms[k]),
                        'deflection_rms': float(fit.deflection_rms[k])}
                       for k, name in enumerate(names)]}


def _terms(args: argparse.Namespace) -> MeasurementTerms:
    return MeasurementTerms(offset=args.offset == 'on', stribeck_velocity=args.stribeck,
                            load_friction=args.load_friction)


def _prior_scale(value: str) -> str | float:
    if value == 'auto':
        return value
    try:
        factor = float(value)
    except ValueError:
        factor = float('nan')
    if not (factor > 0.0 and np.isfinite(factor)):
        raise ValueError(f'--prior-scale must be a positive factor or auto, got {value!r}')
    return factor


def _selected(args: argparse.Namespace, width: str | float, model: RobotModel,
              fit: Recording, plausible: IdentificationPrior, terms: MeasurementTerms,
              extra: dict) -> tuple[IdentificationPrior, MeasurementTerms]:
    """The prior (``plausible`` times the width factor ``width``, from ``--prior-scale``)
    and terms to fit with: as given, or chosen by cross-validation
    (:mod:`plag_ros.core.identification.selection`) where ``auto`` asks, reported in
    ``extra['selection']`` and printed."""
    if 'auto' not in (width, args.offset):
        extra['prior_scale'] = width
        return scaled_prior(plausible, float(width)), terms
    choice = select_by_cross_validation(
        model, list(zip(fit.q, fit.qd, fit.qdd, fit.torque, fit.band)), prior=plausible,
        terms=terms, scales=PRIOR_SCALES if width == 'auto' else (float(width),),
        offsets=(False, True) if args.offset == 'auto' else (terms.offset,))
    extra['prior_scale'] = choice.prior_scale
    extra['selection'] = {
        'rule': 'leave one out, lowest mean squared error over the moving, measured rows; '
                'a tie to the narrower prior, then to no offset',
        'left_out': f'{choice.folds} {choice.fold_kind}',
        'candidates': [{'prior_scale': s, 'offset': o, 'cv_rms': r}
                       for s, o, r in choice.scores],
        'joint_cv_rms': [list(row) for row in choice.joint_scores],
        'chosen': {'prior_scale': choice.prior_scale,
                   'offset_joints': [name for name, on in zip(model.actuated_names,
                                                              choice.offset_joints) if on]}}
    tried = ', '.join(f'x{s:g}{" + offsets" if o else ""} {r:.4f}' for s, o, r in choice.scores)
    offsets = [name for name, on in zip(model.actuated_names, choice.offset_joints) if on]
    print(f'plag-ros identify: cross-validated over {choice.folds} {choice.fold_kind} '
          f'left out one at a time (RMS [N*m]: {tried}): prior x{choice.prior_scale:g}, '
          f'offsets on {", ".join(offsets) if offsets else "no joint"}')
    return (scaled_prior(plausible, choice.prior_scale),
            dataclasses.replace(terms, **choice.terms_offset))


def _delay(value: str) -> str | float:
    if value in ('none', 'auto'):
        return value
    try:
        return float(value)
    except ValueError:
        raise ValueError(f'--delay must be none, auto or seconds, got {value!r}') from None


def _read_one(model: RobotModel, path: Path, settings: dict) -> Estimated:
    """One recording, its left-out channels said at once (before any fit can fail)."""
    recording = read_estimated(model, path, **settings)
    if recording.start_up_rows:
        print(f'plag-ros identify: {path}: {recording.start_up_rows} of {len(recording.q)} '
              f'rows ({recording.start_up_rows / len(recording.q):.1%}) left out of fit and '
              f"score: the filter's start-up, {recording.start_up_width} rows at each end "
              'and at each stamp gap')
    for channel in recording.channels:
        print(f'plag-ros identify: {path}: {channel.joint} '
              f'{"left out" if channel.left_out else "kept"}: '
              f'{channel.kind.replace("_", " ")} ({channel.detail})')
    return recording


def _read_all(args: argparse.Namespace, model: RobotModel
              ) -> tuple[Recording, Recording, dict[Path, Estimated], list[tuple]]:
    """Every recording read (:func:`~plag_ros.apps.identify_input.read_estimated`), split
    into the fitted and the held-out rows; and the servo fit's inputs."""
    columns = ColumnMapping.from_yaml(args.columns) if args.columns else None
    settings = {'columns': columns, 'cutoff_hz': args.cutoff,
                'position_resolution': args.position_resolution, 'delay': _delay(args.delay),
                'declared': parse_declared(args.effort_is, model.actuated_names)}
    fit, held = Recording(), Recording()
    recordings: dict[Path, Estimated] = {}
    servo: list[tuple] = []
    for path in args.bag:
        recording = recordings[path] = _read_one(model, path, settings)
        n = len(recording.q)
        cut = n if args.holdout else int(round(n * (1 - args.holdout_fraction)))
        fit.add(recording.part(slice(0, cut)))
        held.add(recording.part(slice(cut, n)))
        if args.servo:
            head = recording.part(slice(0, cut))
            names, commanded = commanded_positions(model, path, head.t, head.q)
            servo.append((names, commanded, head.q, head.qd, head.qdd, head.band))
    for path in args.holdout:
        recordings[path] = _read_one(model, path, settings)
        held.add(recordings[path])
    if args.effort_scale:
        recordings[args.effort_scale] = _read_one(model, args.effort_scale, settings)
    return fit, held, recordings, servo


def _recordings_section(recordings: dict[Path, Estimated]) -> list[dict]:
    """Per recording: its rate and filter, the channels left out and the effort's delay."""
    out = []
    for path, r in recordings.items():
        delay = None if r.delay is None else {
            'estimate_s': r.delay.delay_s, 'within_1_percent_s': list(r.delay.bracket_s),
            'at_edge_of_search': r.delay.at_edge}
        out.append({'path': str(path), 'samples': int(len(r.q)), 'rate_hz': r.rate_hz,
                    'cutoff_hz': r.cutoff_hz, 'position_resolution': r.resolution,
                    'rest_band': float(r.band.max()),
                    'missing_joints': list(r.missing_joints),
                    'channels_left_out': [{'joint': f.joint, 'kind': f.kind,
                                           'detail': f.detail}
                                          for f in r.channels if f.left_out],
                    'channels_kept_as_declared': [{'joint': f.joint, 'detail': f.detail}
                                                  for f in r.channels if not f.left_out],
                    'effort_delay': delay, 'delay_removed_s': r.delay_removed_s,
                    'filter_start_up': {'rows_left_out': r.start_up_rows,
                                        'rows_at_each_end': r.start_up_width}})
    return out


def _left_out(recordings: dict[Path, Estimated]) -> str:
    """'; effort channels left out: ...' naming each with its recording and why, or ''."""
    left = [f'{path.name}: {f.joint} ({f.kind.replace("_", " ")})'
            for path, r in recordings.items() for f in r.channels if f.left_out]
    return '; effort channels left out: ' + ', '.join(left) if left else ''


def _peer(model: RobotModel, fit: Recording, terms: MeasurementTerms,
          extra: dict):
    """The least-squares peer, or None with the reason in ``extra``."""
    try:
        return fit_peer(model, *fit.arrays(), rest_band=fit.bands(), terms=terms)
    except ImportError as err:
        extra['least_squares'] = {'skipped': str(err)}
        return None


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros identify``; 2 on a recording or input error."""
    if args.payload and args.effort_scale:
        print('plag-ros identify: --payload fits an unknown payload, --effort-scale needs a '
              'known one: give one of them', file=sys.stderr)
        return 2
    if (args.payload or args.effort_scale) and 'auto' in (args.offset, args.prior_scale):
        print('plag-ros identify: --payload and --effort-scale fit with the prior and the '
              'terms as given: --offset and --prior-scale take no auto there', file=sys.stderr)
        return 2
    try:
        terms = _terms(args)
        # the URDF's plausible spread: how far the bodies moved is reported against it,
        # whatever width the fit used
        plausible = IdentificationPrior(mass=args.mass_prior, com=args.com_prior)
        width = _prior_scale(args.prior_scale)
        model = RobotModel.from_urdf(args.urdf or default_urdf_path())
        start = load_model_parameters(args.model) if args.model else None
        if start is not None:
            model = apply_model_parameters(model, start)
        findings = inertia_findings(model)
        fit, held, recordings, servo = _read_all(args, model)
        loaded = None
        if args.effort_scale:
            loaded = known_payload_model(model, args.payload_link, args.payload_mass,
                                         args.payload_com, args.payload_inertia)
    except (BagError, ValueError, OSError) as err:
        print(f'plag-ros identify: {err}', file=sys.stderr)
        return 2
    if not len(fit) or not len(held):
        print('plag-ros identify: no samples to fit or none held out', file=sys.stderr)
        return 2
    for part, what in ((fit, 'fit: no fitted'), (held, 'score: no held-out')):
        if not part.measured_motion(model).any():
            print(f'plag-ros identify: nothing to {what} row has a measured effort of a '
                  f'joint that moves{_left_out(recordings)}', file=sys.stderr)
            return 2
    tuples = {path: (r.q, r.qd, r.qdd, r.torque, r.t) for path, r in recordings.items()}
    payload = None
    extra: dict = carried_sections(start)
    try:
        if args.payload:
            model, payload, priors = with_payload_prior(model, args.payload_link,
                                                        args.payload_mass or 0.2)
            prior = scaled_prior(plausible, float(width))   # no auto with a payload
            result = identify(model, *fit.arrays(), rest_band=fit.bands(), body_priors=priors,
                              hold_joints=True, prior=prior, terms=terms)
        else:
            prior, terms = _selected(args, width, model, fit, plausible, terms, extra)
            result = identify(model, *fit.arrays(), rest_band=fit.bands(), prior=prior,
                              terms=terms)
        if loaded is not None:
            # the scale from the payload, then the arm again in true torque
            payload_torque, difference, rows = payload_difference(
                model, loaded, result, tuples.pop(args.effort_scale), args.effort_scale,
                tuples, recordings[args.effort_scale].band)
            scale = identify_effort_scale(payload_torque, difference, rows=rows)
            extra['effort_scale'] = effort_scale_section(model, scale, args.effort_scale, {
                'link': args.payload_link, 'mass': args.payload_mass,
                'com': list(args.payload_com), 'principal_inertia':
                args.payload_inertia or 'a 1 cm sphere (about a point mass)'})
            fit.rescale(scale.scale)
            held.rescale(scale.scale)
            result = identify(model, *fit.arrays(), rest_band=fit.bands(), prior=prior,
                              terms=terms)
    except (BagError, ValueError, FitNotSolved) as err:
        print(f'plag-ros identify: {err}', file=sys.stderr)
        return 2
    if args.servo:
        try:
            extra['servo'] = servo_section(model, result, servo)
        except ValueError as err:
            print(f'plag-ros identify --servo: {err}', file=sys.stderr)
            return 2
    peer = None
    if payload is None:
        peer = _peer(model, fit, terms, extra)
    else:
        extra['least_squares'] = {'skipped': 'a payload fit holds the arm at its figures: '
                                             'no least-squares fit of the same rows'}
    extra['recordings'] = _recordings_section(recordings)
    _, fit_qd, _, fit_torque = fit.arrays()
    extra['one_way_joints'] = one_way_joints(model, fit_qd, fit_torque, fit.bands())
    for joint in extra['one_way_joints']:
        print(f'plag-ros identify: {joint["joint"]} moves one way in the fitted rows '
              f'({joint["positive_share"]:.1%} of {joint["moving_rows"]} at qd > 0): its '
              'Coulomb friction and an offset cannot be told apart; record it moving both '
              'ways')
    args.output.mkdir(parents=True, exist_ok=True)
    content = write_report(args.output, model, result, held.arrays(),
                           [str(p) for p in args.bag], [str(p) for p in args.holdout],
                           held.bands(),
                           prior=plausible, extra=extra, payload=payload, peer=peer,
                           findings=findings)
    write_urdf(model, result, args.output / 'identified.urdf', payload)
    _print_summary(args, model, result, content, findings)
    return 0


def _print_summary(args: argparse.Namespace, model: RobotModel, result: Identified,
                   content: dict, findings: list) -> None:
    for finding in findings:
        print(f'plag-ros identify: {finding.message()}; the fit starts from the nearest '
              'consistent one')
    print(f'plag-ros identify: {result.rows} rows fitted; the data identify {result.rank} '
          f'parameter combinations of {content["fit"]["parameters"]} '
          f'(condition number {result.condition:.3g}; the rest stay at the URDF); '
          f'residual {result.noise_std:.4f} N*m, correlated over '
          f'{result.correlation_samples:.0f} samples')
    errors = content['held_out_rms']
    peer = errors.get('least_squares')
    for k, name in enumerate(errors['joints']):
        if errors['nominal'][k] is None:
            # no score: no moving row, or none with a measured effort
            print(f'  {name:50s} ' + ('moves in the held-out rows without a measured effort '
                                      '(its channel was left out)'
                                      if errors['moving_samples'][k] else
                                      'does not move in the held-out rows'))
            continue
        line = (f'  {name:50s} held-out RMS {errors["nominal"][k]:8.4f} -> '
                f'{errors["identified"][k]:8.4f} N*m')
        print(line + (f' (least squares {peer[k]:8.4f})' if peer else ''))
    overall = errors['over_moving_joints']
    if overall.get('nominal'):
        print(f'  joints that move: {overall["nominal"]:.4f} -> {overall["identified"]:.4f} '
              f'N*m ({overall["cut_against_nominal"]["identified"]:.0%} less)'
              + (f'; least squares {overall["least_squares"]:.4f} N*m' if peer else ''))
    mass = content['believability']['total_mass']
    print(f'  total mass {mass["nominal"]:.3f} -> {mass["identified"]:.3f} kg '
          f'({mass["change"]:+.0%}); flagged bodies: '
          f'{content["believability"]["flagged"] or "none"}')
    for joint in content['servo']['joints'] if args.servo else []:
        print(f'  {joint["joint"]:50s} K_s {joint["stiffness"]:7.2f} +- '
              f'{joint["stiffness_std"]:.2f} N*m/rad (motor table '
              f'{joint["stiffness_motor_table"]:.2f})')
    for joint in content['effort_scale']['joints'] if args.effort_scale else []:
        state = 'identified' if joint['excited'] else 'not loaded enough: kept'
        print(f'  {joint["joint"]:50s} effort scale {joint["scale"]:.4f} +- '
              f'{joint["scale_std"]:.4f} ({state}; payload torque RMS '
              f'{joint["payload_torque_rms"]:.3f} N*m)')
        if joint['excited'] and 'torque_constant' in joint:
            published = joint['published_torque_constants']
            print(f'  {"":50s} torque constant {joint["torque_constant"]:.3f} +- '
                  f'{joint["torque_constant_std"]:.3f} N*m/A: closer to the '
                  f'{joint["closer_to"].replace("_", " ")}\'s '
                  f'{published[joint["closer_to"]]:.3f} (data sheet '
                  f'{published["data_sheet"]:.3f}, driver {published["driver"]:.3f})')
    if 'payload' in content:
        found = content['payload']
        print(f'  payload on {found["link"]}: {found["mass"]:.4f} +- {found["mass_std"]:.4f} '
              f'kg, COM {np.round(found["com"], 4).tolist()} m')
    print(f'  wrote {args.output}/identified.yaml, identified.urdf, held_out.png')
