"""The simulated CRANE-X7 behind its servo bus: servos, their firmware and the physics.

:class:`BusArm` owns a :class:`~plag_ros.core.simulation.simulator.Simulator` and a
:class:`~plag_ros.bus.emulator.chain.ServoChain` whose servos drive its actuated joints.
Bytes from a client go in through :meth:`BusArm.receive` and status packets come out;
:meth:`BusArm.step` lets each servo's firmware decide what its joint gets (a position
spring, a torque, or nothing with the torque off), steps the physics and updates the present
items from the new state. Between steps the servos answer from the state of the last step,
as a real servo answers from its last sample. Nothing here touches a file or a clock: the
pty server (:mod:`plag_ros.bus.emulator.server`) or a test decides when time passes.

The chain's description (IDs, models, joints, position limits, baud rate, return delay) is
one file, ``plag_ros/bus/crane_x7.yaml`` for the CRANE-X7
(:meth:`plag_ros.bus.chain_file.BusConfig.load`).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from plag_ros.bus import control_table
from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.emulator.chain import BAUD_CODES, Reply, ServoChain
from plag_ros.bus.emulator.servo import Servo
from plag_ros.bus.protocol import Instruction, Packet, PacketReader
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.motors import MOTORS, Motor, armature
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

__all__ = ['GROUP_READS', 'BusArm', 'PlantError']

GROUP_READS = frozenset({Instruction.SYNC_READ, Instruction.BULK_READ})
"""The reads a client makes once a cycle for the whole chain."""


@dataclass(frozen=True)
class PlantError:
    """How the emulated arm differs from the model the host computes with: every body's
    mass and inertia times ``mass``, every servo's torque constant times
    ``torque_constant`` (its current makes that much more or less torque), the motor
    table's armature times ``armature``. All 1: the plant is the model."""

    mass: float = 1.0
    torque_constant: float = 1.0
    armature: float = 1.0

    @classmethod
    def parse(cls, text: str) -> PlantError:
        """From ``'mass=1.2,torque_constant=0.8,armature=2'`` (any of the three).

        Raises:
            ValueError: an unknown name, or a factor that is not positive and finite.
        """
        values: dict[str, float] = {}
        for part in filter(None, text.split(',')):
            name, _, value = part.partition('=')
            if name.strip() not in ('mass', 'torque_constant', 'armature'):
                raise ValueError(f'plant error {part!r}: the names are mass, '
                                 'torque_constant and armature')
            values[name.strip()] = float(value)
        error = cls(**values)
        if not all(0.0 < v < float('inf') for v in (error.mass, error.torque_constant,
                                                    error.armature)):
            raise ValueError(f'plant error factors must be positive and finite: {text!r}')
        return error

    def simulator(self, model: RobotModel, dt: float) -> Simulator:
        """The simulated arm: ``model`` with these errors, geared rotors included."""
        heavier = replace(model, body_mass=model.body_mass * self.mass,
                          body_inertia=model.body_inertia * self.mass)
        return Simulator(heavier, SimulatorConfig(dt=dt, armature=tuple(
            (armature(model) * self.armature).tolist())))

    def motors(self) -> dict[str, Motor]:
        """The motor table as the emulated servos have it."""
        return {name: m._replace(torque_constant=m.torque_constant * self.torque_constant)
                for name, m in MOTORS.items()}


class BusArm:
    """A simulated arm whose actuated joints are driven by emulated servos.

    Args:
        simulator: the arm; every actuated joint must have a servo in ``config``.
        config: the chain.
        motors: the motor table the servos use (default :data:`MOTORS`;
            :meth:`PlantError.motors` for servos that differ from it).

    Attributes:
        chain: the servos on the bus.
        servos: (m,) the servo of each actuated joint, in the simulator's order.
        measured: the simulator's measurement the present items were last made from.
    """

    def __init__(self, simulator: Simulator, config: BusConfig,
                 motors: Mapping[str, Motor] = MOTORS) -> None:
        self.simulator = simulator
        by_joint = {spec.joint: spec for spec in config.servos}
        missing = [j for j in simulator.actuated_names if j not in by_joint]
        if missing:
            raise ValueError(f'no servo drives the actuated joints {missing}')
        self.servos: list[Servo] = []
        for joint in simulator.actuated_names:
            spec = by_joint[joint]
            low, high = spec.position_limits
            eeprom = {'ID': spec.id, 'Baud Rate': _baud_code(config.baud_rate),
                      'Return Delay Time': config.return_delay_time,
                      'Min Position Limit': low, 'Max Position Limit': high}
            self.servos.append(Servo(control_table.load(spec.model), motors[spec.model],
                                     eeprom, config.firmware_version))
        self.chain = ServoChain(self.servos, config.baud_rate)
        self.reader = PacketReader()
        self._sense()

    @property
    def t(self) -> float:
        """Simulated time [s]."""
        return self.simulator.t

    def receive(self, data: bytes,
                before_group_read: Callable[[], None] | None = None) -> list[Reply]:
        """Bytes from the bus in, the status packets to send back out (in order).

        ``before_group_read()`` is called before a SYNC READ or BULK READ is answered (a
        client's once-a-cycle read): the pty server's lockstep mode steps the physics there.
        """
        replies: list[Reply] = []
        for packet in self.reader.feed(data):
            if before_group_read is not None and isinstance(packet, Packet) and \
                    packet.instruction in GROUP_READS:
                before_group_read()
            replies.extend(self.chain.handle(packet, self.t))
        return replies

    def step(self, dt: float) -> None:
        """Advance the physics by ``dt`` seconds under what the servos make."""
        sim = self.simulator
        t = sim.t
        drives = [servo.drive(t, dt) for servo in self.servos]
        # (5, m): one array for the servos' five items, not five (a step's Python counts)
        goal, torque, position, stiffness, limit = np.array(
            [(d.goal, d.torque, d.position, d.stiffness, d.torque_limit) for d in drives],
            dtype=float).T
        sim.set_joint_commands(goal, torque, position != 0.0, stiffness, limit)
        sim.step(dt)
        self._sense()

    def _sense(self) -> None:
        self.measured = measured = self.simulator.measure()
        t = self.simulator.t
        for servo, q, qd, effort in zip(self.servos, measured.q.tolist(), measured.qd.tolist(),
                                        measured.effort.tolist()):
            servo.sense(q, qd, effort, t)


def _baud_code(baud_rate: int) -> int:
    try:
        return BAUD_CODES[baud_rate]
    except KeyError as err:
        raise ValueError(f'{baud_rate} bit/s is not a Dynamixel X baud rate; '
                         f'one of {sorted(BAUD_CODES)}') from err
