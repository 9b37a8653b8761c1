"""Many bags at once: ``plag-ros analyze DIR -o OUT`` on a real Dask cluster.

The references are single-bag runs of the same command on each bag (the outputs must be
equal to the bit), each bag's own summary.txt (the fleet report's figures must print as
it does), and the recovery rules of :mod:`plag_ros.io.bag` (a cut bag is salvaged and
flagged, a corrupt one reported). The clusters are real: a ``LocalCluster`` of 2 worker
processes, and a scheduler and workers started as separate processes by the ``dask``
command line. Bags are written into tmp_path; nothing binary is shipped.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from plag_ros.apps import fleet
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.io.bag import JOINT_STATE_TYPE, BagError, typestore_for
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate
from plag_ros.ros.messages import joint_state

T0_NS = 1_700_000_000_000_000_000
PERIOD_NS = 5_000_000          # 200 Hz
COUNT = 600                    # 3 s
SKIP = ['--skip', 'bag', '--skip', 'plots', '--no-progress']
GOOD = ('trial_a', 'trial_b')


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _write(path: Path, model: RobotModel, seed: int, storage: str) -> None:
    """3 s of a seeded motion inside the joint limits, message by message and flushed
    every 50 ms of message time, as the recorder writes (many mcap chunks)."""
    rng = np.random.default_rng(seed)
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    t_ns = T0_NS + np.arange(COUNT, dtype=np.int64) * PERIOD_NS
    s = (t_ns - T0_NS)[:, None] * 1e-9
    k = model.joint_index(names)
    middle = 0.5 * (model.joint_lower[k] + model.joint_upper[k])
    q = middle + rng.uniform(0.1, 0.4, len(names)) * np.sin(
        2 * np.pi * rng.uniform(0.3, 1.2, len(names)) * s + rng.uniform(0, 6, len(names)))
    template = CdrTemplate(joint_state(names, np.zeros(len(names)), np.zeros(len(names)),
                                       None, t_ns=TEMPLATE_NS))
    rows = template.fill(t_ns, {'position': q, 'velocity': np.zeros_like(q)})
    with BagWriter(path, storage=storage, typestore=typestore_for('kilted'),
                   flush_period=0.05) as writer:
        topic = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
        for k in range(COUNT):
            writer.write(topic, int(t_ns[k]), rows[k].data)


@pytest.fixture(scope='module')
def bags(model, tmp_path_factory) -> Path:
    """A lab's directory: two whole bags (mcap, sqlite3), one cut short at 2/3 of its
    file (a crash), one whose file is garbage."""
    root = tmp_path_factory.mktemp('lab') / 'bags'
    _write(root / 'trial_a', model, 1, 'mcap')
    _write(root / 'trial_b', model, 2, 'sqlite3')
    _write(root / 'trial_cut', model, 3, 'mcap')
    mcap = next((root / 'trial_cut').glob('*.mcap'))
    with open(mcap, 'r+b') as f:
        f.truncate(mcap.stat().st_size * 2 // 3)
    _write(root / 'trial_bad', model, 4, 'mcap')
    bad = next((root / 'trial_bad').glob('*.mcap'))
    bad.write_bytes(np.random.default_rng(0).bytes(bad.stat().st_size))
    return root


def analyze(*args: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'plag_ros.apps.cli', 'analyze',
                           *map(str, args), *SKIP], capture_output=True, text=True,
                          timeout=600, env=env)


def _same_outputs(a: Path, b: Path) -> None:
    """Bit-equal products: every npz array, the csv and the summary text."""
    with np.load(a / 'analysis.npz') as x, np.load(b / 'analysis.npz') as y:
        assert sorted(x.files) == sorted(y.files)
        for name in x.files:
            assert np.array_equal(x[name], y[name]), name
            assert x[name].dtype == y[name].dtype, name
    assert (a / 'torques.csv').read_bytes() == (b / 'torques.csv').read_bytes()
    assert (a / 'summary.txt').read_text() == (b / 'summary.txt').read_text()


@pytest.fixture(scope='module')
def fleet_run(bags, tmp_path_factory):
    """One many-bag run on a LocalCluster of 2 worker processes."""
    out = tmp_path_factory.mktemp('fleet') / 'out'
    run = analyze(bags, '-o', out, '--workers', '2')
    return out, run


@pytest.mark.long
def test_local_cluster_matches_single_bag_runs(bags, fleet_run, tmp_path):
    out, run = fleet_run
    # a bag failed: the run says so with the single-bag error status, the rest finished
    assert run.returncode == fleet.EXIT_FAILED == 2, run.stderr
    assert 'local cluster of 2 worker processes' in run.stderr
    assert re.search(r'trial_bad: BagReadError', run.stderr), run.stderr
    assert '4 bags: 2 analysed, 1 salvaged, 0 skipped, 1 failed' in run.stdout
    for name in GOOD:
        single = analyze(bags / name, '-o', tmp_path / name)
        assert single.returncode == 0, single.stderr
        _same_outputs(out / name, tmp_path / name)
    # the cut bag: salvaged up to the cut, flagged, the same as its own run (exit 3)
    single = analyze(bags / 'trial_cut', '-o', tmp_path / 'trial_cut')
    assert single.returncode == 3, single.stderr
    _same_outputs(out / 'trial_cut', tmp_path / 'trial_cut')
    assert 'recovered: ' in (out / 'trial_cut' / 'summary.txt').read_text()
    # the corrupt bag: reported, no outputs recorded as complete
    assert not (out / 'trial_bad' / fleet.RECORD).exists()


def _summary_figures(text: str) -> dict:
    """The numbers summary.txt prints, as the report names them."""
    figures: dict = {}
    m = re.search(r': (\d+) samples over ([\d.]+) s \(([\d.]+) Hz\); (\d+) decomposed', text)
    assert m, text
    figures.update(samples=int(m[1]), duration_s=float(m[2]), rate_hz=float(m[3]),
                   decomposed=int(m[4]))
    table = text.split('RMS per component')[1].split('Largest motion propagation')[0]
    for line in table.splitlines()[2:]:
        if line.strip():
            name, *values = line.split()
            for component, value in zip(('torque', 'acceleration', 'velocity', 'gravity',
                                         'friction'), values):
                figures[f'rms_{component}[{name}]'] = float(value)
    paths = text.split('Largest motion propagation paths')[1].split('Largest partial')[0]
    for i, line in enumerate(p for p in paths.splitlines()[1:] if p.strip()):
        value, part, source, _, joint = line.split()
        figures.update({f'path{i + 1}_rms': float(value), f'path{i + 1}_part': part,
                        f'path{i + 1}_source': source, f'path{i + 1}_joint': joint})
    return figures


def _printed(key: str, value):
    """``value`` as summary.txt prints it (the precision of each figure)."""
    if key == 'duration_s':
        return round(value, 3)
    if key == 'rate_hz':
        return round(value, 1)
    if key.startswith(('rms_', 'path')) and isinstance(value, float):
        return round(value, 4)
    return value


@pytest.mark.long
def test_fleet_report_equals_each_bag_summary(fleet_run):
    out, _ = fleet_run
    with open(out / 'fleet.csv', newline='') as f:
        rows = {row['bag']: row for row in csv.DictReader(f)}
    table = pq.read_table(out / 'fleet.parquet').to_pylist()
    assert [r['bag'] for r in table] == ['trial_a', 'trial_b', 'trial_bad', 'trial_cut']
    parquet = {r['bag']: r for r in table}
    for name in (*GOOD, 'trial_cut'):
        figures = _summary_figures((out / name / 'summary.txt').read_text())
        assert len(figures) > 50
        for key, expected in figures.items():
            value = parquet[name][key]
            assert _printed(key, value) == pytest.approx(expected, abs=1e-12), (name, key)
            text = rows[name][key]       # the csv holds the same value, to the bit
            assert (float(text) == value) if isinstance(value, float) else \
                (text == str(value)), (name, key)
    assert parquet['trial_a']['status'] == 'analysed' and parquet['trial_a']['exit_code'] == 0
    assert parquet['trial_cut']['status'] == 'salvaged'
    assert parquet['trial_cut']['exit_code'] == 3 and parquet['trial_cut']['recovered_with_loss']
    assert parquet['trial_cut']['samples'] < COUNT
    assert parquet['trial_a']['samples'] == COUNT and parquet['trial_a']['rejected'] == 0
    bad = parquet['trial_bad']
    assert bad['status'] == 'failed' and bad['exit_code'] == 2
    assert 'BagReadError' in bad['error'] and bad['samples'] is None
    assert math.isnan(float(rows['trial_bad']['rate_hz'] or 'nan'))
    for figure in ('fleet_rms.png', 'fleet_paths.png'):
        assert (out / figure).stat().st_size > 10_000


@pytest.mark.long
def test_rerun_skips_finished_bags_and_force_redoes_them(bags, fleet_run):
    out, _ = fleet_run
    stamps = {name: (out / name / 'analysis.npz').stat().st_mtime_ns
              for name in (*GOOD, 'trial_cut')}
    again = analyze(bags, '-o', out, '--workers', '2')
    assert again.returncode == 2, again.stderr
    assert '4 bags: 0 analysed, 0 salvaged, 3 skipped, 1 failed' in again.stdout
    assert all((out / n / 'analysis.npz').stat().st_mtime_ns == t for n, t in stamps.items())
    with open(out / 'fleet.csv', newline='') as f:
        status = {row['bag']: row['status'] for row in csv.DictReader(f)}
    assert status == {'trial_a': 'skipped (analysed)', 'trial_b': 'skipped (analysed)',
                      'trial_cut': 'skipped (salvaged)', 'trial_bad': 'failed'}
    # an input that changed is analysed again; the others stay skipped
    record = json.loads((out / 'trial_a' / fleet.RECORD).read_text())
    record['input_sha256'] = '0' * 64
    (out / 'trial_a' / fleet.RECORD).write_text(json.dumps(record))
    changed = analyze(bags / 'trial_a', bags / 'trial_b', '-o', out, '--workers', '1')
    assert changed.returncode == 0, changed.stderr
    assert '2 bags: 1 analysed, 0 salvaged, 1 skipped, 0 failed' in changed.stdout
    forced = analyze(f'{bags}/trial_[ab]', '-o', out, '--workers', '2', '--force')
    assert forced.returncode == 0, forced.stderr
    assert '2 bags: 2 analysed, 0 salvaged, 0 skipped, 0 failed' in forced.stdout
    assert (out / 'trial_b' / 'analysis.npz').stat().st_mtime_ns != stamps['trial_b']


@pytest.mark.long
def test_salvaged_without_failures_exits_3(bags, tmp_path):
    run = analyze(bags / 'trial_a', bags / 'trial_cut', '-o', tmp_path / 'out',
                  '--workers', '1')
    assert run.returncode == 3, run.stderr


@pytest.mark.long
def test_scheduler_and_workers_started_apart(bags, fleet_run, tmp_path):
    """``--scheduler`` against ``dask scheduler`` and ``dask worker`` processes."""
    dask = Path(sys.executable).parent / 'dask'
    info = tmp_path / 'scheduler.json'
    scheduler = subprocess.Popen([dask, 'scheduler', '--scheduler-file', info, '--port', '0',
                                  '--no-dashboard', '--host', '127.0.0.1'],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = None
    try:
        deadline = time.monotonic() + 60
        while not info.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(info.read_text())['address']
        workers = subprocess.Popen([dask, 'worker', '--scheduler-file', info, '--nworkers', '2',
                                    '--nthreads', '1', '--no-dashboard'],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out = tmp_path / 'out'
        run = analyze(*(bags / n for n in GOOD), '-o', out, '--scheduler', address,
                      '--workers', '2')
        assert run.returncode == 0, run.stderr
        assert f'on scheduler {address}' in run.stderr
        for name in GOOD:
            _same_outputs(out / name, fleet_run[0] / name)
        # Dask's own convention for the address gives the same
        by_env = analyze(bags / 'trial_a', bags / 'trial_b', '-o', tmp_path / 'env',
                         env={**os.environ, 'DASK_SCHEDULER_ADDRESS': address})
        assert by_env.returncode == 0 and f'on scheduler {address}' in by_env.stderr
    finally:
        for process in (workers, scheduler):
            if process is not None:
                process.terminate()
                process.wait(timeout=30)


def test_threads_never_oversubscribe_a_host():
    workers = [{'address': f'tcp://a:{i}', 'host': 'a', 'nthreads': 1, 'cores': 2}
               for i in range(2)] + [{'address': 'tcp://b:1', 'host': 'b', 'nthreads': 2,
                                      'cores': 16}, {'address': 'tcp://c:1', 'host': 'c',
                                                     'nthreads': 4, 'cores': 2}]
    threads = fleet.threads_per_worker(workers)
    assert threads == {'tcp://a:0': 1, 'tcp://a:1': 1, 'tcp://b:1': 8, 'tcp://c:1': 1}
    for host in 'abc':
        on = [w for w in workers if w['host'] == host]
        cores = on[0]['cores']
        assert sum(w['nthreads'] * threads[w['address']] for w in on) <= max(
            cores, sum(w['nthreads'] for w in on))


def test_find_bags_paths_directories_globs_and_errors(bags, tmp_path):
    found = fleet.find_bags([bags])
    assert [b.name for b in found] == ['trial_a', 'trial_b', 'trial_bad', 'trial_cut']
    assert fleet.find_bags([bags / 'trial_b', f'{bags}/trial_[ab]']) == [
        bags / 'trial_b', bags / 'trial_a']
    single = next((bags / 'trial_a').glob('*.mcap'))
    assert fleet.find_bags([single]) == [single] and fleet.bag_name(single) == 'trial_a'
    with pytest.raises(BagError, match='no file or directory matches'):
        fleet.find_bags([tmp_path / 'nothing_*'])
    (tmp_path / 'empty').mkdir()
    with pytest.raises(BagError, match='neither a bag nor a directory holding bags'):
        fleet.find_bags([tmp_path / 'empty'])
    (tmp_path / 'notes.txt').write_text('x')
    with pytest.raises(BagError, match='not a bag'):
        fleet.find_bags([tmp_path / 'notes.txt'])


def test_one_path_stays_the_single_bag_run(bags, tmp_path):
    """Only a directory holding bags, or a pattern, is a many-bag run: one bag, one file
    that is not a bag, or an empty directory keep the single-bag run and its errors."""
    assert fleet.names_many(bags) and fleet.names_many(f'{bags}/trial_*')
    assert not fleet.names_many(bags / 'trial_a')
    assert not fleet.names_many(next((bags / 'trial_a').glob('*.mcap')))
    (tmp_path / 'empty').mkdir()
    assert not fleet.names_many(tmp_path / 'empty')
    assert not fleet.names_many(tmp_path / 'missing')


def test_bags_of_the_same_name_get_distinct_outputs(tmp_path):
    for subject in ('s1', 's2'):
        (tmp_path / subject / 'trial').mkdir(parents=True)
        (tmp_path / subject / 'trial' / 'trial.mcap').write_bytes(b'')
    (tmp_path / 'other.db3').write_bytes(b'')
    bags = fleet.find_bags([tmp_path / 'other.db3', f'{tmp_path}/s*/trial'])
    assert fleet._names(bags) == ['other', 's1__trial', 's2__trial']
    # single-file bags side by side in a directory: each its own bag
    (tmp_path / 'files').mkdir()
    for name in ('run1.mcap', 'run2.db3'):
        (tmp_path / 'files' / name).write_bytes(b'')
    assert [b.name for b in fleet.find_bags([tmp_path / 'files'])] == ['run1.mcap',
                                                                        'run2.db3']
    (tmp_path / 'files' / 'run1.db3').write_bytes(b'')
    with pytest.raises(BagError, match='share an output directory'):
        fleet._names(fleet.find_bags([tmp_path / 'files']))
    # a recording cut before its metadata.yaml: rosbag2's file names make it one bag
    (tmp_path / 'cut').mkdir()
    for name in ('cut_0.mcap', 'cut_1.mcap'):
        (tmp_path / 'cut' / name).write_bytes(b'')
    assert fleet.find_bags([tmp_path / 'cut']) == [tmp_path / 'cut']


@pytest.mark.long
def test_rerun_with_every_product_skips_until_an_output_is_gone(bags, tmp_path):
    """With the default products (figures and the output bag included) a rerun skips the
    bag; a file of its outputs removed, or cut short, makes it redo that bag."""
    out = tmp_path / 'out'

    def run() -> str:
        done = subprocess.run([sys.executable, '-m', 'plag_ros.apps.cli', 'analyze',
                               str(bags / 'trial_a'), str(bags / 'trial_b'), '-o', str(out),
                               '--workers', '1', '--no-progress'],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert '2 bags: 2 analysed' in run()
    assert (out / 'trial_a' / 'propagation.png').exists() and (out / 'trial_a' / 'bag').is_dir()
    assert '2 bags: 0 analysed, 0 salvaged, 2 skipped' in run()
    (out / 'trial_a' / 'propagation.png').unlink()
    with open(out / 'trial_b' / 'torques.csv', 'r+b') as f:
        f.truncate(100)
    assert '2 bags: 2 analysed, 0 salvaged, 0 skipped' in run()
    assert (out / 'trial_a' / 'propagation.png').exists()
