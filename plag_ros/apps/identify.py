"""``plag-ros identify BAG... -o OUT``: the arm's inertial parameters, friction and armature
from its recordings.

Each bag's joint states are read and checked as ``plag-ros analyze`` does (the same
reader, plausibility limits and zero-phase estimator); the driver's ``effort`` becomes
motor torque through the motor table (:func:`plag_ros.core.motors.effort_to_torque`:
``torque_constant / current_to_effort`` per servo). The fit is
:func:`plag_ros.core.identification.identify` (the URDF as prior, every body physically
consistent). The held-out data are the ``--holdout`` bags, else the last
``--holdout-fraction`` of each bag; on them the torque error of the nominal and of the
identified model is reported per joint.

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
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import yaml

from plag_ros.core import motors
from plag_ros.core.analysis import AnalysisOptions, estimate_recording
from plag_ros.core.friction import rest_band
from plag_ros.core.identification import Identified, identify, predict
from plag_ros.core.model import RobotModel, default_urdf_path, without_xml_declaration
from plag_ros.core.regressor import body_figures, inertial_parameters
from plag_ros.io.bag import BagError, read_joint_states

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

    def arrays(self) -> tuple[np.ndarray, ...]:
        return tuple(np.concatenate(x) for x in (self.q, self.qd, self.qdd, self.torque))

    def __len__(self) -> int:
        return sum(len(x) for x in self.q)


def read_recording(model: RobotModel, bag: Path, options: AnalysisOptions
                   ) -> tuple[np.ndarray, ...]:
    """(q, qd, qdd, torque) of a bag: estimated states, measured actuated torque [N*m]."""
    js = read_joint_states(bag, model)
    if js.effort is None:
        raise BagError(f'{bag}: its joint states carry no effort: identification needs the '
                       'torque the driver reports')
    index, q, qd, qdd, _ = estimate_recording(model, js.t_ns, js.q, options=options)
    act = np.flatnonzero(model.actuated)
    names = [model.joint_names[j] for j in act]
    scale = motors.effort_to_torque(names) if motors.known(names) else np.ones(len(act))
    torque = js.effort[index][:, act] * scale
    finite = np.isfinite(torque).all(axis=1)
    return q[finite], qd[finite], qdd[finite], torque[finite]


def write_urdf(model: RobotModel, result: Identified, path: Path) -> None:
    """The nominal URDF with the identified figures (see the module doc)."""
    root = ET.fromstring(without_xml_declaration(model.urdf_xml))
    links = {link.get('name') or '': link for link in root.iter('link')}
    owner = {model.link_names[k]: int(model.link_joint[k]) for k in range(len(model.link_names))}
    bodies = {str(model.body_link[i]): i for i in range(model.n_bodies)}
    for name, link in links.items():
        for old in link.findall('inertial'):
            if name in bodies or owner.get(name, -1) >= 0:
                link.remove(old)       # moving links: their mass is the body's now
        if name not in bodies:
            continue
        m, c, inertia = body_figures(result.inertial[bodies[name]])
        inertial = ET.SubElement(link, 'inertial')
        ET.SubElement(inertial, 'origin', xyz=' '.join(f'{v:.9g}' for v in c), rpy='0 0 0')
        ET.SubElement(inertial, 'mass', value=f'{m:.9g}')
        ET.SubElement(inertial, 'inertia', ixx=f'{inertia[0, 0]:.9g}',
                      ixy=f'{inertia[0, 1]:.9g}', ixz=f'{inertia[0, 2]:.9g}',
                      iyy=f'{inertia[1, 1]:.9g}', iyz=f'{inertia[1, 2]:.9g}',
                      izz=f'{inertia[2, 2]:.9g}')
    act = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    for joint in root.iter('joint'):
        name = joint.get('name') or ''
        if name in act:
            k = act.index(name)
            for old in joint.findall('dynamics'):
                joint.remove(old)
            ET.SubElement(joint, 'dynamics', damping=f'{result.viscous[k]:.9g}',
                          friction=f'{result.coulomb[k]:.9g}')
    path.write_text('<?xml version="1.0"?>\n<!-- identified by plag-ros identify: see '
                    'identified.yaml -->\n' + ET.tostring(root, encoding='unicode') + '\n')


def _rms(error: np.ndarray) -> list[float]:
    return [float(v) for v in np.sqrt(np.mean(error ** 2, axis=0))]


def write_report(out: Path, model: RobotModel, result: Identified, held_out: tuple,
                 bags: list[Path], holdout_bags: list[Path]) -> dict:
    """identified.yaml and held_out.png; returns the yaml's content."""
    q, qd, qdd, torque = held_out
    nominal = predict(model, q, qd, qdd)
    fitted = predict(model, q, qd, qdd, inertial=result.inertial, viscous=result.viscous,
                     coulomb=result.coulomb, armature=result.armature)
    act = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    bodies = []
    pi0 = inertial_parameters(model)
    for i, name in enumerate(model.body_names):
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
                         'nominal': _rms(nominal - torque), 'identified': _rms(fitted - torque)},
        'bodies': bodies, 'joints': joints}
    (out / 'identified.yaml').write_text(yaml.safe_dump(content, sort_keys=False))
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(act), 1, figsize=(10, 1.8 * len(act)), sharex=True)
    for k, ax in enumerate(np.atleast_1d(axes)):
        ax.plot(torque[:, k], color='k', lw=0.8, label='measured')
        ax.plot(nominal[:, k], color='tab:red', lw=0.8, label='nominal model')
        ax.plot(fitted[:, k], color='tab:blue', lw=0.8, label='identified model')
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


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros identify``; 2 on a bag or input error."""
    model = RobotModel.from_urdf(args.urdf or default_urdf_path())
    options = AnalysisOptions(progress=False)
    fit, held = Recording(), Recording()
    try:
        for bag in args.bag:
            q, qd, qdd, torque = read_recording(model, bag, options)
            cut = len(q) if args.holdout else int(round(len(q) * (1 - args.holdout_fraction)))
            fit.add(q[:cut], qd[:cut], qdd[:cut], torque[:cut])
            held.add(q[cut:], qd[cut:], qdd[cut:], torque[cut:])
        for bag in args.holdout:
            held.add(*read_recording(model, bag, options))
    except (BagError, ValueError) as err:
        print(f'plag-ros identify: {err}', file=sys.stderr)
        return 2
    if not len(fit) or not len(held):
        print('plag-ros identify: no samples to fit or none held out', file=sys.stderr)
        return 2
    result = identify(model, *fit.arrays(), rest_band=rest_band(model, options.estimator))
    args.output.mkdir(parents=True, exist_ok=True)
    content = write_report(args.output, model, result, held.arrays(), list(args.bag),
                           list(args.holdout))
    write_urdf(model, result, args.output / 'identified.urdf')
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
          f'less); wrote {args.output}/identified.yaml, identified.urdf, held_out.png')
    return 0
