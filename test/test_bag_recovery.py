"""Recordings cut short by a crash: what :func:`plag_ros.io.bag.open_bag` salvages.

The reference for "the messages before the cut" is never the salvage code itself: it is
the ``rosbags`` reader on the whole bag, split by the chunk index ``rosbags`` reads from the
whole file's summary (mcap), or the counts the writer had committed at each flush
(sqlite3). Bags are written into ``tmp_path``; nothing binary is shipped.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import Reader
from rosbags.rosbag2.storage_mcap import McapReader

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.io.bag import (
    EXIT_RECOVERED_WITH_LOSS,
    JOINT_STATE_TYPE,
    BagError,
    BagReadError,
    open_bag,
    read_joint_states,
    recovery_of,
    typestore_for,
)
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate
from plag_ros.ros.messages import joint_state

T0_NS = 1_700_000_000_000_000_000
PERIOD_NS = 10_000_000          # 100 Hz
STORE = typestore_for('kilted')
STRING = 'std_msgs/msg/String'


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _joint_rows(model: RobotModel, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(count,) stamps and (count, size) JointState CDR rows of a seeded motion."""
    rng = np.random.default_rng(7)
    names = list(model.joint_names)
    t_ns = T0_NS + np.arange(count, dtype=np.int64) * PERIOD_NS
    q = np.cumsum(rng.normal(0.0, 0.01, (count, len(names))), axis=0)
    template = CdrTemplate(joint_state(names, np.zeros(len(names)), np.zeros(len(names)),
                                       None, t_ns=TEMPLATE_NS))
    return t_ns, template.fill(t_ns, {'position': q, 'velocity': 10 * q})


def _string(text: str) -> bytes:
    msg = STORE.types[STRING](data=text)
    return bytes(STORE.serialize_cdr(msg, STRING))


def _write_two_topics(path: Path, model: RobotModel, *, storage: str = 'mcap',
                      compression: str = 'none', count: int = 300,
                      flush_period: float | None = 0.05, fsync: bool = False) -> None:
    """JointState at 100 Hz plus a String every third sample, message by message (as the
    recorder writes), flushing every ``flush_period`` s of message time: many chunks."""
    t_ns, rows = _joint_rows(model, count)
    with BagWriter(path, storage=storage, typestore=STORE, compression=compression,
                   flush_period=flush_period, fsync=fsync) as writer:
        js = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
        text = writer.add_topic('/chatter', STRING)
        for k in range(count):
            writer.write(js, int(t_ns[k]), rows[k].data)
            if k % 3 == 1:
                writer.write(text, int(t_ns[k]) + 1, _string(f'note {k}'))


def _all_messages(reader) -> list[tuple[str, int, bytes]]:
    return sorted((c.topic, t, bytes(raw)) for c, t, raw in reader.messages())


def _mcap_file(bag: Path) -> Path:
    return next(bag.glob('*.mcap'))


def _cut(src: Path, dst_dir: Path, offset: int) -> Path:
    """A bare copy of ``src`` truncated to ``offset`` bytes."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / f'cut_{offset}.mcap'
    with open(src, 'rb') as f:
        dst.write_bytes(f.read(offset))
    return dst


@pytest.mark.parametrize('compression', ['none', 'lz4', 'zstd'])
def test_mcap_cut_at_many_offsets_recovers_exactly_the_whole_chunks(tmp_path, model,
                                                                    compression):
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, compression=compression)
    mcap = _mcap_file(bag)
    with Reader(bag) as reader:                     # the whole bag, read by rosbags
        full = _all_messages(reader)
    index = McapReader(mcap)
    index.open()
    chunks = sorted(index.chunks, key=lambda c: c.chunk_start_offset)
    summary_start = index.data_end        # just after the DataEnd record
    index.close()
    assert len(chunks) >= 40, 'the flush period should have made many small chunks'
    size = mcap.stat().st_size
    rng = np.random.default_rng(2024)
    offsets = {c.chunk_start_offset + d for c in chunks for d in (0, 1)}
    offsets |= {c.chunk_start_offset + c.chunk_length + d for c in chunks for d in (-1, 0)}
    offsets |= set(rng.integers(0, size, 60).tolist()) | {0, 5, 8, size - 1}
    checked = 0
    for offset in sorted(offsets):
        whole = [c for c in chunks if c.chunk_start_offset + c.chunk_length <= offset]
        cut = _cut(mcap, tmp_path / 'cuts', offset)
        if not whole:
            with pytest.raises(BagReadError):
                with open_bag(cut):
                    pass
            continue
        t_last = max(c.message_end_time for c in whole)
        expected = [m for m in full if m[1] <= t_last]
        with open_bag(cut) as reader:
            got = _all_messages(reader)
            report = recovery_of(reader)
        assert got == expected, f'cut at {offset} of {size}'
        assert report is not None and report.messages == len(expected)
        assert report.cut_time_ns == t_last
        if offset >= summary_start:        # only the summary is cut: nothing lost
            assert not report.lossy and report.cut_offset is None and expected == full
        else:
            last_end = max(c.chunk_start_offset + c.chunk_length for c in whole)
            assert report.lossy and last_end <= report.cut_offset <= offset
        assert report.per_topic == {t: sum(m[0] == t for m in expected)
                                    for t in {m[0] for m in expected}}
        cut.unlink()
        checked += 1
    assert checked > 100


def test_truncated_bag_directory_gives_the_same_joint_states(tmp_path, model):
    """Salvaged CDR decodes (bulk path and the rosbags typestore) to the same samples."""
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, count=200)
    full = read_joint_states(bag, model)
    assert full.recovery is None
    mcap = _mcap_file(bag)
    index = McapReader(mcap)
    index.open()
    chunk = sorted(index.chunks, key=lambda c: c.chunk_start_offset)[20]
    index.close()
    with open(mcap, 'r+b') as f:                      # in place, metadata.yaml kept
        f.truncate(chunk.chunk_start_offset + chunk.chunk_length + 3)
    cut = read_joint_states(bag, model)
    k = int(np.searchsorted(full.t_ns, chunk.message_end_time, side='right'))
    assert 0 < k < len(full.t_ns) and len(cut.t_ns) == k
    np.testing.assert_array_equal(cut.t_ns, full.t_ns[:k])
    np.testing.assert_array_equal(cut.q, full.q[:k])
    np.testing.assert_array_equal(cut.qd, full.qd[:k])
    assert cut.recovery is not None and cut.recovery.lossy
    assert f'cut at byte {cut.recovery.cut_offset}' in cut.recovery.summary()
    with open_bag(bag) as reader:
        notes = [STORE.deserialize_cdr(raw, STRING).data
                 for c, _, raw in reader.messages() if c.topic == '/chatter']
    assert notes == [f'note {j}' for j in range(1, k, 3)]


def test_open_mcap_file_copied_mid_recording(tmp_path, model):
    """The file a killed recorder leaves: every flushed message, none of the open chunk."""
    t_ns, rows = _joint_rows(model, 100)
    bag = tmp_path / 'bag'
    writer = BagWriter(bag, typestore=STORE, flush_period=3600.0)
    conn = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
    for k in range(60):
        writer.write(conn, int(t_ns[k]), rows[k].data)
    writer.flush()
    for k in range(60, 90):
        writer.write(conn, int(t_ns[k]), rows[k].data)
    snapshot = tmp_path / 'snapshot'
    snapshot.mkdir()
    shutil.copy(_mcap_file(bag), snapshot / 'snapshot.mcap')
    writer.close()
    with open_bag(snapshot) as reader:
        got = [(t, bytes(raw)) for _, t, raw in reader.messages()]
        report = recovery_of(reader)
    assert got == [(int(t_ns[k]), rows[k].tobytes()) for k in range(60)]
    assert report.lossy and report.chunks == 1 and report.cut_offset == report.file_bytes


def test_mcap_with_zero_filled_tail(tmp_path, model):
    """A power cut can leave the file longer than what reached the disk, filled with 0."""
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, count=100)
    mcap = _mcap_file(bag)
    with Reader(bag) as reader:
        full = _all_messages(reader)
    index = McapReader(mcap)
    index.open()
    chunk = sorted(index.chunks, key=lambda c: c.chunk_start_offset)[5]
    index.close()
    end = chunk.chunk_start_offset + chunk.chunk_length
    data = bytearray(mcap.read_bytes())
    data[end:] = bytes(len(data) - end)
    mcap.write_bytes(bytes(data))
    with open_bag(bag) as reader:
        got = _all_messages(reader)
        report = recovery_of(reader)
    assert got == [m for m in full if m[1] <= chunk.message_end_time]
    assert report.cut_offset == end and report.file_bytes == len(data)


def test_sqlite3_without_metadata_recovers_everything(tmp_path, model):
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, storage='sqlite3', count=150, flush_period=None)
    with Reader(bag) as reader:
        full = _all_messages(reader)
        qos = {c.topic: c.ext.offered_qos_profiles for c in reader.connections}
    (bag / 'metadata.yaml').unlink()
    with open_bag(bag) as reader:
        got = _all_messages(reader)
        report = recovery_of(reader)
        assert {c.topic: c.ext.offered_qos_profiles for c in reader.connections} == qos
        assert reader.topics['/joint_states'].msgtype == JOINT_STATE_TYPE
    assert got == full
    assert report is not None and not report.lossy and report.messages == len(full)
    assert 'recovered without loss' in report.summary()
    js = read_joint_states(bag, model)
    assert len(js.t_ns) == 150 and js.recovery is not None


def _sqlite_snapshot(tmp_path: Path, model: RobotModel) -> tuple[Path, list[int], list]:
    """Copy a db3 and its WAL mid-recording; return the copy, the message counts committed
    at each flush, and every message in write order."""
    t_ns, rows = _joint_rows(model, 240)
    bag = tmp_path / 'bag'
    writer = BagWriter(bag, storage='sqlite3', typestore=STORE, flush_period=3600.0)
    conn = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
    committed = [0]
    written = []
    for k in range(240):
        writer.write(conn, int(t_ns[k]), rows[k].data)
        written.append(('/joint_states', int(t_ns[k]), rows[k].tobytes()))
        if k % 40 == 39 and k < 200:
            writer.flush()
            committed.append(k + 1)
    snapshot = tmp_path / 'snapshot'
    snapshot.mkdir()
    for src in bag.iterdir():
        if src.suffix in ('.db3', '.db3-wal') or src.name.endswith('-wal'):
            shutil.copy(src, snapshot / src.name)
    writer.close()
    return snapshot, committed, written


def test_sqlite3_killed_mid_recording_keeps_every_commit(tmp_path, model):
    snapshot, committed, written = _sqlite_snapshot(tmp_path, model)
    assert any(p.name.endswith('-wal') for p in snapshot.iterdir())
    with Reader(tmp_path / 'bag') as reader:          # the finished bag opens as before
        assert _all_messages(reader) == sorted(written)
    with open_bag(snapshot) as reader:
        got = _all_messages(reader)
        report = recovery_of(reader)
    assert got == sorted(written[:committed[-1]])
    assert report.lossy and 'did not finish' in report.reason


def test_sqlite3_wal_cut_at_many_offsets_keeps_whole_commits(tmp_path, model):
    snapshot, committed, written = _sqlite_snapshot(tmp_path, model)
    wal = next(p for p in snapshot.iterdir() if p.name.endswith('-wal'))
    data = wal.read_bytes()
    rng = np.random.default_rng(11)
    offsets = sorted(set(rng.integers(0, len(data), 40).tolist()) | {0, 32, len(data)})
    previous = -1
    for offset in offsets:
        shutil.rmtree(tmp_path / 'cut', ignore_errors=True)
        shutil.copytree(snapshot, tmp_path / 'cut')
        (tmp_path / 'cut' / wal.name).write_bytes(data[:offset])
        with open_bag(tmp_path / 'cut') as reader:
            got = _all_messages(reader)
        n = len(got)
        assert n in committed, f'WAL cut at {offset}: {n} messages is not a commit boundary'
        assert got == sorted(written[:n])
        assert n >= previous, 'a longer WAL must not recover fewer messages'
        previous = n
    assert previous == committed[-1]


_CHILD = textwrap.dedent("""
    import sys, time
    from plag_ros.io.bag import typestore_for
    from plag_ros.io.bag_writer import BagWriter
    store = typestore_for('kilted')
    String = store.types['std_msgs/msg/String']
    writer = BagWriter(sys.argv[1], storage=sys.argv[2], typestore=store, flush_period=0.5)
    conn = writer.add_topic('/count', 'std_msgs/msg/String')
    log = open(sys.argv[3], 'w', buffering=1)
    k = 0
    while True:
        t = time.time_ns()
        # logged first: a SIGKILL between the two leaves a logged message the bag may
        # lack, never one on disk the log has not seen (its flush may run inside write)
        log.write(f'{k} {t}\\n')
        writer.write(conn, t, store.serialize_cdr(String(data=str(k)), 'std_msgs/msg/String'))
        k += 1
        time.sleep(0.005)
""")


def _salvaged_count(bag: Path) -> int:
    try:
        with open_bag(bag) as reader:
            return sum(1 for _ in reader.messages())
    except Exception:  # noqa: BLE001 - nothing whole on disk yet
        return 0


@pytest.mark.parametrize('storage', ['mcap', 'sqlite3'])
def test_sigkill_loses_at_most_the_last_second(tmp_path, storage):
    """A writer killed with SIGKILL: what is on disk is every message up to within
    ``flush_period`` (0.5 s) of the last one it wrote, with no gap."""
    bag, log = tmp_path / 'bag', tmp_path / 'written.txt'
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = subprocess.Popen([sys.executable, '-c', _CHILD, str(bag), storage, str(log)],
                             env=env)
    try:
        deadline = time.monotonic() + 60.0
        while _salvaged_count(bag) < 200:             # several flushes reached the disk
            assert child.poll() is None, 'the writer died on its own'
            assert time.monotonic() < deadline, 'no flushed messages within 60 s'
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    lines = [line.split() for line in log.read_text().splitlines() if line.strip()]
    written_t = {int(k): int(t) for k, t in (x for x in lines if len(x) == 2)}
    last_written = max(written_t)
    with open_bag(bag) as reader:
        counts = [int(STORE.deserialize_cdr(raw, STRING).data) for _, _, raw in
                  reader.messages()]
        report = recovery_of(reader)
    assert report is not None and report.lossy
    assert counts == list(range(len(counts))), 'the recovered messages have a gap'
    lost_s = (written_t[last_written] - written_t[counts[-1]]) * 1e-9
    assert lost_s <= 1.0, f'{lost_s:.3f} s of messages lost ({report.summary()})'


@pytest.mark.parametrize('compression', ['none', 'zstd'])
def test_damaged_mcap_gives_samples_or_a_bag_error(tmp_path, model, compression):
    """8 random bytes overwritten at 60 seeded places: a result or a BagError, never
    another exception; a salvaged result is a prefix of the whole bag's samples."""
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, count=200, compression=compression)
    full = read_joint_states(bag, model)
    mcap = _mcap_file(bag)
    data = mcap.read_bytes()
    rng = np.random.default_rng(5)
    outcomes = {'whole': 0, 'salvaged': 0, 'error': 0}
    for _ in range(60):
        damaged = bytearray(data)
        at = int(rng.integers(0, len(data) - 8))
        damaged[at:at + 8] = rng.integers(0, 256, 8, dtype=np.uint8).tobytes()
        mcap.write_bytes(bytes(damaged))
        try:
            js = read_joint_states(bag, model)
        except BagError:
            outcomes['error'] += 1
            continue
        outcomes['whole' if js.recovery is None else 'salvaged'] += 1
        if js.recovery is not None:
            k = len(js.t_ns)
            np.testing.assert_array_equal(js.t_ns, full.t_ns[:k])
    assert all(outcomes.values()), outcomes      # every branch was exercised


def test_truncated_db3_is_a_clear_error(tmp_path, model):
    """A cut main .db3 file (not what a WAL recording leaves: SQLite only writes it in
    checkpoints) cannot be salvaged here; it is a BagReadError naming the file."""
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, storage='sqlite3', count=300, flush_period=None)
    db3 = bag / 'bag.db3'
    data = db3.read_bytes()
    for with_metadata in (True, False):
        if not with_metadata:
            (bag / 'metadata.yaml').unlink()
        for offset in np.linspace(0, len(data), 7).astype(int)[1:-1]:
            db3.write_bytes(data[:offset])
            with pytest.raises(BagReadError, match='bag'):
                read_joint_states(bag, model)


def test_analyze_reports_the_salvage_and_exits_with_recovered_with_loss(tmp_path, model):
    """``plag-ros analyze`` on a cut bag: it analyses what came back, says where the cut was
    and exits with EXIT_RECOVERED_WITH_LOSS (3); on the whole bag it exits with 0."""
    bag = tmp_path / 'bag'
    _write_two_topics(bag, model, count=300)
    args = ['--skip', 'bag', '--skip', 'plots', '--skip', 'csv', '--no-progress']

    def analyze(source: Path, out: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, '-m', 'plag_ros.apps.cli', 'analyze',
                               str(source), '-o', str(out), *args],
                              capture_output=True, text=True, timeout=300)

    whole = analyze(bag, tmp_path / 'whole')
    assert whole.returncode == 0, whole.stderr
    assert 'recovered:' not in (tmp_path / 'whole' / 'summary.txt').read_text()
    mcap = _mcap_file(bag)
    with open(mcap, 'r+b') as f:
        f.truncate(mcap.stat().st_size * 2 // 3)
    cut = analyze(bag, tmp_path / 'cut')
    assert cut.returncode == EXIT_RECOVERED_WITH_LOSS == 3, cut.stderr
    assert 'cut at byte' in cut.stderr
    summary = (tmp_path / 'cut' / 'summary.txt').read_text()
    assert 'recovered: ' in summary and 'cut at byte' in summary
    with np.load(tmp_path / 'cut' / 'analysis.npz') as npz:
        assert 0 < len(npz['input_t_ns']) < 300
