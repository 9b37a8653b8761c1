"""What a live run decomposed, as a picture and a one-screen table (``make demo``).

The dynamics node publishes, per sample, ``~/joint_states`` first (stamped; q, qd and the
joint torque) and then its arrays (``~/partial``, ``~/acceleration``, ``~/velocity``,
``~/gravity``, ``~/friction``; no header). :class:`LiveRecording` pairs them by arrival
order, keeps every complete sample and turns the run into an
:class:`~plag_ros.analysis.Analysis`, so the offline figure and table serve the live run
too (:func:`plag_ros.tools.analyze.plot_joint_torques`,
:func:`~plag_ros.tools.analyze.decomposition_table`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import topics
from ..analysis import Analysis
from ..model import RobotModel

__all__ = ['LiveRecording', 'write_report']


class LiveRecording:
    """Samples of the dynamics node's outputs, as they arrive.

    Args:
        model: the robot the node decomposes for (shapes of the arrays).
        max_samples: keep at most this many samples (the first ones); more are counted.
    """

    def __init__(self, model: RobotModel, *, max_samples: int = 20_000) -> None:
        self.model = model
        self.max_samples = max_samples
        self.ignored = 0
        self._open = False      # the sample that began last is being kept
        self._states: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        self._arrays: list[dict[str, np.ndarray]] = []

    def __len__(self) -> int:
        return len(self._states)

    def on_state(self, t_ns: int, q: np.ndarray, qd: np.ndarray, torque: np.ndarray) -> None:
        """``~/joint_states``: a new sample begins (stamp [ns], q, qd, torque (n,))."""
        self._open = len(self._states) < self.max_samples
        if not self._open:
            self.ignored += 1
            return
        self._states.append((int(t_ns), np.array(q), np.array(qd), np.array(torque)))
        self._arrays.append({})

    def on_array(self, name: str, values: np.ndarray) -> None:
        """One of :data:`plag_ros.topics.ARRAY_TOPICS` of the sample that began last."""
        if self._open:
            self._arrays[-1][name] = np.array(values)

    def analysis(self) -> Analysis:
        """The complete samples (every array arrived) as an Analysis."""
        rows = [i for i, arrays in enumerate(self._arrays)
                if all(name in arrays for name in topics.ARRAY_TOPICS)]
        n, B = self.model.n_joints, self.model.n_bodies
        shapes = {'partial': (n, B), 'acceleration': (n, B, n), 'velocity': (n, B, n),
                  'gravity': (n, B), 'friction': (n,)}

        def stack(name: str) -> np.ndarray:
            if not rows:
                return np.zeros((0, *shapes[name]))
            return np.stack([self._arrays[i][name].reshape(shapes[name]) for i in rows])

        def state(field: int) -> np.ndarray:
            return np.array([self._states[i][field] for i in rows]).reshape(len(rows), -1)

        t_ns = np.array([self._states[i][0] for i in rows], dtype=np.int64)
        q, qd = state(1).reshape(-1, n), state(2).reshape(-1, n)
        return Analysis(t_ns, np.arange(len(rows)), q, qd, np.full_like(q, np.nan),
                        state(3).reshape(-1, n), stack('partial'), stack('acceleration'),
                        stack('velocity'), stack('gravity'), stack('friction'),
                        joint_names=tuple(self.model.joint_names),
                        body_names=tuple(self.model.body_names))


def write_report(out: Path, recording: LiveRecording, *, title: str) -> tuple[Path, str]:
    """Write ``out/live_torques.png`` and ``out/summary.txt``; returns the PNG and the text.

    Args:
        out: directory (created).
        recording: the live samples.
        title: first line of the table and the figure's title.
    """
    from .analyze import decomposition_table, plot_joint_torques

    out.mkdir(parents=True, exist_ok=True)
    analysis = recording.analysis()
    span = (analysis.t_ns[-1] - analysis.t_ns[0]) * 1e-9 if len(analysis.t_ns) > 1 else 0.0
    head = f'{title}: {len(analysis.t_ns)} samples over {span:.1f} s'
    text = '\n'.join([head, '', *decomposition_table(recording.model, analysis)]) + '\n'
    png = plot_joint_torques(out / 'live_torques.png', recording.model, analysis,
                             title=f'{title}: joint torque and its parts, live')
    (out / 'summary.txt').write_text(text)
    return png, text
