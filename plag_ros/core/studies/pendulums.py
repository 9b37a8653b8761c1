"""Section 3 simulations of Kusaka and Tanaka 2022 [PL]: pendulums, slider, 10 DoF.

1-, 2-, 3-link pendulums (damped and PD), the revolute-to-slider reconstruction (Fig. 4)
and the 10-DoF damped pendulum (Fig. 5a).

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.

Stated there (degrees in, radians inside):

* 1 link (Fig. 1): m1 = 3, l1 = 2, k1 = 0, "appropriate damping" d1 = 1; PD to 110 deg
  with Kp1 = 200, Kd1 = 50.
* 2 links (Fig. 2): link 1 as above, m2 = 1, l2 = 1, d2 = 1; PD to (80, 30) deg with
  Kp = (100, 50), Kd = (50, 20).
* 3 links (Fig. 3): PD to (125, 30, 30) deg with Kp = (1000, 1000, 500),
  Kd = (200, 200, 100).
* Reconstruction (Fig. 4): joint 2 of the 3-link arm becomes a linear slider, driven by PID
  from l2 = 1 to l2_ref = 0.1; the other joints swing damped.
* 10 DoF (Fig. 5a): damped oscillation of the 3-link model "extended with additional link
  parameters".
* g = 9.8 (Listing A1), a planar arm described with the postural operator
  ``e(theta) = (cos theta, sin theta)``, ``P_i = m_i g y_i``.

What the text leaves open, and what this study assumes (also in ``summary.json``):

* **Point masses** at the link ends: ``p_i = sum_{a <= i} l_a e(theta_1 + .. + theta_a)``,
  ``K_i = 1/2 m_i |p_i'|^2`` (section 3's equations; "pendulum model"). The URDF gives each
  mass a negligible rotational inertia (:data:`~plag_ros.core.studies.common.POINT_INERTIA`).
* **Relative angles** (``theta_12 = theta_1 + theta_2``), counter-clockwise from the
  horizontal, so 90 deg points straight up and the rest pose hangs at theta_1 = -90 deg.
* **Damping on the mass velocity** (the tip), as Listing A1 writes it: the Rayleigh function
  ``R_i = 1/2 d_i |p_i'|^2`` gives the generalized force ``-sum_i d_i J_i^T J_i qd``.
  ``--damping joint`` uses ``-d_k qd_k`` at each joint instead.
* **PD** torques ``Kp (theta_ref - theta) - Kd theta'`` on the relative angles, damping on
  in the PD runs too (the text adds PD "to the joints" of the damped system).
* **Link 3** (and links 4-10 of the 10-DoF arm): m = 1, l = 1, d = 1, as link 2 (not stated).
* **Initial state:** every run starts at rest with the arm horizontal (all angles 0); the
  slider starts at l2 = 1 with joint 2's angle frozen at 0 (the slider extends link 1).
* **Slider PID:** Kp = 200 N/m, Ki = 100 N/(m s), Kd = 50 N s/m (not stated).
* **Integration:** classical RK4, dt = 2 ms (``--dt``), over the engine's M(q) and
  C(q, qd) qd + g(q) (:meth:`PartialLagrangian.mass_matrix_and_bias`); the paper steps Listing A1's
  semi-implicit Euler with an unstated dt. Durations: 10 s (20 s for 10 DoF).

Checks (``summary.json``, :mod:`test.test_study_pendulums`): PD steady states against the
static balance ``Kp (theta_ref - theta) = g(theta)`` solved from the closed-form gravity
torque; damped runs conserve ``E + dissipated work`` and end hanging straight down; the
slider settles at 0.1 m; the reconstruction reuses link 1's column (extend()).

Run: ``python examples/partial_lagrangian_pendulums.py OUT [--damping tip|joint]``
(``plag-ros study pendulums OUT``).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.studies.common import AXIS, POINT_INERTIA, planar_chain_urdf, rk4, save_summary

__all__ = ['G', 'Arm', 'ARMS', 'PD_RUNS', 'slider_urdf', 'planar_jacobians', 'simulate',
           'gravity_closed_form', 'static_balance', 'main']

G = 9.8
"""Gravity used by [PL] (Listing A1) [m/s^2]."""

DT = 2e-3
"""Default RK4 step [s] (``--dt``)."""


@dataclass(frozen=True)
class Arm:
    """A planar point-mass arm: link lengths [m], masses [kg], damping [N s/m or N m s]."""

    lengths: tuple[float, ...]
    masses: tuple[float, ...]
    damping: tuple[float, ...]
    kinds: tuple[str, ...] = field(default=())   # 'R' revolute / 'P' slider per joint

    @property
    def n(self) -> int:
        return len(self.lengths)

    def joint_kinds(self) -> tuple[str, ...]:
        return self.kinds or ('R',) * self.n


LINK1, LINK2 = (2.0, 3.0, 1.0), (1.0, 1.0, 1.0)     # (l, m, d): stated links 1 and 2


def _arm(n: int) -> Arm:
    links = [LINK1] + [LINK2] * (n - 1)
    return Arm(*(tuple(v) for v in zip(*links, strict=True)))


ARMS = {1: _arm(1), 2: _arm(2), 3: _arm(3), 10: _arm(10)}
PD_RUNS = {   # n: (theta_ref [deg], Kp, Kd)
    1: ((110.0,), (200.0,), (50.0,)),
    2: ((80.0, 30.0), (100.0, 50.0), (50.0, 20.0)),
    3: ((125.0, 30.0, 30.0), (1000.0, 1000.0, 500.0), (200.0, 200.0, 100.0)),
}
SLIDER_REF, SLIDER_PID = 0.1, (200.0, 100.0, 50.0)


def arm_urdf(arm: Arm) -> str:
    """Point masses at the link ends, joints about -y (counter-clockwise positive)."""
    return planar_chain_urdf(arm.lengths, arm.masses, name=f'pendulum{arm.n}')


def slider_urdf(arm: Arm) -> str:
    """The 3-link arm with joint 2 a slider along link 1: coordinates (theta1, l2, theta3).

    Mass 2 rides on the slider at ``(l1 + l2) e(theta1)``; joint 3 turns about it.
    """
    (l1, _, l3), (m1, m2, m3) = arm.lengths, arm.masses
    small = repr(POINT_INERTIA)

    def link(name: str, mass: float, x: float) -> str:
        return (f'<link name="{name}"><inertial><origin xyz="{x!r} 0 0"/>'
                f'<mass value="{mass!r}"/><inertia ixx="{small}" iyy="{small}" '
                f'izz="{small}" ixy="0" ixz="0" iyz="0"/></inertial></link>')

    return '\n'.join([
        '<robot name="slider3">', '<link name="world"/>',
        link('link1', m1, l1), link('link2', m2, 0.0), link('link3', m3, l3),
        '<joint name="joint1" type="continuous"><parent link="world"/><child link="link1"/>'
        f'<origin xyz="0 0 0"/><axis xyz="{AXIS}"/></joint>',
        '<joint name="joint2" type="prismatic"><parent link="link1"/><child link="link2"/>'
        f'<origin xyz="{l1!r} 0 0"/><axis xyz="1 0 0"/>'
        '<limit lower="-10" upper="10" effort="1000" velocity="100"/></joint>',
        '<joint name="joint3" type="continuous"><parent link="link2"/><child link="link3"/>'
        f'<origin xyz="0 0 0"/><axis xyz="{AXIS}"/></joint>',
        '</robot>'])


def planar_jacobians(arm: Arm, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mass positions (n, 2) and Jacobians (n, 2, n) of a planar revolute/slider chain.

    Link a contributes ``L_a e(phi_a)`` with ``phi_a`` the sum of the revolute angles up to
    a and ``L_a = l_a`` (revolute) or ``q_a`` (slider, sliding along ``e(phi_a)``).
    """
    kinds = np.array(arm.joint_kinds())
    revolute = kinds == 'R'
    phi = np.cumsum(np.where(revolute, q, 0.0))
    L = np.where(revolute, np.asarray(arm.lengths), q)
    e = np.stack([np.cos(phi), np.sin(phi)], axis=-1)
    p = np.cumsum(L[:, None] * e, axis=0)
    # revolute k: sum_{a=k..i} L_a e_perp(phi_a) = rot90(p_i - p_{k-1}); slider k: e(phi_k)
    before = np.vstack([np.zeros((1, 2)), p[:-1]])
    arm_ = p[:, None, :] - before[None, :, :]                      # (i, k, 2)
    rot = np.stack([-arm_[..., 1], arm_[..., 0]], axis=-1)
    cols = np.where(revolute[None, :, None], rot, e[None, :, :])
    cols = cols * np.tri(arm.n)[:, :, None]                          # k <= i
    return p, cols.transpose(0, 2, 1)


def gravity_closed_form(arm: Arm, q: np.ndarray, g: float = G) -> np.ndarray:
    """``dP/dq`` with ``P = g sum_i m_i y_i``: ``g sum_i m_i J_i[y]`` (n,)."""
    _, J = planar_jacobians(arm, q)
    return g * np.einsum('i,ik->k', np.asarray(arm.masses), J[:, 1, :])


def static_balance(arm: Arm, ref_deg: Sequence[float] | np.ndarray,
                   kp: Sequence[float] | np.ndarray) -> np.ndarray:
    """Rest pose [rad] of the PD run: ``Kp (theta_ref - theta) = g(theta)``."""
    from scipy.optimize import fsolve

    ref, kp_ = np.radians(ref_deg), np.asarray(kp)
    sol, info, ok, msg = fsolve(lambda q: kp_ * (ref - q) - gravity_closed_form(arm, q),
                                ref, full_output=True, xtol=1e-13)
    if ok != 1:
        raise RuntimeError(f'static balance did not converge: {msg}')
    return sol


@dataclass
class Run:
    t: np.ndarray            # (K,) [s]
    q: np.ndarray            # (K, n)
    qd: np.ndarray           # (K, n)
    dissipated: np.ndarray   # (K,) work done by damping and control so far [J], see simulate


def simulate(engine: PartialLagrangian, arm: Arm, q0: np.ndarray, t_end: float, *,
             damping: str = 'tip', control: Callable[[float, np.ndarray, np.ndarray],
                                                     np.ndarray] | None = None,
             extra: int = 0, extra_rhs=None, every: int = 5,
             dt: float = DT) -> tuple[Run, np.ndarray]:
    """RK4 of ``M qdd = tau - Q_damp - (C qd + g)``.

    The state also integrates ``W' = qd . (Q_damp - tau)`` (energy leaving the arm), so
    ``E(t) + W(t) = E(0)`` checks the integration, and ``extra`` further states with
    ``extra_rhs(t, q, qd, z) -> z'`` (the slider's PID integral).

    Returns the run and the final extra states.
    """
    n = arm.n
    d = np.asarray(arm.damping)

    def rhs(t: float, x: np.ndarray) -> np.ndarray:
        q, qd, z = x[:n], x[n:2 * n], x[2 * n + 1:]
        M, bias = (v.numpy() for v in engine.mass_matrix_and_bias(q, qd))
        if damping == 'tip':
            _, J = planar_jacobians(arm, q)
            v = J @ qd                                           # (n, 2) mass velocities
            Q = np.einsum('i,ijk,ij->k', d, J, v)
        else:
            Q = d * qd
        tau = control(t, q, qd) if control is not None else np.zeros(n)
        if extra:
            tau = tau + extra_rhs('tau', q, qd, z)
        qdd = np.linalg.solve(M, tau - Q - bias)
        out = np.concatenate([qd, qdd, [qd @ (Q - tau)]])
        if extra:
            out = np.concatenate([out, extra_rhs('dz', q, qd, z)])
        return out

    x0 = np.concatenate([q0, np.zeros(n), [0.0], np.zeros(extra)])
    t, x = rk4(rhs, x0, t_end, dt, every=every)
    return Run(t, x[:, :n], x[:, n:2 * n], x[:, 2 * n]), x[-1, 2 * n + 1:]


def energy(engine: PartialLagrangian, arm: Arm, run: Run) -> np.ndarray:
    """Kinetic (from the engine's M) plus potential ``g sum m_i y_i`` along a run [J]."""
    M = engine.mass_matrix(run.q).numpy()
    kinetic = 0.5 * np.einsum('ti,tij,tj->t', run.qd, M, run.qd)
    y = np.array([planar_jacobians(arm, q)[0][:, 1] for q in run.q])
    return kinetic + G * y @ np.asarray(arm.masses)


def _engine(xml: str) -> PartialLagrangian:
    return PartialLagrangian(RobotModel.from_urdf(xml, gravity=(0.0, 0.0, -G)))


def _angles_figure(path: Path, runs: dict[str, Run], title: str, refs=None) -> None:
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(5.0 * len(runs), 3.4), squeeze=False)
    for ax, (name, run) in zip(axes[0], runs.items(), strict=True):
        for k in range(run.q.shape[1]):
            line, = ax.plot(run.t, np.degrees(run.q[:, k]), label=f'$\\theta_{{{k + 1}}}$')
            if refs is not None and name.startswith('(b)'):
                ax.axhline(refs[k], color=line.get_color(), ls=':', lw=0.8)
        ax.set_title(name)
        ax.set_xlabel('time [s]')
        ax.set_ylabel('angle [deg]')
        ax.grid(True, alpha=0.3)
        if run.q.shape[1] <= 4:
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _damped_summary(engine, arm, run: Run) -> dict:
    E = energy(engine, arm, run)
    balance = E + run.dissipated - E[0]
    hang = np.zeros(arm.n)
    hang[0] = -np.pi / 2
    return {
        'energy_initial_J': float(E[0]), 'energy_final_J': float(E[-1]),
        'energy_balance_max_abs_J': float(np.abs(balance).max()),
        'energy_increase_max_J': float(np.max(np.diff(E))),
        'final_angles_deg': np.degrees(run.q[-1]).tolist(),
        'final_distance_from_hanging_rad': float(np.abs(
            np.angle(np.exp(1j * (run.q[-1] - hang)))).max()),
        'final_speed_max': float(np.abs(run.qd[-1]).max()),
    }


def pd_and_damped(out: Path, n: int, t_end: float, damping: str, dt: float = DT) -> dict:
    arm = ARMS[n]
    engine = _engine(arm_urdf(arm))
    free, _ = simulate(engine, arm, np.zeros(n), t_end, damping=damping, dt=dt)
    ref_deg, kp, kd = (np.asarray(v) for v in PD_RUNS[n])
    ref = np.radians(ref_deg)
    pd, _ = simulate(engine, arm, np.zeros(n), t_end, damping=damping, dt=dt,
                     control=lambda t, q, qd: kp * (ref - q) - kd * qd)
    _angles_figure(out / f'fig{n}_{n}link.png',
                   {'(a) damped oscillation': free, '(b) PD control': pd},
                   f'Kusaka and Tanaka 2022, Fig. {n}: {n}-link pendulum', refs=ref_deg)
    balance = static_balance(arm, ref_deg, kp)
    return {
        'damped': _damped_summary(engine, arm, free),
        'pd': {'target_deg': ref_deg.tolist(), 'kp': kp.tolist(), 'kd': kd.tolist(),
               'final_deg': np.degrees(pd.q[-1]).tolist(),
               'static_balance_deg': np.degrees(balance).tolist(),
               'final_minus_balance_max_abs_rad': float(np.abs(pd.q[-1] - balance).max()),
               'final_speed_max': float(np.abs(pd.qd[-1]).max())},
    }


def reconstruction(out: Path, t_end: float, damping: str, dt: float = DT) -> dict:
    """Fig. 4: joint 2 of the 3-link arm becomes a slider, PID from 1.0 m to 0.1 m."""
    base = ARMS[3]
    arm = Arm(base.lengths, base.masses, base.damping, kinds=('R', 'P', 'R'))
    old_model = RobotModel.from_urdf(arm_urdf(base), gravity=(0.0, 0.0, -G))
    engine = _engine(slider_urdf(base))
    kp, ki, kd = SLIDER_PID

    def pid(what, q, qd, z):
        err = SLIDER_REF - q[1]
        if what == 'dz':
            return np.array([err])
        return np.array([0.0, kp * err + ki * z[0] - kd * qd[1], 0.0])

    q0 = np.array([0.0, base.lengths[1], 0.0])
    run, _ = simulate(engine, arm, q0, t_end, damping=damping, extra=1, extra_rhs=pid,
                      dt=dt)

    # [PL]'s point: the reconstructed model reuses the first column (link 1's)
    rng = np.random.default_rng(0)
    q_old = rng.uniform(-1, 1, (3, 3))
    old = PartialLagrangian(old_model).decompose(*q_old)
    q_new = q_old.copy()
    q_new[:, 1] = rng.uniform(0.1, 1.0, 3)       # the slider's coordinate is new
    extended = engine.extend(old, old_model, q_new[0], q_new[1], q_new[2])
    full = engine.decompose(q_new[0], q_new[1], q_new[2])
    plan = engine.last_extension
    assert plan is not None

    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(11.0, 4.0))
    ax = fig.add_subplot(1, 2, 1, projection='3d')
    picks = np.linspace(0, run.t.size - 1, 25).astype(int)
    for k in picks:
        p, _ = planar_jacobians(arm, run.q[k])
        pts = np.vstack([[0.0, 0.0], p])
        ax.plot(np.full(4, run.t[k]), pts[:, 0], pts[:, 1], '-o', ms=2, lw=1,
                color=plt.cm.viridis(run.t[k] / run.t[-1]))
    ax.set_xlabel('time [s]')
    ax.set_ylabel('x [m]')
    ax.set_zlabel('height [m]')
    ax.set_title('(a) the arm over time (time as the third axis)')
    ax2 = fig.add_subplot(1, 2, 2)
    ax2.plot(run.t, run.q[:, 1], label='slider length $l_2$ [m]')
    ax2.axhline(SLIDER_REF, color='k', ls=':', lw=0.8)
    ax2.plot(run.t, run.q[:, 0], label=r'$\theta_1$ [rad]')
    ax2.plot(run.t, run.q[:, 2], label=r'$\theta_3$ [rad]')
    ax2.set_xlabel('time [s]')
    ax2.grid(True, alpha=0.3)
    ax2.legend()
    ax2.set_title('(b) slider under PID, joints 1 and 3 damped')
    fig.suptitle('Kusaka and Tanaka 2022, Fig. 4: joint 2 reconstructed from revolute to '
                 'slider')
    fig.tight_layout()
    fig.savefig(out / 'fig4_reconstruction.png', dpi=110)
    plt.close(fig)
    return {
        'pid': {'kp': kp, 'ki': ki, 'kd': kd, 'target_m': SLIDER_REF,
                'initial_m': base.lengths[1]},
        'final_slider_m': float(run.q[-1, 1]),
        'final_speed_max': float(np.abs(run.qd[-1]).max()),
        'extend_reused_columns': list(plan.reused),
        'extend_recomputed_columns': sorted(plan.recomputed),
        'extend_minus_full_max_abs': float(
            (extended.partial - full.partial).abs().max()),
    }


def ten_dof(out: Path, t_end: float, damping: str, dt: float = DT) -> dict:
    arm = ARMS[10]
    engine = _engine(arm_urdf(arm))
    run, _ = simulate(engine, arm, np.zeros(arm.n), t_end, damping=damping, every=10, dt=dt)
    _angles_figure(out / 'fig5a_10dof.png', {'(a) damped oscillation, 10 DoF': run},
                   'Kusaka and Tanaka 2022, Fig. 5a: 10-DoF damped pendulum')
    return _damped_summary(engine, arm, run)


ASSUMPTIONS = {
    'masses': "point masses at the link ends (K_i = 1/2 m_i |p_i'|^2)",
    'angles': 'relative (theta_12 = theta_1 + theta_2), counter-clockwise from horizontal',
    'damping': "Rayleigh R_i = 1/2 d_i |p_i'|^2 on the mass velocity (Listing A1) unless "
               '--damping joint',
    'pd': "Kp (theta_ref - theta) - Kd theta' on the relative angles, damping kept on",
    'unstated_links': 'link 3 and links 4-10: m = 1 kg, l = 1 m, d = 1 (as link 2)',
    'initial_state': 'at rest, arm horizontal (all angles 0); slider at l2 = 1 m, theta_2 '
                     'frozen at 0',
    'slider_pid': 'Kp 200 N/m, Ki 100 N/(m s), Kd 50 N s/m',
    'integrator': 'RK4 on the engine M and C qd + g',
    'gravity_m_s2': G,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('output_dir', type=Path, help='folder for the figures and summary')
    parser.add_argument('--duration', type=float, default=10.0,
                        help='seconds per run [10]; the 10-DoF run lasts twice as long')
    parser.add_argument('--damping', choices=('tip', 'joint'), default='tip',
                        help='Rayleigh damping on the mass velocity (Listing A1) or at the '
                             'joints [tip]')
    parser.add_argument('--dt', type=float, default=DT, help=f'RK4 step [s] [{DT}]')
    parser.add_argument('--only', choices=('pd', 'slider', '10dof'), action='append',
                        help='run only these parts (repeatable)')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    parts = set(args.only or ('pd', 'slider', '10dof'))
    summary: dict = {'assumptions': {**ASSUMPTIONS, 'damping_mode': args.damping,
                                     'dt_s': args.dt},
                     'duration_s': args.duration}
    if 'pd' in parts:
        for n in (1, 2, 3):
            summary[f'{n}_link'] = pd_and_damped(out, n, args.duration, args.damping, args.dt)
    if 'slider' in parts:
        summary['reconstruction'] = reconstruction(out, args.duration, args.damping, args.dt)
    if '10dof' in parts:
        summary['10_dof'] = ten_dof(out, 2 * args.duration, args.damping, args.dt)
    save_summary(out, summary)
    return 0


if __name__ == '__main__':
    sys.exit(main())
