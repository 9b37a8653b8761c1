"""Control cycle cost of the partial-impedance controller on the CRANE-X7.

One cycle is :meth:`PartialImpedanceController.update`: the estimator (five-point
derivative + low-pass), one partial Lagrangian decomposition, the law with the selected
propagation paths, limits. It is timed per cycle over a moving trajectory fed at 200 Hz
and at 1 kHz (the stamps differ, the work per cycle is the same), reported as p50/p99/max,
for two compensation settings: the default (shoulder tilt <- elbow, acceleration and
velocity) and every path (``'*<-*'``, computed-torque feedforward). Target: p99 < 2 ms on
a 2-core CPU.

Pinocchio peer, same process, same states: ``pin.rnea`` + ``pin.crba`` per cycle (what a
computed-torque controller would call; it gives no per-path split) and the ratio.

Run: ``.venv/bin/python bench/bench_control.py [--cycles 3000] [--threads 1]``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pinocchio as pin
import torch

from plag_ros.core.control.config import ImpedanceConfig, propagation_mask
from plag_ros.core.control.impedance import PartialImpedanceController
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, actuation_matrix, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig

TILT = 'crane_x7_shoulder_revolute_part_tilt_joint'
ELBOW = 'crane_x7_upper_arm_revolute_part_rotate_joint'


def trajectory(cycles: int, rate_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """Stamps (N,) [ns] and actuated positions (N, 8) of a multi-joint swing."""
    t = np.arange(cycles) / rate_hz
    q0 = np.array([0.0, 0.6, 0.0, -1.4, 0.0, 0.5, 0.0, 0.3])
    amplitude = np.array([0.3, 0.2, 0.3, 0.5, 0.3, 0.3, 0.5, 0.2])
    frequency = np.array([0.3, 0.5, 0.7, 1.5, 0.9, 1.1, 1.3, 0.4])
    q = q0 + amplitude * np.sin(2.0 * np.pi * frequency * t[:, None])
    return (t * 1e9).astype(np.int64), q


def time_controller(engine, config, stamps, q) -> np.ndarray:
    ctl = PartialImpedanceController(engine, config)
    out = np.empty(len(stamps))
    for c, (t_ns, q_c) in enumerate(zip(stamps, q, strict=True)):
        t0 = time.perf_counter_ns()
        ctl.update(int(t_ns), q_c)
        out[c] = (time.perf_counter_ns() - t0) / 1e3
    return out[10:]  # the estimator warm-up cycles do no decomposition


def time_pinocchio(model: RobotModel, q_act: np.ndarray, rate_hz: float) -> np.ndarray:
    pm = pin.buildModelFromXML(model.urdf_xml)
    data = pm.createData()
    G, offset = actuation_matrix(model)
    names = [pm.names[j] for j in range(1, pm.njoints)]
    order = [model.joint_names.index(name) for name in names]  # pinocchio joint -> ours
    q_full = (q_act @ G.T + offset)[:, order]
    if pm.nq != q_full.shape[1]:   # pinocchio folded the mimic joint away
        q_full = q_full[:, :pm.nq]
    qd = np.gradient(q_full, 1.0 / rate_hz, axis=0)
    qdd = np.gradient(qd, 1.0 / rate_hz, axis=0)
    out = np.empty(len(q_full))
    for c in range(len(q_full)):
        t0 = time.perf_counter_ns()
        pin.rnea(pm, data, q_full[c], qd[c], qdd[c])
        pin.crba(pm, data, q_full[c])
        out[c] = (time.perf_counter_ns() - t0) / 1e3
    return out[10:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--cycles', type=int, default=3000, help='cycles per case [3000]')
    parser.add_argument('--threads', type=int, default=1, help='torch intra-op threads [1]')
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = RobotModel.from_urdf(default_urdf_path())
    engine = PartialLagrangian(model)
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    print(f'CRANE-X7 (n=9, 8 actuated), float64, torch {torch.__version__} '
          f'({torch.get_num_threads()} thread), pinocchio {pin.__version__}, '
          f'{os.cpu_count()} CPUs, load average {load:.2f}; {args.cycles} cycles per case')
    one = propagation_mask(model, [f'{TILT}<-{ELBOW}'])
    every = propagation_mask(model, ['*<-*'])
    print(f'{"rate":>7s}  {"case":44s} {"p50 us":>8s} {"p99 us":>8s} {"max us":>8s} '
          f'{"pin p50":>8s} {"pin p99":>8s} {"x p50":>6s} {"x p99":>6s}')
    for rate in (200.0, 1000.0):
        stamps, q = trajectory(args.cycles, rate)
        base = ImpedanceConfig(stiffness=2.0, damping=0.1, start_enabled=True, ramp_s=0.0,
                               command_interface='effort', stale_periods=3.0, rate_hz=rate,
                               estimator=EstimatorConfig(cutoff_hz=min(25.0, 0.2 * rate),
                                                         rate_hz=rate))
        peer = time_pinocchio(model, q, rate)
        pin50, pin99 = np.percentile(peer, [50, 99])
        for label, config in (
                ('tilt<-elbow, measured motion', base.replace(acceleration_mask=one,
                                                              velocity_mask=one)),
                ('every path, desired motion (computed torque)',
                 base.replace(acceleration_mask=every, velocity_mask=every,
                              motion_source='desired'))):
            cycle = time_controller(engine, config, stamps, q)
            p50, p99 = np.percentile(cycle, [50, 99])
            verdict = 'ok' if p99 < 2000.0 else 'OVER 2 ms'
            print(f'{rate:4.0f} Hz  {label:44s} {p50:8.0f} {p99:8.0f} {cycle.max():8.0f} '
                  f'{pin50:8.1f} {pin99:8.1f} {p50 / pin50:6.0f} {p99 / pin99:6.0f}  '
                  f'{verdict}')


if __name__ == '__main__':
    main()
