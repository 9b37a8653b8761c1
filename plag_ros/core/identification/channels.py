"""Which effort channels of a recording are measurements, and which are not.

Real recordings carry channels that must not be fitted: a joint whose sensor was not
recorded (NaN), a channel that is all zeros or constant (a logger that wrote a
placeholder), and channels that a logging tool computed from a model. The last kind is
the worst: it looks like a clean measurement, and an identification fitted to it only
recovers the model that made it.

A model's output is an exact function of the states it was computed from; a sensor's
reading is not (it lags, it has noise of its own, it carries the friction and the
deformations no model has). Where the recording holds the commanded trajectory (a table
mapping ``commanded_position``, ``commanded_velocity`` and ``commanded_acceleration``),
that is asked directly: one rigid-body parameter set with each joint's friction and
armature reproducing every channel at once from the commanded trajectory to within
:data:`EXACT_RATIO` of their RMS is a model's output of it. On the Kinova Gen3
recordings of ``../shared/data/real_arms`` the channels the source's tools computed are
reproduced so to 0.0003-0.0005 % (their printed six digits) in three of the four
recordings that have them, the motor-current torque to no better than 12 %; a sensor's
noise alone (0.5 % of the RMS) keeps it far from exact.

Otherwise (no commanded trajectory, or not reproduced from it), two signs, both required:

* one rigid-body parameter set explains every joint of the recording at once (ordinary
  least squares on the regressor with each joint's viscous and Coulomb friction, all
  samples) to within :data:`MODEL_OUTPUT_RATIO` of the channels' RMS: a real arm's effort
  also carries cogging, gear and cable effects;
* the channels have almost no noise of their own: their white-noise floor, from the third
  difference (``std(diff^3 x) / sqrt(20)`` is the standard deviation of white noise, and
  smooth motion adds almost nothing to it at these rates), is below
  :data:`NOISE_FLOOR_RATIO` of their RMS: a sensor's reading always has one.

On the Kinova Gen3 recordings (states estimated at 5 Hz) the motor-current torque leaves
12-36 % of its RMS unexplained, with a noise floor of 4.7-16 %; the channels the
recording's own tools computed leave 0.9-3.1 %, with a floor below 0.5 % (the fourth
recording's, which its commanded trajectory reproduces only to 1.6 %, are flagged so). A
simulated torque sensor (the CRANE-X7's rigid-body torque plus 0.02 N*m of white noise)
is explained to 2.3 % but has a 2.7 % floor: a measurement.
``bench/bench_identify_real.py --channels`` prints these figures.

The two signs can be wrong both ways: a good torque sensor on an arm whose URDF is good
is explained well and is quiet too, and a commanded trajectory that does not reproduce
it does not clear it (the message then gives that figure: a model of the measured states
is not reproduced from the commands either). The user who knows the arm decides: ``declared``
(``plag-ros identify --effort-is``) names channels that are measurements, which the audit
then keeps with its evidence reported, or model outputs, which it leaves out. Missing,
all-zero and constant channels are left out whatever is declared: there is nothing to fit.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.identification.fit import parameter_rows

__all__ = ['EFFORT_KINDS', 'EXACT_RATIO', 'MODEL_OUTPUT_RATIO', 'NOISE_FLOOR_RATIO',
           'ChannelFinding', 'audit_effort', 'explained_fraction', 'noise_floor',
           'parse_declared']

MODEL_OUTPUT_RATIO = 0.08
"""Effort channels whose least-squares rigid-body residual is below this fraction of their
RMS, and whose noise floor is below :data:`NOISE_FLOOR_RATIO`, are a model's output."""

EXACT_RATIO = 1e-3
"""Effort channels that one rigid-body parameter set reproduces from the commanded
trajectory to below this fraction of their RMS are a model's output of it: 200x the
Kinova model channels' rounding (2.5-4.7e-6), 5x below a 0.5 % sensor noise floor."""

NOISE_FLOOR_RATIO = 0.01
"""The noise floor below which channels count as noiseless (module docstring)."""

EFFORT_KINDS = ('measured', 'model')
"""What a user may declare an effort channel to be (module docstring)."""


@dataclass(frozen=True)
class ChannelFinding:
    """One effort channel the audit has something to say about.

    Attributes:
        joint: the actuated joint's name; kind: ``'missing'`` (no finite value),
            ``'zero'``, ``'constant'``, ``'model_output'`` (by the audit's two signs or as
            declared) or ``'declared_measured'`` (kept although the signs call it a
            model's output); detail: why, with figures.
        left_out: whether the channel is left out of the fit (all kinds but
            ``'declared_measured'``).
    """

    joint: str
    kind: str
    detail: str
    left_out: bool = True

    def message(self) -> str:
        return f'{self.joint}: {self.kind.replace("_", " ")} ({self.detail})'


def explained_fraction(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                       effort: np.ndarray, joints: np.ndarray) -> float:
    """RMS of the least-squares rigid-body residual over the RMS of ``effort``, over the
    actuated joints ``joints`` (indices into the actuated set) and every sample.

    Args:
        q, qd, qdd: (N, n) states; effort: (N, m) actuated effort [N*m];
        joints: (k,) which actuated channels to fit together.
    """
    Phi = parameter_rows(model, q, qd, qdd)[:, joints]
    Phi = Phi.reshape(-1, Phi.shape[-1])
    target = effort[:, joints].ravel()
    coefficients, *_ = np.linalg.lstsq(Phi, target, rcond=None)
    residual = Phi @ coefficients - target
    return float(np.sqrt(np.mean(residual ** 2)) / np.sqrt(np.mean(target ** 2)))


def noise_floor(effort: np.ndarray) -> float:
    """The white-noise floor of (N, k) channels over their RMS (module docstring)."""
    floor = np.std(np.diff(effort, 3, axis=0), axis=0) / np.sqrt(20.0)
    return float(np.sqrt(np.mean(floor ** 2)) / np.sqrt(np.mean(effort ** 2)))


def parse_declared(values: Sequence[str], joints: Sequence[str]) -> dict[str, str]:
    """``--effort-is`` values (``KIND`` for every channel, ``JOINT=KIND`` for one; later
    ones win) as {joint: kind}.

    Raises:
        ValueError: an unknown kind or joint, with what is known.
    """
    declared: dict[str, str] = {}
    for value in values:
        joint, _, kind = value.rpartition('=')
        if kind not in EFFORT_KINDS:
            raise ValueError(f'--effort-is {value!r}: the kind must be one of '
                             f'{", ".join(EFFORT_KINDS)}')
        if joint and joint not in joints:
            raise ValueError(f'--effort-is {value!r}: no actuated joint {joint!r}; the '
                             f'joints are {", ".join(joints)}')
        declared.update({name: kind for name in ([joint] if joint else joints)})
    return declared


def audit_effort(model: RobotModel, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                 effort: np.ndarray, declared: dict[str, str] | None = None, *,
                 commanded: Sequence[np.ndarray] | None = None
                 ) -> list[ChannelFinding]:
    """The actuated effort channels of one recording that must not be fitted, and those
    kept against the audit's signs because the user declared them measured.

    Args:
        model: the robot; q, qd, qdd: (N, n) estimated states of the recording.
        effort: (N, m) the effort as recorded (not filtered: filtering would strip the
            noise that tells a measurement from a model) [N*m].
        declared: {actuated joint: ``'measured'`` or ``'model'``} (:func:`parse_declared`);
            a joint not named is judged by the signs.
        commanded: (q, qd, qdd) of the commanded trajectory at the same samples, each
            (N, n) [rad, rad/s, rad/s^2], or None (module docstring); rows with a
            non-finite value are not used.

    Returns:
        one finding per channel left out or kept as declared (an empty list: every
        channel is a measurement by the signs).
    """
    effort = np.asarray(effort, dtype=np.float64)
    declared = declared or {}
    names = model.actuated_names
    findings = []
    alive = []
    for j, name in enumerate(names):
        values = effort[:, j][np.isfinite(effort[:, j])]
        if not len(values):
            findings.append(ChannelFinding(name, 'missing', 'no finite sample'))
        elif not values.any():
            findings.append(ChannelFinding(name, 'zero', f'all {len(values)} samples are 0'))
        elif np.ptp(values) <= 1e-9 * max(1.0, float(np.abs(values).max())):
            findings.append(ChannelFinding(name, 'constant', f'every sample is {values[0]:g}'))
        elif declared.get(name) == 'model':
            findings.append(ChannelFinding(name, 'model_output', 'declared a model output '
                                                                 '(--effort-is)'))
        else:
            alive.append(j)
    rows = np.isfinite(effort[:, alive]).all(axis=1)
    figures = verdict = None
    commands = ''            # what the commanded trajectory said, for the fallback's text
    if commanded is not None and alive:
        exact_rows = rows & np.all([np.isfinite(x).all(axis=1) for x in commanded], axis=0)
        if exact_rows.sum() >= 100:
            qc, qdc, qddc = (np.asarray(x)[exact_rows] for x in commanded)
            exact = explained_fraction(model, qc, qdc, qddc, effort[exact_rows],
                                       np.array(alive))
            if exact < EXACT_RATIO:
                figures = (f'one rigid-body parameter set reproduces these {len(alive)} '
                           f'channels from the commanded trajectory to {exact:.1e} of their '
                           f'RMS (below {EXACT_RATIO:g})')
                verdict = 'a model computed them from it'
            else:
                commands = (f'; the commanded trajectory reproduces them only to '
                            f'{exact:.1e} of their RMS')
        else:
            commands = (f'; the commanded trajectory was not checked: {int(exact_rows.sum())} '
                        'rows have every commanded and effort value (100 needed)')
    if figures is None and len(alive) >= 2 and rows.sum() >= 100:
        ratio = explained_fraction(model, q[rows], qd[rows], qdd[rows], effort[rows],
                                   np.array(alive))
        floor = noise_floor(effort[rows][:, alive])
        if ratio < MODEL_OUTPUT_RATIO and floor < NOISE_FLOOR_RATIO:
            figures = (f'one rigid-body parameter set explains these {len(alive)} channels '
                       f'to {ratio:.1%} of their RMS (below {MODEL_OUTPUT_RATIO:.0%}) and '
                       f'their noise floor is {floor:.2%} of it (below '
                       f'{NOISE_FLOOR_RATIO:.0%})')
            verdict = 'a model computed them'
    if figures is not None:
        for j in alive:
            if declared.get(names[j]) == 'measured':
                findings.append(ChannelFinding(
                    names[j], 'declared_measured', f'kept as declared (--effort-is), '
                    f'though {figures}: a model output would look so{commands}',
                    left_out=False))
            else:
                findings.append(ChannelFinding(
                    names[j], 'model_output', f'{figures}: {verdict}{commands}; '
                    f'--effort-is {names[j]}=measured keeps it'))
    return findings
