"""``python -m plag_ros.apps.dynamixel_bus``: the simulated CRANE-X7 as its servo bus on a pty.

What ``plag-ros sim --dynamixel`` runs in its own process (so that its replies never wait
for another interpreter's work): the bundled CRANE-X7 model in the simulator, its eight
servos (``plag_ros/bus/crane_x7.yaml``) on a pseudo-terminal (:mod:`plag_ros.bus.emulator.server`).
The first line it prints names the device. SIGINT or SIGTERM stops it; with ``--record`` it
then writes the physics' state of every step (``t`` [s], ``q`` [rad], ``qd`` [rad/s],
``effort`` [N*m], each (steps, 8) in the servos' joint order, ``joints``, ``ids``) and
``served`` (physics steps taken, instructions taken, after each read that held an
instruction) to an npz file: the ground truth a driver's joint states can be compared with.
With ``--lockstep HZ`` the physics follows the client's reads instead of the wall clock: each
SYNC READ or BULK READ advances it 1/HZ s (tests and benches whose figure must not depend on
the machine's load; :class:`plag_ros.bus.emulator.server.PtyBus`).
"""
from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from plag_ros.ros.nodes import exit_with_parent

__all__ = ['build_parser', 'main']


class _Record:
    """The physics' state of every step, in arrays that grow by doubling (no Python object
    per step for the collector to walk)."""

    def __init__(self, m: int) -> None:
        self.n = 0
        self._t = np.zeros((1024, 2))
        self._x = np.zeros((1024, 3, m))

    def append(self, t: float, q: np.ndarray, qd: np.ndarray, effort: np.ndarray) -> None:
        if self.n == len(self._t):
            self._t = np.concatenate([self._t, np.zeros_like(self._t)])
            self._x = np.concatenate([self._x, np.zeros_like(self._x)])
        self._t[self.n] = t, time.monotonic()
        self._x[self.n, 0], self._x[self.n, 1], self._x[self.n, 2] = q, qd, effort
        self.n += 1

    def arrays(self) -> tuple[np.ndarray, ...]:
        """t, wall (steps,), q, qd, effort (steps, m): wall is the step's
        ``time.monotonic()``, the machine's clock other processes read too."""
        x, t = self._x[:self.n], self._t[:self.n]
        return t[:, 0].copy(), t[:, 1].copy(), x[:, 0].copy(), x[:, 1].copy(), x[:, 2].copy()


class _FaultInput:
    """Fault lines from a FIFO, applied between physics steps (tests drive the bus process
    with it): ``drop ID N`` and ``corrupt ID N`` (the next N replies of servo ID),
    ``silent ID 0|1``, ``lose ID K`` (the K-th next write to servo ID never reaches it),
    ``temperature ID DEGC`` (its Present Temperature), ``hardware ID BITS`` (Hardware
    Error Status bits, 32 = overload), ``power 0|1``. A line it cannot read is printed and
    ignored."""

    def __init__(self, path: Path, arm) -> None:
        os.mkfifo(path)
        self.path, self.arm = path, arm
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        self.buffer = b''

    def poll(self) -> None:
        try:
            data = os.read(self.fd, 4096)
        except BlockingIOError:
            return
        if not data:
            return
        self.buffer += data
        *lines, self.buffer = self.buffer.split(b'\n')
        for line in lines:
            self.apply(line.decode(errors='replace').split())

    def apply(self, words: list[str]) -> None:
        chain = self.arm.chain
        try:
            what, *numbers = words
            values = [int(w) for w in numbers]
            if what == 'power':
                chain.powered = bool(values[0])
            elif what == 'hardware':
                next(s for s in self.arm.servos if s.id == values[0]).hardware_error(values[1])
            elif what == 'temperature':
                next(s for s in self.arm.servos if s.id == values[0]).heat(values[1])
            elif what in ('drop', 'corrupt', 'silent', 'lose'):
                faults = chain.fault(values[0])
                setattr(faults, what, bool(values[1]) if what == 'silent' else values[1])
            else:
                raise ValueError(what)
        except (ValueError, IndexError, StopIteration):
            print(f'dynamixel_bus: fault line {" ".join(words)!r} not understood', flush=True)
            return
        print(f'dynamixel_bus: fault {" ".join(words)}', flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog='python -m plag_ros.apps.dynamixel_bus',
                                     description=__doc__.splitlines()[0])
    parser.add_argument('--link', default=None, metavar='PATH',
                        help='also reach the bus at PATH (a symlink; keep it short)')
    parser.add_argument('--record', type=Path, default=None, metavar='NPZ',
                        help="at exit, write the physics' state of every step to NPZ")
    parser.add_argument('--physics-rate', type=float, default=500.0, metavar='HZ',
                        help='physics steps per second of wall time (default 500)')
    parser.add_argument('--chain', type=Path, default=None, metavar='YAML',
                        help='servo chain file (default: the CRANE-X7, '
                             'plag_ros/bus/crane_x7.yaml)')
    parser.add_argument('--faults', type=Path, default=None, metavar='FIFO',
                        help='tests: make FIFO and take fault lines from it between physics '
                             "steps: 'drop ID N', 'corrupt ID N', 'silent ID 0|1', "
                             "'lose ID K', 'temperature ID DEGC', 'hardware ID BITS', "
                             "'power 0|1'")
    parser.add_argument('--lockstep', type=float, default=None, metavar='HZ',
                        help='advance the physics 1/HZ s at each group read (the client '
                             'cycles at HZ on a simulated clock) instead of following the '
                             'wall clock')
    parser.add_argument('--plant', default='', metavar='ERRORS',
                        help="tests: an arm that differs from the model, e.g. "
                             "'mass=1.2,torque_constant=0.8,armature=2' (factors on every "
                             "body's mass and inertia, the servos' torque constant, the "
                             'armature)')
    parser.add_argument('--keep-priority', action='store_true',
                        help='keep the normal priority (by default the bus raises its '
                             'priority where it may: nice -5)')
    return parser


def _raise_priority() -> bool:
    """Raise the process's priority (nice -5) where it may: a real servo answers within
    microseconds whatever else the machine does, and in a crowd of normal processes the
    bus can be kept off the CPU for longer than a client waits (dynamixel-sdk: 34 ms). Not
    SCHED_FIFO: a real-time loop can starve the kernel worker that carries the pty's bytes.
    Where the process may not (no CAP_SYS_NICE), it runs at the normal priority."""
    try:
        os.nice(-5)
    except OSError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for name in ('physics_rate', 'lockstep'):
        value = getattr(args, name)
        if value is not None and not (0.0 < value < float('inf')):
            print(f"dynamixel_bus: --{name.replace('_', '-')} must be positive",
                  file=sys.stderr)
            return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    exit_with_parent()         # a plag-ros command that dies stops the bus too

    from plag_ros.bus.chain_file import CRANE_X7_BUS, BusConfig
    from plag_ros.bus.emulator.arm import BusArm, PlantError
    from plag_ros.bus.emulator.server import PtyBus
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
    from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

    try:
        plant = PlantError.parse(args.plant)
    except ValueError as err:
        print(f'dynamixel_bus: --plant: {err}', file=sys.stderr)
        return 2
    dt = 1.0 / args.physics_rate
    model = RobotModel.from_urdf(default_urdf_path())
    # The first steps compile the engine's loop: take them on a scratch arm, so that no
    # client waits for the compiler on its first packets.
    scratch = Simulator(model, SimulatorConfig(dt=dt))
    for _ in range(3):
        scratch.step(effort=np.full(scratch.n_actuated, 0.1))
    # the real arm's servos have geared rotors: the motor table's armature
    simulator = plant.simulator(model, dt)
    arm = BusArm(simulator, BusConfig.load(args.chain or CRANE_X7_BUS), plant.motors())
    states = _Record(simulator.n_actuated)

    def record(arm: BusArm) -> None:
        m = arm.measured            # what the servos read this step, not a second copy
        states.append(arm.simulator.t, m.q, m.qd, m.effort)

    faults = _FaultInput(args.faults, arm) if args.faults is not None else None

    def on_step(arm: BusArm) -> None:
        if args.record is not None:
            record(arm)
        if faults is not None:
            faults.poll()

    raised = _raise_priority() if not args.keep_priority else False
    with PtyBus(arm, dt, args.link, keep_served=args.record is not None,
                lockstep=None if args.lockstep is None else 1.0 / args.lockstep) as bus:
        where = f' (link {bus.link})' if bus.link else ''
        if args.lockstep is not None:
            where += f', lockstep at {args.lockstep:g} Hz'
        print(f'dynamixel_bus: Dynamixel bus on {bus.path}{where}, servos '
              f'{sorted(s.id for s in arm.servos)}'
              + (', raised priority' if raised else ''), flush=True)
        if args.record is not None:
            record(arm)                # states[k] is the state after k steps
        # Everything made so far lives to the end: keep the collector off it, so that a
        # full collection never holds a reply back (the SDK gives up after 34 ms).
        gc.freeze()
        bus.serve(stop.is_set, on_step if args.record is not None or faults is not None
                  else None)
        chain = arm.chain
        print(f'dynamixel_bus: {bus.steps} physics steps, {chain.instructions} instructions, '
              f'{chain.replies} replies ({chain.frame_errors} bad frames, {chain.foreign_status} '
              f'status packets heard), {bus.dropped_s:.3f} s of physics dropped, longest step '
              f'{bus.longest_step * 1e3:.1f} ms', flush=True)
        if args.record is not None:
            t, wall, q, qd, effort = states.arrays()
            np.savez(args.record, t=t, wall=wall, q=q, qd=qd, effort=effort,
                     joints=np.array(simulator.actuated_names),
                     ids=np.array([s.id for s in arm.servos]),
                     served=np.array(bus.served, dtype=np.int64).reshape(-1, 2))
    return 0


if __name__ == '__main__':
    sys.exit(main())
