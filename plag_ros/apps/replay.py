"""Replay a bag into the live ROS 2 graph and record one, without ``ros2 bag``.

``plag-ros replay BAG [--rate R] [--loop] [--clock]`` publishes the bag's joint states (the
raw CDR bytes, unchanged) at their recorded receive times scaled by ``1/R``, like ``ros2 bag
play``; with ``--clock`` it also publishes ``/clock`` (``rosgraph_msgs/Clock``) carrying the
bag time, so nodes started with ``use_sim_time:=true`` run on the bag's time base (as with
``ros2 bag play --clock``). On a ROS install, ``launch/replay.launch.py`` does the same with
``ros2 bag play`` and starts the dynamics node with ``use_sim_time``.

``plag-ros record OUT`` subscribes generically (``raw=True``: serialized bytes, no
deserialization) to ``/joint_states``, ``/diagnostics`` and every topic under
``/plag_dynamics/`` (discovered as they appear, e.g. ``~/body/<body>``) and writes them into a
rosbag2 bag (mcap or sqlite3, format 9) with the message definitions and the QoS the
publishers offer, so ``ros2 bag info/play`` and :func:`plag_ros.io.bag.read_joint_states`
read it.

A recording survives its recorder: every ``--flush-period`` seconds (0.5 by default, of
wall time or of message time, whichever comes first) the open mcap chunk is closed,
written and ``fsync``-ed (sqlite3: the transaction is committed to a WAL journal synced at
each commit), so a SIGKILL or a power cut loses at most the last half second, and
``plag-ros analyze`` salvages what is on disk (:mod:`plag_ros.io.bag_recovery`). mcap stays
the default: it is what ``ros2 bag record`` writes since Iron, a cut file keeps every whole
chunk before the cut (records are self-delimiting, each chunk carries its schemas and
channels), and closing a chunk is an append, whereas a sqlite3 commit rewrites B-tree
pages; both storages flush the same way.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rosbags.interfaces import ConnectionExtRosbag2

from plag_ros.apps.stop_signals import stop_on_signals
from plag_ros.io.bag import BagError, open_bag, pick_joint_state_topic, prepare_output, qos_profile
from plag_ros.io.bag_writer import DEFAULT_BAG_FOR, BagWriter, add_bag_for_argument
from plag_ros.ros.node_setups import CLOCK, namespace_of, namespaced_topic

if TYPE_CHECKING:   # rclpy is imported where a node runs, not by the CLI parser
    from rclpy.subscription import Subscription

__all__ = ['ReplaySchedule', 'configure', 'configure_record', 'load_schedule', 'record',
           'replay', 'run', 'run_record']

_T = TypeVar('_T')

DEFAULT_RECORD_TOPICS = ('/joint_states', '/diagnostics', '/robot_description',
                         '/crane_x7_arm_controller/joint_trajectory')
"""Topics ``plag-ros record`` always subscribes to (when published); the trajectory
controller's commands are what ``plag-ros identify --servo`` compares the arm with."""

DEFAULT_RECORD_PREFIXES = ('/plag_dynamics/',)
"""Topic prefixes whose topics ``plag-ros record`` picks up as they appear."""

# How long the replay waits at its end for reliable subscribers to acknowledge everything
# (a publisher destroyed before that takes the unacknowledged messages with it).
ACK_TIMEOUT_S = 5.0
_CLOCK_PERIOD_NS = 25_000_000   # 40 Hz, ``ros2 bag play --clock``'s default rate


@dataclass(frozen=True)
class ReplaySchedule:
    """Messages of one bag to replay, in bag order.

    Attributes:
        topics: ((topic, msgtype, reliable, transient_local), ...) in publisher order.
        t_ns: (N,) receive times [ns], non-decreasing.
        topic: (N,) index into ``topics`` per message.
        data: (N,) the serialized messages (CDR with encapsulation header).
    """

    topics: tuple[tuple[str, str, bool, bool], ...]
    t_ns: list[int]
    topic: list[int]
    data: list[bytes]

    def __len__(self) -> int:
        return len(self.t_ns)


def load_schedule(path: str | Path, topics: list[str] | None = None) -> ReplaySchedule:
    """Read the messages to replay: the JointState topic (default) or ``topics``.

    Raises:
        BagError: unreadable bag, or a requested topic that is not in it.
    """
    path = Path(path)
    with open_bag(path) as reader:
        present = reader.topics
        if not topics:
            # The same topic choice and errors as the analysis (joint names not checked).
            topics = [pick_joint_state_topic(reader, None, path)]
        missing = [t for t in topics if t not in present]
        if missing:
            listing = ', '.join(sorted(present))
            raise BagError(f'{path}: no topics {missing}; the bag has: {listing}')
        specs: list[tuple[str, str, bool, bool]] = []
        index: dict[str, int] = {}
        for k, topic in enumerate(topics):
            conns = [c for c in reader.connections if c.topic == topic]
            # open_bag reads rosbag2 only: every connection carries the rosbag2 extension
            qos = [p for c in conns if isinstance(c.ext, ConnectionExtRosbag2)
                   for p in c.ext.offered_qos_profiles]
            reliable = not qos or all(p.reliability.name == 'RELIABLE' for p in qos)
            latched = bool(qos) and all(p.durability.name == 'TRANSIENT_LOCAL' for p in qos)
            msgtype = present[topic].msgtype
            if msgtype is None:
                raise BagError(f'{path}: topic {topic} has no message type')
            specs.append((topic, msgtype, reliable, latched))
            index[topic] = k
        t_ns, which, data = [], [], []
        try:
            for conn, t, raw in reader.messages(
                    connections=[c for c in reader.connections if c.topic in index]):
                t_ns.append(t)
                which.append(index[conn.topic])
                data.append(bytes(raw))
        except Exception as err:  # noqa: BLE001 - truncated storage raises many types
            raise BagError(f'{path}: bag is truncated or corrupt after {len(t_ns)} '
                           f'messages: {err}') from err
    return ReplaySchedule(tuple(specs), t_ns, which, data)


def replay(schedule: ReplaySchedule, *, rate: float = 1.0, loop: bool = False,
           clock: bool = False, node=None, stop: threading.Event | None = None,
           start_delay: float = 0.0, wait_subscribers: int = 0,
           wait_timeout: float = 60.0, namespace: str | None = None) -> int:
    """Publish the schedule with its original timing; returns the number published.

    Args:
        schedule: messages from :func:`load_schedule`.
        rate: playback speed factor (2 = twice as fast).
        loop: start again at the end until ``stop`` is set.
        clock: publish ``/clock`` with the bag time (before each message and at 40 Hz).
        node: an rclpy node to publish from (one is created in the default context if
            None, which needs ``rclpy.init`` done).
        stop: set to end the replay early.
        start_delay: seconds to wait after creating the publishers (discovery).
        wait_subscribers: before that, wait until every replayed topic has this many
            matched subscriptions (at most ``wait_timeout`` seconds), so a volatile
            subscriber started just before misses nothing.
        namespace: play every topic into it (``/joint_states`` -> ``/arm1/joint_states``);
            ``/clock`` stays in the root, where rclpy's time source listens.
    """
    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rosgraph_msgs.msg import Clock

    from plag_ros.ros.messages import message_class

    if not rate > 0.0:
        raise ValueError(f'rate must be > 0, got {rate}')
    own = node is None
    if own:
        node = rclpy.create_node('plag_replay')
    stop = stop or threading.Event()
    publishers = []
    for topic, msgtype, reliable, latched in schedule.topics:
        qos = QoSProfile(depth=1 if latched else 1000,
                         reliability=ReliabilityPolicy.RELIABLE if reliable
                         else ReliabilityPolicy.BEST_EFFORT,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                         else DurabilityPolicy.VOLATILE)
        publishers.append(node.create_publisher(
            message_class(msgtype), namespaced_topic(topic, namespace), qos))
    clock_pub = node.create_publisher(Clock, CLOCK, QoSProfile(depth=1)) if clock else None
    published = 0
    try:
        deadline = time.monotonic() + wait_timeout
        while wait_subscribers and not stop.is_set() and time.monotonic() < deadline and any(
                p.get_subscription_count() < wait_subscribers for p in publishers):
            stop.wait(0.05)
        if start_delay > 0.0:
            stop.wait(start_delay)
        while not stop.is_set() and len(schedule):
            published += _play_once(schedule, publishers, clock_pub, rate, stop)
            if not loop:
                break
        # Reliable subscribers get everything before the publishers go away.
        from rclpy.duration import Duration
        for publisher in publishers:
            if not publisher.wait_for_all_acked(Duration(seconds=ACK_TIMEOUT_S)):
                print(f'plag-ros replay: warning: a subscriber of {publisher.topic_name} did '
                      f'not acknowledge every message within {ACK_TIMEOUT_S:g} s',
                      file=sys.stderr)
    finally:
        if own:
            node.destroy_node()
    return published


def _play_once(schedule: ReplaySchedule, publishers, clock_pub, rate: float,
               stop: threading.Event) -> int:
    """One pass over the schedule, sleeping until each message's (scaled) time."""
    from builtin_interfaces.msg import Time
    from rosgraph_msgs.msg import Clock

    def publish_clock(t_bag: int) -> None:
        sec, nanosec = divmod(int(t_bag), 1_000_000_000)
        clock_pub.publish(Clock(clock=Time(sec=sec, nanosec=nanosec)))

    t0_bag = schedule.t_ns[0]
    t0_wall = time.perf_counter_ns()
    next_clock = t0_bag
    count = 0
    for t_bag, k, data in zip(schedule.t_ns, schedule.topic, schedule.data):
        due = t0_wall + int((t_bag - t0_bag) / rate)
        while True:
            now = time.perf_counter_ns()
            if clock_pub is not None and next_clock < t_bag:
                clock_due = t0_wall + int((next_clock - t0_bag) / rate)
                if clock_due <= now:
                    publish_clock(next_clock)
                    next_clock += _CLOCK_PERIOD_NS
                    continue
                wake = min(due, clock_due)
            else:
                wake = due
            if now >= due:
                break
            if stop.wait(min((wake - now) * 1e-9, 0.05)):
                return count
        if clock_pub is not None:
            publish_clock(t_bag)
            next_clock = max(next_clock, t_bag + _CLOCK_PERIOD_NS)
        publishers[k].publish(data)
        count += 1
    return count


# --- record -------------------------------------------------------------------------------


def _bag_qos(info):
    """rclpy TopicEndpointInfo.qos_profile -> rosbags Qos for the bag metadata."""
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    profile = info.qos_profile
    return qos_profile(reliable=profile.reliability == ReliabilityPolicy.RELIABLE,
                       transient_local=profile.durability == DurabilityPolicy.TRANSIENT_LOCAL,
                       depth=max(int(profile.depth), 1))


def record(out: str | Path, *, topics: tuple[str, ...] = DEFAULT_RECORD_TOPICS,
           prefixes: tuple[str, ...] = DEFAULT_RECORD_PREFIXES, storage: str = 'mcap',
           force: bool = False, duration: float | None = None,
           stop: threading.Event | None = None, node=None,
           discovery_period: float = 0.25,
           flush_period: float | None = 0.5, bag_for: str = DEFAULT_BAG_FOR) -> dict[str, int]:
    """Record topics into a new bag until ``stop`` is set, SIGINT, or ``duration`` passes.

    Subscriptions are raw (serialized bytes are written as received, no deserialization)
    and follow the publishers' QoS (reliable only when every publisher is; transient local
    when every publisher is), which is also stored as the topic's offered QoS.

    Args:
        out: bag directory to create.
        topics: topics recorded whenever they are published.
        prefixes: topics starting with one of these are recorded too, as discovered.
        storage: 'mcap' or 'sqlite3'.
        force: replace ``out`` if it exists.
        duration: seconds to record (None: until stopped).
        stop: event that ends the recording.
        node: node to subscribe from (default: a new ``plag_record`` node; needs rclpy.init).
        discovery_period: seconds between graph scans for new topics.
        bag_for: the ROS 2 distribution whose ``ros2 bag`` must read the bag
            (:data:`plag_ros.io.bag_writer.METADATA_VERSIONS`).
        flush_period: at most this many seconds [s] of messages are held in memory; a
            crash of the recorder loses no more (None: flush only at the end).

    Returns:
        Messages written per topic.
    """
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from plag_ros.io.bag import typestore_for
    from plag_ros.ros.messages import message_class

    out = prepare_output(out, force=force)
    store = typestore_for('kilted')
    own = node is None
    if own:
        node = rclpy.create_node('plag_record')
    stop = stop or threading.Event()
    writer = BagWriter(out, storage=storage, typestore=store, flush_period=flush_period,
                       bag_for=bag_for)
    counts: dict[str, int] = {}
    subscriptions: dict[str, Subscription | None] = {}   # None: a topic not recorded
    lock = threading.Lock()

    def make_callback(conn, topic):
        def callback(data: bytes) -> None:
            with lock:
                writer.write(conn, time.time_ns(), data)
                counts[topic] += 1
        return callback

    def discover() -> None:
        for topic, types in node.get_topic_names_and_types():
            if topic in subscriptions:
                continue
            if topic not in topics and not topic.startswith(prefixes):
                continue
            msgtype = types[0]
            if msgtype not in store.fielddefs:
                node.get_logger().warning(f'not recording {topic}: unknown type {msgtype}')
                subscriptions[topic] = None
                continue
            infos = node.get_publishers_info_by_topic(topic)
            if not infos:
                continue
            reliable = all(i.qos_profile.reliability == ReliabilityPolicy.RELIABLE
                           for i in infos)
            latched = all(i.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
                          for i in infos)
            with lock:
                conn = writer.add_topic(topic, msgtype, qos=_bag_qos(infos[0]))
                counts[topic] = 0
            qos = QoSProfile(depth=1000,
                             reliability=ReliabilityPolicy.RELIABLE if reliable
                             else ReliabilityPolicy.BEST_EFFORT,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL if latched
                             else DurabilityPolicy.VOLATILE)
            subscriptions[topic] = node.create_subscription(
                message_class(msgtype), topic, make_callback(conn, topic), qos, raw=True)

    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    deadline = None if duration is None else time.monotonic() + duration
    next_scan = 0.0
    try:
        while not stop.is_set() and rclpy.ok(context=node.context):
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            if now >= next_scan:
                discover()
                next_scan = now + discovery_period
            executor.spin_once(timeout_sec=0.05)
            with lock:
                writer.flush_if_due()
    finally:
        executor.remove_node(node)
        with lock:
            writer.close()
        if own:
            node.destroy_node()
    return counts


# --- command line -------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros replay`` (or of ``plag-ros record``: one module, two commands).

    The CLI builds the parser with ``prog='plag-ros <command>'`` and sets ``args.command``,
    so this module serves both table entries.
    """
    if parser.prog.split()[-1] == 'record':
        configure_record(parser)
        return
    parser.add_argument('bag', type=Path, help='rosbag2 bag directory, .mcap or .db3 file')
    parser.add_argument('--rate', type=float, default=1.0, help='playback speed factor')
    parser.add_argument('--loop', action='store_true', help='replay until interrupted')
    parser.add_argument('--clock', action='store_true',
                        help='publish /clock with the bag time (for use_sim_time)')
    parser.add_argument('--topic', action='append', dest='topics',
                        help='topic to replay (repeatable; default: the JointState topic)')
    parser.add_argument('--delay', type=float, default=0.5,
                        help='seconds to wait for discovery before the first message')
    parser.add_argument('--wait-subscribers', type=int, default=0, metavar='N',
                        help='first wait (up to 60 s) until each topic has N subscribers')
    parser.add_argument('--namespace', default='', metavar='NS',
                        help='play every topic into this ROS namespace (/joint_states -> '
                             '/NS/joint_states); /clock stays in the root')


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros replay`` (or ``record``); 2 on a bag or output error."""
    if getattr(args, 'command', 'replay') == 'record':
        return run_record(args)
    try:
        namespace = namespace_of(getattr(args, 'namespace', ''))
        schedule = load_schedule(args.bag, args.topics)
    except (BagError, ValueError) as err:
        print(f'plag-ros replay: error: {err}', file=sys.stderr)
        return 2
    count = _with_ros(lambda stop: replay(
        schedule, rate=args.rate, loop=args.loop, clock=args.clock, stop=stop,
        start_delay=args.delay, wait_subscribers=args.wait_subscribers,
        namespace=namespace))
    print(f'replayed {count} messages from {args.bag}')
    return 0


def configure_record(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros record``."""
    parser.add_argument('output', type=Path, help='bag directory to create')
    parser.add_argument('--topic', action='append', dest='topics', default=[],
                        help='extra topic to record (repeatable)')
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap')
    parser.add_argument('--duration', type=float, help='seconds to record (default: until '
                                                       'Ctrl-C)')
    parser.add_argument('--force', action='store_true', help='overwrite the output bag')
    add_bag_for_argument(parser)
    parser.add_argument('--flush-period', type=float, default=0.5, metavar='S',
                        help='write and sync what was received at least every S seconds, '
                             'so a crash or power cut loses at most that (0: only at the end)')


def run_record(args: argparse.Namespace) -> int:
    """Run ``plag-ros record``; 2 when the output exists without --force."""
    if not args.flush_period >= 0.0:
        print(f'plag-ros record: error: --flush-period must be >= 0, got {args.flush_period}',
              file=sys.stderr)
        return 2
    try:
        prepare_output(args.output, force=args.force)
    except BagError as err:
        print(f'plag-ros record: error: {err}', file=sys.stderr)
        return 2
    counts = _with_ros(lambda stop: record(
        args.output, topics=DEFAULT_RECORD_TOPICS + tuple(args.topics), storage=args.storage,
        force=True, duration=args.duration, stop=stop, flush_period=args.flush_period or None,
        bag_for=args.bag_for))
    total = sum(counts.values())
    print(f'recorded {total} messages on {len(counts)} topics into {args.output}')
    return 0


def _with_ros(work: Callable[[threading.Event], _T]) -> _T:
    """Start rclpy, run ``work(stop)`` with ``stop`` set by SIGINT/SIGTERM, shut down."""
    import rclpy

    from plag_ros.ros import rclpy_compat

    rclpy.init()
    stop = threading.Event()
    stop_on_signals(stop)          # SIGINT/SIGTERM: the bag is closed, not lost
    try:
        return work(stop)
    finally:
        rclpy_compat.try_shutdown()


