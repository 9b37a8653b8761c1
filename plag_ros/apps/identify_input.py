"""The recordings ``plag-ros identify`` fits: bags or tables, each estimated at its own rate.

Every recording goes through the same steps, whatever its source:

1. **Read**: a rosbag2 bag (the driver's ``joint_states``, effort through the motor table as
   before) or a table (CSV, gzip CSV, Parquet) through a column mapping
   (:mod:`plag_ros.io.table`). Joints the recording lacks are held at zero and their effort
   is not fitted; mimic joints follow their masters.
2. **Estimate** the states with the package's zero-phase estimator designed for the
   recording's own rate (the median stamp step), at the cut-off asked for: a filter
   designed for 200 Hz run on 1 kHz samples cuts at five times its nominal frequency.
3. **Filter the effort exactly as the states**
   (:func:`~plag_ros.core.estimation.filters.lowpass_offline`), so that the model's
   torque at the filtered states and the measured torque carry the same filtering.
4. **Rest band** from the encoder's resolution: the Dynamixel's 4096 counts a turn for
   bags, unless given; for a table, the smallest position step the recording shows (the
   1st percentile of each joint's non-zero steps, the coarsest joint's).
5. **Audit the effort channels** (:func:`~plag_ros.core.identification.channels.audit_effort`):
   missing, all-zero, constant and model-computed channels (a table's commanded trajectory,
   where it maps one, is what a model's output is checked against) are reported and
   become NaN, which the fit leaves out.
6. **Delay**: the effort's delay behind the states is estimated
   (:func:`~plag_ros.core.identification.delay.estimate_delay`) and, when asked, removed.
7. **Segment ends**: the rows that carry the zero-phase filter's start-up at the
   recording's ends and at each stamp gap
   (:func:`~plag_ros.core.estimation.filters.filter_start_up_rows`) get a NaN effort, so
   that neither the fit nor the score sees them; how many is reported.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plag_ros.core.decomposition.analysis import AnalysisOptions, estimate_recording
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.motors import DEFAULT_POSITION_RESOLUTION
from plag_ros.core.estimation.filters import (
    EstimatorConfig,
    filter_start_up_rows,
    lowpass_offline,
    start_up_width,
)
from plag_ros.core.estimation.friction import rest_band
from plag_ros.core.identification.channels import ChannelFinding, audit_effort
from plag_ros.core.identification.delay import DelayEstimate, estimate_delay, shift_effort
from plag_ros.io.bag import BagError, read_joint_states
from plag_ros.io.table import TABLE_SUFFIXES, ColumnMapping, read_table

__all__ = ['Estimated', 'is_table', 'read_estimated']


def is_table(path: Path) -> bool:
    """Whether ``path`` is read as a table (by its suffix) rather than as a bag."""
    return str(path).lower().endswith(TABLE_SUFFIXES)


@dataclass(frozen=True)
class Estimated:
    """One recording, ready to fit.

    Attributes:
        path: the file; t: (N,) sample times [s]; q, qd, qdd: (N, n) estimated states.
        torque: (N, m) measured actuated torque filtered as the states [N*m], NaN in
            channels left out (and at the ends a removed delay leaves uncovered).
        rate_hz: the recording's rate; cutoff_hz: the estimator's cut-off.
        band: (n,) rest band [rad/s]; resolution: the encoder step it assumes [rad].
        channels: the effort channels left out, with why, and those kept as declared
            against the audit's signs; delay: the effort's estimated
            delay (None: the recording is too short or nothing moves);
            delay_removed_s: the delay taken out of ``torque`` [s].
        missing_joints: model joints the recording has no position for (held at zero).
        start_up_rows: rows left out at segment ends (module docstring, step 7);
        start_up_width: the rows left out at each end of a segment.
    """

    path: Path
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    torque: np.ndarray
    rate_hz: float
    cutoff_hz: float
    band: np.ndarray
    resolution: float
    channels: list[ChannelFinding]
    delay: DelayEstimate | None
    delay_removed_s: float
    missing_joints: tuple[str, ...]
    start_up_rows: int
    start_up_width: int

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.q, self.qd, self.qdd, self.torque

    def part(self, rows: slice) -> Estimated:
        """The same recording cut to ``rows`` (a held-out tail, the fitted head)."""
        return dataclasses.replace(self, t=self.t[rows], q=self.q[rows], qd=self.qd[rows],
                                   qdd=self.qdd[rows], torque=self.torque[rows])


def _table_resolution(q: np.ndarray) -> float:
    """The coarsest joint's encoder step a table shows [rad] (module docstring, step 4)."""
    steps = []
    for column in np.abs(np.diff(q, axis=0)).T:
        moved = column[column > 0.0]
        if len(moved):
            steps.append(float(np.percentile(moved, 1)))
    return max(steps) if steps else DEFAULT_POSITION_RESOLUTION


def _read_raw(model: RobotModel, path: Path, columns: ColumnMapping | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...],
                         tuple[np.ndarray, ...] | None]:
    """(t_ns (N,), q (N, n), effort (N, n) [N*m], missing joints, the commanded (q, qd,
    qdd) (N, n) each, NaN for joints without a column, or None: not a table, or none
    mapped)."""
    if not is_table(path):
        js = read_joint_states(path, model)
        if js.effort is None:
            raise BagError(f'{path}: its joint states carry no effort: identification '
                           'needs the torque the driver reports')
        return js.t_ns, js.q, js.effort * motors.driver_effort_to_torque(model), (), None
    if columns is None:
        raise ValueError(f'{path}: a table needs --columns MAPPING.yaml (which column holds '
                         'what; docs/howto/tabular-recordings.md)')
    table = read_table(path, columns, model)
    effort = table.effort
    if table.effort_source == 'current':
        if not motors.known(list(model.actuated_names)):
            raise ValueError(f'{path}: its effort is motor current and the mapping gives no '
                             'torque_constant for this robot')
        constant = np.zeros(model.n_joints)
        constant[model.actuated] = [motors.motor_of(j).torque_constant
                                    for j in model.actuated_names]
        effort = effort * constant
    lacking = np.isin(model.joint_names, table.missing_joints)
    q = table.q.copy()
    q[:, lacking] = 0.0                                 # a joint the table lacks: at rest
    # a row without a position of a joint the table has is no sample at all: left out
    # (the estimator spans it as it spans a late stamp)
    rows = np.isfinite(q).all(axis=1)
    commanded = None
    if table.commanded is not None:
        # mimic joints follow their sources' commands; positions keep the mimic offset
        commanded = tuple(model.fill_mimic(x[rows], derivative=k > 0)
                          for k, x in enumerate(table.commanded))
    return (table.t_ns[rows], model.fill_mimic(q[rows]), effort[rows], table.missing_joints,
            commanded)


def read_estimated(model: RobotModel, path: Path, *, columns: ColumnMapping | None = None,
                   cutoff_hz: float | None = None, position_resolution: float | None = None,
                   delay: str | float = 'none',
                   declared: dict[str, str] | None = None) -> Estimated:
    """Read, estimate, filter, audit and align one recording (module docstring).

    Args:
        model: the robot; path: a bag folder or a table file.
        columns: the column mapping of a table (required for one).
        cutoff_hz: the estimator's cut-off (default: the package's, 10 Hz).
        position_resolution: the encoder step [rad] (default: module docstring, step 4).
        delay: ``'none'`` keeps the effort as recorded, ``'auto'`` removes the estimated
            delay, a number removes that many seconds.
        declared: {actuated joint: 'measured' or 'model'}, the user's word on what an
            effort channel is (:func:`~plag_ros.core.identification.channels.audit_effort`).

    Raises:
        BagError, TableError, ValueError: unreadable input, with the reason.
    """
    t_ns, q_raw, effort, missing, commanded = _read_raw(model, path, columns)
    table = is_table(path)
    step = np.diff(t_ns)
    rate = 1e9 / float(np.median(step)) if len(step) else 0.0
    cutoff = EstimatorConfig().cutoff_hz if cutoff_hz is None else cutoff_hz
    if not 0.0 < cutoff < rate / 2.0:
        raise ValueError(f'{path}: cut-off {cutoff} Hz must be below half the rate '
                         f'({rate:.1f} Hz)')
    estimator = EstimatorConfig(rate_hz=rate, cutoff_hz=cutoff)
    options = AnalysisOptions(progress=False, estimator=estimator)
    index, q, qd, qdd, _ = estimate_recording(model, t_ns, q_raw, options=options)
    act = model.actuated
    raw = effort[index][:, act]
    resolution = position_resolution or (_table_resolution(q_raw) if table
                                         else DEFAULT_POSITION_RESOLUTION)
    band = rest_band(model, estimator, position_resolution=resolution)
    if commanded is not None:
        # a joint the table lacks takes its estimate, and so does a mimic joint whose
        # source it lacks; an empty cell of a joint it has stays NaN, and the audit leaves
        # that row out
        source = np.where(model.mimic_source >= 0, model.mimic_source,
                          np.arange(model.n_joints))
        lacking = np.isin(model.joint_names, missing)[source]
        commanded = tuple(np.where(lacking, e, c[index]) for c, e in zip(commanded, (q, qd, qdd)))
    findings = audit_effort(model, q, qd, qdd, raw, declared, commanded=commanded)
    left_out = [model.actuated_names.index(f.joint) for f in findings if f.left_out]
    raw[:, left_out] = np.nan
    torque = lowpass_offline(t_ns[index], raw, estimator)
    try:
        estimate: DelayEstimate | None = estimate_delay(model, q, qd, qdd, torque, rate,
                                                        rest_band=band)
    except ValueError:
        estimate = None             # too short or nothing moves: reported as unknown
    removed = 0.0
    if delay == 'auto' and estimate is not None:
        removed = estimate.delay_s
    elif delay not in ('none', 'auto'):
        removed = float(delay)
    if removed:
        torque = shift_effort(torque, int(round(removed * rate)))
    start_up = filter_start_up_rows(t_ns[index], estimator)
    torque[start_up] = np.nan
    return Estimated(path=path, t=t_ns[index] * 1e-9, q=q, qd=qd, qdd=qdd, torque=torque,
                     rate_hz=rate, cutoff_hz=cutoff, band=band, resolution=resolution,
                     channels=findings, delay=estimate, delay_removed_s=removed,
                     missing_joints=missing, start_up_rows=int(start_up.sum()),
                     start_up_width=start_up_width(estimator))
