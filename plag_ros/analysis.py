"""Offline analysis of a recorded bag: ``plag-ros analyze BAG -o OUT``.

The bag's joint states are read once (:func:`plag_ros.bag.read_joint_states`), velocity and
acceleration are estimated (zero-phase :func:`plag_ros.filters.estimate_offline` by
default; the live node's causal :class:`~plag_ros.filters.JointStateEstimator` with
``--causal``), and the partial Lagrangian decomposition (seed 000 eq. 6, seed 002 eq. 10)
runs in batches with the fast engine. :func:`analyze_arrays` is the library function over
arrays; :func:`analyze_bag` adds reading and the products written into ``OUT``:

* ``OUT/bag/``: an mcap bag (lz4 chunk compression) with the input joint states and every
  topic the live dynamics node publishes (:mod:`plag_ros.nodes.dynamics_node`: same types,
  names, layouts and rates: the state and array topics at the full input rate, per-body
  states, markers and image at ``visualization_rate_hz`` as the node gates them,
  ``~/names`` once, latched;
  ``/diagnostics`` once per second of bag time with offline counters), header-stamped with
  the input stamps and recorded at the input receive times, for rviz2 or Foxglove;
* ``OUT/analysis.npz``: every array with its names (compressed);
* ``OUT/torques.csv``: joint torques and the per-body torques (non-zero partial torques);
* ``OUT/*.png``: the paper's figures (seed 002 fig. 6-9, 11-14): torque with its
  acceleration / velocity / gravity parts per joint, motion propagation torques by source
  joint, and the partial torque table as a heat map over time;
* ``OUT/summary.txt``: largest propagation paths and RMS per component.

Bulk message bytes come from :class:`plag_ros.cdr.CdrTemplate` over the messages that
:mod:`plag_ros.messages` builds (the test suite proves them equal to
``serialize_message`` of those builders), so a 10-minute 200 Hz bag is written without a
Python call per message.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .bag import (
    JOINT_STATE_TYPE,
    BagError,
    BagWriter,
    JointStates,
    prepare_output,
    qos_profile,
    read_joint_states,
)
from .cdr import CdrTemplate, cdr_encode
from .filters import EstimatorConfig, JointStateEstimator, estimate_offline
from .model import RobotModel, default_urdf_path
from .npz import save_npz

if TYPE_CHECKING:
    from .messages import DecompositionMessages

__all__ = [
    'Analysis',
    'AnalysisOptions',
    'ARRAY_NAMES',
    'analyze_arrays',
    'analyze_bag',
    'configure',
    'output_rows',
    'decompose_states',
    'estimate_states',
    'propagation_paths',
    'run',
    'write_outputs',
]

ARRAY_NAMES = ('q', 'qd', 'qdd', 'torque', 'partial', 'acceleration', 'velocity', 'gravity',
               'friction')
"""Per-sample arrays of an :class:`Analysis`, in the order they are stored."""

NODE_NAMESPACE = '/plag_dynamics'
"""Topic prefix of the dynamics node's outputs (its default name, no namespace)."""

_ARRAY_TOPICS = ('partial', 'acceleration', 'velocity', 'gravity', 'friction')
_MAX_PLOT_POINTS = 2000
_FIGURES_PROCESS_SAMPLES = 50_000
"""From this many samples (about 4 min at 200 Hz) the csv and figures are written by a
child process: below it, starting one costs more than it saves."""


@dataclass(frozen=True)
class AnalysisOptions:
    """How a bag is analysed; defaults are the dynamics node's (config/crane_x7.yaml).

    Attributes:
        causal: use the live node's causal estimator instead of the zero-phase one.
        estimator: estimator settings (cut-off, order, nominal rate, ...).
        chunk: samples per decomposition batch.
        output_rate_hz: decompose and publish at most this often (stamp time), the node's
            ``output_rate_hz`` rule; the estimator still sees every sample (0: all).
        visualization_rate_hz: rate of the markers and image topics (0: none).
        marker_scale: arrow length per unit torque [m/(N*m)]; image_cell, image_limit:
            heat map cell size [px] and saturation [N*m] (0: auto per image).
        publish_bodies: write ``~/body/<body>`` topics.
        frame_id: frame of stamped outputs (empty: the URDF root link).
        storage: output bag storage, 'mcap' or 'sqlite3'.
        compression: MCAP chunk compression of the output bag, 'lz4' (default: about 4x
            smaller at ~1 GB/s), 'zstd' (smaller, ~3x slower) or 'none'.
        npz_level: deflate level of the npz (1-3: ISA-L, about 700 MB/s; 4-9: zlib,
            smaller and much slower; 0: stored uncompressed). See :mod:`plag_ros.npz`.
        figures_process: write the csv and plots in a child process (None: for
            recordings of 50 000 samples or more).
        products: which of 'bag', 'npz', 'csv', 'plots', 'summary' to write.
        progress: show a progress bar (None: on a terminal for long bags).
    """

    causal: bool = False
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    chunk: int = 4096
    output_rate_hz: float = 0.0
    visualization_rate_hz: float = 20.0
    marker_scale: float = 0.02
    image_cell: int = 16
    image_limit: float = 0.0
    publish_bodies: bool = True
    frame_id: str = ''
    storage: str = 'mcap'
    compression: str = 'lz4'
    npz_level: int = 1
    figures_process: bool | None = None
    products: frozenset[str] = frozenset({'bag', 'npz', 'csv', 'plots', 'summary'})
    progress: bool | None = None

    def __post_init__(self) -> None:
        if self.chunk < 1:
            raise ValueError(f'chunk must be >= 1 sample, got {self.chunk}')
        unknown = set(self.products) - {'bag', 'npz', 'csv', 'plots', 'summary'}
        if unknown:
            raise ValueError(f'unknown products {sorted(unknown)}')
        if self.visualization_rate_hz < 0.0 or self.output_rate_hz < 0.0:
            raise ValueError('visualization_rate_hz and output_rate_hz must be >= 0')
        if not 0 <= self.npz_level <= 9:
            raise ValueError(f'npz_level must be in 0..9, got {self.npz_level}')


class Analysis(NamedTuple):
    """Decomposition of every estimated sample of a recording.

    Attributes (M estimated samples, n joints, B bodies):
        t_ns: (M,) int64 stamps [ns]; index: (M,) int64 row of each sample in the input.
        q, qd, qdd: (M, n) estimated joint state.
        torque: (M, n); partial: (M, n, B); acceleration, velocity: (M, n, B, n);
        gravity: (M, n, B); friction: (M, n) [N*m or N] (see
        :class:`plag_ros.dynamics.Decomposition`).
        joint_names, body_names: column names.
    """

    t_ns: np.ndarray
    index: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    torque: np.ndarray
    partial: np.ndarray
    acceleration: np.ndarray
    velocity: np.ndarray
    gravity: np.ndarray
    friction: np.ndarray
    joint_names: tuple[str, ...]
    body_names: tuple[str, ...]


# --- library ------------------------------------------------------------------------------


def estimate_states(t_ns: np.ndarray, q: np.ndarray, *, qd_measured: np.ndarray | None = None,
                    config: EstimatorConfig | None = None, causal: bool = False
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Estimated ``(index, q, qd, qdd)`` of a recording, rows of the samples that have one.

    Offline (zero-phase) every sample of a segment of at least five gap-free samples has an
    estimate. Causal runs the live estimator sample by sample, exactly as the dynamics node
    does per message: warm-up and rejected samples have none.

    Args:
        t_ns: (N,) int64 stamps [ns]; q: (N, n) positions; qd_measured: (N, n) or None.
        config: estimator settings; causal: live estimator instead of zero-phase.

    Returns:
        index (M,) rows of the input, and q, qd, qdd (M, n).
    """
    config = config or EstimatorConfig()
    if not causal:
        est = estimate_offline(t_ns, q, config, qd_measured=qd_measured)
        index = np.flatnonzero(np.isfinite(est.q).all(axis=1))
        return index, est.q[index], est.qd[index], est.qdd[index]
    estimator = JointStateEstimator(q.shape[1], config)
    rows, out_q, out_qd, out_qdd = [], [], [], []
    measured = qd_measured if config.velocity_source == 'measured' else None
    for i, (t, x) in enumerate(zip(t_ns.tolist(), q)):
        sample = estimator.update(t, x, None if measured is None else measured[i])
        if sample is not None:
            rows.append(i)
            out_q.append(sample.q)
            out_qd.append(sample.qd)
            out_qdd.append(sample.qdd)
    n = q.shape[1]
    if not rows:
        empty = np.zeros((0, n))
        return np.zeros(0, dtype=np.int64), empty, empty.copy(), empty.copy()
    return (np.asarray(rows, dtype=np.int64), np.asarray(out_q), np.asarray(out_qd),
            np.asarray(out_qdd))


def analyze_arrays(model: RobotModel, t_ns: np.ndarray, q: np.ndarray, *,
                   qd_measured: np.ndarray | None = None,
                   options: AnalysisOptions | None = None,
                   engine=None) -> Analysis:
    """Estimate and decompose a whole recording given as arrays.

    Args:
        model: the robot.
        t_ns: (N,) int64 stamps [ns], strictly increasing.
        q: (N, n) joint positions in model order, mimic joints filled.
        qd_measured: (N, n) measured velocities (for ``velocity_source='measured'``).
        options: estimator mode and batch size.
        engine: a :class:`plag_ros.dynamics.PartialLagrangian` to reuse (default: new,
            float64).

    Returns:
        :class:`Analysis` of the M samples that have an estimate.
    """
    options = options or AnalysisOptions()
    t_ns = np.asarray(t_ns, dtype=np.int64)
    index, qe, qde, qdde = estimate_states(t_ns, np.asarray(q, dtype=np.float64),
                                           qd_measured=qd_measured, config=options.estimator,
                                           causal=options.causal)
    keep = output_rows(t_ns[index], options.output_rate_hz)
    index, qe, qde, qdde = index[keep], qe[keep], qde[keep], qdde[keep]
    return decompose_states(model, t_ns, index, qe, qde, qdde, chunk=options.chunk,
                            progress=options.progress, engine=engine)


def decompose_states(model: RobotModel, t_ns: np.ndarray, index: np.ndarray, q: np.ndarray,
                     qd: np.ndarray, qdd: np.ndarray, *, chunk: int = 4096,
                     progress: bool | None = None, engine=None) -> Analysis:
    """Decompose estimated samples: in one call with the compiled float64 engine, else
    (float32, GPU engines) in batches of ``chunk`` with an optional progress bar.

    Args:
        t_ns: (N,) input stamps; index: (M,) rows of the estimated samples in the input.
        q, qd, qdd: (M, n) estimated joint state.
        progress: tqdm progress bar (None: on a terminal when there are many chunks).
        engine: a float64 :class:`plag_ros.dynamics.PartialLagrangian` to reuse.
    """
    import torch

    from .dynamics import PartialLagrangian

    engine = engine or PartialLagrangian(model, dtype=torch.float64)
    if engine.compiled:
        # ~4 us per sample: the whole recording in one call, written straight into the
        # arrays the analysis keeps (no second copy of 1.4 GB per 10 minutes)
        out = engine.decompose_arrays(q, qd, qdd)
    else:
        out = _decompose_in_chunks(engine, q, qd, qdd, chunk, progress)
    return Analysis(np.asarray(t_ns, dtype=np.int64)[index], np.asarray(index), q, qd, qdd,
                    joint_names=tuple(model.joint_names), body_names=tuple(model.body_names),
                    **out)


def _decompose_in_chunks(engine, q, qd, qdd, chunk: int,
                         progress: bool | None) -> dict[str, np.ndarray]:
    """The torch form (float32, GPU) in batches of ``chunk``, with a progress bar."""
    m = len(q)
    out: dict[str, np.ndarray] = {}
    starts = range(0, m, chunk)
    show = progress if progress is not None else (sys.stderr.isatty() and m > 8 * chunk)
    if show:
        from tqdm import tqdm
        starts = tqdm(starts, total=math.ceil(m / chunk), unit='chunk', desc='decompose',
                      leave=False)
    for a in starts:
        part = engine.decompose(q[a:a + chunk], qd[a:a + chunk], qdd[a:a + chunk]).numpy()
        for name, values in part.items():
            if name not in out:
                out[name] = np.empty((m, *values.shape[1:]))
            out[name][a:a + len(values)] = values
    return out


def propagation_paths(analysis: Analysis, *, top: int = 10) -> list[tuple[float, str, int,
                                                                          int]]:
    """Largest motion propagation paths, source joint s -> joint k with s != k.

    Returns:
        Up to ``top`` tuples ``(rms [N*m], part, k, s)`` sorted by RMS over time, ``part``
        being 'acceleration' or 'velocity' (summed over bodies).
    """
    paths = []
    for part in ('acceleration', 'velocity'):
        by_source = getattr(analysis, part).sum(axis=2)                          # (M, n, n)
        rms = np.sqrt(np.mean(by_source ** 2, axis=0)) if len(by_source) else \
            np.zeros(by_source.shape[1:])
        for k in range(rms.shape[0]):
            for s in range(rms.shape[1]):
                if s != k:
                    paths.append((float(rms[k, s]), part, k, s))
    paths.sort(key=lambda p: -p[0])
    return paths[:top]


# --- output bag ---------------------------------------------------------------------------


def output_rows(t_ns: np.ndarray, rate_hz: float) -> np.ndarray:
    """Rows the dynamics node decomposes at ``output_rate_hz`` (all when 0).

    The node's rule: a sample is published when its stamp reaches the next due time, which
    then advances by one period (keeping the phase) or restarts after a gap.
    """
    if rate_hz <= 0.0:
        return np.arange(len(t_ns))
    period = int(1e9 / rate_hz)
    rows, due = [], 0
    for i, t in enumerate(t_ns.tolist()):
        if t < due:
            continue
        rows.append(i)
        due += period
        if due <= t:
            due = t + period
    return np.asarray(rows, dtype=np.int64)


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
                 fill: Callable[[slice], Mapping[str, np.ndarray]]) -> None:
        self.topic, self.msgtype, self.template, self.fill = topic, msgtype, template, fill


def _output_topics(model: RobotModel, analysis: Analysis,
                   live: DecompositionMessages) -> list[_TopicWriter]:
    """The node's per-sample topics in its publishing order, each with its bulk filler."""
    topics = [_TopicWriter(
        f'{NODE_NAMESPACE}/joint_states', JOINT_STATE_TYPE, live.templates['joint_state'],
        lambda s: {'position': analysis.q[s], 'velocity': analysis.qd[s],
                   'effort': analysis.torque[s]})]
    for name in _ARRAY_TOPICS:
        topics.append(_TopicWriter(
            f'{NODE_NAMESPACE}/{name}', 'std_msgs/msg/Float64MultiArray', live.templates[name],
            lambda s, name=name: {'data': getattr(analysis, name)[s].reshape(
                len(analysis.t_ns[s]), -1)}))
    return topics


def _body_topics(model: RobotModel, analysis: Analysis, live: DecompositionMessages,
                 options: AnalysisOptions) -> list[_TopicWriter]:
    """``~/body/<body>`` topics: the node publishes them at the visualization rate."""
    if not options.publish_bodies:
        return []
    return [_TopicWriter(f'{NODE_NAMESPACE}/body/{body}', JOINT_STATE_TYPE,
                         live.templates['body'],
                         lambda rows, i=i: {'effort': analysis.partial[rows][:, :, i]})
            for i, body in enumerate(model.body_names)]


def _diagnostics(analysis: Analysis, n_input: int, model: RobotModel, mode: str,
                 receive: np.ndarray) -> list[tuple[int, bytes]]:
    """One ``/diagnostics`` message per second of bag time (offline counters)."""
    from . import messages as msgs

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
        status = msgs.diagnostic_status(f'{NODE_NAMESPACE}: decomposition',
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

    from . import messages as msgs
    from .dynamics import PartialLagrangian

    frame = options.frame_id or model.root_link
    receive = js.receive_ns[analysis.index]
    with BagWriter(out, storage=options.storage, compression=options.compression) as writer:
        # 1. The input joint states, byte for byte, with their receive times.
        if source is not None:
            writer.copy_topic(source, js.topic)
        # 2. Names, latched, once.
        latched = qos_profile(depth=1, transient_local=True)
        conn = writer.add_topic(f'{NODE_NAMESPACE}/names', 'std_msgs/msg/String', qos=latched)
        if len(receive):
            writer.write(conn, int(receive[0]), cdr_encode(msgs.names_message(model)))
        # 3. Per-sample topics, in blocks so the bytes of one block stay in cache.
        live = msgs.DecompositionMessages(model, frame_id=frame, arrays=_ARRAY_TOPICS)
        topics = _output_topics(model, analysis, live)
        conns = [writer.add_topic(t.topic, t.msgtype) for t in topics]
        block = 4096
        for a in range(0, len(analysis.t_ns), block):
            s = slice(a, a + block)
            for topic, conn in zip(topics, conns):
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
            c_markers = writer.add_topic(f'{NODE_NAMESPACE}/markers',
                                         'visualization_msgs/msg/MarkerArray')
            c_image = writer.add_topic(f'{NODE_NAMESPACE}/partial_image',
                                       'sensor_msgs/msg/Image')
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


# --- files --------------------------------------------------------------------------------


def _structural_pairs(model: RobotModel) -> list[tuple[int, int]]:
    """(joint k, body i) pairs where partial[k, i] can be non-zero (k on i's root path)."""
    return sorted((k, i) for i in range(model.n_bodies)
                  for k in model.root_path(model.body_joint[i]))


def _save_csv(path: Path, model: RobotModel, t_ns: np.ndarray, torque: np.ndarray,
              partial: np.ndarray) -> None:
    """Joint torques (M, n) and per-body torques (the non-zero entries of partial
    (M, n, B)), one row per stamp of t_ns (M,)."""
    pairs = _structural_pairs(model)
    header = ['t_ns', 't_s'] + [f'torque[{j}]' for j in model.joint_names] + \
        [f'partial[{model.joint_names[k]}][{model.body_names[i]}]' for k, i in pairs]
    t0 = int(t_ns[0]) if len(t_ns) else 0
    ks, is_ = (np.array([p[0] for p in pairs], dtype=np.int64),
               np.array([p[1] for p in pairs], dtype=np.int64))
    values = np.concatenate([((t_ns - t0) * 1e-9)[:, None], torque, partial[:, ks, is_]],
                            axis=1)
    row_fmt = '%d,' + ','.join(['%.9g'] * values.shape[1])
    with open(path, 'w') as f:
        f.write(','.join(header) + '\n')
        for a in range(0, len(values), 8192):
            rows = zip(t_ns[a:a + 8192].tolist(), values[a:a + 8192].tolist())
            f.write('\n'.join(row_fmt % (t, *v) for t, v in rows))
            f.write('\n')


def _plot_rows(m: int) -> np.ndarray:
    return np.arange(0, m, max(1, math.ceil(m / _MAX_PLOT_POINTS)))


def _plotted(analysis: Analysis) -> Analysis:
    """The rows the figures draw (at most _MAX_PLOT_POINTS): all a plot needs."""
    rows = _plot_rows(len(analysis.t_ns))
    return analysis._replace(**{name: getattr(analysis, name)[rows]
                                for name in ('t_ns', 'index', *ARRAY_NAMES)})


def _write_csv_and_plots(out: Path, model: RobotModel, products: frozenset[str],
                         t_ns: np.ndarray, torque: np.ndarray, partial: np.ndarray,
                         plotted: Analysis) -> dict[str, float]:
    """The csv and the figures; returns seconds per product. Runs in a child process on
    long recordings (both are GIL-bound Python), so it takes only the arrays it needs."""
    timings = {}
    if 'csv' in products:
        t0 = time.perf_counter()
        _save_csv(out / 'torques.csv', model, t_ns, torque, partial)
        timings['write_csv'] = time.perf_counter() - t0
    if 'plots' in products:
        t0 = time.perf_counter()
        _save_plots(out, model, plotted)
        timings['write_plots'] = time.perf_counter() - t0
    return timings


def _save_plots(out: Path, model: RobotModel, analysis: Analysis) -> list[Path]:
    """Figures in the style of seed 002 (fig. 6-9, 11-14), decimated to <= 2000 points."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    rows = _plot_rows(len(analysis.t_ns))
    t = (analysis.t_ns[rows] - (analysis.t_ns[0] if len(rows) else 0)) * 1e-9
    n = model.n_joints
    short = [name.removeprefix(f'{model.name}_') for name in model.joint_names]
    bodies = [name.removeprefix(f'{model.name}_') for name in model.body_names]
    paths = []

    # 1. Joint torque and its acceleration / velocity / gravity parts (fig. 6 and 11).
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.8 * n), sharex=True, squeeze=False)
    parts = {'torque': analysis.torque[rows],
             'acceleration': analysis.acceleration[rows].sum(axis=(-1, -2)),
             'velocity': analysis.velocity[rows].sum(axis=(-1, -2)),
             'gravity': analysis.gravity[rows].sum(axis=-1),
             'friction': analysis.friction[rows]}
    styles = {'torque': ('k', '-'), 'acceleration': ('tab:blue', '-'),
              'velocity': ('tab:orange', '-'), 'gravity': ('tab:green', '-'),
              'friction': ('tab:purple', ':')}
    for k, ax in enumerate(axes[:, 0]):
        for name, values in parts.items():
            colour, style = styles[name]
            ax.plot(t, values[:, k], color=colour, linestyle=style, linewidth=0.8,
                    label=name)
        ax.set_ylabel(f'j{k + 1} [N m]', fontsize=7)
        ax.set_title(short[k], fontsize=7, loc='left', pad=2)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc='upper right', fontsize=7, ncol=5)
    axes[-1, 0].set_xlabel('time [s]')
    fig.suptitle('Joint torque and its acceleration, velocity and gravity parts')
    # Fixed margins: tight_layout costs more than drawing the lines.
    fig.subplots_adjust(left=0.13, right=0.98, top=0.95, bottom=0.05, hspace=0.12)
    paths.append(out / 'joint_torques.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    # 2. Motion propagation torques by source joint (fig. 8-9, 13-14).
    fig, axes = plt.subplots(n, 2, figsize=(12, 1.8 * n), sharex=True, squeeze=False)
    colours = plt.cm.tab10(np.linspace(0, 1, 10))
    for col, part in enumerate(('acceleration', 'velocity')):
        by_source = getattr(analysis, part)[rows].sum(axis=2)                  # (m, n, n)
        for k in range(n):
            ax = axes[k, col]
            for s in range(n):
                if np.any(by_source[:, k, s]):
                    ax.plot(t, by_source[:, k, s], color=colours[s % 10], linewidth=0.8,
                            label=f'from j{s + 1} {short[s]}')
            ax.set_ylabel(f'j{k + 1} [N m]', fontsize=7)
            ax.grid(alpha=0.3)
        axes[0, col].set_title(f'{part} propagation torque at joint j by source joint')
        axes[-1, col].set_xlabel('time [s]')
    handles, labels = axes[-1, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc='lower center', ncol=min(n, 5), fontsize=7)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.96, bottom=0.09, hspace=0.12,
                        wspace=0.25)
    paths.append(out / 'propagation.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    # 3. Partial torque table over time as a heat map (rows: joint k x body i).
    pairs = _structural_pairs(model)
    table = np.stack([analysis.partial[rows, k, i] for k, i in pairs], axis=0) \
        if len(rows) else np.zeros((len(pairs), 1))
    limit = float(np.max(np.abs(table), initial=0.0)) or 1.0
    fig, ax = plt.subplots(figsize=(12, 0.18 * len(pairs) + 2))
    extent = (float(t[0]) if len(t) else 0.0, float(t[-1]) if len(t) else 1.0,
              len(pairs) - 0.5, -0.5)
    image = ax.imshow(table, aspect='auto', cmap='RdBu_r', vmin=-limit, vmax=limit,
                      extent=extent, interpolation='nearest')
    ax.set_yticks(range(len(pairs)))
    ax.set_yticklabels([f'{short[k]} <- {bodies[i]}' for k, i in pairs], fontsize=6)
    ax.set_xlabel('time [s]')
    ax.set_title('Partial torque table partial[k, i]: torque at joint k caused by body i')
    fig.colorbar(image, ax=ax, label='[N m]')
    fig.subplots_adjust(left=0.3, right=0.98, top=0.95, bottom=0.08)
    paths.append(out / 'partial_heatmap.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    return paths


def _rms(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(x ** 2, axis=0)) if len(x) else np.zeros(x.shape[1:])


def summary_text(model: RobotModel, analysis: Analysis, js: JointStates, *, mode: str,
                 source: str) -> str:
    """Short human-readable summary: input, RMS per component, largest paths."""
    m = len(analysis.t_ns)
    duration = (js.t_ns[-1] - js.t_ns[0]) * 1e-9 if len(js.t_ns) > 1 else 0.0
    lines = [
        f'plag-ros analyze: {source}',
        f'topic {js.topic}: {len(js.t_ns)} samples over {duration:.3f} s '
        f'({(len(js.t_ns) - 1) / duration if duration else 0.0:.1f} Hz); '
        f'{m} decomposed ({mode})',
        '',
        'RMS per component [N m]:',
        f'  {"joint":<46}{"torque":>10}{"accel":>10}{"velocity":>10}{"gravity":>10}'
        f'{"friction":>10}',
    ]
    rms = {
        'torque': _rms(analysis.torque),
        'acceleration': _rms(analysis.acceleration.sum(axis=(-1, -2))),
        'velocity': _rms(analysis.velocity.sum(axis=(-1, -2))),
        'gravity': _rms(analysis.gravity.sum(axis=-1)),
        'friction': _rms(analysis.friction),
    }
    for k, name in enumerate(model.joint_names):
        lines.append(f'  {name:<46}' + ''.join(f'{rms[c][k]:>10.4f}' for c in rms))
    lines += ['', 'Largest motion propagation paths (source joint -> joint, RMS [N m]):']
    for value, part, k, s in propagation_paths(analysis):
        lines.append(f'  {value:10.4f}  {part:<12} {model.joint_names[s]} -> '
                     f'{model.joint_names[k]}')
    partial_rms = _rms(analysis.partial)
    lines += ['', 'Largest partial torques from other bodies (body -> joint, RMS [N m]):']
    ranked = sorted(((float(partial_rms[k, i]), k, i) for k, i in _structural_pairs(model)
                     if int(model.body_joint[i]) != k), reverse=True)[:10]
    for value, k, i in ranked:
        lines.append(f'  {value:10.4f}  {model.body_names[i]} -> {model.joint_names[k]}')
    return '\n'.join(lines) + '\n'


def _in_child_process(fn: Callable, *args):
    """``fn(*args)`` in a forked child; returns its result, re-raises its error.

    Forked, not spawned, and started as a plain Process (a process pool would pickle the
    arguments to its worker): the child reads the parent's arrays in place, only the
    small result or the error comes back through a pipe, and the user's ``__main__`` is
    not re-imported, so scripts without a main guard work. The child runs only numpy,
    matplotlib and file writes, none of the parent's thread pools.

    Raises:
        RuntimeError: the child died without an answer (e.g. killed).
    """
    context = multiprocessing.get_context('fork')
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send((True, fn(*args)))
        except BaseException as err:  # noqa: BLE001 - handed to the parent to re-raise
            send.send((False, err))

    with warnings.catch_warnings():
        # Python 3.12+ warns on fork in a process with threads (the idle numba/torch
        # pools and the writer threads); the child touches none of their locks
        warnings.simplefilter('ignore', DeprecationWarning)
        process = context.Process(target=child, name='plag-ros-figures', daemon=True)
        process.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        process.join()
        raise RuntimeError(f'the csv/plot process ended with exit code {process.exitcode} '
                           'and no result') from None
    finally:
        receive.close()
    process.join()
    if not ok:
        raise value
    return value


def write_outputs(out: Path, model: RobotModel, analysis: Analysis, js: JointStates, *,
                  source: Path | None, options: AnalysisOptions,
                  timings: dict[str, float] | None = None) -> dict[str, Path]:
    """Write the products selected in ``options.products`` into the directory ``out``."""
    timings = {} if timings is None else timings
    mode = 'causal' if options.causal else 'zero-phase'
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def step(name: str, fn: Callable[[], Path | list[Path]]) -> None:
        t0 = time.perf_counter()
        result = fn()
        timings[f'write_{name}'] = time.perf_counter() - t0
        written[name] = result if isinstance(result, Path) else out

    def npz() -> Path:
        arrays = {name: getattr(analysis, name) for name in ARRAY_NAMES}
        arrays.update(t_ns=analysis.t_ns, index=analysis.index,
                      input_t_ns=js.t_ns, input_q=js.q,
                      joint_names=np.array(model.joint_names),
                      body_names=np.array(model.body_names),
                      source_names=np.array(model.joint_names))
        if js.qd is not None:
            arrays['input_qd'] = js.qd
        if js.effort is not None:
            arrays['input_effort'] = js.effort
        save_npz(out / 'analysis.npz', arrays, options.npz_level)
        return out / 'analysis.npz'

    # The bag and the npz are written in threads (deflate, lz4, the big numpy copies and
    # file writes release the GIL) while the csv and the figures, GIL-bound Python, are
    # written by a child process on long recordings: on two cores the products overlap
    # instead of queueing for one interpreter (bench/bench_bag.py).
    errors: list[BaseException] = []
    workers = []
    for name, fn in (('bag', lambda: write_bag(out / 'bag', model, analysis, js, source,
                                               options, mode=mode)),
                     ('npz', npz)):
        if name in options.products:
            def task(name=name, fn=fn) -> None:
                try:
                    step(name, fn)
                except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                    errors.append(err)
            workers.append(threading.Thread(target=task, name=name, daemon=True))
            workers[-1].start()
    figures = options.products & {'csv', 'plots'}
    child = options.figures_process
    if child is None:
        child = len(analysis.t_ns) >= _FIGURES_PROCESS_SAMPLES
    try:
        arguments = (out, model, figures, analysis.t_ns, analysis.torque, analysis.partial,
                     _plotted(analysis))
        if figures and child:
            timings.update(_in_child_process(_write_csv_and_plots, *arguments))
        elif figures:
            timings.update(_write_csv_and_plots(*arguments))
        written.update({name: out / 'torques.csv' if name == 'csv' else out
                        for name in figures})
        if 'summary' in options.products:
            text = summary_text(model, analysis, js, mode=mode, source=str(source))
            (out / 'summary.txt').write_text(text)
            written['summary'] = out / 'summary.txt'
    finally:
        t0 = time.perf_counter()
        for worker in workers:
            worker.join()
        timings['wait_workers'] = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return written


def analyze_bag(bag: str | Path, out: str | Path, *, model: RobotModel | None = None,
                topic: str | None = None, stamp: str = 'header', force: bool = False,
                options: AnalysisOptions | None = None,
                timings: dict[str, float] | None = None) -> tuple[Analysis, dict[str, Path]]:
    """Read, estimate, decompose and write every product of one bag.

    Args:
        bag: input bag (directory or single .mcap/.db3 file).
        out: output directory; must not exist unless ``force``.
        model: the robot (default: the bundled CRANE-X7).
        topic: JointState topic (default ``/joint_states`` or the only one).
        stamp: 'header' or 'receive'.
        force: replace ``out`` if it exists.
        options: analysis options.
        timings: filled with seconds per stage (read, estimate, decompose, write: the
            wall time of all products; write_<product> each, overlapping).

    Raises:
        BagError: see :func:`plag_ros.bag.read_joint_states`; OutputExistsError when
            ``out`` exists without ``force``.
    """
    options = options or AnalysisOptions()
    timings = {} if timings is None else timings
    out = Path(out)
    bag = Path(bag)
    if out.resolve() == bag.resolve() or bag.resolve() in out.resolve().parents:
        raise BagError(f'output {out} would overwrite the input bag {bag}')
    if out.exists() and not force:
        prepare_output(out, force=False)
    model = model or RobotModel.from_urdf(default_urdf_path())
    t0 = time.perf_counter()
    js = read_joint_states(bag, model, topic=topic, stamp=stamp)
    timings['read'] = time.perf_counter() - t0
    _check_rate(js, options.estimator)
    t0 = time.perf_counter()
    index, q, qd, qdd = estimate_states(js.t_ns, js.q, qd_measured=js.qd,
                                        config=options.estimator, causal=options.causal)
    keep = output_rows(js.t_ns[index], options.output_rate_hz)
    index, q, qd, qdd = index[keep], q[keep], qd[keep], qdd[keep]
    timings['estimate'] = time.perf_counter() - t0
    t0 = time.perf_counter()
    analysis = decompose_states(model, js.t_ns, index, q, qd, qdd, chunk=options.chunk,
                                progress=options.progress)
    timings['decompose'] = time.perf_counter() - t0
    t0 = time.perf_counter()
    prepare_output(out, force=force)
    written = write_outputs(out, model, analysis, js, source=bag, options=options,
                            timings=timings)
    timings['write'] = time.perf_counter() - t0
    return analysis, written


def _check_rate(js: JointStates, config: EstimatorConfig) -> None:
    """Warn when the bag's median rate is far from the rate the filter is designed for."""
    if len(js.t_ns) < 2:
        return
    rate = 1e9 / float(np.median(np.diff(js.t_ns)))
    if abs(rate - config.rate_hz) > 0.1 * config.rate_hz:
        warnings.warn(f'{js.topic} runs at {rate:.1f} Hz but the estimator is designed for '
                      f'{config.rate_hz:g} Hz; pass --rate-hz {rate:.0f}', stacklevel=3)


# --- command line -------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros analyze``."""
    parser.add_argument('bag', type=Path, help='rosbag2 bag directory, .mcap or .db3 file')
    parser.add_argument('-o', '--output', type=Path, required=True,
                        help='output directory (bag/, analysis.npz, torques.csv, *.png, '
                             'summary.txt)')
    parser.add_argument('--force', action='store_true', help='overwrite the output directory')
    parser.add_argument('--topic', help='JointState topic (default /joint_states or the only '
                                        'one)')
    parser.add_argument('--stamp', choices=('header', 'receive'), default='header',
                        help='sample time: message header stamp or bag receive time')
    parser.add_argument('--urdf', type=Path, help='robot URDF (default: bundled CRANE-X7)')
    parser.add_argument('--causal', action='store_true',
                        help="use the live node's causal estimator (same output as the "
                             'node) instead of zero-phase filtering')
    parser.add_argument('--cutoff-hz', type=float, default=10.0, help='low-pass cut-off [Hz]')
    parser.add_argument('--order', type=int, default=2, help='Butterworth order')
    parser.add_argument('--rate-hz', type=float, default=200.0,
                        help='nominal joint_states rate the filter is designed for [Hz]')
    parser.add_argument('--velocity-source', choices=('position', 'measured'),
                        default='position')
    parser.add_argument('--chunk', type=int, default=4096, help='samples per batch')
    parser.add_argument('--output-rate-hz', type=float, default=0.0,
                        help="decompose at most this often, as the node's output_rate_hz "
                             '(0: every sample)')
    parser.add_argument('--visualization-rate-hz', type=float, default=20.0,
                        help='rate of markers and image in the output bag (0: none)')
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap',
                        help='output bag storage')
    parser.add_argument('--compression', choices=('lz4', 'zstd', 'none'), default='lz4',
                        help='chunk compression of the output mcap bag')
    parser.add_argument('--npz-level', type=int, default=1, choices=range(10),
                        metavar='0-9', help='deflate level of analysis.npz (1-3: fast ISA-L, '
                        '4-9: zlib, smaller and slower; 0: uncompressed)')
    parser.add_argument('--skip', action='append', default=[],
                        choices=('bag', 'npz', 'csv', 'plots', 'summary'),
                        help='product not to write (repeatable)')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros analyze``; returns the exit status (2 on a bag or output error)."""
    try:
        model = RobotModel.from_urdf(args.urdf or default_urdf_path())
        estimator = EstimatorConfig(cutoff_hz=args.cutoff_hz, order=args.order,
                                    rate_hz=args.rate_hz,
                                    velocity_source=args.velocity_source)
        options = AnalysisOptions(
            causal=args.causal, estimator=estimator, chunk=args.chunk,
            visualization_rate_hz=args.visualization_rate_hz, storage=args.storage,
            output_rate_hz=args.output_rate_hz,
            npz_level=args.npz_level, compression=args.compression,
            products=frozenset({'bag', 'npz', 'csv', 'plots', 'summary'} - set(args.skip)),
            progress=False if args.no_progress else None)
        timings: dict[str, float] = {}
        analysis, written = analyze_bag(args.bag, args.output, model=model, topic=args.topic,
                                        stamp=args.stamp, force=args.force, options=options,
                                        timings=timings)
    except (BagError, ValueError, FileNotFoundError) as err:
        print(f'plag-ros analyze: error: {err}', file=sys.stderr)
        return 2
    if 'summary' in written:
        print(written['summary'].read_text(), end='')
    print('wrote ' + ', '.join(str(p) for p in sorted(set(written.values()))))
    print('seconds: ' + ', '.join(f'{k} {v:.2f}' for k, v in timings.items()))
    return 0
