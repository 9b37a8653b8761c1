"""``plag_driver``: the CRANE-X7's servo bus as a ROS 2 node, with torque (current) mode.

It replaces rt-net's ``crane_x7_control`` on the bus (never run both on one port) and
speaks to the servos through ROBOTIS' dynamixel-sdk (:class:`plag_ros.bus.host.driver.BusDriver`
does the bus; this node is its ROS face). What it offers, with the robot driver's names:

* ``joint_states`` (sensor_msgs/JointState, reliable) at ``rate_hz``: the 8 servos' joints
  in chain order, position [rad], velocity [rad/s], effort = current x current_to_effort
  (2.20 or 3.60 N*m/A: crane_x7_control's convention, which every reader here undoes);
* ``crane_x7_arm_controller/joint_trajectory`` (trajectory_msgs/JointTrajectory, linear
  between points) and ``plag_arm_position_controller/commands`` (std_msgs/Float64MultiArray,
  the 7 arm joints) in position mode (relative names: ``/crane_x7_arm_controller/...`` in
  the root namespace);
* ``plag_arm_effort_controller/commands`` (sensor_msgs/JointState) in current mode: the
  arm joints by ``name`` in any order, ``effort`` [N*m] (motor torque), and
  ``header.stamp`` = the stamp of the ``joint_states`` sample the torque was computed
  from. A command with a joint the chain lacks, a name twice, an arm joint missing, not
  one effort per name, a zero stamp, a stamp older than the command in force, or a source
  sample older than ``stale_s`` or in the future is rejected, counted and logged; the last
  good one stays. The node runs on the wall clock (``use_sim_time`` is refused);
* the parameter ``active_arm_controller``, which says whose commands count:
  ``plag_arm_effort_controller`` puts the arm joints in current mode (with the gravity
  torque of the present pose until the first command), any other in position mode holding
  the present pose. The impedance node sets it (``switch.method: driver``);
* its state on every change and once a second: modes, fault, counters, as one
  ``/diagnostics`` status (ERROR while a fault is latched) and, deprecated, as JSON on
  ``~/state`` (std_msgs/String, transient local); ``~/clear_fault`` (std_srvs/Trigger).

Its model (the gravity torque of a switch and of a hold) is taken once, at start, from
``robot_description_source`` (:mod:`plag_ros.ros.robot_description`); one that lacks a
joint of the chain is an error at start. The gripper stays in position mode, holding
where it is. MoveIt's trajectory controller
is not there: trajectories are followed point to point, without its tolerances or its
action interface. The bus runs at ``rate_hz`` in a process of its own
(:mod:`plag_ros.bus.host.loop_process`: nothing this node runs can stall it); callbacks
only hand commands over. On SIGINT/SIGTERM the node has it hold every joint in position
mode at its pose and put back the servo settings it changed, and exits with 0; if the node
dies instead, however it died, the loop does the same on its own. A loop that dies is
said as the fault and started again, holding.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from plag_ros.bus.chain_file import CRANE_X7_BUS, BusConfig
from plag_ros.bus.host.driver import (
    DRIVER_NODE_OPTIONS,
    EFFORT_CONTROLLER,
    DriverNodeSettings,
    Reading,
)
from plag_ros.bus.host.loop_process import (
    OPEN_EVERY_S,
    STOP_WAIT_S,
    BusLoopProcess,
    DriverRecipe,
    closed_text,
    ended_text,
)
from plag_ros.core.common.options import build
from plag_ros.core.control.settings import (
    EFFORT_COMMAND_TOPIC,
    FORWARD_COMMAND_TOPIC,
    FORWARD_CONTROLLER,
    TRAJECTORY_COMMAND_TOPIC,
    TRAJECTORY_CONTROLLER,
)
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.core.dynamics.motors import ARM_JOINTS
from plag_ros.ros import messages as msgs
from plag_ros.ros.parameters import declare_options, option_values
from plag_ros.ros.qos import LATCHED, reliable
from plag_ros.ros.rclpy_compat import quiet_publisher
from plag_ros.ros.robot_description import StartModel

__all__ = ['NODE_NAME', 'DriverNode', 'main']

NODE_NAME = 'plag_driver'
_RELIABLE = reliable()
LOOP_SILENT_S = 0.5
"""[s] a bus loop whose records stop this long while its bus is open is said as the fault
(it sends one a cycle)."""


class DriverNode(Node):
    """The bus driver node (module docstring).

    Raises:
        ValueError: bad parameters (checked here, by building the driver the loop process
            builds again).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        values = declare_options(self, DRIVER_NODE_OPTIONS)
        s = self.settings = build(DriverNodeSettings, values)
        if self.get_parameter('use_sim_time').value:
            raise ValueError(f'{NODE_NAME}: use_sim_time must be false: the servos, their Bus '
                             'Watchdog and the age of every command run on the wall clock')
        if s.bus.active_arm_controller == EFFORT_CONTROLLER:
            # current mode comes through the impedance node's switch, never from a file
            raise ValueError(f'{NODE_NAME}: active_arm_controller must not start as '
                             f'{EFFORT_CONTROLLER}: the bus would open in current mode with '
                             'nothing commanding it')
        config = BusConfig.load(s.bus.chain or CRANE_X7_BUS)
        self.urdf = StartModel(self, s.description)    # before the other entities: it spins
        self.model, parameters = model_with_parameters(self.urdf.model, s.model.parameters)
        model = self.model
        joints = [spec.joint for spec in config.servos]
        calibration = None
        if model.effort_calibration is not None:
            calibration = tuple(float(model.effort_calibration[model.joint_names.index(j)])
                                for j in joints)
        recipe = DriverRecipe(config, s.bus, model, calibration, tuple(ARM_JOINTS))
        checked = recipe.build()         # the settings and the model's joints, here and now
        self.joints, self.torque_constant = list(checked.joints), checked.torque_constant
        self.bus = BusLoopProcess(recipe, s.bus.rate_hz, self._on_record)
        log = self.get_logger()
        if parameters is not None:
            log.info(parameters.summary())
        self._active = s.bus.active_arm_controller
        self._state_key: tuple = ()
        self._state_at = 0.0
        # the loop's newest state (its modes, fault, counts, ...); why it is not running
        self._loop: dict[str, Any] = {'modes': ['position'] * len(joints), 'fault': '',
                                      'not_open': '', 'counts': {}, 'cycle_errors': 0,
                                      'dropped_records': 0, 'command_delay': {}, 'pid': None}
        self._loop_ended = ''
        self._loop_silent = ''               # the loop's process alive, its records not
        self._record_at = time.monotonic()   # [s] the newest record's arrival
        self._report_lock = threading.Lock()  # (the reading thread's and the timer's)
        self.rejected = self.publish_errors = 0
        self._newest_source_ns = 0           # stamp of the effort command in force [ns]
        self._pub = self.create_publisher(JointState, 'joint_states', _RELIABLE)
        self._pub_state = self.create_publisher(String, '~/state', LATCHED)
        self._pub_diag = quiet_publisher(self, DiagnosticArray, '/diagnostics', _RELIABLE)
        # the command topics are relative (in this node's namespace): full names for messages
        self._topic = {name: self.resolve_topic_name(name) for name in (
            TRAJECTORY_COMMAND_TOPIC, FORWARD_COMMAND_TOPIC, EFFORT_COMMAND_TOPIC)}
        self.create_subscription(JointTrajectory, TRAJECTORY_COMMAND_TOPIC, self._on_trajectory,
                                 _RELIABLE)
        self.create_subscription(Float64MultiArray, FORWARD_COMMAND_TOPIC, self._on_forward,
                                 _RELIABLE)
        self.create_subscription(JointState, EFFORT_COMMAND_TOPIC, self._on_effort, _RELIABLE)
        self.create_service(Trigger, '~/clear_fault', self._on_clear_fault)
        self._clear_fault = self.resolve_service_name('~/clear_fault')   # for messages
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self._started = False
        self.create_timer(0.1, self._watch_loop)

    def start_bus(self) -> None:
        """Start the bus loop's process (once). Not in the constructor: a Ctrl-C there ends
        the build, and a loop already started would open the bus with no node left to stop
        it (``spin_node(start=...)``)."""
        if self._started:
            return
        self._started = True
        self._record_at = time.monotonic()
        self.bus.start()
        s = self.settings
        kt = ', '.join(f'{k:.3g}' for k in self.torque_constant)
        self.get_logger().info(
            f'bus {s.bus.port}: joints {self.joints} at {s.bus.rate_hz:g} '
            f'Hz in process {self.bus.pid}; active_arm_controller {self._active}; torque '
            f'constants [{kt}] N*m/A ({s.bus.torque_constant}); Bus Watchdog '
            f'{s.bus.watchdog_s:g} s')

    # ------------------------------------------------------------------ the loop's records
    def _on_record(self, kind: str, payload: Any) -> None:
        """A record of the loop process, on the thread that reads them."""
        log = self.get_logger()
        self._record_at = time.monotonic()
        if kind == 'reading':
            self._publish(payload)
        elif kind == 'state':
            self._loop, self._loop_ended, self._loop_silent = payload, '', ''
        elif kind in ('log', 'closed'):
            level, text = payload if kind == 'log' else closed_text(*payload)
            if level == 'info':         # (rclpy: one severity per call site)
                log.info(text)
            elif level == 'warning':
                log.warning(text)
            else:
                log.error(text)
        elif kind == 'ended':
            if not self.bus.stopping:
                self._loop_ended = ended_text(*payload)
                log.error(self._loop_ended)
                self._report(force=True)
            return
        self._report()

    def _watch_loop(self) -> None:
        """Say a loop whose process lives but whose records stopped (stopped, hung in a
        read) as the fault: :data:`LOOP_SILENT_S` without one while the bus is open (a
        record a cycle), or a few open tries' worth before."""
        if not self._started or self.bus.stopping or self._loop_ended:
            return
        quiet = time.monotonic() - self._record_at
        # (before the bus is open: a start, Python's imports, and an open's bursts)
        limit = LOOP_SILENT_S if self._loop.get('is_open') else 5.0 * OPEN_EVERY_S
        silent = (f'the bus loop (process {self.bus.pid}) has sent nothing for '
                  f'{quiet:.1f} s' if quiet > limit else '')
        if bool(silent) != bool(self._loop_silent):
            self._loop_silent = silent
            if silent:
                self.get_logger().error(silent)
            self._report(force=True)

    def _publish(self, reading: Reading) -> None:
        try:
            # stamped when the servos were read, not when the record got here
            read_ns = self.get_clock().now().nanoseconds - round(
                (time.monotonic() - reading.t) * 1e9)
            self._pub.publish(msgs.joint_state(self.joints, reading.position,
                                               reading.velocity, reading.effort, t_ns=read_ns))
        except Exception:  # noqa: BLE001 - a publish racing shutdown; counted, not fatal
            self.publish_errors += 1

    def _report(self, *, force: bool = False) -> None:
        """``~/state`` when it changed, and once a second besides (``force``: now)."""
        with self._report_lock:
            self._report_now(force)

    def _report_now(self, force: bool) -> None:
        if (loop := self._loop)['pid'] is None and not (self._loop_ended or self._loop_silent):
            return            # nothing from the loop yet: no state to say (a log came first)
        if self._loop_ended:
            fault = self._loop_ended
        elif self._loop_silent:
            fault = self._loop_silent
        elif loop['not_open']:
            fault = f'bus not open: {loop["not_open"]}'
        else:
            fault = loop['fault']
        key = (tuple(loop['modes']), fault, self._active)
        now = time.monotonic()
        if not force and key == self._state_key and now - self._state_at < 1.0:
            return
        if key != self._state_key and loop['fault'] and (
                not self._state_key or loop['fault'] != self._state_key[1]):
            self.get_logger().error(f'fault latched: {loop["fault"]} (call '
                                    f'{self._clear_fault} to clear)')
        self._state_key, self._state_at = key, now
        try:
            text, diagnostics = msgs.node_state(
                self.get_fully_qualified_name(), {
                    'modes': dict(zip(self.joints, loop['modes'])), 'fault': fault,
                    'active_arm_controller': self._active, 'counts': loop['counts'],
                    'rejected': self.rejected, 'cycle_errors': loop['cycle_errors'],
                    'command_delay': loop['command_delay'],
                    'bus_loop': {'pid': loop['pid'], 'restarts': self.bus.restarts,
                                 'dropped_records': loop['dropped_records']},
                    'model': self.urdf.report(self.model)},
                msgs.DiagnosticLevel.ERROR if fault else msgs.DiagnosticLevel.OK,
                f'fault: {fault}' if fault else f'{self._active} drives the arm',
                hardware_id=self.model.name, t_ns=self.get_clock().now().nanoseconds)
            self._pub_state.publish(text)
            self._pub_diag.publish(diagnostics)
        except Exception:  # noqa: BLE001 - as in _publish
            self.publish_errors += 1

    # ------------------------------------------------------------------ commands
    def _call(self, name: str, *args: Any) -> Any:
        """The loop's driver's ``name(*args)``; None where the loop did not answer (logged:
        no loop running, no answer in time)."""
        ok, value = self.bus.call(name, *args)
        if not ok:
            self.get_logger().error(f'{name}: {value}', throttle_duration_sec=1.0)
            return None
        return value

    def _on_trajectory(self, msg: JointTrajectory) -> None:
        if not self._accepting(TRAJECTORY_CONTROLLER, self._topic[TRAJECTORY_COMMAND_TOPIC]):
            return
        times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
        if not self._call('command_trajectory', times, [list(p.positions) for p in msg.points],
                          list(msg.joint_names)):
            self._reject(f'{self._topic[TRAJECTORY_COMMAND_TOPIC]}: unknown joints, not '
                         'finite or unordered points (or no bus loop to take them)')

    def _on_forward(self, msg: Float64MultiArray) -> None:
        if self._accepting(FORWARD_CONTROLLER, self._topic[FORWARD_COMMAND_TOPIC]) and \
                not self._call('command_positions', list(msg.data), ARM_JOINTS):
            self._reject(f'{self._topic[FORWARD_COMMAND_TOPIC]}: need {len(ARM_JOINTS)} '
                         'finite positions (or no bus loop to take them)')

    def _on_effort(self, msg: JointState) -> None:
        if not self._accepting(EFFORT_CONTROLLER, self._topic[EFFORT_COMMAND_TOPIC]):
            return
        stamp = msgs.stamp_to_ns(msg.header.stamp)
        if stamp <= 0 or stamp < self._newest_source_ns:
            self._reject(f'{self._topic[EFFORT_COMMAND_TOPIC]}: stamp {stamp} ns is not the '
                         'stamp of a joint state newer than the command in force '
                         f'({self._newest_source_ns} ns)')
            return
        # The source sample's age on the node's clock (the one that stamps joint_states),
        # carried over to the monotonic clock the loop process shares (CLOCK_MONOTONIC is
        # the machine's): no stamp is compared across clocks.
        age = (self.get_clock().now().nanoseconds - stamp) * 1e-9
        # a NaN is the loop's to judge: a fault in current mode
        taken = self._call('command_effort', list(msg.effort), list(msg.name),
                           time.monotonic() - age)
        if taken:
            self._newest_source_ns = stamp
        elif taken is None:
            self.rejected += 1               # the loop never saw it: counted here
        else:
            self.get_logger().warning(   # the driver counts it (rejected_commands)
                f'command rejected: {self._topic[EFFORT_COMMAND_TOPIC]}: names {list(msg.name)}, '
                f'{len(msg.effort)} efforts, source sample {age * 1e3:.1f} ms old (every arm '
                f'joint once by name, one effort each, stamped by the joint_states sample, at '
                f'most stale_s {self.settings.bus.stale_s:g} s old)',
                throttle_duration_sec=1.0)

    def _accepting(self, controller: str, topic: str) -> bool:
        if self._active == controller:
            return True
        self._reject(f'{topic}: {controller} is not the active arm controller '
                     f'({self._active})', quiet=True)
        return False

    def _reject(self, reason: str, *, quiet: bool = False) -> None:
        self.rejected += 1
        if not quiet or self.rejected == 1:
            self.get_logger().warning(f'command rejected: {reason}', throttle_duration_sec=1.0)

    def _on_set_parameters(self, parameters: Sequence[Parameter]) -> SetParametersResult:
        for p in parameters:
            if p.name != 'active_arm_controller':
                continue
            try:
                s = build(DriverNodeSettings, option_values(self, DRIVER_NODE_OPTIONS, [p]))
            except (ValueError, TypeError) as err:
                return SetParametersResult(successful=False, reason=str(err))
            active = s.bus.active_arm_controller
            ok, answer = self.bus.call(
                'request_mode', 'current' if active == EFFORT_CONTROLLER else 'position')
            if ok:
                ok, message = answer
            else:
                message = answer
            if not ok:
                return SetParametersResult(successful=False, reason=message)
            self._active = active
            self.get_logger().info(f'active_arm_controller {active}: {message}')
        return SetParametersResult(successful=True)

    def _on_clear_fault(self, request: Trigger.Request, response: Trigger.Response
                        ) -> Trigger.Response:
        ok, old = self.bus.call('clear_fault')
        response.success = ok
        response.message = (old if not ok else f'cleared: {old}' if old else
                            'no fault latched')
        self.get_logger().info(f'{self._clear_fault}: {response.message}')
        return response

    def stop_bus(self, executor: object = None) -> None:
        """Have the loop hold in position mode, put the servos' settings back and end (it
        holds through its own cycle: a loop stopped first would leave current-mode servos
        silent, and their Bus Watchdog would take their torque); wait for it at most
        :data:`STOP_WAIT_S` (``spin_node``'s shutdown step, under that deadline)."""
        # (a node refused at start has no loop, nor maybe these attributes)
        if getattr(self, '_started', False) and not self.bus.stop(timeout=STOP_WAIT_S):
            self.get_logger().error(
                f'the bus loop (process {self.bus.pid}) did not end in {STOP_WAIT_S:g} s: '
                'it is left to close the bus once it sees this node gone')

    def shutdown_s(self) -> float:
        """[s] the longest :meth:`stop_bus` takes (``spin_node``'s deadline adds it)."""
        return STOP_WAIT_S

    def destroy_node(self) -> None:
        """:meth:`stop_bus` (where the shutdown step did not), then go."""
        if not getattr(self, 'bus', None) or not self.bus.stopping:
            self.stop_bus()
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    """Console script ``driver_node`` (launch/torque.launch.py starts it)."""
    from plag_ros.ros.nodes import spin_node
    spin_node(DriverNode, args, start=DriverNode.start_bus, shutdown=DriverNode.stop_bus,
              shutdown_s=DriverNode.shutdown_s)


if __name__ == '__main__':
    main()
