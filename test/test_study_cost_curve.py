"""Gunji, Kusaka and Tanaka 2025 [MPF] Fig. 15 and Kusaka and Tanaka 2022 [PL] sec. 4 term
counts (bench/bench_cost_curve.py's symbolic part): counted with sympy, checked against a
closed-form count and the paper's fit.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

path = Path(__file__).resolve().parents[1] / 'bench' / 'bench_cost_curve.py'
spec = importlib.util.spec_from_file_location('bench_cost_curve', path)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


@pytest.mark.parametrize('n', [1, 2, 3, 4, 5, 6])
def test_root_acceleration_terms_and_the_papers_reduction_fit(n):
    total, with_root_acc = bench.root_acceleration_terms(n)
    # M_11 of n rods: body i (0-based) gives i + 1 squares, i (i + 1) / 2 distinct
    # cos(phi_p - phi_r) cross terms and its own inertia: sum = n(n+1)(n+2)/6 + n
    assert with_root_acc == n * (n + 1) * (n + 2) // 6 + n
    if n == 1:   # (m lg^2 + I) theta'' + m g lg cos(theta): three terms
        assert total == 3
    y = 1 - with_root_acc / total
    # [MPF]: y = 0.95 (1 - exp(-0.44 x)) fitted on x = 1..10
    assert y == pytest.approx(0.95 * (1 - np.exp(-0.44 * n)), abs=0.02)


def test_split_table_has_the_terms_of_the_unsplit_equations_and_smaller_columns():
    counts = {n: bench.term_counts(n) for n in range(1, 5)}
    for n, (unsplit, split, largest) in counts.items():
        # distinct symbolic masses: no term of one body merges with another's
        assert split == unsplit
        assert largest <= unsplit and (n == 1 or largest < unsplit)
    assert counts[1] == (3, 3, 3)
