"""``plag_impedance``: partial-impedance control of the CRANE-X7 (seed 002, section 4).

A thin wrapper over :class:`plag_ros.core.control.PartialImpedanceController`: per
``joint_states`` message it maps the joints by name, runs the controller's own estimator,
decomposition and law, and publishes the command at once (lowest latency: no timer in
between); a timer at ``rate_hz`` runs the watchdog, which holds when the input goes stale.

The node runs its own :class:`~plag_ros.core.filters.JointStateEstimator` rather than
subscribing to ``plag_dynamics/joint_states``: one DDS hop and one process less between
the robot and the command, no dependency on the dynamics node running, and the estimator
settings (cut-off, delay) are chosen for control, not for analysis.

==================================  ============================  ============================
topic / service (relative)          type, QoS                     content
==================================  ============================  ============================
``joint_states`` (in)               sensor_msgs/JointState,       measured state, any joint
                                    reliable, depth 50            order (mimic joints ignored)
``~/reference`` (in)                sensor_msgs/JointState,       set point: position (and
                                    reliable, depth 10            velocity) of every actuated
                                                                  joint; replaces the
                                                                  ``reference.*`` trajectory
``command.topic`` (out), default     ``command.type`` forward:     goal positions [rad] of
``/plag_arm_position_controller/    std_msgs/Float64MultiArray,   ``command.joints`` in that
commands`` or ``/crane_x7_arm_      reliable, depth 10;           order; trajectory: one point,
controller/joint_trajectory``       trajectory: trajectory_msgs/  header stamp 0 (= start now),
                                    JointTrajectory               ``time_from_start`` =
                                                                  ``command.time_from_start``
``effort_controller/commands``      std_msgs/Float64MultiArray    torques [N*m]; effort
(out)                                                             interface: simulator only
``~/compensation`` (out)            sensor_msgs/JointState        per command: position = q_d,
                                                                  velocity = measured q,
                                                                  effort = selected propagation
                                                                  torque [N*m]
``~/torque`` (out)                  sensor_msgs/JointState        per command: effort = the
                                                                  clipped impedance torque
``~/state`` (out)                   std_msgs/String (JSON),       state, reason, alpha,
                                    reliable, transient local     saturated joints, counters;
                                                                  on change and at
                                                                  ``state_rate_hz``
``~/enable`` (service)              std_srvs/SetBool              enable (ramp) / disable (hold)
==================================  ============================  ============================

Command paths to the official driver (rt-net/crane_x7_ros, crane_x7_control: position
command interfaces only, ``crane_x7_arm_controller`` active after bring-up):

* ``forward`` (default, recommended): ``std_msgs/Float64MultiArray`` to our
  ``position_controllers/JointGroupPositionController`` ``plag_arm_position_controller``
  (config/crane_x7_controllers.yaml, spawned inactive by ``crane_x7.launch.py
  control:=true``). ``~/enable`` first switches ``crane_x7_arm_controller`` ->
  ``plag_arm_position_controller`` (``switch.method``; see
  :mod:`plag_ros.ros.controller_switch`); disable, a latched fault or shutdown switch back
  ``switch.hold_s`` after the hold began. Values go index by index in the controller's
  ``joints`` order (ros2_controllers forward_command_controller), so ``command.joints``
  must equal that list exactly.
* ``trajectory``: a one-point ``trajectory_msgs/JointTrajectory`` per cycle to the running
  ``crane_x7_arm_controller`` (ros2_controllers joint_trajectory_controller ``~/joint_
  trajectory``). No switch. Header stamp 0 means "start now"; ``time_from_start`` 0 makes
  the point a step (the JTC jumps to it in its next update); a positive value makes the
  JTC interpolate from the *measured* (sagged) position to the point, which halves the
  stiffness the servo sees at 200 Hz: keep 0. All 7 arm joints, any order (the JTC maps
  names; ``allow_partial_joints_goal`` is false in the driver's yaml).

``command.joints`` defaults to the 7 arm joints; finger a stays with
``crane_x7_gripper_controller`` (its action). At start-up the node reads the target
controller's ``joints`` parameter (rcl_interfaces GetParameters on
``/<controller>/get_parameters``, retried while the service is missing) and refuses
``~/enable`` on a mismatch. ``~/enable`` also refuses while nothing subscribes to the
command topic. Nothing is published before the first valid joint state. Gains, masks and
the reference may be changed at run time (validated; the
controller keeps its state); the interface, model, rate and estimator are read-only.

Size (over ~600 lines): the node sequences enable, hold and the controller switch-back
for two command paths; the law is in plag_ros.core.control and the switch mechanics in
controller_switch. Splitting further would scatter that sequence, which is safer read in
one place.
"""
from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable, Sequence
from typing import cast

import numpy as np
import torch
from builtin_interfaces.msg import Duration
from rcl_interfaces.msg import (
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rcl_interfaces.srv import GetParameters
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.client import Client
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from plag_ros.core import motors
from plag_ros.core.control import (
    Command,
    HoldReference,
    ImpedanceConfig,
    PartialImpedanceController,
    SineReference,
    propagation_mask,
)
from plag_ros.core.dynamics import PartialLagrangian
from plag_ros.core.filters import EstimatorConfig
from plag_ros.core.model import RobotModel, default_urdf_path
from plag_ros.core.plausibility import PlausibilityGate
from plag_ros.ros import messages as msgs
from plag_ros.ros.controller_switch import (
    METHODS,
    ControllerSwitch,
    read_joints,
    sleep,
    switch_command,
)
from plag_ros.ros.parameters import PLAUSIBILITY_PARAMETERS, choice, plausibility_config
from plag_ros.ros.parameters import descriptor as _desc

__all__ = ['NODE_NAME', 'PARAMETERS', 'ImpedanceNode', 'main']

NODE_NAME = 'plag_impedance'
_LOG_THROTTLE_S = 2.0
TILT = 'crane_x7_shoulder_revolute_part_tilt_joint'
ELBOW = 'crane_x7_upper_arm_revolute_part_rotate_joint'


_D, _DA = ParameterType.PARAMETER_DOUBLE, ParameterType.PARAMETER_DOUBLE_ARRAY
_S, _SA = ParameterType.PARAMETER_STRING, ParameterType.PARAMETER_STRING_ARRAY
_B, _I = ParameterType.PARAMETER_BOOL, ParameterType.PARAMETER_INTEGER
_PER_JOINT = (' (one value for every joint, or one per actuated joint in URDF order: the 7 '
              'arm joints, then finger a)')
FORWARD_CONTROLLER = 'plag_arm_position_controller'
TRAJECTORY_CONTROLLER = 'crane_x7_arm_controller'
COMMAND_TYPES = ('forward', 'trajectory')
_ACTUATED = (*motors.ARM_JOINTS, motors.GRIPPER_JOINT)
_SERVO_STIFFNESS = [round(float(k), 2) for k in motors.servo_stiffness(_ACTUATED)]

# name -> (default, descriptor). Defaults match config/impedance.yaml.
PARAMETERS: dict[str, tuple[object, ParameterDescriptor]] = {
    'urdf_path': ('', _desc(_S, 'URDF of the controlled robot; empty: the bundled '
                            'crane_x7.urdf', read_only=True)),
    'command_interface': ('position', _desc(
        _S, "'position' (the real CRANE-X7 driver: it has no effort interface) or 'effort' "
        '(simulator only)', read_only=True, constraints="one of 'effort', 'position'")),
    'command.type': ('forward', _desc(
        _S, "'forward': Float64MultiArray to plag_arm_position_controller (switched in); "
        "'trajectory': one-point JointTrajectory to crane_x7_arm_controller", read_only=True,
        constraints="one of 'forward', 'trajectory'")),
    'command.topic': ('', _desc(
        _S, "command topic; '' = /plag_arm_position_controller/commands (forward), "
        '/crane_x7_arm_controller/joint_trajectory (trajectory), effort_controller/commands '
        '(effort interface)', read_only=True)),
    'command.joints': (list(motors.ARM_JOINTS), _desc(
        _SA, "joints commanded, in the controller's order (default: the 7 arm joints; finger "
        'a stays with the gripper action controller)', read_only=True)),
    'command.controller': ('', _desc(
        _S, "controller whose joints parameter is checked; '' = plag_arm_position_"
        'controller (forward) or crane_x7_arm_controller (trajectory)', read_only=True)),
    'command.time_from_start': (0.0, _desc(
        _D, 'trajectory: time_from_start of the point [s]; 0 = a step in the next JTC update',
        read_only=True, low=0.0, high=10.0)),
    'switch.method': ('controller_manager', _desc(
        _S, "forward: switch the arm controllers through 'controller_manager' "
        "(controller_manager/switch_controller), the simulator ('sim') or not at all "
        "('none')", read_only=True, constraints=f'one of {METHODS}')),
    'switch.controller_manager': ('/controller_manager', _desc(
        _S, 'controller manager node', read_only=True)),
    'switch.sim_node': ('/plag_sim', _desc(_S, 'simulator node (switch.method sim)',
                                           read_only=True)),
    'switch.fallback': (TRAJECTORY_CONTROLLER, _desc(
        _S, 'the controller ours replaces, switched back after a hold', read_only=True)),
    'switch.hold_s': (0.5, _desc(_D, 'hold this long before switching back [s]', low=0.0,
                                 high=60.0)),
    'switch.timeout_s': (5.0, _desc(_D, 'deadline of one switch [s]', read_only=True,
                                    low=0.1, high=60.0)),
    'fault.tracking_error': (0.3, _desc(
        _D, 'latched fault when |q_cmd - q| of a commanded joint exceeds this [rad] for '
        'fault.persist_s; 0 or less: off', low=-1.0, high=10.0)),
    'fault.effort_error': (1.5, _desc(
        _D, 'latched fault when |effort - K_s (q_cmd - q)| exceeds this [N*m] for '
        'fault.persist_s (servo gain lost, e.g. P=5); 0 or less: off', low=-1.0, high=100.0)),
    'fault.persist_s': (0.1, _desc(_D, 'how long a fault limit must be exceeded [s]',
                                   low=0.0, high=10.0)),
    'rate_hz': (200.0, _desc(_D, 'nominal joint_states rate and watchdog rate [Hz]',
                             read_only=True, low=1.0, high=10000.0)),
    'stale_periods': (5.0, _desc(_D, 'hold when no valid joint state for this many periods',
                                 low=1.01, high=1000.0)),
    'input_loss_s': (1.0, _desc(_D, 'joint_states absent this long [s] is taken as the driver '
                                'gone: on its return switch again, then re-ramp '
                                '(resume_after_fault) or stay disabled', low=0.05, high=3600.0)),
    'ramp_s': (2.0, _desc(_D, 'gain ramp after enable or a cleared fault [s]', low=0.0,
                          high=60.0)),
    'start_enabled': (False, _desc(_B, 'enable at the first valid joint state (with a switch: '
                                   'tried every 0.1 s for switch.timeout_s)', read_only=True)),
    'fault_action': ('zero', _desc(
        _S, "effort interface while holding: 'zero' effort or open-loop gravity 'hold' "
        '(the position interface always holds the last valid position)',
        constraints="one of 'zero', 'hold'")),
    'resume_after_fault': (True, _desc(_B, 're-ramp when a fault clears (else disable)')),
    'gravity_compensation': (True, _desc(_B, 'add the gravity torque g(q)')),
    'stiffness': ([10.0, 20.0, 10.0, 10.0, 4.0, 4.0, 2.0, 1.0], _desc(
        _DA, 'joint stiffness K [N*m/rad] >= 0' + _PER_JOINT)),
    'damping': ([0.4, 1.5, 0.8, 0.6, 0.05, 0.06, 0.02, 0.01], _desc(
        _DA, 'joint damping D [N*m*s/rad] >= 0' + _PER_JOINT)),
    'inertia': ([0.0], _desc(_DA, 'target inertia [kg*m^2]; 0 keeps the natural inertia'
                             + _PER_JOINT)),
    'servo_stiffness': (_SERVO_STIFFNESS, _desc(
        _DA, 'servo position-loop stiffness K_s [N*m/rad] > 0 (position interface); default '
        'from the motor table plag_ros/core/motors.py at the P gain 800 the driver writes'
        + _PER_JOINT)),
    'max_position_step': ([0.02], _desc(_DA, 'largest position command change per cycle '
                                        '[rad] > 0' + _PER_JOINT)),
    'effort_scale': (1.0, _desc(_D, 'fraction of the URDF effort limits allowed', low=0.01,
                                high=1.0)),
    'motion_source': ('measured', _desc(
        _S, "motion in the propagation torques: 'measured' (estimated qd, qdd) or "
        "'desired' (reference feedforward)", constraints="one of 'measured', 'desired'")),
    'compensate.acceleration': ([f'{TILT}<-{ELBOW}'], _desc(
        _SA, "acceleration propagation paths to cancel, 'target<-source' joint names, '*' "
        "for all; '' or 'none' for nothing")),
    'compensate.velocity': ([f'{TILT}<-{ELBOW}'], _desc(
        _SA, 'velocity propagation paths to cancel (same syntax)')),
    'compensate.bodies': ([''], _desc(_SA, "restrict compensation to these bodies; '' = "
                                      'all bodies')),
    'reference.mode': ('hold', _desc(
        _S, "'hold' the position at enable, or 'sine': centre at enable + amplitude * "
        'sin(2 pi f t)', constraints="one of 'hold', 'sine'")),
    'reference.amplitude': ([0.0], _desc(_DA, 'sine amplitude [rad]' + _PER_JOINT)),
    'reference.frequency_hz': ([0.5], _desc(_DA, 'sine frequency [Hz]' + _PER_JOINT)),
    'filter.cutoff_hz': (10.0, _desc(_D, 'estimator low-pass -3 dB frequency [Hz]',
                                     read_only=True, low=0.01, high=10000.0)),
    'filter.order': (2, _desc(_I, 'estimator Butterworth order', read_only=True, low=1,
                              high=8)),
    'filter.velocity_source': ('measured', _desc(
        _S, "'position' differentiates positions; 'measured' filters joint_states velocity",
        read_only=True, constraints="one of 'position', 'measured'")),
    'filter.gap_periods': (5.0, _desc(_D, 'a stamp gap above this many periods restarts '
                                      'the estimator', read_only=True, low=1.01, high=1e6)),
    'gain_check': ('refuse', _desc(
        _S, "a commanded joint whose (K, D) have a gain margin below 2 in the sampled loop "
        "(plag_ros/core/stability.py): 'refuse' (the parameters are not taken, the node does not "
        "start), 'warn' (logged) or 'off'", constraints="one of 'refuse', 'warn', 'off'")),
    'delay_periods': (1.0, _desc(_D, 'sample-to-command delay the gain check assumes '
                                 '[periods]', low=0.0, high=99.0)),
    'oscillation.reversals': (8, _desc(
        _I, 'latched fault when a joint reverses this many times within oscillation.window_s '
        '(plag_ros/core/oscillation.py); 0: off', low=0, high=1000)),
    'oscillation.window_s': (0.8, _desc(_D, 'the oscillation monitor window [s]', low=0.05,
                                        high=60.0)),
    'use_header_stamp': (True, _desc(_B, 'estimate on the joint_states header stamps (else '
                                     'on receive time)', read_only=True)),
    'state_rate_hz': (10.0, _desc(_D, 'rate of ~/state besides every change [Hz]', low=0.1,
                                  high=1000.0)),
    'torch_threads': (1, _desc(_I, 'torch intra-op threads (1 is fastest for one sample)',
                               read_only=True, low=1, high=256)),
    **PLAUSIBILITY_PARAMETERS,
}


def _paths(values: Sequence[str]) -> list[str]:
    return [v for v in values if v.strip() and v.strip().lower() != 'none']


def _per_joint(values: Sequence[float]) -> float | np.ndarray:
    a = np.asarray(list(values), dtype=np.float64)
    if a.size == 0:
        raise ValueError('empty per-joint list')
    return float(a[0]) if a.size == 1 else a


def command_joints(model: RobotModel, values: dict) -> list[str]:
    """The validated ``command.joints`` (distinct actuated joints of ``model``)."""
    joints = list(values['command.joints'])
    actuated = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    bad = [j for j in joints if j not in actuated]
    if not joints or bad or len(set(joints)) != len(joints):
        raise ValueError(f'command.joints {joints}: need distinct actuated joints of '
                         f'{model.name} ({actuated}); unknown: {bad}')
    return joints


def controller_config(model: RobotModel, values: dict) -> ImpedanceConfig:
    """Validated :class:`ImpedanceConfig` from the node's parameter values.

    Raises:
        ValueError: any inconsistent value; the message names the parameter.
    """
    bodies = _paths(values['compensate.bodies'])

    def mask(name: str):
        paths = _paths(values[name])
        if not paths:
            return None
        try:
            return propagation_mask(model, paths, bodies=bodies or None)
        except ValueError as err:
            raise ValueError(f'{name}: {err}') from err

    try:
        per_joint = {name: _per_joint(values[name]) for name in (
            'stiffness', 'damping', 'inertia', 'servo_stiffness', 'max_position_step')}
    except ValueError as err:
        raise ValueError(f'per-joint parameter: {err}') from err
    actuated = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    commanded = command_joints(model, values)
    monitored = np.array([name in commanded for name in actuated])
    estimator = EstimatorConfig(
        cutoff_hz=float(values['filter.cutoff_hz']), order=int(values['filter.order']),
        rate_hz=float(values['rate_hz']), gap_periods=float(values['filter.gap_periods']),
        velocity_source=choice(values, 'filter.velocity_source', ('position', 'measured')))
    def limit(name: str) -> float:
        value = float(values[name])
        return value if value > 0.0 else math.inf

    return ImpedanceConfig(
        **per_joint, tracking_error_limit=limit('fault.tracking_error'),
        effort_error_limit=limit('fault.effort_error'),
        fault_persist_s=float(values['fault.persist_s']),
        monitored=monitored, gravity_compensation=bool(values['gravity_compensation']),
        acceleration_mask=mask('compensate.acceleration'),
        velocity_mask=mask('compensate.velocity'),
        motion_source=choice(values, 'motion_source', ('desired', 'measured')),
        command_interface=choice(values, 'command_interface', ('effort', 'position')),
        effort_scale=float(values['effort_scale']), rate_hz=float(values['rate_hz']),
        stale_periods=float(values['stale_periods']), ramp_s=float(values['ramp_s']),
        fault_action=choice(values, 'fault_action', ('hold', 'zero')),
        resume_after_fault=bool(values['resume_after_fault']),
        start_enabled=bool(values['start_enabled']), estimator=estimator,
        gain_check=choice(values, 'gain_check', ('refuse', 'warn', 'off')),
        delay_periods=float(values['delay_periods']),
        oscillation_reversals=int(values['oscillation.reversals']),
        oscillation_window_s=float(values['oscillation.window_s']))


def reference_from(values: dict, n_act: int):
    """The reference trajectory the ``reference.*`` parameters describe."""
    mode = values['reference.mode']
    if mode == 'hold':
        return HoldReference()
    if mode != 'sine':
        raise ValueError(f"reference.mode must be 'hold' or 'sine', got {mode!r}")
    amplitude = np.broadcast_to(_per_joint(values['reference.amplitude']), (n_act,))
    frequency = np.broadcast_to(_per_joint(values['reference.frequency_hz']), (n_act,))
    if not (np.isfinite(amplitude).all() and np.isfinite(frequency).all()
            and (frequency >= 0).all()):
        raise ValueError('reference.amplitude and reference.frequency_hz must be finite, '
                         'frequencies >= 0')
    return SineReference(amplitude.copy(), frequency.copy())


class ImpedanceNode(Node):
    """Joint states in; partial-impedance effort or position commands out.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (``parameter_overrides``, ``context``...).

    Raises:
        ValueError: inconsistent parameters (the message names them).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        for name, (default, descriptor) in PARAMETERS.items():
            self.declare_parameter(name, default, descriptor)
        values = self._values()
        torch.set_num_threads(int(values['torch_threads']))
        self.model = RobotModel.from_urdf(values['urdf_path'] or default_urdf_path())
        self.engine = PartialLagrangian(self.model, dtype=torch.float64)
        try:
            config = controller_config(self.model, values)
            reference = reference_from(values, int(self.model.actuated.sum()))
        except ValueError as err:
            raise ValueError(f'{self.get_name()}: {err}') from err
        self.controller = PartialImpedanceController(self.engine, config, reference)
        for warning in self.controller.warnings:
            self.get_logger().warning(warning)
        self._reader = msgs.JointStateReader(self.model)
        self._gate = PlausibilityGate(self.model, plausibility_config(values))
        self._ref_reader = msgs.JointStateReader(self.model)
        self._act = np.flatnonzero(self.model.actuated)
        self._names = list(self.controller.joint_names)
        self._measured_velocity = config.estimator.velocity_source == 'measured'
        self._use_stamp = bool(values['use_header_stamp'])
        self._state_period_ns = int(1e9 / float(values['state_rate_hz']))
        self.rejected: dict[str, int] = {}
        self.commands = 0
        self._last_log: dict[str, float] = {}
        self._last_state = ('', '')
        self._last_state_ns = 0
        self.add_on_set_parameters_callback(self._on_set_parameters)

        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        # Coroutine callbacks (enable, joint check) await service responses: they and the
        # clients share a reentrant group, or the node's default exclusive group deadlocks.
        self._async_group = ReentrantCallbackGroup()
        self._setup_command(values, config)
        topic = self._topic
        # start_enabled with a switch: enable through the same path as ~/enable (switch
        # first) at the first valid state, not inside the controller.
        self._auto_enable = bool(config.start_enabled and self._switch is not None
                                 and self._switch.method != 'none')
        if self._auto_enable:
            self.controller.reconfigure(config.replace(start_enabled=False))
        self._pub_compensation = self.create_publisher(JointState, '~/compensation', reliable)
        self._pub_torque = self.create_publisher(JointState, '~/torque', reliable)
        self._pub_state = self.create_publisher(String, '~/state', QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.create_subscription(JointState, 'joint_states', self._on_joint_state,
                                 QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
        self.create_subscription(JointState, '~/reference', self._on_reference, reliable)
        self.create_service(SetBool, '~/enable', self._on_enable,
                            callback_group=self._async_group)
        self.create_timer(1.0 / config.rate_hz, self._on_timer)
        # rclpy's annotation (Kilted's; Humble's and Jazzy's have none) admits only plain
        # callbacks, but every executor awaits coroutine timer callbacks
        # (rclpy/executors.py, _take_timer -> await_or_execute).
        self._joint_check_timer = self.create_timer(
            1.0, cast('Callable[[], None]', self._check_joints),
            callback_group=self._async_group)
        self.get_logger().info(
            f'{self._kind} commands on {self.resolve_topic_name(topic)} for '
            f'{self._command_names}; compensating acceleration '
            f'{_paths(values["compensate.acceleration"])}, velocity '
            f'{_paths(values["compensate.velocity"])} ({config.motion_source} motion); '
            + ('enabled at the first joint state' if config.start_enabled else
               'call ~/enable to start'))

    # ------------------------------------------------------------------ command path
    def _setup_command(self, values: dict, config: ImpedanceConfig) -> None:
        """Command topic, message type, joint mapping, switch and joint check."""
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        kind = str(values['command.type'])
        if kind not in COMMAND_TYPES:
            raise ValueError(f'{self.get_name()}: command.type must be one of {COMMAND_TYPES}, '
                             f'got {kind!r}')
        if config.command_interface == 'effort':
            kind = 'effort'
        self._kind = kind
        self._command_names = command_joints(self.model, values)
        self._command_idx = np.array([self._names.index(j) for j in self._command_names])
        default_topic = {'forward': f'/{FORWARD_CONTROLLER}/commands',
                         'trajectory': f'/{TRAJECTORY_CONTROLLER}/joint_trajectory',
                         'effort': 'effort_controller/commands'}[kind]
        self._topic = str(values['command.topic']) or default_topic
        self._time_from_start = float(values['command.time_from_start'])
        if kind == 'trajectory':
            self._pub_command = self.create_publisher(JointTrajectory, self._topic, reliable)
        else:
            self._pub_command = self.create_publisher(Float64MultiArray, self._topic, reliable)
        self._layout = msgs.array_layout((len(self._command_names),), ['joint'])
        controller = str(values['command.controller']) or (
            TRAJECTORY_CONTROLLER if kind == 'trajectory' else FORWARD_CONTROLLER)
        self._check_controller = controller if kind != 'effort' else ''
        self._joint_check = 'unchecked'     # 'ok', 'unchecked' or the mismatch
        self._joint_check_tries = 0
        self._joints_client: Client | None = (
            self.create_client(GetParameters, f'/{controller}/get_parameters',
                               callback_group=self._async_group)
            if self._check_controller else None)
        self._switch: ControllerSwitch | None = None
        if kind == 'forward':
            self._switch = ControllerSwitch(
                self, str(values['switch.method']), controller=controller,
                fallback=str(values['switch.fallback']),
                manager=str(values['switch.controller_manager']),
                sim_node=str(values['switch.sim_node']),
                timeout_s=float(values['switch.timeout_s']), callback_group=self._async_group)
            if self._switch.error:
                # Not an error until someone enables: ~/enable then refuses with this reason.
                self.get_logger().warning(self._switch.error)
        self._switched = False               # our controller activated by us
        actuated = [self.model.joint_names[j] for j in self._act]
        # joint_states effort is current * current_to_effort; torque = current * K_t.
        self._effort_to_torque = motors.effort_to_torque(actuated) \
            if motors.known(actuated) else np.ones(len(actuated))
        self._switching = False
        self._release_at: float | None = None
        self._hold_s = float(values['switch.hold_s'])
        self._input_loss_s = float(values['input_loss_s'])
        # joint_states absent for input_loss_s while we were switched in: the driver may
        # have restarted, and its controller manager without our switch.
        self._driver_lost = False
        self._last_input = time.monotonic()

    async def _check_joints(self) -> None:
        """Compare command.joints with the controller's ``joints`` parameter (once)."""
        if self._joints_client is None or self._joint_check != 'unchecked':
            self._joint_check_timer.cancel()
            return
        self._joint_check_tries += 1
        if self._joint_check_tries > 30:
            self._joint_check_timer.cancel()
            self.get_logger().warning(
                f'could not read /{self._check_controller} joints parameter in 30 s; '
                'joint list not checked')
            return
        joints = await read_joints(self, self._joints_client, 2.0)
        if joints is None or self._joint_check != 'unchecked':
            return
        self._joint_check_timer.cancel()
        wanted = self._command_names
        same = joints == wanted if self._kind == 'forward' else sorted(joints) == sorted(wanted)
        if same:
            self._joint_check = 'ok'
            self.get_logger().info(f'/{self._check_controller} joints match command.joints')
        else:
            self._joint_check = (f'command.joints {wanted} do not match /'
                                 f'{self._check_controller} joints {joints}'
                                 + (' (forward commands go index by index: same order)'
                                    if self._kind == 'forward' else ''))
            self.get_logger().error(self._joint_check)

    def _enable_blocker(self) -> str:
        """Why ``~/enable true`` must be refused now ('' when it may go ahead)."""
        if self._pub_command.get_subscription_count() == 0:
            return (f'nothing subscribes to {self._pub_command.topic_name}: is the '
                    f'controller loaded and the driver running? (refused)')
        if self._joint_check not in ('ok', 'unchecked'):
            return f'{self._joint_check} (refused)'
        if self._switching:
            return 'a controller switch is under way (refused)'
        return ''

    def _commanding(self) -> bool:
        """Whether commands go out: always for the effort interface and a forward path
        without switch; else only while we own the arm (enabled, or holding before the
        switch back). A disabled node leaves the driver's JTC to MoveIt."""
        if self._kind == 'effort' or (self._switch is not None
                                      and self._switch.method == 'none'):
            return True
        return self._switched

    async def _release(self) -> None:
        """Switch the fallback controller back in after the hold."""
        if self._kind == 'trajectory' and self._switched:
            self._switched = False
            self.get_logger().info(f'stopped streaming to {self._topic}; '
                                   f'{TRAJECTORY_CONTROLLER} holds the last point')
            return
        if self._switch is None or not self._switched or self._switching:
            return
        self._switching = True
        try:
            ok, message = await self._switch.release()
        finally:
            self._switching = False
        if ok:
            self._switched = False
            self.get_logger().info(message)
        else:
            self.get_logger().error(f'{message}; our controller keeps holding the arm')

    def _schedule_release(self) -> None:
        if self._switched and self._release_at is None:
            self._release_at = time.monotonic() + self._hold_s

    # ------------------------------------------------------------------ parameters
    def _values(self, overrides: Sequence[Parameter] = ()) -> dict:
        values = {name: self.get_parameter(name).value for name in PARAMETERS}
        values.update({p.name: p.value for p in overrides if p.name in PARAMETERS})
        return values

    def _on_set_parameters(self, parameters: Sequence[Parameter]) -> SetParametersResult:
        values = self._values(parameters)
        names = {p.name for p in parameters}
        try:
            config = controller_config(self.model, values)
            reference = reference_from(values, len(self._names)) \
                if names & {'reference.mode', 'reference.amplitude',
                            'reference.frequency_hz'} else None
            self.controller.reconfigure(config)
        except ValueError as err:
            return SetParametersResult(successful=False, reason=str(err))
        for warning in self.controller.warnings:
            self.get_logger().warning(warning)
        if reference is not None:
            self.controller.set_reference(reference)
        self._state_period_ns = int(1e9 / float(values['state_rate_hz']))
        self._hold_s = float(values['switch.hold_s'])
        self._input_loss_s = float(values['input_loss_s'])
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ callbacks
    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _reject(self, reason: str, message: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        now = time.monotonic()
        if now - self._last_log.get(reason, -1e9) > _LOG_THROTTLE_S:
            self._last_log[reason] = now
            self.get_logger().warning(f'joint_states rejected ({reason}): {message}')

    def _on_joint_state(self, msg: JointState) -> None:
        now = self._now_ns()
        self._last_input = time.monotonic()
        if self._driver_lost:
            self._driver_back(now)
        try:
            t_ns, q, qd, effort = self._reader.read(msg, velocity=self._measured_velocity,
                                                    effort=len(msg.effort) > 0)
        except msgs.JointStateError as err:
            self._reject(err.reason, str(err))
            if err.reason != 'nonfinite':
                return
            # NaN/inf in the state: the controller must see it to hold.
            t_ns, q, qd, effort = now, np.full(self.model.n_joints, np.nan), None, None
        else:
            implausible = self._gate.check(t_ns, q, qd)
            if implausible is not None:
                # A reading the arm cannot produce is garbage, as a NaN is: the controller
                # holds rather than compute a command from it.
                self._reject(implausible, f'sample stamped {t_ns} ns is beyond what the arm '
                                          'can do')
                t_ns, q, qd, effort = now, np.full(self.model.n_joints, np.nan), None, None
        command = self.controller.update(
            now, q[self._act], None if qd is None else qd[self._act],
            stamp_ns=t_ns if self._use_stamp else None,
            effort=None if effort is None else effort[self._act] * self._effort_to_torque)
        if not self._commanding():
            self.controller.relatch_hold()   # the driver's controller holds the arm now
        self._publish(command, now)
        if self._auto_enable and command is not None and self.executor is not None:
            self._auto_enable = False
            self.executor.create_task(self._start_enabled)

    async def _start_enabled(self) -> None:
        """Enable as ``~/enable true`` does, trying again every 0.1 s for ``switch.timeout_s``:
        at the first joint state (or the first after a driver restart) the controller's
        command subscription or the switch service may not be discovered yet."""
        timeout_s = self._switch.timeout_s if self._switch is not None else 0.0
        deadline = time.monotonic() + timeout_s
        while True:
            response = await self._on_enable(SetBool.Request(data=True), SetBool.Response(),
                                             quiet=True)
            if response.success or self.controller.enabled or time.monotonic() >= deadline:
                break
            await sleep(self, 0.1, self._async_group)
        if response.success:
            self.get_logger().info(f'start_enabled: {response.message}')
        else:
            self.get_logger().error(f'start_enabled: {response.message} (gave up after '
                                    f'{timeout_s:g} s; ~/enable to try again)')

    def _on_timer(self) -> None:
        now = self._now_ns()
        self._publish(self.controller.tick(now), now)
        ctl = self.controller
        if self._switched and not self._driver_lost and self._switch is not None \
                and self._switch.method != 'none' \
                and time.monotonic() - self._last_input > self._input_loss_s:
            # (A SIGKILLed driver keeps its DDS publisher for the lease duration: the
            # outage, not the graph, says it is gone.)
            self._driver_lost = True
            self.get_logger().warning(
                f'no joint_states for {self._input_loss_s:g} s: taking the driver as gone; '
                'holding. A restarted driver brings its controllers back without our '
                'switch, so we switch again before any command when joint_states returns')
        if self._switched and (not ctl.enabled or ctl.state == 'fault' and ctl.latched):
            self._schedule_release()
        if self._release_at is not None and time.monotonic() >= self._release_at:
            self._release_at = None
            if not ctl.enabled or ctl.latched:
                executor = self.executor
                if executor is None:    # timers only fire from an executor spinning the node
                    raise RuntimeError(f'{self.get_name()}: timer fired without an executor')
                executor.create_task(self._release)

    def _driver_back(self, now: int) -> None:
        """joint_states is back after the driver was gone: our switch did not survive its
        restart. Hold, disabled, until the switch is made again: at once and then re-ramp
        with ``resume_after_fault``, else on the next ``~/enable``."""
        self._driver_lost = False
        self._switched = False        # no command on our topic until switched again
        self._release_at = None
        ctl = self.controller
        resume = ctl.enabled and ctl.config.resume_after_fault
        ctl.set_enabled(False, now)   # no command from the hold latched before the outage
        if self.executor is None:
            raise RuntimeError(f'{self.get_name()}: joint_states taken without an executor')
        self.executor.create_task(self._reacquire, resume)

    async def _reacquire(self, resume: bool) -> None:
        """Switch again from scratch after a driver outage: back to the fallback first (it
        fails harmlessly when a restarted driver never had our switch; a STRICT activation
        of a controller still active would fail instead), then, with ``resume``, enable:
        switch in and ramp from the pose found now."""
        if self._switch is not None:
            self._switching = True
            try:
                _, message = await self._switch.release()
            finally:
                self._switching = False
            self.get_logger().info(f'after the driver outage: {message}')
        if resume:
            self.get_logger().warning('joint_states is back: switching in again, then '
                                      're-ramping (resume_after_fault)')
            await self._start_enabled()
        else:
            self.get_logger().warning('joint_states is back: staying disabled '
                                      '(resume_after_fault false); ~/enable to resume')

    def _on_reference(self, msg: JointState) -> None:
        try:
            _, q, qd, _ = self._ref_reader.read(msg, velocity=len(msg.velocity) > 0)
            self.controller.set_reference(q=q[self._act],
                                          qd=None if qd is None else qd[self._act])
        except ValueError as err:
            self.get_logger().warning(f'~/reference rejected: {err}')

    async def _on_enable(self, request: SetBool.Request, response: SetBool.Response, *,
                         quiet: bool = False):
        """The ``~/enable`` service; ``quiet``: no log lines (a caller that retries)."""
        prefix = ''
        if request.data and not self.controller.enabled:
            blocker = self._enable_blocker()
            if blocker:
                response.success, response.message = False, blocker
                if not quiet:
                    self.get_logger().warning(f'~/enable true: {blocker}')
                return response
            if self.controller.state == 'waiting':
                response.success, response.message = False, 'no valid joint state yet'
                return response
            self._release_at = None        # enabled again within the hold: stay switched
            if self._switch is not None and not self._switched:
                self._release_at = None
                self._switching = True
                try:
                    ok, message = await self._switch.activate()
                finally:
                    self._switching = False
                if not ok:
                    response.success, response.message = False, message
                    if not quiet:
                        self.get_logger().error(f'~/enable true: {message}')
                    return response
                self._switched = self._switch.method != 'none'
                prefix = f'{message}; '
            if self._kind == 'trajectory':
                self._release_at = None
                self._switched = True
        response.success, message = self.controller.set_enabled(bool(request.data),
                                                                self._now_ns())
        response.message = prefix + message
        if request.data and not response.success:
            self._schedule_release()
        if not quiet:
            self.get_logger().info(f'~/enable {request.data}: {response.message}')
        self._publish_state(None, self._now_ns(), force=True)
        return response

    # ------------------------------------------------------------------ outputs
    def _publish(self, command: Command | None, now: int) -> None:
        if command is None:
            self._publish_state(None, now)
            return
        if not self._commanding():
            self._publish_state(command, now)
            return
        values = command.effort if command.effort is not None else command.position
        if values is None:
            raise RuntimeError('controller command carries neither effort nor position')
        values = values[self._command_idx]
        if self._kind == 'trajectory':
            self._pub_command.publish(self._trajectory(values))
        else:
            self._pub_command.publish(msgs.float64_multi_array(values, layout=self._layout))
        self.commands += 1
        q = self.controller.measured_q
        self._pub_compensation.publish(msgs.joint_state(
            self._names, command.q_desired, q, command.compensation, t_ns=now))
        self._pub_torque.publish(msgs.joint_state(self._names, effort=command.torque,
                                                  t_ns=now))
        self._publish_state(command, now)

    def _publish_state(self, command: Command | None, now: int, *, force: bool = False
                       ) -> None:
        ctl = self.controller
        key = (ctl.state, ctl.fault)
        if not force and key == self._last_state and \
                now - self._last_state_ns < self._state_period_ns:
            return
        if key != self._last_state:
            self.get_logger().info(f'state {ctl.state}' + (f' ({ctl.fault})' if ctl.fault
                                                           else ''))
        self._last_state, self._last_state_ns = key, now
        state = {
            'state': ctl.state, 'reason': ctl.fault or ('disabled' if not ctl.enabled else ''),
            'enabled': ctl.enabled, 'interface': ctl.config.command_interface,
            'command': self._kind, 'topic': self._pub_command.topic_name,
            'switched': self._switched, 'joint_check': self._joint_check,
            'alpha': None if command is None else command.alpha,
            'saturated': [] if command is None else
            [self._names[a] for a in np.flatnonzero(command.saturated)],
            'commands': self.commands, 'rejected': self.rejected,
            'estimator_rejected': ctl.estimator.rejected,
            'estimator_resets': ctl.estimator.resets,
        }
        self._pub_state.publish(String(data=json.dumps(state)))


    def _trajectory(self, positions: np.ndarray) -> JointTrajectory:
        """One-point trajectory for crane_x7_arm_controller: stamp 0 = start now."""
        tfs = self._time_from_start
        point = JointTrajectoryPoint(
            positions=positions.tolist(),
            time_from_start=Duration(sec=int(tfs), nanosec=int(round((tfs % 1.0) * 1e9))))
        return JointTrajectory(joint_names=list(self._command_names), points=[point])

    def shutdown(self, executor, timeout_s: float = 3.0) -> None:
        """Hold, then switch the fallback controller back (shutdown path)."""
        if not self._switched or not self.context.ok():
            if self._switched and self._switch is not None:
                back = switch_command(self._switch.fallback, self._switch.controller)
                self.get_logger().error(f'context gone before switching back: run `{back}`')
            return
        self.controller.set_enabled(False, self._now_ns())
        now = self._now_ns()
        self._publish(self.controller.hold(now), now)
        deadline = time.monotonic() + self._hold_s
        while time.monotonic() < deadline and self.context.ok():
            executor.spin_once(timeout_sec=0.01)
        task = executor.create_task(self._release)
        executor.spin_until_future_complete(task, timeout_sec=timeout_s)


def main(args: list[str] | None = None) -> None:
    """Console script ``impedance_node``: spin :class:`ImpedanceNode` until shutdown; on
    Ctrl-C hold and switch the driver's controller back before exiting."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from plag_ros.ros import rclpy_compat

    # Our own SIGINT/SIGTERM handling: the context must outlive Ctrl-C to switch back, and
    # a KeyboardInterrupt raised inside a binding call would surface as a RuntimeError;
    # the handler only sets a flag that the spin loop checks.
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    stop: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    node = None
    executor = SingleThreadedExecutor()
    try:
        node = ImpedanceNode()
        executor.add_node(node)
        while not stop and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            try:
                node.shutdown(executor)
            except Exception as err:  # noqa: BLE001 - best effort on the way out
                node.get_logger().error(f'shutdown switch-back failed: {err}')
            node.destroy_node()
        rclpy_compat.try_shutdown()
        # Ignored from here on, not restored: a second Ctrl-C (a terminal and ros2 launch
        # each send one) arriving while the interpreter finalises would otherwise meet the
        # default action and end the process with -SIGINT instead of 0.
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)


if __name__ == '__main__':
    main()
