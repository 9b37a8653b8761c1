"""Offline analysis of a recording as arrays: estimate, decompose, rank the propagation paths.

A library over arrays, no ROS and no files: :func:`analyze_arrays` takes stamps and joint
positions, estimates velocity and acceleration (zero-phase
:func:`plag_ros.core.estimation.filters.estimate_offline` by default; the live node's causal
:class:`~plag_ros.core.estimation.filters.JointStateEstimator` with ``causal=True``) and runs the
partial Lagrangian decomposition (Kusaka and Tanaka 2022 [PL], eq. 6; Gunji, Kusaka and Tanaka 2025
[MPF], eq. 10) in batches with the fast engine.
The products written from an :class:`Analysis` live elsewhere: the output bag that mirrors
the live node in :mod:`plag_ros.ros.output_bag`, the npz, csv, figures and the
``plag-ros analyze`` command in :mod:`plag_ros.apps.analyze`.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator, estimate_offline
from plag_ros.core.estimation.friction import FRICTION_STATES, RestFriction
from plag_ros.core.estimation.plausibility import (
    PLAUSIBILITY_REASONS,
    PlausibilityConfig,
    PlausibilityGate,
)

__all__ = [
    'ARRAY_NAMES',
    'Analysis',
    'AnalysisOptions',
    'analyze_arrays',
    'decompose_states',
    'estimate_recording',
    'estimate_states',
    'output_rows',
    'own_source_propagation',
    'propagation_paths',
    'structural_pairs',
]

ARRAY_NAMES = ('q', 'qd', 'qdd', 'torque', 'partial', 'acceleration', 'velocity', 'gravity',
               'friction')
"""Per-sample arrays of an :class:`Analysis`, in the order they are stored."""

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
        publish_components: write ``~/component/<name>`` topics (per-joint components as
            JointState, every sample).
        frame_id: frame of stamped outputs (empty: the URDF root link).
        storage: output bag storage, 'mcap' or 'sqlite3'.
        compression: MCAP chunk compression of the output bag, 'lz4' (default: about 4x
            smaller at ~1 GB/s), 'zstd' (smaller, ~3x slower) or 'none'.
        bag_for: the ROS 2 distribution whose ``ros2 bag`` must read the output bag
            ('humble', 'jazzy', 'kilted'; None: the writer's default,
            :data:`plag_ros.io.bag_writer.DEFAULT_BAG_FOR`).
        npz_level: deflate level of the npz (1-3: ISA-L, about 700 MB/s; 4-9: zlib,
            smaller and much slower; 0: stored uncompressed). See :mod:`plag_ros.io.npz`.
        npz_layout: 'dense' (the engine's arrays) or 'compact' (only the structurally
            non-zero entries, with their index maps;
            :func:`plag_ros.core.dynamics.compact.load_analysis` reads either as dense).
        figures_process: write the csv and plots in a child process (None: for
            recordings of 50 000 samples or more).
        products: which of 'bag', 'npz', 'csv', 'plots', 'summary' to write.
        progress: show a progress bar (None: on a terminal for long bags).
        plausibility: limits on the input (:mod:`plag_ros.core.estimation.plausibility`):
            samples the arm cannot produce are left out of the estimate and reported, never
            dropped silently (:attr:`Analysis.input_codes`).
        threads: threads of the compiled engine (None: measured per batch size,
            :class:`plag_ros.core.dynamics.kernel.ThreadChoice`; an int caps them). A many-bag run
            sets it so that worker processes times threads stay within the cores.
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
    publish_components: bool = True
    frame_id: str = ''
    storage: str = 'mcap'
    compression: str = 'lz4'
    bag_for: str | None = None
    npz_level: int = 1
    npz_layout: str = 'dense'
    figures_process: bool | None = None
    products: frozenset[str] = frozenset({'bag', 'npz', 'csv', 'plots', 'summary'})
    progress: bool | None = None
    plausibility: PlausibilityConfig = field(default_factory=PlausibilityConfig)
    threads: int | None = None

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
        if self.npz_layout not in ('dense', 'compact'):
            raise ValueError(f"npz_layout must be 'dense' or 'compact', got {self.npz_layout!r}")


@dataclass(frozen=True)
class Analysis:
    """Decomposition of every estimated sample of a recording.

    Attributes (M estimated samples, n joints, B bodies):
        t_ns: (M,) int64 stamps [ns]; index: (M,) int64 row of each sample in the input.
        q, qd, qdd: (M, n) estimated joint state.
        torque: (M, n); partial: (M, n, B); acceleration, velocity: (M, n, B, n);
        gravity: (M, n, B) (see :class:`plag_ros.core.dynamics.engine.Decomposition`);
        friction: (M, n) [N*m or N] as reported (:mod:`plag_ros.core.estimation.friction`:
        the model while sliding, the stick reaction or 0 at rest).
        joint_names, body_names: column names.
        input_codes: (N,) int64 per input sample: 0 accepted, else 1 + the index of its
            rejection reason in :data:`INPUT_REASONS`; None when the input was not checked.
        friction_state: (M, n) int8 per joint and sample, an index into
            :data:`plag_ros.core.estimation.friction.FRICTION_STATES` (sliding, stick, unresolved);
            None when the rest rule was not applied (the friction is then the model's).
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
    input_codes: np.ndarray | None = None
    friction_state: np.ndarray | None = None

    def friction_states(self) -> dict[str, int]:
        """Joint samples per friction state (all states, zeros included)."""
        codes = np.zeros(0, dtype=np.int8) if self.friction_state is None \
            else self.friction_state.ravel()
        counts = np.bincount(codes, minlength=len(FRICTION_STATES))
        return {name: int(counts[i]) for i, name in enumerate(FRICTION_STATES)}

    def rejected(self) -> dict[str, int]:
        """Rejected input samples by reason (all of :data:`INPUT_REASONS`, zeros
        included)."""
        codes = np.zeros(0, dtype=np.int64) if self.input_codes is None else self.input_codes
        counts = np.bincount(codes, minlength=1 + len(INPUT_REASONS))
        return {reason: int(counts[1 + i]) for i, reason in enumerate(INPUT_REASONS)}



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


INPUT_REASONS = (*PLAUSIBILITY_REASONS, 'stamp_spacing')
"""Why an input sample of a recording is left out of the estimate: the plausibility gate's
reasons, then ``stamp_spacing``: a stamp closer than the estimator's
``min_spacing_periods`` to the previous sample kept (the live estimator rejects it the
same way; a publisher that catches up after a stall can stamp two samples 0.5 ms apart).
:attr:`Analysis.input_codes` holds 1 + the index into this tuple."""


def _mark_bunched_stamps(t_ns: np.ndarray, codes: np.ndarray, config: EstimatorConfig
                         ) -> None:
    """Code (in place) each sample accepted so far whose stamp is too close to the
    previous accepted one as ``stamp_spacing``."""
    rows = np.flatnonzero(codes == 0)
    min_step = config.min_step_ns
    if len(rows) < 2 or not (np.diff(t_ns[rows]) < min_step).any():
        return                                  # the usual case: nothing to walk
    code = 1 + INPUT_REASONS.index('stamp_spacing')
    previous = int(t_ns[rows[0]])
    for r in rows[1:]:
        if int(t_ns[r]) - previous < min_step:
            codes[r] = code
        else:
            previous = int(t_ns[r])


def estimate_recording(model: RobotModel, t_ns: np.ndarray, q: np.ndarray, *,
                       qd_measured: np.ndarray | None = None,
                       options: AnalysisOptions | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Check, estimate and pick the output rows of a recording (before decomposing).

    Samples the plausibility gate rejects are left out of the estimate (their neighbours
    are estimated across them, as across any uneven stamp step) and reported in the codes.

    Args:
        model: the robot (its limits); t_ns: (N,) int64 stamps [ns], strictly increasing;
        q: (N, n) positions in model order; qd_measured: (N, n) or None; options: settings.

    Returns:
        index (M,) input rows of the output samples, q, qd, qdd (M, n) estimated, and the
        (N,) input codes (see :attr:`Analysis.input_codes`).
    """
    options = options or AnalysisOptions()
    t_ns = np.asarray(t_ns, dtype=np.int64)
    q = np.asarray(q, dtype=np.float64)
    codes = PlausibilityGate(model, options.plausibility).check_batch(t_ns, q, qd_measured)
    _mark_bunched_stamps(t_ns, codes, options.estimator)
    rows = np.flatnonzero(codes == 0)
    if len(rows) == len(t_ns):
        kept_q, kept_qd = q, qd_measured
    else:
        kept_q = q[rows]
        kept_qd = None if qd_measured is None else qd_measured[rows]
    index, qe, qde, qdde = estimate_states(t_ns[rows], kept_q, qd_measured=kept_qd,
                                           config=options.estimator, causal=options.causal)
    index = rows[index]
    keep = output_rows(t_ns[index], options.output_rate_hz)
    return index[keep], qe[keep], qde[keep], qdde[keep], codes


def analyze_arrays(model: RobotModel, t_ns: np.ndarray, q: np.ndarray, *,
                   qd_measured: np.ndarray | None = None,
                   effort: np.ndarray | None = None,
                   options: AnalysisOptions | None = None,
                   engine=None) -> Analysis:
    """Estimate and decompose a whole recording given as arrays.

    Args:
        model: the robot.
        t_ns: (N,) int64 stamps [ns], strictly increasing.
        q: (N, n) joint positions in model order, mimic joints filled.
        qd_measured: (N, n) measured velocities (checked against the velocity limits;
            estimated from with ``velocity_source='measured'``).
        effort: (N, n) ``joint_states`` effort in model order (NaN where absent): the stick
            reaction of joints at rest comes from it (:mod:`plag_ros.core.estimation.friction`).
        options: estimator mode, plausibility limits, batch size and the engine's threads.
        engine: a :class:`plag_ros.core.dynamics.engine.PartialLagrangian` to reuse (default: new,
            float64, with ``options.threads``).

    Returns:
        :class:`Analysis` of the M samples that have an estimate.
    """
    options = options or AnalysisOptions()
    t_ns = np.asarray(t_ns, dtype=np.int64)
    index, qe, qde, qdde, codes = estimate_recording(model, t_ns, q, qd_measured=qd_measured,
                                                     options=options)
    return decompose_states(model, t_ns, index, qe, qde, qdde, chunk=options.chunk,
                            progress=options.progress, engine=engine, input_codes=codes,
                            estimator=options.estimator, effort=effort,
                            threads=options.threads)


def decompose_states(model: RobotModel, t_ns: np.ndarray, index: np.ndarray, q: np.ndarray,
                     qd: np.ndarray, qdd: np.ndarray, *, chunk: int = 4096,
                     progress: bool | None = None, engine=None,
                     input_codes: np.ndarray | None = None,
                     estimator: EstimatorConfig | None = None,
                     effort: np.ndarray | None = None, threads: int | None = None) -> Analysis:
    """Decompose estimated samples: in one call with the compiled float64 engine, else
    (float32, GPU engines) in batches of ``chunk`` with an optional progress bar.

    Args:
        t_ns: (N,) input stamps; index: (M,) rows of the estimated samples in the input.
        q, qd, qdd: (M, n) estimated joint state.
        progress: tqdm progress bar (None: on a terminal when there are many chunks).
        engine: a float64 :class:`plag_ros.core.dynamics.engine.PartialLagrangian` to reuse.
        input_codes: (N,) plausibility codes of the input, kept in the result.
        estimator: the estimator the states come from: applies the friction rest rule
            (:mod:`plag_ros.core.estimation.friction`) with its band; None keeps the model's
            friction.
        effort: (N, n) input efforts in model order (NaN where absent), for the stick
            reaction; None: joints at rest are unresolved.
        threads: threads of the engine made here (ignored with ``engine``).
    """
    import torch

    from plag_ros.core.dynamics.engine import PartialLagrangian

    engine = engine or PartialLagrangian(model, dtype=torch.float64, threads=threads)
    if engine.compiled:
        # ~4 us per sample: the whole recording in one call, written straight into the
        # arrays the analysis keeps (no second copy of 1.4 GB per 10 minutes)
        out = engine.decompose_arrays(q, qd, qdd)
    else:
        out = _decompose_in_chunks(engine, q, qd, qdd, chunk, progress)
    state = None
    if estimator is not None:
        state = RestFriction(model, estimator).apply(
            out['friction'], qd, out['torque'],
            None if effort is None else np.asarray(effort, dtype=np.float64)[index])
    return Analysis(np.asarray(t_ns, dtype=np.int64)[index], np.asarray(index), q, qd, qdd,
                    joint_names=tuple(model.joint_names), body_names=tuple(model.body_names),
                    input_codes=input_codes, friction_state=state, **out)


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



def structural_pairs(model: RobotModel) -> list[tuple[int, int]]:
    """(joint k, body i) pairs where partial[k, i] can be non-zero (k on i's root path)."""
    return sorted((k, i) for i in range(model.n_bodies)
                  for k in model.root_path(model.body_joint[i]))


def own_source_propagation(model: RobotModel, table: np.ndarray, joint: int) -> np.ndarray:
    """[MPF]'s tau^p_kj(theta_j): at ``joint`` k, link j's load from joint j's own motion.

    The paper plots, for the base joint k = 1, the torque that link j puts on joint k
    because joint j itself moves (figs. 8-9 and 13-14): the entry of the velocity or
    acceleration table whose body rides on joint j and whose source is joint j.

    Args:
        model: the model the table was computed with.
        table: (M, n, B, n) velocity or acceleration propagation table [N*m or N].
        joint: the joint k the torques act on (0-based).

    Returns:
        (M, n) [N*m or N]: column j is tau^p_kj(theta_j), summed over the bodies riding on
        joint j; zero where joint k is not on joint j's path to the root.
    """
    if not 0 <= joint < model.n_joints:
        raise ValueError(f'joint index {joint} outside 0..{model.n_joints - 1}')
    out = np.zeros(table.shape[:1] + (model.n_joints,))
    for i in range(model.n_bodies):
        j = int(model.body_joint[i])
        out[:, j] += table[:, joint, i, j]
    return out
