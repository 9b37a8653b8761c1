"""What a live run decomposed, as a picture and a one-screen table (``make demo``).

The dynamics node's array topics carry no header, so pairing them with the stamped
``~/joint_states`` across topics depends on delivery order. Instead
:class:`LiveRecording` keeps the run's input (``joint_states``, stamped) and the node's
stamped joint torques, and rebuilds the decomposition with the node's own library path (the
causal estimator, the engine) through :func:`plag_ros.core.decomposition.analysis.analyze_arrays`.
The rebuild takes the input samples the node took (:func:`node_inputs`: a sample the node
never received, or one the recording began before the node did, would otherwise set the two
estimators apart), and its torques are checked against every one the node published, so the
figure shows what the node computed, with every component. The figure and table cover the
run's record window (:meth:`LiveRecording.set_window`: from the motion command on) and serve
the offline ones (:func:`plag_ros.apps.bag_analysis.plot_joint_torques`,
:func:`~plag_ros.apps.bag_analysis.decomposition_table`).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from plag_ros.core.decomposition.analysis import Analysis, AnalysisOptions, analyze_arrays
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.estimation.filters import STENCIL, EstimatorConfig

__all__ = ['MOTION_RAD', 'LiveRecording', 'first_motion_s', 'node_inputs', 'write_report']

MOTION_RAD = 0.01
"""A joint this far [rad or m] from where the record began has moved (:func:`first_motion_s`):
several encoder steps (2 pi / 4096 rad), so a flickering step at rest is not motion."""


def node_inputs(t_ns: np.ndarray, published_ns: np.ndarray,
                estimator: EstimatorConfig) -> np.ndarray:
    """Which recorded input samples the dynamics node's estimator took, from its outputs.

    A sample with a published output was taken. One without was taken only as warm-up: the
    node's estimator (re)starts after a stamp step above ``estimator.gap_periods`` periods,
    or at its first sample, and publishes from the fifth sample on, so the four samples
    before such a first output were taken too. Any other sample without an output never
    reached the node or was dropped by it; samples recorded before the node's first one are
    left out the same way.

    Args:
        t_ns: (N,) int64 input stamps [ns], increasing.
        published_ns: stamps [ns] the node published a decomposition for.
        estimator: the node's estimator settings (gap rule).

    Returns:
        (N,) bool mask of the samples the node took.
    """
    t_ns = np.asarray(t_ns, dtype=np.int64)
    taken = np.isin(t_ns, np.asarray(published_ns, dtype=np.int64))
    gap_ns = estimator.gap_periods * 1e9 / estimator.rate_hz
    last: int | None = None          # stamp of the last sample taken
    for i in np.flatnonzero(taken).tolist():
        t = int(t_ns[i])
        if last is None or t - last > gap_ns:
            # A (re)start: the warm-up samples are the ones right before, after `last`.
            for j in range(i - 1, max(i - STENCIL, -1), -1):
                if last is not None and int(t_ns[j]) <= last:
                    break
                taken[j] = True
        last = t
    return taken


def first_motion_s(t_ns: np.ndarray, q: np.ndarray, *, threshold: float = MOTION_RAD
                   ) -> float:
    """Time [s] from the first sample to the first one with a joint more than ``threshold``
    from its first position (nan: none moved).

    Args:
        t_ns: (N,) stamps [ns]; q: (N, n) joint positions [rad or m].
    """
    if not len(t_ns):
        return float('nan')
    moved = np.flatnonzero(np.abs(q - q[0]).max(axis=1) > threshold)
    return float((t_ns[moved[0]] - t_ns[0]) * 1e-9) if len(moved) else float('nan')


def _rows(analysis: Analysis, keep: np.ndarray) -> Analysis:
    """``analysis`` restricted to the samples ``keep`` (bool, one per sample)."""
    per_sample = {f.name: getattr(analysis, f.name)[keep] for f in dataclasses.fields(analysis)
                  if f.name not in ('joint_names', 'body_names', 'input_codes')
                  and getattr(analysis, f.name) is not None}
    return dataclasses.replace(analysis, **per_sample)


class LiveRecording:
    """A live run's input samples and the joint torques the node published for them.

    Args:
        model: the robot the node decomposes for.
        estimator: the node's estimator settings (default: its defaults).
        max_samples: keep at most this many input samples (the first ones); more are counted.
    """

    def __init__(self, model: RobotModel, *, estimator: EstimatorConfig | None = None,
                 max_samples: int = 20_000) -> None:
        self.model = model
        self.estimator = estimator or EstimatorConfig()
        self.max_samples = max_samples
        self.ignored = 0
        self.start_ns: int | None = None
        self.end_ns: int | None = None
        self._inputs: dict[int, np.ndarray] = {}
        self._efforts: dict[int, np.ndarray] = {}
        self._torques: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._inputs)

    def set_window(self, start_ns: int | None, end_ns: int | None = None) -> None:
        """Show the samples stamped in ``[start_ns, end_ns]`` [ns] (None: open) in the
        figure and table. Samples before it still feed the estimator, as they fed the node's."""
        self.start_ns = None if start_ns is None else int(start_ns)
        self.end_ns = None if end_ns is None else int(end_ns)

    def on_input(self, t_ns: int, q: np.ndarray, effort: np.ndarray | None = None) -> None:
        """One ``joint_states`` sample: stamp [ns], (n,) positions in model order and the
        (n,) efforts (NaN where absent) or None (the node's stick reaction at rest)."""
        if len(self._inputs) >= self.max_samples:
            self.ignored += 1
            return
        # the first sample of a stamp wins, as in the node (a repeat is not increasing)
        if int(t_ns) in self._inputs:
            return
        self._inputs[int(t_ns)] = np.array(q, dtype=np.float64)
        self._efforts[int(t_ns)] = np.full(self.model.n_joints, np.nan) if effort is None \
            else np.array(effort, dtype=np.float64)

    def on_output(self, t_ns: int, torque: np.ndarray) -> None:
        """The node's ``~/joint_states``: stamp [ns] and (n,) joint torque (its effort)."""
        self._torques[int(t_ns)] = np.array(torque, dtype=np.float64)

    def analysis(self) -> tuple[Analysis, float]:
        """The decomposition of the record window and the largest difference [N*m] between
        the rebuilt torques and those the node published, over every published sample that
        was rebuilt (nan: none)."""
        analysis, compared = self._rebuild()
        return analysis, compared['difference']

    def _rebuild(self) -> tuple[Analysis, dict[str, float]]:
        """The window's analysis and the comparison's figures: ``difference`` [N*m],
        ``compared`` and ``published`` (samples), ``unused`` (inputs the node did not take)
        and ``first_motion_s`` (:func:`first_motion_s` over the window's input)."""
        stamps = np.array(sorted(self._inputs), dtype=np.int64)
        q = np.array([self._inputs[t] for t in stamps.tolist()]).reshape(-1,
                                                                          self.model.n_joints)
        effort = np.array([self._efforts[t] for t in stamps.tolist()]).reshape(q.shape)
        # The node's own samples, when it published any (else every recorded one).
        taken = node_inputs(stamps, np.array(sorted(self._torques), dtype=np.int64),
                            self.estimator) if self._torques else np.ones(len(stamps), bool)
        options = AnalysisOptions(causal=True, estimator=self.estimator, progress=False)
        analysis = analyze_arrays(self.model, stamps[taken], q[taken], effort=effort[taken],
                                  options=options)
        matched = [(k, self._torques[t]) for k, t in enumerate(analysis.t_ns.tolist())
                   if t in self._torques]
        difference = float('nan')
        if matched:
            rows = np.array([k for k, _ in matched])
            live = np.array([torque for _, torque in matched])
            difference = float(np.abs(analysis.torque[rows] - live).max())
        inside = np.ones(len(stamps), bool)
        if self.start_ns is not None:
            inside &= stamps >= self.start_ns
        if self.end_ns is not None:
            inside &= stamps <= self.end_ns
        window = _rows(analysis, np.isin(analysis.t_ns, stamps[inside]))
        # timed as the figure is: from the window's first decomposed sample
        if len(window.t_ns):
            inside &= stamps >= window.t_ns[0]
        motion = first_motion_s(stamps[inside], q[inside])
        return window, {'difference': difference, 'compared': len(matched),
                        'published': len(self._torques),
                        'unused': int(len(stamps) - taken.sum()), 'first_motion_s': motion}


def write_report(out: Path, recording: LiveRecording, *, title: str) -> tuple[Path, str]:
    """Write ``out/live_torques.png`` and ``out/summary.txt``; returns the PNG and the text.

    Args:
        out: directory (created).
        recording: the live run.
        title: first line of the table and the figure's title.
    """
    from plag_ros.apps.bag_analysis import decomposition_table, plot_joint_torques

    out.mkdir(parents=True, exist_ok=True)
    analysis, figures = recording._rebuild()
    span = (analysis.t_ns[-1] - analysis.t_ns[0]) * 1e-9 if len(analysis.t_ns) > 1 else 0.0
    head = [f'{title}: {len(analysis.t_ns)} samples over {span:.1f} s; a joint first moves '
            f'{MOTION_RAD:g} rad at {figures["first_motion_s"]:.2f} s',
            f"rebuilt from the input samples the node took ({figures['unused']:d} recorded "
            f"ones it did not) with its estimator and engine; largest difference to the "
            f"torque the node published: {figures['difference']:.2e} N*m over "
            f"{figures['compared']:d} of its {figures['published']:d} samples"]
    text = '\n'.join([*head, '', *decomposition_table(recording.model, analysis)]) + '\n'
    png = plot_joint_torques(out / 'live_torques.png', recording.model, analysis,
                             title=f'{title}: joint torque and its parts')
    (out / 'summary.txt').write_text(text)
    return png, text
