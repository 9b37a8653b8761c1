"""Benchmark of plag_ros.core.estimation.filters: live per-sample cost and offline throughput.

Live: ``JointStateEstimator.update`` for 8 joints, 20k samples of a 200 Hz stream with
0.5 ms stamp jitter and 4096-count encoder quantisation, each call timed alone (p50/p99
in us, warm-up samples excluded). Peer, same run: ``scipy.signal.sosfilt`` called once
per sample with its state carried in ``zi`` over the same 17 channels the estimator
filters (q, qd, t), against this module's ``StreamingSOS.step``.

Offline: ``estimate_offline`` over a 10-minute 200 Hz recording (120000 x 8). Peers, same
run: ``scipy.signal.sosfiltfilt`` and ``scipy.signal.sosfilt`` over the same (120000, 8)
array (the filtering alone, no derivative).

Run: ``.venv/bin/python bench/bench_filters.py`` (``--samples``, ``--repeats`` to change).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
import scipy
from scipy import signal
from timing import median_time_s

from plag_ros.core.estimation.filters import (
    EstimatorConfig,
    JointStateEstimator,
    StreamingSOS,
    design_lowpass,
    estimate_offline,
)

N_JOINTS = 8
RATE_HZ = 200.0
PERIOD_NS = 5_000_000
ENCODER_STEP = 2.0 * np.pi / 4096.0


def make_stream(n_samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Jittered 200 Hz stamps (N,) int64 and quantised multi-sine positions (N, 8)."""
    rng = np.random.default_rng(seed)
    jitter = np.rint(rng.uniform(-0.5e-3, 0.5e-3, n_samples) * 1e9).astype(np.int64)
    t_ns = np.arange(n_samples, dtype=np.int64) * PERIOD_NS + jitter
    t = t_ns * 1e-9
    omega = 2 * np.pi * rng.uniform(0.5, 2.0, (N_JOINTS, 3))
    amp = rng.uniform(0.05, 0.25, (N_JOINTS, 3))
    q = np.sum(amp * np.sin(omega * t[:, None, None]), axis=-1)
    return t_ns, np.round(q / ENCODER_STEP) * ENCODER_STEP


def percentiles_us(durations_ns: list[int]) -> tuple[float, float]:
    d = np.asarray(durations_ns) * 1e-3
    return float(np.percentile(d, 50)), float(np.percentile(d, 99))


def bench_live(n_samples: int, config: EstimatorConfig) -> tuple[float, float]:
    t_ns, q = make_stream(n_samples)
    stamps = [int(v) for v in t_ns]
    rows = list(q)
    est = JointStateEstimator(N_JOINTS, config)
    clock = time.perf_counter_ns
    durations = []
    for stamp, row in zip(stamps, rows):
        start = clock()
        est.update(stamp, row)
        durations.append(clock() - start)
    return percentiles_us(durations[10:])


def bench_step(n_samples: int, sos: np.ndarray, n_channels: int) -> tuple[float, float]:
    x = np.random.default_rng(1).standard_normal((n_samples, n_channels))
    lp = StreamingSOS(sos, n_channels)
    clock = time.perf_counter_ns
    durations = []
    for row in x:
        start = clock()
        lp.step(row)
        durations.append(clock() - start)
    return percentiles_us(durations[10:])


def bench_scipy_step(n_samples: int, sos: np.ndarray, n_channels: int) -> tuple[float, float]:
    x = np.random.default_rng(1).standard_normal((n_samples, 1, n_channels))
    zi = np.zeros((len(sos), 2, n_channels))
    clock = time.perf_counter_ns
    durations = []
    for row in x:
        start = clock()
        _, zi = signal.sosfilt(sos, row, axis=0, zi=zi)
        durations.append(clock() - start)
    return percentiles_us(durations[10:])



def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=20_000, help='live samples per run')
    parser.add_argument('--repeats', type=int, default=5, help='runs per figure (median)')
    args = parser.parse_args()
    config = EstimatorConfig()  # 10 Hz, order 3, 200 Hz
    sos = design_lowpass(config)
    channels = 2 * N_JOINTS + 1
    print(f'plag_ros.core.estimation.filters benchmark: python {platform.python_version()}, numpy '
          f'{np.__version__}, scipy {scipy.__version__}, {os.cpu_count()} CPUs, '
          f'{platform.processor() or platform.machine()}')
    print(f'config: cutoff {config.cutoff_hz} Hz, order {config.order}, rate '
          f'{config.rate_hz} Hz, {N_JOINTS} joints')

    print(f'\nlive, per sample ({args.samples} samples, median over {args.repeats} runs)')
    rows = {
        'JointStateEstimator.update': lambda: bench_live(args.samples, config),
        f'StreamingSOS.step ({channels} ch)': lambda: bench_step(args.samples, sos,
                                                                 channels),
        f'scipy sosfilt per sample ({channels} ch)': lambda: bench_scipy_step(
            args.samples, sos, channels),
    }
    results = {}
    for name, fn in rows.items():
        runs = [fn() for _ in range(args.repeats)]
        results[name] = (statistics.median(r[0] for r in runs),
                         statistics.median(r[1] for r in runs))
        print(f'  {name:40s} p50 {results[name][0]:7.2f} us   p99 {results[name][1]:7.2f} us')
    ours = results[f'StreamingSOS.step ({channels} ch)']
    peer = results[f'scipy sosfilt per sample ({channels} ch)']
    full = results['JointStateEstimator.update']
    print(f'  scipy sosfilt / StreamingSOS.step: p50 x{peer[0] / ours[0]:.1f}, '
          f'p99 x{peer[1] / ours[1]:.1f}')
    print(f'  full update / scipy sosfilt alone: p50 x{full[0] / peer[0]:.2f}')

    n_offline = 120_000
    t_ns, q = make_stream(n_offline, seed=2)
    print(f'\noffline, {n_offline} x {N_JOINTS} (10 min at 200 Hz), median over '
          f'{args.repeats} runs')
    timings = {
        'estimate_offline': median_time_s(lambda: estimate_offline(t_ns, q, config),
                                          args.repeats),
        'scipy sosfiltfilt': median_time_s(lambda: signal.sosfiltfilt(sos, q, axis=0),
                                           args.repeats),
        'scipy sosfilt': median_time_s(lambda: signal.sosfilt(sos, q, axis=0),
                                       args.repeats),
    }
    for name, seconds in timings.items():
        print(f'  {name:40s} {seconds * 1e3:8.2f} ms   {n_offline / seconds / 1e6:7.2f} M '
              f'samples/s')
    ours_s = timings['estimate_offline']
    print(f'  estimate_offline / sosfiltfilt: x{ours_s / timings["scipy sosfiltfilt"]:.2f}   '
          f'estimate_offline / sosfilt: x{ours_s / timings["scipy sosfilt"]:.2f}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
