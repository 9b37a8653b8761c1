"""The researcher's entry point: a robot, a recording, torques with names; numpy in and out.

::

    import plag_ros as plag

    robot = plag.load_robot()                          # the bundled CRANE-X7
    result = plag.decompose(robot, plag.read_bag('run_bag', robot))
    tilt = result.propagation('crane_x7_shoulder_revolute_part_tilt_joint',
                              source='crane_x7_lower_arm_revolute_part_joint')   # (M,) [N*m]
    table = result.to_pandas()                         # time x (quantity, joint)

Everything here calls what ``plag-ros analyze`` calls, with its defaults: the same
plausibility check, zero-phase estimator and compiled engine, so a figure made from a
:class:`Result` equals the command's to the bit (``test/test_api.py``). The internal
modules (:mod:`plag_ros.core`, :mod:`plag_ros.io`) stay importable for everything else.

Names: joints and bodies as in the URDF (``robot.joint_names``, ``robot.body_names``);
a propagation *source* is a joint, the one whose motion causes the torque (Gunji, Kusaka and
Tanaka 2025 [MPF], eq. 1). Units: positions [rad], velocities [rad/s], torques [N*m]
(prismatic joints: m, m/s, N); times [s] from the recording's first sample.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from plag_ros.core.decomposition.analysis import (
    Analysis,
    AnalysisOptions,
    analyze_arrays,
    decompose_states,
    propagation_paths,
)
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.core.estimation.filters import EstimatorConfig, estimate_offline
from plag_ros.io.bag import RecoveryReport, StampSource, read_joint_states

if TYPE_CHECKING:
    import pandas

__all__ = ['Estimate', 'Recording', 'Result', 'decompose', 'estimate', 'load_robot',
           'read_bag']

Part = Literal['total', 'acceleration', 'velocity']
JOINT_QUANTITIES = ('q', 'qd', 'qdd', 'torque', 'acceleration', 'velocity', 'gravity',
                    'friction')
"""Columns of :meth:`Result.to_pandas` ``'joints'``: the estimated state, the joint torque
and its components (acceleration, velocity and gravity add up to the torque; friction is
reported beside it)."""


def load_robot(urdf: str | Path | None = None, *,
               parameters: str | Path | None = None) -> RobotModel:
    """The robot model.

    Args:
        urdf: a URDF file, URDF text, or None for the bundled CRANE-X7.
        parameters: an ``identified.yaml`` of ``plag-ros identify``: its figures over the
            URDF's.

    Raises:
        FileNotFoundError, ValueError: see :meth:`RobotModel.from_urdf`.
    """
    model = RobotModel.from_urdf(default_urdf_path() if urdf is None else urdf)
    return model_with_parameters(model, parameters)[0]


@dataclass(frozen=True)
class Recording:
    """Joint states of a recording, in the robot's joint order (N samples, n joints).

    Attributes:
        t_ns: (N,) int64 stamps [ns], strictly increasing.
        q: (N, n) positions; qd: (N, n) measured velocities or None; effort: (N, n) measured
            efforts or None.
        joint_names: (n,) the column names.
        topic: where it was read ('' for arrays); recovery: what a salvage of a damaged bag
            brought back (None: the bag ended cleanly).
    """

    t_ns: np.ndarray
    q: np.ndarray
    qd: np.ndarray | None
    effort: np.ndarray | None
    joint_names: tuple[str, ...]
    topic: str = ''
    recovery: RecoveryReport | None = None

    @property
    def t(self) -> np.ndarray:
        """(N,) seconds from the first sample."""
        return (self.t_ns - self.t_ns[0]) * 1e-9 if len(self.t_ns) else np.zeros(0)


def read_bag(path: str | Path, robot: RobotModel, *, topic: str | None = None,
             stamp: StampSource = 'header') -> Recording:
    """The joint states of a rosbag2 bag (directory, ``.mcap`` or ``.db3``).

    Args:
        path: the bag; robot: its joints name the columns.
        topic: the JointState topic (default ``/joint_states``, else the only one).
        stamp: ``'header'`` (the message stamps, as the live node) or ``'receive'``.

    Raises:
        plag_ros.io.bag.BagError: not a bag, no such topic, joints missing (named).
    """
    js = read_joint_states(path, robot, topic=topic, stamp=stamp)
    return Recording(js.t_ns, js.q, js.qd, js.effort, js.joint_names, js.topic, js.recovery)


class Estimate(NamedTuple):
    """Zero-phase estimate of a recording: each (N, n), NaN in segments too short to
    estimate (a warning says where)."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray


def estimate(t: ArrayLike, q: ArrayLike, **estimator: object) -> Estimate:
    """Velocity and acceleration of recorded positions, offline and without lag.

    The five-point derivative on the stamps and the live node's Butterworth low-pass run
    forward and backward (:func:`plag_ros.core.estimation.filters.estimate_offline`).

    Args:
        t: (N,) stamps [s], strictly increasing.
        q: (N, n) positions.
        **estimator: options of :class:`~plag_ros.core.estimation.filters.EstimatorConfig`
            (``cutoff_hz``, ``order``, ``rate_hz``, ...): set ``rate_hz`` to the recording's.

    Raises:
        ValueError: unusable input (the message names the sample and joint), an unknown
            option.
    """
    t_ns = _stamps_ns(t)
    config = dataclasses.replace(EstimatorConfig(), **estimator)   # type: ignore[arg-type]
    return Estimate(*estimate_offline(t_ns, q, config))


@dataclass(frozen=True)
class Result:
    """The decomposition of a recording (M estimated samples, n joints, B bodies).

    Arrays are numpy, addressed by name: ``joint`` and ``source`` are joint names, ``body``
    a body name (integers index them too). :attr:`analysis` holds the raw arrays with their
    shapes (:class:`~plag_ros.core.decomposition.analysis.Analysis`).
    """

    analysis: Analysis
    robot: RobotModel
    t0_ns: int

    @property
    def t(self) -> np.ndarray:
        """(M,) sample times [s] from the recording's first sample."""
        return (self.analysis.t_ns - self.t0_ns) * 1e-9

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self.analysis.joint_names

    @property
    def body_names(self) -> tuple[str, ...]:
        return self.analysis.body_names

    def _joint(self, joint: str | int) -> int:
        return _index(joint, self.joint_names, 'joint')

    def state(self, joint: str | int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(M,) estimated q, qd, qdd of ``joint``."""
        j = self._joint(joint)
        a = self.analysis
        return a.q[:, j], a.qd[:, j], a.qdd[:, j]

    def torque(self, joint: str | int | None = None) -> np.ndarray:
        """Joint torque: (M,) of ``joint``, or (M, n)."""
        return self.analysis.torque if joint is None else \
            self.analysis.torque[:, self._joint(joint)]

    def component(self, name: Literal['acceleration', 'velocity', 'gravity', 'friction'],
                  joint: str | int | None = None) -> np.ndarray:
        """A torque component summed over bodies and sources: (M,) of ``joint``, or (M, n)."""
        a = self.analysis
        if name not in ('acceleration', 'velocity', 'gravity', 'friction'):
            raise ValueError(f"component {name!r}: 'acceleration', 'velocity', 'gravity' "
                             "or 'friction'")
        x = getattr(a, name)
        x = x.reshape(x.shape[0], x.shape[1], -1).sum(axis=2) if x.ndim > 2 else x
        return x if joint is None else x[:, self._joint(joint)]

    def partial(self, joint: str | int, body: str | int) -> np.ndarray:
        """(M,) the torque at ``joint`` that ``body``'s motion and weight cause."""
        b = _index(body, self.body_names, 'body')
        return self.analysis.partial[:, self._joint(joint), b]

    def propagation(self, joint: str | int, source: str | int, *, part: Part = 'total',
                    body: str | int | None = None) -> np.ndarray:
        """(M,) the torque at ``joint`` propagated from the motion of ``source``.

        Args:
            part: 'acceleration' (M_i[k, s] qdd_s), 'velocity' (the velocity products
                through qd_s) or 'total' (their sum).
            body: only through this body (default: summed over bodies).
        """
        k, s = self._joint(joint), self._joint(source)
        parts = {'total': ('acceleration', 'velocity'), 'acceleration': ('acceleration',),
                 'velocity': ('velocity',)}.get(part)
        if parts is None:
            raise ValueError(f"part {part!r}: 'total', 'acceleration' or 'velocity'")
        out = np.zeros(len(self.analysis.t_ns))
        for name in parts:
            x = getattr(self.analysis, name)[:, k, :, s]                    # (M, B)
            out = out + (x.sum(axis=1) if body is None
                         else x[:, _index(body, self.body_names, 'body')])
        return out

    def paths(self, top: int = 10) -> list[tuple[float, str, str, str]]:
        """The largest propagation paths: ``(rms [N*m], part, joint, source)``, largest
        first (the list ``plag-ros analyze`` writes to summary.txt)."""
        names = self.joint_names
        return [(rms, part, names[k], names[s])
                for rms, part, k, s in propagation_paths(self.analysis, top=top)]

    def to_pandas(self, what: Literal['joints', 'propagation'] = 'joints'
                  ) -> pandas.DataFrame:
        """A table indexed by time [s].

        Args:
            what: ``'joints'``: columns ``(quantity, joint)`` for every name of
                :data:`JOINT_QUANTITIES`; ``'propagation'``: columns ``(part, joint,
                source)`` for the acceleration and velocity propagation of every source
                whose motion can load the joint (the model's structure, the diagonal
                included), summed over bodies.
        """
        import pandas as pd

        index = pd.Index(self.t, name='t')
        names = self.joint_names
        columns: dict[tuple[str, ...], np.ndarray] = {}
        if what == 'joints':
            a = self.analysis
            for quantity in JOINT_QUANTITIES:
                x = getattr(a, quantity) if quantity in ('q', 'qd', 'qdd', 'torque') else \
                    self.component(quantity)                                # type: ignore
                columns.update({(quantity, name): x[:, j] for j, name in enumerate(names)})
            keys: tuple[str, ...] = ('quantity', 'joint')
        elif what == 'propagation':
            model_pairs = _propagation_pairs(self.robot)
            for part in ('acceleration', 'velocity'):
                columns.update({(part, names[k], names[s]): self.propagation(k, s, part=part)
                                for k, s in model_pairs})
            keys = ('part', 'joint', 'source')
        else:
            raise ValueError(f"what {what!r}: 'joints' or 'propagation'")
        frame = pd.DataFrame(columns, index=index)
        frame.columns = pd.MultiIndex.from_tuples(list(columns), names=keys)
        return frame


def _propagation_pairs(robot: RobotModel) -> list[tuple[int, int]]:
    """(joint k, source s) pairs whose propagation can be non-zero: k and s both on the
    root path of some body (s moves the body, k carries it)."""
    pairs: set[tuple[int, int]] = set()
    for i in range(robot.n_bodies):
        path = list(robot.root_path(robot.body_joint[i]))
        pairs.update((k, s) for k in path for s in path)
    return sorted(pairs)


def _index(key: str | int, names: tuple[str, ...], what: str) -> int:
    if isinstance(key, (int, np.integer)):
        if not -len(names) <= key < len(names):
            raise IndexError(f'{what} {key} out of range for {len(names)} {what}s')
        return int(key) % len(names)
    try:
        return names.index(key)
    except ValueError:
        raise KeyError(f'no {what} {key!r}; the {what}s are {list(names)}') from None


def decompose(robot: RobotModel, recording: Recording | None = None, *,
              t: ArrayLike | None = None, q: ArrayLike | None = None,
              qd: ArrayLike | None = None, qdd: ArrayLike | None = None,
              options: AnalysisOptions | None = None) -> Result:
    """Partial Lagrangian decomposition of a recording, or of given states.

    Three ways in:

    * ``decompose(robot, recording)``: as ``plag-ros analyze`` does a bag: the plausibility
      check, the zero-phase estimate, the decomposition, the friction rest rule from the
      recorded effort;
    * ``decompose(robot, t=t, q=q)``: the same from stamps [s] and positions (N, n);
    * ``decompose(robot, q=q, qd=qd, qdd=qdd)``: states you have, decomposed as given
      (no check, no estimate; without ``t`` the result's time is the sample index, one
      second per sample).

    Args:
        options: estimator, plausibility and batch settings (default: the command's).

    Raises:
        ValueError: arrays of the wrong shape, or an input that is none of the three.
    """
    options = options or AnalysisOptions()
    n = robot.n_joints
    if recording is None and q is not None and qd is not None and qdd is not None:
        states = [_columns(x, n, name) for x, name in ((q, 'q'), (qd, 'qd'), (qdd, 'qdd'))]
        t_ns = (np.arange(len(states[0]), dtype=np.int64) * 1_000_000_000 if t is None else
                _stamps_ns(t))
        analysis = decompose_states(robot, t_ns, np.arange(len(t_ns)), *states,
                                    chunk=options.chunk, progress=options.progress,
                                    threads=options.threads)
        return Result(analysis, robot, int(t_ns[0]) if len(t_ns) else 0)
    if recording is None:
        if t is None or q is None:
            raise ValueError('decompose needs a recording, t and q, or q, qd and qdd')
        recording = Recording(_stamps_ns(t), _columns(q, n, 'q'), None, None,
                              tuple(robot.joint_names))
    analysis = analyze_arrays(robot, recording.t_ns, recording.q, qd_measured=recording.qd,
                              effort=recording.effort, options=options)
    return Result(analysis, robot, int(recording.t_ns[0]) if len(recording.t_ns) else 0)


def _stamps_ns(t: ArrayLike) -> np.ndarray:
    """(N,) int64 [ns] from stamps [s]."""
    return np.round(np.asarray(t, dtype=np.float64) * 1e9).astype(np.int64)


def _columns(x: ArrayLike, n: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if a.ndim != 2 or a.shape[1] != n:
        raise ValueError(f'{name} must be (N, {n}) in the robot joint order, got {a.shape}')
    return a
