"""The live decomposition without ROS: one sample's work, and what is counted about it.

The dynamics node (:mod:`plag_ros.ros.nodes.dynamics_node`) reads a ``joint_states``
message into arrays and hands them to :meth:`LiveDecomposition.step`: the plausibility
gate (:class:`~plag_ros.core.estimation.plausibility.PlausibilityGate`), the causal estimator
(:class:`~plag_ros.core.estimation.filters.JointStateEstimator`), the output decimation, the
partial Lagrangian decomposition ([PL] eq. 6, [MPF] eq. 10) and the friction report
(:class:`~plag_ros.core.estimation.friction.RestFriction`). :class:`LiveStats` counts samples,
rejections and timings per diagnostics period and turns them into a report.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from plag_ros.core.common.rejections import RejectionLog
from plag_ros.core.decomposition.settings import DynamicsSettings
from plag_ros.core.dynamics.arrays import ArrayLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator
from plag_ros.core.estimation.friction import STICK, UNRESOLVED, RestFriction
from plag_ros.core.estimation.plausibility import PLAUSIBILITY_REASONS, PlausibilityGate

__all__ = ['REJECTION_REASONS', 'TOTALS', 'DiagnosticsReport', 'LiveDecomposition',
           'LiveStats', 'OutputDecimator', 'SampleWindow', 'period_ns']

REJECTION_REASONS = ('unknown_name', 'missing_name', 'duplicate_name', 'length_mismatch',
                     'nonfinite', 'stamp_not_increasing', 'stamp_too_close', 'stamp_type',
                     'shape', 'missing_velocity', 'nonfinite_output', *PLAUSIBILITY_REASONS)
"""Keys of the rejected-input counters (``rejected.<reason>`` in ``/diagnostics``)."""

TOTALS = ('received', 'published', 'decimated', 'friction_stick', 'friction_unresolved')
"""Counters kept since start as well as per window."""

RATE_TOLERANCE = 0.2
"""Relative deviation of the stamps' rate from ``filter.rate_hz`` that is warned about."""


def period_ns(rate_hz: float) -> int:
    """The period [ns] of ``rate_hz``; 0 for a rate of 0 (no limit)."""
    return int(1e9 / rate_hz) if rate_hz > 0.0 else 0


class SampleWindow:
    """Counters and timings over one diagnostics period (times in ns)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.received = 0
        self.published = 0
        self.decimated = 0
        self.latency_ns: list[int] = []      # input stamp -> publish done (node clock)
        self.friction_stick = 0              # joint samples reported as a stick reaction
        self.friction_unresolved = 0         # ... at rest with no effort of their own
        self.stamps = 0                      # readable samples, and their first/last stamp
        self.first_stamp_ns = 0
        self.last_stamp_ns = 0
        self.processing_ns: list[int] = []   # callback entry -> publish done


class OutputDecimator:
    """Lets at most ``rate_hz`` samples through, on the stamps' time; 0: every sample."""

    def __init__(self, rate_hz: float = 0.0) -> None:
        self.period_ns = period_ns(rate_hz)
        self._next_ns = 0

    def set_rate(self, rate_hz: float) -> None:
        """A new rate from the next sample on (the phase is kept)."""
        self.period_ns = period_ns(rate_hz)

    def due(self, t_ns: int) -> bool:
        """Whether the sample stamped ``t_ns`` is output (call only with ``period_ns``)."""
        if t_ns < self._next_ns:
            return False
        # Keep the phase so the mean rate is rate_hz; resynchronise after a gap.
        self._next_ns += self.period_ns
        if self._next_ns <= t_ns:
            self._next_ns = t_ns + self.period_ns
        return True


@dataclass(frozen=True)
class DiagnosticsReport:
    """One period's report.

    Attributes:
        level: ``'ok'``, ``'warn'`` or ``'error'``.
        message: the status line.
        values: the key/value pairs (rates in Hz, times in ms, counters).
        log_warning: a rate warning to log now (it appeared since the last report), or ''.
    """

    level: Literal['ok', 'warn', 'error']
    message: str
    values: dict[str, float | str]
    log_warning: str


@dataclass(frozen=True)
class _Snapshot:
    window: SampleWindow
    totals: dict[str, int]
    rejected: dict[str, int]
    callback_errors: int
    new_errors: int
    model: dict[str, Any] | None


class LiveStats:
    """What the live decomposition counts: the current window, totals, rejections.

    Args:
        log: where rejection log lines go (at most one per reason every 2 s).
    """

    def __init__(self, log: Callable[[str], object]) -> None:
        self.reject = RejectionLog(REJECTION_REASONS, log,
                                   'joint_states dropped ({reason}, {count} so far): {detail}')
        self.window = SampleWindow()
        self.totals = dict.fromkeys(TOTALS, 0)
        self._reported_errors = 0
        self._rate_warned = False

    def counters(self) -> dict[str, int]:
        """Totals since start, the current window included, and ``rejected.<reason>``."""
        out = {key: value + getattr(self.window, key) for key, value in self.totals.items()}
        out.update({f'rejected.{reason}': n for reason, n in self.reject.counts.items()})
        return out

    def close_window(self, *, callback_errors: int = 0,
                     model: Mapping[str, Any] | None = None) -> _Snapshot:
        """End the current window (quick: hold the node's lock for this only).

        Args:
            callback_errors: input callbacks that raised since start.
            model: the model's values for the report, or None without a model.
        """
        window, self.window = self.window, SampleWindow()
        for key in self.totals:
            self.totals[key] += getattr(window, key)
        new_errors, self._reported_errors = (callback_errors - self._reported_errors,
                                             callback_errors)
        return _Snapshot(window, dict(self.totals), dict(self.reject.counts), callback_errors,
                         new_errors, None if model is None else dict(model))

    def report(self, snapshot: _Snapshot, config: EstimatorConfig) -> DiagnosticsReport:
        """The report of a closed window, against the filter's design rate."""
        window = snapshot.window
        elapsed = max(time.monotonic() - window.start, 1e-9)
        latency = np.array(window.latency_ns, dtype=np.float64) * 1e-6
        processing = np.array(window.processing_ns, dtype=np.float64) * 1e-6

        def pct(x: np.ndarray, p: float) -> float:
            return float(np.percentile(x, p)) if x.size else math.nan

        # The rate the driver really runs at, from the stamps (not from arrival): the
        # low-pass is designed for filter.rate_hz and runs as if samples were that far
        # apart, so its cut-off and delay scale with measured / nominal (core.filters).
        span_ns = window.last_stamp_ns - window.first_stamp_ns
        stamp_rate = (window.stamps - 1) * 1e9 / span_ns \
            if window.stamps > 1 and span_ns > 0 else math.nan
        nominal = config.rate_hz
        off_rate = math.isfinite(stamp_rate) and \
            abs(stamp_rate / nominal - 1.0) > RATE_TOLERANCE
        rate_message = (f'joint_states at {stamp_rate:.0f} Hz by their stamps, filter '
                        f'designed for {nominal:g} Hz (filter.rate_hz): cut-off and delay '
                        f'scale by {stamp_rate / nominal:.2f}; set filter.rate_hz to the '
                        'measured rate') if off_rate else ''
        values: dict[str, float | str] = {
            'stamp_rate_hz': stamp_rate,
            'filter_rate_hz': nominal,
            'effective_cutoff_hz': (config.cutoff_hz * stamp_rate / nominal
                                    if math.isfinite(stamp_rate) else math.nan),
            'input_rate_hz': window.received / elapsed,
            'output_rate_hz': window.published / elapsed,
            'latency_p50_ms': pct(latency, 50), 'latency_p99_ms': pct(latency, 99),
            'latency_max_ms': float(np.max(latency)) if latency.size else math.nan,
            'processing_p50_ms': pct(processing, 50),
            'processing_p99_ms': pct(processing, 99),
            **snapshot.totals,
            'rejected': sum(snapshot.rejected.values()),
            'callback_errors': snapshot.callback_errors,
        }
        values.update({f'rejected.{reason}': n for reason, n in snapshot.rejected.items()})
        if snapshot.model is not None:
            values.update(snapshot.model)
        level: Literal['ok', 'warn', 'error']
        if snapshot.model is None:
            level, message = 'error', 'no robot model'
        elif snapshot.new_errors:
            level, message = 'error', (
                f'joint_states callback raised {snapshot.new_errors} times (see the log)')
        elif window.received == 0:
            level, message = 'warn', 'no joint_states'
        elif off_rate:
            level, message = 'warn', rate_message
        elif window.published + window.decimated < window.received:
            level, message = 'warn', (
                f'{window.received - window.published - window.decimated} of '
                f'{window.received} joint_states not decomposed (warm-up or rejected)')
        else:
            level, message = 'ok', 'decomposing'
        log_warning = rate_message if off_rate and not self._rate_warned else ''
        self._rate_warned = off_rate          # logged on change only
        return DiagnosticsReport(level, message, values, log_warning)


class LiveDecomposition:
    """One model's per-sample pipeline: gate, estimator, decimation, decomposition, friction.

    Args:
        model: the robot.
        settings: the node's settings (filter, plausibility, friction report).
        stats: the counters it adds to (they outlive a model change).
        decimator: the output rate limit (shared across models: its phase is kept).

    Attributes:
        engine: the decomposition engine (float64 numpy, no torch).
        estimator: the current estimator; tables: one sample's arrays, rewritten per sample.
    """

    def __init__(self, model: RobotModel, settings: DynamicsSettings, stats: LiveStats,
                 decimator: OutputDecimator) -> None:
        self.model = model
        self.engine = ArrayLagrangian(model)
        self.gate = PlausibilityGate(model, settings.plausibility)
        self.tables = self.engine.empty_arrays()
        self._encoder_resolution = settings.friction.encoder_resolution
        self._stats = stats
        self._decimator = decimator
        self._pending: EstimatorConfig | None = None
        self._use_filter(settings.filter)

    def _use_filter(self, config: EstimatorConfig) -> None:
        """A fresh estimate for ``config``, and the friction report's rest band, which
        follows the filter."""
        self.config = config
        self.estimator = JointStateEstimator(self.model.n_joints, config)
        self._estimator_counts = self.estimator.rejected
        self.rest_friction = RestFriction(self.model, config,
                                          position_resolution=self._encoder_resolution)
        self._measured = config.velocity_source == 'measured'

    def set_filter(self, config: EstimatorConfig) -> None:
        """Use ``config`` from the next sample on (with a fresh estimate)."""
        self._pending = config

    def velocity_needed(self) -> bool:
        """Whether the next sample needs measured velocities; call once before each
        :meth:`step` (a pending filter change takes effect here)."""
        if self._pending is not None:
            config, self._pending = self._pending, None
            self._use_filter(config)
        return self._measured

    def warm_up(self) -> dict[str, np.ndarray]:
        """Pay the first-call costs (numpy's, the compiled loop's) now, not on the first
        sample (they would back up the input queue); returns a zero sample's tables."""
        zero = np.zeros(self.model.n_joints)
        out = self.engine.decompose_arrays(zero, zero, zero, out=self.tables)
        self.rest_friction.apply(out['friction'], zero, out['torque'], zero)
        return out

    def step(self, t_ns: int, q: np.ndarray, qd_measured: np.ndarray | None,
             effort_of: Callable[[Any], np.ndarray | None], source: Any):
        """One sample: ``(estimate, tables)`` to publish, or None (rejected, warming up or
        decimated; counted).

        Args:
            t_ns: its time [ns]; q, qd_measured: (n,) [rad, rad/s] in model order.
            effort_of: ``effort_of(source)`` gives the (n,) measured effort or None; called
                only for a sample that is output (it costs a copy).
        """
        window = self._stats.window
        if window.stamps == 0:
            window.first_stamp_ns = t_ns
        window.stamps += 1
        window.last_stamp_ns = t_ns
        reject = self._stats.reject
        implausible = self.gate.check(t_ns, q, qd_measured)
        if implausible is not None:
            reject(implausible, f'sample stamped {t_ns} ns is beyond what the arm can do')
            return None
        estimator = self.estimator
        sample = estimator.update(t_ns, q, qd_measured)
        if sample is None:
            counts = estimator.rejected
            if counts != self._estimator_counts:
                for reason, count in counts.items():
                    if count != self._estimator_counts[reason]:
                        reject(reason, f'estimator refused the sample stamped {t_ns} ns')
                self._estimator_counts = counts
            return None
        # Decimated output: the estimator has seen every sample; decompose and publish at
        # most output_rate_hz (stamp time).
        if self._decimator.period_ns and not self._decimator.due(t_ns):
            window.decimated += 1
            return None
        try:
            out = self.engine.decompose_arrays(sample.q, sample.qd, sample.qdd,
                                               out=self.tables)
        except ValueError as err:
            reject('nonfinite_output', str(err))
            return None
        # The torque accumulates every table entry (torque = sum of partial = sum of the
        # acceleration, velocity and gravity parts), so a NaN or inf anywhere shows in it.
        if not math.isfinite(out['torque'].sum() + out['friction'].sum()):
            reject('nonfinite_output', 'decomposition overflowed')
            return None
        # At rest, the stick reaction from the measured effort (or 0, unresolved), not
        # f sign(qd) of the encoder's flicker (plag_ros.core.estimation.friction).
        state = self.rest_friction.apply(out['friction'], sample.qd, out['torque'],
                                         effort_of(source))
        window.friction_stick += int(np.count_nonzero(state == STICK))
        window.friction_unresolved += int(np.count_nonzero(state == UNRESOLVED))
        return sample, out

    def report_values(self, source: str) -> dict[str, Any]:
        """The model's and estimator's values for the diagnostics report."""
        return {'warming_up': self.estimator.warming_up,
                'estimator_resets': self.estimator.resets, 'model_source': source,
                'joints': self.model.n_joints, 'bodies': self.model.n_bodies}
