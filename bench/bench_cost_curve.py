"""Cost of the decomposition against the number of joints.

The cost comparisons of Kusaka and Tanaka 2022 [PL] (sec. 4) and Gunji, Kusaka and Tanaka
2025 [MPF] (Fig. 15), in two measurements:

1. **Time per sample** on serial chains of n = 1 .. 30 joints (``test/robots.serial_chain``:
   3D, random axes and inertias, revolute/prismatic/continuous, fixed brackets lumped), in
   one process on the same states, for
   * ``closed form``: :meth:`PartialLagrangian.decompose_arrays` (compiled float64 loop,
     batch 64, into reused arrays), the whole table: partial torques, acceleration /
     velocity / gravity parts;
   * ``autograd split``: :meth:`PartialLagrangian.decompose_autograd` (each ``L_i``
     differentiated with torch.func, vmapped over a batch of 16), the same table;
   * ``autograd unsplit``: one Lagrangian ``L = sum_i L_i`` for the whole system,
     differentiated once (``D_k L`` for every k, vmapped over a batch of 64): joint torques
     only, nothing split;
   * ``pinocchio split``: the nearest Pinocchio equivalent of the table (as in
     bench_dynamics.py): per body, a single-body model's ``crba`` + ``computeRNEADerivatives``
     + ``computeGeneralizedGravity``;
   * ``pinocchio rnea``: joint torques only (the unsplit equivalent).
   Exponents are fitted by least squares on log t = a + p log n over n >= 8 (below that
   fixed per-call overhead dominates) and printed beside [PL]'s term-count claim:
   O(n^4) unsplit vs O(n^3) split.

2. **Term counts** ([PL] eq. 18-19 and [MPF] Fig. 15), symbolic (sympy) for a planar
   n-link arm of rods with symbolic m_i, l_i, lg_i, I_i, g, cosines of joint-angle sums kept
   as atoms, every equation expanded into monomials:
   * the number of terms in the unsplit equations ``tau_k = D_k L`` against the split table
     ``tau_ki = D_k L_i`` (n = 1 .. 7), fitted exponents;
   * [MPF]'s "reduction rate" for extracting the root joint's acceleration terms from
     tau_1: y = 1 - (terms of tau_1 with theta_1'') / (terms of tau_1) for n = 1 .. 10,
     fitted to y = A (1 - exp(-lambda n)) and compared with the paper's A = 0.95,
     lambda = 0.44, and the redundancy (terms not needed / terms needed) with its "about 3x
     at 5 DoF, about 16x at 10 DoF".

Run (about 3 minutes on one core): ``PYTHONPATH=$PWD python bench/bench_cost_curve.py
[--out bench/cost_curve.png] [--json bench/cost_curve.json] [--quick]``.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'test'))
from pin_oracle import PathForest, PinOracle  # noqa: E402
from robots import serial_chain  # noqa: E402

from plag_ros.core.dynamics.engine import PartialLagrangian  # noqa: E402
from plag_ros.core.dynamics.model import RobotModel  # noqa: E402

NS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 18, 21, 25, 30)
FIT_FROM = 8


def per_sample_s(fn, batch: int, budget_s: float) -> float:
    """Median over repeats of (time of one call) / batch, repeats filling ``budget_s``."""
    fn()                                      # warm-up (compilation, caches)
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / batch


def unsplit_torque(engine: PartialLagrangian):
    """D_k L for L = sum_i L_i: one scalar Lagrangian, differentiated once (vmapped)."""
    func = torch.func

    def total(q, qd):
        return engine.lagrangians(q, qd)[0].sum()

    def single(q, qd, qdd):
        dL_dqd = func.grad(total, argnums=1)
        ddt = func.jvp(lambda q_, qd_: dL_dqd(q_, qd_), (q, qd), (qd, qdd))[1]
        return ddt - func.grad(total, argnums=0)(q, qd)

    return func.vmap(single)


def time_chain(n: int, budget_s: float, autograd: bool) -> dict[str, float]:
    """Seconds per sample of every variant on one n-joint chain."""
    out: dict[str, float] = {}
    xml = serial_chain(7, n=n)
    model = RobotModel.from_urdf(xml)
    engine = PartialLagrangian(model, threads=1)   # one thread, as Pinocchio here
    rng = np.random.default_rng(n)
    q, qd, qdd = (rng.uniform(-1, 1, (64, n)) for _ in range(3))
    # into reused arrays: the table is O(n^3) numbers per sample, fresh arrays would
    # time the page faults of writing it (measured: a 4x jump from n = 8 to 10)
    buffers = engine.empty_arrays((64,))
    out['closed form'] = per_sample_s(
        lambda: engine.decompose_arrays(q, qd, qdd, out=buffers), 64, budget_s)
    if autograd:
        qt, qdt, qddt = (torch.as_tensor(x[:16]) for x in (q, qd, qdd))
        out['autograd split'] = per_sample_s(
            lambda: engine.decompose_autograd(qt, qdt, qddt), 16, budget_s)
        # the unsplit path is cheap per sample: a larger batch keeps the fixed
        # per-call overhead of torch.func from hiding its growth with n
        ut, udt, uddt = (torch.as_tensor(x) for x in (q, qd, qdd))
        unsplit = unsplit_torque(engine)
        with torch.no_grad():
            tau = unsplit(ut, udt, uddt)
        ref = engine.decompose(ut, udt, uddt).torque
        assert torch.allclose(tau, ref, atol=1e-9), 'unsplit autograd disagrees'
        out['autograd unsplit'] = per_sample_s(lambda: unsplit(ut, udt, uddt), 64, budget_s)
    oracle = PinOracle(xml, model)
    pq = np.array([oracle.config(x) for x in q[:32]])      # 32 of the same states
    pv, pa = qd[:32][:, oracle.ours_of_pin], qdd[:32][:, oracle.ours_of_pin]
    data = oracle.pin.createData()

    def rnea() -> None:
        for r in range(32):
            pin.rnea(oracle.pin, data, pq[r], pv[r], pa[r])

    singles = [oracle.single_body(i) for i in range(model.n_bodies)]
    datas = [m.createData() for m in singles]

    def split() -> None:
        for r in range(32):
            for m, d in zip(singles, datas, strict=True):
                pin.crba(m, d, pq[r])
                pin.computeRNEADerivatives(m, d, pq[r], pv[r], pa[r])
                pin.computeGeneralizedGravity(m, d, pq[r])

    forest = PathForest(oracle)
    fq = np.array([forest.config(x) for x in q[:32]])
    fv, fa = qd[:32][:, forest.v_index], qdd[:32][:, forest.v_index]

    def path_forest() -> None:
        for r in range(32):
            forest.call(fq[r], fv[r], fa[r])

    out['pinocchio split'] = per_sample_s(split, 32, budget_s)
    out['pinocchio path forest'] = per_sample_s(path_forest, 32, budget_s)
    out['pinocchio rnea'] = per_sample_s(rnea, 32, budget_s)
    return out


def time_variants(ns, budget_s: float, *, autograd_max_n: int) -> dict:
    results: dict[str, dict[int, float]] = {k: {} for k in (
        'closed form', 'autograd split', 'autograd unsplit', 'pinocchio split',
        'pinocchio path forest', 'pinocchio rnea')}
    for n in ns:
        for name, value in time_chain(n, budget_s, n <= autograd_max_n).items():
            results[name][n] = value
        print(f'n={n:2d} ' + '  '.join(f'{k}: {v[n] * 1e6:9.1f} us' for k, v in results.items()
                                       if n in v), flush=True)
    return results


def fit_exponent(points: dict[int, float], n_min: int = FIT_FROM) -> float | None:
    ns = np.array([n for n in points if n >= n_min], dtype=float)
    if ns.size < 3:
        return None
    ys = np.array([points[int(n)] for n in ns])
    return float(np.polyfit(np.log(ns), np.log(ys), 1)[0])


# ------------------------------------------------------------------ symbolic term counts
def planar_lagrangians(n: int):
    """Symbols and the partial Lagrangians of a planar n-link arm of rods (symbolic figures)."""
    import sympy as sp

    th, w, a = (sp.symbols(f'{s}1:{n + 1}') for s in ('th', 'w', 'a'))
    m, length, lg, inertia = (sp.symbols(f'{s}1:{n + 1}') for s in ('m', 'l', 'lg', 'I'))
    g = sp.Symbol('g')
    phi = [sum(th[:k + 1]) for k in range(n)]
    phid = [sum(w[:k + 1]) for k in range(n)]
    lagrangians = []
    for i in range(n):
        arms = [length[k] for k in range(i)] + [lg[i]]
        # |c_i'|^2 with e(phi_p) . e(phi_q) = cos(phi_p - phi_q) ([PL]'s interference)
        kinetic = sum(arms[p] * arms[r] * phid[p] * phid[r] * sp.cos(phi[p] - phi[r])
                      for p in range(i + 1) for r in range(i + 1))
        kinetic = m[i] * kinetic / 2 + inertia[i] * phid[i] ** 2 / 2
        potential = m[i] * g * sum(arms[p] * sp.sin(phi[p]) for p in range(i + 1))
        lagrangians.append(kinetic - potential)
    return th, w, a, lagrangians


def _operator(th, w, a):
    import sympy as sp

    def D(k, L):
        dL = sp.diff(L, w[k])
        ddt = sum(sp.diff(dL, th[s]) * w[s] + sp.diff(dL, w[s]) * a[s] for s in range(len(th)))
        return sp.expand(ddt - sp.diff(L, th[k]))
    return D


def term_counts(n: int) -> tuple[int, int, int]:
    """Terms of every tau_k = D_k L (unsplit), of every tau_ki = D_k L_i (split), and of
    the largest column sum_k tau_ki (the split's critical path when columns run in
    parallel, [PL] eq. 19)."""
    import sympy as sp

    th, w, a, Ls = planar_lagrangians(n)
    D = _operator(th, w, a)
    unsplit = sum(len(sp.Add.make_args(D(k, sum(Ls)))) for k in range(n))
    columns = [sum(len(sp.Add.make_args(D(k, Ls[i]))) for k in range(i + 1))
               for i in range(n)]
    return unsplit, sum(columns), max(columns)


def root_acceleration_terms(n: int) -> tuple[int, int]:
    """(terms of tau_1, of which contain theta_1'')."""
    import sympy as sp

    th, w, a, Ls = planar_lagrangians(n)
    terms = sp.Add.make_args(_operator(th, w, a)(0, sum(Ls)))
    return len(terms), sum(1 for t in terms if t.has(a[0]))


def symbolic_study(max_table_n: int, max_root_n: int) -> dict:
    from scipy.optimize import curve_fit

    table = {n: term_counts(n) for n in range(1, max_table_n + 1)}
    root = {n: root_acceleration_terms(n) for n in range(1, max_root_n + 1)}
    x = np.array(sorted(root), dtype=float)
    y = np.array([1.0 - root[int(n)][1] / root[int(n)][0] for n in x])
    (A, lam), _ = curve_fit(lambda x_, A_, l_: A_ * (1 - np.exp(-l_ * x_)), x, y, p0=(1, 0.5))
    redundancy = {int(n): (root[int(n)][0] - root[int(n)][1]) / root[int(n)][1] for n in x}
    ns = np.array(sorted(table), dtype=float)
    fit_from = ns >= 3
    exps = {name: float(np.polyfit(np.log(ns[fit_from]),
                                   np.log([table[int(n)][col] for n in ns[fit_from]]), 1)[0])
            for col, name in ((0, 'unsplit'), (1, 'split, all columns'),
                              (2, 'split, largest column'))}
    return {
        'table_terms': {int(n): {'unsplit': u, 'split': s, 'largest_column': c}
                        for n, (u, s, c) in table.items()},
        'table_term_exponent_n>=3': exps,
        'root_terms': {int(n): {'tau_1': t, 'with_theta1_ddot': k}
                       for n, (t, k) in root.items()},
        'reduction_rate': {int(n): float(v) for n, v in zip(x, y, strict=True)},
        'reduction_fit': {'A': float(A), 'lambda': float(lam)},
        'paper_fit': {'A': 0.95, 'lambda': 0.44},
        'paper_fit_at_n': {int(n): 0.95 * (1 - np.exp(-0.44 * n)) for n in x},
        'redundancy_not_needed_over_needed': redundancy,
    }


def plot(path: Path, timing: dict, symbolic: dict, exponents: dict) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, (ax, cx, bx) = plt.subplots(1, 3, figsize=(15.0, 4.0))
    for name, pts in timing.items():
        if not pts:
            continue
        ns = sorted(pts)
        p = exponents.get(name)
        label = f'{name} (n^{p:.2f})' if p is not None else name
        ax.loglog(ns, [pts[n] * 1e6 for n in ns], 'o-', ms=3, label=label)
    ax.set_xlabel('joints n')
    ax.set_ylabel('time per sample [us]')
    ax.set_title(f'time per sample (exponent fitted on n >= {FIT_FROM})')
    ax.grid(True, which='both', alpha=0.3)
    ax.legend(fontsize=8)
    terms = symbolic['table_terms']
    tn = np.array(sorted(terms), dtype=float)
    for key, label in (('unsplit', 'unsplit: all tau_k = D_k L'),
                       ('largest_column', 'split: largest column sum_k D_k L_i')):
        cx.loglog(tn, [terms[int(n)][key] for n in tn], 'o-', ms=3, label=label)
    for power, style in ((4, ':'), (3, '--')):
        ref = terms[int(tn[-1])]['unsplit'] * (tn / tn[-1]) ** power
        cx.loglog(tn, ref, style, color='gray', lw=0.8,
                  label=f'n^{power} (Kusaka and Tanaka 2022)')
    exps = symbolic['table_term_exponent_n>=3']
    cx.set_title(f"terms (sympy): n^{exps['unsplit']:.2f} unsplit, "
                 f"n^{exps['split, largest column']:.2f} column")
    cx.set_xlabel('DoF n')
    cx.set_ylabel('expanded terms')
    cx.grid(True, which='both', alpha=0.3)
    cx.legend(fontsize=8)
    red = symbolic['reduction_rate']
    ns = np.array(sorted(red), dtype=float)
    bx.plot(ns, [red[int(n)] for n in ns], 'o', label='measured (sympy term count)')
    xs = np.linspace(1, ns.max(), 100)
    fit = symbolic['reduction_fit']
    bx.plot(xs, fit['A'] * (1 - np.exp(-fit['lambda'] * xs)), '-',
            label=f"fit A = {fit['A']:.3f}, lambda = {fit['lambda']:.3f}")
    bx.plot(xs, 0.95 * (1 - np.exp(-0.44 * xs)), '--',
            label='Gunji et al. 2025: A = 0.95, lambda = 0.44')
    bx.set_xlabel('DoF n')
    bx.set_ylabel('reduction rate y')
    bx.set_title("terms of tau_1 not needed for theta_1'' terms")
    bx.grid(True, alpha=0.3)
    bx.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).resolve().parent
    parser.add_argument('--out', type=Path, default=here / 'cost_curve.png')
    parser.add_argument('--json', type=Path, default=here / 'cost_curve.json')
    parser.add_argument('--quick', action='store_true',
                        help='n up to 12, shorter timing, smaller symbolic sizes (a check)')
    parser.add_argument('--autograd-max-n', type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    ns = tuple(n for n in NS if n <= 12) if args.quick else NS
    budget = 0.1 if args.quick else 0.6
    t0 = time.perf_counter()
    timing = time_variants(ns, budget, autograd_max_n=args.autograd_max_n)
    exponents = {name: fit_exponent(pts) for name, pts in timing.items()}
    symbolic = symbolic_study(4 if args.quick else 7, 6 if args.quick else 10)
    result = {
        'machine_note': 'one torch thread; shared machine, timings indicative',
        'pinocchio': pin.__version__, 'torch': torch.__version__,
        'time_per_sample_s': {k: {int(n): v for n, v in pts.items()}
                              for k, pts in timing.items()},
        f'time_exponent_n>={FIT_FROM}': exponents,
        'partial_lagrangian_paper_claim': {'unsplit': 4, 'split': 3},
        **symbolic,
        'run_s': time.perf_counter() - t0,
    }
    args.json.write_text(json.dumps(result, indent=2) + '\n')
    plot(args.out, timing, symbolic, exponents)
    print(json.dumps({k: result[k] for k in (f'time_exponent_n>={FIT_FROM}',
                                             'table_term_exponent_n>=3', 'reduction_fit',
                                             'redundancy_not_needed_over_needed', 'run_s')},
                     indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
