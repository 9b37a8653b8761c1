"""``plag_impedance``: partial-impedance control of the CRANE-X7 (seed 002, section 4).

A thin wrapper over :class:`plag_ros.control.PartialImpedanceController`: per
``joint_states`` message it maps the joints by name, runs the controller's own estimator,
decomposition and law, and publishes the command at once (lowest latency: no timer in
between); a timer at ``rate_hz`` runs the watchdog, which holds when the input goes stale.

The node runs its own :class:`~plag_ros.filters.JointStateEstimator` rather than
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
``effort_controller/commands``      std_msgs/Float64MultiArray,   torques [N*m] (effort
(out)                               reliable, depth 10            interface)
``position_controller/commands``    std_msgs/Float64MultiArray,   goal positions [rad]
(out)                               reliable, depth 10            (position interface)
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

Commands carry one value per actuated joint in model (URDF tree) order without mimic
joints, as ``forward_command_controller`` takes them: for the CRANE-X7 the 7 arm joints
from the shoulder pan to the wrist, then ``crane_x7_gripper_finger_a_joint``. Only the
topic of ``command_interface`` is published. Nothing is published before the first valid
joint state. Gains, masks and the reference may be changed at run time (validated; the
controller keeps its state); the interface, model, rate and estimator are read-only.
"""
from __future__ import annotations

import json
import time
from collections.abc import Sequence

import numpy as np
import torch
from rcl_interfaces.msg import (
    ParameterDescriptor,
    ParameterType,
    SetParametersResult,
)
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool

from .. import messages as msgs
from ..control import (
    Command,
    HoldReference,
    ImpedanceConfig,
    PartialImpedanceController,
    SineReference,
    propagation_mask,
)
from ..dynamics import PartialLagrangian
from ..filters import EstimatorConfig
from ..model import RobotModel, default_urdf_path
from . import spin_node
from .parameters import descriptor as _desc

__all__ = ['NODE_NAME', 'PARAMETERS', 'ImpedanceNode', 'main']

NODE_NAME = 'plag_impedance'
_LOG_THROTTLE_S = 2.0
TILT = 'crane_x7_shoulder_revolute_part_tilt_joint'
ELBOW = 'crane_x7_upper_arm_revolute_part_rotate_joint'


_D, _DA = ParameterType.PARAMETER_DOUBLE, ParameterType.PARAMETER_DOUBLE_ARRAY
_S, _SA = ParameterType.PARAMETER_STRING, ParameterType.PARAMETER_STRING_ARRAY
_B, _I = ParameterType.PARAMETER_BOOL, ParameterType.PARAMETER_INTEGER
_PER_JOINT = ' (one value for every joint, or one per actuated joint in command order)'

# name -> (default, descriptor). Defaults match config/impedance.yaml.
PARAMETERS: dict[str, tuple[object, ParameterDescriptor]] = {
    'urdf_path': ('', _desc(_S, 'URDF of the controlled robot; empty: the bundled '
                            'crane_x7.urdf', read_only=True)),
    'command_interface': ('position', _desc(
        _S, "'position' (the real CRANE-X7 driver) or 'effort'", read_only=True,
        constraints="one of 'effort', 'position'")),
    'rate_hz': (200.0, _desc(_D, 'nominal joint_states rate and watchdog rate [Hz]',
                             read_only=True, low=1.0, high=10000.0)),
    'stale_periods': (5.0, _desc(_D, 'hold when no valid joint state for this many periods',
                                 low=1.01, high=1000.0)),
    'ramp_s': (2.0, _desc(_D, 'gain ramp after enable or a cleared fault [s]', low=0.0,
                          high=60.0)),
    'start_enabled': (False, _desc(_B, 'enable at the first valid joint state',
                                   read_only=True)),
    'fault_action': ('zero', _desc(
        _S, "effort interface while holding: 'zero' effort or open-loop gravity 'hold' "
        '(the position interface always holds the last valid position)',
        constraints="one of 'zero', 'hold'")),
    'resume_after_fault': (True, _desc(_B, 're-ramp when a fault clears (else disable)')),
    'gravity_compensation': (True, _desc(_B, 'add the gravity torque g(q)')),
    'stiffness': ([10.0, 20.0, 10.0, 10.0, 4.0, 4.0, 2.0, 1.0], _desc(
        _DA, 'joint stiffness K [N*m/rad] >= 0' + _PER_JOINT)),
    'damping': ([0.4, 2.0, 0.8, 0.8, 0.05, 0.06, 0.02, 0.01], _desc(
        _DA, 'joint damping D [N*m*s/rad] >= 0' + _PER_JOINT)),
    'inertia': ([0.0], _desc(_DA, 'target inertia [kg*m^2]; 0 keeps the natural inertia'
                             + _PER_JOINT)),
    'servo_stiffness': ([46.04, 46.04, 18.42, 18.42, 18.42, 18.42, 18.42, 18.42], _desc(
        _DA, 'servo position-loop stiffness K_s [N*m/rad] > 0 (position interface)'
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
    'filter.cutoff_hz': (15.0, _desc(_D, 'estimator low-pass -3 dB frequency [Hz]',
                                     read_only=True, low=0.01, high=10000.0)),
    'filter.order': (2, _desc(_I, 'estimator Butterworth order', read_only=True, low=1,
                              high=8)),
    'filter.velocity_source': ('measured', _desc(
        _S, "'position' differentiates positions; 'measured' filters joint_states velocity",
        read_only=True, constraints="one of 'position', 'measured'")),
    'filter.gap_periods': (5.0, _desc(_D, 'a stamp gap above this many periods restarts '
                                      'the estimator', read_only=True, low=1.01, high=1e6)),
    'use_header_stamp': (True, _desc(_B, 'estimate on the joint_states header stamps (else '
                                     'on receive time)', read_only=True)),
    'state_rate_hz': (10.0, _desc(_D, 'rate of ~/state besides every change [Hz]', low=0.1,
                                  high=1000.0)),
    'torch_threads': (1, _desc(_I, 'torch intra-op threads (1 is fastest for one sample)',
                               read_only=True, low=1, high=256)),
}


def _paths(values: Sequence[str]) -> list[str]:
    return [v for v in values if v.strip() and v.strip().lower() != 'none']


def _per_joint(values: Sequence[float]) -> float | np.ndarray:
    values = np.asarray(list(values), dtype=np.float64)
    if values.size == 0:
        raise ValueError('empty per-joint list')
    return float(values[0]) if values.size == 1 else values


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
    estimator = EstimatorConfig(
        cutoff_hz=float(values['filter.cutoff_hz']), order=int(values['filter.order']),
        rate_hz=float(values['rate_hz']), gap_periods=float(values['filter.gap_periods']),
        velocity_source=str(values['filter.velocity_source']))
    return ImpedanceConfig(
        **per_joint, gravity_compensation=bool(values['gravity_compensation']),
        acceleration_mask=mask('compensate.acceleration'),
        velocity_mask=mask('compensate.velocity'),
        motion_source=str(values['motion_source']),
        command_interface=str(values['command_interface']),
        effort_scale=float(values['effort_scale']), rate_hz=float(values['rate_hz']),
        stale_periods=float(values['stale_periods']), ramp_s=float(values['ramp_s']),
        fault_action=str(values['fault_action']),
        resume_after_fault=bool(values['resume_after_fault']),
        start_enabled=bool(values['start_enabled']), estimator=estimator)


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
        self._reader = msgs.JointStateReader(self.model)
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
        self._layout = msgs.array_layout((len(self._names),), ['joint'])
        self.add_on_set_parameters_callback(self._on_set_parameters)

        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        topic = ('effort_controller/commands' if config.command_interface == 'effort'
                 else 'position_controller/commands')
        self._pub_command = self.create_publisher(Float64MultiArray, topic, reliable)
        self._pub_compensation = self.create_publisher(JointState, '~/compensation', reliable)
        self._pub_torque = self.create_publisher(JointState, '~/torque', reliable)
        self._pub_state = self.create_publisher(String, '~/state', QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL))
        self.create_subscription(JointState, 'joint_states', self._on_joint_state,
                                 QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
        self.create_subscription(JointState, '~/reference', self._on_reference, reliable)
        self.create_service(SetBool, '~/enable', self._on_enable)
        self.create_timer(1.0 / config.rate_hz, self._on_timer)
        self.get_logger().info(
            f'{config.command_interface} commands on {self.resolve_topic_name(topic)} for '
            f'{len(self._names)} joints; compensating acceleration '
            f'{_paths(values["compensate.acceleration"])}, velocity '
            f'{_paths(values["compensate.velocity"])} ({config.motion_source} motion); '
            + ('enabled at the first joint state' if config.start_enabled else
               'call ~/enable to start'))

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
        if reference is not None:
            self.controller.set_reference(reference)
        self._state_period_ns = int(1e9 / float(values['state_rate_hz']))
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
        try:
            t_ns, q, qd, _ = self._reader.read(msg, velocity=self._measured_velocity)
        except msgs.JointStateError as err:
            self._reject(err.reason, str(err))
            if err.reason != 'nonfinite':
                return
            # NaN/inf in the state: the controller must see it to hold.
            t_ns, q, qd = now, np.full(self.model.n_joints, np.nan), None
        command = self.controller.update(
            now, q[self._act], None if qd is None else qd[self._act],
            stamp_ns=t_ns if self._use_stamp else None)
        self._publish(command, now)

    def _on_timer(self) -> None:
        now = self._now_ns()
        self._publish(self.controller.tick(now), now)

    def _on_reference(self, msg: JointState) -> None:
        try:
            _, q, qd, _ = self._ref_reader.read(msg, velocity=len(msg.velocity) > 0)
            self.controller.set_reference(q=q[self._act],
                                          qd=None if qd is None else qd[self._act])
        except ValueError as err:
            self.get_logger().warning(f'~/reference rejected: {err}')

    def _on_enable(self, request: SetBool.Request, response: SetBool.Response):
        response.success, response.message = self.controller.set_enabled(
            bool(request.data), self._now_ns())
        self.get_logger().info(f'~/enable {request.data}: {response.message}')
        self._publish_state(None, self._now_ns(), force=True)
        return response

    # ------------------------------------------------------------------ outputs
    def _publish(self, command: Command | None, now: int) -> None:
        if command is None:
            self._publish_state(None, now)
            return
        values = command.effort if command.effort is not None else command.position
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
            'alpha': None if command is None else command.alpha,
            'saturated': [] if command is None else
            [self._names[a] for a in np.flatnonzero(command.saturated)],
            'commands': self.commands, 'rejected': self.rejected,
            'estimator_rejected': ctl.estimator.rejected,
            'estimator_resets': ctl.estimator.resets,
        }
        self._pub_state.publish(String(data=json.dumps(state)))


def main(args: list[str] | None = None) -> None:
    """Console script ``impedance_node``: spin :class:`ImpedanceNode` until shutdown."""
    spin_node(ImpedanceNode, args)


if __name__ == '__main__':
    main()
