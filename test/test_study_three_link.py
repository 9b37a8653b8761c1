"""Three-link study of Gunji, Kusaka and Tanaka 2025 [MPF]: signs, Figs. 5-14, eq. 1's 1/2.

The reference is an independent symbolic derivation (sympy) of each link's partial
Lagrangian with the postural operator ``e(theta) = (cos, sin)`` of Kusaka and Tanaka 2022
[PL] in the vertical plane (relative angles, counter-clockwise positive, gravity -z), in
the paper's sign convention, and the operator
``D_k L_i = d/dt dL_i/d qd_k - dL_i/d q_k`` applied symbolically.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import sympy as sp

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.studies import three_link as study

G = 9.81
N = 3


@functools.cache
def symbolic():
    """Lambdified partial torque tables of Table 2's arm: partial, accel, literal, gravity."""
    th = sp.symbols('th1:4')
    w = sp.symbols('w1:4')
    a = sp.symbols('a1:4')
    length, lg, m, inertia = (sp.nsimplify(x) for x in (study.LENGTH, study.COM, study.MASS,
                                                     study.INERTIA))
    g = sp.Float(G)

    def e(phi):
        return sp.Matrix([sp.cos(phi), sp.sin(phi)])

    def ddt(expr):  # total time derivative along (w, a)
        return sum(sp.diff(expr, th[s]) * w[s] + sp.diff(expr, w[s]) * a[s]
                   for s in range(N))

    partial = [[0] * N for _ in range(N)]
    grav = [[0] * N for _ in range(N)]
    literal = [[[0] * N for _ in range(N)] for _ in range(N)]
    accel = [[[0] * N for _ in range(N)] for _ in range(N)]
    for i in range(N):
        phi = [sum(th[:b + 1]) for b in range(N)]
        c = sum((length * e(phi[b]) for b in range(i)), sp.zeros(2, 1)) + lg * e(phi[i])
        cdot = sp.Matrix([ddt(c[0]), ddt(c[1])])
        K = m * (cdot.T * cdot)[0] / 2 + inertia * sum(w[:i + 1]) ** 2 / 2
        P = m * g * c[1]
        L = K - P
        for k in range(N):
            tau = sp.expand(ddt(sp.diff(L, w[k])) - sp.diff(L, th[k]))
            partial[k][i] = tau
            grav[k][i] = sp.diff(P, th[k])
            for s in range(N):
                accel[k][i][s] = sp.diff(tau, a[s]) * a[s]
                literal[k][i][s] = sp.diff(tau, w[s]) * w[s]
    args = (th, w, a)
    return tuple(sp.lambdify(args, sp.Array(x), 'numpy')
                 for x in (partial, accel, literal, grav))


def states(count=6, seed=11):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2.0, 2.0, (3, N)) for _ in range(count)]


@pytest.fixture(scope='module')
def engine():
    return PartialLagrangian(RobotModel.from_urdf(study.three_link_urdf()))


def test_partial_torques_and_parts_match_the_postural_operator_lagrangian(engine):
    f_partial, f_accel, f_literal, f_grav = symbolic()
    for q, qd, qdd in states():
        d = engine.decompose(q, qd, qdd).numpy()
        np.testing.assert_allclose(d['partial'], np.array(f_partial(q, qd, qdd), float),
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(d['acceleration'], np.array(f_accel(q, qd, qdd), float),
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(d['gravity'], np.array(f_grav(q, qd, qdd), float),
                                   rtol=0, atol=1e-12)
        # the engine's velocity parts are eq. 10's: half the literal eq. 1 reading
        np.testing.assert_allclose(d['velocity'],
                                   0.5 * np.array(f_literal(q, qd, qdd), float),
                                   rtol=0, atol=1e-12)


def test_plus_y_axis_mirrors_the_gravity_parts():
    """Why the study turned its joints about -y: about +y the gravity parts are those of
    the mirrored arm, g_+y(q) = -g_paper(-q), and differ from the paper's at a pose."""
    f_grav = symbolic()[3]
    mirrored = study.three_link_urdf().replace('xyz="0 -1 0"', 'xyz="0 1 0"')
    old = PartialLagrangian(RobotModel.from_urdf(mirrored))
    q = np.array([0.3, 0.2, 0.1])
    zero = np.zeros(N)
    old_g = old.decompose(q, zero, zero).gravity.numpy()
    paper = np.array(f_grav(q, zero, zero), float)
    assert np.abs(old_g - paper).max() > 1.0
    np.testing.assert_allclose(old_g, -np.array(f_grav(-q, zero, zero), float), atol=1e-12)


def test_eq1_literal_reading_double_counts_and_the_half_restores_the_sum(engine):
    """Eq. 1 read literally sums to 2 V (Euler's theorem, V of degree 2 in qd); with the
    1/2 of eq. 10 the parts add up to the partial torque again."""
    f_partial, f_accel, f_literal, f_grav = symbolic()
    for q, qd, qdd in states():
        partial = np.array(f_partial(q, qd, qdd), float)
        accel = np.array(f_accel(q, qd, qdd), float).sum(-1)
        literal = np.array(f_literal(q, qd, qdd), float).sum(-1)
        grav = np.array(f_grav(q, qd, qdd), float)
        V = partial - accel - grav                            # velocity-product terms
        assert np.abs(V).max() > 5e-3                         # a real test, not 0 == 0
        np.testing.assert_allclose(literal, 2.0 * V, rtol=0, atol=1e-12)
        np.testing.assert_allclose(accel + literal + grav - partial, V, rtol=0, atol=1e-12)
        np.testing.assert_allclose(accel + 0.5 * literal + grav, partial, rtol=0, atol=1e-12)
        # the study's engine-independent literal parts (central difference in qd)
        np.testing.assert_allclose(
            study.literal_velocity_parts(engine, q, qd, qdd)[0],
            np.array(f_literal(q, qd, qdd), float), rtol=0, atol=1e-9)


def test_study_writes_figures_and_the_papers_observations(tmp_path):
    assert study.main([str(tmp_path), '--duration', '4', '--no-control']) == 0
    for name in ('fig05_motion', 'fig06_joint_torque', 'fig07_partial_torque_joint1',
                 'fig08_velocity_propagation_joint1', 'fig09_acceleration_propagation_joint1',
                 'fig10_motion', 'fig11_joint_torque', 'fig12_partial_torque_joint1',
                 'fig13_velocity_propagation_joint1', 'fig14_acceleration_propagation_joint1',
                 'fig_velocity_half'):
        assert (tmp_path / f'{name}.png').stat().st_size > 10_000, name
    s = json.loads((tmp_path / 'summary.json').read_text())
    # Fig. 12: tau_11 + tau_12 + tau_13 = tau_1; parts sum to the partial torque
    assert s['max_abs_sum_partial_minus_torque'] < 1e-12
    assert s['max_abs_components_minus_partial'] < 1e-12
    # Figs. 13-14: link 2 rests for 3 s, nothing propagates from it; link 3's shows
    assert s['max_abs_tau12p_first_3s'] == 0.0
    assert s['max_abs_tau13p_acceleration'] > 0.1 and s['max_abs_tau13p_velocity'] > 0.05
    # Figs. 8-9 (hand-moved, estimated): the moving link dominates each half
    assert s['experiment_rms_tau13p_acceleration_first_half'] > \
        5 * s['experiment_rms_tau12p_acceleration_first_half']
    assert s['experiment_rms_tau12p_acceleration_second_half'] > \
        3 * s['experiment_rms_tau12p_acceleration_first_half']
    # the two readings of eq. 1
    assert s['velocity_product_max_abs'] > 0.1
    assert s['literal_sum_minus_2V_max_abs'] < 1e-9
    assert s['literal_residual_vs_partial_max_abs'] == pytest.approx(
        s['velocity_product_max_abs'], rel=1e-9)
    assert s['halved_residual_vs_partial_max_abs'] < 1e-9
    # paper's signs: holding the horizontal arm takes positive (counter-clockwise) torque
    x = np.array([study.COM, study.LENGTH + study.COM, 2 * study.LENGTH + study.COM])
    expected = [G * study.MASS * np.sum(x[k:] - k * study.LENGTH) for k in range(N)]
    np.testing.assert_allclose(s['gravity_torque_horizontal'], expected, rtol=1e-12)
    assert s['gravity_torque_straight_up_max_abs'] < 1e-12
