"""End-to-end bag analysis: a generated 10-minute, 200 Hz CRANE-X7 recording (120 000 samples).

Writes an mcap bag as the robot's driver records it (8 actuated joints in the driver's own
order, 1 ms stamp jitter, 0.1 mrad encoder noise, an extra topic), then times
``plag_ros.apps.bag_analysis.analyze_bag`` with every product (output bag with all of the dynamics
node's topics at full rate, markers and image at 20 Hz; npz; csv; plots; summary) and
prints the split between reading, estimation, decomposition and writing. Target: under
15 s on a 2-core CPU.

Run: ``.venv/bin/python bench/bench_bag.py [--minutes 10] [--skip npz] [--causal]``.
The bag and the outputs go to a temporary directory (``--keep DIR`` to keep them).
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from plag_ros.apps.bag_analysis import analyze_bag
from plag_ros.core.decomposition.analysis import AnalysisOptions
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros.output_bag import write_joint_state_bag

RATE_HZ = 200.0
T0_NS = 1_750_000_000_000_000_000


def recording(model: RobotModel, minutes: float, seed: int = 0):
    """Driver-order names, stamps [ns] and positions of a slow pick-and-place-like motion."""
    rng = np.random.default_rng(seed)
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    names = [names[i] for i in rng.permutation(len(names))]
    count = int(minutes * 60 * RATE_HZ)
    period_ns = int(1e9 / RATE_HZ)
    t = T0_NS + np.arange(count, dtype=np.int64) * period_ns
    t += rng.integers(-500_000, 500_000, count)             # +-0.5 ms stamp jitter
    s = (t - T0_NS)[:, None] * 1e-9
    k = model.joint_index(names)
    lower = np.maximum(model.joint_lower[k], -2.0)
    upper = np.minimum(model.joint_upper[k], 2.0)
    mid, half = (lower + upper) / 2, (upper - lower) / 2
    # A sum of slow sines per joint inside 60 % of its range.
    freq = rng.uniform(0.05, 0.4, (3, len(names)))
    phase = rng.uniform(0, 2 * np.pi, (3, len(names)))
    shape = sum(np.sin(2 * np.pi * freq[i] * s + phase[i]) for i in range(3)) / 3
    q = mid + 0.6 * half * shape + rng.normal(0.0, 1e-4, (count, len(names)))
    return names, t, q


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--minutes', type=float, default=10.0)
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap',
                        help='storage of the input bag')
    parser.add_argument('--skip', action='append', default=[],
                        choices=('bag', 'npz', 'csv', 'plots', 'summary'))
    parser.add_argument('--causal', action='store_true')
    parser.add_argument('--npz-level', type=int, default=1, help='0: uncompressed npz')
    parser.add_argument('--compression', choices=('lz4', 'zstd', 'none'), default='lz4',
                        help='chunk compression of the output bag')
    parser.add_argument('--threads', type=int, default=0, help='torch threads (0: default)')
    parser.add_argument('--keep', type=Path, help='directory to keep the bag and outputs in')
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = RobotModel.from_urdf(default_urdf_path())
    root = args.keep or Path(tempfile.mkdtemp(prefix='plag_bench_bag_'))
    root.mkdir(parents=True, exist_ok=True)
    try:
        names, t, q = recording(model, args.minutes)
        t0 = time.perf_counter()
        bag = root / 'recording'
        if bag.exists():
            shutil.rmtree(bag)
        write_joint_state_bag(bag, t, names, q, storage=args.storage, distro='jazzy',
                              receive_ns=t + 400_000)
        generate = time.perf_counter() - t0
        size_in = sum(p.stat().st_size for p in bag.iterdir())
        print(f'input: {len(t)} samples ({args.minutes:g} min at {RATE_HZ:g} Hz), '
              f'{args.storage} {size_in / 1e6:.1f} MB, written in {generate:.2f} s '
              f'(not timed below)')
        print(f'torch threads {torch.get_num_threads()}, CPUs available '
              f'{len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}')

        options = AnalysisOptions(
            causal=args.causal, progress=False, npz_level=args.npz_level,
            compression=args.compression,
            products=frozenset({'bag', 'npz', 'csv', 'plots', 'summary'} - set(args.skip)))
        timings: dict[str, float] = {}
        t0, c0 = time.perf_counter(), time.process_time()
        analysis, written, _ = analyze_bag(bag, root / 'out', model=model, force=True,
                                        options=options, timings=timings)
        total, cpu = time.perf_counter() - t0, time.process_time() - c0
        load = os.getloadavg()[0]

        write = timings['write']
        rows = [('read', timings['read']), ('estimate', timings['estimate']),
                ('decompose', timings['decompose']), ('write (all products)', write)]
        print(f'\nanalyze_bag end to end: {total:.2f} s for {len(analysis.t_ns)} samples '
              f'({len(analysis.t_ns) / total:,.0f} samples/s); target < 15 s on 2 cores')
        print(f'  CPU time of the process (all threads) {cpu:.2f} s; 1-min load average at '
              f'the end {load:.2f} (other work on the machine slows the wall clock)')
        for name, value in rows:
            print(f'  {name:<24}{value:8.2f} s  {100 * value / total:5.1f} %')
        print('  writing split (bag and npz in threads, overlapping csv and plots):')
        for key in ('write_bag', 'write_npz', 'write_csv', 'write_plots', 'wait_workers'):
            if key in timings:
                print(f'    {key:<22}{timings[key]:8.2f} s')
        out = root / 'out'
        sizes = {p.name: p.stat().st_size for p in out.iterdir() if p.is_file()}
        if (out / 'bag').is_dir():
            sizes['bag/'] = sum(p.stat().st_size for p in (out / 'bag').iterdir())
        print('  output sizes: ' + ', '.join(f'{k} {v / 1e6:.1f} MB'
                                             for k, v in sorted(sizes.items())))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
