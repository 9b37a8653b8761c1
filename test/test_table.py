"""plag_ros.io.table: joint recordings in CSV, gzip CSV and Parquet, read through a column
mapping. Tables written here with known values come back in the model's joint order and
SI units; every refusal names what is wrong; the Kinova Gen3 recordings in
``shared/data/real_arms/kinova_gen3`` (when present) read as their README describes."""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from real_arms import real_arm_data

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.io.table import ColumnMapping, TableError, TableRecording, read_table

REPO = Path(__file__).resolve().parents[1]
KINOVA_MAPPING = REPO / 'config' / 'columns' / 'kinova_gen3.yaml'

_LINK = ('<link name="{name}"><inertial><origin xyz="0.01 0.02 0.1"/><mass value="1.0"/>'
         '<inertia ixx="0.01" iyy="0.012" izz="0.008" ixy="0" ixz="0" iyz="0"/>'
         '</inertial></link>')
_JOINT = ('<joint name="{name}" type="revolute"><parent link="{parent}"/>'
          '<child link="{child}"/><origin xyz="0 0 0.2"/><axis xyz="{axis}"/>'
          '<limit lower="-3" upper="3" effort="10" velocity="3"/>{extra}</joint>')

# Three driven joints and a fourth that mimics the third (a gripper's second finger).
URDF = ('<robot name="table_test"><link name="base"/>'
        + ''.join(_LINK.format(name=f'l{k}') for k in range(1, 5))
        + _JOINT.format(name='j1', parent='base', child='l1', axis='0 0 1', extra='')
        + _JOINT.format(name='j2', parent='l1', child='l2', axis='0 1 0', extra='')
        + _JOINT.format(name='j3', parent='l2', child='l3', axis='1 0 0', extra='')
        + _JOINT.format(name='j3m', parent='l3', child='l4', axis='1 0 0',
                        extra='<mimic joint="j3" multiplier="-1" offset="0"/>')
        + '</robot>')


@pytest.fixture(scope='module')
def model() -> RobotModel:
    robot = RobotModel.from_urdf(URDF)
    assert robot.joint_names == ('j1', 'j2', 'j3', 'j3m')
    assert list(robot.actuated) == [True, True, True, False]
    return robot


def _values(rows: int, cols: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2.0, 2.0, size=(rows, cols))


def write_csv(path: Path, columns: dict[str, np.ndarray | list]) -> Path:
    """``columns`` as CSV (``repr`` of each float: the reader must get the same double)."""
    names = list(columns)
    rows = zip(*(list(columns[n]) for n in names))
    text = io.StringIO()
    writer = csv.writer(text, lineterminator='\n')
    writer.writerow(names)
    for row in rows:
        writer.writerow(['' if isinstance(v, float) and math.isnan(v) else repr(v)
                         for v in (x.item() if hasattr(x, 'item') else x for x in row)])
    if path.name.endswith('.gz'):
        with gzip.open(path, 'wt', encoding='utf-8') as fh:
            fh.write(text.getvalue())
    else:
        path.write_text(text.getvalue())
    return path


# ----------------------------------------------------------------------- round trips
def test_csv_in_seconds_and_radians_comes_back_in_model_order(tmp_path, model):
    """Default joints (the actuated ones), ``{joint}`` templates, effort in N*m; the mimic
    joint the table lacks is NaN and listed as missing, and fill_mimic completes it."""
    n = 50
    t = 100.0 + 0.004 * np.arange(n)           # seconds, not starting at 0
    q, qd, tau = _values(n, 3, 1), _values(n, 3, 2), _values(n, 3, 3)
    columns: dict[str, np.ndarray] = {'stamp': t}
    for k, joint in enumerate(('j1', 'j2', 'j3')):
        columns[f'{joint}_pos'] = q[:, k]
        columns[f'{joint}_vel'] = qd[:, k]
        columns[f'{joint}_tau'] = tau[:, k]
    columns['unrelated'] = np.zeros(n)
    path = write_csv(tmp_path / 'run.csv', columns)
    mapping = ColumnMapping.from_dict({'time': 'stamp', 'position': '{joint}_pos',
                                       'velocity': '{joint}_vel', 'effort': '{joint}_tau'})

    rec = read_table(path, mapping, model)

    assert isinstance(rec, TableRecording)
    assert rec.t_ns.dtype == np.int64
    np.testing.assert_array_equal(rec.t_ns, np.rint(t * 1e9).astype(np.int64))
    assert rec.rate_hz == pytest.approx(250.0, rel=1e-9)
    assert rec.q.shape == rec.effort.shape == (n, 4) and rec.q.dtype == np.float64
    np.testing.assert_array_equal(rec.q[:, :3], q)
    np.testing.assert_array_equal(rec.qd_measured[:, :3], qd)
    np.testing.assert_array_equal(rec.effort[:, :3], tau)
    assert np.isnan(rec.q[:, 3]).all() and np.isnan(rec.effort[:, 3]).all()
    assert rec.missing_joints == ('j3m',)
    assert rec.joint_names == model.joint_names
    assert rec.current is None and rec.effort_source == 'effort'
    assert rec.columns == {'time': ['stamp'], 'position': ['j1_pos', 'j2_pos', 'j3_pos'],
                           'velocity': ['j1_vel', 'j2_vel', 'j3_vel'],
                           'effort': ['j1_tau', 'j2_tau', 'j3_tau']}
    assert rec.path == path
    np.testing.assert_array_equal(model.fill_mimic(rec.q)[:, 3], -q[:, 2])


def test_gzip_csv_in_degrees_and_milliseconds_with_current_times_torque_constant(
        tmp_path, model):
    """``joints`` in an order of its own and leaving j2 out, degrees, a time in ms, the
    current in mA turned into torque by the torque constants."""
    n = 40
    t_ms = 2.5 * np.arange(n)                  # 400 Hz
    deg, deg_s, milliamp = 90 * _values(n, 2, 4), 90 * _values(n, 2, 5), 500 * _values(n, 2, 6)
    joints = ['j3', 'j1']                       # Position1 is j3's column, Position2 j1's
    columns: dict[str, np.ndarray] = {'t_ms': t_ms}
    for k in range(2):
        columns[f'Position{k + 1}'] = deg[:, k]
        columns[f'Velocity{k + 1}'] = deg_s[:, k]
        columns[f'Cur{k + 1}'] = milliamp[:, k]
    path = write_csv(tmp_path / 'run.csv.gz', columns)
    kt = [0.25, 2.0]
    mapping = ColumnMapping.from_dict({
        'time': 't_ms', 'time_unit': 'ms', 'joints': joints,
        'position': 'Position{index}', 'position_unit': 'deg',
        'velocity': 'Velocity{index}', 'velocity_unit': 'deg/s',
        'current': 'Cur{index}', 'current_unit': 'mA', 'torque_constant': kt})

    rec = read_table(path, mapping, model)

    np.testing.assert_array_equal(rec.t_ns, 2_500_000 * np.arange(n))
    assert rec.rate_hz == pytest.approx(400.0, rel=1e-12)
    order = [2, 0]                              # model columns of j3 and j1
    # each conversion is one multiplication by the unit's factor
    np.testing.assert_array_equal(rec.q[:, order], deg * (math.pi / 180))
    np.testing.assert_array_equal(rec.qd_measured[:, order], deg_s * (math.pi / 180))
    np.testing.assert_array_equal(rec.current[:, order], milliamp * 1e-3)
    np.testing.assert_allclose(rec.effort[:, order], milliamp * 1e-3 * np.array(kt),
                               rtol=1e-15, atol=0)
    np.testing.assert_allclose(rec.q[:, order], np.deg2rad(deg), rtol=1e-15, atol=0)
    assert rec.effort_source == 'current*torque_constant'
    assert rec.missing_joints == ('j2', 'j3m')
    for array in (rec.q, rec.qd_measured, rec.current, rec.effort):
        assert np.isnan(array[:, [1, 3]]).all()
    assert rec.columns['current'] == ['Cur1', 'Cur2']


@pytest.mark.parametrize('suffix', ['.parquet', '.pq'])
def test_parquet_with_a_sample_index_and_current_only(tmp_path, model, suffix):
    """A sample index at 250 Hz starting at 10 (4 ms a step, exact in ns); current without
    a torque constant: the effort is then the current itself, in A."""
    n = 30
    amps, q = _values(n, 3, 7), _values(n, 3, 8)
    table = {'index': pa.array(np.arange(10, 10 + n), pa.int64())}
    for k in range(3):
        table[f'q{k + 1}'] = pa.array(q[:, k])
        table[f'i{k + 1}'] = pa.array(amps[:, k])
    path = tmp_path / f'run{suffix}'
    pq.write_table(pa.table(table), path)
    mapping = ColumnMapping(time='index', time_unit='sample', rate_hz=250,
                            position='q{index}', current='i{index}')

    rec = read_table(path, mapping, model)

    np.testing.assert_array_equal(rec.t_ns, 4_000_000 * np.arange(10, 10 + n))
    assert rec.rate_hz == 250.0
    np.testing.assert_array_equal(rec.q[:, :3], q)
    np.testing.assert_array_equal(rec.current[:, :3], amps)
    np.testing.assert_array_equal(rec.effort[:, :3], amps)
    assert rec.effort_source == 'current' and rec.qd_measured is None


def test_a_sample_rate_that_is_no_whole_number_of_nanoseconds(tmp_path, model):
    """At 3 Hz a step is 333333333.3 ns: each stamp is rounded to the nearest ns."""
    n = 7
    path = write_csv(tmp_path / 'run.csv', {'k': np.arange(n), 'p1': np.zeros(n),
                                            'p2': np.zeros(n), 'p3': np.zeros(n),
                                            'e1': np.zeros(n), 'e2': np.zeros(n),
                                            'e3': np.zeros(n)})
    mapping = ColumnMapping(time='k', time_unit='sample', rate_hz=3.0, position='p{index}',
                            effort='e{index}')
    rec = read_table(path, mapping, model)
    np.testing.assert_array_equal(rec.t_ns, [round(k * 1e9 / 3) for k in range(n)])


def test_parquet_timestamp_column_and_integer_nanoseconds(tmp_path, model):
    """A timestamp column counts in its own unit; integer ns since 1970 stay exact (they
    exceed 2**53, where a double would round them)."""
    n = 5
    t_ns = 1_760_000_000_123_456_789 + 1_000_003 * np.arange(n)
    zeros = pa.array(np.zeros(n))
    columns = {f'{c}{k}': zeros for c in 'pe' for k in (1, 2, 3)}
    path = tmp_path / 'stamped.parquet'
    pq.write_table(pa.table({'t': pa.array(t_ns, pa.timestamp('ns')),
                             't_int': pa.array(t_ns, pa.int64()), **columns}), path)
    csv_path = write_csv(tmp_path / 'stamped.csv', {'t_int': t_ns, **{
        name: np.zeros(n) for name in columns}})
    for time, where in (('t', path), ('t_int', path), ('t_int', csv_path)):
        mapping = ColumnMapping(time=time, time_unit='ns', position='p{index}',
                                effort='e{index}')
        np.testing.assert_array_equal(read_table(where, mapping, model).t_ns, t_ns)
    wrong = ColumnMapping(time='t', time_unit='us', position='p{index}', effort='e{index}')
    with pytest.raises(TableError, match=r"timestamp\[ns\]: set time_unit to 'ns'"):
        read_table(path, wrong, model)


def test_empty_cells_and_nan_rows_are_kept_as_nan(tmp_path, model):
    path = tmp_path / 'gaps.csv'
    path.write_text('t,p1,p2,p3,e1,e2,e3\n'
                    '0.0,1.0,2.0,3.0,0.1,0.2,0.3\n'
                    '0.1,,2.5,nan,0.1,0.2,0.3\n'
                    '0.2,NaN,NaN,NaN,,,\n'
                    '0.3,4.0,5.0,6.0,0.4,0.5,0.6\n')
    mapping = ColumnMapping(time='t', position='p{index}', effort='e{index}')
    rec = read_table(path, mapping, model)
    assert rec.q.shape == (4, 4)
    np.testing.assert_array_equal(rec.q[:, :3], [[1, 2, 3], [np.nan, 2.5, np.nan],
                                                 [np.nan] * 3, [4, 5, 6]])
    assert np.isnan(rec.effort[2, :3]).all()


def test_the_kinova_mapping_file_reads_back_as_documented():
    mapping = ColumnMapping.from_yaml(KINOVA_MAPPING)
    assert mapping == ColumnMapping(
        time='Time', time_unit='sample', rate_hz=1000.0,
        joints=tuple(f'joint_{k}' for k in range(1, 8)),
        position='Position{index}', position_unit='rad',
        velocity='Velocity{index}', velocity_unit='rad/s',
        effort='TorqueCur{index}', effort_unit='N*m', current='Cur{index}', current_unit='A',
        commanded_position='PositionCmptd{index}', commanded_velocity='VelocityCmptd{index}',
        commanded_acceleration='AccCmptd{index}')
    header = KINOVA_MAPPING.read_text()
    assert '44f47d5640d89c7b97e584bb10163c4a2b3ced00' in header and 'MIT' in header


# ----------------------------------------------------------------------- refusals
def _table(tmp_path: Path, time: list[float] | None = None) -> Path:
    time = [0.0, 0.01, 0.02, 0.03] if time is None else time
    n = len(time)
    return write_csv(tmp_path / 'run.csv', {'t': time, **{
        f'{c}{k}': np.full(n, 0.5) for c in 'pe' for k in (1, 2, 3)}})


def test_a_missing_column_names_the_file_the_columns_and_what_the_file_has(tmp_path,
                                                                            model):
    path = _table(tmp_path)
    mapping = ColumnMapping(time='t', position='p{index}', velocity='v{index}',
                            effort='e{index}')
    with pytest.raises(TableError) as err:
        read_table(path, mapping, model)
    message = str(err.value)
    assert str(path) in message
    assert "missing columns ['v1', 'v2', 'v3']" in message
    assert "the file has ['t', 'p1', 'p2', 'p3', 'e1'" in message
    # a wide file's list is cut short
    wide = write_csv(tmp_path / 'wide.csv', {f'c{k}': [0.0] for k in range(40)})
    with pytest.raises(TableError, match=r"\['c0', .*'c11', \.\.\.\] \(40 in all\)"):
        read_table(wide, mapping, model)
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize('time,row,what', [
    ([0.0, 0.01, 0.01, 0.02], 2, 'repeats'),
    ([0.0, 0.01, 0.02, 0.015], 3, 'goes back from'),
])
def test_stamps_that_do_not_increase_name_the_row(tmp_path, model, time, row, what):
    mapping = ColumnMapping(time='t', position='p{index}', effort='e{index}')
    with pytest.raises(TableError, match=rf'row {row} .*{what} the stamp of row {row - 1}'):
        read_table(_table(tmp_path, time), mapping, model)


def test_a_time_column_with_a_gap_or_text_is_refused(tmp_path, model):
    mapping = ColumnMapping(time='t', position='p{index}', effort='e{index}')
    path = tmp_path / 'gap.csv'
    path.write_text('t,p1,p2,p3,e1,e2,e3\n0,0,0,0,0,0,0\n,0,0,0,0,0,0\n')
    with pytest.raises(TableError, match=r"'t' has no stamp in row 1"):
        read_table(path, mapping, model)
    path.write_text('t,p1,p2,p3,e1,e2,e3\n0,0,0,0,0,0,0\nlater,0,0,0,0,0,0\n')
    with pytest.raises(TableError, match=r"column 't' is not numeric"):
        read_table(path, mapping, model)
    path.write_text('t,p1,p2,p3,e1,e2,e3\n0,0,0,0,0,0,0\n1,0,zero,0,0,0,0\n')
    with pytest.raises(TableError, match=r'gap.csv.*invalid value .zero.'):
        read_table(path, mapping, model)


def test_joints_the_model_lacks_are_named_with_the_model_joints(tmp_path, model):
    mapping = ColumnMapping(time='t', joints=['j1', 'elbow', 'j3'], position='p{index}',
                            effort='e{index}')
    with pytest.raises(TableError, match=r"\['elbow'\] are not joints of the model; it has "
                                         r"\['j1', 'j2', 'j3', 'j3m'\]"):
        read_table(_table(tmp_path), mapping, model)


def test_a_torque_constant_per_joint_is_checked_against_the_joints(tmp_path, model):
    mapping = ColumnMapping(time='t', position='p{index}', current='e{index}',
                            torque_constant=[1.0, 2.0])
    with pytest.raises(TableError, match=r'torque_constant has 2 values for the 3 joints'):
        read_table(_table(tmp_path), mapping, model)


def test_unknown_suffix_and_missing_file(tmp_path, model):
    mapping = ColumnMapping(time='t', position='p{index}', effort='e{index}')
    other = tmp_path / 'run.tsv'
    other.write_text('t\n0\n')
    with pytest.raises(TableError, match=r"unknown table format '\.tsv'"):
        read_table(other, mapping, model)
    with pytest.raises(FileNotFoundError):
        read_table(tmp_path / 'absent.csv', mapping, model)


def test_the_commanded_trajectory_reads_in_the_measured_states_units(tmp_path, model):
    """The commanded columns take the position unit, the velocity unit and the position
    unit per s^2 (here deg, rad/s and deg/s^2); the mimic joint has none (NaN, as its
    measured position), and an empty cell stays NaN."""
    n = 30
    t = 0.01 * np.arange(n)
    q, qc, vc, ac = (_values(n, 3, seed) for seed in (6, 7, 8, 9))
    ac[4, 1] = np.nan
    header = ['t'] + [f'{kind}{k}' for kind in ('p', 'e', 'cp', 'cv', 'ca') for k in (1, 2, 3)]
    body = np.column_stack([t, q, q, qc, vc, ac])
    path = tmp_path / 'commanded.csv'
    path.write_text(','.join(header) + '\n' + '\n'.join(
        ','.join('' if np.isnan(v) else repr(float(v)) for v in row) for row in body) + '\n')
    mapping = ColumnMapping(time='t', position='p{index}', effort='e{index}',
                            position_unit='deg', velocity_unit='rad/s',
                            commanded_position='cp{index}', commanded_velocity='cv{index}',
                            commanded_acceleration='ca{index}')

    rec = read_table(path, mapping, model)

    assert rec.commanded is not None
    degree = np.pi / 180.0
    for got, want in zip(rec.commanded, (qc * degree, vc, ac * degree)):
        np.testing.assert_allclose(got[:, :3], want, rtol=1e-15, atol=0.0)
        assert np.isnan(got[:, 3]).all()
    assert np.isnan(rec.commanded[2][4, 1]) and np.isfinite(rec.commanded[1][4, 1])
    assert read_table(path, dataclasses.replace(
        mapping, commanded_position=None, commanded_velocity=None,
        commanded_acceleration=None), model).commanded is None


def test_a_csv_without_a_header_row_reads_through_columns_by_number(tmp_path, model):
    """A MATLAB-era log: no header row, the column meanings only in the loader code.
    Columns are named by their 1-based place; the mapping lists them (numbers from YAML),
    in any order, and reads the same doubles as a headed table would."""
    n = 40
    t = 0.005 * np.arange(n)
    q, tau = _values(n, 3, 4), _values(n, 3, 5)
    # columns: 1 time, 2-4 effort of j3, j2, j1 (reversed), 5-7 position j1..j3, 8 junk
    body = np.column_stack([t, tau[:, ::-1], q, np.ones(n)])
    path = tmp_path / 'log.csv'
    path.write_text('\n'.join(','.join(repr(float(v)) for v in row) for row in body) + '\n')
    mapping_file = tmp_path / 'log.yaml'
    mapping_file.write_text('header: false\ntime: 1\nposition: [5, 6, 7]\n'
                            'effort: [4, 3, 2]\n')
    mapping = ColumnMapping.from_yaml(mapping_file)
    assert mapping.time == '1' and mapping.position == ('5', '6', '7')

    rec = read_table(path, mapping, model)

    assert len(rec.t_ns) == n                   # the first row is data, not a header
    np.testing.assert_array_equal(rec.t_ns, np.rint(t * 1e9).astype(np.int64))
    np.testing.assert_array_equal(rec.q[:, :3], q)
    np.testing.assert_array_equal(rec.effort[:, :3], tau)
    assert rec.columns['effort'] == ['4', '3', '2']
    # a column beyond the file's is named with what the file has
    wide = ColumnMapping.from_dict({'header': False, 'time': 1, 'position': [5, 6, 9],
                                    'effort': [4, 3, 2]})
    with pytest.raises(TableError, match=r"missing columns \['9'\]; the file has \['1', '2'"):
        read_table(path, wide, model)
    with pytest.raises(ValueError, match=r'position: 2 columns listed for the 3 joints'):
        read_table(path, ColumnMapping.from_dict({**GOOD, 'position': [5, 6]}), model)
    parquet = tmp_path / 'log.parquet'
    pq.write_table(pa.table({'1': t}), parquet)
    with pytest.raises(TableError, match='header false is for CSV'):
        read_table(parquet, mapping, model)


GOOD = {'time': 't', 'position': 'p{index}', 'effort': 'e{index}'}


@pytest.mark.parametrize('change,message', [
    ({'colour': 'red'}, r"unknown keys \['colour'\]; a column mapping has \['time'"),
    ({'position_unit': 'grad'}, r"position_unit: 'grad' is not one of \['rad', 'deg'\]"),
    ({'velocity': 'v{index}', 'velocity_unit': 'rpm'}, r"velocity_unit: 'rpm' is not"),
    ({'effort_unit': 'N'}, r"effort_unit: 'N' is not one of \['N\*m'\]"),
    ({'current': 'c{index}', 'current_unit': 'uA'}, r"current_unit: 'uA'"),
    ({'time_unit': 'min'}, r"time_unit: 'min' is not one of \['s', 'ms', 'us', 'ns', "
                           r"'sample'\]"),
    ({'time_unit': 'sample'}, r'rate_hz: time_unit sample needs a positive sample rate'),
    ({'time_unit': 'sample', 'rate_hz': -5}, r'rate_hz: .* got -5'),
    ({'rate_hz': 100}, r"rate_hz: only for time_unit sample, not 's'"),
    ({'effort': None}, r'map effort or current'),
    ({'position': 'Position'}, r"position: template 'Position' needs \{index\} or \{joint\}"),
    ({'position': 'p{axis}'}, r"may use only \{index\} and \{joint\}, not \['axis'\]"),
    ({'position': 'p{index'}, r"position: template 'p\{index' does not parse"),
    ({'position': 3}, r'position: a string is needed, got 3'),
    ({'position': [2, 2, 3]}, r"position: the columns \['2'\] are listed more than once"),
    ({'position': []}, r'position: a list of column names or numbers is needed, got \[\]'),
    ({'header': 'no'}, r"header: true or false, got 'no'"),
    ({'joints': ['j1', 'j1']}, r"joints: \['j1'\] named more than once"),
    ({'joints': 'j1'}, r'joints: a list of joint names is needed'),
    ({'torque_constant': [1.0]}, r'torque_constant: given without a current column'),
    ({'current': 'c{index}', 'torque_constant': ['a']}, r'torque_constant: a list of finite'),
    ({'current': 'c{index}', 'joints': ['j1'], 'torque_constant': [1.0, 2.0]},
     r'torque_constant: 2 values for 1 joints'),
    ({'commanded_position': 'cp{index}', 'commanded_velocity': 'cv{index}',
      'commanded_acceleration': 'ca{index}', 'velocity_unit': 'rpm'},
     r"velocity_unit: 'rpm' is not"),
    ({'commanded_position': 'cp{index}', 'commanded_velocity': 'cv{index}'},
     r'commanded_position, commanded_velocity: the commanded trajectory needs all of '
     r'commanded_position, commanded_velocity, commanded_acceleration'),
])
def test_a_bad_mapping_names_the_key_and_the_value(change, message):
    with pytest.raises(ValueError, match=message):
        ColumnMapping.from_dict({**GOOD, **change})


def test_a_mapping_needs_time_and_position_and_a_dict():
    with pytest.raises(ValueError, match=r"missing keys \['position'\]"):
        ColumnMapping.from_dict({'time': 't', 'effort': 'e{index}'})
    with pytest.raises(ValueError, match=r'a column mapping is a dict of keys, got list'):
        ColumnMapping.from_dict(['time'])


def test_a_bad_yaml_file_is_named(tmp_path):
    path = tmp_path / 'columns.yaml'
    path.write_text('time: t\nposition: p{index}\neffort: e{index}\nunits: rad\n')
    with pytest.raises(ValueError, match=rf"{path.name}: unknown keys \['units'\]"):
        ColumnMapping.from_yaml(path)
    path.write_text('time: t\nposition: {joint}\neffort: e{index}\n')   # a YAML map
    with pytest.raises(ValueError, match=rf'{path.name}: position: .*quote a template'):
        ColumnMapping.from_yaml(path)
    path.write_text('time: [t\n')
    with pytest.raises(ValueError, match=rf'{path.name}: not valid YAML'):
        ColumnMapping.from_yaml(path)


# ----------------------------------------------------------------------- the Kinova Gen3
# Measured on RunTrajectory1 (1942 rows): the position change per 1 ms step against the
# Velocity column differs by 0.0156 rad/s at the median (positions are printed to 1e-6 rad,
# so a step resolves 1e-3 rad/s) while the arm moves at up to 1.37 rad/s; about 3 % of the
# steps are off by up to 1.5 rad/s (a sample taken late, then one early). The least-squares
# factor between the two is 0.966. A time unit off by 10x would move both by that factor.
KINOVA_MEDIAN_TOL = 0.03        # rad/s, on the median |dq/dt - velocity|
KINOVA_FACTOR_TOL = 0.05        # on the least-squares factor velocity / (dq/dt)


def test_the_kinova_gen3_recording_reads_through_its_mapping():
    folder = real_arm_data('kinova_gen3')
    path = folder / 'RunTrajectory1.csv.gz'
    model = RobotModel.from_urdf(folder / 'kinovaGen3.urdf')
    rec = read_table(path, ColumnMapping.from_yaml(KINOVA_MAPPING), model)

    assert rec.q.shape == (1942, 7) and rec.missing_joints == ()
    assert rec.rate_hz == 1000.0
    np.testing.assert_array_equal(np.diff(rec.t_ns), 1_000_000)
    with gzip.open(path, 'rt', encoding='utf-8') as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1942
    # the file's own numbers, parsed by Python, in model order (joint_k is column k)
    for k, joint in enumerate(rec.joint_names):
        index = int(joint.removeprefix('joint_'))
        for field, array in (('Position', rec.q), ('Velocity', rec.qd_measured),
                             ('TorqueCur', rec.effort), ('Cur', rec.current)):
            expected = np.array([float(row[f'{field}{index}']) for row in rows])
            np.testing.assert_array_equal(array[:, k], expected, err_msg=f'{field}{index}')
    assert rec.effort_source == 'effort'

    # Velocity is the change of position per step: the stamps' unit checked independently
    dq_dt = np.diff(rec.q, axis=0) / (np.diff(rec.t_ns)[:, None] * 1e-9)
    velocity = rec.qd_measured[1:]
    median = float(np.median(np.abs(dq_dt - velocity)))
    factor = float(np.sum(dq_dt * velocity) / np.sum(dq_dt * dq_dt))
    assert median < KINOVA_MEDIAN_TOL, median
    assert abs(factor - 1.0) < KINOVA_FACTOR_TOL, factor
    assert np.abs(velocity).max() > 1.0          # the check means something: it moves
