"""Settings of the simulated CRANE-X7 (the ``plag_sim`` node's parameters), written once.

The physics switches (``friction``, ``joint_limits``, ``effort_saturation``,
``quantize_position``, ``quantize_velocity``) are
:class:`~plag_ros.core.simulation.simulator.SimulatorConfig`'s own options, under their plain
names; the rest is the node's: rates and clock, start pose, servo gains as the driver sets
them and the emulated controller manager. ``active_arm_controller``, ``position_p_gain`` and
``effort_timeout`` can change while the node runs; everything else is read at start.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from plag_ros.core.common.options import Option, group, inline, option, options
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model_parameters import ModelSettings
from plag_ros.core.simulation.simulator import SimulatorConfig

__all__ = ['ARM_CONTROLLERS', 'FORWARD', 'JTC', 'ArmController', 'Clock', 'CommandMode',
           'SimSettings', 'per_joint', 'sim_options']

JTC = 'crane_x7_arm_controller'
"""The driver's JointTrajectoryController (active after the official bring-up)."""
FORWARD = 'plag_arm_position_controller'
"""Our forward position controller (a ForwardCommandController on position)."""
ArmController = Literal['crane_x7_arm_controller', 'plag_arm_position_controller', 'none']
ARM_CONTROLLERS: tuple[str, ...] = (JTC, FORWARD, 'none')
CommandMode = Literal['position', 'effort']
Clock = Literal['wall', 'simulated']

# What the node simulates unless told otherwise: the real driver's measurement steps.
_PHYSICS = SimulatorConfig(quantize_position=True, quantize_velocity=True)


def per_joint(values: Sequence[float], name: str, m: int) -> np.ndarray:
    """(m,) array of a per-joint parameter given as one value (for every joint) or m.

    Raises:
        ValueError: another length or a non-finite value (the message names ``name``).
    """
    arr = np.asarray(list(values), dtype=float)
    if arr.size == 1:
        arr = np.full(m, arr[0])
    if arr.shape != (m,) or not np.all(np.isfinite(arr)):
        raise ValueError(f'parameter {name}: need 1 or {m} finite values, got {list(values)}')
    return arr


@dataclass(frozen=True)
class SimSettings:
    """Everything the simulator node can be told (defaults: config/sim.yaml).

    Raises:
        ValueError: inconsistent settings (the message names the parameter).
    """

    urdf_path: str = option('', 'URDF of the simulated robot; empty: the bundled '
                            'crane_x7.urdf', read_only=True)
    model: ModelSettings = group(ModelSettings)
    physics_rate_hz: float = option(1000.0, 'physics step rate [Hz]', low=10.0,
                                    high=100000.0, read_only=True)
    publish_rate_hz: float = option(200.0, 'joint_states rate [Hz], at most physics_rate_hz',
                                    low=1.0, high=100000.0, read_only=True)
    max_steps_per_tick: int = option(10, 'physics steps one publish tick may run to catch '
                                     'up with wall time', low=1, high=100000, read_only=True)
    clock: Clock = option(
        'wall', "'wall': each tick steps up to wall time and stamps with the node clock, "
        'dropping what a busy machine cannot run (the robot runs slow; for a real driver '
        "stack); 'simulated': each tick advances whole publish periods while behind wall "
        'time (at most max_steps_per_tick steps), stamped one period apart on a clock '
        'that starts at the node clock: nothing dropped, the clock lags wall time instead',
        read_only=True)
    pace_topic: str = option(
        '', "clock 'simulated': a consumer's stamped JointState output (e.g. "
        "'/plag_dynamics/joint_states'); the clock holds while it is more than pace_lead "
        'ahead of its newest stamp; empty: no pacing', read_only=True)
    pace_lead: float = option(0.1, 'how far [s] the simulated clock may run ahead of the '
                              'newest stamp on pace_topic', low=0.001, high=3600.0,
                              read_only=True)
    initial_positions: list[float] = option(
        [0.0], 'start positions [rad] of the actuated joints in command order; one value is '
        'used for every joint; clipped into the joint limits', read_only=True)
    command_mode: CommandMode = option(
        'position', "before any command: 'position' holds initial_positions with the servo "
        "loop (as the real driver on activation), 'effort' applies zero torque",
        read_only=True)
    position_p_gain: float = option(
        motors.DRIVER_P_GAIN, 'Dynamixel position P gain (register units) the servo stiffness '
        'is derived from; settable live (5 = the driver after deactivation)', low=1.0,
        high=16383.0)
    active_arm_controller: ArmController = option(
        JTC, 'emulated controller manager: the active arm controller')
    arm_joints: list[str] = option(
        list(motors.ARM_JOINTS), "the arm controllers' joints parameter (command order of "
        'the forward controller)', read_only=True)
    kp: list[float] = option([0.0], 'servo stiffness [N*m/rad], one or one per actuated '
                             'joint; 0: derived from position_p_gain', read_only=True)
    kd: list[float] = option([0.0], 'servo damping [N*m*s/rad], one or one per actuated '
                             'joint; 0: back-EMF figure effort_limit / velocity_limit',
                             read_only=True)
    effort_timeout: float = option(0.1, 'age [s] after which an effort command is replaced '
                                   'by zero effort; 0 disables', low=0.0, high=3600.0)
    physics: SimulatorConfig = inline(_PHYSICS)
    report_period: float = option(5.0, 'period of /diagnostics and the rate log line [s]',
                                  low=0.1, high=3600.0, read_only=True)

    def __post_init__(self) -> None:
        for name, allowed in (('command_mode', ('position', 'effort')),
                              ('active_arm_controller', ARM_CONTROLLERS),
                              ('clock', ('wall', 'simulated'))):
            if getattr(self, name) not in allowed:
                raise ValueError(f'{name} must be one of {list(allowed)}, got '
                                 f'{getattr(self, name)!r}')
        if self.publish_rate_hz > self.physics_rate_hz:
            raise ValueError(f'publish_rate_hz ({self.publish_rate_hz:g}) exceeds '
                             f'physics_rate_hz ({self.physics_rate_hz:g})')
        for name in ('kp', 'kd'):
            if any(not math.isfinite(v) or v < 0.0 for v in getattr(self, name)):
                raise ValueError(f'{name} must be finite and non-negative, got '
                                 f'{list(getattr(self, name))}')
        if not (math.isfinite(self.position_p_gain) and self.position_p_gain > 0.0):
            raise ValueError('position_p_gain must be > 0')
        if not (math.isfinite(self.effort_timeout) and self.effort_timeout >= 0.0):
            raise ValueError('effort_timeout must be >= 0')
        if self.pace_topic and self.clock != 'simulated':
            raise ValueError(f"pace_topic ({self.pace_topic!r}) needs clock 'simulated' "
                             '(wall time cannot be held)')

    @property
    def paced(self) -> bool:
        """Whether the simulated clock waits for a consumer (``pace_topic`` is set)."""
        return bool(self.pace_topic)

    @property
    def state_queue_depth(self) -> int:
        """joint_states publisher depth: 0.5 s of messages, at least 10."""
        return max(10, math.ceil(0.5 * self.publish_rate_hz))

    def simulator_config(self) -> SimulatorConfig:
        """The simulator's configuration: ``physics`` with the step, gains and P gain."""
        def gain(values: Sequence[float]) -> float | tuple[float, ...] | None:
            if all(v == 0.0 for v in values):
                return None                      # derived from the servo model
            return float(values[0]) if len(values) == 1 else tuple(float(v) for v in values)

        return dataclasses.replace(self.physics, dt=1.0 / self.physics_rate_hz,
                                   kp=gain(self.kp), kd=gain(self.kd),
                                   p_gain=self.position_p_gain)


def sim_options() -> list[Option]:
    """The options of :class:`SimSettings`: the simulator node's parameters."""
    return options(SimSettings())
