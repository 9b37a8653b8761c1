"""``plag-ros demo``: decompose a CRANE-X7 motion offline and print where the torque comes from.

No ROS needed: a smooth test motion in the spirit of the CRANE-X7 experiment of Gunji, Kusaka
and Tanaka 2025 [MPF] (the elbow moves alone, then the shoulder joins in) is decomposed by the
partial Lagrangian engine, and the command prints the RMS of every component per joint and
the largest motion propagation paths (which joint's velocity or acceleration loads which
other joint).

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

__all__ = ['demo_trajectory', 'summarize', 'configure', 'run']


def demo_trajectory(duration_s: float = 6.0, rate_hz: float = 200.0,
                    n_joints: int = 9) -> tuple[np.ndarray, ...]:
    """Smooth test motion with analytic derivatives.

    Joint 4 (elbow) swings 0.8 rad at 0.5 Hz for the whole motion; joint 2 (shoulder tilt)
    joins with a 0.4 rad, 0.7 Hz swing after half the duration, ramped in C2-smoothly; the
    wrist turns slowly. Every other joint holds.

    Returns:
        t [s] (N,), q [rad], qd [rad/s], qdd [rad/s^2] (N, n_joints).
    """
    t = np.arange(0.0, duration_s, 1.0 / rate_hz)
    q = np.zeros((t.size, n_joints))
    qd = np.zeros_like(q)
    qdd = np.zeros_like(q)

    def swing(k, amp, freq, offset=0.0, envelope=None):
        w = 2 * np.pi * freq
        s, ds, dds = amp * np.sin(w * t), amp * w * np.cos(w * t), -amp * w * w * np.sin(w * t)
        e, de, dde = envelope if envelope is not None else (1.0, 0.0, 0.0)
        q[:, k] = offset + e * s
        qd[:, k] = de * s + e * ds
        qdd[:, k] = dde * s + 2 * de * ds + e * dds

    # C2 'smootherstep' envelope from duration/2 over 1 s, e = 10x^3 - 15x^4 + 6x^5, so the
    # acceleration stays continuous (a C1 ramp would put a step into qdd and the torques)
    x = np.clip((t - duration_s / 2) / 1.0, 0.0, 1.0)
    envelope = (10 * x ** 3 - 15 * x ** 4 + 6 * x ** 5,
                30 * x ** 2 - 60 * x ** 3 + 30 * x ** 4,
                60 * x - 180 * x ** 2 + 120 * x ** 3)
    swing(3, 0.8, 0.5, offset=-1.2)
    swing(1, 0.4, 0.7, offset=0.3, envelope=envelope)
    swing(6, 0.5, 0.25)
    return t, q, qd, qdd


def summarize(decomposition: dict[str, np.ndarray], joint_names, top: int = 8) -> str:
    """Text report: RMS per component and joint, and the largest propagation paths.

    Args:
        decomposition: :meth:`Decomposition.numpy` arrays with a leading time axis.
        joint_names: (n,) names for the rows.
        top: number of propagation paths listed.
    """
    rms = {name: np.sqrt(np.mean(decomposition[name] ** 2, axis=0))
           for name in ('torque', 'friction')}
    rms['acceleration'] = np.sqrt(np.mean(decomposition['acceleration'].sum((-1, -2)) ** 2, 0))
    rms['velocity'] = np.sqrt(np.mean(decomposition['velocity'].sum((-1, -2)) ** 2, 0))
    rms['gravity'] = np.sqrt(np.mean(decomposition['gravity'].sum(-1) ** 2, 0))
    short = [name.replace('crane_x7_', '') for name in joint_names]
    width = max(len(s) for s in short)
    lines = ['RMS torque by component [N*m]',
             f'{"joint":<{width}}  ' + '  '.join(f'{c:>12}' for c in rms)]
    for k, name in enumerate(short):
        lines.append(f'{name:<{width}}  ' + '  '.join(f'{rms[c][k]:12.5f}' for c in rms))

    paths = []
    for kind in ('acceleration', 'velocity'):
        by_source = decomposition[kind].sum(-2)            # (N, k, s): over bodies
        value = np.sqrt(np.mean(by_source ** 2, axis=0))
        for k, s in zip(*np.nonzero(value)):
            if k != s:
                paths.append((value[k, s], kind, k, s))
    paths.sort(reverse=True)
    lines.append('')
    lines.append(f'Largest motion propagation paths (RMS, source joint s -> loaded joint k), '
                 f'top {top}:')
    for value, kind, k, s in paths[:top]:
        lines.append(f'  {kind:<12} {short[s]:>{width}} -> {short[k]:<{width}} {value:10.5f}')
    return '\n'.join(lines)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--urdf', type=Path, default=None,
                        help='URDF to load (default: the bundled CRANE-X7)')
    parser.add_argument('--duration', type=float, default=6.0, help='motion length [s]')
    parser.add_argument('--plot', type=Path, default=None,
                        help='write a PNG of joint torques and their parts here')


def run(args: argparse.Namespace) -> int:
    from plag_ros.core.dynamics.engine import PartialLagrangian
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    model = RobotModel.from_urdf(args.urdf or default_urdf_path())
    t, q, qd, qdd = demo_trajectory(args.duration, n_joints=model.n_joints)
    q, qd, qdd = (model.fill_mimic(q), model.fill_mimic(qd, derivative=True),
                  model.fill_mimic(qdd, derivative=True))
    out = PartialLagrangian(model).decompose(q, qd, qdd).numpy()
    print(f'{model.name}: {model.n_joints} joints, {model.n_bodies} bodies, '
          f'{t.size} samples at {1 / (t[1] - t[0]):.0f} Hz')
    print(summarize(out, model.joint_names))
    if args.plot:
        _plot(args.plot, t, out, model.joint_names)
        print(f'plot written to {args.plot}')
    return 0


def _plot(path: Path, t, out, joint_names) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    n = len(joint_names)
    fig, axes = plt.subplots(n, 1, figsize=(9, 1.6 * n), sharex=True)
    for k, ax in enumerate(axes):
        ax.plot(t, out['torque'][:, k], 'k', label='joint torque')
        ax.plot(t, out['acceleration'][:, k].sum((-1, -2)), label='acceleration part')
        ax.plot(t, out['velocity'][:, k].sum((-1, -2)), label='velocity part')
        ax.plot(t, out['gravity'][:, k].sum(-1), label='gravity part')
        ax.set_ylabel(joint_names[k].replace('crane_x7_', ''), fontsize=7)
    axes[0].legend(fontsize=7, ncol=4)
    axes[-1].set_xlabel('time [s]')
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
