"""Kusaka and Tanaka 2022 [PL], section 3 pendulums: the engine's dynamics of the point-mass
arms against a symbolic derivation, PD rest poses against the static balance, energy
bookkeeping of the damped runs, the slider reconstruction (Fig. 4) and the 10-DoF pendulum
(Fig. 5a).

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import sympy as sp

from plag_ros.apps import cli
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.studies import pendulums as study

G = 9.8


@functools.cache
def symbolic(kinds: tuple[str, ...]):
    """M(q), C(q, qd) qd + g(q) of a planar point-mass chain (postural operator, g = 9.8)."""
    arm = study.ARMS[len(kinds)]
    n = len(kinds)
    q = sp.symbols(f'q1:{n + 1}')
    w = sp.symbols(f'w1:{n + 1}')
    phi, p, K, P = 0, sp.zeros(2, 1), 0, 0
    for a in range(n):
        if kinds[a] == 'R':
            phi += q[a]
            p = p + sp.nsimplify(arm.lengths[a]) * sp.Matrix([sp.cos(phi), sp.sin(phi)])
        else:   # slider: link a's length is q_a, along the current heading
            p = p + q[a] * sp.Matrix([sp.cos(phi), sp.sin(phi)])
        v = p.jacobian(q) * sp.Matrix(w)
        m = sp.nsimplify(arm.masses[a])
        K += m * (v.T * v)[0] / 2
        P += m * sp.Float(G) * p[1]
    L = K - P
    M = sp.hessian(L, w)
    dL_dw = sp.Matrix([sp.diff(L, x) for x in w])
    bias = dL_dw.jacobian(q) * sp.Matrix(w) - sp.Matrix([sp.diff(L, x) for x in q])
    grav = sp.Matrix([sp.diff(P, x) for x in q])
    return (sp.lambdify((q, w), M, 'numpy'), sp.lambdify((q, w), bias, 'numpy'),
            sp.lambdify((q,), grav, 'numpy'))


@pytest.mark.parametrize('kinds', [('R',), ('R', 'R'), ('R', 'R', 'R'), ('R', 'P', 'R')])
def test_engine_dynamics_of_the_point_mass_arms(kinds):
    base = study.ARMS[len(kinds)]
    arm = study.Arm(base.lengths, base.masses, base.damping, kinds=kinds)
    xml = study.slider_urdf(base) if 'P' in kinds else study.arm_urdf(base)
    engine = PartialLagrangian(RobotModel.from_urdf(xml, gravity=(0.0, 0.0, -G)))
    f_M, f_bias, f_grav = symbolic(kinds)
    rng = np.random.default_rng(len(kinds))
    for _ in range(5):
        q, qd = rng.uniform(-2, 2, (2, len(kinds)))
        if 'P' in kinds:
            q[1] = rng.uniform(0.1, 1.0)
        M, bias = (x.numpy() for x in engine.mass_matrix_and_bias(q, qd))
        # point masses carry 1e-9 kg m^2 of rotational inertia in the URDF
        np.testing.assert_allclose(M, np.array(f_M(q, qd), float), rtol=0, atol=1e-8)
        np.testing.assert_allclose(bias, np.array(f_bias(q, qd), float).ravel(), rtol=0,
                                   atol=1e-8)
        np.testing.assert_allclose(study.gravity_closed_form(arm, q),
                                   np.array(f_grav(q), float).ravel(), rtol=0, atol=1e-10)


def test_pd_runs_settle_at_the_static_balance(tmp_path):
    assert study.main([str(tmp_path), '--only', 'pd', '--duration', '5']) == 0
    for n in (1, 2, 3):
        assert (tmp_path / f'fig{n}_{n}link.png').stat().st_size > 10_000
    s = json.loads((tmp_path / 'summary.json').read_text())
    assert s['assumptions']['gravity_m_s2'] == G
    # the static balance, solved independently: Kp (ref - q) = g(q)
    for n in (1, 2, 3):
        pd = s[f'{n}_link']['pd']
        ref, kp = np.radians(pd['target_deg']), np.array(pd['kp'])
        q = np.radians(pd['static_balance_deg'])
        residual = kp * (ref - q) - np.array(symbolic(('R',) * n)[2](q), float).ravel()
        assert np.abs(residual).max() < 1e-8
        # settling left after 5 s (measured 3e-5, 2e-2 and 5e-14 rad; the full 10 s run
        # leaves 2e-10, 2e-3 and 5e-14): the 2-link's slow mode takes longest
        tol = {1: 1e-4, 2: 0.05, 3: 1e-6}[n]
        assert pd['final_minus_balance_max_abs_rad'] < tol, (n, pd)
    # 1 link: 110 deg asked, gravity holds it 7.9 deg further (Kp = 200 is "low")
    assert s['1_link']['pd']['static_balance_deg'][0] == pytest.approx(117.876, abs=1e-3)
    for n in (1, 2, 3):
        damped = s[f'{n}_link']['damped']
        assert damped['energy_balance_max_abs_J'] < 1e-6          # E + dissipated = E0
        assert damped['energy_increase_max_J'] <= 1e-9            # damping only removes
        assert damped['energy_final_J'] < damped['energy_initial_J'] - 10.0


def test_slider_reconstruction_and_ten_dof(tmp_path):
    assert study.main([str(tmp_path), '--only', 'slider', '--only', '10dof',
                       '--duration', '4', '--dt', '0.004']) == 0
    for name in ('fig4_reconstruction', 'fig5a_10dof'):
        assert (tmp_path / f'{name}.png').stat().st_size > 10_000
    s = json.loads((tmp_path / 'summary.json').read_text())
    rec = s['reconstruction']
    assert rec['extend_reused_columns'] == ['link1']
    assert rec['extend_recomputed_columns'] == ['link2', 'link3']
    assert rec['extend_minus_full_max_abs'] < 1e-12
    assert abs(rec['final_slider_m'] - 0.1) < 0.03
    ten = s['10_dof']
    assert ten['energy_balance_max_abs_J'] < 1e-6
    assert ten['energy_increase_max_J'] <= 1e-9
    assert ten['energy_final_J'] < -500.0        # 10 masses fell 1-11 m (E(0) = 0)


def test_joint_damping_option_from_the_command_line(tmp_path):
    # Through `plag-ros study pendulums OUT ...`, the way a reader runs it.
    assert cli.main(['study', 'pendulums', str(tmp_path), '--only', '10dof',
                     '--duration', '0.5', '--damping', 'joint']) == 0
    s = json.loads((tmp_path / 'summary.json').read_text())
    assert s['assumptions']['damping_mode'] == 'joint'
    assert s['10_dof']['energy_balance_max_abs_J'] < 1e-6
