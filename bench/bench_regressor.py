"""The joint-torque regressor's cost per sample against Pinocchio's in the same run, and the
time to identify the arm from ten minutes of recording at 200 Hz.

``plag_ros.core.dynamics.regressor.joint_torque_regressor`` (numpy, batched over samples) on the
CRANE-X7 at seeded random states, per sample, for batches of 1, 1000 and 10 000 samples
(the identification of ten minutes at 200 Hz regresses 120 000 samples, in such blocks);
the peer is ``pin.computeJointTorqueRegressor``, one call per sample (Pinocchio has no
batched form), on the same samples. Both give the same (9, 90) matrices (test_regressor.py).
Medians of ``--repeat`` runs; the ratio is ours / Pinocchio's. Then
``plag_ros.core.identification.fit.identify`` on 120 000 samples (ten minutes at 200 Hz) of
every arm joint swinging, with torques from the regressor and 0.02 N*m of noise: one run,
wall time.

Usage: ``PYTHONPATH=$PWD python bench/bench_regressor.py [--repeat 5] [--skip-identify]``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pinocchio as pin
from timing import median_time_s

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.regressor import joint_torque_regressor


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=5)
    parser.add_argument('--skip-identify', action='store_true')
    args = parser.parse_args()
    model = RobotModel.from_urdf(default_urdf_path())
    pin_model = pin.buildModelFromXML(model.urdf_xml)
    pin_data = pin_model.createData()
    order = model.joint_index([pin_model.names[j] for j in range(1, pin_model.njoints)])
    rng = np.random.default_rng(0)
    count = 10_000
    q, qd, qdd = (np.stack([model.fill_mimic(rng.uniform(-1, 1, model.n_joints))
                            for _ in range(count)]) for _ in range(3))
    print(f'bench_regressor: CRANE-X7 ({model.n_joints} joints, {model.n_bodies} bodies), '
          f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}')

    def pinocchio(samples: int) -> None:
        for k in range(samples):
            pin.computeJointTorqueRegressor(pin_model, pin_data, q[k, order], qd[k, order],
                                            qdd[k, order])

    peer = median_time_s(lambda: pinocchio(1000), args.repeat) / 1000
    print(f'pin.computeJointTorqueRegressor, one call per sample: {peer * 1e6:.1f} us/sample')
    for batch in (1, 1000, count):
        took = median_time_s(lambda b=batch: joint_torque_regressor(
            model, q[:b], qd[:b], qdd[:b]), args.repeat) / batch
        print(f'joint_torque_regressor, batch {batch:6d}: {took * 1e6:8.1f} us/sample '
              f'({took / peer:.2f}x Pinocchio)', flush=True)
    if not args.skip_identify:
        identify_ten_minutes(model)
    return 0


def identify_ten_minutes(model: RobotModel) -> None:
    """Time ``identify`` on ten minutes at 200 Hz (see the module doc)."""
    from plag_ros.core.identification.fit import identify, predict

    t = np.arange(0.0, 600.0, 1.0 / 200.0)
    rng = np.random.default_rng(1)
    act = np.flatnonzero(model.actuated)
    q, qd, qdd = (np.zeros((len(t), model.n_joints)) for _ in range(3))
    for j in act:
        for _ in range(3):
            a, w, phase = 0.15, 2 * np.pi * rng.uniform(0.1, 0.6), rng.uniform(0, 2 * np.pi)
            q[:, j] += a * np.sin(w * t + phase)
            qd[:, j] += a * w * np.cos(w * t + phase)
            qdd[:, j] -= a * w * w * np.sin(w * t + phase)
    q, qd, qdd = (model.fill_mimic(x, derivative=k > 0) for k, x in enumerate((q, qd, qdd)))
    torque = predict(model, q, qd, qdd) + rng.normal(0.0, 0.02, (len(t), len(act)))
    start = time.perf_counter()
    result = identify(model, q, qd, qdd, torque, rest_band=0.01)
    took = time.perf_counter() - start
    print(f'identify, {len(t)} samples (10 min at 200 Hz), {result.rows} rows: {took:.1f} s '
          f'({took / len(t) * 1e6:.0f} us/sample); {result.rank} combinations identified, '
          f'residual {result.noise_std:.4f} N*m', flush=True)


if __name__ == '__main__':
    sys.exit(main())
