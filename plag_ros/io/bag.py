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

Writing lives in :mod:`plag_ros.io.bag_writer` (``BagWriter``); JointState bags from arrays
are :func:`plag_ros.ros.output_bag.write_joint_state_bag` (it builds messages).
A recording cut short by a crash is salvaged by :func:`open_bag`
(:mod:`plag_ros.io.bag_recovery`): a truncated mcap up to its last whole chunk, a .db3 without
metadata.yaml with its WAL; :func:`recovery_of` and ``JointStates.recovery`` say how much
came back and where the cut was.

Size (over ~600 lines): the bulk JointState decoder (CDR layout, blocks, the slow path for
odd messages) and the opening of damaged bags serve one call, :func:`read_joint_states`.
"""
from __future__ import annotations

import shutil
import struct
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, NamedTuple, NoReturn, Protocol, runtime_checkable

import numpy as np
from rosbags.interfaces import (
    Qos,
    QosDurability,
    QosHistory,
    QosLiveliness,
    QosReliability,
    QosTime,
)
from rosbags.rosbag2 import Reader
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.io.bag_recovery import RecoveryReport, SalvagedReader, salvage_mcap, salvage_sqlite3

__all__ = [
    'BagError',
    'BagReadError',
    'EXIT_RECOVERED_WITH_LOSS',
    'JOINT_STATE_TYPE',
    'JointStates',
    'MissingJointsError',
    'NotABagError',
    'OutputExistsError',
    'RecoveryReport',
    'SalvagedReader',
    'TopicError',
    'TrajectoryMessage',
    'bag_robot_description',
    'bag_topics',
    'open_bag',
    'pick_joint_state_topic',
    'prepare_output',
    'qos_profile',
    'read_joint_states',
    'read_trajectory_commands',
    'recovery_of',
    'typestore_for',
]

JOINT_STATE_TYPE = 'sensor_msgs/msg/JointState'
EXIT_RECOVERED_WITH_LOSS = 3
"""Exit status for a command that read a salvaged bag whose report is ``lossy`` (0: whole
bag, 2: error), for ``plag-ros analyze`` and any command that reads a bag."""
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
    :mod:`plag_ros.io.bag_recovery`): an mcap that ``rosbags`` refuses (no summary or footer)
    is read record by record up to the cut; a ``.db3`` without ``metadata.yaml``, or with
    a write-ahead log left beside it, is read with its WAL and its metadata rebuilt. The
    reader is then a :class:`~plag_ros.io.bag_recovery.SalvagedReader` whose ``recovery``
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
        except Exception as err:  # noqa: BLE001 - rosbags raises many types on damaged input
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


def bag_robot_description(path: str | Path, topic: str = '/robot_description') -> str | None:
    """The last ``std_msgs/String`` on ``topic`` of a bag (the robot's URDF as its driver
    published it; ``plag-ros record`` records it), or None when the bag has none."""
    with open_bag(path) as reader:
        conns = [c for c in reader.connections
                 if c.topic == topic and c.msgtype == 'std_msgs/msg/String']
        text = None
        if conns:
            store = typestore_for(_yaml_distro(Path(path)))
            for conn, _, raw in reader.messages(connections=conns):
                message: Any = store.deserialize_cdr(raw, conn.msgtype)
                text = message.data
        return text or None


TRAJECTORY_TYPE = 'trajectory_msgs/msg/JointTrajectory'


class TrajectoryMessage(NamedTuple):
    """One recorded ``trajectory_msgs/JointTrajectory`` (a trajectory controller's command).

    Attributes:
        receive_ns: when the recorder got it [ns]; stamp_ns: its header stamp (0: "start
            on arrival", the receive time stands for it).
        joint_names: (J,); times: (P,) time_from_start [s]; positions: (P, J) [rad];
        velocities: (P, J) [rad/s], or None when a point has none.
    """

    receive_ns: int
    stamp_ns: int
    joint_names: tuple[str, ...]
    times: np.ndarray
    positions: np.ndarray
    velocities: np.ndarray | None

    @property
    def start_ns(self) -> int:
        return self.stamp_ns or self.receive_ns


def read_trajectory_commands(path: str | Path, topic: str | None = None
                             ) -> list[TrajectoryMessage]:
    """Every JointTrajectory message of a bag on ``topic`` (default: the only topic of that
    type ending in ``/joint_trajectory``), in recorded order.

    Raises:
        TopicError: no such topic (the message lists the bag's topics).
        BagReadError: a message that does not decode.
    """
    path = Path(path)
    with open_bag(path) as reader:
        present = {t: info.msgtype for t, info in reader.topics.items()}
        candidates = [t for t, kind in present.items()
                      if kind == TRAJECTORY_TYPE and t.endswith('/joint_trajectory')]
        if topic is None and len(candidates) == 1:
            topic = candidates[0]
        if topic is None or present.get(topic) != TRAJECTORY_TYPE:
            listing = ', '.join(f'{t} ({k})' for t, k in sorted(present.items()))
            raise TopicError(f'{path}: no trajectory command topic '
                             f'{topic or "*/joint_trajectory"} (the recording must include '
                             f'the commands the arm was sent); the bag has: {listing}')
        store = typestore_for(reader.ros_distro)
        messages = []
        for conn, t_ns, raw in reader.messages(
                connections=[c for c in reader.connections if c.topic == topic]):
            try:
                msg: Any = store.deserialize_cdr(raw, conn.msgtype)
            except Exception as err:  # noqa: BLE001 - rosbags raises several types
                raise BagReadError(f'{path}: a message of {topic} does not decode: '
                                   f'{err}') from err
            points = list(msg.points)
            velocities = None
            if points and all(len(p.velocities) for p in points):
                velocities = np.array([p.velocities for p in points], dtype=np.float64)
            messages.append(TrajectoryMessage(
                int(t_ns), msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec,
                tuple(msg.joint_names),
                np.array([p.time_from_start.sec + 1e-9 * p.time_from_start.nanosec
                          for p in points], dtype=np.float64),
                np.array([p.positions for p in points], dtype=np.float64).reshape(
                    len(points), len(msg.joint_names)), velocities))
        return messages


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

    rows: np.ndarray                    # (G,) positions in the bag's message order
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
        buf: np.ndarray = np.frombuffer(b''.join([raws[i] for i in todo]), dtype=np.uint8)
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
            spans = [np.arange(0, 4), np.arange(12, layout.static_end)]
            spans += [np.arange(at, at + 4) for at, _, _ in layout.arrays]
            cols = np.concatenate(spans)
            same = (buf[np.ix_(rows, cols)] == buf[first, cols]).all(axis=1)
            match, rows = rows[same], rows[~same]
            sub = buf[match]
            sec = sub[:, 4:8].copy().view('<i4')[:, 0].astype(np.int64)
            nsec = sub[:, 8:12].copy().view('<u4')[:, 0].astype(np.int64)
            arrays: list[np.ndarray | None] = []
            for _, at, count in layout.arrays:
                if count == 0:
                    arrays.append(None)
                    continue
                if count != len(layout.names):
                    _mismatch(layout, count)
                data = np.ascontiguousarray(sub[:, at:at + 8 * count])
                arrays.append(data.view('<f8').astype(np.float64))
            blocks.append(_Block(todo[match], layout.names, sec * 1_000_000_000 + nsec,
                                 tuple(arrays)))
    return blocks, leftover


def _mismatch(layout: _Layout, count: int) -> NoReturn:
    raise MissingJointsError(f'JointState with {len(layout.names)} names carries an array '
                             f'of {count} values')


class _Stamp(Protocol):
    sec: int
    nanosec: int


class _Header(Protocol):
    stamp: _Stamp


@runtime_checkable
class _JointStateFields(Protocol):
    """What :func:`_decode_slow` reads of a typestore-decoded ``sensor_msgs/JointState``
    (``isinstance`` checks that the top-level fields exist)."""

    header: _Header
    name: Sequence[str]
    position: Sequence[float]
    velocity: Sequence[float]
    effort: Sequence[float]


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
        if not isinstance(msg, _JointStateFields):
            raise BagReadError(f'message {i} of the JointState topic decodes to a '
                               f'{type(msg).__name__}, not a JointState')
        n_names = len(msg.name)
        arrays: list[np.ndarray | None] = []
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


def pick_joint_state_topic(reader: Reader | SalvagedReader, topic: str | None,
                           path: Path) -> str:
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
    fields: list[np.ndarray | None] = [q, None, None]   # q is never None
    header = np.zeros(n_msgs, dtype=np.int64)
    covered = np.zeros(n_msgs, dtype=bool)
    for block in blocks:
        if not set(required) <= set(block.names):
            continue  # a partial publisher (e.g. gripper only): dropped below with a count
        cols = [i for i, name in enumerate(block.names) if name in lookup]
        dst = [lookup[block.names[i]] for i in cols]
        covered[block.rows] = True
        header[block.rows] = block.header_ns
        for f, values in enumerate(block.arrays):
            if values is None:
                continue
            target = fields[f]
            if target is None:
                target = fields[f] = np.full((n_msgs, n), np.nan)
            target[np.ix_(block.rows, np.asarray(dst, dtype=np.intp))] = values[:, cols]
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
    qd, effort = (None if x is None else x[order] for x in fields[1:])
    q = model.fill_mimic(q[order])
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
