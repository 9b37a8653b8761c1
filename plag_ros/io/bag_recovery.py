"""Salvage rosbag2 recordings that did not end cleanly (killed recorder, power cut).

A recorder that dies leaves one of two things behind:

- **mcap**: the data section up to some byte, with no summary, no footer and no closing
  magic; ``rosbags`` refuses it ("File end magic is invalid"). :func:`salvage_mcap` walks
  the record stream from the start instead (MCAP specification,
  ``foxglove/mcap/docs/specification/README.md``: an 8-byte magic, then records of ``opcode: uint8,
  length: uint64 LE, body``) and keeps every Schema (0x03), Channel (0x04) and Message
  (0x05) record, inside Chunk (0x06) records or not. A chunk is used only whole: its record
  must lie entirely in the file, decompress (``''``, ``'lz4'`` or ``'zstd'``) to its stated
  size and match its CRC when one is set; the walk stops at the first record that does not
  (a record cut short, a zero-filled tail left by a power cut: opcode 0x00 is reserved,
  any byte that does not parse). That byte is *the cut*.
- **sqlite3**: a ``.db3`` with no ``metadata.yaml`` beside it (the recorder writes it last)
  and possibly a ``-wal`` file holding the last committed transactions. ``rosbags`` opens a
  ``.db3`` with ``immutable=1``, which ignores the WAL, so :func:`salvage_sqlite3` reads it
  with the standard library's sqlite3 in read-only mode (the WAL is applied, SQLite drops a
  torn last transaction by its frame checksums) and rebuilds the topic list and counts from
  the ``topics``, ``message_definitions`` and ``messages`` tables, as ``ros2 bag reindex``
  rebuilds ``metadata.yaml``.

Both return a :class:`SalvagedReader`, which offers the part of ``rosbags.rosbag2.Reader``
this package uses (``connections``, ``topics``, ``messages()``, ``ros_distro``, times), and
a :class:`RecoveryReport` saying how much came back and where the cut was. Nothing is
written to the input bag.
"""
from __future__ import annotations

import sqlite3
import struct
import zlib
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path

from rosbags.interfaces import (
    Connection,
    ConnectionExtRosbag2,
    MessageDefinition,
    MessageDefinitionFormat,
    TopicInfo,
)
from rosbags.rosbag2.metadata import parse_qos

__all__ = ['MCAP_MAGIC', 'RecoveryReport', 'SalvagedReader', 'salvage_mcap',
           'salvage_sqlite3', 'zstd_module']

MCAP_MAGIC = b'\x89MCAP0\r\n'
"""The 8 bytes that open (and close) an MCAP file."""

_OP_HEADER, _OP_FOOTER, _OP_SCHEMA, _OP_CHANNEL, _OP_MESSAGE, _OP_CHUNK = 1, 2, 3, 4, 5, 6
_OP_DATA_END = 0x0F
_MSGDEF_FORMATS = {'ros2msg': MessageDefinitionFormat.MSG,
                   'ros2idl': MessageDefinitionFormat.IDL,
                   'omgidl': MessageDefinitionFormat.IDL}


@dataclass(frozen=True)
class RecoveryReport:
    """What was salvaged from a bag that did not end cleanly.

    Attributes:
        path: the storage file read.
        storage: ``'mcap'`` or ``'sqlite3'``.
        reason: why the bag needed salvaging (the reader's error, a missing file).
        messages: messages recovered, all topics.
        per_topic: topic -> messages recovered.
        bytes_recovered: bytes of the file that were read into whole records (mcap: the
            offset of the cut; sqlite3: the database plus its WAL).
        file_bytes: size of the file (mcap) or database plus WAL (sqlite3).
        cut_offset: first byte that could not be used (mcap), None for sqlite3.
        first_time_ns, cut_time_ns: log time of the first and last recovered message
            [ns since the epoch], None when nothing was recovered.
        lossy: True when data is known or bound to be lost: bytes after the cut, or a
            recorder that never finished (no closing records: what it still held in
            memory or in an open transaction is gone). False when the storage was
            complete and only the metadata had to be rebuilt.
        chunks: complete MCAP chunks read (0 for sqlite3).
    """

    path: Path
    storage: str
    reason: str
    messages: int
    per_topic: dict[str, int] = field(default_factory=dict)
    bytes_recovered: int = 0
    file_bytes: int = 0
    cut_offset: int | None = None
    first_time_ns: int | None = None
    cut_time_ns: int | None = None
    lossy: bool = True
    chunks: int = 0

    def summary(self) -> str:
        """A few lines for a person: what was recovered and where the cut was."""
        span = ''
        if self.first_time_ns is not None and self.cut_time_ns is not None:
            span = (f' spanning {(self.cut_time_ns - self.first_time_ns) * 1e-9:.3f} s, '
                    f'last at t={self.cut_time_ns * 1e-9:.6f} s')
        if self.cut_offset is not None:
            where = (f'cut at byte {self.cut_offset} of {self.file_bytes} '
                     f'({self.file_bytes - self.cut_offset} bytes unreadable, '
                     f'{self.chunks} whole chunks read)')
        elif self.storage == 'mcap':
            where = f'every chunk whole ({self.chunks}), only the summary was unreadable'
        else:
            where = f'{self.bytes_recovered} bytes of database and WAL read'
        verdict = 'recovered with loss' if self.lossy else 'recovered without loss'
        topics = ', '.join(f'{t}: {n}' for t, n in sorted(self.per_topic.items())) or 'none'
        return (f'{self.path}: {verdict} ({self.reason}): {self.messages} messages'
                f'{span}; {where}; per topic: {topics}')


MessageSource = Callable[[Collection[int], int | None, int | None],
                         Iterator[tuple[Connection, int, bytes]]]
"""``(connection ids, start, stop) -> (connection, log time [ns], CDR bytes)`` in time order."""


class SalvagedReader:
    """A read-only view of a salvaged bag with the ``rosbags`` Reader surface we use.

    Attributes:
        recovery: the :class:`RecoveryReport`.
        connections: one ``rosbags`` Connection per recovered channel/topic.
    """

    def __init__(self, connections: list[Connection], recovery: RecoveryReport,
                 messages: MessageSource, start_ns: int, end_ns: int, count: int,
                 ros_distro: str | None = None) -> None:
        self.connections = connections
        self.recovery = recovery
        self._messages = messages      # callable(ids, start, stop) -> iterator
        self.start_time = start_ns
        self.end_time = end_ns
        self.duration = max(0, end_ns - start_ns)
        self.message_count = count
        self.ros_distro = ros_distro
        self.compression_format: str | None = None
        self.compression_mode: str | None = None

    @property
    def topics(self) -> dict[str, TopicInfo]:
        """Topic -> TopicInfo (type, definition, count, connections), as ``rosbags``."""
        out = {}
        for topic, group in groupby(sorted(self.connections, key=lambda c: c.topic),
                                    key=lambda c: c.topic):
            conns = list(group)
            types = {c.msgtype for c in conns}
            defs = {c.msgdef for c in conns}
            out[topic] = TopicInfo(types.pop() if len(types) == 1 else None,
                                   defs.pop() if len(defs) == 1 else
                                   MessageDefinition(MessageDefinitionFormat.NONE, ''),
                                   sum(c.msgcount for c in conns), conns)
        return out

    def messages(self, connections: Collection[Connection] = (), start: int | None = None,
                 stop: int | None = None) -> Iterator[tuple[Connection, int, bytes]]:
        """(connection, log time [ns], CDR bytes) in time order, like ``Reader.messages``."""
        wanted = {c.id for c in (connections or self.connections)}
        return self._messages(wanted, start, stop)

    def close(self) -> None:
        """Nothing to release (the salvaged data lives in memory or closes per query)."""


# --- mcap -----------------------------------------------------------------------------------


class _Corrupt(ValueError):
    """A record that does not parse: the walk stops before it."""


def _string(buf: memoryview, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from('<I', buf, pos)
    end = pos + 4 + n
    if end > len(buf):
        raise _Corrupt('string runs past its record')
    return bytes(buf[pos + 4:end]).decode(), end


def _decompress(data: memoryview, compression: str, size: int) -> bytes:
    if compression == '':
        return bytes(data)
    if compression == 'zstd':
        return zstd_module().decompress(bytes(data))
    if compression == 'lz4':
        import lz4.frame
        return lz4.frame.decompress(bytes(data))
    raise _Corrupt(f'unknown chunk compression {compression!r}')


class _McapWalk:
    """State of one pass over an MCAP record stream."""

    def __init__(self) -> None:
        self.schemas: dict[int, tuple[str, str, str]] = {}     # id -> name, encoding, text
        self.channels: dict[int, tuple[int, str, str, bytes]] = {}  # schema, topic, enc, meta
        self.messages: list[tuple[int, int, bytes]] = []       # channel, log time, data
        self.chunks = 0
        self.finished = False          # a DataEnd or Footer record was reached

    def records(self, buf: memoryview, *, inner: bool) -> tuple[int, str | None]:
        """Apply the records of ``buf``; return the end of the last whole one and why the
        walk stopped early (None when it consumed everything)."""
        pos = 0
        while pos < len(buf):
            if len(buf) - pos < 9:
                return pos, 'a record header is cut short'
            op = buf[pos]
            (length,) = struct.unpack_from('<Q', buf, pos + 1)
            end = pos + 9 + length
            if op == 0:
                return pos, 'opcode 0 (zero-filled or overwritten bytes)'
            if end > len(buf):
                return pos, f'a record (opcode 0x{op:02x}) is cut short'
            body = buf[pos + 9:end]
            # A record that fails to parse is treated like one cut short: everything
            # before it stays, nothing after it is trusted.
            try:
                if self._record(op, body, inner=inner):
                    return end, None
            except Exception as err:  # noqa: BLE001 - zstd/lz4/struct raise many types
                if inner:
                    raise _Corrupt(str(err)) from err
                return pos, f'record 0x{op:02x} does not parse: {err}'
            pos = end
        return pos, None

    def _record(self, op: int, body: memoryview, *, inner: bool) -> bool:
        """Apply one record; True when it ends the data section."""
        if op == _OP_SCHEMA:
            (sid,) = struct.unpack_from('<H', body, 0)
            name, pos = _string(body, 2)
            encoding, pos = _string(body, pos)
            text, _ = _string(body, pos)
            self.schemas[sid] = (name, encoding, text)
        elif op == _OP_CHANNEL:
            cid, sid = struct.unpack_from('<HH', body, 0)
            topic, pos = _string(body, 4)
            encoding, pos = _string(body, pos)
            (n,) = struct.unpack_from('<I', body, pos)
            if pos + 4 + n > len(body):
                raise _Corrupt('channel metadata runs past its record')
            self.channels[cid] = (sid, topic, encoding, bytes(body[pos + 4:pos + 4 + n]))
        elif op == _OP_MESSAGE:
            cid, _seq, log_time, _pub = struct.unpack_from('<HIQQ', body, 0)
            if cid not in self.channels:
                raise _Corrupt(f'message on channel {cid} before its Channel record')
            self.messages.append((cid, log_time, bytes(body[22:])))
        elif op == _OP_CHUNK and not inner:
            self._chunk(body)
        elif op in (_OP_DATA_END, _OP_FOOTER) and not inner:
            self.finished = True
            return True
        return False

    def _chunk(self, body: memoryview) -> None:
        _t0, _t1, size, crc = struct.unpack_from('<QQQI', body, 0)
        compression, pos = _string(body, 28)
        (n,) = struct.unpack_from('<Q', body, pos)
        if pos + 8 + n > len(body):
            raise _Corrupt('chunk data runs past its record')
        raw = _decompress(body[pos + 8:pos + 8 + n], compression, size)
        if len(raw) != size:
            raise _Corrupt(f'chunk decompresses to {len(raw)} bytes, not {size}')
        if crc and zlib.crc32(raw) != crc:
            raise _Corrupt('chunk CRC mismatch')
        # All or nothing: a chunk whose inner records do not parse adds nothing.
        saved = (dict(self.schemas), dict(self.channels), len(self.messages))
        try:
            _, why = self.records(memoryview(raw), inner=True)
            if why is not None:
                raise _Corrupt(f'inside a chunk: {why}')
        except _Corrupt:
            self.schemas, self.channels = saved[0], saved[1]
            del self.messages[saved[2]:]
            raise
        self.chunks += 1


def salvage_mcap(path: str | Path, *, reason: str = 'no summary or footer',
                 ros_distro: str | None = None) -> SalvagedReader:
    """Read every whole record of an MCAP file up to the first that is cut or damaged.

    Args:
        path: the ``.mcap`` file.
        reason: why salvaging (goes into the report).
        ros_distro: the distribution, when known from a ``metadata.yaml``.

    Raises:
        ValueError: the file does not start with the MCAP magic.
    """
    path = Path(path)
    data = path.read_bytes()
    if data[:8] != MCAP_MAGIC:
        raise ValueError(f'{path}: not an MCAP file (no magic at its start)')
    walk = _McapWalk()
    used, _why = walk.records(memoryview(data)[8:], inner=False)
    cut = 8 + used
    lossy = not walk.finished
    conns: dict[int, Connection] = {}
    counts: dict[int, int] = {}
    for cid, _t, _ in walk.messages:
        counts[cid] = counts.get(cid, 0) + 1
    for cid, (sid, topic, encoding, meta) in sorted(walk.channels.items()):
        name, fmt, text = walk.schemas.get(sid, ('', '', ''))
        conns[cid] = Connection(
            cid, topic, name,
            MessageDefinition(_MSGDEF_FORMATS.get(fmt, MessageDefinitionFormat.NONE), text),
            '', counts.get(cid, 0),
            ConnectionExtRosbag2(encoding, _channel_qos(meta)), None)
    msgs = sorted(walk.messages, key=lambda m: m[1])        # stable: file order on ties
    times = [m[1] for m in msgs]
    report = RecoveryReport(
        path, 'mcap', reason, len(msgs),
        {conns[c].topic: n for c, n in counts.items()},
        bytes_recovered=cut, file_bytes=len(data),
        cut_offset=None if walk.finished else cut,
        first_time_ns=times[0] if times else None, cut_time_ns=times[-1] if times else None,
        lossy=lossy, chunks=walk.chunks)

    def messages(ids: Collection[int], start: int | None,
                 stop: int | None) -> Iterator[tuple[Connection, int, bytes]]:
        for cid, t, raw in msgs:
            if cid in ids and (start is None or t >= start) and (stop is None or t < stop):
                yield conns[cid], t, raw

    return SalvagedReader(list(conns.values()), report, messages,
                          times[0] if times else 2 ** 63 - 1, times[-1] + 1 if times else 0,
                          len(msgs), ros_distro)


def _channel_qos(meta: bytes) -> list:
    """Offered QoS profiles from a Channel record's ``map<string, string>`` metadata."""
    buf, pos = memoryview(meta), 0
    try:
        while pos < len(buf):
            key, pos = _string(buf, pos)
            value, pos = _string(buf, pos)
            if key == 'offered_qos_profiles':
                return parse_qos(value)
    except (_Corrupt, struct.error, UnicodeDecodeError):
        return []
    except Exception:  # noqa: BLE001 - a damaged QoS string must not lose the messages
        return []
    return []


# --- sqlite3 --------------------------------------------------------------------------------


def salvage_sqlite3(path: str | Path, *, reason: str = 'metadata.yaml missing',
                    ros_distro: str | None = None) -> SalvagedReader:
    """Open a rosbag2 ``.db3`` without its ``metadata.yaml``, WAL included.

    The topic list and counts are rebuilt from the tables. The report is lossy when the
    ``metadata`` table (written by rosbag2 and ``rosbags`` when they close the bag) is
    empty or absent, i.e. the recorder never finished, or when rows cannot be read.

    Raises:
        ValueError: not an sqlite3 database with ``topics`` and ``messages`` tables.
    """
    path = Path(path)
    uri = f'{path.resolve().as_uri()}?mode=ro'
    try:
        db = sqlite3.connect(uri, uri=True)
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as err:
        raise ValueError(f'{path}: not a readable sqlite3 database: {err}') from err
    try:
        if not {'topics', 'messages'} <= tables:
            raise ValueError(f'{path}: no topics/messages tables (has {sorted(tables)})')
        cols = {r[1] for r in db.execute('PRAGMA table_info(topics)')}
        defs: dict[str, MessageDefinition] = {}
        if 'message_definitions' in tables:
            for name, enc, text in db.execute(
                    'SELECT topic_type, encoding, encoded_message_definition '
                    'FROM message_definitions ORDER BY id'):
                defs.setdefault(name, MessageDefinition(
                    _MSGDEF_FORMATS.get(enc, MessageDefinitionFormat.NONE), text))
        finished = 'metadata' in tables and bool(
            db.execute('SELECT count(*) FROM metadata').fetchone()[0])
        if ros_distro is None and 'schema' in tables:
            row = db.execute('SELECT ros_distro FROM schema').fetchone()
            ros_distro = row[0] if row and row[0] != 'rosbags' else None
        qos_col = 'offered_qos_profiles' if 'offered_qos_profiles' in cols else "''"
        hash_col = 'type_description_hash' if 'type_description_hash' in cols else "''"
        conns = {}
        for cid, topic, msgtype, fmt, qos, digest, count in db.execute(
                f'SELECT topics.id, name, type, serialization_format, {qos_col}, {hash_col}, '
                'count(messages.id) FROM topics LEFT JOIN messages '
                'ON topics.id = messages.topic_id GROUP BY topics.id ORDER BY topics.id'):
            conns[cid] = Connection(
                cid, topic, msgtype,
                defs.get(msgtype, MessageDefinition(MessageDefinitionFormat.NONE, '')),
                digest or '', count, ConnectionExtRosbag2(fmt, parse_qos(qos)), None)
        t0, t1, total = db.execute(
            'SELECT MIN(timestamp), MAX(timestamp), count(*) FROM messages').fetchone()
        integrity_ok = db.execute('PRAGMA quick_check').fetchone()[0] == 'ok'
    except sqlite3.Error as err:
        db.close()
        raise ValueError(f'{path}: the database cannot be read: {err}') from err
    db.close()
    wal = path.with_name(path.name + '-wal')
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    report = RecoveryReport(
        path, 'sqlite3', reason if finished else f'{reason}; the recorder did not finish',
        int(total), {c.topic: c.msgcount for c in conns.values()},
        bytes_recovered=size, file_bytes=size, cut_offset=None,
        first_time_ns=t0, cut_time_ns=t1, lossy=not finished or not integrity_ok, chunks=0)

    def messages(ids: Collection[int], start: int | None,
                 stop: int | None) -> Iterator[tuple[Connection, int, bytes]]:
        query = ('SELECT topic_id, timestamp, data FROM messages WHERE topic_id IN ('
                 + ','.join('?' * len(ids)) + ')')
        args: list[int] = list(ids)
        if start is not None:
            query += ' AND timestamp >= ?'
            args.append(start)
        if stop is not None:
            query += ' AND timestamp < ?'
            args.append(stop)
        con = sqlite3.connect(uri, uri=True)
        try:
            for cid, t, raw in con.execute(query + ' ORDER BY timestamp, id', args):
                yield conns[cid], t, raw
        finally:
            con.close()

    return SalvagedReader(list(conns.values()), report, messages,
                          t0 if t0 is not None else 2 ** 63 - 1,
                          t1 + 1 if t1 is not None else 0, int(total), ros_distro)


def zstd_module():
    """The zstd module rosbags uses (``compression.zstd`` or ``backports.zstd``)."""
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd
