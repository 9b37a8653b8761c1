"""Joint state estimation: five-point derivative followed by a Butterworth low-pass.

The CRANE-X7 experiment of Gunji, Kusaka and Tanaka 2025 [MPF] (section 3) obtains angular
velocity and acceleration by "calculating the derivatives using a five-point formula" and
then "applying a low-pass filter". This module implements that estimator twice, over the
same stencil and the same filter design, for the two places the package needs it:

* :class:`JointStateEstimator`, causal and streaming, for the live dynamics node: one
  ``joint_states`` sample in, filtered ``q, qd, qdd`` for all joints out.
* :func:`estimate_offline`, zero-phase, for bag analysis: a central stencil and
  forward-backward filtering over a whole recording, so the estimate has no lag.

Pipeline (both paths; ``D5`` is the five-point derivative, ``LP`` the low-pass)::

    q_f   = LP(q)
    qd_f  = LP(D5(q))            or LP(qd_measured) with velocity_source='measured'
    t_f   = LP(t)                the stamps, filtered alike
    qdd_f = D5(qd_f) on t_f      acceleration from the filtered velocity

The stencil weights are the derivatives of the Lagrange basis polynomials through five
nodes: at the newest node live (the one-sided stencil), at the middle one offline (the
central stencil). They are exact for polynomials up to degree four on any strictly
increasing grid and reduce to the textbook weights ``[3, -16, 36, -48, 25] / (12 h)`` and
``[1, -8, 0, 8, -1] / (12 h)`` on an even one; being exact for polynomials, a stencil adds
no delay at low frequency. The velocity's nodes are, by default, the samples' places on
their even grid (each stamp step counted in whole periods of the measured mean period):
weights on jittered stamps amplify the encoder quantisation noise more than they correct
for the jitter (``EstimatorConfig.stencil_nodes``).

The low-pass is a digital Butterworth design (``scipy.signal.butter``, second-order
sections) for the *nominal* rate ``EstimatorConfig.rate_hz``, run on the jittered stamp
grid as if it were even; the cut-off moves with the actual rate, which is fine for jitter
small against the period. What does matter: a filter run that way returns, for a smooth
signal, its value at the *filtered* stamp ``t_f``, not at the stamp (a linear signal
``a + b t`` comes out as exactly ``a + b t_f``). ``t_f`` is a smoothed grid, so ``t - t_f``
carries the stamp jitter; differentiating ``qd_f`` on the raw stamps would turn that jitter
into acceleration noise of order ``qdd * jitter / period``. Both paths therefore filter the
stamps as one more channel and take the acceleration stencil on ``t_f``. Live, the estimate
describes the state at ``t - lag_s`` with ``lag_s = t - t_f``, which is about
:attr:`JointStateEstimator.group_delay_s` (the low-pass group delay at DC) and is reported
with every sample. Offline, ``q`` and ``qd`` are moved from ``t_f`` back onto the stamps by
a first-order step (``q + qd (t - t_f)``, ``qd + qdd (t - t_f)``).

No ROS import here: the live node and the offline bag analyzer call the same code.

Size (over ~600 lines): the causal and the zero-phase estimators share the stencil, the
filter design and the input validation, and the tests hold each against the other: they
stay together so that they change together.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal, NamedTuple

import numpy as np
from numpy.typing import ArrayLike
from scipy import ndimage, signal

from plag_ros.core.common.options import option

__all__ = [
    'FIVE_POINT',
    'REJECT_REASONS',
    'EstimatorConfig',
    'JointStateEstimator',
    'OfflineEstimate',
    'StateEstimate',
    'StreamingSOS',
    'design_lowpass',
    'lowpass_offline',
    'estimate_offline',
    'filter_start_up_rows',
    'gap_free_segments',
    'start_up_width',
    'grid_nodes',
    'lagrange_derivative_weights',
    'lowpass_group_delay_s',
]

STENCIL = 5
"""Number of samples in the five-point stencil."""
FIVE_POINT = np.array([25.0 / 12.0, -4.0, 3.0, -4.0 / 3.0, 0.25])
"""Newest-first weights of the one-sided five-point derivative on an even grid, times the
rate: ``qd_k = rate * sum_j FIVE_POINT[j] q_{k-j}``."""
START_UP_E_FOLDS = 3.0
"""A segment's rows within this many e-folds of the filter's slowest pole of either end
carry the zero-phase filter's start-up (the odd extension past the end is not the motion):
5 % of it is left at the boundary. Measured on the Kinova Gen3 recordings at 1 kHz, a file
end in motion: the nominal model's error is 3-6x the interior's within 50 samples and at the
interior's level beyond 100 (5 Hz cut-off, 192 rows) or 50 (10 Hz, 96 rows)."""

REJECT_REASONS = (
    'shape',
    'nonfinite',
    'stamp_type',
    'stamp_not_increasing',
    'stamp_too_close',
    'missing_velocity',
)
"""Keys of :attr:`JointStateEstimator.rejected`, one per rule a live sample can break."""

VelocitySource = Literal['position', 'measured']
StencilNodes = Literal['grid', 'stamps']


@dataclass(frozen=True)
class EstimatorConfig:
    """Settings of the joint state estimator, validated on construction.

    The defaults, 10 Hz, order 3 and grid nodes, were chosen on the accuracy/delay curve
    of ``bench/bench_estimator_tradeoff.py`` (12-bit encoder, 200 Hz, 0.5 ms stamp jitter,
    brisk 0.4-2.7 Hz motion): against order 2 at the same cut-off, the live acceleration
    RMS error falls from 4.5 to 0.83 rad/s^2 and the velocity error from 0.013 to 0.0097
    rad/s, for 9 ms more delay (22 -> 32 ms), which a display and a recording do not feel;
    zero-phase analysis (no delay) improves from 0.40 to 0.33 rad/s^2. A controller, for
    which delay costs phase, has its own default (order 2, 10 Hz:
    :data:`plag_ros.core.control.config.CONTROL_ESTIMATOR`, chosen on the sampled loop's
    stability margin). Offline, 7 Hz halves the acceleration error again (0.15 rad/s^2) when the
    motion has nothing above about 4 Hz.

    Attributes:
        cutoff_hz: -3 dB frequency of the Butterworth low-pass [Hz], in (0, rate_hz / 2).
        order: Butterworth order, 1 to 8. Group delay grows with order and with 1/cutoff.
            The acceleration is two derivatives deep, so encoder quantisation noise grows
            as f^2 above the cut-off: order 2 (40 dB/decade) only holds it flat, order 3
            makes it fall.

        rate_hz: nominal sample rate of ``joint_states`` [Hz]; the digital filter is
            designed for it.
        gap_periods: a stamp step longer than this many nominal periods resets the live
            estimator (and splits an offline recording into independent segments).
        velocity_source: ``'position'`` differentiates the positions; ``'measured'``
            low-passes the velocity the drives report instead.
        min_spacing_periods: a stamp step shorter than this many nominal periods is
            rejected (live) or refused (offline): two stamps almost on top of each other
            make the derivative weights explode. 0 only requires increasing stamps.
        stencil_nodes: where the velocity stencil puts its five nodes. ``'grid'``: on the
            sample grid, each stamp step counted in whole periods of the measured mean
            period (a dropped sample is a step of two), so stamp jitter is treated as
            noise; ``'stamps'``: on the stamps themselves, exact for polynomials on any
            grid. Lagrange weights on jittered nodes amplify the encoder quantisation
            noise more than the jitter they correct for: with 0.5 ms jitter at 200 Hz the
            grid nodes give 2.4x (stamps exact) to 6x (stamps jittered) smaller velocity
            error (``bench/bench_estimator_tradeoff.py``). Use ``'stamps'`` for truly
            irregular sampling with exact stamps.

    Raises:
        TypeError: a field has the wrong type (e.g. a float order).
        ValueError: a field is out of range; the message names the field and the value.
    """

    cutoff_hz: float = option(10.0, 'low-pass -3 dB frequency [Hz], below rate_hz / 2',
                              low=0.01, high=10000.0)
    order: int = option(3, 'Butterworth order', low=1, high=8)
    rate_hz: float = option(200.0, 'nominal joint_states rate [Hz] the filter is designed for',
                            low=1.0, high=100000.0)
    gap_periods: float = option(5.0, 'a stamp step above this many periods restarts the '
                                'estimator', low=1.01, high=1e6)
    velocity_source: VelocitySource = option(
        'position', "'position' differentiates positions; 'measured' filters joint_states "
        'velocity')
    min_spacing_periods: float = option(0.2, 'stamp steps shorter than this many periods are '
                                        'rejected', low=0.0, high=0.999)
    stencil_nodes: StencilNodes = option(
        'grid', "velocity stencil nodes: 'grid' (the sample grid; stamp jitter taken as "
        "noise) or 'stamps' (exact on any grid, amplifies quantisation noise)")

    def __post_init__(self) -> None:
        def _real(name: str) -> float:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                                 np.integer)):
                raise TypeError(f'EstimatorConfig.{name} must be a number, got {value!r}')
            if not math.isfinite(value):
                raise ValueError(f'EstimatorConfig.{name} must be finite, got {value!r}')
            return float(value)

        rate = _real('rate_hz')
        if rate <= 0.0:
            raise ValueError(f'EstimatorConfig.rate_hz must be > 0 Hz, got {rate!r}')
        cutoff = _real('cutoff_hz')
        if not 0.0 < cutoff < 0.5 * rate:
            raise ValueError(
                f'EstimatorConfig.cutoff_hz must be in (0, rate_hz / 2 = {0.5 * rate:g}) Hz, '
                f'got {cutoff!r}')
        if isinstance(self.order, bool) or not isinstance(self.order, (int, np.integer)):
            raise TypeError(f'EstimatorConfig.order must be an integer, got {self.order!r}')
        if not 1 <= self.order <= 8:
            raise ValueError(f'EstimatorConfig.order must be in 1..8, got {self.order!r}')
        spacing = _real('min_spacing_periods')
        if not 0.0 <= spacing < 1.0:
            raise ValueError(
                f'EstimatorConfig.min_spacing_periods must be in [0, 1), got {spacing!r}')
        gap = _real('gap_periods')
        if gap <= 1.0:
            raise ValueError(
                f'EstimatorConfig.gap_periods must be > 1 period, got {gap!r}')
        if self.velocity_source not in ('position', 'measured'):
            raise ValueError(
                "EstimatorConfig.velocity_source must be 'position' or 'measured', "
                f'got {self.velocity_source!r}')
        if self.stencil_nodes not in ('grid', 'stamps'):
            raise ValueError(
                "EstimatorConfig.stencil_nodes must be 'grid' or 'stamps', "
                f'got {self.stencil_nodes!r}')

    @property
    def period_s(self) -> float:
        """Nominal sample period [s]."""
        return 1.0 / self.rate_hz

    @property
    def min_step_ns(self) -> float:
        """Shortest stamp step taken [ns]: ``min_spacing_periods`` nominal periods."""
        return self.min_spacing_periods * 1e9 / self.rate_hz


class StateEstimate(NamedTuple):
    """One live estimate: filtered joint state, stamped with the newest input stamp.

    Attributes:
        t_ns: stamp of the newest input sample [ns].
        q: (n,) low-passed joint positions [rad or m].
        qd: (n,) low-passed joint velocities [rad/s or m/s].
        qdd: (n,) joint accelerations from the filtered velocity [rad/s^2 or m/s^2].
        lag_s: the three describe the joint state at ``t_ns - lag_s`` [s]: the stamps
            run through the same low-pass. About
            :attr:`JointStateEstimator.group_delay_s`, varying with the stamp jitter, and
            longer for a few time constants after warm-up.
    """

    t_ns: int
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    lag_s: float


class OfflineEstimate(NamedTuple):
    """Zero-phase estimate over a recording; unpacks as ``q, qd, qdd``, each (N, n)."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray


# --- stencil ------------------------------------------------------------------------------


def lagrange_derivative_weights(t: ArrayLike, at: int | ArrayLike) -> np.ndarray:
    """Weights of the derivative of the Lagrange interpolant, evaluated at one node.

    ``sum_j w[..., j] * x[..., j]`` is the time derivative, at node ``t[..., at]``, of the
    polynomial of degree m - 1 through ``(t[..., j], x[..., j])``: exact for polynomials up
    to that degree on any grid of distinct nodes. Barycentric form
    ``w_j = (lambda_j / lambda_at) / (t_at - t_j)`` with
    ``lambda_j = 1 / prod_{k != j} (t_j - t_k)``; the weight of the node itself closes the
    sum to zero, so constants differentiate to exactly zero.

    Args:
        t: (..., m) node times [s], distinct along the last axis. Pass times relative to a
            nearby node (e.g. ``(t_ns - t_ns[at]) * 1e-9``) to keep full precision.
        at: node index where the derivative is taken, 0 <= at < m; an int or an integer
            array broadcasting against ``t[..., 0]``.

    Returns:
        (..., m) weights [1/s].
    """
    # names of their own: numpy < 1.22 types asarray loosely, and t, at are ArrayLike
    nodes: np.ndarray = np.asarray(t, dtype=np.float64)
    idx: np.ndarray = np.asarray(at)
    m = nodes.shape[-1]
    batch = np.broadcast_shapes(nodes.shape[:-1], idx.shape)
    nodes = np.broadcast_to(nodes, (*batch, m))
    idx = np.broadcast_to(idx, batch)
    if not np.issubdtype(idx.dtype, np.integer) or np.any((idx < 0) | (idx >= m)):
        raise ValueError(f'node index `at` must be an integer in 0..{m - 1}')
    idx = idx[..., None]
    # 1 / lambda_j = prod_{k != j} (t_j - t_k), one node at a time (m is small).
    denom = np.ones_like(nodes)
    for j in range(m):
        for k in range(m):
            if k != j:
                denom[..., j] *= nodes[..., j] - nodes[..., k]
    own = np.arange(m) == idx  # (..., m)
    t_at = np.take_along_axis(nodes, idx, axis=-1)
    w = np.take_along_axis(denom, idx, axis=-1) / (denom * np.where(own, 1.0, t_at - nodes))
    np.put_along_axis(w, idx, 0.0, axis=-1)
    np.put_along_axis(w, idx, -w.sum(axis=-1, keepdims=True), axis=-1)
    return w


def _quadratic_derivative_weights(t: np.ndarray) -> np.ndarray:
    """(m, m) weights: row ``i`` gives the time derivative at node ``t[i]`` of the
    least-squares quadratic through the m samples at the (m,) node times ``t`` [s], m >= 3.
    Exact for a quadratic, and far less noisy at the end nodes than the interpolant of
    degree m - 1 (at the oldest of five even nodes the weights' norm is 1.11 / h against
    5.58 / h)."""
    scale = max(float(np.ptp(t)), 1e-300)
    tau = (t - t.mean()) / scale                   # conditioned nodes
    fit = np.linalg.pinv(np.vander(tau, 3, increasing=True))          # (3, m)
    slope = np.stack([np.zeros_like(tau), np.ones_like(tau), 2.0 * tau], axis=1)  # (m, 3)
    return slope @ fit / scale


def _newest_weights(d0: float, d1: float, d2: float, d3: float) -> tuple[float, ...]:
    """One-sided five-point weights at the newest node, in scalar Python for the live path.

    Same numbers as ``lagrange_derivative_weights(-[d0, d1, d2, d3, 0], at=4)``: with the
    nodes written as ages ``d_j = t_newest - t_j > 0``, ``w_j = p_4 / (p_j d_j)`` where
    ``p_j = prod_{k != j} (t_j - t_k)``, and the newest weight closes the sum to zero.

    Args:
        d0, d1, d2, d3: ages of the four older samples, oldest first [s].

    Returns:
        Weights (w0, w1, w2, w3, w4) [1/s], w4 for the newest sample.
    """
    d01 = d1 - d0  # t0 - t1, with t_j = -d_j
    d02 = d2 - d0
    d03 = d3 - d0
    d12 = d2 - d1
    d13 = d3 - d1
    d23 = d3 - d2
    p4 = d0 * d1 * d2 * d3
    w0 = p4 / (d01 * d02 * d03 * -d0 * d0)
    w1 = p4 / (-d01 * d12 * d13 * -d1 * d1)
    w2 = p4 / (-d02 * -d12 * d23 * -d2 * d2)
    w3 = p4 / (-d03 * -d13 * -d23 * -d3 * d3)
    return w0, w1, w2, w3, -(w0 + w1 + w2 + w3)


GRID_WINDOW = 401
"""Steps over which :func:`grid_nodes` measures the local period (2 s at 200 Hz)."""


def grid_nodes(t_ns: np.ndarray) -> np.ndarray:
    """Times of a gap-free recording's samples on their even sample grid [s], first at 0.

    Each sample gets its tick, a whole number of periods from the first (a dropped sample
    is a step of two), by its place against the grid's phase (:func:`_phase_locked_ticks`),
    not step by step as the live estimator has to count (``_SampleGrid``): offline, steps
    of 0.5-1.5 periods (a quarter period of jitter each way) are all counted right, where
    step by step one in 65 was not. The period at each step is then measured over the
    :data:`GRID_WINDOW` steps around it, as their total time over their total count: the
    jitter of the stamps inside the window cancels, only that of its two ends remains
    (divided by about 400 periods), and a rate that changes along the recording is
    followed within a window. Stamp jitter is thereby treated as noise (see
    ``EstimatorConfig.stencil_nodes``); on an even grid with dropped samples the nodes are
    the stamps.

    Args:
        t_ns: (N,) int64 stamps [ns], strictly increasing, N >= 2.

    Returns:
        (N,) float64 node times [s].
    """
    t_ns = np.asarray(t_ns, dtype=np.int64)
    if t_ns.size < 2:
        return np.zeros(t_ns.size)
    step_s = np.diff(t_ns) * 1e-9
    # The period to count in: the mean period over PERIOD_STEPS steps, each step counted
    # first in medians of the steps around it (a dropped sample's double step, and jitter
    # symmetric about the period, leave the median where it is), then against the grid's
    # phase. Where that mean is more than RATE_STEP off the median, the rate itself
    # changed there: the median, which follows the change sharply.
    median = ndimage.median_filter(step_s, size=min(GRID_WINDOW, step_s.size), mode='reflect')
    ticks = np.concatenate([[0.0], np.cumsum(np.maximum(np.round(step_s / median), 1.0))])
    for _ in range(PHASE_PASSES):
        period = _step_periods(t_ns, ticks, PERIOD_STEPS)
        ticks = _phase_locked_ticks(
            t_ns, np.where(np.abs(period - median) > RATE_STEP * median, median, period))
    return np.concatenate([[0.0], np.cumsum(np.diff(ticks) * _step_periods(t_ns, ticks))])


def _step_periods(t_ns: np.ndarray, ticks: np.ndarray, steps: int = GRID_WINDOW
                  ) -> np.ndarray:
    """(N - 1,) period at each step [s]: the total time of the ``steps`` steps around it
    over their total count of ``ticks`` (shifted inside at the ends)."""
    m = t_ns.size - 1
    window = min(steps, m)
    first = np.clip(np.arange(m) - window // 2, 0, m - window)
    span_s = (t_ns[first + window] - t_ns[first]) * 1e-9
    return span_s / (ticks[first + window] - ticks[first])


PHASE_WINDOW = 31
"""Samples over which :func:`_phase_locked_ticks` finds the grid's phase."""

RATE_STEP = 0.05
"""A period this far (relative) from the median step around it is across a change of rate."""

PERIOD_STEPS = 101
"""Steps over which :func:`grid_nodes` measures the period it counts the ticks in."""

PHASE_PASSES = 2
"""Passes of :func:`_phase_locked_ticks`, each in the periods of the last one's ticks."""


def _phase_locked_ticks(t_ns: np.ndarray, periods: np.ndarray) -> np.ndarray:
    """(N,) the samples' ticks, counted against the grid's phase instead of step by step,
    given the (N - 1,) period at each step [s] (the live counter's slow mean).

    Counted step by step, a step between two jittered stamps is off by the difference of
    two jitters, and a jitter above a quarter period at each end rounds some steps to the
    wrong count: every later node is then a period off, and the stencils across that step
    see a sample that is not there. Against the grid, a sample is off by its own jitter
    only, and rounds to its true tick while that stays under half a period: each stamp in
    units of the period, less the grid's phase there (the circular mean of the units'
    fractions over :data:`PHASE_WINDOW` samples, unwrapped along the recording so that a
    drifting or changing period is followed), rounds to its tick; a step is at least one.
    """
    units = np.concatenate([[0.0], np.cumsum(np.diff(t_ns) * 1e-9 / periods)])
    if units.size < PHASE_WINDOW:       # too few for a phase: step by step, each >= 1
        return np.concatenate([[0.0], np.cumsum(np.maximum(np.round(np.diff(units)), 1.0))])
    turns = np.convolve(np.exp(2j * np.pi * units), np.ones(PHASE_WINDOW), mode='same')
    phase = np.unwrap(np.angle(turns)) / (2 * np.pi)
    step = np.diff(np.round(units - phase))
    # Two samples in one slot next to an empty one (two jitters near half a period, or the
    # phase a little off): one step each. Another step under one is one.
    pair = ((step[:-1] == 0.0) & (step[1:] == 2.0)) | ((step[:-1] == 2.0) & (step[1:] == 0.0))
    at = np.flatnonzero(pair)
    at = at[np.diff(np.r_[-2, at]) > 1]     # (pairs that do not overlap)
    step[at] = step[at + 1] = 1.0
    return np.concatenate([[0.0], np.cumsum(np.maximum(step, 1.0))])


class _SampleGrid:
    """The live counterpart of :func:`grid_nodes`: the whole-period tick of each new sample
    and the sample period the nodes are spaced by.

    Steps are counted in whole node spacings from the previous sample's grid point. Two
    averages of the step per period:

    * a slow one spaces the nodes: the plain mean since the start (which begins as
      :attr:`PRIOR_STEPS` steps of the nominal period) until it spans 1 /
      :attr:`SLOW_GAIN` steps, then an average with that gain. Stamp jitter telescopes in
      a mean of steps: after n steps the spacing carries about 1 ms / (n x 5 ms) of 0.5 ms
      jitter at 200 Hz, 0.05 % from 400 steps on. A step more than :attr:`OUTLIER` off a
      whole number of periods (a late sample and its catch-up) does not move it;
    * a fast one (gain 0.2, each step counted on its own) watches for a change of rate.
      When the two stay more than :attr:`RATE_JUMP` apart for :attr:`JUMP_STEPS` steps
      the rate has really changed (a loaded publisher, a reconfigured driver): the slow
      mean starts again from the fast one instead of drifting there.
    """

    SLOW_GAIN = 0.0025
    FAST_GAIN = 0.2
    PRIOR_STEPS = 20
    OUTLIER = 0.5
    RATE_JUMP = 0.1
    JUMP_STEPS = 4
    PHASE_GAIN = 0.1

    def __init__(self, period_s: float) -> None:
        self.nominal_s = period_s
        self.tick = 0
        self.restart()

    def restart(self) -> None:
        """Start again from the nominal period: nothing learnt before a gap crosses it."""
        self.period_s = self._count_s = self.nominal_s   # node spacing, fast average [s]
        self._steps = self.PRIOR_STEPS
        self._apart = 0     # steps in a row with the two averages RATE_JUMP apart
        self._residual_s = 0.0  # time of the last sample after its grid point [s]
        self._last_ns: int | None = None

    def push(self, t_ns: int) -> int:
        """Tick of the sample stamped ``t_ns`` (0 at the restart)."""
        if self._last_ns is None:
            self._last_ns = t_ns
            self.tick = 0
            return 0
        step_s = (t_ns - self._last_ns) * 1e-9
        self._last_ns = t_ns
        # Count from the previous sample's grid point, not from its jittered stamp: then
        # only this stamp's jitter can move the count (a late sample followed by an early
        # one is two steps of one period, not one of two). The residual decays, so that
        # the grid follows the stamps where the spacing is slightly off.
        offset_s = step_s + self._residual_s
        count = max(1, round(offset_s / self.period_s))
        self._residual_s = (1.0 - self.PHASE_GAIN) * (offset_s - count * self.period_s)
        per = step_s / count
        if abs(per - self._count_s) <= self.OUTLIER * self._count_s:
            self._steps += 1
            self.period_s += (per - self.period_s) * max(self.SLOW_GAIN, 1.0 / self._steps)
        # The fast average counts each step on its own: it must see a new rate even while
        # the grid's counts are still those of the old one.
        fast = step_s / max(1, round(step_s / self._count_s))
        self._count_s += self.FAST_GAIN * (fast - self._count_s)
        apart = abs(self._count_s - self.period_s) > self.RATE_JUMP * self.period_s
        self._apart = self._apart + 1 if apart else 0
        if self._apart >= self.JUMP_STEPS:
            self.period_s = self._count_s
            self._steps = 0
            self._apart = 0
            self._residual_s = 0.0
        self.tick += count
        return self.tick


# --- low-pass -----------------------------------------------------------------------------


def design_lowpass(config: EstimatorConfig) -> np.ndarray:
    """Butterworth low-pass of the configuration, for its nominal rate.

    Args:
        config: estimator settings (cutoff_hz, order, rate_hz).

    Returns:
        (n_sections, 6) second-order sections ``[b0, b1, b2, 1, a1, a2]``.
    """
    return signal.butter(config.order, config.cutoff_hz, btype='low', output='sos',
                         fs=config.rate_hz)


def lowpass_group_delay_s(sos: ArrayLike, rate_hz: float) -> float:
    """Group delay at DC of a cascade of second-order sections.

    For ``B(z) / A(z)`` the delay at zero frequency is
    ``sum_k k b_k / sum_k b_k - sum_k k a_k / sum_k a_k`` samples; the cascade adds them.
    This is the lag a slow signal (well below the cut-off) sees; it grows towards the
    cut-off frequency.

    Args:
        sos: (n_sections, 6) second-order sections.
        rate_hz: sample rate the sections run at [Hz].

    Returns:
        Delay [s].
    """
    sos = np.asarray(sos, dtype=np.float64)
    k = np.arange(3.0)
    b, a = sos[:, :3], sos[:, 3:]
    samples = np.sum(b @ k / b.sum(axis=1) - a @ k / a.sum(axis=1))
    return float(samples) / rate_hz


class StreamingSOS:
    """Second-order sections run one sample at a time over many channels.

    Direct form II transposed per section, vectorised across channels, state carried
    between calls; the recursion of ``scipy.signal.sosfilt`` without its per-call
    overhead. Section s maps its input x to its output y with state (z0, z1)::

        y    = b0 x + z0
        z0' = b1 x - a1 y + z1
        z1' = b2 x - a2 y

    and feeds y to section s + 1. This recursion is linear in the stacked vector
    ``[x, z_0, ..., z_S]``, so a step is one small matrix product ``[y, z'] = G [x, z]``
    with G built once from the section coefficients by running the recursion on unit
    vectors. The state variables are the sections' DF2T states (no expansion into one
    high-order polynomial, so the numerical robustness of sections is kept; only the
    summation order differs), at one numpy call per sample instead of about ten per
    section.

    Args:
        sos: (n_sections, 6) second-order sections with a0 = 1.
        n_channels: number of independent signals filtered in parallel.
    """

    def __init__(self, sos: ArrayLike, n_channels: int) -> None:
        sos = np.array(sos, dtype=np.float64, ndmin=2)
        if sos.ndim != 2 or sos.shape[1] != 6:
            raise ValueError(f'sos must have shape (n_sections, 6), got {sos.shape}')
        if not np.allclose(sos[:, 3], 1.0):
            raise ValueError('sos sections must be normalised to a0 = 1')
        self.sos = sos
        self.n_channels = int(n_channels)
        n_state = 2 * len(sos)
        self._g = self._sections(sos, np.eye(1 + n_state))
        self._zi_step = signal.sosfilt_zi(sos).reshape(n_state)  # steady state, input 1
        self._buf = np.zeros((1 + n_state, self.n_channels))  # [x, z], one column each
        self.z = self._buf[1:].reshape(len(sos), 2, self.n_channels)
        """(n_sections, 2, n_channels) DF2T state (a view; writable)."""

    @staticmethod
    def _sections(sos: np.ndarray, xz: np.ndarray) -> np.ndarray:
        """Run the cascade's DF2T recursion on rows ``[x, z]``; return rows ``[y, z']``."""
        out = np.empty_like(xz)
        x = xz[0]
        for s, (b0, b1, b2, _, a1, a2) in enumerate(sos):
            z0, z1 = xz[1 + 2 * s], xz[2 + 2 * s]
            y = b0 * x + z0
            out[1 + 2 * s] = b1 * x - a1 * y + z1
            out[2 + 2 * s] = b2 * x - a2 * y
            x = y
        out[0] = x
        return out

    def reset(self, x0: ArrayLike | None = None) -> None:
        """Clear the state, or set it to the steady state for a constant input ``x0``.

        Args:
            x0: (n_channels,) input held since forever; None for zero state.
        """
        if x0 is None:
            self._buf[1:] = 0.0
        else:
            self._buf[1:] = self._zi_step[:, None] * np.asarray(x0, dtype=np.float64)

    def step(self, x: ArrayLike) -> np.ndarray:
        """Filter one sample of every channel.

        Args:
            x: (n_channels,) input.

        Returns:
            (n_channels,) output (a new array).
        """
        buf = self._buf
        buf[0] = x
        out = self._g @ buf
        buf[1:] = out[1:]
        return out[0]


# --- live ---------------------------------------------------------------------------------


class JointStateEstimator:
    """Causal five-point derivative + low-pass estimator for ``joint_states``.

    Feed one sample at a time with :meth:`update`. Per accepted sample it

    1. takes the one-sided five-point derivative of the positions over the five newest
       samples (nodes on the sample grid or on the stamps, ``config.stencil_nodes``),
    2. low-passes positions and velocities with the same Butterworth sections (velocity
       from the derivative, or the measured one with ``velocity_source='measured'``),
    3. takes the five-point derivative of the filtered velocity as the acceleration.

    All three outputs lag the input by :attr:`group_delay_s` (the low-pass delay at DC;
    the stencil adds none at low frequency). The filter is designed for
    ``config.rate_hz`` and runs on the jittered stamp grid as if it were even.

    Bad samples never raise: they are dropped and counted in :attr:`rejected`. A stamp
    step above ``config.gap_periods`` periods restarts the estimator at the new sample
    (counted in :attr:`resets`): nothing is extrapolated across a gap. Until five samples
    are in since the start or a reset, :attr:`warming_up` is True and :meth:`update`
    returns None. When the fifth arrives, the filter state is started from the
    least-squares quadratic through those five samples (steady state at the oldest, then
    run over all five), so the first estimate carries no start-up step.

    Args:
        n_joints: number of joints n in every sample.
        config: estimator settings.
    """

    def __init__(self, n_joints: int, config: EstimatorConfig | None = None) -> None:
        if isinstance(n_joints, bool) or not isinstance(n_joints, (int, np.integer)) \
                or n_joints < 1:
            raise ValueError(f'n_joints must be a positive integer, got {n_joints!r}')
        config = EstimatorConfig() if config is None else config
        if not isinstance(config, EstimatorConfig):
            raise TypeError(f'config must be an EstimatorConfig, got {type(config).__name__}')
        self.n_joints = n = int(n_joints)
        self.config = config
        self.sos = design_lowpass(config)
        self.group_delay_s = lowpass_group_delay_s(self.sos, config.rate_hz)
        """Lag of q, qd, qdd behind the input stamp for slow motion [s]."""
        self._measured = config.velocity_source == 'measured'
        self._gap_ns = config.gap_periods * 1e9 / config.rate_hz
        self._min_step_ns = config.min_step_ns
        # Filtered channels: [q (n), qd (n), t (1)], t in s since the last (re)start.
        self._lp = StreamingSOS(self.sos, 2 * n + 1)
        self._stamps: list[int] = []
        self._t0 = 0
        # 'grid' stencil nodes: whole-period ticks of the five newest samples.
        self._grid = _SampleGrid(config.period_s) if config.stencil_nodes == 'grid' else None
        self._ticks: list[int] = []
        # Last five samples, oldest first. Columns: filter input [q | qd | t] (2n + 1),
        # then the filtered [qd | t] (n + 1).
        self._hist = np.empty((STENCIL, 3 * n + 2))
        self._rejected = dict.fromkeys(REJECT_REASONS, 0)
        self.resets = 0
        """Number of restarts caused by stamp gaps."""

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected sample counts by reason (a copy; keys :data:`REJECT_REASONS`)."""
        return dict(self._rejected)

    @property
    def warming_up(self) -> bool:
        """True until five samples have been accepted since the start or a reset."""
        return len(self._stamps) < STENCIL

    def reset(self) -> None:
        """Forget all samples and filter state (counters are kept)."""
        self._stamps.clear()

    def update(self, t_ns: int, q: ArrayLike,
               qd_measured: ArrayLike | None = None) -> StateEstimate | None:
        """Add one sample and return the estimate at its stamp.

        Args:
            t_ns: stamp [ns], an integer, strictly increasing.
            q: (n,) joint positions [rad or m].
            qd_measured: (n,) measured joint velocities; used only with
                ``velocity_source='measured'`` (required then).

        Returns:
            The estimate at ``t_ns``, or None while warming up or when the sample is
            rejected (see :attr:`rejected`).
        """
        # 1. Validate; count and drop anything unusable.
        if type(t_ns) is not int:
            if not isinstance(t_ns, np.integer):
                return self._reject('stamp_type')
            t_ns = int(t_ns)
        n = self.n_joints
        try:
            q = np.asarray(q, dtype=np.float64)
        except (TypeError, ValueError):
            return self._reject('shape')
        if q.shape != (n,):
            return self._reject('shape')
        if not math.isfinite(q @ q) and not np.isfinite(q).all():
            return self._reject('nonfinite')
        if self._measured:
            if qd_measured is None:
                return self._reject('missing_velocity')
            try:
                qd_measured = np.asarray(qd_measured, dtype=np.float64)
            except (TypeError, ValueError):
                return self._reject('shape')
            if qd_measured.shape != (n,):
                return self._reject('shape')
            if not math.isfinite(qd_measured @ qd_measured) \
                    and not np.isfinite(qd_measured).all():
                return self._reject('nonfinite')
        stamps = self._stamps
        if stamps:
            step = t_ns - stamps[-1]
            if step <= 0:
                return self._reject('stamp_not_increasing')
            if step < self._min_step_ns:
                return self._reject('stamp_too_close')
            if step > self._gap_ns:
                stamps.clear()
                self.resets += 1
        if self._grid is not None:
            if not stamps:
                self._grid.restart()
                self._ticks.clear()
            elif len(self._ticks) == STENCIL:
                del self._ticks[0]
            self._ticks.append(self._grid.push(t_ns))

        # 2. Push into the five-sample history (oldest first).
        hist = self._hist
        count = len(stamps)
        if count == STENCIL:
            del stamps[0]
            hist[:-1] = hist[1:]
            row = hist[-1]
        else:
            row = hist[count]
            if count == 0:
                self._t0 = t_ns
        stamps.append(t_ns)
        row[:n] = q
        if self._measured:
            row[n:2 * n] = qd_measured
        row[2 * n] = (t_ns - self._t0) * 1e-9
        if count < STENCIL - 1:
            return None
        if count == STENCIL - 1:
            return self._start()

        # 3. Velocity: five-point derivative on the grid or the stamps (or the measured one).
        if not self._measured:
            if self._grid is not None:
                ticks, h = self._ticks, self._grid.period_s
                ages = [(ticks[4] - ticks[a]) * h for a in range(4)]
            else:
                ages = [(t_ns - stamps[a]) * 1e-9 for a in range(4)]
            w = np.array(_newest_weights(*ages))
            np.dot(w, hist[:, :n], out=row[n:2 * n])
        # 4. Low-pass q, qd and t alike.
        y = self._lp.step(row[:2 * n + 1])
        row[2 * n + 1:] = y[n:]
        # 5. Acceleration: five-point derivative of the filtered velocity on the filtered
        # stamps, where the filtered values actually sit on a jittered grid.
        qdd = self._filtered_weights() @ hist[:, 2 * n + 1:3 * n + 1]
        return StateEstimate(t_ns, y[:n], y[n:2 * n], qdd, row[2 * n] - y[2 * n])

    def _filtered_weights(self) -> np.ndarray:
        """Newest-node weights on the filtered stamps (the raw ones if those do not increase)."""
        t0, t1, t2, t3, t4 = self._hist[:, -1].tolist()
        if not t0 < t1 < t2 < t3 < t4:
            t0, t1, t2, t3, t4 = self._hist[:, 2 * self.n_joints].tolist()
        return np.array(_newest_weights(t4 - t0, t4 - t1, t4 - t2, t4 - t3))

    def _start(self) -> StateEstimate:
        """First estimate after warm-up: start the filter from the least-squares quadratic
        through the five samples."""
        n = self.n_joints
        hist = self._hist
        if not self._measured:
            # Derivative at every node of the least-squares quadratic through the five
            # samples: exact for a quadratic, as the filter's start must be, and five times
            # less noisy at the oldest node, where the filter starts, than the quartic
            # through them (an encoder's steps at rest, 200 Hz: 1 rad/s at p99, which a
            # controller's damper turned into a twitch at each resume).
            nodes = hist[:, 2 * n] if self._grid is None else \
                np.asarray(self._ticks, dtype=np.float64) * self._grid.period_s
            hist[:, n:2 * n] = _quadratic_derivative_weights(nodes) @ hist[:, :n]
        # As if every input had held its oldest value forever (time included), then run.
        self._lp.reset(hist[0, :2 * n + 1])
        for row in hist:
            y = self._lp.step(row[:2 * n + 1])
            row[2 * n + 1:] = y[n:]
        return StateEstimate(self._stamps[-1], y[:n], y[n:2 * n],
                             self._filtered_weights() @ hist[:, 2 * n + 1:3 * n + 1],
                             hist[-1, 2 * n] - y[2 * n])

    def _reject(self, reason: str) -> StateEstimate | None:
        """Count a rejected sample; returns None, the 'no estimate' of :meth:`update`."""
        self._rejected[reason] += 1
        return None


# --- offline ------------------------------------------------------------------------------


def estimate_offline(t_ns: ArrayLike, q: ArrayLike, config: EstimatorConfig | None = None,
                     *, qd_measured: ArrayLike | None = None) -> OfflineEstimate:
    """Zero-phase estimate of q, qd, qdd over a whole recording.

    Central five-point stencil on the stamps (one-sided five-point stencils for the first
    and last two samples), then forward-backward filtering with the live path's
    Butterworth sections (``scipy.signal.sosfiltfilt``, odd padding): no lag, and the
    magnitude response is that of the live filter squared (-6 dB at ``cutoff_hz``, twice
    the roll-off). Acceleration is the central derivative of the filtered velocity on the
    filtered stamps; q and qd are then moved onto the stamps (module docstring).
    The filter is designed for ``config.rate_hz``: a warning says so when the median
    stamp step is more than 25 % off the nominal period.

    A stamp step above ``config.gap_periods`` periods splits the recording into segments
    estimated independently, as the live estimator restarts there. Segments shorter than
    five samples cannot be estimated: their rows are NaN and a warning says where.

    Args:
        t_ns: (N,) integer stamps [ns], strictly increasing.
        q: (N, n) joint positions [rad or m].
        config: estimator settings (default ``EstimatorConfig()``).
        qd_measured: (N, n) measured velocities, required with
            ``velocity_source='measured'`` and ignored otherwise.

    Returns:
        OfflineEstimate ``(q, qd, qdd)``, each (N, n) float64.

    Raises:
        ValueError: unusable input: wrong shapes or dtypes, N < 5, non-finite values,
            stamps not strictly increasing or closer than ``min_spacing_periods``; the
            message says which sample and joint.
    """
    config = EstimatorConfig() if config is None else config
    t_ns = np.asarray(t_ns)
    if t_ns.ndim != 1 or not np.issubdtype(t_ns.dtype, np.integer):
        raise ValueError(f't_ns must be a 1-D integer array of nanoseconds, got dtype '
                         f'{t_ns.dtype} and shape {t_ns.shape}')
    t_ns = t_ns.astype(np.int64)
    q = _offline_array('q', q, len(t_ns))
    if config.velocity_source == 'measured':
        if qd_measured is None:
            raise ValueError("velocity_source='measured' needs qd_measured")
        measured = _offline_array('qd_measured', qd_measured, len(t_ns))
        if measured.shape != q.shape:
            raise ValueError(f'qd_measured has shape {measured.shape} but q has '
                             f'shape {q.shape}')
    qd_array = measured if config.velocity_source == 'measured' else None
    n_samples = len(t_ns)
    if n_samples < STENCIL:
        raise ValueError(f'need at least {STENCIL} samples for the five-point stencil, '
                         f'got {n_samples}')
    step = np.diff(t_ns)
    bad = np.flatnonzero(step <= 0)
    if bad.size:
        i = int(bad[0]) + 1
        raise ValueError(f't_ns is not strictly increasing at sample {i}: '
                         f't_ns[{i - 1}] = {t_ns[i - 1]}, t_ns[{i}] = {t_ns[i]}')
    min_step_ns = config.min_step_ns
    bad = np.flatnonzero(step < min_step_ns)
    if bad.size:
        i = int(bad[0]) + 1
        raise ValueError(f't_ns step at sample {i} is {step[i - 1]} ns, below '
                         f'min_spacing_periods = {config.min_spacing_periods} periods '
                         f'({min_step_ns:.0f} ns)')

    median_step_s = float(np.median(step)) * 1e-9
    if abs(median_step_s * config.rate_hz - 1.0) > 0.25:
        warnings.warn(f'estimate_offline: median stamp step {median_step_s * 1e3:.3g} ms is '
                      f'far from the nominal period {config.period_s * 1e3:.3g} ms the '
                      f'low-pass is designed for (rate_hz = {config.rate_hz:g})',
                      stacklevel=2)
    sos = design_lowpass(config)
    out_q = np.full_like(q, np.nan)
    out_qd = np.full_like(q, np.nan)
    out_qdd = np.full_like(q, np.nan)
    for start, stop in gap_free_segments(t_ns, config):
        if stop - start < STENCIL:
            warnings.warn(f'estimate_offline: samples {start}..{stop - 1} lie between stamp '
                          f'gaps and are fewer than {STENCIL}; their estimate is NaN',
                          stacklevel=2)
            continue
        seg = slice(start, stop)
        qd_seg = None if qd_array is None else qd_array[seg]
        out_q[seg], out_qd[seg], out_qdd[seg] = _offline_segment(
            t_ns[seg], q[seg], sos, qd_seg, grid=config.stencil_nodes == 'grid')
    return OfflineEstimate(out_q, out_qd, out_qdd)


def lowpass_offline(t_ns: ArrayLike, x: ArrayLike, config: EstimatorConfig | None = None
                    ) -> np.ndarray:
    """(N, k) ``x`` low-passed exactly as :func:`estimate_offline` low-passes the positions.

    The same Butterworth sections forward and backward, the same padding, the same
    segments between stamp gaps (a segment under five samples is NaN, as its states are).
    For a signal compared sample by sample with the estimated states, such as a measured
    torque against the model's torque at those states: both then carry the same
    filtering, and the filter's attenuation of fast content is not read as a model error.
    A NaN sample is a gap of its own column: the finite runs on either side are filtered
    apart (a run under five samples is NaN), and the other columns are not touched; a
    column of NaN (a joint without a measurement) stays NaN.

    Args:
        t_ns: (N,) integer stamps [ns], strictly increasing; x: (N, k) [any unit].
        config: the estimator's settings (default ``EstimatorConfig()``).
    """
    config = EstimatorConfig() if config is None else config
    t_ns = np.asarray(t_ns, dtype=np.int64)
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or len(x) != len(t_ns):
        raise ValueError(f'x must be (N, k) with N = len(t_ns) = {len(t_ns)}, got {x.shape}')
    sos = design_lowpass(config)
    out = np.full_like(x, np.nan)
    finite = np.isfinite(x).all(axis=0)
    for start, stop in gap_free_segments(t_ns, config):
        if stop - start < STENCIL:
            continue
        out[start:stop, finite] = signal.sosfiltfilt(sos, x[start:stop, finite], axis=0,
                                                     padlen=_padding(sos, stop - start))
        for column in np.flatnonzero(~finite):     # gaps of one column: its finite runs
            good = np.isfinite(x[start:stop, column])
            edges = np.flatnonzero(np.diff(np.r_[0, good.astype(np.int8), 0]))
            for run_start, run_stop in zip(edges[::2] + start, edges[1::2] + start):
                if run_stop - run_start >= STENCIL:
                    out[run_start:run_stop, column] = signal.sosfiltfilt(
                        sos, x[run_start:run_stop, column],
                        padlen=_padding(sos, run_stop - run_start))
    return out


def gap_free_segments(t_ns: np.ndarray, config: EstimatorConfig) -> list[tuple[int, int]]:
    """``(start, stop)`` row ranges of a recording between stamp steps above
    ``config.gap_periods`` periods: what :func:`estimate_offline` estimates apart, as the
    live estimator restarts at such a step.

    Args:
        t_ns: (N,) stamps [ns], increasing; config: the estimator's settings.
    """
    step: np.ndarray = np.diff(np.asarray(t_ns, dtype=np.int64))
    cuts = (np.flatnonzero(step > config.gap_periods * 1e9 / config.rate_hz) + 1).tolist()
    return list(zip([0, *cuts], [*cuts, len(t_ns)]))


def filter_start_up_rows(t_ns: ArrayLike, config: EstimatorConfig | None = None,
                         e_folds: float = START_UP_E_FOLDS) -> np.ndarray:
    """(N,) bool: rows of :func:`estimate_offline` (and :func:`lowpass_offline`) that carry
    the zero-phase filter's start-up at a recording's ends and at every stamp gap.

    There the filter runs into the odd extension of the segment instead of the motion
    that went on: a segment ending mid-motion gets accelerations (and a low-passed torque)
    off by far more than the noise. True for the first and last
    ``settling_samples(sos, e_folds)`` rows of each gap-free segment
    (:data:`START_UP_E_FOLDS`: the slowest pole's start-up decayed to 5 %), and for all
    of a segment that short. A fit or a score leaves these rows out.

    Args:
        t_ns: (N,) integer stamps [ns], increasing; config: the estimator's settings
            (its rate, cut-off, order and gap rule); e_folds: the width, in time constants
            of the slowest pole.
    """
    config = EstimatorConfig() if config is None else config
    t_ns = np.asarray(t_ns, dtype=np.int64)
    width = start_up_width(config, e_folds)
    rows = np.zeros(len(t_ns), dtype=bool)
    for start, stop in gap_free_segments(t_ns, config):
        rows[start:min(start + width, stop)] = True
        rows[max(stop - width, start):stop] = True
    return rows


def start_up_width(config: EstimatorConfig, e_folds: float = START_UP_E_FOLDS) -> int:
    """Rows at each end of a segment that :func:`filter_start_up_rows` marks."""
    return settling_samples(design_lowpass(config), e_folds)


def _offline_array(name: str, x: ArrayLike, n_samples: int) -> np.ndarray:
    """Check an (N, n) float array for the offline path; ValueError says what and where."""
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f'{name} must be an (N, n) array of floats') from err
    if x.ndim != 2 or x.shape[0] != n_samples or x.shape[1] < 1:
        raise ValueError(f'{name} must have shape (N, n) with N = len(t_ns) = {n_samples}, '
                         f'got {x.shape}')
    finite = np.isfinite(x)
    if not finite.all():
        i, j = (int(v[0]) for v in np.nonzero(~finite))
        raise ValueError(f'{name} is not finite at sample {i}, joint {j}: {x[i, j]}')
    return x


def _offline_segment(t_ns: np.ndarray, q: np.ndarray, sos: np.ndarray,
                     qd_measured: np.ndarray | None, *, grid: bool) -> tuple[np.ndarray, ...]:
    """Zero-phase estimate over one gap-free segment of at least five samples; ``grid``:
    velocity stencil on :func:`grid_nodes` instead of the stamps."""
    n_samples, n = q.shape
    # 1. Windows: centred inside, one-sided five-point at the two ends.
    idx = np.arange(n_samples)
    start = np.clip(idx - 2, 0, n_samples - STENCIL)
    window = start[:, None] + np.arange(STENCIL)  # (N, 5) sample indices
    at = idx - start  # node of each window where the derivative is taken
    t = (t_ns - t_ns[0]) * 1e-9  # [s]

    def d5(nodes: np.ndarray, x: np.ndarray) -> np.ndarray:
        w = lagrange_derivative_weights(nodes[window] - nodes[:, None], at)
        out = np.empty_like(x)
        out[:2], out[-2:] = w[:2] @ x[:STENCIL], w[-2:] @ x[-STENCIL:]
        inner = out[2:-2]  # window i - 2 .. i + 2: five shifted slices, no gather
        np.multiply(w[2:-2, :1], x[:-4], out=inner)
        for j in range(1, STENCIL):
            inner += w[2:-2, j:j + 1] * x[j:n_samples - 4 + j]
        return out

    # 2. Velocity on the grid or the stamps, then q, qd and t forward-backward filtered
    # together.
    if qd_measured is None:
        qd_in = d5(grid_nodes(t_ns) if grid else t, q)
    else:
        qd_in = qd_measured
    y = signal.sosfiltfilt(sos, np.concatenate([q, qd_in, t[:, None]], axis=1), axis=0,
                           padlen=_padding(sos, n_samples))
    q_f, qd_f, t_f = y[:, :n], y[:, n:2 * n], y[:, 2 * n]
    # 3. The filtered values sit at the filtered stamps t_f (a smoothed grid, not the
    # jittered one): differentiate there, then move q and qd back onto the stamps.
    if not np.all(np.diff(t_f) > 0.0):
        t_f = t
    qdd = d5(t_f, qd_f)
    shift = (t - t_f)[:, None]
    return q_f + qd_f * shift, qd_f + qdd * shift, qdd


def _padding(sos: np.ndarray, n_samples: int) -> int:
    """Odd-extension length of the zero-phase filter on a segment of ``n_samples``."""
    return min(n_samples - 1, max(3 * (2 * len(sos) + 1), 2 * settling_samples(sos)))


def settling_samples(sos: np.ndarray, e_folds: float = 5.0) -> int:
    """Samples for the slowest pole of the sections to decay by ``e^-e_folds`` (5: the
    zero-phase padding length)."""
    radius = max(float(np.max(np.abs(np.roots(s[3:])))) for s in sos)
    return math.ceil(e_folds / -math.log(radius)) if 0.0 < radius < 1.0 else 1
