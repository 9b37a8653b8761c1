"""Seed 002's three-link arm study (Table 2, Figures 10-14), plus its impedance idea.

Gunji, Kusaka and Tanaka (Robotics 2025, 14, 54), section 3: a planar three-link arm with
l = 0.25 m, lg = 0.125 m, m = 0.6 kg, I = 5e-3 kg m^2 per link is driven by a made-up
motion in which only link 3 moves for the first 3 s, then links 2 and 3 move together.
This script builds that arm as a URDF, decomposes the motion with the partial Lagrangian
engine and draws the paper's figures:

* ``fig10_motion.png``: joint angles, velocities, accelerations (the input).
* ``fig11_joint_torque.png``: joint torques tau_1, tau_2, tau_3.
* ``fig12_partial_torque_joint1.png``: partial torques at joint 1, tau_11, tau_12, tau_13
  (they add up to tau_1).
* ``fig13_velocity_propagation_joint1.png``: tau_12^p(theta_2^(1)), tau_13^p(theta_3^(1))
  (seed 002 eq. 1, m = 1: the velocity part of link j's partial torque at joint 1 that
  comes from joint j's own velocity).
* ``fig14_acceleration_propagation_joint1.png``: tau_12^p(theta_2^(2)),
  tau_13^p(theta_3^(2)) (m = 2, acceleration).
* ``fig_partial_impedance.png`` (not in the paper; its section 4 proposal): joint 1 held
  by a joint impedance while joints 2 and 3 follow the same motion in closed loop on the
  simulated arm, with no propagation compensated and with the 2 -> 1 and 3 -> 1 paths
  cancelled (:mod:`plag_ros.control`).

It also writes ``summary.json`` with the identity checks (partial torques sum to the joint
torque, components sum to the partial torque, tau_12^p is zero while link 2 rests) and
the closed-loop deviation figures.

Usage: ``python examples/three_link_study.py OUTPUT_DIR [--duration 6] [--rate 200]``.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402 - after selecting the Agg backend
import numpy as np  # noqa: E402
import torch  # noqa: E402

from plag_ros.control import (  # noqa: E402
    ImpedanceConfig,
    PartialImpedanceController,
    propagation_mask,
)
from plag_ros.dynamics import PartialLagrangian  # noqa: E402
from plag_ros.filters import EstimatorConfig  # noqa: E402
from plag_ros.model import RobotModel  # noqa: E402
from plag_ros.simulation import Simulator, SimulatorConfig  # noqa: E402

LENGTH, COM, MASS, INERTIA = 0.25, 0.125, 0.6, 5e-3   # seed 002 Table 2, every link
COLORS = ('tab:red', 'tab:blue', 'tab:green')           # the paper's line colours


def three_link_urdf() -> str:
    """Planar 3-link arm of Table 2: joints about +y, links along +x, gravity in the plane."""
    parts = ['<robot name="three_link_arm">', '<link name="world"/>']
    parent, offset = 'world', 0.0
    for a in range(1, 4):
        parts.append(
            f'<link name="link{a}"><inertial><origin xyz="{COM} 0 0"/>'
            f'<mass value="{MASS}"/><inertia ixx="1e-6" iyy="{INERTIA}" izz="1e-6" '
            'ixy="0" ixz="0" iyz="0"/></inertial></link>')
        parts.append(
            f'<joint name="joint{a}" type="continuous"><parent link="{parent}"/>'
            f'<child link="link{a}"/><origin xyz="{offset} 0 0"/><axis xyz="0 1 0"/>'
            '</joint>')
        parent, offset = f'link{a}', LENGTH
    parts.append('</robot>')
    return '\n'.join(parts)


def motion(t: np.ndarray, *, switch_s: float = 3.0, period_s: float = 1.5):
    """Figure 10-like input: joint 3 swings from t = 0, joint 2 joins at ``switch_s``.

    Each moving joint follows ``A (1 - cos(2 pi (t - t0) / T))`` (starts at rest);
    joint 1 never moves. Returns q, qd, qdd, each (N, 3).
    """
    w = 2.0 * np.pi / period_s
    q, qd, qdd = (np.zeros((t.size, 3)) for _ in range(3))
    for joint, start, amplitude in ((2, 0.0, 0.5), (1, switch_s, 0.4)):
        tau = np.clip(t - start, 0.0, None)
        on = t >= start
        q[:, joint] = on * amplitude * (1.0 - np.cos(w * tau))
        qd[:, joint] = on * amplitude * w * np.sin(w * tau)
        qdd[:, joint] = on * amplitude * w * w * np.cos(w * tau)
    return q, qd, qdd


def _plot(path: Path, t, series, labels, title: str, ylabel: str, colors=COLORS) -> None:
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    for y, label, color in zip(series, labels, colors, strict=True):
        ax.plot(t, y, color=color, label=label)
    ax.set_xlabel('time [s]')
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def decomposition_figures(out: Path, engine: PartialLagrangian, t: np.ndarray) -> dict:
    """Figures 10-14 and the identity checks."""
    q, qd, qdd = motion(t)
    d = engine.decompose(q, qd, qdd).numpy()
    fig, axes = plt.subplots(3, 1, figsize=(7.0, 7.0), sharex=True)
    for ax, x, name in zip(axes, (q, qd, qdd), ('angle [rad]', 'velocity [rad/s]',
                                                 'acceleration [rad/s^2]'), strict=True):
        for j in range(3):
            ax.plot(t, x[:, j], color=COLORS[j], label=f'joint {j + 1}')
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    axes[0].set_title('Fig. 10: simulated motion (link 3 only for 3 s, then links 2 and 3)')
    axes[-1].set_xlabel('time [s]')
    fig.tight_layout()
    fig.savefig(out / 'fig10_motion.png', dpi=120)
    plt.close(fig)

    tau, partial = d['torque'], d['partial']
    _plot(out / 'fig11_joint_torque.png', t, tau.T, [r'$\tau_1$', r'$\tau_2$', r'$\tau_3$'],
          'Fig. 11: joint torques', 'torque [N m]')
    _plot(out / 'fig12_partial_torque_joint1.png', t, partial[:, 0, :].T,
          [r'$\tau_{11}$', r'$\tau_{12}$', r'$\tau_{13}$'],
          'Fig. 12: partial torques at joint 1 (sum = $\\tau_1$)', 'torque [N m]')
    # tau_1j^p(theta_j^(m)): link j's partial torque at joint 1, joint j's own term.
    vel = [d['velocity'][:, 0, j, j] for j in (1, 2)]
    acc = [d['acceleration'][:, 0, j, j] for j in (1, 2)]
    _plot(out / 'fig13_velocity_propagation_joint1.png', t, vel,
          [r'$\tau^p_{12}(\dot\theta_2)$', r'$\tau^p_{13}(\dot\theta_3)$'],
          'Fig. 13: velocity propagation torque into joint 1', 'torque [N m]',
          colors=COLORS[1:])
    _plot(out / 'fig14_acceleration_propagation_joint1.png', t, acc,
          [r'$\tau^p_{12}(\ddot\theta_2)$', r'$\tau^p_{13}(\ddot\theta_3)$'],
          'Fig. 14: acceleration propagation torque into joint 1', 'torque [N m]',
          colors=COLORS[1:])
    parts = d['acceleration'].sum(-1) + d['velocity'].sum(-1) + d['gravity']
    first = t < 3.0
    return {
        'max_abs_sum_partial_minus_torque': float(np.abs(partial.sum(-1) - tau).max()),
        'max_abs_components_minus_partial': float(np.abs(parts - partial).max()),
        'max_abs_tau12p_first_3s': float(max(np.abs(vel[0][first]).max(),
                                             np.abs(acc[0][first]).max())),
        'max_abs_tau13p_acceleration': float(np.abs(acc[1]).max()),
    }


def impedance_figure(out: Path, engine: PartialLagrangian, t_end: float, rate: float) -> dict:
    """Closed loop on the simulated arm: joint 1 held, joints 2 and 3 track the motion."""
    model = engine.model
    # Gains from the apparent inertia 1 / (M^-1)_jj (the other joints free), ~10x below
    # M_jj here: about 3 Hz bandwidth and damping ratio 0.7 keep the 200 Hz loop with a
    # filtered velocity stable.
    m = 1.0 / np.diag(np.linalg.inv(engine.mass_matrix(np.zeros(3)).numpy()))
    K = np.array([10.0, 2.0, 1.0])                      # N m / rad
    D = 2.0 * 0.7 * np.sqrt(K * m)

    class Reference:
        def sample(self, t_s, anchor):
            q, qd, qdd = motion(np.array([t_s]))
            return q[0] + anchor, qd[0], qdd[0]

    base = ImpedanceConfig(stiffness=K, damping=D, start_enabled=True, ramp_s=0.0,
                           rate_hz=rate, estimator=EstimatorConfig(cutoff_hz=0.15 * rate,
                                                                   rate_hz=rate))
    # The moving joints track with their own inertia and velocity feedforward (desired
    # motion); only the paths into joint 1 differ between the two runs.
    tracking = propagation_mask(model, ['joint2<-*', 'joint3<-*'])
    cancel = propagation_mask(model, ['joint1<-joint2', 'joint1<-joint3'])
    runs = {}
    for name, mask in (('joint impedance (nothing compensated)', tracking),
                       ('2->1 and 3->1 paths cancelled', tracking + cancel)):
        cfg = base.replace(acceleration_mask=mask, velocity_mask=mask,
                           motion_source='desired')
        sim = Simulator(model, SimulatorConfig(kp=0.0, kd=0.0, friction=False), engine=engine)
        sim.reset(np.zeros(3))
        ctl = PartialImpedanceController(engine, cfg, Reference())
        ts, qs = [], []
        for c in range(int(t_end * rate)):
            measured = sim.measure()
            cmd = ctl.update(int(c * 1e9 / rate), measured.q)
            if cmd is not None:
                sim.set_effort_command(cmd.effort)
            ts.append(c / rate)
            qs.append(measured.q)
            sim.step(1.0 / rate)
        runs[name] = (np.array(ts), np.array(qs))
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    summary = {}
    for (name, (ts, qs)), color in zip(runs.items(), ('tab:gray', 'tab:red'), strict=True):
        ax.plot(ts, np.degrees(qs[:, 0]), color=color, label=name)
        summary[name] = float(np.sqrt(np.mean(qs[ts > 0.2, 0] ** 2)))
    ax.set_xlabel('time [s]')
    ax.set_ylabel('joint 1 deviation [deg]')
    ax.set_title(f'Partial impedance: joint 1 held (K = {K[0]:g} N m/rad) while 2, 3 move')
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / 'fig_partial_impedance.png', dpi=120)
    plt.close(fig)
    plain, cancelled = summary.values()
    return {'joint1_rms_deviation_rad': summary, 'deviation_ratio': plain / cancelled}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('output_dir', type=Path, help='folder for the PNG figures')
    parser.add_argument('--duration', type=float, default=6.0, help='seconds [6]')
    parser.add_argument('--rate', type=float, default=200.0, help='sample rate [Hz] [200]')
    parser.add_argument('--no-control', action='store_true',
                        help='skip the closed-loop partial-impedance figure')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    engine = PartialLagrangian(RobotModel.from_urdf(three_link_urdf()))
    t = np.arange(0.0, args.duration, 1.0 / args.rate)
    summary = decomposition_figures(out, engine, t)
    if not args.no_control:
        summary.update(impedance_figure(out, engine, args.duration, args.rate))
    (out / 'summary.json').write_text(json.dumps(summary, indent=2) + '\n')
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
