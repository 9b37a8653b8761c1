"""Cost of one physics step of the simulated CRANE-X7, alone and behind its servo bus.

What a real-time loop pays per step (the simulator node at 1 kHz, the emulated Dynamixel
bus at 500 Hz or 1 kHz), timed step by step while the arm moves (an arm at exact rest
costs next to nothing, ``SimulatorConfig.skip_rest``, so every case keeps it moving):

* ``sim position``: :meth:`Simulator.step` at dt = 1 ms in position mode, the goal
  following a multi-joint swing (a new goal every step);
* ``sim effort``: the same in effort mode, the torque gravity at the swing's pose plus a
  5 Hz PD term per joint on the measured state (computed outside the timed step);
* ``bus 500 Hz`` / ``bus 1 kHz``: :meth:`BusArm.step` with the eight servos' firmware in
  position mode (torque on, the motor table's armature, as ``plag_ros.apps.dynamixel_bus``
  builds it), a SYNC WRITE of the swing's goal positions every 5 ms (a 200 Hz driver),
  outside the timed step.

Peer, same process, same states: Pinocchio's forward dynamics ``pin.aba(q, qd, tau)`` on
the CRANE-X7 (the dynamics a step needs, nothing else), and ``pin.crba`` + ``pin.nle``
(the mass matrix and bias a step evaluates). The solver line counts the steps whose
velocity solve needed more than the warm-started first guess (iterations) and its
Gauss-Seidel fallback.

Run: ``.venv/bin/python bench/bench_sim_step.py [--steps 4000]``.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import pinocchio as pin
import torch

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.emulator.arm import BusArm
from plag_ros.bus.protocol import Instruction, encode
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

Q0 = np.array([0.0, 0.6, 0.0, -1.4, 0.0, 0.5, 0.0, 0.3])
AMPLITUDE = np.array([0.3, 0.2, 0.3, 0.5, 0.3, 0.3, 0.5, 0.2])
FREQUENCY = np.array([0.3, 0.5, 0.7, 1.5, 0.9, 1.1, 1.3, 0.4])
WARM_UP = 200
IDS = list(range(2, 10))


def swing(t: float) -> np.ndarray:
    """Actuated goal positions (8,) [rad] of the swing at time ``t`` [s]."""
    return Q0 + AMPLITUDE * np.sin(2.0 * np.pi * FREQUENCY * t)


class Run:
    """Per-step wall and CPU times [us] of a case and the full states (q, qd, tau) it
    passed through."""

    def __init__(self, steps: int, n: int) -> None:
        self.us, self.cpu_us = np.empty(steps), np.empty(steps)
        self.q, self.qd, self.tau = (np.empty((steps, n)) for _ in range(3))


class Clock:
    """Wall and thread CPU time of one step: the CPU time leaves out the time the step's
    thread waited for a core (on a loaded machine the wall time's tail is mostly that)."""

    def start(self) -> None:
        self.t0, self.c0 = time.perf_counter_ns(), time.thread_time_ns()

    def stop(self) -> tuple[int, int]:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        return wall - self.t0, cpu - self.c0


def _record(run: Run, k: int, sim: Simulator, elapsed_ns: tuple[int, int]) -> None:
    state = sim.state
    G = sim.coordinate_map[0]
    run.us[k], run.cpu_us[k] = elapsed_ns[0] / 1e3, elapsed_ns[1] / 1e3
    run.q[k], run.qd[k] = state.q, state.qd
    # the generalized force the step applied, spread back onto the full joints
    run.tau[k] = G @ np.linalg.lstsq(G.T @ G, state.effort - state.friction, rcond=None)[0]


def sim_position(model: RobotModel, steps: int) -> tuple[Run, Simulator]:
    sim = Simulator(model, SimulatorConfig(dt=1e-3))
    sim.reset(Q0)
    run, clock = Run(steps, model.n_joints), Clock()
    for k in range(-WARM_UP, steps):
        sim.set_position_command(swing(sim.t))
        clock.start()
        sim.step()
        elapsed = clock.stop()
        if k >= 0:
            _record(run, k, sim, elapsed)
    return run, sim


def sim_effort(model: RobotModel, steps: int) -> tuple[Run, Simulator]:
    sim = Simulator(model, SimulatorConfig(dt=1e-3))
    sim.reset(Q0)
    G, o = sim.coordinate_map
    times = np.arange(-WARM_UP, steps + 1) * 1e-3
    goals = Q0 + AMPLITUDE * np.sin(2.0 * np.pi * FREQUENCY * times[:, None])
    gravity = sim.engine.gravity_torque(goals @ G.T + o) @ G
    inertia = np.diag(G.T @ sim.engine.mass_matrix(G @ Q0 + o) @ G)
    # a 5 Hz, 0.7-damped PD per joint on its own inertia (explicit at 1 kHz: stable)
    omega = 2.0 * np.pi * 5.0
    kp, kd = inertia * omega ** 2, 2.0 * 0.7 * omega * inertia
    run, clock = Run(steps, model.n_joints), Clock()
    for k in range(-WARM_UP, steps):
        meas = sim.measure()
        i = k + WARM_UP
        sim.set_effort_command(gravity[i] + kp * (goals[i] - meas.q) - kd * meas.qd)
        clock.start()
        sim.step()
        elapsed = clock.stop()
        if k >= 0:
            _record(run, k, sim, elapsed)
    return run, sim


def bus(model: RobotModel, steps: int, dt: float) -> tuple[Run, Simulator]:
    sim = Simulator(model, SimulatorConfig(dt=dt, armature=tuple(
        motors.armature(model).tolist())))
    sim.reset(Q0)
    arm = BusArm(sim, BusConfig.load())
    for i in IDS:
        arm.receive(encode(i, Instruction.WRITE, bytes((64, 0, 1))))    # Torque Enable
    every = max(1, round(0.005 / dt))
    run, clock = Run(steps, model.n_joints), Clock()
    for k in range(-WARM_UP, steps):
        if k % every == 0:
            counts = [round(c) for c in 2048 + swing(sim.t) / motors.PULSE_RAD]
            arm.receive(encode(0xFE, Instruction.SYNC_WRITE, bytes((116, 0, 4, 0)) + b''.join(
                bytes((i,)) + c.to_bytes(4, 'little', signed=True)
                for i, c in zip(IDS, counts, strict=True))))
        clock.start()
        arm.step(dt)
        elapsed = clock.stop()
        if k >= 0:
            _record(run, k, sim, elapsed)
    return run, sim


def peers(model: RobotModel, run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Per-call times [us] of pin.aba and of pin.crba + pin.nle on the run's states."""
    pm = pin.buildModelFromXML(model.urdf_xml)
    data = pm.createData()
    names = [pm.names[j] for j in range(1, pm.njoints)]
    order = [model.joint_names.index(name) for name in names]
    q, qd, tau = run.q[:, order], run.qd[:, order], run.tau[:, order]
    aba, crba = np.empty(len(q)), np.empty(len(q))
    for k in range(len(q)):
        t0 = time.perf_counter_ns()
        pin.aba(pm, data, q[k], qd[k], tau[k])
        t1 = time.perf_counter_ns()
        pin.crba(pm, data, q[k])
        pin.nle(pm, data, q[k], qd[k])
        t2 = time.perf_counter_ns()
        aba[k], crba[k] = (t1 - t0) / 1e3, (t2 - t1) / 1e3
    return aba, crba


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=4000, help='timed steps per case [4000]')
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = RobotModel.from_urdf(default_urdf_path())
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    print(f'CRANE-X7 (n=9, 8 actuated), float64, numpy {np.__version__}, pinocchio '
          f'{pin.__version__}, {os.cpu_count()} CPUs, load average {load:.2f}; '
          f'{args.steps} steps per case after {WARM_UP} untimed')
    print('per step [us]: wall time p50/p90/p99/max, thread CPU time p50/p99; core share at '
          'the wall p50; Pinocchio peers p50 and the ratios (wall p50 and p99 against aba p50 '
          'and p99, wall p50 against crba+nle p50)')
    print(f'{"case":13s} {"p50":>6s} {"p90":>6s} {"p99":>6s} {"max":>7s} {"cpu50":>6s} '
          f'{"cpu99":>6s} {"core%":>6s} {"aba":>5s} {"x":>5s} {"x p99":>6s} {"crba+nle":>8s} '
          f'{"x":>4s}  solver: Newton iterations, fallbacks')
    cases = (('sim position', 1e-3, lambda: sim_position(model, args.steps)),
             ('sim effort', 1e-3, lambda: sim_effort(model, args.steps)),
             ('bus 500 Hz', 2e-3, lambda: bus(model, args.steps, 2e-3)),
             ('bus 1 kHz', 1e-3, lambda: bus(model, args.steps, 1e-3)))
    for label, dt, case in cases:
        run, sim = case()
        aba, crba = peers(model, run)
        p50, p90, p99 = np.percentile(run.us, [50, 90, 99])
        cpu50, cpu99 = np.percentile(run.cpu_us, [50, 99])
        a50, a99 = np.percentile(aba, [50, 99])
        c50 = np.median(crba)
        share = 100.0 * p50 * 1e-6 / dt
        print(f'{label:13s} {p50:6.0f} {p90:6.0f} {p99:6.0f} {run.us.max():7.0f} {cpu50:6.0f} '
              f'{cpu99:6.0f} {share:6.1f} {a50:5.1f} {p50 / a50:5.0f} {p99 / a99:6.0f} '
              f'{c50:8.1f} {p50 / c50:4.0f}  {sim.solver_iterations}, {sim.solver_fallbacks} '
              f'in {sim.evaluations} steps')


if __name__ == '__main__':
    main()
