"""The MCAP bulk writer that reaches into ``rosbags``' McapWriter, and its fallback.

:class:`plag_ros.io.bag_writer.BagWriter` appends whole chunks of Message records to the chunk the
``rosbags`` McapWriter has open (its private attributes), on the ``rosbags`` versions it
was tested with (``ROSBAGS_TESTED``, pinned in requirements/libraries.txt). Elsewhere, or when an
attribute is missing, it writes through the public API and warns once. Both must give the
same bag when read back by ``rosbags``.
"""
from __future__ import annotations

import re
import shutil
import struct
import warnings
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
from rosbags.rosbag2 import Reader

from plag_ros.io import bag_writer as bagmod
from plag_ros.io.bag import JOINT_STATE_TYPE, open_bag, qos_profile, typestore_for
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate
from plag_ros.ros.messages import joint_state

T0_NS = 1_700_000_000_000_000_000
STORE = typestore_for('kilted')
NAMES = [f'joint{k}' for k in range(7)]


def _rows(count: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    t_ns = T0_NS + np.cumsum(rng.integers(1_000_000, 9_000_000, count)).astype(np.int64)
    template = CdrTemplate(joint_state(NAMES, np.zeros(7), None, None, t_ns=TEMPLATE_NS))
    return t_ns, template.fill(t_ns, {'position': rng.normal(size=(count, 7))})


def _write(path: Path, *, compression: str = 'none', count: int = 6000,
           flush_period: float | None = None) -> BagWriter:
    """Two topics in bulk; 6000 JointState rows are over 1 MiB, so several chunks."""
    t_ns, rows = _rows(count)
    t2, rows2 = _rows(50, seed=4)
    with BagWriter(path, typestore=STORE, compression=compression,
                   flush_period=flush_period, fsync=False) as writer:
        js = writer.add_topic('/joint_states', JOINT_STATE_TYPE, qos=qos_profile(depth=50))
        other = writer.add_topic('/other', JOINT_STATE_TYPE,
                                 qos=qos_profile(reliable=False, transient_local=True))
        writer.write_rows(js, t_ns[:count // 2], rows[:count // 2])
        for t, row in zip(t2.tolist(), rows2):
            writer.write(other, t, row.data)
        writer.write_rows(js, t_ns[count // 2:], rows[count // 2:])
    return writer


def _read_back(path: Path) -> tuple[list, list, int]:
    with Reader(path) as reader:
        conns = sorted((c.topic, c.msgtype, c.msgcount, tuple(c.ext.offered_qos_profiles))
                       for c in reader.connections)
        msgs = [(c.topic, t, bytes(raw)) for c, t, raw in reader.messages()]
        return conns, msgs, reader.message_count


def _force_fallback(monkeypatch, reason: str = 'forced by the test') -> None:
    # private: the fallback is reached only on another rosbags; the test fakes its check
    monkeypatch.setattr(bagmod, '_warned', set())
    monkeypatch.setattr(bagmod, '_mcap_internals_problem', lambda writer: reason)


def test_installed_rosbags_is_in_the_pinned_tested_range():
    low, high = bagmod.ROSBAGS_TESTED
    installed = tuple(int(re.match(r'\d*', part).group() or 0)
                      for part in version('rosbags').split('.')[:3])
    assert low <= installed < high, version('rosbags')
    req = (Path(__file__).resolve().parents[1] / 'requirements' / 'libraries.txt').read_text()
    pin = re.search(r'^rosbags\s*>=\s*([\d.]+)\s*,\s*<\s*([\d.]+)\s*$', req, re.M)
    assert pin, 'requirements/libraries.txt must pin rosbags to a range'
    as_tuple = lambda text: tuple(int(x) for x in text.split('.'))  # noqa: E731
    assert (as_tuple(pin.group(1)), as_tuple(pin.group(2))) == (low, high)


@pytest.mark.parametrize('compression', ['none', 'lz4', 'zstd'])
def test_fast_path_and_fallback_write_the_same_bag(tmp_path, monkeypatch, compression):
    fast = _write(tmp_path / 'fast', compression=compression)
    assert fast.fast_path, 'the installed rosbags should take the fast path'
    _force_fallback(monkeypatch)
    with pytest.warns(RuntimeWarning, match='forced by the test'):
        slow = _write(tmp_path / 'slow', compression=compression)
    assert not slow.fast_path
    conns_fast, msgs_fast, n_fast = _read_back(tmp_path / 'fast')
    conns_slow, msgs_slow, n_slow = _read_back(tmp_path / 'slow')
    assert conns_fast == conns_slow
    assert n_fast == n_slow == 6050 == len(msgs_fast)
    assert msgs_fast == msgs_slow
    t_ns, rows = _rows(6000)
    got = [(t, raw) for topic, t, raw in msgs_fast if topic == '/joint_states']
    assert got == [(int(t), r.tobytes()) for t, r in zip(t_ns, rows)]


def _chunk_compressions(path: Path) -> set[str]:
    """The compression field of every Chunk record in the bag's .mcap file (MCAP
    specification: opcode 0x06; start, end and size u64, crc u32, then the string)."""
    data = next(path.glob('*.mcap')).read_bytes()
    pos, found = 8, set()                     # past the leading magic
    while data[pos] != 0x02:                  # up to the Footer record
        opcode, length = data[pos], struct.unpack_from('<Q', data, pos + 1)[0]
        if opcode == 0x06:
            size = struct.unpack_from('<I', data, pos + 9 + 28)[0]
            found.add(data[pos + 9 + 32:pos + 9 + 32 + size].decode())
        pos += 9 + length
    return found


@pytest.mark.parametrize('compression, fallback', [('lz4', 'zstd'), ('zstd', 'zstd')])
def test_fallback_compresses_with_rosbags_own_compressor(tmp_path, monkeypatch, compression,
                                                         fallback):
    """The compressor is replaced through the same internals as the fast path: the
    fallback leaves rosbags' own (zstd) in place, lz4 included, and says so."""
    fast = _write(tmp_path / 'fast', compression=compression)
    assert (fast.compression, _chunk_compressions(tmp_path / 'fast')) == \
        (compression, {compression})
    _force_fallback(monkeypatch)
    match = 'lz4 needs them' if compression == 'lz4' else 'public rosbags API only'
    with pytest.warns(RuntimeWarning, match=match):
        slow = _write(tmp_path / 'slow', compression=compression)
    assert (slow.compression, _chunk_compressions(tmp_path / 'slow')) == \
        (fallback, {fallback})
    assert _read_back(tmp_path / 'slow') == _read_back(tmp_path / 'fast')


def test_fallback_warns_once_and_never_raises(tmp_path, monkeypatch):
    _force_fallback(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        for k in range(3):
            _write(tmp_path / f'bag{k}', count=100)
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1


def test_other_rosbags_version_falls_back(tmp_path, monkeypatch):
    # private: fakes the installed version and clears the warn-once record
    monkeypatch.setattr(bagmod, '_warned', set())
    monkeypatch.setattr(bagmod, '_rosbags_version', lambda: (0, 13, 0))
    with pytest.warns(RuntimeWarning, match=r'rosbags 0\.13\.0 is outside the tested range'):
        writer = _write(tmp_path / 'bag', count=500)
    assert not writer.fast_path
    assert _read_back(tmp_path / 'bag')[2] == 550


def test_missing_internal_falls_back(tmp_path, monkeypatch):
    # private: fakes a rosbags that lacks one of the McapWriter internals the writer needs
    monkeypatch.setattr(bagmod, '_warned', set())
    monkeypatch.setattr(bagmod, '_MCAP_INTERNALS',
                        bagmod._MCAP_INTERNALS + ('attribute_of_another_version',))
    with pytest.warns(RuntimeWarning, match='attribute_of_another_version'):
        writer = _write(tmp_path / 'bag', count=500)
    assert not writer.fast_path
    assert _read_back(tmp_path / 'bag')[2] == 550


@pytest.mark.parametrize('fast', [True, False])
def test_flush_writes_a_salvageable_chunk_on_both_paths(tmp_path, monkeypatch, fast):
    if not fast:
        _force_fallback(monkeypatch)
    t_ns, rows = _rows(300)
    with warnings.catch_warnings():
        warnings.simplefilter('ignore', RuntimeWarning)
        writer = BagWriter(tmp_path / 'bag', typestore=STORE, flush_period=3600.0,
                           fsync=True)
    assert writer.fast_path == fast
    conn = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
    writer.write_rows(conn, t_ns[:200], rows[:200])
    writer.flush()
    writer.write_rows(conn, t_ns[200:], rows[200:])
    (tmp_path / 'copy').mkdir()
    shutil.copy(tmp_path / 'bag' / 'bag.mcap', tmp_path / 'copy' / 'copy.mcap')
    writer.close()
    with open_bag(tmp_path / 'copy') as reader:
        got = [(t, bytes(raw)) for _, t, raw in reader.messages()]
    assert got == [(int(t), r.tobytes()) for t, r in zip(t_ns[:200], rows[:200])]
    assert _read_back(tmp_path / 'bag')[2] == 300


def test_flush_period_in_message_time_bounds_every_chunk(tmp_path):
    """With ``flush_period`` a chunk spans the period of message time, plus at most one
    message spacing."""
    from rosbags.rosbag2.storage_mcap import McapReader

    t_ns, rows = _rows(2000)           # ~10 s of messages at 1-9 ms spacing
    with BagWriter(tmp_path / 'bag', typestore=STORE, flush_period=0.25,
                   fsync=False) as writer:
        conn = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
        for t, row in zip(t_ns.tolist(), rows):
            writer.write(conn, t, row.data)
    index = McapReader(tmp_path / 'bag' / 'bag.mcap')
    index.open()
    spans = [(c.message_end_time - c.message_start_time) * 1e-9 for c in index.chunks]
    index.close()
    # The chunk closes with the first message at least 0.25 s after its first one.
    gap = np.diff(t_ns).max() * 1e-9
    assert len(spans) >= 30
    assert all(0.25 <= s < 0.25 + gap for s in spans[:-1]), (min(spans), max(spans), gap)
    assert spans[-1] < 0.25 + gap


def test_flush_period_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match='flush_period'):
        BagWriter(tmp_path / 'bag', flush_period=0.0)
