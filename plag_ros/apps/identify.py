"""``plag-ros identify BAG... -o OUT``: the arm's inertial parameters, friction and armature
from its recordings.

Each bag's joint states are read and checked as ``plag-ros analyze`` does (the same
reader, plausibility limits and zero-phase estimator); the driver's ``effort`` becomes
motor torque through the motor table (:func:`plag_ros.core.dynamics.motors.effort_to_torque`:
``torque_constant / current_to_effort`` per servo). The fit is
:func:`plag_ros.core.identification.fit.identify` (the URDF as prior, every body physically
consistent). The held-out data are the ``--holdout`` bags, else the last
``--holdout-fraction`` of each bag; on them the torque error of the nominal and of the
identified model is reported per joint.

``--effort-scale BAG`` corrects the driver's effort-to-torque conversion per joint: BAG
plays one of the fitted excitations again with a known payload on the gripper
(``--payload-mass``, ``--payload-com``, ``--payload-inertia``); the payload's torque against
what it added to the measured torque (the run without it subtracted at the same trajectory
time) gives each joint's scale (:func:`~plag_ros.core.identification.fit.identify_effort_scale`),
and the arm is fitted again in true torque. The factors go into ``identified.yaml``
(``effort_scale``) and from there into every reader of the driver's effort.

Written to OUT:

* ``identified.yaml``: per body mass, COM and inertia about the COM in its joint frame,
  with standard errors and whether the data excite them; per actuated joint viscous and
  Coulomb friction and armature; the regressor's condition number, the fit's residual, the
  held-out errors and the provenance (bags, date, nominal URDF);
* ``identified.urdf``: the nominal URDF with each body's figures on its link (links lumped
  into it by fixed joints lose theirs, so the dynamics are the same) and the joints'
  ``damping``/``friction``; armature has no URDF element and is in the yaml only;
* ``held_out.png``: measured against predicted torque per joint, nominal and identified.

Exit codes: 0, 2 on a bag or input error (no effort in the bag, nothing moving).
"""
from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

import numpy as np
import yaml

from plag_ros.core.decomposition.analysis import AnalysisOptions, estimate_recording
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import (
    ModelParameters,
    apply_model_parameters,
    load_model_parameters,
    payload_in_link_frame,
    urdf_with_figures,
)
from plag_ros.core.dynamics.regressor import body_figures, inertial_parameters
from plag_ros.core.estimation.friction import rest_band
from plag_ros.core.identification.fit import (
    EFFORT_SCALE_PRIOR,
    HELD,
    EffortScaleFit,
    IdentificationPrior,
    Identified,
    identify,
    identify_effort_scale,
    identify_servo,
    predict,
)
from plag_ros.core.simulation.joint_trajectory import TrajectoryCommand
from plag_ros.io.bag import BagError, read_joint_states, read_trajectory_commands

__all__ = ['configure', 'run']


class Recording:
    """Estimated states and measured actuated torque of one or more bags (rows stacked)."""

    def __init__(self) -> None:
        self.q: list[np.ndarray] = []
        self.qd: list[np.ndarray] = []
        self.qdd: list[np.ndarray] = []
        self.torque: list[np.ndarray] = []

    def add(self, q, qd, qdd, torque) -> None:
        for store, value in ((self.q, q), (self.qd, qd), (self.qdd, qdd),
                             (self.torque, torque)):
            store.append(value)

    def rescale(self, scale: np.ndarray) -> None:
        """Multiply the torques by ``scale`` (m,) (an identified effort scale)."""
        self.torque = [torque * scale for torque in self.torque]

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(x) for x in (self.q, self.qd, self.qdd, self.torque))

    def __len__(self) -> int:
        return sum(len(x) for x in self.q)


def read_recording(model: RobotModel, bag: Path, options: AnalysisOptions
                   ) -> tuple[np.ndarray, ...]:
    """(q, qd, qdd, torque, t) of a bag: estimated states, measured actuated torque [N*m],
    sample times [s]."""
    js = read_joint_states(bag, model)
    if js.effort is None:
        raise BagError(f'{bag}: its joint states carry no effort: identification needs the '
                       'torque the driver reports')
    index, q, qd, qdd, _ = estimate_recording(model, js.t_ns, js.q, options=options)
    act = np.flatnonzero(model.actuated)
    torque = js.effort[index][:, act] * motors.driver_effort_to_torque(model)[act]
    finite = np.isfinite(torque).all(axis=1)
    t = js.t_ns[index] * 1e-9
    return q[finite], qd[finite], qdd[finite], torque[finite], t[finite]


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


def write_urdf(model: RobotModel, result: Identified, path: Path,
               payload: int | None = None) -> None:
    """The nominal URDF with the identified figures (see the module doc); body ``payload``
    (a fitted payload) as a link of its own."""
    act = model.actuated_names
    arm = [i for i in range(model.n_bodies) if i != payload]
    xml = urdf_with_figures(
        model, {str(model.body_link[i]): result.inertial[i] for i in arm},
        dict(zip(act, result.viscous.tolist())), dict(zip(act, result.coulomb.tolist())),
        None if payload is None else payload_in_link_frame(model, payload,
                                                           result.inertial[payload]))
    path.write_text(xml.replace('\n', '\n<!-- identified by plag-ros identify: see '
                                'identified.yaml -->\n', 1))


def _rms(error: np.ndarray, moving: np.ndarray) -> list[float]:
    """Per joint RMS over the rows where it moves (at rest its friction is the stick
    reaction, which no model predicts); 0 for a joint that never moves."""
    squares = np.where(moving, error ** 2, 0.0).sum(axis=0)
    return [float(v) for v in np.sqrt(squares / np.maximum(moving.sum(axis=0), 1))]


def write_report(out: Path, model: RobotModel, result: Identified, held_out: tuple,
                 bags: list[Path], holdout_bags: list[Path], band: np.ndarray,
                 extra: dict | None = None, payload: int | None = None) -> dict:
    """identified.yaml and held_out.png; returns the yaml's content. ``band``: (n,) rest
    band [rad/s] (the held-out errors are over the rows where a joint moves); body
    ``payload``, a fitted payload, goes into its own section."""
    q, qd, qdd, torque = held_out
    moving = np.abs(qd[:, model.actuated]) > band[model.actuated]
    nominal = predict(model, q, qd, qdd)
    fitted = result.predict(model, q, qd, qdd)
    act = model.actuated_names
    bodies = []
    pi0 = inertial_parameters(model)
    for i, name in enumerate(model.body_names):
        if i == payload:
            link, mass, com, inertia = payload_in_link_frame(model, i, result.inertial[i])
            extra = {**(extra or {}), 'payload': {
                'link': link, 'mass': mass, 'mass_std': float(result.inertial_std[i][0]),
                'com': com.tolist(), 'inertia_about_com': inertia.tolist(),
                'frame': f'{link} (the link it is fixed to)'}}
            continue
        m, c, inertia = body_figures(result.inertial[i])
        m0, c0, _ = body_figures(pi0[i])
        bodies.append({'body': name, 'link': str(model.body_link[i]), 'mass': m,
                       'mass_nominal': m0, 'com': c.tolist(), 'com_nominal': c0.tolist(),
                       'inertia_about_com': inertia.tolist(),
                       'parameters': result.inertial[i].tolist(),
                       'parameters_std': result.inertial_std[i].tolist(),
                       'excited': result.excited['inertial'][i].tolist()})
    joints = [{'joint': name, 'viscous': float(result.viscous[k]),
               'viscous_std': float(result.viscous_std[k]),
               'coulomb': float(result.coulomb[k]), 'coulomb_std': float(result.coulomb_std[k]),
               'armature': float(result.armature[k]),
               'armature_std': float(result.armature_std[k]),
               'excited': {kind: bool(result.excited[kind][k])
                           for kind in ('viscous', 'coulomb', 'armature')}}
              for k, name in enumerate(act)]
    content = {
        'provenance': {'bags': [str(b) for b in bags],
                       'held_out': [str(b) for b in holdout_bags] or 'the last part of each bag',
                       'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec='seconds'),
                       'nominal_model': model.name, 'parameter_order':
                       ['m', 'mc_x', 'mc_y', 'mc_z', 'I_xx', 'I_xy', 'I_yy', 'I_xz', 'I_yz',
                        'I_zz']},
        'fit': {'rows': result.rows, 'residual_rms': result.noise_std,
                'condition_number': result.condition, 'identified_combinations':
                result.rank, 'parameters': int(result.inertial.size + 3 * len(act))},
        'held_out_rms': {'samples': int(len(q)), 'joints': act,
                         'moving_samples': moving.sum(axis=0).tolist(),
                         'rows': 'per joint, the samples where it moves (outside its rest '
                                 'band: at rest the friction is an unknown stick reaction)',
                         'nominal': _rms(nominal - torque, moving),
                         'identified': _rms(fitted - torque, moving)},
        'bodies': bodies, 'joints': joints, **(extra or {})}
    (out / 'identified.yaml').write_text(yaml.safe_dump(content, sort_keys=False))
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(act), 1, figsize=(10, 1.8 * len(act)), sharex=True)
    for k, ax in enumerate(np.atleast_1d(axes)):
        # the models only where the joint moves: at rest its friction is the stick
        # reaction, which neither predicts (nor the errors count)
        ax.plot(torque[:, k], color='k', lw=0.8, label='measured')
        ax.plot(np.where(moving[:, k], nominal[:, k], np.nan), color='tab:red', lw=0.8,
                label='nominal model')
        ax.plot(np.where(moving[:, k], fitted[:, k], np.nan), color='tab:blue', lw=0.8,
                label='identified model (where the joint moves)')
        ax.set_ylabel(f'{act[k].removeprefix(model.name + "_")}\n[N m]', fontsize=7)
    np.atleast_1d(axes)[0].legend(fontsize=7, loc='upper right')
    np.atleast_1d(axes)[-1].set_xlabel('held-out sample')
    fig.tight_layout()
    fig.savefig(out / 'held_out.png', dpi=110)
    plt.close(fig)
    return content


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros identify``."""
    parser.add_argument('bag', type=Path, nargs='+', help='recordings with effort')
    parser.add_argument('-o', '--output', type=Path, required=True, help='output folder')
    parser.add_argument('--holdout', type=Path, nargs='*', default=[],
                        help='recordings held out from the fit, for the error report')
    parser.add_argument('--holdout-fraction', type=float, default=0.2,
                        help='without --holdout: the last part of each bag held out')
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
    """The inputs of :func:`~plag_ros.core.identification.fit.identify_effort_scale` from a
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
                        'samples': int(fit.samples[k])}
                       for k, name in enumerate(model.actuated_names)]}


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


def servo_section(model: RobotModel, result: Identified, recordings: list[tuple],
                  band: np.ndarray) -> dict:
    """The ``servo`` section of identified.yaml: K_s per commanded joint (see
    :func:`~plag_ros.core.identification.fit.identify_servo`), from the rows where the joint
    moves (at rest its friction, the stick reaction, is part of the deflection and no
    model predicts it)."""
    names = recordings[0][0]
    torque, deflection, velocity = [], [], []
    act = model.actuated_names
    cols_act = [act.index(j) for j in names]
    cols = [model.joint_names.index(j) for j in names]
    for joints, commanded, q, qd, qdd in recordings:
        if joints != names:
            raise ValueError('the bags command different joints')
        rows = np.isfinite(commanded).all(axis=1)
        fitted = result.predict(model, q[rows], qd[rows], qdd[rows])
        torque.append(fitted[:, cols_act])
        deflection.append(commanded[rows] - q[rows][:, cols])
        velocity.append(qd[rows][:, cols])
    velocities = np.concatenate(velocity)
    fit = identify_servo(np.concatenate(torque), np.concatenate(deflection), velocities,
                         moving=np.abs(velocities) > band[cols])
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


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros identify``; 2 on a bag or input error."""
    options = AnalysisOptions(progress=False)
    fit, held = Recording(), Recording()
    servo: list[tuple] = []
    recordings: dict[Path, tuple] = {}
    if args.payload and args.effort_scale:
        print('plag-ros identify: --payload fits an unknown payload, --effort-scale needs a '
              'known one: give one of them', file=sys.stderr)
        return 2
    try:
        model = RobotModel.from_urdf(args.urdf or default_urdf_path())
        start = load_model_parameters(args.model) if args.model else None
        if start is not None:
            model = apply_model_parameters(model, start)
        for bag in args.bag:
            q, qd, qdd, torque, t = recordings[bag] = read_recording(model, bag, options)
            cut = len(q) if args.holdout else int(round(len(q) * (1 - args.holdout_fraction)))
            fit.add(q[:cut], qd[:cut], qdd[:cut], torque[:cut])
            held.add(q[cut:], qd[cut:], qdd[cut:], torque[cut:])
            if args.servo:
                names, commanded = commanded_positions(model, bag, t[:cut], q[:cut])
                servo.append((names, commanded, q[:cut], qd[:cut], qdd[:cut]))
        for bag in args.holdout:
            recordings[bag] = read_recording(model, bag, options)
            held.add(*recordings[bag][:4])
        loaded = None
        if args.effort_scale:
            loaded = known_payload_model(model, args.payload_link, args.payload_mass,
                                         args.payload_com, args.payload_inertia)
            with_payload = read_recording(model, args.effort_scale, options)
    except (BagError, ValueError, OSError) as err:
        print(f'plag-ros identify: {err}', file=sys.stderr)
        return 2
    if not len(fit) or not len(held):
        print('plag-ros identify: no samples to fit or none held out', file=sys.stderr)
        return 2
    band = rest_band(model, options.estimator)
    payload = None
    extra: dict = carried_sections(start)
    try:
        if args.payload:
            model, payload, priors = with_payload_prior(model, args.payload_link,
                                                        args.payload_mass or 0.2)
            result = identify(model, *fit.arrays(), rest_band=band, body_priors=priors,
                              hold_joints=True)
        else:
            result = identify(model, *fit.arrays(), rest_band=band)
        if loaded is not None:
            # the scale from the payload, then the arm again in true torque
            payload_torque, difference, rows = payload_difference(
                model, loaded, result, with_payload, args.effort_scale, recordings, band)
            scale = identify_effort_scale(payload_torque, difference, rows=rows)
            extra['effort_scale'] = effort_scale_section(model, scale, args.effort_scale, {
                'link': args.payload_link, 'mass': args.payload_mass,
                'com': list(args.payload_com), 'principal_inertia':
                args.payload_inertia or 'a 1 cm sphere (about a point mass)'})
            fit.rescale(scale.scale)
            held.rescale(scale.scale)
            result = identify(model, *fit.arrays(), rest_band=band)
    except (BagError, ValueError) as err:
        print(f'plag-ros identify: {err}', file=sys.stderr)
        return 2
    if args.servo:
        try:
            extra['servo'] = servo_section(model, result, servo, band)
        except ValueError as err:
            print(f'plag-ros identify --servo: {err}', file=sys.stderr)
            return 2
    args.output.mkdir(parents=True, exist_ok=True)
    content = write_report(args.output, model, result, held.arrays(), list(args.bag),
                           list(args.holdout), band, extra, payload)
    write_urdf(model, result, args.output / 'identified.urdf', payload)
    errors = content['held_out_rms']
    before, after = np.array(errors['nominal']), np.array(errors['identified'])
    print(f'plag-ros identify: {result.rows} rows fitted; the data identify {result.rank} '
          f'parameter combinations of {result.inertial.size + 3 * len(result.viscous)} '
          f'(condition number {result.condition:.3g}; the rest stay at the URDF); '
          f'residual {result.noise_std:.4f} N*m')
    for name, b, a in zip(errors['joints'], before, after):
        print(f'  {name:50s} held-out RMS {b:8.4f} -> {a:8.4f} N*m')
    total_b, total_a = float(np.sqrt(np.mean(before ** 2))), float(np.sqrt(np.mean(after ** 2)))
    print(f'  all joints: {total_b:.4f} -> {total_a:.4f} N*m ({1 - total_a / total_b:.0%} '
          f'less)')
    for joint in extra['servo']['joints'] if args.servo else []:
        print(f'  {joint["joint"]:50s} K_s {joint["stiffness"]:7.2f} +- '
              f'{joint["stiffness_std"]:.2f} N*m/rad (motor table '
              f'{joint["stiffness_motor_table"]:.2f})')
    for joint in extra['effort_scale']['joints'] if args.effort_scale else []:
        state = 'identified' if joint['excited'] else 'not loaded enough: kept'
        print(f'  {joint["joint"]:50s} effort scale {joint["scale"]:.4f} +- '
              f'{joint["scale_std"]:.4f} ({state}; payload torque RMS '
              f'{joint["payload_torque_rms"]:.3f} N*m)')
    if 'payload' in content:
        found = content['payload']
        print(f'  payload on {found["link"]}: {found["mass"]:.4f} +- {found["mass_std"]:.4f} '
              f'kg, COM {np.round(found["com"], 4).tolist()} m')
    print(f'  wrote {args.output}/identified.yaml, identified.urdf, held_out.png')
    return 0
