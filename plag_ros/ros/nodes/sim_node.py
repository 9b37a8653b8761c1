"""``plag_sim``: a simulated CRANE-X7 on the ROS 2 graph, for demos and tests without hardware.

Physics is :class:`plag_ros.core.simulation.Simulator` (forward dynamics of the URDF with servo
emulation, Coulomb stick-slip, hard stops, effort saturation); this node only moves numbers
between it and the topics, like the robot's ros2_control driver would:

==================================  ============================  ============================
topic (relative)                    type, QoS                     content
==================================  ============================  ============================
``joint_states`` (out)              sensor_msgs/JointState,       the 8 actuated joints (7 arm
                                    reliable, depth 10            + finger_a) sorted by name,
                                                                  an order that is not the
                                                                  URDF's (the broadcaster's is
                                                                  unspecified); effort as the
                                                                  driver computes it: current
                                                                  [A] * 2.20 (XM430) or 3.60
                                                                  (XM540), the current being
                                                                  motor torque / the e-manual
                                                                  torque constant
``robot_description`` (out)         std_msgs/String, reliable,    the URDF text
                                    transient local, depth 1
``crane_x7_arm_controller/          trajectory_msgs/              the driver's JTC: any joint
joint_trajectory`` (in)             JointTrajectory, reliable     order, all 7 arm joints
``plag_arm_position_controller/     std_msgs/Float64MultiArray,   our forward controller: 7 arm
commands`` (in)                     reliable, depth 10            goal positions [rad] in its
                                                                  ``joints`` order
``effort_controller/commands``      std_msgs/Float64MultiArray,   8 torques [N*m] (test
(in)                                reliable, depth 10            interface, not the driver's)
``position_controller/commands``    std_msgs/Float64MultiArray,   8 goal positions [rad] (test
(in)                                reliable, depth 10            interface, not the driver's)
``/diagnostics`` (out)              diagnostic_msgs/              rates, CPU, counters
                                    DiagnosticArray
==================================  ============================  ============================

Emulated controller manager (what is emulated, honestly: the *effect* of
``controller_manager/switch_controller``, not its service, whose message package has no
wheel here). The parameter ``active_arm_controller`` names the one arm controller that is
active: ``crane_x7_arm_controller`` (the driver's JointTrajectoryController, active after
the official bring-up), ``plag_arm_position_controller`` (our JointGroupPositionController)
or ``none``. Commands to an inactive controller are ignored and counted
(``ignored_inactive``), as the real controller manager runs only active controllers. On
activation the JTC holds the last value of the position command interface
(ros2_controllers joint_trajectory_controller ``set_last_command_interface_value_as_state_on
_activation``, default true), so a switch back does not move the arm. The JTC emulation
follows ros2_controllers' rules: a zero header stamp starts now; a one-point trajectory
with ``time_from_start`` 0 is a step to the point; with ``time_from_start`` > 0 it moves
linearly from the *measured* position (``open_loop_control`` false) to the point over that
time (the real JTC uses splines); after the last point it holds it; a message naming other
joints than the 7 arm joints is rejected. ``position_p_gain`` can be changed at run time:
``5`` is what the driver writes on deactivation (crane_x7_control
``src/crane_x7_hardware.cpp``).

Command layout: one entry per actuated joint in URDF order without mimic joints (for the
CRANE-X7: the 7 arm joints from the shoulder pan to the wrist, then
``crane_x7_gripper_finger_a_joint``), as ``forward_command_controller`` takes them. The
last command received, effort or position, is in force. A command of the wrong length or
with NaN/inf entries is rejected, counted (``rejected.length``, ``rejected.nonfinite``) and
logged at most every two seconds per reason; the previous command stays in force. An
effort command older than ``effort_timeout`` seconds is replaced by zero effort (the arm
goes limp, as a torque-controlled arm whose controller died should not keep pushing).

Timing: one wall-clock timer at ``publish_rate_hz`` integrates, per tick, as many physics
steps of ``1 / physics_rate_hz`` as wall time has advanced (at most
``max_steps_per_tick``, and no more than fit in 80 % of the tick period; time beyond that
is dropped and counted as ``overrun_steps``, so a busy machine slows the simulated robot
down instead of piling up work or thinning out joint_states), then publishes one joint
state stamped with the node clock. A robot at exact rest (stuck by friction or stops,
command unchanged) costs next to nothing: such steps have the same inputs as the last one
and are skipped (``SimulatorConfig.skip_rest``). The achieved physics rate, the rate of
computed steps and the process CPU share are reported on ``/diagnostics`` and logged every
``report_period`` seconds.
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import (
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from plag_ros.core import motors
from plag_ros.core.model import RobotModel, default_urdf_path
from plag_ros.core.simulation import DYNAMIXEL_P_GAIN, Simulator, SimulatorConfig
from plag_ros.ros import messages as msgs
from plag_ros.ros.parameters import bool_descriptor, doubles_descriptor
from plag_ros.ros.parameters import float_descriptor as _float

__all__ = ['NODE_NAME', 'PARAMETERS', 'REJECTION_REASONS', 'SimNode', 'main']

NODE_NAME = 'plag_sim'
REJECTION_REASONS = ('length', 'nonfinite', 'joints', 'inactive')
JTC = 'crane_x7_arm_controller'
FORWARD = 'plag_arm_position_controller'
ARM_CONTROLLERS = (JTC, FORWARD, 'none')
_LOG_THROTTLE_S = 2.0
_COMMAND_MODES = ('position', 'effort')


def _bool(description: str) -> ParameterDescriptor:
    return bool_descriptor(description, read_only=True)   # the simulator's set-up is fixed


def _doubles(description: str) -> ParameterDescriptor:
    return doubles_descriptor(description, read_only=True)


# name -> (default, descriptor). Defaults match config/sim.yaml.
PARAMETERS: dict[str, tuple[object, ParameterDescriptor]] = {
    'urdf_path': ('', ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING, read_only=True,
        description='URDF of the simulated robot; empty: the bundled crane_x7.urdf')),
    'physics_rate_hz': (1000.0, _float('physics step rate [Hz]', 10.0, 100000.0,
                                       read_only=True)),
    'publish_rate_hz': (200.0, _float('joint_states rate [Hz], at most physics_rate_hz',
                                      1.0, 100000.0, read_only=True)),
    'max_steps_per_tick': (10, ParameterDescriptor(
        type=ParameterType.PARAMETER_INTEGER, read_only=True,
        description='physics steps one publish tick may run to catch up with wall time',
        integer_range=[IntegerRange(from_value=1, to_value=100000, step=1)])),
    'initial_positions': ([0.0], _doubles(
        'start positions [rad] of the actuated joints in command order; one value is used '
        'for every joint; clipped into the joint limits')),
    'command_mode': ('position', ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING, read_only=True,
        additional_constraints="one of 'position', 'effort'",
        description="before any command: 'position' holds initial_positions with the servo "
                    "loop (as the real driver on activation), 'effort' applies zero torque")),
    'position_p_gain': (DYNAMIXEL_P_GAIN, _float(
        'Dynamixel position P gain (register units) the servo stiffness is derived from; '
        'settable live (5 = the driver after deactivation)', 1.0, 16383.0)),
    'active_arm_controller': (JTC, ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING,
        additional_constraints=f'one of {ARM_CONTROLLERS}',
        description='emulated controller manager: the active arm controller')),
    'arm_joints': (list(motors.ARM_JOINTS), ParameterDescriptor(
        type=ParameterType.PARAMETER_STRING_ARRAY, read_only=True,
        description="the arm controllers' joints parameter (command order of the forward "
                    'controller)')),
    'kp': ([0.0], _doubles('servo stiffness [N*m/rad], one or one per actuated joint; '
                           '0: derived from position_p_gain')),
    'kd': ([0.0], _doubles('servo damping [N*m*s/rad], one or one per actuated joint; 0: '
                           'back-EMF figure effort_limit / velocity_limit')),
    'effort_timeout': (0.1, _float('age [s] after which an effort command is replaced by '
                                   'zero effort; 0 disables', 0.0, 3600.0)),
    'friction': (True, _bool('apply the URDF joint damping and Coulomb friction')),
    'joint_limits': (True, _bool('stop the joints at the URDF position limits')),
    'effort_saturation': (True, _bool('clip motor torques at the URDF effort limits')),
    'quantize_position': (True, _bool('publish positions in encoder steps (2 pi / 4096)')),
    'quantize_velocity': (True, _bool('publish velocities in Dynamixel steps (0.02398 '
                                      'rad/s)')),
    'report_period': (5.0, _float('period of /diagnostics and the rate log line [s]', 0.1,
                                  3600.0, read_only=True)),
    'torch_threads': (1, ParameterDescriptor(
        type=ParameterType.PARAMETER_INTEGER, read_only=True,
        description='torch intra-op threads (1 is fastest for one 9x9 mass matrix)',
        integer_range=[IntegerRange(from_value=1, to_value=256, step=1)])),
}


class SimNode(Node):
    """Simulated robot: commands in, joint states and robot_description out.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (``parameter_overrides``, ``context``, ...).

    Raises:
        ValueError: inconsistent parameters (message names the parameter).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, descriptor) in PARAMETERS.items():
            self.declare_parameter(name, default, descriptor)
        values = {name: self.get_parameter(name).value for name in PARAMETERS}
        torch.set_num_threads(int(values['torch_threads']))
        self.model = RobotModel.from_urdf(values['urdf_path'] or default_urdf_path())
        self.sim = Simulator(self.model, self._config(values))
        m = self.sim.n_actuated
        q0 = self._per_joint(values['initial_positions'], 'initial_positions', m)
        lower, upper = self._actuated_limits()
        q0 = np.clip(q0, lower, upper)
        self.sim.step()            # warm up torch so the first tick keeps time
        self.sim.reset(q0)
        if values['command_mode'] == 'position':
            self.sim.set_position_command(q0)

        self.command_names = self.sim.actuated_names
        # The driver publishes current * current_to_effort, not the torque: for CRANE-X7
        # joints the motor table converts (effort = torque / torque_constant * 2.20 or 3.60).
        self._effort_scale = (1.0 / motors.effort_to_torque(self.command_names)
                              if motors.known(self.command_names)
                              else np.ones(len(self.command_names)))
        # The joint state broadcaster's order is its own (alphabetical here), not the URDF's.
        self.state_names = tuple(sorted(self.command_names))
        self._state_order = np.array([self.command_names.index(n) for n in self.state_names])
        self._effort_timeout = float(values['effort_timeout'])
        self._dt = 1.0 / float(values['physics_rate_hz'])
        self._max_steps = int(values['max_steps_per_tick'])
        self._budget = 0.8 / float(values['publish_rate_hz'])   # physics time per tick [s]
        self.rejected = dict.fromkeys(REJECTION_REASONS, 0)
        self.counters = {'effort_commands': 0, 'position_commands': 0, 'stale_effort': 0,
                         'overrun_steps': 0, 'published': 0}
        self._last_log: dict[str, float] = {}
        self._effort_stamp: float | None = None  # monotonic time of the effort command

        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._pub_state = self.create_publisher(JointState, 'joint_states', reliable)
        self._pub_description = self.create_publisher(String, 'robot_description', latched)
        self._pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', reliable)
        self._pub_description.publish(String(data=self.model.urdf_xml))
        self.create_subscription(Float64MultiArray, 'effort_controller/commands',
                                 self._on_effort, reliable)
        self.create_subscription(Float64MultiArray, 'position_controller/commands',
                                 self._on_position, reliable)
        # The driver's interface: the arm controllers of the emulated controller manager.
        arm = list(values['arm_joints'])
        unknown = [j for j in arm if j not in self.command_names]
        if unknown or len(set(arm)) != len(arm) or not arm:
            raise ValueError(f'{NODE_NAME}: arm_joints {arm} must be distinct actuated joints '
                             f'of {list(self.command_names)}')
        self.arm_joints = tuple(arm)
        self._arm = np.array([self.command_names.index(j) for j in arm])
        self._active = str(values['active_arm_controller'])
        self._trajectory: tuple[float, np.ndarray, list[tuple[float, np.ndarray]]] | None = None
        self.counters.update({'trajectory_commands': 0, 'forward_commands': 0,
                              'ignored_inactive': 0, 'switches': 0})
        self.create_subscription(JointTrajectory, f'{JTC}/joint_trajectory',
                                 self._on_trajectory, reliable)
        self.create_subscription(Float64MultiArray, f'{FORWARD}/commands', self._on_forward,
                                 reliable)

        self._start = time.monotonic()
        self._steps_due_from: float | None = None  # wall time the step schedule counts from
        self._scheduled = 0                         # physics steps taken on this schedule
        self._window = (time.monotonic(), time.process_time(), self.sim.steps, 0,
                        self.sim.evaluations)
        self._timer = self.create_timer(1.0 / float(values['publish_rate_hz']), self._on_tick)
        self._report_timer = self.create_timer(float(values['report_period']), self._report)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.get_logger().info(
            f'simulating {self.model.name} ({m} actuated joints) at '
            f"{values['physics_rate_hz']:g} Hz, joint_states at {values['publish_rate_hz']:g} "
            f'Hz, {self.sim.mode} mode; commands take {list(self.command_names)}')

    # ------------------------------------------------------------------ parameters
    def _actuated_limits(self) -> tuple[np.ndarray, np.ndarray]:
        act = self.model.actuated
        return self.model.joint_lower[act], self.model.joint_upper[act]

    @staticmethod
    def _per_joint(values, name: str, m: int) -> np.ndarray:
        arr = np.asarray(list(values), dtype=float)
        if arr.size == 1:
            arr = np.full(m, arr[0])
        if arr.shape != (m,) or not np.all(np.isfinite(arr)):
            raise ValueError(f'parameter {name}: need 1 or {m} finite values, got '
                             f'{list(values)}')
        return arr

    def _config(self, values: dict) -> SimulatorConfig:
        error = self._check(values)
        if error:
            raise ValueError(f'{NODE_NAME}: {error}')

        def gain(name: str):
            arr = np.asarray(list(values[name]), dtype=float)
            if np.all(arr == 0.0):
                return None                      # derived from the servo model
            return float(arr[0]) if arr.size == 1 else tuple(arr)

        return SimulatorConfig(
            dt=1.0 / float(values['physics_rate_hz']),
            friction=bool(values['friction']), joint_limits=bool(values['joint_limits']),
            effort_saturation=bool(values['effort_saturation']),
            kp=gain('kp'), kd=gain('kd'),
            p_gain=float(values['position_p_gain']),
            quantize_position=bool(values['quantize_position']),
            quantize_velocity=bool(values['quantize_velocity']))

    @staticmethod
    def _check(values: dict) -> str:
        """'' when the parameters are consistent, else what is wrong."""
        if values['command_mode'] not in _COMMAND_MODES:
            return f"command_mode must be one of {_COMMAND_MODES}, got {values['command_mode']!r}"
        if values['publish_rate_hz'] > values['physics_rate_hz']:
            return (f"publish_rate_hz ({values['publish_rate_hz']:g}) exceeds physics_rate_hz "
                    f"({values['physics_rate_hz']:g})")
        for name in ('kp', 'kd'):
            if any(not math.isfinite(v) or v < 0.0 for v in values[name]):
                return f'{name} must be finite and non-negative, got {list(values[name])}'
        return ''

    def _on_set_parameters(self, params) -> SetParametersResult:
        for param in params:
            if param.name == 'active_arm_controller':
                if param.value not in ARM_CONTROLLERS:
                    return SetParametersResult(
                        successful=False, reason=f'active_arm_controller must be one of '
                        f'{ARM_CONTROLLERS}, got {param.value!r}')
            if param.name == 'position_p_gain':
                value = float(param.value)
                if not (math.isfinite(value) and value > 0.0):
                    return SetParametersResult(successful=False,
                                               reason='position_p_gain must be > 0')
        for param in params:
            if param.name == 'active_arm_controller' and param.value != self._active:
                # Activation of either controller leaves the position command interface at
                # its last value: the JTC holds it, the forward controller writes nothing
                # until its first command.
                self.get_logger().info(f'switch: {self._active} -> {param.value}')
                self._active = str(param.value)
                self._trajectory = None
                self.counters['switches'] += 1
            if param.name == 'position_p_gain':
                self.sim.set_p_gain(float(param.value))
                self.get_logger().warning(f'servo position P gain now {param.value:g}')
        for param in params:
            if param.name == 'effort_timeout':
                value = float(param.value)
                if not (math.isfinite(value) and value >= 0.0):
                    return SetParametersResult(successful=False,
                                               reason='effort_timeout must be >= 0')
                self._effort_timeout = value
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ commands
    def _reject(self, reason: str, detail: str) -> None:
        self.rejected[reason] += 1
        now = time.monotonic()
        if now - self._last_log.get(reason, -math.inf) >= _LOG_THROTTLE_S:
            self._last_log[reason] = now
            self.get_logger().warning(f'rejected command ({reason}): {detail} '
                                      f'[{self.rejected[reason]} so far]')

    def _validated(self, msg: Float64MultiArray, kind: str) -> np.ndarray | None:
        data = np.asarray(msg.data, dtype=float)
        m = self.sim.n_actuated
        if data.shape != (m,):
            self._reject('length', f'{kind} command has {data.size} values, needs {m} '
                         f'({", ".join(self.command_names)})')
            return None
        if not np.all(np.isfinite(data)):
            bad = [self.command_names[k] for k in np.flatnonzero(~np.isfinite(data))]
            self._reject('nonfinite', f'{kind} command is not finite for {bad}')
            return None
        return data

    def _on_effort(self, msg: Float64MultiArray) -> None:
        tau = self._validated(msg, 'effort')
        if tau is not None:
            self.sim.set_effort_command(tau)
            self._effort_stamp = time.monotonic()
            self.counters['effort_commands'] += 1

    def _on_position(self, msg: Float64MultiArray) -> None:
        q = self._validated(msg, 'position')
        if q is not None:
            self.sim.set_position_command(q)
            self._effort_stamp = None
            self.counters['position_commands'] += 1

    def _arm_command(self, q_arm: np.ndarray) -> None:
        q = self._position_command()
        q[self._arm] = q_arm
        self.sim.set_position_command(q)
        self._effort_stamp = None

    def _position_command(self) -> np.ndarray:
        """The position command interfaces now (the measured position if in effort mode)."""
        cmd = self.sim.position_command
        return (self.sim.measure().q[:self.sim.n_actuated] if cmd is None else cmd).copy()

    def _inactive(self, controller: str) -> bool:
        if self._active == controller:
            return False
        self.counters['ignored_inactive'] += 1
        self._reject('inactive', f'{controller} is not active (active: {self._active})')
        return True

    def _on_forward(self, msg: Float64MultiArray) -> None:
        if self._inactive(FORWARD):
            return
        data = np.asarray(msg.data, dtype=float)
        if data.shape != self._arm.shape:
            self._reject('length', f'{FORWARD} command has {data.size} values, needs '
                         f'{self._arm.size} ({", ".join(self.arm_joints)})')
            return
        if not np.all(np.isfinite(data)):
            self._reject('nonfinite', f'{FORWARD} command is not finite')
            return
        self._arm_command(data)
        self.counters['forward_commands'] += 1

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        if self._inactive(JTC):
            return
        names = list(msg.joint_names)
        if sorted(names) != sorted(self.arm_joints) or not msg.points:
            self._reject('joints', f'{JTC}: trajectory for {names} with {len(msg.points)} '
                         f'points; needs all of {list(self.arm_joints)} and >= 1 point')
            return
        order = [names.index(j) for j in self.arm_joints]
        points, previous = [], -1.0
        for k, point in enumerate(msg.points):
            q = np.asarray(point.positions, dtype=float)
            t = point.time_from_start.sec + point.time_from_start.nanosec * 1e-9
            if q.shape != (len(names),) or not np.all(np.isfinite(q)) or (k and t <= previous):
                self._reject('joints', f'{JTC}: point {k} has {q.size} positions, non-finite '
                             'values or a time_from_start not after the previous one')
                return
            points.append((t, q[order]))
            previous = t
        stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
        now = self.get_clock().now().nanoseconds * 1e-9
        start = now if stamp == 0.0 else stamp
        if stamp != 0.0 and start + points[-1][0] < now:
            self._reject('joints', f'{JTC}: trajectory with non-zero start time ends in the past')
            return
        # Start from the measured arm position (closed loop, as open_loop_control false).
        q_start = self.sim.measure().q[self._arm]
        self._trajectory = (start, q_start, points)
        self.counters['trajectory_commands'] += 1
        self._follow_trajectory()

    def _follow_trajectory(self) -> None:
        if self._trajectory is None or self._active != JTC:
            return
        start, q_prev, points = self._trajectory
        t = self.get_clock().now().nanoseconds * 1e-9 - start
        t_prev = 0.0
        for t_point, q_point in points:
            if t < t_point:
                w = (t - t_prev) / (t_point - t_prev) if t_point > t_prev else 1.0
                self._arm_command(q_prev + max(0.0, w) * (q_point - q_prev))
                return
            t_prev, q_prev = t_point, q_point
        self._arm_command(q_prev)          # played out: hold the last point
        self._trajectory = None

    # ------------------------------------------------------------------ physics + publish
    def _on_tick(self) -> None:
        now = time.monotonic()
        if (self.sim.mode == 'effort' and self._effort_stamp is not None
                and self._effort_timeout > 0.0
                and now - self._effort_stamp > self._effort_timeout):
            self.sim.set_effort_command(np.zeros(self.sim.n_actuated))
            self._effort_stamp = None
            self.counters['stale_effort'] += 1
            self.get_logger().warning(f'effort command older than {self._effort_timeout:g} s: '
                                      'zero effort')
        self._follow_trajectory()
        if self._steps_due_from is None:   # first tick: the schedule starts now
            self._steps_due_from = now - self._dt
        due = int((now - self._steps_due_from) / self._dt) - self._scheduled
        # Step until caught up, but within the tick's budget so joint_states keep their
        # rate; what a busy machine cannot do is dropped and the robot runs slow.
        done = 0
        for _ in range(min(due, self._max_steps)):
            self.sim.step(self._dt)
            done += 1
            if time.monotonic() - now > self._budget:
                break
        if due > done:
            self.counters['overrun_steps'] += due - done
        self._scheduled += max(due, 0)
        if not self.context.ok():
            return  # shutting down (signal) while stepping: the publisher is gone
        meas = self.sim.measure()
        order = self._state_order
        self._pub_state.publish(msgs.joint_state(
            self.state_names, meas.q[order], meas.qd[order],
            (meas.effort * self._effort_scale)[order],
            t_ns=self.get_clock().now().nanoseconds))
        self.counters['published'] += 1

    def _report(self) -> None:
        now, cpu = time.monotonic(), time.process_time()
        t0, cpu0, steps0, published0, evaluations0 = self._window
        elapsed = max(now - t0, 1e-9)
        physics_hz = (self.sim.steps - steps0) / elapsed
        computed_hz = (self.sim.evaluations - evaluations0) / elapsed
        publish_hz = (self.counters['published'] - published0) / elapsed
        cpu_percent = 100.0 * (cpu - cpu0) / elapsed
        self._window = (now, cpu, self.sim.steps, self.counters['published'],
                        self.sim.evaluations)
        values = {'physics_rate_hz': physics_hz, 'computed_steps_hz': computed_hz,
                  'publish_rate_hz': publish_hz,
                  'cpu_percent': cpu_percent, 'sim_time_s': self.sim.state.t,
                  'wall_time_s': now - self._start, 'mode': self.sim.mode,
                  'solver_fallbacks': self.sim.solver_fallbacks}
        values.update(self.counters)
        values.update({f'rejected.{k}': v for k, v in self.rejected.items()})
        target = 1.0 / self._dt
        level = msgs.DiagnosticLevel.OK if physics_hz > 0.9 * target \
            else msgs.DiagnosticLevel.WARN
        self._pub_diag.publish(msgs.diagnostic_array([msgs.diagnostic_status(
            self.get_fully_qualified_name(), level,
            f'physics {physics_hz:.0f} Hz of {target:g}', values,
            hardware_id=self.model.name)], t_ns=self.get_clock().now().nanoseconds))
        self.get_logger().info(
            f'physics {physics_hz:.0f} Hz (target {target:g}; {computed_hz:.0f} Hz computed, '
            f'the rest at exact rest), joint_states {publish_hz:.0f} Hz, CPU '
            f'{cpu_percent:.0f} %, {self.counters["overrun_steps"]} steps dropped, rejected '
            f'{sum(self.rejected.values())}')


def controller_stand_ins(sim: SimNode) -> list[Node]:
    """Nodes named like the two arm controllers, carrying their ``joints`` parameter.

    Only the parameter is emulated (so a client's GetParameters on
    ``/<controller>/get_parameters`` reads it, as on the real controller manager, where each
    controller is a node); the topics live on the simulator node itself.
    """
    nodes = []
    for name in (JTC, FORWARD):
        # Not the process's global arguments: a launch file's `-r __node:=plag_sim` would
        # rename these too, and two nodes would answer /plag_sim/get_parameters.
        node = Node(name, context=sim.context, use_global_arguments=False)
        node.declare_parameter('joints', list(sim.arm_joints))
        nodes.append(node)
    return nodes


def main(args: list[str] | None = None) -> None:
    """Console script ``sim_node``: spin :class:`SimNode` (and the controller stand-ins)
    until shutdown."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    from plag_ros.ros import rclpy_compat

    rclpy.init(args=args)
    nodes: list[Node] = []
    try:
        sim = SimNode()
        nodes = [sim, *controller_stand_ins(sim)]
        executor = SingleThreadedExecutor()
        for node in nodes:
            executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise
        # else: Ctrl-C shut the context down under the executor's wait, and rclpy raised
        # from inside it (seen once on a machine loaded three times over): a clean exit.
    finally:
        for node in nodes:
            node.destroy_node()
        rclpy_compat.try_shutdown()


if __name__ == '__main__':
    main()
