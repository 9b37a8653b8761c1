"""Engine speed on the CRANE-X7, with Pinocchio timed in the same process on the same states.

Prints, for the three paths (closed form ``decompose`` as the compiled float64 loop, the same
closed form as torch array ops, and ``decompose_autograd``):
  * single-sample latency p50/p99 [us];
  * batched throughput for batch 1, 100 and 10 000 (autograd: 1, 100, 1000) [us per
    sample, median of repeats];
and for Pinocchio:
  * ``pin.rnea`` per sample (joint torques only: what the engine's ``torque`` replaces);
  * the nearest equivalent of the per-body split: for every body, a single-body model's
    ``crba`` (acceleration parts), ``computeRNEADerivatives`` (velocity parts, dtau/dqd) and
    ``computeGeneralizedGravity`` (gravity part), i.e. what a user would run to get the same
    table out of Pinocchio;
and the ratios (ours / Pinocchio). Run: ``.venv/bin/python bench/bench_dynamics.py``.
It also times ``decompose_arrays`` (numpy in, numpy out: the nodes' call) on one thread, into
fresh arrays and into reused ones (``out=``), single sample and batch 10 000.
Also, for the batch of 10 000 written into reused arrays:
  * Pinocchio's best one-call equivalent (``PathForest`` in test/pin_oracle.py: every body on
    its own copy of its root path, one ``computeRNEADerivatives`` per sample), the peer the
    goal "at most 0.1x" is measured against;
  * the memory floor of the output (13 104 bytes per sample): a copy into reused memory and
    into freshly allocated memory, and ``decompose`` as a multiple of each.
Options: ``--quick`` for fewer repeats, ``--threads N`` for torch intra-op threads,
``--no-autograd`` to skip the slow reference path, ``--threads-sweep`` for one thread
against two and the automatic choice over models and batch sizes (``--load``: with one core
kept busy by another process), ``--sweep`` for the
scaling sweep over serial chains (n = 2 ... 30) with fitted exponents, ours and
Pinocchio's (the timing code of bench/bench_cost_curve.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'test'))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from pin_oracle import PathForest, PinOracle  # noqa: E402
from robots import serial_chain  # noqa: E402
from timing import median_time_s  # noqa: E402

from plag_ros.core.dynamics import kernel  # noqa: E402
from plag_ros.core.dynamics.engine import PartialLagrangian  # noqa: E402
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path  # noqa: E402


def percentiles(samples_us):
    a = np.asarray(samples_us)
    return np.percentile(a, 50), np.percentile(a, 99)


def time_single(fn, states, repeats):
    out = []
    for r in range(repeats):
        q, qd, qdd = (x[r % len(x)] for x in states)
        t0 = time.perf_counter_ns()
        fn(q, qd, qdd)
        out.append((time.perf_counter_ns() - t0) / 1e3)
    return out


def time_batch(fn, states, batch, repeats, tensors=True):
    q, qd, qdd = (torch.as_tensor(x[:batch]) if tensors else x[:batch] for x in states)
    fn(q, qd, qdd)  # warm-up
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(q, qd, qdd)
        runs.append((time.perf_counter() - t0) / batch * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--quick', action='store_true')
    parser.add_argument('--threads', type=int, default=None)
    parser.add_argument('--no-autograd', action='store_true',
                        help='skip the autograd path (about a minute of the run)')
    parser.add_argument('--threads-sweep', action='store_true',
                        help='only: one thread, two and the automatic choice, per model and '
                             'batch size')
    parser.add_argument('--sweep', action='store_true',
                        help='only: serial chains n = 2 ... 30, time per sample and exponents')
    parser.add_argument('--load', action='store_true',
                        help='with --threads-sweep: one core kept busy by another process')
    args = parser.parse_args()
    if args.threads_sweep:
        threads_sweep(args.quick, args.load)
        return
    if args.sweep:
        scaling_sweep(args.quick)
        return
    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    xml = default_urdf_path().read_text()
    model = RobotModel.from_urdf(xml)
    # --threads N: the compiled loop's threads too (default: the automatic choice)
    engine = PartialLagrangian(model, threads=args.threads)
    oracle = PinOracle(xml, model)
    rng = np.random.default_rng(0)
    N = 10_000
    states = (rng.uniform(-1.5, 1.5, (N, 9)), rng.uniform(-3, 3, (N, 9)),
              rng.uniform(-10, 10, (N, 9)))
    reps = 300 if args.quick else 2000
    print(f'CRANE-X7 (n=9, B=9), float64, torch {torch.__version__} '
          f'({torch.get_num_threads()} threads), pinocchio {pin.__version__}')

    # ---- Pinocchio peers on the same states
    pin_q = np.array([oracle.config(q) for q in states[0][:reps]])
    pin_v = states[1][:reps][:, oracle.ours_of_pin]
    pin_a = states[2][:reps][:, oracle.ours_of_pin]
    data = oracle.pin.createData()
    rnea_us = []
    for r in range(reps):
        t0 = time.perf_counter_ns()
        pin.rnea(oracle.pin, data, pin_q[r], pin_v[r], pin_a[r])
        rnea_us.append((time.perf_counter_ns() - t0) / 1e3)
    singles = [oracle.single_body(i) for i in range(model.n_bodies)]
    datas = [m.createData() for m in singles]
    split_us = []
    for r in range(min(reps, 500)):
        t0 = time.perf_counter_ns()
        for m, d in zip(singles, datas):
            pin.crba(m, d, pin_q[r])
            pin.computeRNEADerivatives(m, d, pin_q[r], pin_v[r], pin_a[r])
            pin.computeGeneralizedGravity(m, d, pin_q[r])
        split_us.append((time.perf_counter_ns() - t0) / 1e3)
    rnea50, rnea99 = percentiles(rnea_us)
    split50, split99 = percentiles(split_us)
    print(f'pinocchio rnea               per sample: p50 {rnea50:8.2f} us  p99 {rnea99:8.2f} us')
    print(f'pinocchio per-body split     per sample: p50 {split50:8.2f} us  p99 {split99:8.2f} us'
          '  (9 x crba + computeRNEADerivatives + computeGeneralizedGravity)')

    # ---- ours: single-sample latency
    torch_form = PartialLagrangian(model, compiled=False)
    engine.decompose(*(x[:200] for x in states))   # load the compiled loop (cached on disk)
    paths = {'compiled': engine.decompose, 'torch form': torch_form.decompose,
             'autograd': engine.decompose_autograd}
    if args.no_autograd:
        del paths['autograd']
    for name, fn in paths.items():
        n_rep = max(reps // 10, 30) if name == 'autograd' else reps
        time_single(fn, states, 20)
        p50, p99 = percentiles(time_single(fn, states, n_rep))
        print(f'{name:<12} single sample latency: p50 {p50:8.1f} us  p99 {p99:8.1f} us   '
              f'p50 ratio vs pin split {p50 / split50:6.2f}x, vs rnea {p50 / rnea50:6.1f}x')

    # ---- ours: batched throughput
    for name, fn in paths.items():
        # The autograd path costs ~10 ms per sample batched: 1000 samples say as much as
        # 10 000 would, in a tenth of the time.
        for batch in ((1, 100, 1_000) if name == 'autograd' else (1, 100, 10_000)):
            repeats = 5 if batch == 10_000 else (50 if batch == 100 else 300)
            if name == 'autograd':
                repeats = 2 if batch == 1_000 else max(repeats // 5, 2)
            per = time_batch(fn, states, batch, repeats)
            print(f'{name:<12} batch {batch:>6}: {per:9.2f} us/sample '
                  f'({1e6 / per:10.0f} samples/s)  ratio vs pin split {per / split50:6.3f}x, '
                  f'vs pin rnea {per / rnea50:6.2f}x')

    # ---- ours: numpy arrays in, arrays out (the nodes' call), fresh and into reused buffers
    torch.set_num_threads(1)
    single_out = engine.empty_arrays()
    arrays = {'decompose_arrays': engine.decompose_arrays,
              'decompose_arrays out=': lambda q, qd, qdd: engine.decompose_arrays(
                  q, qd, qdd, out=single_out)}
    for name, fn in arrays.items():
        time_single(fn, states, 50)
        p50, p99 = percentiles(time_single(fn, states, reps))
        print(f'{name:<22} single sample (1 thread): p50 {p50:6.1f} us  p99 {p99:6.1f} us')
    batch_out = engine.empty_arrays((N,))
    for name, fn in {'decompose_arrays': engine.decompose_arrays,
                     'decompose_arrays out=': lambda q, qd, qdd: engine.decompose_arrays(
                         q, qd, qdd, out=batch_out)}.items():
        per = time_batch(fn, states, N, 5, tensors=False)
        print(f'{name:<22} batch {N} (1 thread): {per:6.2f} us/sample  ratio vs pin split '
              f'{per / split50:6.3f}x')
    torch.set_num_threads(threads)

    floors(engine, oracle, model, states, N, batch_out)

    f32 = PartialLagrangian(model, dtype=torch.float32)
    per32 = time_batch(f32.decompose, tuple(x.astype(np.float32) for x in states), 10_000, 5)
    print(f'torch form float32 batch 10000: {per32:9.2f} us/sample  '
          f'ratio vs pin split {per32 / split50:6.3f}x')



def floors(engine, oracle, model, states, N, batch_out) -> None:
    """The one-call Pinocchio equivalent and the memory floor, against decompose (reused
    outputs, 1 thread) on the same states."""
    q, qd, qdd = states
    ours = median_time_s(lambda: engine.decompose_arrays(q, qd, qdd, out=batch_out), 5) / N * 1e6
    forest = PathForest(oracle)
    count = 1000
    fq = np.array([forest.config(x) for x in q[:count]])
    fv, fa = qd[:count][:, forest.v_index], qdd[:count][:, forest.v_index]

    def run_forest() -> None:
        for r in range(count):
            forest.call(fq[r], fv[r], fa[r])

    run_forest()
    peer = median_time_s(run_forest, 5) / count * 1e6
    nbytes = sum(a.nbytes for a in batch_out.values())
    flat = np.concatenate([a.ravel() for a in batch_out.values()])
    dst = np.empty_like(flat)
    copy = median_time_s(lambda: np.copyto(dst, flat), 7) / N * 1e6
    fresh = median_time_s(lambda: flat.copy(), 7) / N * 1e6
    print(f'pinocchio path forest ({forest.forest.njoints - 1} joints, one '
          f'computeRNEADerivatives): {peer:7.2f} us/sample')
    print(f'memory floor, {nbytes // N} bytes/sample: copy into reused memory {copy:5.2f} '
          f'us/sample ({nbytes / N / copy / 1e3:4.1f} GB/s), into fresh memory {fresh:5.2f}')
    threads = engine.threads or 'auto'
    print(f'decompose batch {N}, out=, threads {threads}: {ours:5.2f} us/sample = '
          f'{ours / peer:5.3f}x the path forest (goal <= 0.1), {ours / fresh:4.1f}x the '
          f'fresh-memory floor (goal <= 2), {ours / copy:4.1f}x the copy floor')


def threads_sweep(quick: bool, load: bool = False) -> None:
    """decompose on 1 thread, on 2, and automatic (the default), per model and batch size,
    the three engines called in turn in each round (a load change hits all three): medians
    per sample, and the automatic choice's mean time (its throughput) over one thread's;
    then one
    call on a fresh class of 120 000 samples (a 10-minute recording: the analysis's call).
    ``load``: a busy process on one core throughout (another job on the machine)."""
    import subprocess

    busy = subprocess.Popen([sys.executable, '-c', 'while True: pass']) if load else None
    try:
        print(f'numba threads available: {kernel._max_threads}; '
              f'{"one core kept busy by another process" if load else "quiet machine"}')
        models = [('CRANE-X7', default_urdf_path().read_text())] + [
            (f'chain {n}', serial_chain(3, n=n)) for n in (7, 10, 15)]
        rounds = 9 if quick else 25
        for name, xml in models:
            model = RobotModel.from_urdf(xml)
            engines = {t: PartialLagrangian(model, threads=t) for t in (1, 2, None)}
            for N in (64, 128, 256, 1024, 4096):
                q, qd, qdd = (np.random.default_rng(N).uniform(-1, 1, (N, model.n_joints))
                              for _ in range(3))
                outs = {t: e.empty_arrays((N,)) for t, e in engines.items()}
                times: dict = {t: [] for t in engines}
                order = list(engines)
                for r in range(8 + rounds):     # 8 rounds for the automatic choice to learn
                    # each engine after each other in turn: numba's workers spin a while
                    # after a parallel call and slow whatever runs next
                    for t in order[r % 3:] + order[:r % 3]:
                        t0 = time.perf_counter()
                        engines[t].decompose_arrays(q, qd, qdd, out=outs[t])
                        if r >= 8:
                            times[t].append(time.perf_counter() - t0)
                per = {t: statistics.median(v) / N * 1e6 for t, v in times.items()}
                mean = {t: statistics.fmean(v) / N * 1e6 for t, v in times.items()}
                print(f'{name:9s} N {N:6d}: 1 thread {per[1]:7.2f}  2 threads {per[2]:7.2f} '
                      f'({per[2] / per[1]:4.2f}x)  automatic {per[None]:7.2f} us/sample '
                      f'({per[None] / per[1]:4.2f}x of one thread; mean '
                      f'{mean[None] / mean[1]:4.2f}x)', flush=True)
        # One call of a recording's length on a class never seen: what analyze does.
        model = RobotModel.from_urdf(serial_chain(3, n=10))
        N = 120_000
        q, qd, qdd = (np.random.default_rng(1).uniform(-1, 1, (N, model.n_joints))
                      for _ in range(3))
        per = {}
        for t in (1, None, 1, None):
            kernel.thread_choice = kernel.ThreadChoice()    # a fresh process's choice
            engine = PartialLagrangian(model, threads=t)
            out = engine.empty_arrays((N,))
            t0 = time.perf_counter()
            engine.decompose_arrays(q, qd, qdd, out=out)
            per.setdefault(t, []).append((time.perf_counter() - t0) / N * 1e6)
        one, auto = min(per[1]), min(per[None])
        print(f'chain 10  one call of N {N}, fresh choice: 1 thread {one:.2f}  automatic '
              f'{auto:.2f} us/sample ({auto / one:4.2f}x of one thread; best of 2)')
    finally:
        if busy is not None:
            busy.kill()


def scaling_sweep(quick: bool) -> None:
    """Serial chains n = 2 ... 30: ours and Pinocchio's per sample, fitted exponents."""
    import bench_cost_curve as cost

    ns = list(range(2, 31, 4 if quick else 2))
    timing = cost.time_variants(ns, 0.2 if quick else 0.5, autograd_max_n=0)
    print('exponents (fit on n >= 8): ' + ', '.join(
        f'{name} n^{cost.fit_exponent(points):.2f}' for name, points in timing.items()
        if len(points) > 2 and cost.fit_exponent(points) is not None))


if __name__ == '__main__':
    main()
