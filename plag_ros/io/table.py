"""Joint recordings stored as tables (CSV, gzip CSV, Parquet), read through one mapping.

Many arms are logged to a table rather than a rosbag: one row a sample, one column per
joint and quantity. :class:`ColumnMapping` says which column holds what, in which unit,
and :func:`read_table` turns the file into a :class:`TableRecording` in the model's joint
order and SI units. A mapping is usually a small YAML file (``config/columns/`` holds the
ones the project knows, such as ``config/columns/kinova_gen3.yaml``); the page
``docs/howto/tabular-recordings.md`` walks through every key.

Rows are kept as they are: a cell that is empty or ``nan`` becomes NaN, and no row is
dropped or filled here (the caller decides what a gap means). Only the time column must be
complete and strictly increasing.
"""
from __future__ import annotations

import dataclasses
import math
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from plag_ros.core.dynamics.model import RobotModel

__all__ = ['COMMANDED', 'ColumnMapping', 'TableRecording', 'TableError', 'read_table',
           'TIME_UNITS', 'TABLE_SUFFIXES']

TIME_UNITS: dict[str, int | None] = {'s': 1_000_000_000, 'ms': 1_000_000, 'us': 1_000,
                                     'ns': 1, 'sample': None}
"""Nanoseconds per unit of the time column (``sample``: an index, scaled by ``rate_hz``)."""

_NS_PER = {unit: ns for unit, ns in TIME_UNITS.items() if ns is not None}
_POSITION_UNITS = {'rad': 1.0, 'deg': math.pi / 180.0}
_VELOCITY_UNITS = {'rad/s': 1.0, 'deg/s': math.pi / 180.0}
_EFFORT_UNITS = {'N*m': 1.0}
_CURRENT_UNITS = {'A': 1.0, 'mA': 1e-3}

TABLE_SUFFIXES = ('.csv', '.csv.gz', '.parquet', '.pq')
"""The file name endings :func:`read_table` reads (the format follows the suffix)."""

# The per-joint quantities: field name -> (unit field, the units it accepts).
_QUANTITIES: dict[str, tuple[str, dict[str, float]]] = {
    'position': ('position_unit', _POSITION_UNITS),
    'velocity': ('velocity_unit', _VELOCITY_UNITS),
    'effort': ('effort_unit', _EFFORT_UNITS),
    'current': ('current_unit', _CURRENT_UNITS),
    # the commanded trajectory, in the measured states' units (acceleration: the position
    # unit per s^2)
    'commanded_position': ('position_unit', _POSITION_UNITS),
    'commanded_velocity': ('velocity_unit', _VELOCITY_UNITS),
    'commanded_acceleration': ('position_unit', _POSITION_UNITS),
}
COMMANDED = ('commanded_position', 'commanded_velocity', 'commanded_acceleration')
"""The mapping's fields of the commanded trajectory: all three or none."""

EffortSource = Literal['effort', 'current', 'current*torque_constant']


class TableError(ValueError):
    """A table that cannot be read through its mapping (the message names the file)."""


@dataclass(frozen=True, kw_only=True)
class ColumnMapping:
    """Which column of a table holds what, and in which unit.

    Per-joint columns are named by a template: ``{index}`` is the joint's 1-based place in
    ``joints`` and ``{joint}`` its URDF name (``'Position{index}'`` gives ``Position1``,
    ``Position2``, ...; ``'{joint}_pos'`` gives ``joint_1_pos``, ...), or listed, one
    column per entry of ``joints``. A CSV without a header row (``header: false``) names
    its columns by their 1-based place, ``'1'``, ``'2'``, ...: its mapping lists them
    (``time: 1``, ``position: [2, 3, 4]``; from YAML numbers become names).

    Attributes:
        header: False: the CSV has no header row (see above).
        time: the column of time stamps.
        time_unit: ``s``, ``ms``, ``us``, ``ns``, or ``sample`` (the column is a sample
            index: time = index / ``rate_hz``). A Parquet timestamp or duration column
            carries its own unit, which must be this one.
        rate_hz: the sample rate [Hz] of a ``sample`` time column; only allowed (and then
            required) with ``time_unit: sample``.
        joints: URDF joint names in the order of ``{index}`` (1, 2, ...); None: the model's
            actuated joints in model order.
        position: template or list of the joint position columns (required).
        position_unit: ``rad`` or ``deg``.
        velocity: template or list of the measured joint velocity columns, or None.
        velocity_unit: ``rad/s`` or ``deg/s``.
        effort: template or list of the joint torque columns [N*m], or None.
        effort_unit: ``N*m`` (the only one).
        current: template or list of the motor current columns, or None.
        current_unit: ``A`` or ``mA``.
        torque_constant: one factor per entry of ``joints`` [N*m/A], turning the current
            into torque when no effort column is mapped, or None.
        commanded_position, commanded_velocity, commanded_acceleration: templates or lists
            of the commanded trajectory's columns (the reference the arm was asked to
            follow), in ``position_unit``, ``velocity_unit`` and that position unit per
            s^2; all three or none. The effort audit checks whether an effort channel is an
            exact function of them (:mod:`plag_ros.core.identification.channels`).

    At least one of ``effort`` and ``current`` must be mapped. Construction checks every
    field and raises ValueError naming the field and its value.
    """

    time: str
    position: str | tuple[str, ...]
    time_unit: str = 's'
    rate_hz: float | None = None
    joints: tuple[str, ...] | None = None
    position_unit: str = 'rad'
    velocity: str | tuple[str, ...] | None = None
    velocity_unit: str = 'rad/s'
    effort: str | tuple[str, ...] | None = None
    effort_unit: str = 'N*m'
    current: str | tuple[str, ...] | None = None
    current_unit: str = 'A'
    torque_constant: tuple[float, ...] | None = None
    commanded_position: str | tuple[str, ...] | None = None
    commanded_velocity: str | tuple[str, ...] | None = None
    commanded_acceleration: str | tuple[str, ...] | None = None
    header: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.header, bool):
            raise ValueError(f'header: true or false, got {self.header!r}')
        if not isinstance(self.time, str) or not self.time:
            raise ValueError(f'time: a column name is needed, got {self.time!r}')
        if self.time_unit not in TIME_UNITS:
            raise ValueError(f'time_unit: {self.time_unit!r} is not one of {list(TIME_UNITS)}')
        if self.time_unit == 'sample':
            rate = self.rate_hz
            if (rate is None or isinstance(rate, bool) or not isinstance(rate, (int, float))
                    or not math.isfinite(rate) or rate <= 0):
                raise ValueError('rate_hz: time_unit sample needs a positive sample rate '
                                 f'[Hz], got {rate!r}')
            object.__setattr__(self, 'rate_hz', float(rate))
        elif self.rate_hz is not None:
            # the stamps themselves give the rate; a second figure could only disagree
            raise ValueError(f'rate_hz: only for time_unit sample, not {self.time_unit!r} '
                             f'(got rate_hz {self.rate_hz!r})')
        if self.joints is not None:
            joints = self.joints
            if isinstance(joints, str) or not all(isinstance(j, str) and j for j in joints):
                raise ValueError(f'joints: a list of joint names is needed, got {joints!r}')
            joints = tuple(joints)
            repeated = sorted({j for j in joints if joints.count(j) > 1})
            if repeated:
                raise ValueError(f'joints: {repeated} named more than once')
            if not joints:
                raise ValueError('joints: the list is empty')
            object.__setattr__(self, 'joints', joints)
        for name, (unit_field, units) in _QUANTITIES.items():
            template = getattr(self, name)
            if isinstance(template, list):
                template = tuple(template)
                object.__setattr__(self, name, template)
            if template is None:
                if name == 'position':
                    raise ValueError('position: a column template is needed')
                continue
            _check_template(name, template)
            unit = getattr(self, unit_field)
            if unit not in units:
                raise ValueError(f'{unit_field}: {unit!r} is not one of {list(units)}')
        if self.effort is None and self.current is None:
            raise ValueError('map effort or current (or both): the recording needs a torque')
        given = [name for name in COMMANDED if getattr(self, name) is not None]
        if given and len(given) != len(COMMANDED):
            # a model's torque uses the commanded velocity and acceleration as they were
            # commanded: estimated from the positions, none would be reproduced exactly
            raise ValueError(f'{", ".join(given)}: the commanded trajectory needs all of '
                             f'{", ".join(COMMANDED)}')
        if self.torque_constant is not None:
            k = self.torque_constant
            if isinstance(k, (str, bytes)) or not isinstance(k, Sequence) or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in k):
                raise ValueError(f'torque_constant: a list of finite numbers [N*m/A] is '
                                 f'needed, got {k!r}')
            if self.current is None:
                raise ValueError('torque_constant: given without a current column to apply to')
            if self.joints is not None and len(k) != len(self.joints):
                raise ValueError(f'torque_constant: {len(k)} values for {len(self.joints)} '
                                 'joints')
            object.__setattr__(self, 'torque_constant', tuple(float(v) for v in k))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ColumnMapping:
        """A mapping from a dict of the field names (as a YAML file holds them).

        Raises:
            ValueError: not a dict, an unknown or missing key, or a bad value (named).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f'a column mapping is a dict of keys, got {type(data).__name__}')
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            raise ValueError(f'unknown keys {unknown}; a column mapping has {known}')
        missing = [key for key in ('time', 'position') if key not in data]
        if missing:
            raise ValueError(f'missing keys {missing}')
        values = dict(data)
        for key in ('joints', 'torque_constant'):
            if isinstance(values.get(key), list):
                values[key] = tuple(values[key])
        for key, value in values.items():
            # columns by number (a table without a header row): the number is the name
            if key == 'time' and _is_number(value):
                values[key] = str(value)
            elif key in _QUANTITIES and isinstance(value, list):
                values[key] = tuple(str(v) if _is_number(v) else v for v in value)
            elif key.endswith('unit') or key in _QUANTITIES or key == 'time':
                if value is not None and not isinstance(value, str):
                    # YAML reads an unquoted {joint}_pos as a mapping
                    hint = " (quote a template that starts with '{')" if isinstance(
                        value, (dict, set)) else ''
                    raise ValueError(f'{key}: a string is needed, got {value!r}{hint}')
        return cls(**values)

    @classmethod
    def from_yaml(cls, path: str | Path) -> ColumnMapping:
        """A mapping from a YAML file (the keys of :meth:`from_dict`).

        Raises:
            FileNotFoundError: no such file.
            ValueError: unparsable YAML or a bad mapping; the message names the file.
        """
        import yaml

        path = Path(path)
        text = path.read_text(encoding='utf-8')
        try:
            return cls.from_dict(yaml.safe_load(text))
        except yaml.YAMLError as err:
            raise ValueError(f'{path}: not valid YAML: {err}') from err
        except ValueError as err:
            raise ValueError(f'{path}: {err}') from err

    def table_joints(self, model: RobotModel) -> tuple[str, ...]:
        """The joints the table's columns are for, in ``{index}`` order.

        Raises:
            ValueError: ``joints`` names joints the model does not have.
        """
        if self.joints is None:
            return tuple(model.actuated_names)
        unknown = [j for j in self.joints if j not in model.joint_names]
        if unknown:
            raise ValueError(f'joints: {unknown} are not joints of the model; it has '
                             f'{list(model.joint_names)}')
        return self.joints

    def column_names(self, model: RobotModel) -> dict[str, list[str]]:
        """Field -> the column names it reads (``time`` and each mapped per-joint field)."""
        joints = self.table_joints(model)
        names = {'time': [self.time]}
        for field in _QUANTITIES:
            template = getattr(self, field)
            if isinstance(template, tuple):
                if len(template) != len(joints):
                    raise ValueError(f'{field}: {len(template)} columns listed for the '
                                     f'{len(joints)} joints {list(joints)}')
                names[field] = list(template)
            elif template is not None:
                names[field] = [template.format(index=k + 1, joint=j)
                                for k, j in enumerate(joints)]
        return names


def _is_number(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_template(field: str, template: object) -> None:
    if isinstance(template, tuple):
        if not template or not all(isinstance(c, str) and c for c in template):
            raise ValueError(f'{field}: a list of column names or numbers is needed, got '
                             f'{list(template)!r}')
        repeated = sorted({c for c in template if template.count(c) > 1})
        if repeated:
            raise ValueError(f'{field}: the columns {repeated} are listed more than once')
        return
    if not isinstance(template, str):
        raise ValueError(f'{field}: a column template string is needed, got {template!r}')
    try:
        placeholders = {name for _, name, _, _ in string.Formatter().parse(template)
                        if name is not None}
    except ValueError as err:
        raise ValueError(f'{field}: template {template!r} does not parse: {err}') from None
    if placeholders - {'index', 'joint'}:
        raise ValueError(f'{field}: template {template!r} may use only {{index}} and '
                         f'{{joint}}, not {sorted(placeholders - {"index", "joint"})}')
    if not placeholders:
        # one name for every joint would read the same column seven times
        raise ValueError(f'{field}: template {template!r} needs {{index}} or {{joint}}')


@dataclass(frozen=True, eq=False)
class TableRecording:
    """A table read through a :class:`ColumnMapping`, in the model's joint order.

    Attributes:
        t_ns: (N,) int64 time stamps [ns], strictly increasing (as the table has them: not
            shifted to start at 0).
        q: (N, n) joint positions [rad], n = ``model.n_joints``; NaN for joints the table
            lacks (``missing_joints``) and for empty cells.
        qd_measured: (N, n) measured joint velocities [rad/s] (NaN as in ``q``), or None
            when no velocity column is mapped.
        effort: (N, n) joint torque [N*m], NaN for joints without a column. With
            ``effort_source == 'current'`` it holds the motor current [A] instead: no
            torque constant was given, so a fit must identify the scale.
        current: (N, n) motor current [A] (NaN as in ``q``), or None when not mapped.
        effort_source: ``'effort'`` (an effort column), ``'current*torque_constant'`` or
            ``'current'`` (see ``effort``).
        columns: field (``time``, ``position``, ...) -> the column names read, in the
            order of the mapping's joints.
        missing_joints: model joints the table has no column for, mimic joints included
            (their rows are NaN; ``model.fill_mimic`` fills mimic positions).
        joint_names: the model's joint names, the order of the n columns.
        rate_hz: the median sample rate of the stamps [Hz] (NaN for a single row).
        path: the file read.
        commanded: (q, qd, qdd) of the commanded trajectory, each (N, n) [rad, rad/s,
            rad/s^2] (NaN for joints without a column), or None when not mapped.
    """

    t_ns: np.ndarray
    q: np.ndarray
    qd_measured: np.ndarray | None
    effort: np.ndarray
    current: np.ndarray | None
    effort_source: EffortSource
    columns: dict[str, list[str]]
    missing_joints: tuple[str, ...]
    joint_names: tuple[str, ...]
    rate_hz: float
    path: Path
    commanded: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def read_table(path: str | Path, mapping: ColumnMapping, model: RobotModel) -> TableRecording:
    """Read a ``.csv``, ``.csv.gz``, ``.parquet`` or ``.pq`` file through ``mapping``.

    Rows with NaN or empty cells are kept as NaN (only the time column must be complete).

    Raises:
        FileNotFoundError: no such file.
        TableError: an unknown suffix, missing or non-numeric columns (the message lists
            the file's columns), a time column with gaps, stamps that do not increase
            strictly (the first such row is named), ``joints`` the model lacks, or a
            ``torque_constant`` of the wrong length.
    """
    path = Path(path)
    try:
        return _read(path, mapping, model)
    except TableError:
        raise
    except ValueError as err:
        raise TableError(f'{path}: {err}') from err


def _read(path: Path, mapping: ColumnMapping, model: RobotModel) -> TableRecording:
    if not path.is_file():
        raise FileNotFoundError(f'table file not found: {path}')
    names = mapping.column_names(model)
    joints = mapping.table_joints(model)
    if mapping.torque_constant is not None and len(mapping.torque_constant) != len(joints):
        raise ValueError(f'torque_constant has {len(mapping.torque_constant)} values for '
                         f'the {len(joints)} joints {list(joints)}')
    wanted = [c for cols in names.values() for c in cols]
    table = _load(path, wanted, header=mapping.header)
    n_rows = table.num_rows
    if n_rows == 0:
        raise TableError(f'{path}: the table has no rows')

    t_ns = _stamps(path, table.column(mapping.time), mapping)
    index = model.joint_index(joints)

    def per_joint(field: str) -> np.ndarray | None:
        if field not in names:
            return None
        unit_field, units = _QUANTITIES[field]
        scale = units[getattr(mapping, unit_field)]
        out = np.full((n_rows, model.n_joints), np.nan)
        for k, column in zip(index, names[field]):
            out[:, k] = _numbers(path, table.column(column), column) * scale
        return out

    q = per_joint('position')
    assert q is not None                      # position is always mapped
    current = per_joint('current')
    effort = per_joint('effort')
    source: EffortSource
    if effort is not None:
        source = 'effort'
    else:
        assert current is not None            # the mapping holds effort or current
        effort = current.copy()
        if mapping.torque_constant is not None:
            effort[:, index] *= np.asarray(mapping.torque_constant)
            source = 'current*torque_constant'
        else:
            source = 'current'
    rate = 1e9 / float(np.median(np.diff(t_ns))) if n_rows > 1 else math.nan
    q_c, qd_c, qdd_c = (per_joint(field) for field in COMMANDED)
    commanded = None if q_c is None or qd_c is None or qdd_c is None else (q_c, qd_c, qdd_c)
    return TableRecording(
        t_ns=t_ns, q=q, qd_measured=per_joint('velocity'), effort=effort, current=current,
        effort_source=source, columns=names,
        missing_joints=tuple(j for j in model.joint_names if j not in joints),
        joint_names=tuple(model.joint_names), rate_hz=rate, path=path,
        commanded=commanded)


def _load(path: Path, wanted: list[str], *, header: bool = True) -> pa.Table:
    """The ``wanted`` columns of the file (time as text for CSV: parsed in _stamps);
    without a ``header`` row, a CSV's columns are named '1', '2', ..."""
    name = path.name.lower()
    suffix = '.csv.gz' if name.endswith('.csv.gz') else path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise TableError(f'{path}: unknown table format {suffix!r}; the suffix must be one '
                         f'of {list(TABLE_SUFFIXES)}')
    if not header and suffix in ('.parquet', '.pq'):
        raise TableError(f'{path}: header false is for CSV; a Parquet file names its columns')
    read = pa_csv.ReadOptions()
    try:
        if suffix in ('.parquet', '.pq'):
            available = pq.read_schema(path).names
        elif header:
            # the header alone: the columns are read below with their types fixed, so a
            # column of integers turning float deep in the file cannot fail inference
            available = pa_csv.open_csv(path).schema.names
        else:
            count = len(pa_csv.open_csv(path, read_options=pa_csv.ReadOptions(
                autogenerate_column_names=True)).schema.names)
            available = [str(k + 1) for k in range(count)]
            read = pa_csv.ReadOptions(column_names=available)
    except (pa.ArrowException, OSError) as err:
        raise TableError(f'{path}: cannot read the table: {err}') from err
    missing = [c for c in dict.fromkeys(wanted) if c not in available]
    if missing:
        raise TableError(f'{path}: missing columns {_short(missing)}; the file has '
                         f'{_short(available)}')
    doubled = sorted({c for c in wanted if available.count(c) > 1})
    if doubled:
        raise TableError(f'{path}: the columns {doubled} appear more than once')
    try:
        if suffix in ('.parquet', '.pq'):
            return pq.read_table(path, columns=list(dict.fromkeys(wanted)))
        time = wanted[0]
        types = {c: pa.float64() for c in wanted[1:]}
        types[time] = pa.string()
        options = pa_csv.ConvertOptions(include_columns=list(dict.fromkeys(wanted)),
                                        column_types=types, strings_can_be_null=True)
        return pa_csv.read_csv(path, read_options=read, convert_options=options)
    except (pa.ArrowException, OSError) as err:
        raise TableError(f'{path}: cannot read the table: {err}') from err


def _short(names: Sequence[str], limit: int = 12) -> str:
    """A list of column names for a message, cut after ``limit``."""
    shown = ', '.join(repr(n) for n in names[:limit])
    return f'[{shown}]' if len(names) <= limit else f'[{shown}, ...] ({len(names)} in all)'


def _numbers(path: Path, column: pa.ChunkedArray, name: str) -> np.ndarray:
    """A column as (N,) float64, nulls as NaN."""
    try:
        values = pc.cast(column, pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise TableError(f'{path}: column {name!r} is not numeric ({column.type}): '
                         f'{err}') from err
    return np.asarray(values.to_numpy(), dtype=np.float64)


def _stamps(path: Path, column: pa.ChunkedArray, mapping: ColumnMapping) -> np.ndarray:
    """The time column as (N,) int64 [ns], checked to increase strictly."""
    name = mapping.time
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise TableError(f'{path}: column {name!r} has no stamp in row {row} (rows counted '
                         'from 0 after the header)')
    kind = column.type
    t_ns: np.ndarray
    if pa.types.is_timestamp(kind) or pa.types.is_duration(kind):
        if kind.unit != mapping.time_unit:
            raise TableError(f'{path}: column {name!r} is {kind}: set time_unit to '
                             f'{kind.unit!r}, not {mapping.time_unit!r}')
        t_ns = column.cast(pa.int64()).to_numpy() * _NS_PER[kind.unit]
    else:
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            try:                              # integers stay exact (ns since 1970 > 2**53)
                column = pc.cast(column, pa.int64())
            except pa.ArrowInvalid:
                pass
        raw = (np.asarray(column.to_numpy(), dtype=np.int64)
               if pa.types.is_integer(column.type) else _numbers(path, column, name))
        per_unit = TIME_UNITS[mapping.time_unit]
        if per_unit is None:                  # a sample index
            assert mapping.rate_hz is not None
            step = 1e9 / mapping.rate_hz
            per_unit = int(step) if step.is_integer() else None
            if per_unit is None:
                raw = raw * step
                per_unit = 1
        if raw.dtype.kind == 'f':
            bad = np.flatnonzero(~np.isfinite(raw))
            if bad.size:
                raise TableError(f'{path}: column {name!r} has the non-finite stamp '
                                 f'{raw[bad[0]]} in row {int(bad[0])} (rows counted from 0 '
                                 'after the header)')
            t_ns = np.rint(raw * per_unit).astype(np.int64)
        else:
            t_ns = raw.astype(np.int64) * per_unit
    step_ns = np.diff(t_ns)
    bad = np.flatnonzero(step_ns <= 0)
    if bad.size:
        row = int(bad[0]) + 1
        what = 'repeats' if step_ns[bad[0]] == 0 else 'goes back from'
        raise TableError(
            f'{path}: column {name!r} must increase strictly: row {row} (rows counted from '
            f'0 after the header) {what} the stamp of row {row - 1} ({t_ns[row]} ns after '
            f'{t_ns[row - 1]} ns); {bad.size} such rows in all')
    return t_ns
