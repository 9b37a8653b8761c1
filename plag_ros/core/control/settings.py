"""Settings of the partial-impedance controller node, every one written once.

Each parameter of ``plag_impedance`` (:mod:`plag_ros.ros.nodes.impedance_node`) is a field
of :class:`ImpedanceSettings` or of one of its groups (``command.*``, ``switch.*``,
``compensate.*``, ``reference.*``, ``filter.*``, ``plausibility.*``), declared with
:func:`~plag_ros.core.common.options.option`: its default, a description with the unit, its
range, its allowed values (the ``Literal`` annotation) and whether it may change while the
node runs. The controller's own settings (gains, rates, ramp, fault checks: ``stiffness``,
``fault.*``, ``oscillation.*`` ...) are the options of
:class:`~plag_ros.core.control.config.ImpedanceConfig`, embedded under their plain names
(:data:`CRANE_X7_CONTROL`): one definition and one default for the library and the node.
The node declares :data:`IMPEDANCE_OPTIONS` as its parameters and rebuilds the settings
from their values with :meth:`ImpedanceSettings.from_values`; the methods here complete the
controller's configuration and build the reference trajectory. Every error names the
parameter. config/impedance.yaml sets the same names.

Per-joint lists hold one value for every joint or one per actuated joint in URDF order
(the 7 arm joints, then finger a).

No ROS here: the controller names below are those of the ros2_control configuration the
node talks to, plain strings. Every name the node talks to by default is relative (the
command topics, ``switch.*``, ``{controller}/get_parameters``): rcl expands ``x`` to
``<namespace>/x`` (ros2/rcl humble 6d0fd90 expand_topic_name.c:99-116), so in the root
namespace each is today's ``/x`` and under ``-r __ns:=/arm1`` the arm's own
(:func:`foreign_names` refuses a name that leaves it).
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from plag_ros.core.common.options import Option, build, group, inline, option, options
from plag_ros.core.control.config import (
    CONTROL_ESTIMATOR,
    REFERENCE_MAX_ACCELERATION,
    REFERENCE_MAX_VELOCITY,
    ImpedanceConfig,
    propagation_mask,
)
from plag_ros.core.control.references import HoldReference, SineReference
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.description import DescriptionSettings
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import ModelSettings
from plag_ros.core.estimation.filters import EstimatorConfig
from plag_ros.core.estimation.plausibility import PlausibilityConfig

__all__ = ['CRANE_X7_CONTROL', 'EFFORT_COMMAND_TOPIC', 'EFFORT_CONTROLLER',
           'FORWARD_COMMAND_TOPIC', 'FORWARD_CONTROLLER', 'IMPEDANCE_OPTIONS', 'SWITCH_METHODS',
           'check_own_namespace', 'foreign_names',
           'TRAJECTORY_COMMAND_TOPIC', 'TRAJECTORY_CONTROLLER', 'CommandKind',
           'CommandSettings', 'CommandType', 'CompensateSettings', 'ImpedanceSettings',
           'ReferenceMode', 'ReferenceSettings', 'SHUTDOWN_HOLD_MAX_S', 'SwitchMethod',
           'SwitchSettings', 'TUNABLE_WHILE_ENABLED', 'safety_parameters']

FORWARD_CONTROLLER = 'plag_arm_position_controller'
"""Our forward position controller (config/crane_x7_controllers.yaml), switched in."""
EFFORT_CONTROLLER = 'plag_arm_effort_controller'
"""The effort path on the bus driver ``plag_driver``: its current mode (``switch.method
driver``)."""
EFFORT_COMMAND_TOPIC = f'{EFFORT_CONTROLLER}/commands'
"""``plag_driver``'s effort command: ``sensor_msgs/JointState`` with the arm joints' names,
``effort`` [N*m] (motor torque) and ``header.stamp`` = the stamp of the joint state it was
computed from (the driver refuses one older than its ``stale_s``)."""
TRAJECTORY_CONTROLLER = 'crane_x7_arm_controller'
"""The driver's joint trajectory controller: the trajectory path's target, the fallback."""
FORWARD_COMMAND_TOPIC = f'{FORWARD_CONTROLLER}/commands'
"""The forward controller's goal positions (``std_msgs/Float64MultiArray``, its joints'
order)."""
TRAJECTORY_COMMAND_TOPIC = f'{TRAJECTORY_CONTROLLER}/joint_trajectory'
"""The trajectory controller's command (``trajectory_msgs/JointTrajectory``)."""

SHUTDOWN_HOLD_MAX_S = 1.0
"""On shutdown the hold before the hand-back lasts ``switch.hold_s``, at most this long [s]:
with the waits the whole shutdown ends before launch's SIGKILL, 10 s after Ctrl-C
(:meth:`plag_ros.ros.arm_handover.ArmHandover.shut_down`)."""

TUNABLE_WHILE_ENABLED = ('stiffness', 'damping', 'state_rate_hz')
"""The impedance node's writable parameters that may change while it holds the arm: the
stiffness and damping, which the gain check judges at every change, and the state's
rate. Every other writable one is a safety parameter
(:func:`safety_parameters`): refused while the node is enabled or holds the arm, so that
what guards the arm never changes under it and no change steps the torque unchecked (a
reference swapped mid-swing stepped the tilt's torque by 2 N*m; a target inertia is
acceleration feedback the gain check does not judge; a path switched on adds its whole
torque at once); a parameter added later is one too."""


def safety_parameters(names: Sequence[str]) -> list[str]:
    """Those of ``names`` (the impedance node's writable parameters) that may change only
    while the controller is disabled (:data:`TUNABLE_WHILE_ENABLED`)."""
    return [n for n in names if n not in TUNABLE_WHILE_ENABLED]


CommandType = Literal['forward', 'trajectory']
CommandKind = Literal['forward', 'trajectory', 'effort']
"""What the node publishes: a command type, or efforts on the effort interface."""
SwitchMethod = Literal['controller_manager', 'sim', 'driver', 'none']
SWITCH_METHODS: tuple[str, ...] = typing.get_args(SwitchMethod)
ReferenceMode = Literal['hold', 'sine']

_PER_JOINT = (' (one value for every joint, or one per actuated joint in URDF order: the 7 '
              'arm joints, then finger a)')
_TILT = 'crane_x7_shoulder_revolute_part_tilt_joint'
_ELBOW = 'crane_x7_upper_arm_revolute_part_rotate_joint'

CRANE_X7_CONTROL = ImpedanceConfig(stiffness=[10.0, 20.0, 10.0, 10.0, 4.0, 4.0, 2.0, 1.0],
                                   damping=[0.4, 1.5, 0.8, 0.6, 0.05, 0.06, 0.02, 0.01])
"""The controller the node starts with: the library's defaults (:class:`~plag_ros.core.
control.config.ImpedanceConfig`), with the spring and damper shipped for the CRANE-X7 (7
arm joints, then finger a; a gain margin of 2 or more on its position path at 200 and
100 Hz, ``bench/bench_stability.py``) in place of the library's none."""


def _per_joint(values: Sequence[float], name: str) -> float | np.ndarray:
    """One value for all joints (a float) or an array, from a per-joint parameter."""
    a = np.asarray(list(values), dtype=np.float64)
    if a.size == 0:
        raise ValueError(f'{name}: empty per-joint list')
    return float(a[0]) if a.size == 1 else a


@dataclass(frozen=True)
class CommandSettings:
    """``command.*``: where the commands go and in which form."""

    type: CommandType = option(
        'forward', "'forward': Float64MultiArray to plag_arm_position_controller (switched "
        "in); 'trajectory': one-point JointTrajectory to crane_x7_arm_controller",
        read_only=True)
    topic: str = option(
        '', "command topic (a relative one is in the node's namespace); '' = "
        'plag_arm_position_controller/commands (forward), '
        'crane_x7_arm_controller/joint_trajectory (trajectory), effort_controller/commands '
        '(effort interface)', read_only=True)
    joints: list[str] = option(
        list(motors.ARM_JOINTS), "joints commanded, in the controller's order (default: the "
        '7 arm joints; finger a stays with the gripper action controller)', read_only=True)
    controller: str = option(
        '', "controller whose joints parameter is checked; '' = plag_arm_position_"
        'controller (forward) or crane_x7_arm_controller (trajectory)', read_only=True)
    time_from_start: float = option(
        0.0, 'trajectory: time_from_start of the point [s]; 0 = a step in the next JTC update',
        low=0.0, high=10.0, read_only=True)
    controller_file: str = option(
        '', 'forward: the ros2_control parameter file the controller was spawned with; the '
        "loaded controller's joints and interface_name are checked against it (a controller "
        "already loaded keeps its old parameters); '' = check joints only", read_only=True)


@dataclass(frozen=True)
class SwitchSettings:
    """``switch.*``: how the forward path takes the arm from the driver's controller."""

    method: SwitchMethod = option(
        'controller_manager', "forward: switch the arm controllers through "
        "'controller_manager' (controller_manager/switch_controller), the simulator ('sim'), "
        "the bus driver plag_driver ('driver', also the effort interface's current mode) or "
        "not at all ('none')", read_only=True)
    controller_manager: str = option('controller_manager', "controller manager node (a "
                                     "relative name is in this node's namespace)",
                                     read_only=True)
    sim_node: str = option('plag_sim', 'simulator node (switch.method sim)', read_only=True)
    driver_node: str = option('plag_driver', 'bus driver node (switch.method driver)',
                              read_only=True)
    fallback: str = option(TRAJECTORY_CONTROLLER, 'the controller ours replaces, switched '
                           'back after a hold', read_only=True)
    hold_s: float = option(0.5, 'hold this long before switching back [s] (at most '
                           f"{SHUTDOWN_HOLD_MAX_S:g} s at shutdown; not in the bus driver's "
                           'current mode: handed back at once)', low=0.0, high=60.0)
    timeout_s: float = option(5.0, 'deadline of one switch [s]; on plag_driver also how long '
                              'after it its state may take to show our controller (in current '
                              'mode on the effort path), at least 1 s', low=0.1, high=60.0,
                              read_only=True)


@dataclass(frozen=True)
class CompensateSettings:
    """``compensate.*``: the motion propagation paths the controller cancels."""

    acceleration: list[str] = option(
        [f'{_TILT}<-{_ELBOW}'], "acceleration propagation paths to cancel, 'target<-source' "
        "joint names, '*' for all; '' or 'none' for nothing")
    velocity: list[str] = option(
        [f'{_TILT}<-{_ELBOW}'], 'velocity propagation paths to cancel (same syntax)')
    bodies: list[str] = option(
        [''], "restrict compensation to these bodies; '' = all bodies")

    def paths(self, name: Literal['acceleration', 'velocity', 'bodies']) -> list[str]:
        """The entries of list ``name``: blank ones and ``'none'`` dropped."""
        return [v for v in getattr(self, name) if v.strip() and v.strip().lower() != 'none']


@dataclass(frozen=True)
class ReferenceSettings:
    """``reference.*``: the desired trajectory (``~/reference`` replaces it)."""

    mode: ReferenceMode = option(
        'hold', "'hold' the position at enable, or 'sine': centre at enable + amplitude * "
        'sin(2 pi f t)')
    amplitude: list[float] = option([0.0], 'sine amplitude [rad]' + _PER_JOINT)
    frequency_hz: list[float] = option([0.5], 'sine frequency [Hz]' + _PER_JOINT)
    # The controller's slew limits (ImpedanceConfig.reference_max_*), named reference.*
    max_velocity: list[float] = option(
        [REFERENCE_MAX_VELOCITY],
        'a ~/reference point is approached at most this fast [rad/s], > 0' + _PER_JOINT)
    max_acceleration: list[float] = option(
        [REFERENCE_MAX_ACCELERATION],
        'and at most this hard [rad/s^2], > 0' + _PER_JOINT)


# The CRANE-X7 driver reports velocities: filtering them leaves the acceleration one
# derivative from a measurement instead of two from encoder steps (much less noise).
_CONTROL_FILTER = dataclasses.replace(CONTROL_ESTIMATOR, velocity_source='measured')


@dataclass(frozen=True)
class ImpedanceSettings:
    """Every parameter of the ``plag_impedance`` node; defaults match config/impedance.yaml.

    ``filter.rate_hz`` is no parameter: it follows ``rate_hz``.

    Raises:
        ValueError: a value the node cannot run with; the message names the parameter.
    """

    description: DescriptionSettings = inline(DescriptionSettings)
    model: ModelSettings = group(ModelSettings)
    command: CommandSettings = group(CommandSettings)
    switch: SwitchSettings = group(SwitchSettings)
    # The controller's own settings (gains, limits, fault checks) under their plain names,
    # defined once in ImpedanceConfig; the fields it leaves to its caller come from
    # compensate.*, command.joints, filter.* and reference.* below.
    control: ImpedanceConfig = inline(CRANE_X7_CONTROL, exclude=('estimator',))
    input_loss_s: float = option(
        1.0, 'joint_states absent this long [s] is taken as the driver gone: on its return '
        'switch back and stay disabled until ~/enable (resume_after_fault or not)', low=0.05,
        high=3600.0)
    compensate: CompensateSettings = group(CompensateSettings)
    reference: ReferenceSettings = group(ReferenceSettings)
    # The estimator cannot change under a running controller: the whole group is read at
    # start. Its stamp-spacing and stencil settings keep the estimator's defaults here.
    filter: EstimatorConfig = group(_CONTROL_FILTER, read_only=True, exclude=(
        'rate_hz', 'min_spacing_periods', 'stencil_nodes'))
    use_header_stamp: bool = option(True, 'estimate, judge freshness (a sample stamped past '
                                    'the stale limit is not used) and judge the servo '
                                    'monitor on the joint_states header stamps (else on '
                                    'receive time)',
                                    read_only=True)
    state_rate_hz: float = option(10.0, 'rate of ~/state besides every change [Hz]', low=0.1,
                                  high=1000.0)
    plausibility: PlausibilityConfig = group(PlausibilityConfig, read_only=True, exclude=(
        'jump_slack', 'reanchor_samples'))

    def __post_init__(self) -> None:
        rate_hz = self.control.rate_hz
        if self.filter.rate_hz != rate_hz:
            # filter.rate_hz follows rate_hz (EstimatorConfig checks the cut-off against it).
            try:
                synced = dataclasses.replace(self.filter, rate_hz=float(rate_hz))
            except ValueError as err:
                raise ValueError(f'filter.cutoff_hz with rate_hz {rate_hz:g}: {err}'
                                 ) from err
            object.__setattr__(self, 'filter', synced)
        if self.stamped_effort:
            # torque mode: after a start, a fault or a driver restart the arm stays in the
            # driver's position hold until an operator calls ~/enable, gains the check
            # refuses never reach it, and freshness is the reading's stamp (by arrival, a
            # backlog read late would pass for fresh here and at the driver, which judges
            # the stamp our command carries)
            control = self.control
            for name, wrong in (('resume_after_fault', control.resume_after_fault),
                                ('start_enabled', control.start_enabled),
                                ('gain_check', control.gain_check != 'refuse'),
                                ('use_header_stamp', not self.use_header_stamp)):
                if wrong:
                    raise ValueError(f'{name}: torque mode (effort through plag_driver) '
                                     'never takes the arm on its own, runs gains the check '
                                     'refuses or judges freshness by arrival: '
                                     'resume_after_fault and start_enabled false, gain_check '
                                     "'refuse', use_header_stamp true")
            if self.switch.fallback == EFFORT_CONTROLLER:
                raise ValueError('switch.fallback: a disable or a fault in torque mode hands '
                                 "the arm back to the driver's position hold, not to "
                                 f'{EFFORT_CONTROLLER}')
        kind, method = self.command_kind, self.switch.method
        if (kind == 'forward' and method != 'none' or kind == 'effort' and method == 'driver') \
                and self.switch.fallback == self.target_controller:
            raise ValueError(f'switch.fallback: {self.target_controller} is the controller the '
                             'commands go to; the fallback is the one it replaces (a hand-back '
                             'would switch it in again)')
        for name in ('amplitude', 'frequency_hz', 'max_velocity', 'max_acceleration'):
            _per_joint(getattr(self.reference, name), f'reference.{name}')

    @classmethod
    def from_values(cls, values: Mapping[str, Any],
                    base: ImpedanceSettings | None = None) -> ImpedanceSettings:
        """Settings from ``{parameter name: value}``; absent names keep ``base``'s.

        Raises:
            ValueError: a value out of range, not allowed or inconsistent; the message
                names the parameter.
        """
        values = dict(values)
        if 'rate_hz' in values:
            # Set with the cut-off in one step: a higher rate may be what admits it.
            values['filter.rate_hz'] = values['rate_hz']
        return build(cls, values, base=base)

    @property
    def command_kind(self) -> CommandKind:
        """What the node publishes: the effort interface overrides ``command.type``."""
        return 'effort' if self.control.command_interface == 'effort' else self.command.type

    @property
    def stamped_effort(self) -> bool:
        """Whether the command is ``plag_driver``'s named, stamped effort
        (:data:`EFFORT_COMMAND_TOPIC`), not a bare array by index."""
        return self.command_kind == 'effort' and self.switch.method == 'driver'

    @property
    def command_topic(self) -> str:
        """``command.topic``, or the default topic of :attr:`command_kind`."""
        return self.command.topic or {
            'forward': FORWARD_COMMAND_TOPIC,
            'trajectory': TRAJECTORY_COMMAND_TOPIC,
            'effort': EFFORT_COMMAND_TOPIC if self.switch.method == 'driver'
            else 'effort_controller/commands'}[self.command_kind]

    @property
    def target_controller(self) -> str:
        """``command.controller``, or the controller the command path feeds."""
        kind = self.command_kind
        return self.command.controller or (
            TRAJECTORY_CONTROLLER if kind == 'trajectory' else
            EFFORT_CONTROLLER if kind == 'effort' else FORWARD_CONTROLLER)

    def ros_names(self) -> dict[str, tuple[str, bool]]:
        """The names the node talks to with these settings, by the parameter that sets
        each: parameter -> (the name as given, whether it is a service's). The command
        topic; the target controller's ``get_parameters`` (not on the effort path); the
        node that switches the arm for ``switch.method`` (where the path switches)."""
        kind, sw = self.command_kind, self.switch
        names = {'command.topic': (self.command_topic, False)}
        if kind != 'effort':
            names['command.controller'] = (f'{self.target_controller}/get_parameters', True)
        if kind == 'forward' or (kind == 'effort' and sw.method == 'driver'):
            target = {'controller_manager': ('switch.controller_manager',
                                             sw.controller_manager, 'switch_controller'),
                      'sim': ('switch.sim_node', sw.sim_node, 'set_parameters'),
                      'driver': ('switch.driver_node', sw.driver_node, 'set_parameters')
                      }.get(sw.method)
            if target is not None:
                key, node, service = target
                names[key] = (f'{node.rstrip("/")}/{service}', True)
        return names

    def command_joints(self, model: RobotModel) -> list[str]:
        """The validated ``command.joints``: distinct actuated joints of ``model``.

        Raises:
            ValueError: an unknown, repeated or missing joint.
        """
        joints = list(self.command.joints)
        actuated = model.actuated_names
        bad = [j for j in joints if j not in actuated]
        if not joints or bad or len(set(joints)) != len(joints):
            raise ValueError(f'command.joints {joints}: need distinct actuated joints of '
                             f'{model.name} ({actuated}); unknown: {bad}')
        return joints

    def controller_config(self, model: RobotModel) -> ImpedanceConfig:
        """The validated controller settings for ``model``.

        Raises:
            ValueError: any inconsistent value; the message names the parameter.
        """
        bodies = self.compensate.paths('bodies')

        def mask(name: Literal['acceleration', 'velocity']) -> np.ndarray | None:
            paths = self.compensate.paths(name)
            if not paths:
                return None
            try:
                return propagation_mask(model, paths, bodies=bodies or None)
            except ValueError as err:
                raise ValueError(f'compensate.{name}: {err}') from err

        actuated = model.actuated_names
        commanded = self.command_joints(model)
        return self.control.replace(
            monitored=np.array([name in commanded for name in actuated]),
            acceleration_mask=mask('acceleration'), velocity_mask=mask('velocity'),
            estimator=self.filter,
            reference_max_velocity=_per_joint(self.reference.max_velocity,
                                              'reference.max_velocity'),
            reference_max_acceleration=_per_joint(self.reference.max_acceleration,
                                                  'reference.max_acceleration'))

    def reference_trajectory(self, n_act: int) -> HoldReference | SineReference:
        """The trajectory ``reference.*`` describes, over ``n_act`` actuated joints.

        Raises:
            ValueError: a per-joint list of another length, or a non-finite or negative
                frequency.
        """
        if self.reference.mode == 'hold':
            return HoldReference()
        amplitude = _per_joint(self.reference.amplitude, 'reference.amplitude')
        frequency = _per_joint(self.reference.frequency_hz, 'reference.frequency_hz')
        try:
            amplitude, frequency = (np.broadcast_to(a, (n_act,)) for a in (amplitude,
                                                                          frequency))
        except ValueError as err:
            raise ValueError(f'reference.amplitude, reference.frequency_hz: need 1 or {n_act} '
                             'values') from err
        if not (np.isfinite(amplitude).all() and np.isfinite(frequency).all()
                and (frequency >= 0).all()):
            raise ValueError('reference.amplitude and reference.frequency_hz must be finite, '
                             'frequencies >= 0')
        return SineReference(amplitude.copy(), frequency.copy())


def foreign_names(namespace: str, names: Mapping[str, str]) -> list[str]:
    """Those of ``names`` (parameter -> the full name it resolves to, e.g.
    ``/controller_manager/switch_controller``) outside ``namespace`` (the node's, e.g.
    ``/arm1``), each as ``'parameter (name)'``. Nothing is outside the root namespace.

    A node under ``/arm1`` given an absolute ``/controller_manager`` (a copied parameter
    file of a root bring-up) would switch the root arm's controllers while it commands its
    own: the impedance node refuses to start instead (:func:`check_own_namespace`).
    """
    inside = namespace.rstrip('/') + '/'
    if inside == '/':
        return []
    return [f'{key} ({name})' for key, name in names.items() if not name.startswith(inside)]


def check_own_namespace(namespace: str, names: Mapping[str, str]) -> None:
    """Refuse settings whose names (parameter -> full name) leave ``namespace``.

    Raises:
        ValueError: naming each such parameter and where it resolves to.
    """
    foreign = foreign_names(namespace, names)
    if foreign:
        raise ValueError(
            f'{", ".join(foreign)}: outside this node\'s namespace {namespace}, so it would '
            'command or switch another arm; give a relative name (controller_manager, '
            'plag_sim, plag_driver, plag_arm_position_controller/commands ...), which '
            'resolves in the namespace')


IMPEDANCE_OPTIONS: list[Option] = options(ImpedanceSettings())
"""The node's parameters, in declaration order."""
