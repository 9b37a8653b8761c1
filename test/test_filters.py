"""Tests of plag_ros.core.estimation.filters against analytic signals (five-point derivative +
low-pass).

Oracles: closed-form polynomial derivatives and the exact interpolation-error formula for
the stencils, scipy.signal (sosfilt, group_delay) for the low-pass, analytic derivatives of
a CRANE-X7-like multi-sine trajectory for accuracy. float64 throughout, seeded generators,
tolerances stated next to each assertion.
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest
from scipy import interpolate, signal

from plag_ros.core.estimation.filters import (
    GRID_WINDOW,
    REJECT_REASONS,
    EstimatorConfig,
    JointStateEstimator,
    StreamingSOS,
    _newest_weights,
    design_lowpass,
    estimate_offline,
    filter_start_up_rows,
    gap_free_segments,
    grid_nodes,
    lagrange_derivative_weights,
    lowpass_group_delay_s,
    settling_samples,
    start_up_width,
)

RATE_HZ = 200.0
PERIOD_NS = 5_000_000
ENCODER_STEP = 2.0 * math.pi / 4096.0  # Dynamixel: 4096 counts per turn [rad]


def jittered_stamps(n_samples: int, rng: np.random.Generator, jitter_s: float = 0.5e-3,
                    t0_ns: int = 1_700_000_000_000_000_000) -> np.ndarray:
    """Stamps on the 200 Hz grid, each displaced uniformly by up to +-jitter_s; (N,) int64."""
    jitter = np.rint(rng.uniform(-jitter_s, jitter_s, n_samples) * 1e9).astype(np.int64)
    return t0_ns + np.arange(n_samples, dtype=np.int64) * PERIOD_NS + jitter


class MultiSine:
    """CRANE-X7-like smooth joint trajectory: per joint, three sines of 0.5-2 Hz."""

    def __init__(self, n_joints: int, rng: np.random.Generator) -> None:
        self.omega = 2.0 * np.pi * rng.uniform(0.5, 2.0, (n_joints, 3))  # [rad/s]
        self.amp = rng.uniform(0.05, 0.25, (n_joints, 3))  # [rad]
        self.phase = rng.uniform(0.0, 2.0 * np.pi, (n_joints, 3))
        self.offset = rng.uniform(-1.0, 1.0, n_joints)

    def __call__(self, t_s: np.ndarray, derivative: int = 0) -> np.ndarray:
        """(N,) times [s] -> (N, n) d^k q / dt^k."""
        arg = self.omega * np.asarray(t_s)[:, None, None] + self.phase
        shifted = np.sin(arg + 0.5 * np.pi * derivative)  # d/dt sin = sin(. + pi/2)
        out = np.sum(self.amp * self.omega**derivative * shifted, axis=-1)
        return out + self.offset if derivative == 0 else out


def run_live(est: JointStateEstimator, t_ns: np.ndarray, q: np.ndarray,
             qd_measured: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Feed every sample; rows without an estimate are NaN. Returns (N, n) arrays + lag."""
    n_samples, n = q.shape
    out = {k: np.full((n_samples, n), np.nan) for k in ('q', 'qd', 'qdd')}
    out['lag_s'] = np.full(n_samples, np.nan)
    for i in range(n_samples):
        qd_i = None if qd_measured is None else qd_measured[i]
        sample = est.update(int(t_ns[i]), q[i], qd_i)
        if sample is not None:
            assert sample.t_ns == int(t_ns[i])
            out['q'][i], out['qd'][i], out['qdd'][i] = sample.q, sample.qd, sample.qdd
            out['lag_s'][i] = sample.lag_s
    return out


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


# --- stencil -----------------------------------------------------------------------------


def test_stencil_even_grid_is_textbook():
    h = 1.0 / RATE_HZ
    t = h * np.arange(5.0)
    one_sided = lagrange_derivative_weights(t, at=4) * 12.0 * h
    central = lagrange_derivative_weights(t, at=2) * 12.0 * h
    np.testing.assert_allclose(one_sided, [3, -16, 36, -48, 25], rtol=0, atol=1e-10)
    np.testing.assert_allclose(central, [1, -8, 0, 8, -1], rtol=0, atol=1e-10)
    np.testing.assert_allclose(_newest_weights(4 * h, 3 * h, 2 * h, h),
                               np.array([3, -16, 36, -48, 25]) / (12 * h), rtol=1e-13)


@pytest.mark.parametrize('grid', ['even', 'uneven'])
@pytest.mark.parametrize('at', range(5))
def test_stencil_exact_to_degree_four_not_five(grid, at):
    rng = np.random.default_rng(10 + at)
    h = 1.0 / RATE_HZ
    steps = np.full(4, h) if grid == 'even' else h * rng.uniform(0.6, 1.4, 4)
    t = np.concatenate([[0.0], np.cumsum(steps)])
    t -= t[at] - 0.0137  # evaluate off zero so every power contributes
    w = lagrange_derivative_weights(t - t[at], at=at)
    t_at = t[at]
    for degree in range(5):
        approx = w @ t**degree
        exact = degree * t_at ** (degree - 1) if degree else 0.0
        scale = np.abs(w) @ np.abs(t**degree)
        assert abs(approx - exact) <= 1e-12 * scale, (degree, approx, exact)
    # Degree five: the error is exactly prod_{m != at} (t_at - t_m) (5th divided
    # difference of t^5 is 1), which is non-zero on any grid of distinct nodes.
    error = 5.0 * t_at**4 - w @ t**5
    predicted = np.prod(np.delete(t_at - t, at))
    assert abs(predicted) > 1e-11
    np.testing.assert_allclose(error, predicted, rtol=1e-6)


def test_live_scalar_weights_equal_general_form():
    rng = np.random.default_rng(2)
    for _ in range(100):
        ages = np.cumsum(rng.uniform(0.001, 0.009, 4))[::-1]  # oldest first
        general = lagrange_derivative_weights(np.r_[-ages, 0.0], at=4)
        np.testing.assert_allclose(_newest_weights(*ages), general, rtol=1e-12, atol=1e-9)


def test_stencil_batched_matches_looped():
    rng = np.random.default_rng(3)
    t = np.cumsum(rng.uniform(0.5, 1.5, (6, 5)), axis=1)
    at = rng.integers(0, 5, 6)
    batched = lagrange_derivative_weights(t, at)
    for i in range(6):
        np.testing.assert_allclose(batched[i], lagrange_derivative_weights(t[i], int(at[i])),
                                   rtol=1e-14, atol=1e-14)
    with pytest.raises(ValueError, match='at'):
        lagrange_derivative_weights(t[0], 5)


# --- low-pass ----------------------------------------------------------------------------


@pytest.mark.parametrize('order,cutoff_hz', [(1, 12.0), (2, 12.0), (3, 12.0), (4, 12.0),
                                             (6, 40.0), (8, 1.0)])
def test_streaming_sos_equals_scipy_sosfilt(order, cutoff_hz):
    rng = np.random.default_rng(order)
    sos = design_lowpass(EstimatorConfig(cutoff_hz=cutoff_hz, order=order))
    x = rng.standard_normal((2000, 3)) + 2.0
    lp = StreamingSOS(sos, 3)
    y = np.array([lp.step(xi) for xi in x])
    # Same recursion, different summation order: agreement to ~1e-12 of |x| ~ 4,
    # also for order 8 at 1 Hz (poles at radius 0.99).
    np.testing.assert_allclose(y, signal.sosfilt(sos, x, axis=0), rtol=0, atol=5e-12)
    # Steady-state start equals scipy with zi = sosfilt_zi * x0.
    lp.reset(x[0])
    y = np.array([lp.step(xi) for xi in x])
    zi = signal.sosfilt_zi(sos)[:, :, None] * x[0]
    np.testing.assert_allclose(y, signal.sosfilt(sos, x, axis=0, zi=zi)[0], rtol=0,
                               atol=5e-12)
    assert lp.z.shape == (len(sos), 2, 3)


def _steady_amplitude(lp: StreamingSOS, f_hz: float, n_samples: int = 4000) -> float:
    """Amplitude of the streaming filter's response to a unit sine, last half, LSQ fit."""
    t = np.arange(n_samples) / RATE_HZ
    y = np.array([lp.step(np.array([v]))[0] for v in np.sin(2 * np.pi * f_hz * t)])
    tail = slice(n_samples // 2, None)
    basis = np.stack([np.sin(2 * np.pi * f_hz * t[tail]), np.cos(2 * np.pi * f_hz * t[tail])], 1)
    coef, *_ = np.linalg.lstsq(basis, y[tail], rcond=None)
    return float(np.hypot(*coef))


@pytest.mark.parametrize('order,cutoff_hz', [(2, 10.0), (4, 10.0), (3, 25.0)])
def test_lowpass_dc_gain_and_cutoff(order, cutoff_hz):
    sos = design_lowpass(EstimatorConfig(cutoff_hz=cutoff_hz, order=order))
    lp = StreamingSOS(sos, 1)
    # DC gain 1: a constant settles on itself (from zero state) to 1e-12.
    y = [lp.step(np.array([2.5]))[0] for _ in range(2000)]
    assert abs(y[-1] - 2.5) < 1e-12
    # Butterworth through the bilinear transform with pre-warping: the analog magnitude
    # 1 / sqrt(1 + (W / Wc)^(2 order)) at the warped frequencies W = tan(pi f / fs), so
    # -3 dB exactly at the cut-off. The measured steady-state sine amplitude must follow
    # it to 1e-4 (the least-squares fit over 2000 samples), in the pass and stop band.
    def butterworth(f_hz: float) -> float:
        ratio = math.tan(math.pi * f_hz / RATE_HZ) / math.tan(math.pi * cutoff_hz / RATE_HZ)
        return 1.0 / math.sqrt(1.0 + ratio ** (2 * order))

    assert butterworth(cutoff_hz) == pytest.approx(1 / math.sqrt(2), rel=1e-12)
    for f_hz in (0.25 * cutoff_hz, 0.5 * cutoff_hz, cutoff_hz, 2.0 * cutoff_hz):
        lp.reset()
        assert abs(_steady_amplitude(lp, f_hz) - butterworth(f_hz)) < 1e-4, f_hz


@pytest.mark.parametrize('order,cutoff_hz', [(2, 10.0), (4, 5.0), (1, 20.0)])
def test_group_delay_matches_scipy_and_ramp_lag(order, cutoff_hz):
    config = EstimatorConfig(cutoff_hz=cutoff_hz, order=order)
    est = JointStateEstimator(2, config)
    b, a = signal.sos2tf(est.sos)
    _, gd_samples = signal.group_delay((b, a), w=[1e-6], fs=2 * np.pi)
    assert est.group_delay_s == pytest.approx(gd_samples[0] / RATE_HZ, rel=1e-6)
    assert est.group_delay_s == pytest.approx(lowpass_group_delay_s(est.sos, RATE_HZ))
    # A ramp comes out lagging by exactly the group delay once the start-up has decayed.
    t_ns = np.arange(600, dtype=np.int64) * PERIOD_NS
    slope = np.array([0.7, -1.3])
    q = 0.2 + (t_ns * 1e-9)[:, None] * slope
    out = run_live(est, t_ns, q)
    late = slice(400, None)
    expected = 0.2 + (t_ns[late] * 1e-9 - est.group_delay_s)[:, None] * slope
    np.testing.assert_allclose(out['q'][late], expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(out['lag_s'][late], est.group_delay_s, rtol=1e-9)
    np.testing.assert_allclose(out['qd'][4:], np.broadcast_to(slope, (596, 2)), atol=1e-9)
    np.testing.assert_allclose(out['qdd'][4:], 0.0, atol=1e-6)


def test_live_exact_for_quadratic_on_jittered_stamps():
    """q = a t^2 + b t + c: qd comes out as 2 a (t - lag) + b and qdd as 2 a, to rounding.

    The stencil is exact for a quadratic on the real stamps, the filter maps a line in t to
    the same line in the filtered stamps, and the acceleration stencil runs on those: every
    step is exact, from the very first estimate (the filter starts from the polynomial).
    """
    rng = np.random.default_rng(5)
    t_ns = jittered_stamps(400, rng, jitter_s=1e-3)
    t = (t_ns - t_ns[0]) * 1e-9
    a, b, c = np.array([0.8, -2.0, 0.1]), np.array([0.3, 0.5, -1.0]), np.array([0, 1, 2.0])
    q = a * t[:, None] ** 2 + b * t[:, None] + c
    est = JointStateEstimator(3, EstimatorConfig(order=4, stencil_nodes='stamps'))
    out = run_live(est, t_ns, q)
    assert np.isnan(out['qd'][:4]).all()
    t_est = t - out['lag_s']
    np.testing.assert_allclose(out['qd'][4:], (2 * a * t_est[:, None] + b)[4:], rtol=0,
                               atol=1e-9)
    np.testing.assert_allclose(out['qdd'][4:], np.broadcast_to(2 * a, (396, 3)), rtol=0,
                               atol=1e-6)
    # The estimate's time tracks the stamp jitter: lag_s is not a constant.
    assert np.ptp(out['lag_s'][100:]) > 1e-4


@pytest.mark.parametrize('n_samples', [5, 6, 50, 400])
def test_offline_exact_for_quadratic_on_jittered_stamps(n_samples):
    """q = a t^2 + b t + c: offline qd = 2 a t + b and qdd = 2 a at every sample, ends too.

    Exact stencil on the stamps, filter exact on lines in (t, t_f), acceleration on t_f,
    and the first-order move from t_f back to t is exact for a linear qd.
    """
    rng = np.random.default_rng(n_samples)
    t_ns = jittered_stamps(n_samples, rng, jitter_s=1e-3)
    t = (t_ns - t_ns[0]) * 1e-9
    a, b, c = np.array([0.8, -2.0]), np.array([0.3, 0.5]), np.array([0.0, 1.0])
    q = a * t[:, None] ** 2 + b * t[:, None] + c
    stamps = EstimatorConfig(stencil_nodes='stamps')
    out = estimate_offline(t_ns, q, stamps)
    np.testing.assert_allclose(out.qd, 2 * a * t[:, None] + b, rtol=0, atol=1e-9)
    np.testing.assert_allclose(out.qdd, np.broadcast_to(2 * a, q.shape), rtol=0, atol=1e-6)
    # A line comes back exactly, q included.
    out = estimate_offline(t_ns, b * t[:, None] + c, stamps)
    np.testing.assert_allclose(out.q, b * t[:, None] + c, rtol=0, atol=1e-12)


def _grid_with_drops(n_samples: int, period_ns: int) -> np.ndarray:
    """Even stamps at ``period_ns`` with every 7th sample dropped and every 31st step
    three periods long; (N,) int64."""
    ticks = [0]
    for i in range(1, n_samples):
        ticks.append(ticks[-1] + (3 if i % 31 == 0 else 2 if i % 7 == 0 else 1))
    return 1_700_000_000_000_000_000 + np.asarray(ticks, dtype=np.int64) * period_ns


@pytest.mark.parametrize('rate_hz', [200.0, 190.0, 333.0])
def test_grid_nodes_exact_for_quadratic_with_dropped_samples(rate_hz):
    """Grid nodes (the default) are exact for a quadratic whenever the samples lie on an
    even grid, dropped samples and a rate other than the nominal 200 Hz included: each
    step is a whole number of periods and the measured period is the true one."""
    period_ns = round(1e9 / rate_hz)
    t_ns = _grid_with_drops(300, period_ns)
    t = (t_ns - t_ns[0]) * 1e-9
    a, b, c = np.array([0.8, -2.0]), np.array([0.3, 0.5]), np.array([0.0, 1.0])
    q = a * t[:, None] ** 2 + b * t[:, None] + c
    config = EstimatorConfig(order=3)
    assert config.stencil_nodes == 'grid'
    np.testing.assert_allclose(grid_nodes(t_ns), t, rtol=0, atol=1e-12)
    if abs(rate_hz / config.rate_hz - 1.0) > 0.25:
        with pytest.warns(UserWarning, match='far from the nominal period'):
            out = estimate_offline(t_ns, q, config)
    else:
        out = estimate_offline(t_ns, q, config)
    np.testing.assert_allclose(out.qd, 2 * a * t[:, None] + b, rtol=0, atol=1e-8)
    np.testing.assert_allclose(out.qdd, np.broadcast_to(2 * a, q.shape), rtol=0, atol=1e-5)
    live = run_live(JointStateEstimator(2, config), t_ns, q)
    t_est = t - live['lag_s']
    expected = (2 * a * t_est[:, None] + b)[4:]
    if rate_hz == config.rate_hz:
        np.testing.assert_allclose(live['qd'][4:], expected, rtol=0, atol=1e-8)
    else:
        # Live, the node spacing starts as 20 nominal periods and moves to the measured
        # one as their mean (at once when the two differ by over 10 %).
        mismatch = abs(rate_hz / config.rate_hz - 1.0)   # nominal / true period - 1
        error = np.abs(live['qd'][4:] - expected) / np.abs(expected)
        assert error.max() < 1.2 * mismatch and error[-50:].max() < 0.1 * mismatch


def test_grid_nodes_take_stamp_jitter_as_noise():
    """Readings on an even grid with jittered stamps (a stamp taken on arrival): a ramp's
    slope comes out exactly on grid nodes, and off by the jitter on the stamps."""
    rng = np.random.default_rng(12)
    t_ns = jittered_stamps(600, rng, jitter_s=1e-3)
    t_grid = np.arange(600) * PERIOD_NS * 1e-9
    b = np.array([0.7, -1.3])
    q = b * t_grid[:, None] + 0.2
    grid = run_live(JointStateEstimator(2, EstimatorConfig()), t_ns, q)
    # Exact but for the node spacing, a mean of steps in which the stamp jitter
    # telescopes: 1 ms / ((20 + n) x 5 ms) after n steps, 0.2 % from 100 steps on; bounded
    # at 2 % from the start and 0.2 % after 2 s.
    error = np.abs(grid['qd'][4:] / b - 1.0)
    assert error.max() < 0.02 and error[400:].max() < 2e-3
    offline = estimate_offline(t_ns, q).qd      # one period for the whole recording
    np.testing.assert_allclose(offline, np.broadcast_to(b, (600, 2)), rtol=2e-3)
    stamps = run_live(JointStateEstimator(2, EstimatorConfig(stencil_nodes='stamps')),
                      t_ns, q)
    assert np.abs(stamps['qd'][4:] - b).max() > 0.01


def test_grid_nodes_follow_a_rate_change():
    """A publisher that slows from 200 to 150 Hz (a loaded machine): the node spacing
    follows within a few samples live, and offline outside the measuring window."""
    t_ns = np.concatenate([np.arange(1000) * PERIOD_NS,
                           1000 * PERIOD_NS + np.arange(1, 1001) * (4 * PERIOD_NS // 3)])
    t = t_ns * 1e-9
    b = np.array([0.9, -0.4])
    q = b * t[:, None]
    live = run_live(JointStateEstimator(2, EstimatorConfig()), t_ns, q)
    error = np.abs(live['qd'] / b - 1.0)
    assert np.nanmax(error[:1000]) < 1e-9          # before: exact
    assert np.nanmax(error[1000:]) < 0.25          # the switch: 21 % at the most
    assert np.nanmax(error[1040:]) < 1e-3          # the filter's memory of it fading
    assert np.nanmax(error[1150:]) < 1e-9          # after: exact again
    step = np.diff(grid_nodes(t_ns))
    # Steps either side of the change: half a window, and after it the few steps the
    # counting takes to see the new rate (a window over miscounted steps is off).
    window = GRID_WINDOW // 2 + 1
    assert np.allclose(step[:999 - window], PERIOD_NS * 1e-9, rtol=1e-12)
    assert np.allclose(step[999 + window + 8:], 4 * PERIOD_NS // 3 * 1e-9, rtol=1e-12)


def test_grid_nodes_of_short_segments_step_forward():
    """Fewer samples than the phase window (a segment between two gaps): each step counts
    at least one period, as live, so no two nodes coincide (the five-point weights divide
    by node differences). A 1 ms step at 200 Hz is one period; one sample is one node at 0."""
    nodes = grid_nodes(np.array([0, 1, 10, 15, 20]) * 1_000_000)
    np.testing.assert_allclose(np.diff(nodes) / np.diff(nodes).min(), [1, 2, 1, 1])
    assert grid_nodes(np.array([7])).tolist() == [0.0]
    np.testing.assert_allclose(grid_nodes(np.array([0, PERIOD_NS])), [0.0, PERIOD_NS * 1e-9])


def _a_kilohertz_recording(rng: np.random.Generator, n_samples: int, jitter: float,
                           dropped: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Readings of a 1 kHz arm on its even grid (12-bit encoders), each stamp displaced
    uniformly by up to ``jitter`` periods (a PC stamping on arrival), ``dropped`` of the
    samples lost; (stamps [ns], grid times [s], kept sample indices)."""
    kept = np.flatnonzero(rng.random(n_samples) >= dropped)
    grid_s = kept * 1e-3
    stamps = np.rint((grid_s + rng.uniform(-jitter, jitter, kept.size) * 1e-3) * 1e9)
    return stamps.astype(np.int64), grid_s, kept


@pytest.mark.parametrize('dropped', [0.0, 0.05], ids=['every_sample', 'five_percent_lost'])
def test_grid_nodes_count_steps_of_half_to_one_and_a_half_periods(dropped):
    """Stamps jittered by a quarter period each way, so that steps range over 0.5-1.5
    periods (issue 53: a torque-sensor arm's PC stamps), with and without lost samples.
    Counted step by step, a step between a late stamp and an early one rounds to the wrong
    count (309 of 20 000 steps here before), and every node after it is a period off;
    counted against the grid's phase, every step is its true count."""
    rng = np.random.default_rng(21)
    t_ns, grid_s, kept = _a_kilohertz_recording(rng, 20_000, 0.25, dropped)
    counts = np.diff(grid_nodes(t_ns)) / 1e-3
    np.testing.assert_allclose(counts, np.diff(kept), rtol=2e-3)


def test_offline_acceleration_on_jittered_stamps_is_the_even_grids():
    """The same 1 kHz recording (0.3-2 Hz motion, 12-bit encoders), stamped on its even
    grid and stamped with a quarter period of jitter each way: the offline acceleration's
    error against the motion's own (at the stamps) is within 10 % of the even grid's
    (issue 53's bound; 1.05x with this seed, 7x before the grid's phase was used)."""
    rng = np.random.default_rng(22)
    traj = MultiSine(3, rng)
    t_ns, grid_s, _ = _a_kilohertz_recording(rng, 20_000, 0.25, 0.0)
    even_ns = np.rint(grid_s * 1e9).astype(np.int64)
    q = np.round(traj(grid_s) / ENCODER_STEP) * ENCODER_STEP
    config = EstimatorConfig(rate_hz=1000.0)
    inner = slice(300, -300)                   # away from the zero-phase filter's ends
    errors = {}
    for name, stamps in (('even', even_ns), ('jittered', t_ns)):
        out = estimate_offline(stamps, q, config)     # (referred to the stamps)
        errors[name] = rms((out.qdd - traj(stamps * 1e-9, 2))[inner])
    print(f"\nqdd RMS error: even grid {errors['even']:.4f}, jittered stamps "
          f"{errors['jittered']:.4f} rad/s^2")
    assert errors['jittered'] < 1.1 * errors['even']


@pytest.mark.parametrize('scenario', ['exact stamps', 'jittered stamps'])
def test_grid_nodes_halve_quantised_velocity_error(scenario):
    """12-bit encoder at 200 Hz, 0.5 ms jitter: grid nodes beat stamp nodes on velocity
    even when the stamps are the true reading instants (Lagrange weights on jittered nodes
    amplify the quantisation noise). This seed: 0.0100 against 0.0144 rad/s with exact
    stamps, 0.0114 against 0.0249 with jittered ones (the bench's Gaussian jitter: 0.41x
    and 0.17x)."""
    rng = np.random.default_rng(13)
    traj = MultiSine(3, rng)
    t_ns = jittered_stamps(4000, rng)
    t_read = (t_ns - t_ns[0]) * 1e-9
    if scenario == 'jittered stamps':
        t_read = np.arange(4000) * PERIOD_NS * 1e-9
    q = np.round(traj(t_read) / ENCODER_STEP) * ENCODER_STEP
    errors = {}
    for nodes in ('grid', 'stamps'):
        live = run_live(JointStateEstimator(3, EstimatorConfig(stencil_nodes=nodes)), t_ns, q)
        t_est = (t_ns - t_ns[0]) * 1e-9 - live['lag_s']
        errors[nodes] = rms((live['qd'] - traj(t_est, 1))[200:])
    print(f"\n{scenario}: velocity RMS grid {errors['grid']:.4f}, stamps "
          f"{errors['stamps']:.4f} rad/s")
    assert errors['grid'] < (0.8 if scenario == 'exact stamps' else 0.6) * errors['stamps']


def test_live_and_offline_agree_once_lag_is_removed():
    rng = np.random.default_rng(6)
    traj = MultiSine(4, rng)
    n_samples = 3000
    t_ns = np.arange(n_samples, dtype=np.int64) * PERIOD_NS
    t = t_ns * 1e-9
    q = traj(t)
    config = EstimatorConfig(cutoff_hz=10.0, order=2)
    live = run_live(JointStateEstimator(4, config), t_ns, q)
    offline = estimate_offline(t_ns, q, config)
    sl = slice(200, n_samples - 200)
    t_eval = (t - live['lag_s'])[sl]
    for name, part in zip(('q', 'qd', 'qdd'), offline):
        shifted = interpolate.CubicSpline(t, part)(t_eval)
        err = rms(live[name][sl] - shifted) / rms(part[sl] - part[sl].mean(axis=0))
        # Residual: the live filter's phase is not perfectly linear up to 2 Hz and its
        # magnitude is not the squared one of the zero-phase pass. A measured bound (no
        # closed form for this residual): about 1.5x what this seed gives.
        print(f'live vs offline {name}: relative RMS difference {err:.2e}')
        assert err < 3e-3, name


# --- accuracy on a realistic signal ------------------------------------------------------


def test_accuracy_on_crane_x7_like_trajectory():
    """200 Hz, 0.5 ms stamp jitter, 4096-count encoders, 7 joints, 0.5-2 Hz motion."""
    rng = np.random.default_rng(7)
    traj = MultiSine(7, rng)
    n_samples = 4000
    t_ns = jittered_stamps(n_samples, rng)
    t = (t_ns - t_ns[0]) * 1e-9
    q_meas = np.round(traj(t) / ENCODER_STEP) * ENCODER_STEP
    qd_true, qdd_true = traj(t, 1), traj(t, 2)
    config = EstimatorConfig()  # 10 Hz, order 3
    est = JointStateEstimator(7, config)
    live = run_live(est, t_ns, q_meas)
    offline = estimate_offline(t_ns, q_meas, config)
    # Plain causal finite differences on the true stamps, the baseline.
    dt = np.diff(t)[:, None]
    qd_fd = np.vstack([np.full((1, 7), np.nan), np.diff(q_meas, axis=0) / dt])
    qdd_fd = np.vstack([np.full((1, 7), np.nan), np.diff(qd_fd, axis=0) / dt])

    sl = slice(100, n_samples - 100)  # away from warm-up and the offline ends
    t_live = t - live['lag_s']
    e = {
        'fd qd': rms((qd_fd - qd_true)[sl]),
        'fd qdd': rms((qdd_fd - qdd_true)[sl]),
        'live qd': rms((live['qd'] - qd_true)[sl]),
        'live qdd': rms((live['qdd'] - qdd_true)[sl]),
        'live qd (lag removed)': rms((live['qd'] - traj(t_live, 1))[sl]),
        'live qdd (lag removed)': rms((live['qdd'] - traj(t_live, 2))[sl]),
        'live q (lag removed)': rms((live['q'] - traj(t_live))[sl]),
        'offline q': rms((offline.q - traj(t))[sl]),
        'offline qd': rms((offline.qd - qd_true)[sl]),
        'offline qdd': rms((offline.qdd - qdd_true)[sl]),
    }
    print(f'\nsignal RMS: qd {rms(qd_true):.3f} rad/s, qdd {rms(qdd_true):.2f} rad/s^2; '
          f'group delay {est.group_delay_s * 1e3:.2f} ms')
    for name, value in e.items():
        print(f'RMS error {name:24s} {value:.4g}')
    # Measured bounds, ~1.5x the values this seed gives: quantised, jittered input has no
    # closed-form error. The comparisons with finite differences below are the claims.
    # (The defaults, order 3 and grid nodes: offline qd 0.0063, qdd 0.31; live with the lag
    # removed qd 0.0091, qdd 0.77.)
    assert e['offline qd'] < 0.0095 and e['offline qdd'] < 0.48
    assert e['offline q'] < 3e-4
    assert e['live qd (lag removed)'] < 0.014 and e['live qdd (lag removed)'] < 1.2
    assert e['live q (lag removed)'] < 5e-4
    assert e['live qd'] < 0.72 and e['live qdd'] < 7.8  # dominated by the 32 ms lag
    # The filter beats plain finite differences: offline on both, live on qdd outright
    # and on qd once its lag is accounted for (the lag is its price).
    assert e['offline qd'] < 0.2 * e['fd qd'] and e['offline qdd'] < 0.02 * e['fd qdd']
    assert e['live qdd'] < 0.2 * e['fd qdd']
    assert e['live qd (lag removed)'] < 0.25 * e['fd qd']
    # Offline q stays on the stamps (no lag).
    np.testing.assert_allclose(offline.q[sl], traj(t)[sl], atol=3e-3)


def test_measured_velocity_source():
    """Dynamixel velocity quantised to ~0.024 rad/s, low-passed instead of differentiated."""
    rng = np.random.default_rng(8)
    traj = MultiSine(3, rng)
    n_samples = 3000
    t_ns = jittered_stamps(n_samples, rng)
    t = (t_ns - t_ns[0]) * 1e-9
    q_meas = np.round(traj(t) / ENCODER_STEP) * ENCODER_STEP
    step = 0.229 * 2 * np.pi / 60  # 0.229 rpm per count
    qd_meas = np.round(traj(t, 1) / step) * step
    config = EstimatorConfig(velocity_source='measured')
    est = JointStateEstimator(3, config)
    live = run_live(est, t_ns, q_meas, qd_meas)
    offline = estimate_offline(t_ns, q_meas, config, qd_measured=qd_meas)
    sl = slice(100, n_samples - 100)
    t_live = t - live['lag_s']
    err_live = rms((live['qd'] - traj(t_live, 1))[sl])
    err_live_qdd = rms((live['qdd'] - traj(t_live, 2))[sl])
    err_off = rms((offline.qd - traj(t, 1))[sl])
    err_off_qdd = rms((offline.qdd - traj(t, 2))[sl])
    print(f'\nmeasured velocity: live qd {err_live:.4g} qdd {err_live_qdd:.4g} (lag removed); '
          f'offline qd {err_off:.4g} qdd {err_off_qdd:.4g}')
    # Measured bounds (~1.5x the values this seed gives; no closed form for quantised input).
    assert err_live < 0.006 and err_live_qdd < 0.25
    assert err_off < 0.004 and err_off_qdd < 0.15
    # Without qd_measured the sample is rejected, and offline refuses.
    assert est.update(int(t_ns[-1]) + PERIOD_NS, q_meas[-1]) is None
    assert est.rejected['missing_velocity'] == 1
    with pytest.raises(ValueError, match='qd_measured'):
        estimate_offline(t_ns, q_meas, config)


# --- live: bad input ---------------------------------------------------------------------


def _stream(n_samples: int = 40, n: int = 3, seed: int = 9):
    rng = np.random.default_rng(seed)
    t_ns = jittered_stamps(n_samples, rng)
    q = MultiSine(n, rng)((t_ns - t_ns[0]) * 1e-9)
    return t_ns, q


def _assert_same(a, b):
    assert a.t_ns == b.t_ns
    for name in ('q', 'qd', 'qdd'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def _check_rejected_leaves_no_trace(bad_t_ns, bad_q, reason, at=20):
    """Insert one bad sample after `at` good ones; outputs equal a clean run's."""
    t_ns, q = _stream()
    clean = JointStateEstimator(3)
    dirty = JointStateEstimator(3)
    for i in range(len(t_ns)):
        if i == at:
            bad_stamp = bad_t_ns(t_ns, i) if callable(bad_t_ns) else bad_t_ns
            assert dirty.update(bad_stamp, bad_q(q, i)) is None
        want, got = clean.update(int(t_ns[i]), q[i]), dirty.update(int(t_ns[i]), q[i])
        if want is None:
            assert got is None
        else:
            _assert_same(want, got)
    expected = dict.fromkeys(REJECT_REASONS, 0)
    expected[reason] = 1
    assert dirty.rejected == expected
    assert dirty.resets == 0


def test_nan_sample_rejected():
    def bad_q(q, i):
        x = q[i].copy()
        x[1] = np.nan
        return x
    _check_rejected_leaves_no_trace(lambda t, i: int(t[i - 1] + t[i]) // 2, bad_q, 'nonfinite')


def test_inf_sample_rejected():
    def bad_q(q, i):
        x = q[i].copy()
        x[2] = -np.inf
        return x
    _check_rejected_leaves_no_trace(lambda t, i: int(t[i - 1] + t[i]) // 2, bad_q, 'nonfinite')


def test_repeated_stamp_rejected():
    _check_rejected_leaves_no_trace(lambda t, i: int(t[i - 1]), lambda q, i: q[i],
                                    'stamp_not_increasing')


def test_backwards_stamp_rejected():
    _check_rejected_leaves_no_trace(lambda t, i: int(t[i - 1]) - 1000, lambda q, i: q[i],
                                    'stamp_not_increasing')


def test_stamp_too_close_rejected():
    # 0.1 period after the previous stamp: below min_spacing_periods = 0.2.
    _check_rejected_leaves_no_trace(lambda t, i: int(t[i - 1]) + PERIOD_NS // 10,
                                    lambda q, i: q[i], 'stamp_too_close')


def test_wrong_length_rejected():
    _check_rejected_leaves_no_trace(lambda t, i: int(t[i - 1] + t[i]) // 2,
                                    lambda q, i: q[i][:2], 'shape')


def test_non_numeric_or_2d_sample_rejected():
    est = JointStateEstimator(3)
    assert est.update(0, [[1.0, 2.0, 3.0]]) is None
    assert est.update(1, ['a', 'b', 'c']) is None
    assert est.update(2, None) is None
    assert est.rejected['shape'] == 3
    assert est.warming_up


def test_float_stamp_rejected_numpy_int_accepted():
    est = JointStateEstimator(2)
    assert est.update(1.5e9, [0.0, 0.0]) is None
    assert est.rejected['stamp_type'] == 1
    for i in range(5):
        est.update(np.int64(i * PERIOD_NS), [0.0, 1.0])
    assert not est.warming_up


def test_warm_up_then_exact_constant():
    est = JointStateEstimator(2)
    for i in range(4):
        assert est.warming_up
        assert est.update(i * PERIOD_NS, [0.5, -0.25]) is None
    sample = est.update(4 * PERIOD_NS, [0.5, -0.25])
    assert not est.warming_up
    # Filter started from the steady state: a constant is returned exactly at once.
    np.testing.assert_allclose(sample.q, [0.5, -0.25], rtol=0, atol=1e-15)
    np.testing.assert_allclose(sample.qd, 0.0, atol=1e-12)
    np.testing.assert_allclose(sample.qdd, 0.0, atol=1e-9)
    assert sample.t_ns == 4 * PERIOD_NS
    assert sample.q.dtype == np.float64 and sample.q.shape == (2,)


def test_the_first_estimate_of_an_encoder_at_rest_is_quiet():
    """An encoder at rest toggling its last step (4096 counts a turn, 200 Hz, stamps
    jittered 0.2 ms), velocity from the positions: the first estimate after warm-up (a
    start, or a restart after a gap: where a controller resumes) is the filter's start from
    the five samples. From the least-squares quadratic through them its |qd| is 0.23 rad/s
    at p99 over 1000 starts, against 1.0 from the quartic through them (a controller's
    damper made that a twitch at each resume); the steady state's is 0.033."""
    rng = np.random.default_rng(0)
    count = 2 * np.pi / 4096
    config = EstimatorConfig(cutoff_hz=10.0, order=2, rate_hz=200.0, velocity_source='position')
    first = []
    for _ in range(1000):
        est, base = JointStateEstimator(1, config), rng.uniform(0, count)
        for k in range(5):
            q = np.round((base + rng.normal(0, 0.3 * count)) / count) * count
            sample = est.update(int(k * PERIOD_NS + rng.normal(0, 2e5)), [q])
        first.append(abs(sample.qd[0]))
    p99 = float(np.percentile(first, 99))
    print(f'first |qd| at rest: p99 {p99:.3f} rad/s')
    assert p99 < 0.3


def test_gap_resets_and_nothing_crosses_it():
    t_ns, q = _stream(60)
    gap_ns = 6 * PERIOD_NS  # > gap_periods = 5
    t_after = t_ns[30:] + gap_ns
    est = JointStateEstimator(3)
    for i in range(30):
        est.update(int(t_ns[i]), q[i])
    fresh = JointStateEstimator(3)
    for k, (ti, qi) in enumerate(zip(t_after, q[30:])):
        got, want = est.update(int(ti), qi), fresh.update(int(ti), qi)
        if k < 4:
            assert got is None and want is None and est.warming_up
        else:
            _assert_same(got, want)
    assert est.resets == 1
    assert sum(est.rejected.values()) == 0


def test_reset_forgets_stamps_keeps_counters():
    t_ns, q = _stream()
    est = JointStateEstimator(3)
    for i in range(10):
        est.update(int(t_ns[i]), q[i])
    est.update(int(t_ns[9]), q[9])  # repeated stamp
    est.reset()
    assert est.warming_up
    assert est.rejected['stamp_not_increasing'] == 1 and est.resets == 0
    # After reset an earlier stamp is accepted (e.g. a bag played again).
    assert est.update(int(t_ns[0]), q[0]) is None
    assert sum(est.rejected.values()) == 1


def test_returned_arrays_are_not_reused():
    t_ns, q = _stream()
    est = JointStateEstimator(3)
    samples = [est.update(int(ti), qi) for ti, qi in zip(t_ns, q)]
    kept = samples[10]
    copy = (kept.q.copy(), kept.qd.copy(), kept.qdd.copy())
    for ti, qi in zip(t_ns + 40 * PERIOD_NS, q):
        est.update(int(ti), qi)
    for a, b in zip((kept.q, kept.qd, kept.qdd), copy):
        np.testing.assert_array_equal(a, b)


def test_live_never_raises_on_garbage():
    rng = np.random.default_rng(11)
    est = JointStateEstimator(4, EstimatorConfig(velocity_source='measured'))
    t = 0
    choices = [None, 'x', [1.0], np.full(4, np.nan), np.full((2, 4), 1.0), object(),
               np.array([1, 2, 3, np.inf]), rng.standard_normal(4), rng.standard_normal(4)]
    for _ in range(2000):
        t += int(rng.integers(-3, 12)) * PERIOD_NS // 2
        stamp = t if rng.random() > 0.05 else float(t)
        est.update(stamp, choices[rng.integers(len(choices))],
                   choices[rng.integers(len(choices))])
    counts = est.rejected
    assert set(counts) == set(REJECT_REASONS)
    assert counts['shape'] > 0 and counts['nonfinite'] > 0 and est.resets > 0


# --- offline: bad input ------------------------------------------------------------------


def test_offline_unsorted_stamps():
    t_ns, q = _stream(20)
    t_ns[7], t_ns[8] = t_ns[8], t_ns[7]
    with pytest.raises(ValueError, match='not strictly increasing at sample 8'):
        estimate_offline(t_ns, q)
    t_ns, q = _stream(20)
    t_ns[5] = t_ns[4]
    with pytest.raises(ValueError, match='not strictly increasing at sample 5'):
        estimate_offline(t_ns, q)


def test_offline_too_short():
    t_ns, q = _stream(4)
    with pytest.raises(ValueError, match='at least 5 samples'):
        estimate_offline(t_ns, q)


def test_offline_nan():
    t_ns, q = _stream(20)
    q[12, 2] = np.nan
    with pytest.raises(ValueError, match='q is not finite at sample 12, joint 2'):
        estimate_offline(t_ns, q)


def test_offline_shape_mismatch():
    t_ns, q = _stream(20)
    with pytest.raises(ValueError, match=r'shape \(N, n\) with N = len\(t_ns\) = 19'):
        estimate_offline(t_ns[:19], q)
    with pytest.raises(ValueError, match='shape'):
        estimate_offline(t_ns, q[:, 0])
    with pytest.raises(ValueError, match='integer array of nanoseconds'):
        estimate_offline(t_ns * 1e-9, q)
    config = EstimatorConfig(velocity_source='measured')
    with pytest.raises(ValueError, match='qd_measured'):
        estimate_offline(t_ns, q, config, qd_measured=q[:, :2])


def test_offline_stamps_too_close():
    t_ns, q = _stream(20)
    t_ns[10] = t_ns[9] + 1000
    with pytest.raises(ValueError, match='sample 10 is 1000 ns'):
        estimate_offline(t_ns, q)


def test_offline_splits_at_gaps():
    t_ns, q = _stream(60)
    t_ns[30:] += 10 * PERIOD_NS
    t_ns[57:] += 10 * PERIOD_NS  # leaves a 3-sample island at 57..59
    with pytest.warns(UserWarning, match='samples 57..59'):
        whole = estimate_offline(t_ns, q)
    first = estimate_offline(t_ns[:30], q[:30])
    second = estimate_offline(t_ns[30:57], q[30:57])
    for w, a, b in zip(whole, first, second):
        np.testing.assert_array_equal(w[:30], a)
        np.testing.assert_array_equal(w[30:57], b)
        assert np.isnan(w[57:]).all()


def test_offline_warns_on_off_nominal_rate():
    t_ns, q = _stream(40)
    with pytest.warns(UserWarning, match='nominal period'):
        estimate_offline(t_ns, q, EstimatorConfig(rate_hz=100.0, gap_periods=10.0))
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        estimate_offline(t_ns, q)


# --- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize('kwargs,field', [
    ({'cutoff_hz': 0.0}, 'cutoff_hz'),
    ({'cutoff_hz': -5.0}, 'cutoff_hz'),
    ({'cutoff_hz': 100.0}, 'cutoff_hz'),  # at Nyquist for 200 Hz
    ({'cutoff_hz': float('nan')}, 'cutoff_hz'),
    ({'order': 0}, 'order'),
    ({'order': 9}, 'order'),
    ({'rate_hz': 0.0}, 'rate_hz'),
    ({'rate_hz': float('inf')}, 'rate_hz'),
    ({'rate_hz': 15.0}, 'cutoff_hz'),  # default 10 Hz cut-off above the new Nyquist
    ({'gap_periods': 1.0}, 'gap_periods'),
    ({'velocity_source': 'encoder'}, 'velocity_source'),
    ({'min_spacing_periods': -0.1}, 'min_spacing_periods'),
    ({'min_spacing_periods': 1.0}, 'min_spacing_periods'),
])
def test_invalid_config_value(kwargs, field):
    with pytest.raises(ValueError, match=f'EstimatorConfig.{field}'):
        EstimatorConfig(**kwargs)


@pytest.mark.parametrize('kwargs,field', [
    ({'order': 2.0}, 'order'),
    ({'order': True}, 'order'),
    ({'cutoff_hz': '10'}, 'cutoff_hz'),
])
def test_invalid_config_type(kwargs, field):
    with pytest.raises(TypeError, match=f'EstimatorConfig.{field}'):
        EstimatorConfig(**kwargs)


def test_config_frozen_and_estimator_arguments():
    config = EstimatorConfig(cutoff_hz=8.0, order=4, rate_hz=500.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.order = 2
    assert config.period_s == pytest.approx(2e-3)
    with pytest.raises(ValueError, match='n_joints'):
        JointStateEstimator(0, config)
    with pytest.raises(TypeError, match='EstimatorConfig'):
        JointStateEstimator(3, {'cutoff_hz': 8.0})


def test_the_start_up_rows_are_each_segments_ends_as_the_estimate_cuts_them():
    """A step above gap_periods (5) splits the recording where estimate_offline splits it;
    each segment's first and last width rows are marked, and all of a short segment. The
    width is the slowest pole's decay to e^-3, counted independently here from the pole."""
    config = EstimatorConfig()
    pole = max(abs(np.roots(section[3:])).max() for section in design_lowpass(config))
    width = math.ceil(3.0 / -math.log(pole))
    assert start_up_width(config) == width == settling_samples(design_lowpass(config), 3.0)
    ticks = np.r_[np.arange(100), 103.5 + np.arange(100),       # 4.5 periods: one segment
                  208 + np.arange(100),                          # 5.5 periods: a cut
                  313 + np.arange(width + 3)]                    # a segment under 2 widths
    t_ns = np.rint(ticks * PERIOD_NS).astype(np.int64)
    assert gap_free_segments(t_ns, config) == [(0, 200), (200, 300), (300, 303 + width)]

    rows = filter_start_up_rows(t_ns, config)

    expected = np.zeros(len(t_ns), dtype=bool)
    for start, stop in ((0, 200), (200, 300)):
        expected[start:start + width] = expected[stop - width:stop] = True
    expected[300:] = True
    np.testing.assert_array_equal(rows, expected)
