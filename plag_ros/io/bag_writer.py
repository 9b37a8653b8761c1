"""Writing rosbag2 bags (``rosbags`` Writer), in bulk and so that they survive a crash.

:class:`BagWriter` wraps ``rosbags.rosbag2.Writer`` (mcap or sqlite3, with offered QoS
profiles, in the metadata version the target distribution's rosbag2 reads:
:data:`METADATA_VERSIONS`) and takes the rows of :class:`plag_ros.io.cdr.CdrTemplate` (N messages
serialized at once) in bulk. The bulk path appends to the chunk that the ``rosbags``
McapWriter has open, through its private attributes, on the versions tested
(:data:`ROSBAGS_TESTED`, pinned in requirements/libraries.txt); elsewhere it writes message by
message through the public API and warns once.

Crash safety: with ``flush_period`` (``plag-ros record`` uses 0.5 s) the writer closes the
open mcap chunk, or commits the sqlite3 transaction into a WAL journal, at least that often
in wall or message time, and syncs the file, so a SIGKILL or a power cut loses at most that
much. Chunked mcap is the default because a cut mcap keeps every whole chunk before the cut
(records are self-delimiting and each chunk carries the schemas and channels first used in
it) and closing a chunk is a plain append; sqlite3 with a WAL journal gives the same bound
(rosbag2's 'resilient' sqlite3 preset uses WAL too). :func:`plag_ros.io.bag.open_bag` salvages
what such a recording leaves (:mod:`plag_ros.io.bag_recovery`).

"""
from __future__ import annotations

import os
import sqlite3
import time
import warnings
from collections import defaultdict
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np
from rosbags.interfaces import Qos
from rosbags.rosbag2 import CompressionFormat, CompressionMode, StoragePlugin, Writer
from rosbags.typesys.store import Typestore

from plag_ros.io.bag import (
    OutputExistsError,
    TopicError,
    open_bag,
    qos_profile,
    typestore_for,
)
from plag_ros.io.bag_recovery import zstd_module as _zstd

__all__ = ['DEFAULT_BAG_FOR', 'METADATA_VERSIONS', 'ROSBAGS_TESTED', 'BagWriter',
           'add_bag_for_argument']

METADATA_VERSIONS = {'humble': 5, 'jazzy': 9, 'kilted': 9}
"""The ``metadata.yaml`` version each distribution's rosbag2 writes, which its reader takes
(test/data/rosbag2_metadata.yaml holds the facts and their sources). A reader decodes each
field by the version the file states, so an older version reads everywhere; a newer one
does not: from 9 on the offered QoS profiles are a YAML sequence, where Humble's reader
expects the YAML text of versions 4 to 8."""
DEFAULT_BAG_FOR = 'humble'
"""Bags are written for Humble unless asked otherwise: version 5, which Humble, Jazzy and
Kilted all read (a bag from a Jazzy lab machine opens on the robot's Humble computer); it
leaves out what later versions add (the type description hash, the ROS distribution, custom
data), which rosbag2 reads as empty."""


def add_bag_for_argument(parser) -> None:
    """``--bag-for DISTRO`` on an ``argparse`` parser of a command that writes a bag."""
    parser.add_argument('--bag-for', choices=sorted(METADATA_VERSIONS),
                        default=DEFAULT_BAG_FOR,
                        help='the ROS 2 distribution whose `ros2 bag` must read the bag '
                             '(metadata version: humble 5, jazzy and kilted 9; default '
                             '%(default)s, which all three read)')


_LATER_FIELDS = {6: ('custom_data',), 8: ('ros_distro',)}
"""Top-level metadata fields by the version that added them (above 5: left out for 5)."""
_LATER_TOPIC_FIELDS = {7: ('type_description_hash',)}

_MCAP_INTERNALS = ('chunk', 'chunks', 'bio', 'compressor', 'compression', 'channel_stats',
                   'message_start_time', 'message_end_time')
_MCAP_CHUNK_INTERNALS = ('bio', 'msgs', 'message_start_time', 'message_end_time')
_WRITER_INTERNALS = ('counts', 'min_timestamp', 'max_timestamp')
_MCAP_HELPERS = ('PendingChunk', 'write_record', 'write_string', 'write_uint16',
                 'write_uint32', 'write_uint64')   # of rosbags.rosbag2.storage_mcap
_MCAP_CHUNK_BYTES = 2 ** 20     # the rosbags writer's chunk size

ROSBAGS_TESTED = ((0, 11, 9), (0, 12))
"""The ``rosbags`` versions whose McapWriter internals the fast path was tested against,
``[low, high)``; requirements/libraries.txt pins the same range. Outside it the writer uses the
public ``rosbags`` API only (a warning says so once)."""

_warned: set[str] = set()


def _rosbags_version() -> tuple[int, ...]:
    from importlib.metadata import version

    parts = []
    for part in version('rosbags').split('.')[:3]:
        digits = ''.join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _mcap_internals_problem(writer: Writer) -> str | None:
    """Why the McapWriter internals cannot be used (None: they can)."""
    low, high = ROSBAGS_TESTED
    try:
        found = _rosbags_version()
    except Exception as err:  # noqa: BLE001 - no distribution metadata: version unknown
        return f'the rosbags version is unknown ({err})'
    if not low <= found < high:
        return (f"rosbags {'.'.join(map(str, found))} is outside the tested range "
                f"{'.'.join(map(str, low))} to <{'.'.join(map(str, high))}")
    storage = getattr(writer, 'storage', None)
    missing = [a for a in _MCAP_INTERNALS if not hasattr(storage, a)]
    missing += [f'chunk.{a}' for a in _MCAP_CHUNK_INTERNALS
                if not hasattr(getattr(storage, 'chunk', None), a)]
    missing += [f'Writer.{a}' for a in _WRITER_INTERNALS if not hasattr(writer, a)]
    try:
        from rosbags.rosbag2 import storage_mcap
    except ImportError as err:
        return f'rosbags has no mcap storage module ({err})'
    missing += [f'storage_mcap.{a}' for a in _MCAP_HELPERS if not hasattr(storage_mcap, a)]
    if missing:
        return f'the rosbags McapWriter lacks {missing}'
    return None


def _warn_once(message: str) -> None:
    """One RuntimeWarning per distinct message and process."""
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class BagWriter:
    """A rosbag2 bag being written (format 9, offered QoS recorded per topic).

    Args:
        path: bag directory to create; must not exist (see :func:`prepare_output`).
        storage: ``'mcap'`` or ``'sqlite3'``.
        typestore: typestore giving the message definitions (default Kilted, the message
            definitions of the installed rclpy packages).
        compression: MCAP chunk compression, ``'none'``, ``'lz4'`` (fast) or ``'zstd'``
            (level 1, smaller); ignored for sqlite3. Both replace the rosbags McapWriter's
            compressor (its internals, as the fast path): outside :data:`ROSBAGS_TESTED`
            ``'zstd'`` is rosbags' own and ``'lz4'`` falls back to it.
        flush_period: crash safety [s]. None (default): the storage's own buffering (mcap
            chunks of 1 MiB, one sqlite3 transaction), fastest, and a crash loses the
            whole sqlite3 bag or the open mcap chunk. A number: at least this often, in
            wall time or in message time, the open mcap chunk is closed and written, or
            the sqlite3 transaction (WAL journal) committed, and the file synced, so a
            SIGKILL or a power cut loses at most that much. See :meth:`flush`.
        fsync: with ``flush_period``, also ``fsync`` at each flush (survives a power cut,
            not only a killed process).
        bag_for: the ROS 2 distribution whose ``ros2 bag`` must read the bag (its metadata
            version, :data:`METADATA_VERSIONS`; default :data:`DEFAULT_BAG_FOR`); also the
            message definitions, unless ``typestore`` is given.
    """

    def __init__(self, path: str | Path, *, storage: str = 'mcap',
                 typestore: Typestore | None = None, compression: str = 'none',
                 flush_period: float | None = None, fsync: bool = True,
                 bag_for: str = DEFAULT_BAG_FOR) -> None:
        plugins = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}
        if storage not in plugins:
            raise ValueError(f"storage must be 'mcap' or 'sqlite3', got {storage!r}")
        if bag_for not in METADATA_VERSIONS:
            raise ValueError(f'bag_for must be one of {sorted(METADATA_VERSIONS)}, got '
                             f'{bag_for!r}')
        if compression not in ('none', 'lz4', 'zstd'):
            raise ValueError(f"compression must be 'none', 'lz4' or 'zstd', got "
                             f'{compression!r}')
        self.path = Path(path)
        if self.path.exists():
            raise OutputExistsError(f'{self.path} exists; use --force to overwrite it')
        self.storage = storage
        self.typestore = typestore or typestore_for(bag_for)
        self.metadata_version = METADATA_VERSIONS[bag_for]
        # rosbags writes 8 or 9; 8 has the QoS text of 4 to 8, and close() takes out the
        # fields a lower version lacks
        self._writer = Writer(self.path, version=9 if self.metadata_version >= 9 else 8,
                              storage_plugin=plugins[storage])
        if storage == 'mcap' and compression != 'none':
            # MCAP chunk compression: inside the .mcap file, read by ros2 bag, Foxglove and
            # rosbags alike; the bag metadata stays uncompressed.
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._writer.open()
        self._connections: dict[str, object] = {}
        problem = _mcap_internals_problem(self._writer) if storage == 'mcap' else None
        self._fast = storage == 'mcap' and problem is None
        if problem:
            # Without the internals the compressor is rosbags' own (its zstd): no lz4.
            lz4_note = '; lz4 needs them: chunks are zstd-compressed' \
                if compression == 'lz4' else ''
            _warn_once(f'plag_ros.io.bag_writer: {problem}; MCAP is written through the '
                       f'public rosbags API only (slower bulk writes){lz4_note}')
            compression = 'zstd' if compression == 'lz4' else compression
        if self._fast and compression != 'none':
            mcap: Any = self._writer.storage
            if compression == 'lz4':
                import lz4.frame
                # independent blocks: ~40 % faster than linked ones at the same ratio here
                mcap.compression = 'lz4'
                mcap.compressor = lambda data: lz4.frame.compress(data, block_linked=False)
            else:
                zstd = _zstd()
                mcap.compression = 'zstd'
                mcap.compressor = lambda data: zstd.compress(data, 1)
        self.compression = compression if storage == 'mcap' else 'none'
        """The MCAP chunk compression in use: the one asked for, except ``'lz4'`` on a
        ``rosbags`` outside :data:`ROSBAGS_TESTED`, which gets rosbags' own ``'zstd'``."""
        if flush_period is not None and not flush_period > 0.0:
            raise ValueError(f'flush_period must be > 0 s or None, got {flush_period}')
        self.flush_period = flush_period
        self._fsync = fsync
        self._last_flush = time.monotonic()
        self._chunk_t0: int | None = None     # message time of the oldest unflushed message
        self._synced_dir = False
        self.flushes = 0
        if flush_period is not None and storage == 'sqlite3':
            self._sqlite_wal()

    @property
    def fast_path(self) -> bool:
        """Whether bulk writes append to the open MCAP chunk directly (the ``rosbags``
        versions in :data:`ROSBAGS_TESTED`); False: message by message, public API only."""
        return self._fast

    def _sqlite_wal(self) -> None:
        """Switch the sqlite3 storage to a WAL journal (rosbag2's 'resilient' preset does
        too, rosbag2_storage_sqlite3 README), synced at each commit when ``fsync``."""
        conn = getattr(self._writer.storage, 'conn', None)
        if not isinstance(conn, sqlite3.Connection):
            _warn_once('plag_ros.io.bag_writer: '
                       'the rosbags sqlite3 writer has no connection to '
                       'commit periodically; a crash loses the whole sqlite3 bag')
            self.flush_period = None
            return
        conn.commit()
        conn.execute('PRAGMA journal_mode=WAL')
        conn.execute(f"PRAGMA synchronous={'FULL' if self._fsync else 'NORMAL'}")

    def add_topic(self, topic: str, msgtype: str, *, qos: Qos | None = None,
                  msgdef: str | None = None, rihs01: str | None = None):
        """Register a topic; returns the connection handle for :meth:`write`.

        Args:
            topic: absolute topic name.
            msgtype: ``pkg/msg/Type``.
            qos: offered QoS (default reliable, volatile, depth 10).
            msgdef, rihs01: message definition and hash when the typestore lacks the type.
        """
        if topic in self._connections:
            return self._connections[topic]
        kwargs = {'msgdef': msgdef, 'rihs01': rihs01} if msgdef else \
            {'typestore': self.typestore}
        conn = self._writer.add_connection(topic, msgtype,
                                           offered_qos_profiles=[qos or qos_profile()],
                                           **kwargs)
        self._connections[topic] = conn
        return conn

    def write(self, conn, t_ns: int, data: bytes | memoryview) -> None:
        """Write one serialized message received at ``t_ns`` [ns]."""
        self._writer.write(conn, int(t_ns), data)
        if self.flush_period is not None:
            if self._chunk_t0 is None:
                self._chunk_t0 = int(t_ns)
            self.flush_if_due(int(t_ns))

    def flush_if_due(self, t_ns: int | None = None) -> bool:
        """Flush when ``flush_period`` has passed in wall time since the last flush, or in
        message time since the oldest unflushed message ``t_ns`` [ns]; True if it did.

        A recorder calls this from its loop as well, so a topic that stops publishing
        does not leave its last messages in memory.
        """
        if self.flush_period is None:
            return False
        period = self.flush_period
        due = time.monotonic() - self._last_flush >= period or (
            t_ns is not None and self._chunk_t0 is not None
            and t_ns - self._chunk_t0 >= period * 1e9)
        if due:
            self.flush()
        return due

    def flush(self) -> None:
        """Put every message written so far into the file, readable after a crash.

        mcap: the open chunk becomes a whole Chunk record (with its MessageIndex records)
        and the file is flushed and, with ``fsync``, synced; sqlite3: the transaction is
        committed to the WAL. What a killed recorder leaves is then read by
        :func:`open_bag`, up to the last flush.
        """
        self._last_flush = time.monotonic()
        self._chunk_t0 = None
        storage: Any = self._writer.storage
        if self.storage == 'sqlite3':
            conn = getattr(storage, 'conn', None)
            if isinstance(conn, sqlite3.Connection):
                conn.commit()
                self._sync_dir()
                self.flushes += 1
            return
        try:
            if storage.chunk.msgs:
                if self._fast:
                    _close_mcap_chunk(storage)
                else:
                    storage.close_chunk()
            storage.bio.flush()
            if self._fsync:
                os.fsync(storage.bio.fileno())
        except AttributeError as err:
            _warn_once(f'plag_ros.io.bag_writer: '
                       f'cannot flush the rosbags McapWriter ({err}); a crash '
                       'loses the open chunk')
            self.flush_period = None
            return
        self._sync_dir()
        self.flushes += 1

    def _sync_dir(self) -> None:
        """Once: sync the bag directory, so the storage file's entry survives a power cut."""
        if self._synced_dir or not self._fsync:
            return
        self._synced_dir = True
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def write_rows(self, conn, t_ns: np.ndarray, rows: np.ndarray) -> None:
        """Write N messages: ``rows`` (N, size) uint8 CDR (see :class:`CdrTemplate`).

        With mcap storage the message records of a whole chunk are assembled with numpy
        and appended to the chunk the ``rosbags`` writer has open (its own chunking,
        message indices, statistics and summary are kept), instead of one Python call per
        message; other storages write message by message.
        """
        t_ns = np.asarray(t_ns, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.uint8)
        if self._fast:
            self._write_rows_mcap(conn, t_ns, rows)
        else:
            write = self._writer.write
            for t, row in zip(t_ns.tolist(), rows):
                write(conn, t, row.data)
        if self.flush_period is not None and len(t_ns):
            if self._chunk_t0 is None:
                self._chunk_t0 = int(t_ns.min())
            self.flush_if_due(int(t_ns.max()))

    def _write_rows_mcap(self, conn, t_ns: np.ndarray, rows: np.ndarray) -> None:
        """Bulk MCAP Message records (opcode 0x05) into the writer's open chunk."""
        writer: Any = self._writer
        storage: Any = writer.storage
        n_rows, size = rows.shape
        record = 31 + size            # opcode, length, channel, sequence, 2 times, data
        per_chunk = max(1, _MCAP_CHUNK_BYTES // record)
        header = np.zeros(31, dtype=np.uint8)
        header[0] = 0x05
        header[1:9] = np.array([record - 9], dtype='<u8').view(np.uint8)
        header[9:11] = np.array([conn.id], dtype='<u2').view(np.uint8)
        for a in range(0, n_rows, per_chunk):
            t = t_ns[a:a + per_chunk]
            m = len(t)
            buf = np.empty((m, record), dtype=np.uint8)
            buf[:, :31] = header
            stamps = t.astype('<u8').view(np.uint8).reshape(m, 8)
            buf[:, 15:23] = stamps
            buf[:, 23:31] = stamps
            buf[:, 31:] = rows[a:a + m]
            chunk = storage.chunk
            start = chunk.bio.tell()
            chunk.bio.write(buf.data)
            t_list = t.tolist()
            chunk.msgs[conn.id].extend(zip(t_list, range(start, start + m * record, record)))
            t_min, t_max = min(t_list), max(t_list)
            chunk.message_start_time = min(chunk.message_start_time, t_min)
            chunk.message_end_time = max(chunk.message_end_time, t_max)
            storage.message_start_time = min(storage.message_start_time, t_min)
            storage.message_end_time = max(storage.message_end_time, t_max)
            storage.channel_stats[conn.id] += m
            writer.counts[conn.id] += m
            writer.min_timestamp = min(writer.min_timestamp, t_min)
            writer.max_timestamp = max(writer.max_timestamp, t_max)
            if chunk.bio.tell() > _MCAP_CHUNK_BYTES:
                _close_mcap_chunk(storage)

    def copy_topic(self, source: str | Path, topic: str) -> int:
        """Copy every message of ``topic`` from the bag ``source``, bytes and receive times
        unchanged, with its offered QoS; returns the number copied."""
        with open_bag(source) as reader:
            conns = [c for c in reader.connections if c.topic == topic]
            if not conns:
                raise TopicError(f'{source}: no topic {topic!r}')
            qos = [p for c in conns for p in getattr(c.ext, 'offered_qos_profiles', [])][:1]
            conn = self.add_topic(topic, conns[0].msgtype, qos=qos[0] if qos else None)
            stamps, raws = [], []
            for _, t, raw in reader.messages(connections=conns):
                stamps.append(t)
                raws.append(bytes(raw))
        # Messages of one size go in bulk (a driver's messages usually all have one).
        t_ns = np.asarray(stamps, dtype=np.int64)
        sizes = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
        for size in np.unique(sizes):
            rows = np.flatnonzero(sizes == size)
            data = np.frombuffer(b''.join([raws[i] for i in rows]), dtype=np.uint8)
            self.write_rows(conn, t_ns[rows], data.reshape(len(rows), int(size)))
        return len(raws)

    def close(self) -> None:
        """Finish the bag (writes metadata.yaml, in :attr:`metadata_version`)."""
        storage: Any = self._writer.storage
        if self._fast and storage.chunk.bio.tell():
            _close_mcap_chunk(storage)
        self._writer.close()
        if self.metadata_version < 8:
            _lower_metadata(self.path / 'metadata.yaml', self.metadata_version)

    def abort(self) -> None:
        """Close after an error (what was written stays, metadata may be missing)."""
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - best effort on the error path
            pass

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _lower_metadata(path: Path, version: int) -> None:
    """Rewrite a version 8 ``metadata.yaml`` as ``version`` (5 to 7): the fields added
    after it taken out; the rest (the QoS profiles as YAML text among them) is the same."""
    import yaml

    document = yaml.safe_load(path.read_text())
    info = document['rosbag2_bagfile_information']
    info['version'] = version
    for added, names in _LATER_FIELDS.items():
        if added > version:
            for name in names:
                info.pop(name, None)
    for added, names in _LATER_TOPIC_FIELDS.items():
        if added > version:
            for topic in info['topics_with_message_count']:
                for name in names:
                    topic['topic_metadata'].pop(name, None)
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    temporary = path.with_suffix('.yaml.tmp')
    temporary.write_text(text)
    os.replace(temporary, path)


def _close_mcap_chunk(storage) -> None:
    """``McapWriter.close_chunk`` of rosbags 0.11 with the message index built by numpy.

    Same records (Chunk, one MessageIndex per channel, the ChunkIndex kept for the
    summary) as the original, which writes two Python integers per message.
    """
    from rosbags.rosbag2.storage_mcap import (
        PendingChunk,
        write_record,
        write_string,
        write_uint16,
        write_uint32,
        write_uint64,
    )

    chunk = storage.chunk
    data = chunk.bio.getbuffer()          # compressed in place, not copied out first
    compressed = storage.compressor(data)
    del data                              # release the export so the BytesIO can go
    head = BytesIO()
    write_uint64(head, chunk.message_start_time)
    write_uint64(head, chunk.message_end_time)
    write_uint64(head, chunk.bio.tell())
    write_uint32(head, 0)
    write_string(head, storage.compression)
    write_uint64(head, len(compressed))
    chunk_start = storage.bio.tell()
    # the Chunk record (opcode 0x06) written piecewise: the compressed bytes go to the file
    # as they are instead of through one more buffer
    storage.bio.write(b'\x06')
    write_uint64(storage.bio, head.tell() + len(compressed))
    storage.bio.write(head.getbuffer())
    storage.bio.write(compressed)
    chunk_end = storage.bio.tell()
    offsets = []
    for cid, entries in chunk.msgs.items():
        offsets.append((cid, storage.bio.tell()))
        rec = BytesIO()
        write_uint16(rec, cid)
        write_uint32(rec, len(entries) * 16)
        rec.write(np.asarray(entries, dtype='<u8').reshape(-1, 2).tobytes())
        write_record(storage.bio, 0x07, rec)
    rec = BytesIO()
    write_uint64(rec, chunk.message_start_time)
    write_uint64(rec, chunk.message_end_time)
    write_uint64(rec, chunk_start)
    write_uint64(rec, chunk_end - chunk_start)
    write_uint32(rec, len(offsets) * 10)
    for cid, offset in offsets:
        write_uint16(rec, cid)
        write_uint64(rec, offset)
    write_uint64(rec, storage.bio.tell() - chunk_end)
    write_string(rec, storage.compression)
    write_uint64(rec, len(compressed))
    write_uint64(rec, chunk.bio.tell())
    storage.chunks.append(rec)
    storage.chunk = PendingChunk(2**63 - 1, 0, BytesIO(), defaultdict(list))
