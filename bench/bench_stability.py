"""Stable (K, D) region of each CRANE-X7 arm joint, per estimator choice and command path.

For each joint the sampled loop of :mod:`plag_ros.core.control.stability` (the joint's lightest
effective inertia over the workspace, zero-order hold, the estimator's velocity filter
in the damping term, a sample-to-command delay) is stable for (K, D) below a boundary;
this bench maps the boundary as ``K_max(D)`` on a grid of D, for:

* paths: the effort interface (the simulator; no delay, as in one process, and half a
  period, about what the simulator node over DDS adds) and the real arm's position
  interface (servo spring K_s and back-EMF damping from the motor table, one period of
  delay: a command sent to the driver's controller manager acts in its next cycle) at the
  driver's 200 Hz and at 100 Hz, and at 200 Hz with the 3.0 periods the gain check
  assumes (measured through DDS: ``bench/bench_command_delay.py``);
* estimators: order 1-3 at 10 and 15 Hz, velocity from the positions or the measured
  velocity (the shipped one: order 2, 10 Hz, measured).

It prints each configuration's smallest gain margin of the shipped gains
(config/impedance.yaml) over the arm joints, and the check's own cost (the controller
runs it at start and on every parameter change) against one eigenvalue solve.

Writes ``bench/stability_region.png`` (one panel per path and joint, one boundary per
estimator, the shipped gains marked) and ``bench/stability_region.json``.
Run: ``PYTHONPATH=$PWD python bench/bench_stability.py`` (about two minutes).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import yaml

from plag_ros.core.control import stability
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig

HERE = Path(__file__).resolve().parent
PATHS = (('effort', 200.0, 0.0), ('effort', 200.0, 0.5), ('position', 200.0, 1.0),
         ('position', 200.0, 3.0), ('position', 100.0, 1.0))
ESTIMATORS = ((2, 10.0, 'measured'), (3, 15.0, 'measured'), (2, 15.0, 'measured'),
              (1, 10.0, 'measured'), (3, 10.0, 'measured'), (2, 10.0, 'position'),
              (3, 15.0, 'position'))
SHIPPED = (2, 10.0, 'measured')
DAMPING = np.geomspace(1e-4, 10.0, 21)


def shipped_gains() -> tuple[np.ndarray, np.ndarray]:
    text = (HERE.parent / 'config' / 'impedance.yaml').read_text()
    params = yaml.safe_load(text)['/**/plag_impedance']['ros__parameters']
    return np.array(params['stiffness']), np.array(params['damping'])


def label(estimator: tuple) -> str:
    order, cutoff, source = estimator
    return f'order {order}, {cutoff:g} Hz, {source}'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', type=Path, default=HERE / 'stability_region.png')
    parser.add_argument('--json', type=Path, default=HERE / 'stability_region.json')
    args = parser.parse_args()
    start = time.perf_counter()
    model = RobotModel.from_urdf(default_urdf_path())
    names = [n.removeprefix('crane_x7_') for n in model.joint_names if 'finger_b' not in n]
    K, D = shipped_gains()
    arm = 7
    result: dict = {'damping': DAMPING.tolist(), 'joints': names[:arm], 'paths': []}
    print(f'{"path":34s} {"estimator":30s} smallest margin of the shipped gains (joint)')
    for interface, rate, delay in PATHS:
        loops = stability.joint_loops(model, interface, rate, delay_periods=delay)
        entry = {'interface': interface, 'rate_hz': rate, 'delay_periods': delay,
                 'inertia': [loop.inertia for loop in loops[:arm]], 'estimators': []}
        for estimator in ESTIMATORS:
            order, cutoff, source = estimator
            config = EstimatorConfig(cutoff_hz=cutoff, order=order, rate_hz=rate,
                                     velocity_source=source)
            bounds = [[stability.stiffness_bound(loop, d, config) for d in DAMPING]
                      for loop in loops[:arm]]
            margins = [stability.gain_margin(loop, k, d, config, upper=10.0)
                       for loop, k, d in zip(loops[:arm], K, D)]
            worst = int(np.argmin(margins))
            path = f'{interface} {rate:g} Hz, delay {delay:g}'
            print(f'{path:34s} {label(estimator):30s} {margins[worst]:6.2f} '
                  f'({names[worst]})')
            entry['estimators'].append({'order': order, 'cutoff_hz': cutoff,
                                        'velocity_source': source,
                                        'stiffness_bound': bounds, 'margins': margins})
        result['paths'].append(entry)
    # The check's cost, as the controller runs it, against one eigenvalue solve.
    loops = stability.joint_loops(model, 'position', 200.0)
    config = EstimatorConfig(cutoff_hz=10.0, order=2, velocity_source='measured')
    names_all = [n for n in model.joint_names if 'finger_b' not in n]
    check, solve = [], []
    for _ in range(7):
        t0 = time.perf_counter()
        stability.check_gains(loops, names_all, K, D, config)
        check.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        stability.spectral_radius(loops[3], K[3], D[3], config)
        solve.append(time.perf_counter() - t0)
    result['check_s'] = float(np.median(check))
    result['solve_s'] = float(np.median(solve))
    ratio = result['check_s'] / result['solve_s']
    print(f'gain check of 8 joints: median {result["check_s"] * 1e3:.1f} ms; one spectral '
          f'radius {result["solve_s"] * 1e3:.2f} ms (ratio {ratio:.0f})')
    result['run_s'] = time.perf_counter() - start
    plot(result, K, D, args.out)
    args.json.write_text(json.dumps(result) + '\n')
    print(f'run {result["run_s"]:.0f} s; wrote {args.out} and {args.json}')


def plot(result: dict, K: np.ndarray, D: np.ndarray, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    rows, cols = len(result['paths']), len(result['joints'])
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols, 2.4 * rows), squeeze=False)
    damping = np.array(result['damping'])
    for r, entry in enumerate(result['paths']):
        for c, joint in enumerate(result['joints']):
            ax = axes[r, c]
            for e, est in enumerate(entry['estimators']):
                bound = np.array(est['stiffness_bound'][c])
                shipped = (est['order'], est['cutoff_hz'], est['velocity_source']) == SHIPPED
                ok = bound > 0
                ax.loglog(damping[ok], bound[ok], color=f'C{e}',
                          lw=2.2 if shipped else 1.0, ls='-' if shipped else '--',
                          label=label((est['order'], est['cutoff_hz'],
                                       est['velocity_source'])))
            ax.plot([D[c]], [K[c]], 'k*', ms=9)
            ax.plot([2 * D[c]], [2 * K[c]], 'k+', ms=8)
            ax.set_xlim(damping[0], damping[-1])
            ax.set_ylim(1e-3, 1e4)
            if r == 0:
                ax.set_title(joint.replace('_joint', ''), fontsize=8)
            if c == 0:
                ax.set_ylabel(f"{entry['interface']} {entry['rate_hz']:g} Hz\n"
                              f"delay {entry['delay_periods']:g}: K max [N*m/rad]",
                              fontsize=8)
            if r == rows - 1:
                ax.set_xlabel('D [N*m*s/rad]', fontsize=8)
            ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=6, loc='lower left')
    fig.suptitle('Stable below each line (gain margin 1); star: shipped gains, plus: twice '
                 'them (margin 2 needs the plus below the thick line)', fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=70)


if __name__ == '__main__':
    main()
