"""Accuracy against delay of the joint-state estimator (five-point derivative + low-pass).

Input: analytic motion of 3 joints (sums of sines, 0.4-2.7 Hz, peak speed about 2 rad/s,
peak acceleration about 15 rad/s^2: brisk arm motion), sampled at 200 Hz with Gaussian
timing jitter (sigma 0.5 ms, clipped at 2 ms; the stamps are the true sampling instants)
and quantised to 12-bit encoder counts (4096 per revolution), 30 s per run, the first 2 s
(warm-up) left out of the statistics.

For each Butterworth order (1-4) and cut-off (2-60 Hz):

* **live** :class:`plag_ros.core.estimation.filters.JointStateEstimator` (causal). Each
  estimate describes the state at ``t - lag_s`` (reported with it, about the filter's group
  delay at DC); its
  velocity and acceleration RMS errors are measured against the analytic motion *at that
  instant* (the estimator's accuracy as a delayed signal), and the delay is the mean lag.
  Also the error against the motion *at the stamp* (what a controller using it undelayed
  suffers).
* **reference**: a plain five-point + Butterworth written directly with scipy: textbook
  one-sided stencil ``(3, -16, 36, -48, 25) / 12h`` on the *nominal* period, ``sosfilt``
  of that velocity, acceleration = the same stencil on the filtered velocity, delay = the
  group delay at DC; errors measured the same way.
* **offline** :func:`plag_ros.core.estimation.filters.estimate_offline` (zero-phase, no
  delay) for the analysis defaults.

Two stamp scenarios: ``true`` (the readings are taken at the jittered instants and
stamped exactly; the plot) and ``noisy`` (taken on the even grid, the stamps jittered).

Writes ``bench/estimator_tradeoff.png`` (RMS error against delay, one line per order,
points are cut-offs; reference dashed) and ``bench/estimator_tradeoff.json``, and prints a
table and the recommended defaults. Run: ``PYTHONPATH=$PWD python
bench/bench_estimator_tradeoff.py`` (about a minute; ``--seconds`` to change).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import signal

from plag_ros.core.estimation.filters import (
    EstimatorConfig,
    JointStateEstimator,
    estimate_offline,
    lowpass_group_delay_s,
)

RATE_HZ = 200.0
COUNTS = 4096
JITTER_S, JITTER_CLIP_S = 0.5e-3, 2.0e-3
WARMUP_S = 2.0
CUTOFFS = (2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0)
ORDERS = (1, 2, 3, 4)
# per joint: (amplitude [rad], frequency [Hz], phase) components
MOTION = (((0.30, 0.4, 0.0), (0.10, 1.3, 1.0), (0.04, 2.7, 2.0)),
          ((0.20, 0.7, 0.5), (0.12, 1.7, 0.2)),
          ((0.40, 0.5, 1.5), (0.05, 2.3, 0.7), (0.03, 2.7, 0.1)))


def motion(t: np.ndarray, derivative: int = 0) -> np.ndarray:
    """Analytic q, qd or qdd (derivative 0, 1, 2) at times t: (N,) -> (N, 3)."""
    out = np.zeros((t.size, len(MOTION)))
    for j, parts in enumerate(MOTION):
        for amp, f, ph in parts:
            w = 2 * np.pi * f
            out[:, j] += amp * w ** derivative * np.sin(w * t + ph + derivative * np.pi / 2)
    return out


def samples(seconds: float, seed: int = 0, *, stamps: str = 'true'
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampling instants [s], stamps [s] and 12-bit encoder readings (N, 3).

    ``stamps='true'``: the readings are taken at jittered instants and stamped exactly.
    ``stamps='noisy'``: the readings are taken on the even grid and the stamps carry the
    jitter (a stamp taken on arrival, not at the reading).
    """
    rng = np.random.default_rng(seed)
    nominal = np.arange(0.0, seconds, 1.0 / RATE_HZ)
    jitter = np.clip(rng.normal(0.0, JITTER_S, nominal.size), -JITTER_CLIP_S, JITTER_CLIP_S)
    taken = nominal + jitter if stamps == 'true' else nominal
    step = 2 * np.pi / COUNTS
    return taken, nominal + jitter, np.round(motion(taken) / step) * step


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x ** 2)))


def live(t: np.ndarray, stamp: np.ndarray, q: np.ndarray, cfg: EstimatorConfig) -> dict:
    """``t``: true instants of the readings; ``stamp``: what the estimator is given."""
    est = JointStateEstimator(q.shape[1], cfg)
    stamps = np.round(stamp * 1e9).astype(np.int64)
    rows = []
    for k in range(t.size):
        e = est.update(int(stamps[k]), q[k])
        if e is not None:
            rows.append((k, e.qd, e.qdd, e.lag_s))
    keep = [r for r in rows if t[r[0]] >= WARMUP_S]
    k = np.array([r[0] for r in keep])
    qd = np.array([r[1] for r in keep])
    qdd = np.array([r[2] for r in keep])
    lag = np.array([r[3] for r in keep])
    at = t[k] - lag
    return {
        'delay_s': float(lag.mean()),
        'velocity_rms': _rms(qd - motion(at, 1)),
        'acceleration_rms': _rms(qdd - motion(at, 2)),
        'velocity_rms_at_stamp': _rms(qd - motion(t[k], 1)),
        'acceleration_rms_at_stamp': _rms(qdd - motion(t[k], 2)),
    }


def reference(t: np.ndarray, stamp: np.ndarray, q: np.ndarray, cfg: EstimatorConfig
              ) -> dict:
    """Textbook five-point + Butterworth on the nominal period (scipy only)."""
    h = 1.0 / RATE_HZ
    w = np.array([3.0, -16.0, 36.0, -48.0, 25.0]) / (12.0 * h)

    def d5(x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        out[4:] = sum(w[a] * x[a:x.shape[0] - 4 + a] for a in range(5))
        out[:4] = out[4]
        return out

    sos = signal.butter(cfg.order, cfg.cutoff_hz, output='sos', fs=RATE_HZ)
    zi = signal.sosfilt_zi(sos)
    qd_raw = d5(q)
    qd = signal.sosfilt(sos, qd_raw, axis=0, zi=zi[..., None] * qd_raw[0])[0]
    qdd = d5(qd)
    delay = lowpass_group_delay_s(sos, RATE_HZ)
    keep = t >= WARMUP_S
    at = t[keep] - delay
    return {
        'delay_s': delay,
        'velocity_rms': _rms(qd[keep] - motion(at, 1)),
        'acceleration_rms': _rms(qdd[keep] - motion(at, 2)),
        'velocity_rms_at_stamp': _rms(qd[keep] - motion(t[keep], 1)),
        'acceleration_rms_at_stamp': _rms(qdd[keep] - motion(t[keep], 2)),
    }


def offline(t: np.ndarray, stamp: np.ndarray, q: np.ndarray, cfg: EstimatorConfig) -> dict:
    est = estimate_offline(np.round(stamp * 1e9).astype(np.int64), q, cfg)
    keep = (t >= WARMUP_S) & (t <= t[-1] - WARMUP_S)
    return {'delay_s': 0.0,
            'velocity_rms': _rms(est.qd[keep] - motion(t[keep], 1)),
            'acceleration_rms': _rms(est.qdd[keep] - motion(t[keep], 2))}


def plot(path: Path, results: dict) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12.0, 4.4))
    for ax, key, unit in zip(axes, ('velocity_rms', 'acceleration_rms'),
                             ('rad/s', 'rad/s^2'), strict=True):
        for order in ORDERS:
            for kind, style in (('live', 'o-'), ('reference', 'x--')):
                rows = [r for r in results[kind] if r['order'] == order]
                line, = ax.loglog([r['delay_s'] * 1e3 for r in rows], [r[key] for r in rows],
                                  style, ms=4, label=f'{kind} order {order}',
                                  color=f'C{order - 1}', alpha=1.0 if kind == 'live' else 0.6)
                if kind == 'live':
                    for r in rows:
                        if r['cutoff_hz'] in (3.0, 10.0, 30.0):
                            ax.annotate(f"{r['cutoff_hz']:g} Hz", (r['delay_s'] * 1e3, r[key]),
                                        fontsize=7, xytext=(3, 3), textcoords='offset points')
        for r in results['offline']:
            if r['order'] == 2:
                ax.axhline(r[key], color='gray', lw=0.5, ls=':')
        ax.set_xlabel('delay [ms]')
        ax.set_ylabel(f'RMS error [{unit}]')
        ax.set_title(f"{key.split('_')[0]}: error vs delay (200 Hz, 12-bit, 0.5 ms jitter)")
        ax.grid(True, which='both', alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent
    parser.add_argument('--seconds', type=float, default=30.0)
    parser.add_argument('--out', type=Path, default=here / 'estimator_tradeoff.png')
    parser.add_argument('--json', type=Path, default=here / 'estimator_tradeoff.json')
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    scenarios = {}
    for stamps in ('true', 'noisy'):
        t, stamp, q = samples(args.seconds, stamps=stamps)
        res: dict = {'live': [], 'reference': [], 'offline': []}
        for order in ORDERS:
            for cutoff in CUTOFFS:
                cfg = EstimatorConfig(cutoff_hz=cutoff, order=order, rate_hz=RATE_HZ)
                for kind, fn in (('live', live), ('reference', reference),
                                 ('offline', offline)):
                    res[kind].append({'order': order, 'cutoff_hz': cutoff,
                                      **fn(t, stamp, q, cfg)})
        scenarios[stamps] = res
        print(f'stamps {stamps}: errors against the motion at the reported instant '
              '(at the stamp in brackets)')
        print(f"{'order':>5} {'cut':>5} {'delay ms':>8} {'vel rms':>16} {'acc rms':>16} "
              f"{'ref vel':>8} {'ref acc':>8} {'off vel':>8} {'off acc':>8}")
        for a, b, c in zip(res['live'], res['reference'], res['offline'], strict=True):
            print(f"{a['order']:5d} {a['cutoff_hz']:5g} {a['delay_s'] * 1e3:8.2f} "
                  f"{a['velocity_rms']:7.4f} ({a['velocity_rms_at_stamp']:6.3f}) "
                  f"{a['acceleration_rms']:7.3f} ({a['acceleration_rms_at_stamp']:6.2f}) "
                  f"{b['velocity_rms']:8.4f} {b['acceleration_rms']:8.3f} "
                  f"{c['velocity_rms']:8.4f} {c['acceleration_rms']:8.3f}")
    results = scenarios['true']
    default = EstimatorConfig()
    summary = {
        'setup': {'rate_hz': RATE_HZ, 'counts_per_rev': COUNTS, 'jitter_sigma_s': JITTER_S,
                  'jitter_clip_s': JITTER_CLIP_S, 'seconds': args.seconds,
                  'motion_peak_speed': float(np.abs(motion(t, 1)).max()),
                  'motion_peak_acceleration': float(np.abs(motion(t, 2)).max()),
                  'stamps_true': 'readings at jittered instants, stamped exactly (plot)',
                  'stamps_noisy': 'readings on the even grid, stamps jittered'},
        'current_default': {'cutoff_hz': default.cutoff_hz, 'order': default.order},
        'stamps_true': scenarios['true'], 'stamps_noisy': scenarios['noisy'],
        'run_s': time.perf_counter() - t0,
    }
    args.json.write_text(json.dumps(summary) + '\n')
    plot(args.out, results)
    print(f"run {summary['run_s']:.0f} s; wrote {args.out} and {args.json}")
    return 0


if __name__ == '__main__':
    sys.exit(main())
