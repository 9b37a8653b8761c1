"""rosbag2 input and output without a ROS install (the ``rosbags`` library).

Reading: :func:`read_joint_states` opens a rosbag2 bag (sqlite3 or mcap storage, metadata
written by Humble, Jazzy or Kilted, or a bare ``.mcap``/``.db3`` file), picks the
``sensor_msgs/JointState`` topic and returns every sample once as arrays in model order::

    js = read_joint_states('run1', model)        # js.t_ns (N,) int64, js.q (N, n) float64

``JointState`` CDR has a fixed layout for a driver that always publishes the same names,
so the samples are parsed in bulk with numpy: messages are grouped by byte length, the
first message of a group is parsed field by field, every other message of the group is
checked byte for byte against it in the constant parts (frame, names, counts) and the
stamps and float64 arrays are read as strided views. Messages that fit no group are
decoded one by one with the ``rosbags`` typestore.

Writing: :class:`BagWriter` wraps ``rosbags.rosbag2.Writer`` (mcap or sqlite3, rosbag2
format 9 with offered QoS profiles) and takes the rows of :class:`plag_ros.cdr.CdrTemplate`
(N messages serialized at once) in bulk. The bulk path appends to the chunk that the
``rosbags`` McapWriter has open, through its private attributes, on the versions tested
(:data:`ROSBAGS_TESTED`, pinned in requirements.txt); elsewhere it writes message by
message through the public API and warns once.

Crash safety: with ``flush_period`` (``plag-ros record`` uses 0.5 s) the writer closes the
open mcap chunk, or commits the sqlite3 transaction into a WAL journal, at least that
often in wall or message time, and syncs the file. Chunked mcap is the default because a
cut mcap keeps every whole chunk before the cut and closing a chunk is a plain append;
sqlite3 with WAL gives the same bound. :func:`open_bag` salvages what such a recording
leaves (:mod:`plag_ros.bag_recovery`): a truncated mcap up to its last whole chunk, a .db3
without metadata.yaml with its WAL, and says how much came back (:func:`recovery_of`,
``JointStates.recovery``).
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import time
import warnings
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from io import BytesIO
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import (
    CompressionFormat,
    CompressionMode,
    Reader,
    ReaderError,
    StoragePlugin,
    Writer,
)
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from .bag_recovery import RecoveryReport, SalvagedReader, salvage_mcap, salvage_sqlite3
from .cdr import TEMPLATE_NS, CdrTemplate
from .model import RobotModel

__all__ = [
    'BagError',
    'BagReadError',
    'BagWriter',
    'JOINT_STATE_TYPE',
    'JointStates',
    'MissingJointsError',
    'NotABagError',
    'OutputExistsError',
    'RecoveryReport',
    'SalvagedReader',
    'TopicError',
    'bag_topics',
    'open_bag',
    'pick_joint_state_topic',
    'prepare_output',
    'qos_profile',
    'read_joint_states',
    'recovery_of',
    'typestore_for',
    'write_joint_state_bag',
]

JOINT_STATE_TYPE = 'sensor_msgs/msg/JointState'
StampSource = Literal['header', 'receive']

_DISTRO_STORES = {
    'humble': Stores.ROS2_HUMBLE,
    'iron': Stores.ROS2_IRON,
    'jazzy': Stores.ROS2_JAZZY,
    'kilted': Stores.ROS2_KILTED,
}


# --- errors -------------------------------------------------------------------------------


class BagError(Exception):
    """Base of every error this module raises about a bag."""


class NotABagError(BagError):
    """The path is not a rosbag2 bag (no metadata.yaml, .mcap or .db3)."""


class BagReadError(BagError):
    """The bag exists but cannot be read (truncated, corrupt, unknown storage)."""


class TopicError(BagError):
    """No usable JointState topic; the message lists the topics the bag has."""


class MissingJointsError(BagError):
    """The JointState messages lack joints the model needs; the message names them."""


class OutputExistsError(BagError, FileExistsError):
    """An output path exists and overwriting was not asked for (``--force``)."""


# --- typestores and QoS -------------------------------------------------------------------


def typestore_for(distro: str | None) -> Typestore:
    """The ``rosbags`` typestore of a ROS 2 distribution (Kilted when unknown or None)."""
    store = _DISTRO_STORES.get((distro or '').strip().lower(), Stores.ROS2_KILTED)
    return get_typestore(store)


def qos_profile(*, reliable: bool = True, transient_local: bool = False,
                depth: int = 10) -> Qos:
    """An offered QoS profile for a bag's topic metadata (what ``ros2 bag play`` offers)."""
    zero = QosTime(sec=0, nsec=0)  # 0 = the middleware default (no deadline/lifespan)
    return Qos(
        history=QosHistory.KEEP_LAST,
        depth=depth,
        reliability=QosReliability.RELIABLE if reliable else QosReliability.BEST_EFFORT,
        durability=(QosDurability.TRANSIENT_LOCAL if transient_local
                    else QosDurability.VOLATILE),
        deadline=zero,
        lifespan=zero,
        liveliness=QosLiveliness.AUTOMATIC,
        liveliness_lease_duration=zero,
        avoid_ros_namespace_conventions=False,
    )


# --- opening ------------------------------------------------------------------------------


def _storage_path(path: Path) -> Path:
    """The path ``rosbags.Reader`` should open, or NotABagError saying why there is none."""
    if not path.exists():
        raise NotABagError(f'{path}: no such file or directory')
    if path.is_dir():
        if (path / 'metadata.yaml').is_file():
            return path
        # A recording killed before it finished has no metadata.yaml; a single storage file
        # can still be read on its own.
        files = sorted(path.glob('*.mcap')) + sorted(path.glob('*.db3'))
        if len(files) == 1:
            return files[0]
        raise NotABagError(f'{path} is not a rosbag2 bag: no metadata.yaml'
                           + (f' and {len(files)} storage files' if files else
                              ' and no .mcap or .db3 file'))
    if path.suffix not in ('.mcap', '.db3'):
        raise NotABagError(f'{path} is not a rosbag2 bag (expected a bag directory, '
                           'an .mcap or a .db3 file)')
    return path


@contextmanager
def open_bag(path: str | Path, *, recover: bool = True) -> Iterator[Reader | SalvagedReader]:
    """Open a bag for reading; every failure becomes a :class:`BagError` naming the path.

    A bag whose recording did not end cleanly is salvaged (``recover=True``, see
    :mod:`plag_ros.bag_recovery`): an mcap that ``rosbags`` refuses (no summary or footer)
    is read record by record up to the cut; a ``.db3`` without ``metadata.yaml``, or with
    a write-ahead log left beside it, is read with its WAL and its metadata rebuilt. The
    reader is then a :class:`~plag_ros.bag_recovery.SalvagedReader` whose ``recovery``
    attribute says what came back (see :func:`recovery_of`).

    Args:
        path: bag directory (with metadata.yaml), or a single ``.mcap``/``.db3`` file.
        recover: salvage damaged or unfinished bags instead of raising.

    Raises:
        NotABagError: nothing at ``path`` looks like a bag.
        BagReadError: the storage cannot be opened (corrupt, not sqlite/mcap), or
            ``recover`` is False and it is truncated.
    """
    path = Path(path)
    storage = _storage_path(path)
    reader: Reader | SalvagedReader | None = _salvage_sqlite(path, storage) if recover \
        else None
    if reader is None:
        try:
            reader = Reader(storage)
            reader.open()
        except BagError:
            raise
        except (ReaderError, OSError, sqlite3.Error, ValueError, KeyError, TypeError,
                struct.error, EOFError, AssertionError) as err:
            mcap = _single_file(storage, '.mcap')
            if not recover or mcap is None:
                raise BagReadError(f'{path}: cannot open bag: {err}') from err
            try:
                reader = salvage_mcap(mcap, reason=f'rosbags cannot open it: {err}',
                                      ros_distro=_yaml_distro(path))
            except (ValueError, OSError) as err2:
                raise BagReadError(f'{path}: cannot open bag: {err}; nothing could be '
                                   f'salvaged either: {err2}') from err
            if not reader.message_count:
                raise BagReadError(f'{path}: cannot open bag: {err}; no whole message could '
                                   f'be salvaged ({reader.recovery.summary()})') from err
    try:
        yield reader
    finally:
        try:
            reader.close()
        except Exception:  # noqa: BLE001 - closing a broken storage must not mask the cause
            pass


def recovery_of(reader: Reader | SalvagedReader) -> RecoveryReport | None:
    """The salvage report of a reader from :func:`open_bag` (None: the bag was whole)."""
    return getattr(reader, 'recovery', None)


def _single_file(storage: Path, suffix: str) -> Path | None:
    """The one ``suffix`` storage file at ``storage`` (a file or a bag directory)."""
    if storage.is_file():
        return storage if storage.suffix == suffix else None
    files = sorted(storage.glob(f'*{suffix}'))
    return files[0] if len(files) == 1 else None


def _yaml_distro(path: Path) -> str | None:
    """``ros_distro`` from a bag directory's metadata.yaml, if there is one that says."""
    meta = path / 'metadata.yaml' if path.is_dir() else path.parent / 'metadata.yaml'
    try:
        import yaml
        info = yaml.safe_load(meta.read_text())['rosbag2_bagfile_information']
        return info.get('ros_distro')
    except Exception:  # noqa: BLE001 - absent or damaged metadata: distro unknown
        return None


def _salvage_sqlite(path: Path, storage: Path) -> SalvagedReader | None:
    """A salvaged reader when a .db3 lacks its metadata.yaml or has a WAL left; else None.

    ``rosbags`` opens a .db3 with ``immutable=1`` and would miss what is still in the WAL.
    """
    db3 = _single_file(storage, '.db3')
    if db3 is None:
        return None
    wal = db3.with_name(db3.name + '-wal')
    if path.is_dir() and not (path / 'metadata.yaml').is_file():
        reason = 'metadata.yaml missing'
    elif wal.is_file() and wal.stat().st_size > 0:
        reason = 'a write-ahead log was left beside the database'
    else:
        return None
    try:
        return salvage_sqlite3(db3, reason=reason, ros_distro=_yaml_distro(path))
    except (ValueError, OSError) as err:
        raise BagReadError(f'{path}: cannot open bag ({reason}): {err}') from err


def bag_topics(path: str | Path) -> dict[str, tuple[str, int]]:
    """Topic -> (message type, message count) of a bag."""
    with open_bag(path) as reader:
        return {topic: (info.msgtype or '?', info.msgcount)
                for topic, info in reader.topics.items()}


# --- JointState reading -------------------------------------------------------------------


class JointStates(NamedTuple):
    """Every JointState sample of a bag, in model joint order.

    Attributes (N samples, n model joints):
        t_ns: (N,) int64 stamps [ns], strictly increasing (header or receive time).
        q: (N, n) positions [rad or m], mimic joints filled from their sources.
        qd: (N, n) velocities, or None when the messages carry none.
        effort: (N, n) measured efforts [N*m or N], or None.
        header_ns: (N,) int64 header stamps; receive_ns: (N,) int64 bag receive times.
        topic: the topic read; msgtype its type; distro the bag's ROS distribution.
        joint_names: (n,) model joint names, the column order.
        recovery: what was salvaged when the bag did not end cleanly (None: it did).
    """

    t_ns: np.ndarray
    q: np.ndarray
    qd: np.ndarray | None
    effort: np.ndarray | None
    header_ns: np.ndarray
    receive_ns: np.ndarray
    topic: str
    distro: str | None
    joint_names: tuple[str, ...]
    recovery: RecoveryReport | None = None


class _Layout(NamedTuple):
    """Byte layout of one JointState CDR message (offsets from the buffer start)."""

    size: int
    names: tuple[str, ...]
    static_end: int                     # bytes [12, static_end) are frame and names
    arrays: tuple[tuple[int, int, int], ...]   # (count offset, data offset, count) x 3


def _align(pos: int, size: int) -> int:
    """CDR alignment; positions count from the end of the 4-byte encapsulation header."""
    return pos + (-(pos - 4)) % size


def _parse_layout(raw: bytes) -> _Layout:
    """Parse one little-endian JointState CDR message into its layout."""
    if len(raw) < 12 or raw[:2] != b'\x00\x01':
        raise ValueError('not little-endian CDR')
    pos = 12
    (length,) = struct.unpack_from('<I', raw, pos)
    pos += 4 + length
    pos = _align(pos, 4)
    (count,) = struct.unpack_from('<I', raw, pos)
    pos += 4
    names = []
    for _ in range(count):
        pos = _align(pos, 4)
        (length,) = struct.unpack_from('<I', raw, pos)
        names.append(raw[pos + 4:pos + 3 + length].decode())
        pos += 4 + length
    static_end = pos
    arrays = []
    for _ in range(3):
        pos = _align(pos, 4)
        (count,) = struct.unpack_from('<I', raw, pos)
        count_at = pos
        pos += 4
        if count:
            pos = _align(pos, 8)
        arrays.append((count_at, pos, count))
        pos += 8 * count
    if pos > len(raw) or len(raw) - pos > 7:
        raise ValueError(f'JointState CDR size mismatch ({pos} parsed, {len(raw)} bytes)')
    return _Layout(len(raw), tuple(names), static_end, tuple(arrays))


class _Block(NamedTuple):
    """Samples of one name layout: message indices and their arrays in message order."""

    index: np.ndarray                   # (G,) positions in the bag's message order
    names: tuple[str, ...]
    header_ns: np.ndarray               # (G,) int64
    arrays: tuple[np.ndarray | None, ...]   # position, velocity, effort: (G, len(names))


def _bulk_blocks(raws: list[bytes]) -> tuple[list[_Block], list[int]]:
    """Parse the fixed-layout messages in bulk; return blocks and the left-over indices."""
    sizes = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    blocks: list[_Block] = []
    leftover: list[int] = []
    for size in np.unique(sizes):
        todo = np.flatnonzero(sizes == size)
        buf = np.frombuffer(b''.join([raws[i] for i in todo]), dtype=np.uint8)
        buf = buf.reshape(len(todo), int(size))
        rows = np.arange(len(todo))
        while rows.size:
            first = rows[0]
            try:
                layout = _parse_layout(bytes(buf[first]))
            except (ValueError, struct.error, UnicodeDecodeError):
                leftover.append(int(todo[first]))
                rows = rows[1:]
                continue
            # Constant parts: encapsulation, frame_id, names and the three counts.
            cols = [np.arange(0, 4), np.arange(12, layout.static_end)]
            cols += [np.arange(at, at + 4) for at, _, _ in layout.arrays]
            cols = np.concatenate(cols)
            same = (buf[np.ix_(rows, cols)] == buf[first, cols]).all(axis=1)
            match, rows = rows[same], rows[~same]
            sub = buf[match]
            sec = sub[:, 4:8].copy().view('<i4')[:, 0].astype(np.int64)
            nsec = sub[:, 8:12].copy().view('<u4')[:, 0].astype(np.int64)
            arrays = []
            for _, at, count in layout.arrays:
                if count != len(layout.names) or count == 0:
                    arrays.append(None if count == 0 else _mismatch(layout, count))
                    continue
                data = np.ascontiguousarray(sub[:, at:at + 8 * count])
                arrays.append(data.view('<f8').astype(np.float64))
            blocks.append(_Block(todo[match], layout.names, sec * 1_000_000_000 + nsec,
                                 tuple(arrays)))
    return blocks, leftover


def _mismatch(layout: _Layout, count: int) -> None:
    raise MissingJointsError(f'JointState with {len(layout.names)} names carries an array '
                             f'of {count} values')


def _decode_slow(raws: list[bytes], index: list[int], store: Typestore,
                 msgtype: str) -> list[_Block]:
    """Decode messages one by one with the typestore (other endianness, odd layouts)."""
    blocks = []
    for i in index:
        try:
            msg = store.deserialize_cdr(raws[i], msgtype)
        except Exception as err:  # noqa: BLE001 - rosbags raises several types
            raise BagReadError(f'message {i} of the JointState topic cannot be decoded: '
                               f'{err}') from err
        n_names = len(msg.name)
        arrays = []
        for field in ('position', 'velocity', 'effort'):
            values = np.asarray(getattr(msg, field), dtype=np.float64)
            if values.size and values.size != n_names:
                raise MissingJointsError(f'JointState message {i} has {n_names} names but '
                                         f'{values.size} {field} values')
            arrays.append(values[None] if values.size else None)
        stamp = msg.header.stamp
        blocks.append(_Block(np.array([i]), tuple(msg.name),
                             np.array([stamp.sec * 1_000_000_000 + stamp.nanosec]),
                             tuple(arrays)))
    return blocks


def pick_joint_state_topic(reader: Reader, topic: str | None, path: Path) -> str:
    """The JointState topic to read: ``topic`` if given (checked), else ``/joint_states``,
    else the only JointState topic; TopicError listing the bag's topics otherwise."""
    topics = reader.topics
    listing = ', '.join(f'{name} [{info.msgtype}]' for name, info in sorted(topics.items())) \
        or 'none'
    if topic is not None:
        if topic not in topics:
            raise TopicError(f'{path}: no topic {topic!r}; the bag has: {listing}')
        if topics[topic].msgtype != JOINT_STATE_TYPE:
            raise TopicError(f'{path}: topic {topic!r} is {topics[topic].msgtype}, not '
                             f'{JOINT_STATE_TYPE}; the bag has: {listing}')
        return topic
    candidates = [name for name, info in topics.items() if info.msgtype == JOINT_STATE_TYPE]
    if '/joint_states' in candidates:
        return '/joint_states'
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise TopicError(f'{path}: no {JOINT_STATE_TYPE} topic; the bag has: {listing}')
    raise TopicError(f'{path}: several {JOINT_STATE_TYPE} topics {sorted(candidates)} and '
                     'none is /joint_states; choose one with --topic')


def read_joint_states(path: str | Path, model: RobotModel, *, topic: str | None = None,
                      stamp: StampSource = 'header') -> JointStates:
    """Read a bag's JointState samples as arrays in model order.

    Args:
        path: bag directory, or a single ``.mcap``/``.db3`` file.
        model: the robot; columns follow ``model.joint_names``.
        topic: the JointState topic; default ``/joint_states``, else the only one present.
        stamp: ``'header'`` (the message stamp, as the live node uses) or ``'receive'``
            (the time the recorder got it).

    Returns:
        :class:`JointStates`, sorted by the chosen stamp. Samples with a repeated stamp
        keep the first one (a warning counts the others). A bag that did not end cleanly
        is salvaged (see :func:`open_bag`) and ``recovery`` says what came back.

    Raises:
        NotABagError, BagReadError: see :func:`open_bag`.
        TopicError: no such topic or no JointState topic (the message lists the topics).
        MissingJointsError: actuated model joints absent from every message (named), or
            arrays whose length differs from the names.
        ValueError: ``stamp`` is neither 'header' nor 'receive'.
    """
    if stamp not in ('header', 'receive'):
        raise ValueError(f"stamp must be 'header' or 'receive', got {stamp!r}")
    path = Path(path)
    with open_bag(path) as reader:
        topic = pick_joint_state_topic(reader, topic, path)
        distro = reader.ros_distro
        recovery = recovery_of(reader)
        connections = [c for c in reader.connections if c.topic == topic]
        receive: list[int] = []
        raws: list[bytes] = []
        try:
            for _, t, raw in reader.messages(connections=connections):
                receive.append(t)
                raws.append(raw)
        except BagError:
            raise
        except Exception as err:  # noqa: BLE001 - truncated storage raises many types
            raise BagReadError(f'{path}: bag is truncated or corrupt after '
                               f'{len(raws)} messages of {topic}: {err}') from err
    if not raws:
        raise TopicError(f'{path}: topic {topic} has no messages')
    store = typestore_for(distro)
    blocks, leftover = _bulk_blocks(raws)
    if leftover:
        blocks += _decode_slow(raws, leftover, store, JOINT_STATE_TYPE)
    return _assemble(blocks, np.asarray(receive, dtype=np.int64), model, topic, distro,
                     stamp, path)._replace(recovery=recovery)


def _assemble(blocks: list[_Block], receive: np.ndarray, model: RobotModel, topic: str,
              distro: str | None, stamp: StampSource, path: Path) -> JointStates:
    """Scatter the blocks into (N, n) model-order arrays, fill mimics, sort by stamp."""
    n_msgs, n = len(receive), model.n_joints
    lookup = {name: k for k, name in enumerate(model.joint_names)}
    required = [name for name, act in zip(model.joint_names, model.actuated) if act]
    seen: set[str] = set()
    for block in blocks:
        seen.update(block.names)
    missing = [name for name in required if name not in seen]
    if missing:
        raise MissingJointsError(
            f'{path}: {topic} lacks joints {missing} of model {model.name!r} '
            f'(the messages name {sorted(seen)})')
    q = np.full((n_msgs, n), np.nan)
    fields = [q, None, None]
    header = np.zeros(n_msgs, dtype=np.int64)
    covered = np.zeros(n_msgs, dtype=bool)
    for block in blocks:
        if not set(required) <= set(block.names):
            continue  # a partial publisher (e.g. gripper only): dropped below with a count
        cols = [i for i, name in enumerate(block.names) if name in lookup]
        dst = [lookup[block.names[i]] for i in cols]
        covered[block.index] = True
        header[block.index] = block.header_ns
        for f, values in enumerate(block.arrays):
            if values is None:
                continue
            if fields[f] is None:
                fields[f] = np.full((n_msgs, n), np.nan)
            fields[f][np.ix_(block.index, dst)] = values[:, cols]
    if not covered.all():
        warnings.warn(f'{path}: {int((~covered).sum())} of {n_msgs} {topic} messages lack '
                      'some model joints and were skipped', stacklevel=3)
    t = header if stamp == 'header' else receive
    keep = np.flatnonzero(covered)
    if stamp == 'header' and keep.size and not t[keep].any():
        raise BagReadError(f'{path}: every header stamp on {topic} is zero; '
                           'use the receive time (--stamp receive)')
    order = keep[np.argsort(t[keep], kind='stable')]
    dup = np.flatnonzero(np.diff(t[order]) == 0) + 1
    if dup.size:
        warnings.warn(f'{path}: {dup.size} {topic} messages repeat the stamp of the one '
                      'before and were skipped', stacklevel=3)
        order = np.delete(order, dup)
    q, qd, effort = (None if x is None else x[order] for x in fields)
    q = model.fill_mimic(q)
    if qd is not None:
        qd = model.fill_mimic(qd, derivative=True)
    return JointStates(t[order].copy(), q, qd, effort, header[order], receive[order], topic,
                       distro, tuple(model.joint_names))


# --- output paths -------------------------------------------------------------------------


def prepare_output(path: str | Path, *, force: bool = False) -> Path:
    """Make ``path`` free for a new output: refuse if it exists, unless ``force``.

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is False.
    """
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not force:
            raise OutputExistsError(f'{path} exists; use --force to overwrite it')
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    return path


# --- CDR encoding -------------------------------------------------------------------------

# --- writing ------------------------------------------------------------------------------


_MCAP_INTERNALS = ('chunk', 'chunks', 'bio', 'compressor', 'compression', 'channel_stats',
                   'message_start_time', 'message_end_time')
_MCAP_CHUNK_INTERNALS = ('bio', 'msgs', 'message_start_time', 'message_end_time')
_WRITER_INTERNALS = ('counts', 'min_timestamp', 'max_timestamp')
_MCAP_CHUNK_BYTES = 2 ** 20     # the rosbags writer's chunk size

ROSBAGS_TESTED = ((0, 11, 9), (0, 12))
"""The ``rosbags`` versions whose McapWriter internals the fast path was tested against,
``[low, high)``; requirements.txt pins the same range. Outside it the writer uses the
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
        from rosbags.rosbag2.storage_mcap import (  # noqa: F401 - availability check
            PendingChunk,
            write_record,
            write_string,
            write_uint16,
            write_uint32,
            write_uint64,
        )
    except ImportError as err:
        missing.append(str(err))
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
            (level 1, smaller); ignored for sqlite3.
        flush_period: crash safety [s]. None (default): the storage's own buffering (mcap
            chunks of 1 MiB, one sqlite3 transaction), fastest, and a crash loses the
            whole sqlite3 bag or the open mcap chunk. A number: at least this often, in
            wall time or in message time, the open mcap chunk is closed and written, or
            the sqlite3 transaction (WAL journal) committed, and the file synced, so a
            SIGKILL or a power cut loses at most that much. See :meth:`flush`.
        fsync: with ``flush_period``, also ``fsync`` at each flush (survives a power cut,
            not only a killed process).
    """

    def __init__(self, path: str | Path, *, storage: str = 'mcap',
                 typestore: Typestore | None = None, compression: str = 'none',
                 flush_period: float | None = None, fsync: bool = True) -> None:
        plugins = {'mcap': StoragePlugin.MCAP, 'sqlite3': StoragePlugin.SQLITE3}
        if storage not in plugins:
            raise ValueError(f"storage must be 'mcap' or 'sqlite3', got {storage!r}")
        if compression not in ('none', 'lz4', 'zstd'):
            raise ValueError(f"compression must be 'none', 'lz4' or 'zstd', got "
                             f'{compression!r}')
        self.path = Path(path)
        if self.path.exists():
            raise OutputExistsError(f'{self.path} exists; use --force to overwrite it')
        self.storage = storage
        self.typestore = typestore or get_typestore(Stores.ROS2_KILTED)
        self._writer = Writer(self.path, version=9, storage_plugin=plugins[storage])
        if storage == 'mcap' and compression != 'none':
            # MCAP chunk compression: inside the .mcap file, read by ros2 bag, Foxglove and
            # rosbags alike; the bag metadata stays uncompressed.
            self._writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
        self._writer.open()
        if storage == 'mcap' and compression != 'none':
            mcap = self._writer.storage
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
        self._connections: dict[str, object] = {}
        self._fast = False
        if storage == 'mcap':
            problem = _mcap_internals_problem(self._writer)
            self._fast = problem is None
            if problem:
                _warn_once(f'plag_ros.bag: {problem}; MCAP is written through the public '
                           'rosbags API only (slower bulk writes)')
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

    def _sqlite_wal(self) -> None:
        """Switch the sqlite3 storage to a WAL journal (rosbag2's 'resilient' preset does
        too, rosbag2_storage_sqlite3 README), synced at each commit when ``fsync``."""
        conn = getattr(self._writer.storage, 'conn', None)
        if not isinstance(conn, sqlite3.Connection):
            _warn_once('plag_ros.bag: the rosbags sqlite3 writer has no connection to '
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
        storage = self._writer.storage
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
            _warn_once(f'plag_ros.bag: cannot flush the rosbags McapWriter ({err}); a crash '
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
        writer, storage = self._writer, self._writer.storage
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
            qos = [p for c in conns for p in c.ext.offered_qos_profiles][:1]
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
        """Finish the bag (writes metadata.yaml)."""
        storage = self._writer.storage
        if self._fast and storage.chunk.bio.tell():
            _close_mcap_chunk(storage)
        self._writer.close()

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


def _zstd():
    """The zstd module rosbags uses (``compression.zstd`` or ``backports.zstd``)."""
    try:
        from compression import zstd
    except ImportError:
        from backports import zstd
    return zstd


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


def write_joint_state_bag(path: str | Path, t_ns: np.ndarray, names: Sequence[str],
                          q: np.ndarray, qd: np.ndarray | None = None,
                          effort: np.ndarray | None = None, *,
                          topic: str = '/joint_states', storage: str = 'mcap',
                          distro: str = 'jazzy', receive_ns: np.ndarray | None = None,
                          frame_id: str = '', compression: str = 'none') -> Path:
    """Write JointState samples to a new bag (for tests, benchmarks and demos).

    Args:
        path: bag directory to create.
        t_ns: (N,) int64 header stamps [ns].
        names: (m,) joint names, the column order of the arrays (any order).
        q: (N, m) positions; qd, effort: (N, m) or None (empty fields).
        topic: topic name; storage: 'mcap' or 'sqlite3'; distro: typestore of the
            message definitions written into the bag ('humble', 'jazzy', 'kilted').
        receive_ns: (N,) bag receive times [ns] (default ``t_ns``).
        frame_id: header frame.
        compression: MCAP chunk compression ('none', 'lz4', 'zstd').
    """
    from .messages import joint_state

    t_ns = np.asarray(t_ns, dtype=np.int64)
    arrays = {'position': q, 'velocity': qd, 'effort': effort}
    template = CdrTemplate(joint_state(
        names, *(None if x is None else np.zeros(len(names)) for x in arrays.values()),
        t_ns=TEMPLATE_NS, frame_id=frame_id))
    rows = template.fill(t_ns, {k: v for k, v in arrays.items() if v is not None})
    with BagWriter(path, storage=storage, typestore=typestore_for(distro),
                   compression=compression) as writer:
        conn = writer.add_topic(topic, JOINT_STATE_TYPE, qos=qos_profile(depth=50))
        writer.write_rows(conn, t_ns if receive_ns is None else
                          np.asarray(receive_ns, dtype=np.int64), rows)
    return Path(path)
