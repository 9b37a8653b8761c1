"""``plag_sim``: a simulated CRANE-X7 on the ROS 2 graph, for demos and tests without hardware.

Physics is :class:`plag_ros.core.simulation.simulator.Simulator` (forward dynamics of the
URDF with servo emulation, Coulomb stick-slip, hard stops, effort saturation); this node
only moves numbers between it and the topics, like the robot's ros2_control driver would.
Its topics (``joint_states``, ``robot_description`` out; the arm controllers' commands and
two test interfaces in) are listed with types, QoS and content in
:data:`plag_ros.ros.interfaces.SIM`.

Emulated controller manager. The parameter ``active_arm_controller`` names the one arm
controller that is active: ``crane_x7_arm_controller`` (the driver's
JointTrajectoryController, active after the official bring-up),
``plag_arm_position_controller`` (our forward_command_controller/ForwardCommandController
on the position interfaces) or ``none``. Where ``controller_manager_msgs`` can be imported,
a node named ``controller_manager`` in this process also serves
``/controller_manager/switch_controller`` and ``/controller_manager/list_controllers``
with the real manager's rules, checks and messages
(:mod:`plag_ros.ros.emulated_controller_manager`: STRICT and BEST_EFFORT, the two arm
controllers claiming the 7 ``<joint>/position`` interfaces, ``joint_state_controller``
claiming none); a switch there sets ``active_arm_controller`` (the same effect and log
line), and deactivating ``joint_state_controller`` stops ``joint_states`` until it is
activated again, as on the robot. Without that package only the parameter switches (one
info line says so). Commands to an inactive controller are ignored and counted
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

Timing (``clock: wall``, the default: what a real driver stack pointed at the simulator
expects): one wall-clock timer at ``publish_rate_hz`` integrates, per tick, as many physics
steps of ``1 / physics_rate_hz`` as wall time has advanced (at most ``max_steps_per_tick``,
and no more than fit in 80 % of the tick period; the rest is dropped and counted as
``overrun_steps``, and the tick as ``late_ticks``, logged with its lag at most every 2 s: a
busy machine slows the simulated robot down instead of piling up work or thinning out
joint_states), then publishes one joint state stamped with the node clock at the tick's
start, the instant the stepped state represents (as ros2_control's joint_state_broadcaster
stamps with its control cycle's time: a stall between stepping and publishing must not
squeeze the state's motion into a shorter stamp interval). A robot at exact rest costs next
to nothing: such steps have the same inputs as the last one and are skipped
(``SimulatorConfig.skip_rest``). The achieved physics rate, the rate of computed steps and
the process CPU share are on ``/diagnostics`` and logged every ``report_period`` seconds.

With ``clock: simulated`` the node keeps a clock of its own: each tick advances whole
publish periods while it is behind wall time (at most ``max_steps_per_tick`` steps' worth),
each published stamped with its end, so stamps are one period apart and nothing is lost; a
busy machine makes it lag instead (``clock_lag_s``, ``largest_lag_s``, ``late_ticks``).
With ``pace_topic`` it also holds while ``pace_lead`` seconds ahead of that topic's newest
stamp (``paced_ticks``): :meth:`~plag_ros.core.simulation.driver.DriverEmulation.periods_due`.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from plag_ros.core.common.options import build
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.core.simulation.driver import REJECTION_REASONS, DriverEmulation
from plag_ros.core.simulation.settings import (
    ARM_CONTROLLERS,
    FORWARD,
    JTC,
    SimSettings,
    per_joint,
    sim_options,
)
from plag_ros.core.simulation.simulator import Simulator
from plag_ros.ros import messages as msgs
from plag_ros.ros import qos
from plag_ros.ros.controller_file import CONTROLLER_TYPE
from plag_ros.ros.emulated_controller_manager import (
    JOINT_STATE_BROADCASTER,
    EmulatedControllerManager,
    SwitchOutcome,
    controller_manager_node,
    crane_x7_controllers,
    release_for,
)
from plag_ros.ros.nodes import spin_node
from plag_ros.ros.parameters import declare_options, option_values

__all__ = ['ARM_CONTROLLERS', 'ARM_CONTROLLER_TYPES', 'FORWARD', 'JTC', 'NODE_NAME', 'OPTIONS',
           'REJECTION_REASONS', 'SimNode', 'controller_manager_stand_in', 'main']

NODE_NAME = 'plag_sim'
ARM_CONTROLLER_TYPES = {JTC: 'joint_trajectory_controller/JointTrajectoryController',
                        FORWARD: CONTROLLER_TYPE}
"""The plugin type of each arm controller, as ListControllers reports it."""
OPTIONS = sim_options()
"""The node's parameters; their defaults match config/sim.yaml."""


def _seconds(stamp) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def _data_to(handler: Callable[[Sequence[float]], object]
             ) -> Callable[[Float64MultiArray], None]:
    """A Float64MultiArray callback handing the message's data to ``handler`` (typed, so that
    every rclpy's stubs accept it)."""
    def on_message(msg: Float64MultiArray) -> None:
        handler(msg.data)
    return on_message


class SimNode(Node):
    """Simulated robot: commands in, joint states and robot_description out.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (``parameter_overrides``, ``context``, ...).

    Raises:
        ValueError: inconsistent parameters (message names the parameter).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        try:
            settings: SimSettings = build(SimSettings, declare_options(self, OPTIONS))
        except ValueError as err:
            raise ValueError(f'{NODE_NAME}: {err}') from err
        self.settings = settings
        nominal = RobotModel.from_urdf(settings.urdf_path or default_urdf_path())
        self.model, parameters = model_with_parameters(nominal, settings.model.parameters)
        config = settings.simulator_config()
        if parameters is not None:
            config = config.with_model_parameters(parameters, self.model)
            self.get_logger().info(parameters.summary())
        self.sim = Simulator(self.model, config)
        m = self.sim.n_actuated
        act = self.model.actuated
        q0 = np.clip(per_joint(settings.initial_positions, 'initial_positions', m),
                     self.model.joint_lower[act], self.model.joint_upper[act])
        self.sim.step()            # first calls compile or load: not in the first tick
        self.sim.reset(q0)
        if settings.command_mode == 'position':
            self.sim.set_position_command(q0)
        try:
            self.driver = DriverEmulation(self.sim, settings, self.get_logger().warning,
                                          self._now_s)
        except ValueError as err:
            raise ValueError(f'{NODE_NAME}: {err}') from err
        self.command_names = self.driver.command_names
        self.state_names = self.driver.state_names
        self.arm_joints = self.driver.arm_joints
        # The emulated controller manager's view: which controllers exist and what they
        # claim; whether they are active comes from the driver and `broadcasting`. It
        # switches by the rules of this install's ros2_control release (ROS_DISTRO).
        self.controller_manager = EmulatedControllerManager(crane_x7_controllers(
            list(ARM_CONTROLLER_TYPES.items()), self.arm_joints, self.state_names),
            release=release_for(os.environ.get('ROS_DISTRO')))
        self.broadcasting = True     # joint_state_controller active: joint_states flow

        reliable, latched = qos.reliable(), qos.LATCHED
        # 0.5 s of joint states: a subscriber stalled that long loses none
        self._pub_state = self.create_publisher(JointState, 'joint_states', qos.reliable(
            settings.state_queue_depth))
        self._pub_description = self.create_publisher(String, 'robot_description', latched)
        self._pub_diag = self.create_publisher(DiagnosticArray, '/diagnostics', reliable)
        # the URDF as a robot publishes it, without the simulated arm's own figures
        # (model.parameters): the other nodes apply theirs, as on a real arm
        self._pub_description.publish(String(data=nominal.urdf_xml))
        driver = self.driver
        self.create_subscription(Float64MultiArray, 'effort_controller/commands',
                                 _data_to(driver.effort_command), reliable)
        self.create_subscription(Float64MultiArray, 'position_controller/commands',
                                 _data_to(driver.position_command), reliable)
        # The driver's interface: the arm controllers of the emulated controller manager.
        self.create_subscription(JointTrajectory, f'{JTC}/joint_trajectory',
                                 self._on_trajectory, reliable)
        self.create_subscription(Float64MultiArray, f'{FORWARD}/commands',
                                 _data_to(driver.forward_command), reliable)
        if settings.paced:
            self.create_subscription(JointState, settings.pace_topic, self._on_pace, reliable)
        self._timer = self.create_timer(1.0 / settings.publish_rate_hz, self._on_tick)
        self._report_timer = self.create_timer(settings.report_period, self._report)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.get_logger().info(
            f'simulating {self.model.name} ({m} actuated joints) at '
            f'{settings.physics_rate_hz:g} Hz, joint_states at {settings.publish_rate_hz:g} '
            f'Hz, {self.sim.mode} mode, {settings.clock} clock'
            + (f' paced by {settings.pace_topic}' if settings.paced else '')
            + f'; commands take {list(self.command_names)}')

    @property
    def rejected(self) -> dict[str, int]:
        """Rejected commands per reason since start (``rejected.*`` of /diagnostics)."""
        return self.driver.reject.counts

    @property
    def counters(self) -> dict[str, int]:
        """Command, switch, step and publish counters since start (as in /diagnostics)."""
        return self.driver.counters

    def _on_set_parameters(self, params) -> SetParametersResult:
        try:
            new = build(SimSettings, option_values(self, OPTIONS, params))
        except ValueError as err:
            return SetParametersResult(successful=False, reason=str(err))
        names = {p.name for p in params}
        old_active = self.driver.active
        if self.driver.switch(new.active_arm_controller):
            self.get_logger().info(f'switch: {old_active} -> {new.active_arm_controller}')
        if 'position_p_gain' in names:
            self.sim.set_p_gain(new.position_p_gain)
            self.get_logger().warning(f'servo position P gain now {new.position_p_gain:g}')
        self.driver.effort_timeout = new.effort_timeout
        self.settings = new
        return SetParametersResult(successful=True)

    def active_controllers(self) -> frozenset[str]:
        """The controllers the emulated controller manager reports active now."""
        active = {JOINT_STATE_BROADCASTER} if self.broadcasting else set()
        if self.driver.active in ARM_CONTROLLER_TYPES:
            active.add(self.driver.active)
        return frozenset(active)

    def apply_switch(self, outcome: SwitchOutcome) -> None:
        """Make an accepted SwitchController request happen in the simulator.

        The arm controller changes through the ``active_arm_controller`` parameter, so the
        service and the parameter path have one effect and one log line. A restart of the
        active arm controller (deactivated and activated in one request) passes through
        ``none``, which drops a running trajectory as the real reactivation does.
        """
        self.broadcasting = JOINT_STATE_BROADCASTER in outcome.active
        arm = next((name for name in ARM_CONTROLLER_TYPES if name in outcome.active), 'none')
        restart = arm == self.driver.active and arm in outcome.deactivated
        if restart:
            self.driver.switch('none')
        if arm != self.driver.active:
            result = self.set_parameters([Parameter('active_arm_controller', value=arm)])[0]
            if not result.successful:
                self.get_logger().error(f'switch to {arm} failed: {result.reason}')

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        points = [(_seconds(p.time_from_start), p.positions) for p in msg.points]
        with_velocities = all(len(p.velocities) for p in msg.points)
        self.driver.trajectory(msg.joint_names, points, _seconds(msg.header.stamp),
                               [p.velocities for p in msg.points] if with_velocities else None)

    def _clock_pair(self) -> tuple[int, float]:
        """The node clock [ns] and ``time.monotonic()`` [s] read at one instant (within 1 ms
        unless the machine stalls three times in a row)."""
        for _ in range(3):
            before = time.monotonic()
            t_ns = self.get_clock().now().nanoseconds
            after = time.monotonic()
            if after - before < 1e-3:
                break
        return t_ns, 0.5 * (before + after)

    def _now_s(self) -> float:
        """The driver's clock [s]: the simulated clock once it runs, else the node clock."""
        clock_ns = self.driver.clock_ns
        return (self.get_clock().now().nanoseconds if clock_ns is None else clock_ns) * 1e-9

    def _on_pace(self, msg: JointState) -> None:
        self.driver.paced_by(msgs.stamp_to_ns(msg.header.stamp))

    def _on_tick(self) -> None:
        wall_ns, now = self._clock_pair()
        driver = self.driver
        if not driver.simulated:
            driver.tick(now)
            self._publish(wall_ns)
            return
        due, held = driver.periods_due(wall_ns)
        for _ in range(due):
            if not self._publish(driver.advance()):
                return
        driver.clock_tick(now, wall_ns * 1e-9 - self._now_s(), held=held)

    def _publish(self, t_ns: int) -> bool:
        """Publish the state the last steps left, stamped ``t_ns``, unless
        joint_state_controller is deactivated; False when shutting down (a signal while
        stepping: the publisher is gone)."""
        if not self.context.ok():
            return False
        if self.broadcasting:
            names, q, qd, effort = self.driver.joint_state()
            self._pub_state.publish(msgs.joint_state(names, q, qd, effort, t_ns=t_ns))
            self.driver.counters['published'] += 1
        return True

    def _report(self) -> None:
        ok, message, values, line = self.driver.report()
        level = msgs.DiagnosticLevel.OK if ok else msgs.DiagnosticLevel.WARN
        self._pub_diag.publish(msgs.diagnostic_array([msgs.diagnostic_status(
            self.get_fully_qualified_name(), level, message, values,
            hardware_id=self.model.name)], t_ns=self.get_clock().now().nanoseconds))
        self.get_logger().info(line)


def controller_stand_ins(sim: SimNode) -> list[Node]:
    """Nodes named like the two arm controllers, carrying their parameters.

    Only the parameters are emulated (so a client's GetParameters on
    ``/<controller>/get_parameters`` reads them, as on the real controller manager, where
    each controller is a node); the topics live on the simulator node itself. Each has
    ``joints``; the forward controller also ``interface_name`` (``position``), the JTC its
    ``command_interfaces`` and ``state_interfaces`` (``[position]``, the driver's file). Like
    a real controller node (controller_interface_base.hpp: undeclared parameters allowed),
    a parameter it does not have reads as not set instead of failing the whole request.
    """
    extra: dict[str, dict[str, object]] = {
        JTC: {'command_interfaces': ['position'], 'state_interfaces': ['position']},
        FORWARD: {'interface_name': 'position'}}
    nodes = []
    for name in (JTC, FORWARD):
        # Not the process's global arguments: a launch file's `-r __node:=plag_sim` would
        # rename these too, and two nodes would answer /plag_sim/get_parameters. So the
        # simulator's namespace (`-r __ns:=/arm1`) is passed on: a controller's node is in
        # its controller manager's (ros2_control controller_manager.cpp humble:1427).
        node = Node(name, context=sim.context, namespace=sim.get_namespace(),
                    use_global_arguments=False, allow_undeclared_parameters=True)
        node.declare_parameter('joints', list(sim.arm_joints))
        for parameter, value in extra[name].items():
            node.declare_parameter(parameter, value)
        nodes.append(node)
    return nodes


def controller_manager_stand_in(sim: SimNode) -> Node | None:
    """The ``controller_manager`` node serving switch_controller and list_controllers for
    ``sim``, or None (logged once, at info) without controller_manager_msgs."""
    node = controller_manager_node(
        sim.controller_manager, context=sim.context, active=sim.active_controllers,
        apply=sim.apply_switch, update_rate_hz=round(sim.settings.publish_rate_hz),
        namespace=sim.get_namespace())
    if node is None:
        sim.get_logger().info(
            f'controller_manager_msgs cannot be imported: no '
            f'{sim.resolve_service_name("controller_manager")} services; the '
            'active_arm_controller parameter switches the arm controllers')
    else:
        sim.get_logger().info(f'{node.get_fully_qualified_name()}: switching by the rules of '
                              f'ros2_control on {sim.controller_manager.release}')
    return node


def _companions(sim: SimNode) -> Iterator[Node]:
    """The nodes spun beside ``sim``: the controller stand-ins and, where it can be
    served, the emulated controller manager."""
    yield from controller_stand_ins(sim)
    manager = controller_manager_stand_in(sim)
    if manager is not None:
        yield manager


def main(args: list[str] | None = None) -> None:
    """Console script ``sim_node``: spin :class:`SimNode`, the controller stand-ins and,
    where it can be served, the emulated controller manager until shutdown (SIGINT or
    SIGTERM, as every node: :func:`~plag_ros.ros.nodes.spin_node`)."""
    spin_node(SimNode, args, companions=_companions)


if __name__ == '__main__':
    main()
