"""Many bags: ``plag-ros analyze DIR`` on Dask against one bag after another.

The bags: ``--bags`` (20) recordings of ``--minutes`` (10) at 200 Hz, sqlite3 and mcap in
turn, as the driver records them (8 actuated joints, 0.5 ms stamp jitter, 0.1 mrad encoder
noise). The motion comes from the simulator (:class:`plag_ros.core.simulation.simulator.Simulator`,
the CRANE-X7 in position mode following a slow multi-sine command): two simulated
recordings (seeds 0 and 1, cached in ``--cache``, about 2 min of simulation each on this
machine), each bag taking one of them with its own noise and jitter.

Timed, in one process, on the same bags and products:

* sequential: :func:`plag_ros.apps.bag_analysis.analyze_bag` on each bag in turn (the
  single-bag path; the engine's default threads);
* the local Dask cluster with 1 and with 2 worker processes
  (:func:`plag_ros.apps.fleet.analyze_bags`, cluster start included).

Printed: wall time of each, per-bag cost, speed-up over sequential and the parallel
efficiency ``T_sequential / (workers x T_cluster)``.

Run: ``.venv/bin/python bench/bench_fleet.py [--bags 20] [--minutes 10] [--skip bag]``.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from plag_ros.apps.bag_analysis import analyze_bag
from plag_ros.apps.fleet import analyze_bags
from plag_ros.core.decomposition.analysis import AnalysisOptions
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.simulation.simulator import Simulator
from plag_ros.ros.output_bag import write_joint_state_bag

RATE_HZ = 200.0
T0_NS = 1_750_000_000_000_000_000


def simulated(model: RobotModel, minutes: float, seed: int, cache: Path) -> np.ndarray:
    """(count, n_act) measured positions of the simulated arm at 200 Hz, cached."""
    path = cache / f'sim_{seed}_{minutes:g}min.npy'
    if path.exists():
        return np.load(path)
    sim = Simulator(model)
    sim.reset()
    rng = np.random.default_rng(seed)
    act = np.flatnonzero(model.actuated)
    lower = np.maximum(model.joint_lower[act], -2.0)
    upper = np.minimum(model.joint_upper[act], 2.0)
    mid, half = (lower + upper) / 2, (upper - lower) / 2
    freq = rng.uniform(0.05, 0.3, (3, act.size))
    phase = rng.uniform(0, 2 * np.pi, (3, act.size))
    count = int(minutes * 60 * RATE_HZ)
    q = np.empty((count, act.size))
    dt = 1.0 / RATE_HZ
    t0 = time.perf_counter()
    for k in range(count):
        s = k * dt
        shape = sum(np.sin(2 * np.pi * freq[i] * s + phase[i]) for i in range(3)) / 3
        sim.step(dt, position_command=mid + 0.5 * half * shape)
        q[k] = sim.measure().q
    print(f'simulated {minutes:g} min (seed {seed}) in {time.perf_counter() - t0:.0f} s',
          flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    np.save(path, q)
    return q


def write_bags(root: Path, model: RobotModel, count: int, minutes: float,
               cache: Path) -> list[Path]:
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    bases = [simulated(model, minutes, seed, cache) for seed in (0, 1)]
    bags = []
    for i in range(count):
        rng = np.random.default_rng(100 + i)
        q = bases[i % 2] + rng.normal(0.0, 1e-4, bases[i % 2].shape)
        t = T0_NS + np.arange(len(q), dtype=np.int64) * int(1e9 / RATE_HZ)
        t += rng.integers(-500_000, 500_000, len(q))
        storage = 'sqlite3' if i % 2 else 'mcap'
        bags.append(write_joint_state_bag(root / f'trial_{i:02d}', t, names, q,
                                          storage=storage, distro='jazzy'))
    return bags


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--bags', type=int, default=20)
    parser.add_argument('--minutes', type=float, default=10.0)
    parser.add_argument('--skip', action='append', default=[],
                        choices=('bag', 'npz', 'csv', 'plots', 'summary'))
    parser.add_argument('--cache', type=Path, default=Path(tempfile.gettempdir()) /
                        'plag_bench_fleet', help='simulated motions (kept between runs)')
    parser.add_argument('--workers', type=int, nargs='+', default=[1, 2])
    args = parser.parse_args(argv)
    model = RobotModel.from_urdf(default_urdf_path())
    options = AnalysisOptions(progress=False, products=frozenset(
        {'bag', 'npz', 'csv', 'plots', 'summary'} - set(args.skip)))
    work = Path(tempfile.mkdtemp(prefix='plag_bench_fleet_'))
    try:
        t0 = time.perf_counter()
        bags = write_bags(work / 'bags', model, args.bags, args.minutes, args.cache)
        size = sum(f.stat().st_size for b in bags for f in b.rglob('*') if f.is_file())
        print(f'{len(bags)} bags of {args.minutes:g} min at 200 Hz ({size / 1e6:.0f} MB) '
              f'written in {time.perf_counter() - t0:.0f} s; products: '
              f'{", ".join(sorted(options.products))}', flush=True)
        walls: dict[str, float] = {}
        t0 = time.perf_counter()
        for bag in bags:
            analyze_bag(bag, work / 'sequential' / bag.name, model=model, options=options)
        walls['sequential'] = time.perf_counter() - t0
        print(f'sequential: {walls["sequential"]:.1f} s', flush=True)
        for n in args.workers:
            t0 = time.perf_counter()
            outcomes = analyze_bags(bags, work / f'cluster{n}', options, workers=n,
                                    progress=False)
            walls[f'cluster {n}'] = time.perf_counter() - t0
            assert all(o.status == 'analysed' for o in outcomes), outcomes
            print(f'cluster {n}: {walls[f"cluster {n}"]:.1f} s', flush=True)
        base = walls['sequential']
        print(f'\n{"run":<12}{"wall [s]":>10}{"per bag [s]":>13}{"speed-up":>10}'
              f'{"efficiency":>12}')
        for name, wall in walls.items():
            workers = 1 if name == 'sequential' else int(name.split()[1])
            print(f'{name:<12}{wall:>10.1f}{wall / len(bags):>13.2f}{base / wall:>10.2f}'
                  f'{base / (workers * wall):>12.2f}')
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
