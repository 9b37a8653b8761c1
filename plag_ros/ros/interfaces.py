"""Every topic and service of the package's nodes, in one table.

:data:`NODE_INTERFACES` lists, per node, what it publishes, subscribes to, serves and calls:
name, message type, QoS and content. The docs' topic reference is generated from it
(:mod:`plag_ros.apps.reference`), the nodes' docstrings point here instead of repeating it,
and ``test/test_interfaces.py`` starts each node and compares the topics and services it
really creates with this table, so the table cannot drift from the code.

Names are as the node passes them to rclpy: relative (``joint_states``, resolved in the
node's namespace), private (``~/torque``) or absolute (``/diagnostics``). ``<body>`` stands
for each body of the model; ``{setting}`` for the value of that node setting (its default
is given in the parameter reference).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from plag_ros.core.common.options import options
from plag_ros.core.control.settings import (
    EFFORT_COMMAND_TOPIC,
    FORWARD_COMMAND_TOPIC,
    TRAJECTORY_COMMAND_TOPIC,
)
from plag_ros.ros import topics

__all__ = ['LATCHED', 'NODE_INTERFACES', 'RELIABLE', 'Endpoint', 'setting_value']

Direction = Literal['out', 'in', 'service', 'client']

RELIABLE = 'reliable, depth {depth}'
LATCHED = 'reliable, transient local, depth 1'


def setting_value(settings: object, name: str) -> object:
    """The value of option ``name`` (dotted, as the node's parameter is named) in
    ``settings``, or of a property of theirs (``command_kind``)."""
    values = {option.name: option.default for option in options(settings)}
    if name in values:
        return values[name]
    value = settings
    for part in name.split('.'):
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Endpoint:
    """One topic or service of a node.

    Attributes:
        direction: 'out' (published), 'in' (subscribed), 'service' (served), 'client'
            (called).
        name: as the node passes it (see the module docstring for ``<body>``, ``{...}``).
        type: ROS interface type, ``package/msg/Name`` or ``package/srv/Name``.
        qos: reliability, durability, depth ('' for services).
        content: what travels, with units.
        when: ``(setting, value)`` pairs under which the node has it, all of them (empty:
            always); a setting is a dotted option name or a property of the node's
            settings (``command_kind``).
    """

    direction: Direction
    name: str
    type: str
    qos: str
    content: str
    when: tuple[tuple[str, object], ...] = ()

    def applies(self, settings: object) -> bool:
        """Whether a node with these ``settings`` has this endpoint."""
        return all(setting_value(settings, key) == value for key, value in self.when)

    def resolved_name(self, settings: object) -> str:
        """The name with each ``{setting}`` replaced by its value in ``settings``."""
        return re.sub(r'\{([\w.]+)\}', lambda m: str(setting_value(settings, m.group(1))),
                      self.name)


_JS = 'sensor_msgs/msg/JointState'
_ARRAY = 'std_msgs/msg/Float64MultiArray'
_STRING = 'std_msgs/msg/String'
_DIAG = 'diagnostic_msgs/msg/DiagnosticArray'
_TRAJ = 'trajectory_msgs/msg/JointTrajectory'
_OUT_DEPTH = RELIABLE.format(depth='{output_depth}')

_ARRAY_CONTENT = {
    'partial': '(joint, body) partial torques [N*m], labelled layout',
    'acceleration': '(joint, body, source) acceleration-propagation torques [N*m]',
    'velocity': '(joint, body, source) velocity-propagation torques [N*m]',
    'gravity': '(joint, body) gravity torques [N*m]',
    'friction': '(joint,) friction [N*m]: at rest the stick reaction from the measured '
                'effort, 0 without one',
}

DYNAMICS = (
    Endpoint('in', 'joint_states', _JS, RELIABLE.format(depth='{input_queue_depth}'),
             'measured state, any joint order; subscribed once a model exists'),
    Endpoint('in', 'robot_description', _STRING, LATCHED, 'the URDF text',
             (('robot_description_source', 'topic'),)),
    Endpoint('out', f'~/{topics.STATE_TOPIC}', _JS, _OUT_DEPTH,
             'filtered q, qd; the joint torque in effort; carries the input stamp'),
    *(Endpoint('out', f'~/{name}', 'std_msgs/msg/Float64MultiArray', _OUT_DEPTH,
               _ARRAY_CONTENT[name]) for name in topics.ARRAY_TOPICS),
    *(Endpoint('out', f'~/{topics.COMPONENT_PREFIX}{name}', _JS, _OUT_DEPTH,
               f'the {name} torque per joint in effort [N*m]', (('publish_components', True),))
      for name in topics.COMPONENT_TOPICS),
    Endpoint('out', f'~/{topics.BODY_PREFIX}<body>', _JS, _OUT_DEPTH,
             "the body's column of the partial table in effort [N*m], at most "
             'visualization_rate_hz'),
    Endpoint('out', f'~/{topics.NAMES_TOPIC}', _STRING, LATCHED,
             'JSON index of every array (joints, bodies, sources)'),
    Endpoint('out', f'~/{topics.MARKERS_TOPIC}', 'visualization_msgs/msg/MarkerArray',
             _OUT_DEPTH, 'an arrow per component and joint (rviz2), at most '
             'visualization_rate_hz'),
    Endpoint('out', f'~/{topics.IMAGE_TOPIC}', 'sensor_msgs/msg/Image', _OUT_DEPTH,
             'rgb8 heat map of the partial table, at most visualization_rate_hz'),
    Endpoint('out', '/diagnostics', _DIAG, _OUT_DEPTH,
             'rates, latency, rejected samples by reason'),
)
"""``plag_dynamics`` (:mod:`plag_ros.ros.nodes.dynamics_node`)."""

_MODEL_AT_START = Endpoint(
    'in', 'robot_description', _STRING, LATCHED,
    "the URDF text: the model, taken once at start with robot_description_source 'topic'; "
    'a later one with another model is logged as an error, never taken '
    '(plag_ros.ros.robot_description)')

IMPEDANCE = (
    _MODEL_AT_START,
    Endpoint('in', 'joint_states', _JS, RELIABLE.format(depth=10),
             'measured state, any joint order; one stamped longer ago than the stale '
             'limit is not used (a backlog of up to 10 is read in a few ms)'),
    Endpoint('in', '~/reference', _JS, RELIABLE.format(depth=10),
             'set point of every actuated joint: position [rad], velocity [rad/s] '
             'optional'),
    Endpoint('in', '{switch.driver_node}/state', _STRING, LATCHED,
             "plag_driver's state: its joints (checked against command.joints), its model "
             "(~/enable is refused unless its digest is this node's) and whether it holds the "
             'arm itself (a fault latched, another controller active): then nothing more is '
             'commanded', (('switch.method', 'driver'),)),
    Endpoint('out', '{command_topic}', _ARRAY, RELIABLE.format(depth=10),
             'goal positions [rad] of command.joints in that order (forward controller)',
             (('command_kind', 'forward'),)),
    Endpoint('out', '{command_topic}', _TRAJ, RELIABLE.format(depth=10),
             'a one-point trajectory of command.joints', (('command_kind', 'trajectory'),)),
    Endpoint('out', '{command_topic}', _ARRAY, RELIABLE.format(depth=10),
             'torques [N*m] of every actuated joint (simulator only)',
             (('command_kind', 'effort'), ('stamped_effort', False))),
    Endpoint('out', '{command_topic}', _JS, RELIABLE.format(depth=10),
             "plag_driver's effort command: command.joints by name, effort [N*m], stamped "
             'with the joint state it was computed from', (('stamped_effort', True),)),
    Endpoint('out', '~/compensation', _JS, RELIABLE.format(depth=10),
             'q_d in position, measured q in velocity, selected propagation torque in '
             'effort [N*m]'),
    Endpoint('out', '~/torque', _JS, RELIABLE.format(depth=10),
             'clipped impedance torque [N*m] in effort'),
    Endpoint('out', '/diagnostics', _DIAG, RELIABLE.format(depth=10),
             'one status named after the node, at every change of state and at '
             'state_rate_hz: level ERROR while a fault is latched, WARN while a hold lasts '
             'until its cause is gone; the values are those of ~/state (nested keys dotted, '
             'non-strings as JSON)'),
    Endpoint('out', '~/state', _STRING, LATCHED,
             'deprecated (/diagnostics carries the same): JSON: state, reason, alpha, '
             'saturated joints, counters, model (source, digest, changed)'),
    Endpoint('service', '~/enable', 'std_srvs/srv/SetBool', '',
             'enable (ramp in) / disable (hold)'),
    Endpoint('client', '{switch.controller_manager}/switch_controller',
             'controller_manager_msgs/srv/SwitchController', '',
             'switches our forward controller in and the arm controller out, and back',
             (('command_kind', 'forward'), ('switch.method', 'controller_manager'))),
    Endpoint('client', '{switch.sim_node}/set_parameters',
             'rcl_interfaces/srv/SetParameters', '',
             "sets the simulator's active_arm_controller",
             (('command_kind', 'forward'), ('switch.method', 'sim'))),
    Endpoint('client', '{switch.driver_node}/set_parameters',
             'rcl_interfaces/srv/SetParameters', '',
             "sets plag_driver's active_arm_controller (current mode and back)",
             (('switch.method', 'driver'),)),
    Endpoint('client', '{target_controller}/get_parameters',
             'rcl_interfaces/srv/GetParameters', '',
             "reads the controller's joints to check command.joints",
             (('command_interface', 'position'),)),
)
"""``plag_impedance`` (:mod:`plag_ros.ros.nodes.impedance_node`)."""

SIM = (
    Endpoint('out', 'joint_states', _JS,
             RELIABLE.format(depth='0.5 s of publish_rate_hz, at least 10'),
             "the 8 actuated joints sorted by name (not the URDF's order); effort as the "
             "driver computes it: current [A] x 2.20 (XM430) or 3.60 (XM540)"),
    Endpoint('out', 'robot_description', _STRING, LATCHED, 'the URDF text'),
    Endpoint('out', '/diagnostics', _DIAG, RELIABLE.format(depth=10),
             'rates, CPU, counters'),
    Endpoint('in', 'crane_x7_arm_controller/joint_trajectory', _TRAJ,
             RELIABLE.format(depth=10), "the driver's trajectory controller: any joint "
             'order, all 7 arm joints'),
    Endpoint('in', 'plag_arm_position_controller/commands', _ARRAY, RELIABLE.format(depth=10),
             'our forward controller: 7 arm goal positions [rad] in its joints order'),
    Endpoint('in', 'effort_controller/commands', _ARRAY, RELIABLE.format(depth=10),
             "8 torques [N*m] (a test interface, not the driver's)"),
    Endpoint('in', 'position_controller/commands', _ARRAY, RELIABLE.format(depth=10),
             "8 goal positions [rad] (a test interface, not the driver's)"),
    Endpoint('in', '{pace_topic}', _JS, RELIABLE.format(depth=10),
             "a consumer's stamped output: the simulated clock holds while more than "
             'pace_lead ahead of its newest stamp', (('paced', True),)),
)
"""``plag_sim`` (:mod:`plag_ros.ros.nodes.sim_node`)."""

DRIVER = (
    _MODEL_AT_START,
    Endpoint('out', 'joint_states', _JS, RELIABLE.format(depth=10),
             "the chain's 8 joints in chain order: position [rad], velocity [rad/s], effort = "
             'current [A] x 2.20 (XM430) or 3.60 (XM540), stamped when read'),
    Endpoint('out', '/diagnostics', _DIAG, RELIABLE.format(depth=10),
             'one status named after the node, at every change and once a second: level '
             'ERROR while a fault is latched; the values are those of ~/state (nested keys '
             'dotted, non-strings as JSON)'),
    Endpoint('out', '~/state', _STRING, LATCHED,
             'deprecated (/diagnostics carries the same): JSON: modes per joint, the latched '
             'fault ("bus not open: ..." until the bus opens), active_arm_controller, '
             'counters, model (source, digest, changed)'),
    Endpoint('in', TRAJECTORY_COMMAND_TOPIC, _TRAJ,
             RELIABLE.format(depth=10), 'arm joints by name, followed point to point '
             '(position mode)'),
    Endpoint('in', FORWARD_COMMAND_TOPIC, _ARRAY,
             RELIABLE.format(depth=10), '7 arm goal positions [rad] in chain order '
             '(position mode)'),
    Endpoint('in', EFFORT_COMMAND_TOPIC, _JS, RELIABLE.format(depth=10),
             'arm joints by name, effort [N*m] (motor torque), stamped with the joint state '
             'it was computed from; older than stale_s is refused (current mode)'),
    Endpoint('service', '~/clear_fault', 'std_srvs/srv/Trigger', '',
             'clears the latched fault; the arm stays held in position mode'),
)
"""``plag_driver`` (:mod:`plag_ros.ros.nodes.driver_node`), the real servo bus."""

EMULATED_CONTROLLER_MANAGER = (
    Endpoint('service', '~/switch_controller', 'controller_manager_msgs/srv/SwitchController',
             '', "switches plag_sim's arm controllers by ros2_control's rules"),
    Endpoint('service', '~/list_controllers', 'controller_manager_msgs/srv/ListControllers',
             '', "plag_sim's controllers, their state and claimed interfaces"),
)
"""``controller_manager`` in ``plag_sim``'s process, where controller_manager_msgs imports
(:mod:`plag_ros.ros.emulated_controller_manager`)."""

NODE_INTERFACES: dict[str, tuple[Endpoint, ...]] = {
    topics.DYNAMICS_NODE_NAME: DYNAMICS,
    'plag_impedance': IMPEDANCE,
    'plag_sim': SIM,
    'plag_driver': DRIVER,
    'controller_manager': EMULATED_CONTROLLER_MANAGER,
}
"""Node name -> its endpoints (the parameter services every node has are left out)."""
