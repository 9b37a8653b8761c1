"""What ``plag-ros identify`` writes: ``identified.yaml``, ``identified.urdf`` and
``held_out.png``.

Every report compares three models on the held-out recordings, per joint that moves there
(a joint that never moves is reported as such, not as a perfect fit): the nominal URDF,
the identified model, and an ordinary least-squares fit on Pinocchio's regressor computed
in the same run (:mod:`plag_ros.core.identification.peer`). It also says how believable the
identified figures are: per body, how far its mass and centre of mass moved, in the
prior's standard deviations, flagged beyond :data:`FLAG_SIGMAS`, and the arm's total mass
against the URDF's.
"""
from __future__ import annotations

import datetime
from pathlib import Path

import numpy as np
import yaml

from plag_ros.core.dynamics.consistency import InertiaFinding
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import payload_in_link_frame, urdf_with_figures
from plag_ros.core.dynamics.regressor import body_figures, inertial_parameters
from plag_ros.core.identification.fit import (
    IdentificationPrior,
    Identified,
    predict,
    rest_band_rows,
)

__all__ = ['FLAG_SIGMAS', 'believability', 'held_out_errors', 'write_report', 'write_urdf']

FLAG_SIGMAS = 2.0
"""A body whose mass or COM moved more than this many prior standard deviations is flagged."""


def write_urdf(model: RobotModel, result: Identified, path: Path,
               payload: int | None = None) -> None:
    """The nominal URDF with each body's identified figures on its link (links lumped into
    it by fixed joints lose theirs, so the dynamics are the same) and the joints'
    ``damping``/``friction``; body ``payload`` (a fitted payload) as a link of its own."""
    act = model.actuated_names
    arm = [i for i in range(model.n_bodies) if i != payload]
    xml = urdf_with_figures(
        model, {str(model.body_link[i]): result.inertial[i] for i in arm},
        dict(zip(act, result.viscous.tolist())), dict(zip(act, result.coulomb.tolist())),
        None if payload is None else payload_in_link_frame(model, payload,
                                                           result.inertial[payload]))
    path.write_text(xml.replace('\n', '\n<!-- identified by plag-ros identify: see '
                                'identified.yaml -->\n', 1))


def _rms(error: np.ndarray, moving: np.ndarray) -> list[float | None]:
    """Per joint RMS over the finite rows where it moves (at rest its friction is the stick
    reaction, which no model predicts); None for a joint that never moves there."""
    use = moving & np.isfinite(error)
    squares = np.where(use, error, 0.0) ** 2
    return [float(np.sqrt(float(squares[:, k].sum()) / int(use[:, k].sum())))
            if use[:, k].any() else None for k in range(error.shape[1])]


def held_out_errors(model: RobotModel, predictions: dict[str, np.ndarray],
                    torque: np.ndarray, moving: np.ndarray) -> dict:
    """The ``held_out_rms`` section: per model (name -> (N, m) prediction) the per-joint
    RMS, and over the joints that move the RMS of those, each model's cut against the
    nominal and its ratio to the least-squares peer."""
    act = model.actuated_names
    per_joint = {name: _rms(p - torque, moving) for name, p in predictions.items()}
    moved = [k for k in range(len(act)) if per_joint['nominal'][k] is not None]
    overall: dict[str, float | None] = {
        name: float(np.sqrt(np.mean([float(v[k] or 0.0) ** 2 for k in moved]))) if moved
        else None for name, v in per_joint.items()}
    out = {'joints': list(act), 'moving_samples': moving.sum(axis=0).tolist(),
           'rows': 'per joint, the samples where it moves (outside its rest band: at rest '
                   'the friction is an unknown stick reaction) with a measured effort; None: '
                   'it does not move, or its effort channel was left out',
           **per_joint,
           'over_moving_joints': {'joints': [act[k] for k in moved], **overall}}
    nominal = overall['nominal']
    if nominal:
        out['over_moving_joints']['cut_against_nominal'] = {
            name: 1.0 - value / nominal for name, value in overall.items()
            if name != 'nominal' and value is not None}
    peer, identified = overall.get('least_squares'), overall.get('identified')
    if peer and identified is not None:
        out['over_moving_joints']['identified_over_least_squares'] = identified / peer
    return out


def believability(model: RobotModel, result: Identified, prior: IdentificationPrior,
                  payload: int | None = None) -> dict:
    """The ``believability`` section: per body the mass and COM moves in prior standard
    deviations (flagged beyond :data:`FLAG_SIGMAS`), and the arm's total mass."""
    pi0 = inertial_parameters(model)
    bodies, flagged = [], []
    arm = [i for i in range(model.n_bodies) if i != payload]
    for i in arm:
        m, c, _ = body_figures(result.inertial[i])
        m0, c0, _ = body_figures(pi0[i])
        mass_sigmas = abs(m - m0) / (prior.mass * m0)
        com_move = float(np.linalg.norm(c - c0))
        com_sigmas = com_move / prior.com
        flag = bool(mass_sigmas > FLAG_SIGMAS or com_sigmas > FLAG_SIGMAS)
        bodies.append({'body': model.body_names[i], 'mass_change': m / m0 - 1.0,
                       'mass_sigmas': float(mass_sigmas), 'com_move': com_move,
                       'com_sigmas': float(com_sigmas), 'flagged': flag})
        if flag:
            flagged.append(model.body_names[i])
    total0 = float(pi0[arm, 0].sum())
    total = float(result.inertial[arm, 0].sum())
    return {'prior': {'mass': prior.mass, 'com': prior.com, 'inertia': prior.inertia,
                      'meaning': 'one standard deviation: mass relative, COM in metres, '
                                 'inertia relative to the largest entry'},
            'flag_beyond_sigmas': FLAG_SIGMAS, 'flagged': flagged,
            'total_mass': {'nominal': total0, 'identified': total,
                           'change': total / total0 - 1.0},
            'bodies': bodies}


def _joint_rows(model: RobotModel, result: Identified) -> list[dict]:
    rows = []
    for k, name in enumerate(model.actuated_names):
        row: dict = {'joint': name}
        for term in result.terms.names:
            row[term] = float(getattr(result, term)[k])
            row[f'{term}_std'] = float(getattr(result, f'{term}_std')[k])
        row['excited'] = {term: bool(result.excited[term][k]) for term in result.terms.names}
        rows.append(row)
    return rows


def write_report(out: Path, model: RobotModel, result: Identified, held_out: tuple,
                 recordings: list[str], holdout: list[str], band: np.ndarray, *,
                 prior: IdentificationPrior, extra: dict | None = None,
                 payload: int | None = None, peer=None,
                 findings: list[InertiaFinding] | None = None) -> dict:
    """identified.yaml and held_out.png; returns the yaml's content.

    Args:
        out: the folder; model: the nominal model; result: the fit.
        held_out: (q, qd, qdd, torque) of the held-out rows; recordings, holdout: names.
        band: the rest band [rad/s], (n,) or (N, n) per held-out row; prior: the prior's
            widths; extra: more sections.
        payload: a fitted payload body (its own section); peer: the least-squares peer
            (None: not computed, the reason in ``extra['least_squares']``).
        findings: the URDF's inconsistent bodies.
    """
    q, qd, qdd, torque = held_out
    moving = np.abs(qd[:, model.actuated]) > rest_band_rows(model, band, len(qd))
    predictions = {'nominal': predict(model, q, qd, qdd),
                   'identified': result.predict(model, q, qd, qdd)}
    if peer is not None:
        predictions['least_squares'] = peer.predict(model, q, qd, qdd)
    extra = dict(extra or {})
    bodies = []
    pi0 = inertial_parameters(model)
    for i, name in enumerate(model.body_names):
        if i == payload:
            link, mass, com, inertia = payload_in_link_frame(model, i, result.inertial[i])
            extra['payload'] = {
                'link': link, 'mass': mass, 'mass_std': float(result.inertial_std[i][0]),
                'com': com.tolist(), 'inertia_about_com': inertia.tolist(),
                'frame': f'{link} (the link it is fixed to)'}
            continue
        m, c, inertia = body_figures(result.inertial[i])
        m0, c0, _ = body_figures(pi0[i])
        bodies.append({'body': name, 'link': str(model.body_link[i]), 'mass': m,
                       'mass_nominal': m0, 'com': c.tolist(), 'com_nominal': c0.tolist(),
                       'inertia_about_com': inertia.tolist(),
                       'parameters': result.inertial[i].tolist(),
                       'parameters_std': result.inertial_std[i].tolist(),
                       'excited': result.excited['inertial'][i].tolist()})
    content = {
        'provenance': {'recordings': recordings,
                       'held_out': holdout or 'the last part of each recording',
                       'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec='seconds'),
                       'nominal_model': model.name, 'parameter_order':
                       ['m', 'mc_x', 'mc_y', 'mc_z', 'I_xx', 'I_xy', 'I_yy', 'I_xz', 'I_yz',
                        'I_zz']},
        'model_checks': {
            'inconsistent_bodies': [{'body': f.body, 'inequality': f.inequality,
                                     'principal_moments': list(f.moments),
                                     'started_from': list(f.repaired)}
                                    for f in findings or []],
            'started_from': 'the nearest consistent inertia: same mass, COM and principal '
                            'axes, principal moments projected onto the triangle '
                            'inequalities (plag_ros.core.dynamics.consistency)'},
        'fit': {'rows': result.rows, 'residual_rms': result.noise_std,
                'correlation_samples': result.correlation_samples,
                'condition_number': result.condition, 'identified_combinations':
                result.rank, 'parameters': int(result.inertial.size
                                                + len(result.terms.names) * len(
                                                    model.actuated_names)),
                'terms': list(result.terms.names),
                'stribeck_velocity': result.terms.stribeck_velocity},
        'held_out_rms': held_out_errors(model, predictions, torque, moving),
        'believability': believability(model, result, prior, payload),
        'bodies': bodies, 'joints': _joint_rows(model, result), **extra}
    (out / 'identified.yaml').write_text(yaml.safe_dump(content, sort_keys=False))
    _figure(out / 'held_out.png', model, predictions, torque, moving)
    return content


_COLOURS = {'nominal': 'tab:red', 'identified': 'tab:blue', 'least_squares': 'tab:green'}


def _figure(path: Path, model: RobotModel, predictions: dict[str, np.ndarray],
            torque: np.ndarray, moving: np.ndarray) -> None:
    """Measured against predicted torque per joint, each model where the joint moves."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    act = model.actuated_names
    fig, axes = plt.subplots(len(act), 1, figsize=(10, 1.8 * len(act)), sharex=True)
    for k, ax in enumerate(np.atleast_1d(axes)):
        # the models only where the joint moves: at rest its friction is the stick
        # reaction, which none predicts (nor the errors count)
        ax.plot(torque[:, k], color='k', lw=0.8, label='measured')
        for name, values in predictions.items():
            ax.plot(np.where(moving[:, k], values[:, k], np.nan), color=_COLOURS[name],
                    lw=0.8, label=f'{name.replace("_", " ")} (where the joint moves)')
        ax.set_ylabel(f'{act[k].removeprefix(model.name + "_")}\n[N m]', fontsize=7)
    np.atleast_1d(axes)[0].legend(fontsize=7, loc='upper right')
    np.atleast_1d(axes)[-1].set_xlabel('held-out sample')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

