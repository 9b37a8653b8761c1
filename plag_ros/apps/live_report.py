"""What a live run decomposed, as a picture and a one-screen table (``make demo``).

The dynamics node's array topics carry no header, so pairing them with the stamped
``~/joint_states`` across topics depends on delivery order. Instead
:class:`LiveRecording` keeps the run's input (``joint_states``, stamped) and the node's
stamped joint torques, and rebuilds the decomposition with the node's own library path (the
causal estimator, the engine) through :func:`plag_ros.core.decomposition.analysis.analyze_arrays`.
The torques of that rebuild are checked against the ones the node published at the same stamps, so
the figure shows what the node computed, with every component. The offline figure and table serve
it (:func:`plag_ros.apps.bag_analysis.plot_joint_torques`,
:func:`~plag_ros.apps.bag_analysis.decomposition_table`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from plag_ros.core.decomposition.analysis import Analysis, AnalysisOptions, analyze_arrays
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.estimation.filters import EstimatorConfig

__all__ = ['LiveRecording', 'write_report']

SETTLE_NS = 1_000_000_000


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
        self._inputs: dict[int, np.ndarray] = {}
        self._efforts: dict[int, np.ndarray] = {}
        self._torques: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._inputs)

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
        """The decomposition of the recorded input and the largest difference [N*m] between
        its torques and those the node published at the same stamps from one second into
        the recording on (nan: none matched)."""
        stamps = np.array(sorted(self._inputs), dtype=np.int64)
        q = np.array([self._inputs[t] for t in stamps.tolist()]).reshape(-1,
                                                                          self.model.n_joints)
        effort = np.array([self._efforts[t] for t in stamps.tolist()]).reshape(q.shape)
        options = AnalysisOptions(causal=True, estimator=self.estimator, progress=False)
        analysis = analyze_arrays(self.model, stamps, q, effort=effort, options=options)
        # The node's low-pass saw samples before the first one recorded here: its state
        # differs at first and converges within a few time constants (well under 1 s).
        settled = int(stamps[0]) + SETTLE_NS if len(stamps) else 0
        matched = [(k, self._torques[t]) for k, t in enumerate(analysis.t_ns.tolist())
                   if t in self._torques and t >= settled]
        if not matched:
            return analysis, float('nan')
        rows = np.array([k for k, _ in matched])
        live = np.array([torque for _, torque in matched])
        return analysis, float(np.abs(analysis.torque[rows] - live).max())


def write_report(out: Path, recording: LiveRecording, *, title: str) -> tuple[Path, str]:
    """Write ``out/live_torques.png`` and ``out/summary.txt``; returns the PNG and the text.

    Args:
        out: directory (created).
        recording: the live run.
        title: first line of the table and the figure's title.
    """
    from plag_ros.apps.bag_analysis import decomposition_table, plot_joint_torques

    out.mkdir(parents=True, exist_ok=True)
    analysis, difference = recording.analysis()
    span = (analysis.t_ns[-1] - analysis.t_ns[0]) * 1e-9 if len(analysis.t_ns) > 1 else 0.0
    head = [f'{title}: {len(analysis.t_ns)} samples over {span:.1f} s',
            f"rebuilt from the input with the node's estimator and engine; largest "
            f'difference to the torque the node published (after 1 s): {difference:.2e} N*m']
    text = '\n'.join([*head, '', *decomposition_table(recording.model, analysis)]) + '\n'
    png = plot_joint_torques(out / 'live_torques.png', recording.model, analysis,
                             title=f'{title}: joint torque and its parts')
    (out / 'summary.txt').write_text(text)
    return png, text
