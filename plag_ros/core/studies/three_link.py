"""Three-link study of Gunji, Kusaka and Tanaka 2025 [MPF] (Table 2; Figures 5-9 and 10-14).

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.

Section 3 of [MPF], in the paper's signs: a planar three-link arm, l = 0.25 m, lg = 0.125 m,
m = 0.6 kg, I = 5e-3 kg m^2 per link (Table 2), driven by two motions and decomposed with
the partial Lagrangian engine:

* **Simulated input** (Figs. 10-14): only link 3 moves for the first 3 s, then links 2
  and 3 together. Written as ``fig10_motion.png``, ``fig11_joint_torque.png``,
  ``fig12_partial_torque_joint1.png``, ``fig13_velocity_propagation_joint1.png`` and
  ``fig14_acceleration_propagation_joint1.png``.
* **Experiment-like input** (Figs. 5-9): the paper moved a CRANE-X7 by hand, link 3 until
  about 4 s, then link 2, and took velocity and acceleration by a five-point derivative
  and a low-pass filter. We have no recording, so the motion is synthesised the same way
  (hand-like bumps, with a small unintended motion of the resting joints, "albeit
  slightly"), quantised to 12-bit encoder counts at 200 Hz with stamp jitter and passed
  through the package's offline estimator
  (:func:`plag_ros.core.estimation.filters.estimate_offline`). Written as ``fig05_motion.png`` ...
  ``fig09_acceleration_propagation_joint1.png``.

Figures 8-9 and 13-14 show the motion propagation torque ``tau^p_1j(theta_j^(m))`` of
eq. 1: the part of link j's partial torque at joint 1 that joint j's own velocity
(m = 1) or acceleration (m = 2) propagates, ``velocity[:, 0, j, j]`` and
``acceleration[:, 0, j, j]`` of :class:`plag_ros.core.dynamics.engine.Decomposition`.

**Sign convention.** Joints turn about -y, links along +x, gravity -z: seen with x to the
right and z up, a positive angle is counter-clockwise and lifts the arm, as the papers'
``e(theta) = (cos, sin)``. (About +y, as this study used before, a positive angle lowers
the arm and every gravity term is mirrored.) ``summary.json`` checks the gravity torque
at the horizontal pose against ``g sum_i m_i x_i``, which is positive in this convention.

**The 1/2 on the velocity part.** Eq. 1 read literally, ``tau^p(qd_s) = d tau/d qd_s *
qd_s``, sums over s to *twice* the velocity-product torque V(q, qd): V is a quadratic form
in qd, and Euler's theorem for homogeneous functions of degree 2 gives ``sum_s qd_s
dV/dqd_s = 2 V``. Eq. 10 carries the 1/2, and the engine uses it, so acceleration +
velocity + gravity parts add up to the partial torque. ``fig_velocity_half.png`` shows
both readings for tau_13; ``summary.json`` holds the residuals of both (the literal
reading misses the partial torque by exactly V). The literal parts are computed here
independently of the engine's velocity output, by a central difference of the partial
torque in qd (exact for a quadratic, so only rounding remains).

Also ``fig_partial_impedance.png`` (not in the paper; its section 4 proposal): joint 1 held
by a joint impedance while joints 2 and 3 follow the simulated motion on the simulated arm,
with no propagation compensated and with the 2 -> 1 and 3 -> 1 paths cancelled.

Gravity 9.81 m/s^2 ([MPF] does not state it). Run:
``python examples/three_link_study.py OUT [--duration 6] [--rate 200] [--no-control]``
(or ``plag-ros study three-link OUT``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from plag_ros.core.control.config import ImpedanceConfig, propagation_mask
from plag_ros.core.control.impedance import PartialImpedanceController
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.estimation.filters import EstimatorConfig, estimate_offline
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig
from plag_ros.core.studies.common import planar_chain_urdf, plot_lines, save_summary

__all__ = ['LENGTH', 'COM', 'MASS', 'INERTIA', 'three_link_urdf', 'motion',
           'experiment_motion', 'literal_velocity_parts', 'main']

LENGTH, COM, MASS, INERTIA = 0.25, 0.125, 0.6, 5e-3   # [MPF] Table 2, every link
COLORS = ('tab:red', 'tab:blue', 'tab:green')           # the paper's line colours
COUNTS_PER_REV = 4096                                   # 12-bit encoder (CRANE-X7 servos)


def three_link_urdf() -> str:
    """Planar 3-link arm of Table 2 in the paper's sign convention (module docstring)."""
    return planar_chain_urdf([LENGTH] * 3, [MASS] * 3, com=[COM] * 3, inertia=[INERTIA] * 3,
                             name='three_link_arm')


def motion(t: np.ndarray, *, switch_s: float = 3.0, period_s: float = 1.5):
    """Figure 10-like input: joint 3 swings from t = 0, joint 2 joins at ``switch_s``.

    Each moving joint follows ``A (1 - cos(2 pi (t - t0) / T))`` (starts at rest);
    joint 1 never moves. Returns q, qd, qdd, each (N, 3) [rad, rad/s, rad/s^2].
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


def _bump(t: np.ndarray, start: float, stop: float, amplitude: float,
          swings: int = 2) -> np.ndarray:
    """Hand-like back-and-forth: ``swings`` cycles of ``A (1 - cos)/2`` on [start, stop]."""
    s = np.clip((t - start) / (stop - start), 0.0, 1.0)
    return 0.5 * amplitude * (1.0 - np.cos(2.0 * np.pi * swings * s))


def experiment_motion(t: np.ndarray, *, switch_s: float = 4.0, leak: float = 0.03,
                      seed: int = 0) -> np.ndarray:
    """Figure 5-like true joint angles (N, 3) [rad]: link 3 moved until ``switch_s``, then
    link 2, by hand; the resting joints move by ``leak`` of the moving one's amplitude."""
    rng = np.random.default_rng(seed)
    end = t[-1] if t.size else switch_s
    q = np.zeros((t.size, 3))
    q[:, 2] = _bump(t, 0.3, switch_s - 0.3, 0.8)
    q[:, 1] = _bump(t, switch_s + 0.2, max(end - 0.3, switch_s + 1.0), 0.6)
    q[:, 0] = leak * _bump(t, 0.5, end - 0.5, 0.5 * rng.uniform(0.5, 1.0), 3)
    q[:, 2] += leak * _bump(t, switch_s + 0.4, max(end - 0.5, switch_s + 1.0), 0.6)
    q[:, 1] += leak * _bump(t, 0.4, switch_s - 0.4, 0.8)
    return q


def measured_experiment(duration: float, rate: float, *, jitter_s: float = 0.4e-3,
                        seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stamps [s], true angles and 12-bit encoder readings of the experiment-like motion."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration, 1.0 / rate)
    t = t + rng.uniform(-jitter_s, jitter_s, t.size) * (np.arange(t.size) > 0)
    t.sort()
    q = experiment_motion(t, switch_s=min(4.0, duration / 2))
    step = 2.0 * np.pi / COUNTS_PER_REV
    return t, q, np.round(q / step) * step


def literal_velocity_parts(engine: PartialLagrangian, q, qd, qdd, *,
                           h: float = 1e-3) -> np.ndarray:
    """Eq. 1 taken literally, ``d partial[k, i] / d qd_s * qd_s``, (N, n, B, n).

    Computed from the engine's *partial* torques only, by a central difference in qd_s:
    the partial torque is a quadratic in qd, for which the central difference is exact
    (only rounding, ~1e-13 N*m / h, remains). Independent of the engine's velocity field.
    """
    q, qd, qdd = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, qd, qdd))
    n = q.shape[-1]
    out = []
    for s in range(n):
        e = np.zeros(n)
        e[s] = h
        up = engine.decompose(q, qd + e, qdd).partial.numpy()
        down = engine.decompose(q, qd - e, qdd).partial.numpy()
        out.append((up - down) / (2.0 * h) * qd[:, None, None, s])
    return np.stack(out, axis=-1)


def _propagation_figures(out: Path, t, d, q, qd, qdd, numbers: tuple[int, ...],
                         what: str) -> None:
    """Figures (motion, joint torque, partial torque, velocity and acceleration
    propagation into joint 1) numbered like the paper's."""
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    f_motion, f_tau, f_partial, f_vel, f_acc = numbers
    fig, axes = plt.subplots(3, 1, figsize=(7.0, 7.0), sharex=True)
    for ax, x, name in zip(axes, (q, qd, qdd), ('angle [rad]', 'velocity [rad/s]',
                                                 'acceleration [rad/s^2]'), strict=True):
        for j in range(3):
            ax.plot(t, x[:, j], color=COLORS[j], label=f'joint {j + 1}')
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    axes[0].legend()
    axes[0].set_title(f'Fig. {f_motion}: {what}')
    axes[-1].set_xlabel('time [s]')
    fig.tight_layout()
    fig.savefig(out / f'fig{f_motion:02d}_motion.png', dpi=120)
    plt.close(fig)
    tau, partial = d['torque'], d['partial']
    plot_lines(out / f'fig{f_tau:02d}_joint_torque.png', t, tau.T,
               [r'$\tau_1$', r'$\tau_2$', r'$\tau_3$'], f'Fig. {f_tau}: joint torques',
               'torque [N m]', colors=COLORS)
    plot_lines(out / f'fig{f_partial:02d}_partial_torque_joint1.png', t, partial[:, 0, :].T,
               [r'$\tau_{11}$', r'$\tau_{12}$', r'$\tau_{13}$'],
               f'Fig. {f_partial}: partial torques at joint 1 (sum = $\\tau_1$)',
               'torque [N m]', colors=COLORS)
    # tau_1j^p(theta_j^(m)): link j's partial torque at joint 1, joint j's own term.
    vel = [d['velocity'][:, 0, j, j] for j in (1, 2)]
    acc = [d['acceleration'][:, 0, j, j] for j in (1, 2)]
    plot_lines(out / f'fig{f_vel:02d}_velocity_propagation_joint1.png', t, vel,
               [r'$\tau^p_{12}(\theta_2^{(1)})$', r'$\tau^p_{13}(\theta_3^{(1)})$'],
               f'Fig. {f_vel}: velocity propagation torque into joint 1', 'torque [N m]',
               colors=COLORS[1:])
    plot_lines(out / f'fig{f_acc:02d}_acceleration_propagation_joint1.png', t, acc,
               [r'$\tau^p_{12}(\theta_2^{(2)})$', r'$\tau^p_{13}(\theta_3^{(2)})$'],
               f'Fig. {f_acc}: acceleration propagation torque into joint 1', 'torque [N m]',
               colors=COLORS[1:])


def _identities(d: dict) -> dict:
    parts = d['acceleration'].sum(-1) + d['velocity'].sum(-1) + d['gravity']
    return {
        'max_abs_sum_partial_minus_torque': float(np.abs(d['partial'].sum(-1)
                                                         - d['torque']).max()),
        'max_abs_components_minus_partial': float(np.abs(parts - d['partial']).max()),
    }


def simulated_figures(out: Path, engine: PartialLagrangian, t: np.ndarray) -> dict:
    """Figures 10-14 and their checks."""
    q, qd, qdd = motion(t)
    d = engine.decompose(q, qd, qdd).numpy()
    _propagation_figures(out, t, d, q, qd, qdd, (10, 11, 12, 13, 14),
                         'simulated motion (link 3 only for 3 s, then links 2 and 3)')
    first = t < 3.0
    vel = [d['velocity'][:, 0, j, j] for j in (1, 2)]
    acc = [d['acceleration'][:, 0, j, j] for j in (1, 2)]
    return {
        **_identities(d),
        'max_abs_tau12p_first_3s': float(max(np.abs(vel[0][first]).max(),
                                             np.abs(acc[0][first]).max())),
        'max_abs_tau13p_acceleration': float(np.abs(acc[1]).max()),
        'max_abs_tau13p_velocity': float(np.abs(vel[1]).max()),
    }


def experiment_figures(out: Path, engine: PartialLagrangian, duration: float,
                       rate: float) -> dict:
    """Figures 5-9 from encoder-quantised, jittered samples through the offline estimator."""
    t, q_true, q_meas = measured_experiment(duration, rate)
    config = EstimatorConfig(rate_hz=rate)
    q, qd, qdd = estimate_offline(np.round(t * 1e9).astype(np.int64), q_meas, config)
    d = engine.decompose(q, qd, qdd).numpy()
    _propagation_figures(out, t, d, q, qd, qdd, (5, 6, 7, 8, 9),
                         'experiment-like motion (12-bit encoder, five-point + low-pass)')
    switch = min(4.0, duration / 2)
    first, second = t < switch, t >= switch
    acc12, acc13 = d['acceleration'][:, 0, 1, 1], d['acceleration'][:, 0, 2, 2]
    return {
        'experiment_' + k: v for k, v in {
            **_identities(d),
            'estimator': {'cutoff_hz': config.cutoff_hz, 'order': config.order,
                          'rate_hz': rate, 'counts_per_rev': COUNTS_PER_REV},
            # the moving link dominates its half; the resting one shows its slight motion
            'rms_tau12p_acceleration_first_half': float(np.sqrt(np.mean(acc12[first] ** 2))),
            'rms_tau12p_acceleration_second_half': float(np.sqrt(np.mean(acc12[second] ** 2))),
            'rms_tau13p_acceleration_first_half': float(np.sqrt(np.mean(acc13[first] ** 2))),
        }.items()}


def velocity_half_figure(out: Path, engine: PartialLagrangian, t: np.ndarray) -> dict:
    """Eq. 1 literally vs with eq. 10's 1/2, on the simulated motion (tau_13)."""
    q, qd, qdd = motion(t)
    d = engine.decompose(q, qd, qdd).numpy()
    literal = literal_velocity_parts(engine, q, qd, qdd)           # (N, n, B, n)
    V = d['partial'] - d['acceleration'].sum(-1) - d['gravity']     # velocity products
    literal_sum = literal.sum(-1)
    halved_sum = 0.5 * literal_sum
    plot_lines(out / 'fig_velocity_half.png', t,
               [V[:, 0, 2], literal_sum[:, 0, 2], d['velocity'][:, 0, 2].sum(-1)],
               ['velocity-product part of $\\tau_{13}$',
                r'eq. 1 literally: $\sum_s \partial\tau_{13}/\partial\dot\theta_s\,'
                r'\dot\theta_s$ (= 2x)',
                r'with the 1/2 of eq. 10 (engine)'],
               'Velocity propagation parts of $\\tau_{13}$: the 1/2 (Euler, degree 2)',
               'torque [N m]', colors=('k', 'tab:orange', 'tab:green'),
               styles=('-', '-', '--'))
    scale = float(np.abs(V).max())
    return {
        'velocity_product_max_abs': scale,
        # literal reading: parts overshoot the partial torque by exactly V
        'literal_sum_minus_2V_max_abs': float(np.abs(literal_sum - 2 * V).max()),
        'literal_residual_vs_partial_max_abs': float(np.abs(
            d['acceleration'].sum(-1) + literal_sum + d['gravity'] - d['partial']).max()),
        'halved_residual_vs_partial_max_abs': float(np.abs(
            d['acceleration'].sum(-1) + halved_sum + d['gravity'] - d['partial']).max()),
        'engine_velocity_minus_halved_literal_max_abs': float(np.abs(
            d['velocity'] - 0.5 * literal).max()),
    }


def gravity_sign_check(engine: PartialLagrangian) -> dict:
    """Gravity torques at the horizontal pose vs ``g sum_{i >= k} m_i (x_i - x_k)``."""
    g = -engine.model.gravity[2]
    x_com = np.array([COM, LENGTH + COM, 2 * LENGTH + COM])
    x_joint = np.array([0.0, LENGTH, 2 * LENGTH])
    expected = [g * MASS * float(np.sum(x_com[k:] - x_joint[k])) for k in range(3)]
    got = engine.gravity_torque(np.zeros(3)).numpy()
    # and at 90 degrees on joint 1 (arm straight up) gravity holds nothing
    up = engine.gravity_torque(np.array([np.pi / 2, 0.0, 0.0])).numpy()
    return {'gravity_torque_horizontal': got.tolist(),
            'gravity_torque_horizontal_expected': expected,
            'gravity_torque_straight_up_max_abs': float(np.abs(up).max())}

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
                           command_interface='effort', rate_hz=rate,
                           estimator=EstimatorConfig(cutoff_hz=0.15 * rate, rate_hz=rate))
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
    import matplotlib

    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    summary = {}
    for (name, (t_run, q_run)), color in zip(runs.items(), ('tab:gray', 'tab:red'),
                                             strict=True):
        ax.plot(t_run, np.degrees(q_run[:, 0]), color=color, label=name)
        summary[name] = float(np.sqrt(np.mean(q_run[t_run > 0.2, 0] ** 2)))
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
    parser.add_argument('output_dir', type=Path, help='folder for the figures and summary')
    parser.add_argument('--duration', type=float, default=6.0,
                        help='seconds of simulated motion [6]; the experiment-like run '
                             'lasts 4/3 of it')
    parser.add_argument('--rate', type=float, default=200.0, help='sample rate [Hz] [200]')
    parser.add_argument('--no-control', action='store_true',
                        help='skip the closed-loop partial-impedance figure')
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    out = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    engine = PartialLagrangian(RobotModel.from_urdf(three_link_urdf()))
    t = np.arange(0.0, args.duration, 1.0 / args.rate)
    summary = {'convention': 'joints about -y, links along +x, gravity -z: positive angle '
                             'counter-clockwise (x right, z up), lifting the arm',
               'gravity': list(engine.model.gravity)}
    summary.update(simulated_figures(out, engine, t))
    summary.update(experiment_figures(out, engine, args.duration * 4 / 3, args.rate))
    summary.update(velocity_half_figure(out, engine, t))
    summary.update(gravity_sign_check(engine))
    if not args.no_control:
        summary.update(impedance_figure(out, engine, args.duration, args.rate))
    save_summary(out, summary)
    return 0


if __name__ == '__main__':
    sys.exit(main())
