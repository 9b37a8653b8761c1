"""The output bag of an offline analysis: every topic the live dynamics node publishes.

:func:`write_bag` writes an mcap (lz4 chunk compression) or sqlite3 bag with the input joint
states and the node's outputs (:mod:`plag_ros.ros.topics`: same types, names, layouts and
rates: the state, array and component topics at the full input rate, per-body states,
markers and image at ``visualization_rate_hz`` as the node gates them, ``~/names`` once, latched;
``/diagnostics`` once per second of bag time with offline counters), header-stamped with the
input stamps and recorded at the input receive times, for rviz2 or Foxglove.

Bulk message bytes come from :class:`plag_ros.io.cdr.CdrTemplate` over the messages that
:mod:`plag_ros.ros.messages` builds (the test suite proves them equal to
``serialize_message`` of those builders), so a 10-minute 200 Hz bag is written without a
Python call per message.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from plag_ros.core.decomposition.analysis import Analysis, AnalysisOptions
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.io.bag import JOINT_STATE_TYPE, JointStates, qos_profile, typestore_for
from plag_ros.io.bag_writer import DEFAULT_BAG_FOR, BagWriter
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate, cdr_encode
from plag_ros.ros import topics

if TYPE_CHECKING:
    from plag_ros.ros.messages import DecompositionMessages

__all__ = ['write_bag', 'write_joint_state_bag']

Rows = slice | np.ndarray
"""Samples of an :class:`Analysis` to fill messages from: a block or an index array."""

def _visual_rows(t_ns: np.ndarray, rate_hz: float) -> np.ndarray:
    """Samples at which the node publishes markers and image (its gating rule)."""
    if rate_hz <= 0.0:
        return np.zeros(0, dtype=np.int64)
    period = int(1e9 / rate_hz)
    rows, last = [], 0
    for i, t in enumerate(t_ns.tolist()):
        if t - last >= period:
            rows.append(i)
            last = t
    return np.asarray(rows, dtype=np.int64)


class _TopicWriter:
    """One output topic: a CDR template and how to fill it from a block of samples."""

    def __init__(self, topic: str, msgtype: str, template: CdrTemplate,
                 fill: Callable[[Rows], Mapping[str, np.ndarray]]) -> None:
        self.topic, self.msgtype, self.template, self.fill = topic, msgtype, template, fill


def _output_topics(model: RobotModel, analysis: Analysis, live: DecompositionMessages,
                   options: AnalysisOptions) -> list[_TopicWriter]:
    """The node's per-sample topics in its publishing order, each with its bulk filler."""
    from plag_ros.ros.messages import joint_component

    def state(rows: Rows) -> Mapping[str, np.ndarray]:
        return {'position': analysis.q[rows], 'velocity': analysis.qd[rows],
                'effort': analysis.torque[rows]}

    def array(name: str) -> Callable[[Rows], Mapping[str, np.ndarray]]:
        def fill(rows: Rows) -> Mapping[str, np.ndarray]:
            values = getattr(analysis, name)[rows]
            return {'data': values.reshape(len(values), -1)}
        return fill

    def component(name: str) -> Callable[[Rows], Mapping[str, np.ndarray]]:
        return lambda rows: {'effort': joint_component(name, getattr(analysis, name)[rows])}

    writers = [_TopicWriter(topics.node_topic(topics.STATE_TOPIC), JOINT_STATE_TYPE,
                            live.templates['joint_state'], state)]
    for name in topics.ARRAY_TOPICS:
        writers.append(_TopicWriter(topics.node_topic(name), topics.OUTPUT_TYPES[name],
                                    live.templates[name], array(name)))
    if options.publish_components:
        for name in topics.COMPONENT_TOPICS:
            writers.append(_TopicWriter(topics.node_topic(topics.COMPONENT_PREFIX + name),
                                        JOINT_STATE_TYPE, live.templates['effort'],
                                        component(name)))
    return writers


def _body_topics(model: RobotModel, analysis: Analysis, live: DecompositionMessages,
                 options: AnalysisOptions) -> list[_TopicWriter]:
    """``~/body/<body>`` topics: the node publishes them at the visualization rate."""
    def column(i: int) -> Callable[[Rows], Mapping[str, np.ndarray]]:
        return lambda rows: {'effort': analysis.partial[rows][:, :, i]}

    if not options.publish_bodies:
        return []
    return [_TopicWriter(topics.node_topic(topics.BODY_PREFIX + body), JOINT_STATE_TYPE,
                         live.templates['effort'], column(i))
            for i, body in enumerate(model.body_names)]


def _diagnostics(analysis: Analysis, n_input: int, model: RobotModel, mode: str,
                 receive: np.ndarray) -> list[tuple[int, bytes]]:
    """One ``/diagnostics`` message per second of bag time (offline counters)."""
    from plag_ros.ros import messages as msgs

    if not len(analysis.t_ns):
        return []
    out = []
    second = 1_000_000_000
    start = int(analysis.t_ns[0])
    edges = np.arange(start + second, int(analysis.t_ns[-1]) + second, second)
    done = np.searchsorted(analysis.t_ns, edges, side='left')
    for t, count in zip(edges.tolist(), done.tolist()):
        values = {'mode': mode, 'published': count, 'received': int(n_input),
                  'joints': model.n_joints, 'bodies': model.n_bodies}
        status = msgs.diagnostic_status(f'/{topics.DYNAMICS_NODE_NAME}: decomposition',
                                        msgs.DiagnosticLevel.OK, f'offline analysis ({mode})',
                                        values, hardware_id=model.name)
        row = min(max(count - 1, 0), len(receive) - 1)
        out.append((int(max(t, receive[row])), cdr_encode(msgs.diagnostic_array([status],
                                                                                t_ns=t))))
    return out


def write_bag(out: Path, model: RobotModel, analysis: Analysis, js: JointStates,
              source: Path | None, options: AnalysisOptions, *, mode: str) -> Path:
    """Write the output bag: input joint states plus every topic the live node publishes.

    Output messages are stamped (header) with the analysis stamps and recorded at the
    receive time of the input message they come from, as a live ``ros2 bag record`` of
    the node would hold them.
    """
    import torch

    from plag_ros.core.dynamics.engine import PartialLagrangian
    from plag_ros.ros import messages as msgs

    frame = options.frame_id or model.root_link
    receive = js.receive_ns[analysis.index]
    with BagWriter(out, storage=options.storage, compression=options.compression,
                   bag_for=options.bag_for or DEFAULT_BAG_FOR) as writer:
        # 1. The input joint states, byte for byte, with their receive times.
        if source is not None:
            writer.copy_topic(source, js.topic)
        # 2. Names, latched, once.
        latched = qos_profile(depth=1, transient_local=True)
        conn = writer.add_topic(topics.node_topic(topics.NAMES_TOPIC),
                                topics.OUTPUT_TYPES[topics.NAMES_TOPIC], qos=latched)
        if len(receive):
            writer.write(conn, int(receive[0]), cdr_encode(msgs.names_message(model)))
        # 3. Per-sample topics, in blocks so the bytes of one block stay in cache.
        live = msgs.DecompositionMessages(model, frame_id=frame, arrays=topics.ARRAY_TOPICS)
        writers = _output_topics(model, analysis, live, options)
        conns = [writer.add_topic(t.topic, t.msgtype) for t in writers]
        block = 4096
        for a in range(0, len(analysis.t_ns), block):
            s = slice(a, a + block)
            for topic, conn in zip(writers, conns):
                rows = topic.template.fill(analysis.t_ns[s], topic.fill(s))
                writer.write_rows(conn, receive[s], rows)
        # 4. Per-body states, markers and image at the visualization rate.
        vis = _visual_rows(analysis.t_ns, options.visualization_rate_hz)
        for topic in _body_topics(model, analysis, live, options):
            if vis.size:
                conn = writer.add_topic(topic.topic, topic.msgtype)
                writer.write_rows(conn, receive[vis],
                                  topic.template.fill(analysis.t_ns[vis], topic.fill(vis)))
        if vis.size:
            engine = PartialLagrangian(model, dtype=torch.float64)
            markers = msgs.MarkerBuilder(model, frame_id=frame, scale=options.marker_scale)
            image = msgs.PartialImageBuilder(model.n_joints, model.n_bodies,
                                             cell=options.image_cell,
                                             limit=options.image_limit, frame_id=frame)
            marker_template = markers.template()
            image_template = image.template()
            pixel_at = image_template.size - image.pixel_bytes
            # One colour per table cell from the node's builder (cell = 1), then the cells
            # blown up to image.cell pixels for a whole block at once.
            cells = msgs.PartialImageBuilder(model.n_joints, model.n_bodies, cell=1,
                                             limit=options.image_limit)
            c_markers = writer.add_topic(topics.node_topic(topics.MARKERS_TOPIC),
                                         topics.OUTPUT_TYPES[topics.MARKERS_TOPIC])
            c_image = writer.add_topic(topics.node_topic(topics.IMAGE_TOPIC),
                                       topics.OUTPUT_TYPES[topics.IMAGE_TOPIC])
            for a in range(0, vis.size, 1024):
                rows = vis[a:a + 1024]
                poses = engine.link_poses(analysis.q[rows]).numpy()
                parts = msgs.marker_components({name: getattr(analysis, name)[rows]
                                                for name in ('torque', 'acceleration',
                                                             'velocity', 'gravity', 'friction')})
                points = markers.point_fields(poses, parts)
                writer.write_rows(c_markers, receive[rows],
                                  marker_template.fill(analysis.t_ns[rows], points))
                img = image_template.fill(analysis.t_ns[rows], {})
                rgb = np.stack([cells.colours(analysis.partial[row]) for row in rows])
                # each table cell blown up to cell x cell pixels in one broadcast copy
                h, w = rgb.shape[1:3]
                img[:, pixel_at:].reshape(len(rows), h, image.cell, w, image.cell, 3)[:] = \
                    rgb[:, :, None, :, None, :]
                writer.write_rows(c_image, receive[rows], img)
        # 5. Diagnostics once per second of bag time.
        c_diag = writer.add_topic('/diagnostics', 'diagnostic_msgs/msg/DiagnosticArray')
        for t, data in _diagnostics(analysis, len(js.t_ns), model, mode, receive):
            writer.write(c_diag, t, data)
    return out


def write_joint_state_bag(path: str | Path, t_ns: np.ndarray, names: Sequence[str],
                          q: np.ndarray, qd: np.ndarray | None = None,
                          effort: np.ndarray | None = None, *,
                          topic: str = '/joint_states', storage: str = 'mcap',
                          distro: str = 'jazzy', receive_ns: np.ndarray | None = None,
                          frame_id: str = '', compression: str = 'none',
                          messages: Sequence[tuple[str, str, int, object]] = ()) -> Path:
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
        messages: more messages, (topic, type, receive time [ns], rclpy message) each (a
            command the recording saw, the robot description).
    """
    from plag_ros.ros.messages import joint_state  # message packages only when called
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
        connections: dict[str, object] = {}
        for topic_name, msgtype, at_ns, message in messages:
            if topic_name not in connections:
                connections[topic_name] = writer.add_topic(topic_name, msgtype,
                                                           qos=qos_profile(depth=10))
            writer.write(connections[topic_name], int(at_ns), cdr_encode(message))
    return Path(path)
