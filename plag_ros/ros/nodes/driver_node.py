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
action interface. The bus runs in a thread of its own at ``rate_hz``; callbacks only hand
commands over. On SIGINT/SIGTERM the node holds every joint in position mode at its pose,
puts back the servo settings it changed, and exits with 0.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Sequence

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
    BusDriver,
    BusError,
    DriverNodeSettings,
    Reading,
    gravity_in_chain_order,
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


class DriverNode(Node):
    """The bus driver node (module docstring).

    Raises:
        ValueError: bad parameters. BusError: the bus cannot be opened or configured.
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
            calibration = [float(model.effort_calibration[model.joint_names.index(j)])
                           for j in joints]
        self.driver = BusDriver(config, s.bus, torque_calibration=calibration,
                                gravity=gravity_in_chain_order(model, joints),
                                arm_joints=ARM_JOINTS)
        self.driver.log = self.get_logger().warning
        log = self.get_logger()
        if parameters is not None:
            log.info(parameters.summary())
        self._names = list(joints)
        self._active = s.bus.active_arm_controller
        self._stop = threading.Event()
        self._state_key: tuple = ()
        self._state_at = 0.0
        self.rejected = 0
        self._newest_source_ns = 0           # stamp of the effort command in force [ns]
        self.publish_errors = 0
        self.cycle_errors = 0
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
        self._thread: threading.Thread | None = None     # start_bus()

    def start_bus(self) -> None:
        """Open the bus and start its loop on a thread of its own (once). Not in the
        constructor: a Ctrl-C there ends the build, and a loop already started would go
        on driving the servos with nobody to hold them at exit (``spin_node(start=...)``)."""
        if self._thread is not None:
            return
        s = self.settings
        thread = threading.Thread(target=self._loop, name='plag_driver_bus', daemon=True)
        thread.start()
        self._thread = thread        # (only a started one: destroy_node joins it)
        kt = ', '.join(f'{k:.3g}' for k in self.driver.torque_constant)
        self.get_logger().info(
            f'bus {s.bus.port}: servos {self.driver.ids} at {s.bus.rate_hz:g} Hz; '
            f'active_arm_controller {self._active}; torque constants [{kt}] N*m/A '
            f'({s.bus.torque_constant}); Bus Watchdog {s.bus.watchdog_s:g} s')

    # ------------------------------------------------------------------ the bus thread
    def _open(self) -> None:
        """Open the bus, trying again every second until it answers (a USB adapter
        plugged in late, the arm's power switched on after the node). Meanwhile ``~/state``
        says why as its fault (``bus not open: ...``): a controller holding the arm hands
        it back, and one asked to take it refuses."""
        log, said = self.get_logger(), ''
        while not self._stop.is_set():
            try:
                reading = self.driver.open()
            except Exception as err:  # noqa: BLE001 - BusError, or a bug: the thread lives
                why = str(err) if isinstance(err, BusError) else repr(err)
                if why != said:
                    said = why
                    log.error(f'{why}; trying again every second')
                self._report(not_open=why)
                self._stop.wait(1.0)
                continue
            log.info(f'bus open: servos {self.driver.ids} hold their pose in position mode')
            # ~/state before the first joint state: a controller that hears a restarted
            # driver's samples should, as a rule, already know its joints and model
            self._report(force=True)
            self._publish(reading)
            if self._active == EFFORT_CONTROLLER:
                self.driver.request_mode('current')
            return

    def _loop(self) -> None:
        self._open()
        period = 1.0 / self.settings.bus.rate_hz
        deadline = time.monotonic()
        failures: set[str] = set()
        while not self._stop.is_set():
            try:
                reading = self.driver.cycle()
            except Exception as err:  # noqa: BLE001 - the bus thread must outlive any cycle
                reading = None
                self.cycle_errors += 1
                self.driver.fail_safe(f'bus cycle failed: {err!r}')
                if repr(err) not in failures:    # once per kind: no log flood at 200 Hz
                    failures.add(repr(err))
                    self.get_logger().error(f'bus cycle failed: {err!r} (a fault: the arm '
                                            'holds in position mode; counted)')
            if reading is not None:
                self._publish(reading)
            self._report()
            deadline += period
            wait = deadline - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
            else:
                deadline = time.monotonic()   # late: start again from now, do not burst

    def _publish(self, reading: Reading) -> None:
        try:
            # stamped when the servos were read, not when the cycle got round to publishing
            read_ns = self.get_clock().now().nanoseconds - round(
                (self.driver.clock() - reading.t) * 1e9)
            self._pub.publish(msgs.joint_state(self._names, reading.position,
                                               reading.velocity, reading.effort, t_ns=read_ns))
        except Exception:  # noqa: BLE001 - a publish racing shutdown; counted, not fatal
            self.publish_errors += 1

    def _report(self, *, force: bool = False, not_open: str = '') -> None:
        """``~/state`` when it changed, and once a second besides (``force``: now);
        ``not_open``: why the bus is not open, published as the fault."""
        d = self.driver
        fault = f'bus not open: {not_open}' if not_open else d.fault
        key = (tuple(d.modes), fault, self._active)
        now = time.monotonic()
        if not force and key == self._state_key and now - self._state_at < 1.0:
            return
        if key != self._state_key and d.fault and (not self._state_key
                                                   or d.fault != self._state_key[1]):
            self.get_logger().error(f'fault latched: {d.fault} (call {self._clear_fault} to '
                                    'clear)')
        self._state_key, self._state_at = key, now
        try:
            text, diagnostics = msgs.node_state(
                self.get_fully_qualified_name(), {
                    'modes': dict(zip(self._names, d.modes)), 'fault': fault,
                    'active_arm_controller': self._active, 'counts': d.counts,
                    'rejected': self.rejected, 'cycle_errors': self.cycle_errors,
                    'command_delay': d.command_delay(),
                    'model': self.urdf.report(self.model)},
                msgs.DiagnosticLevel.ERROR if fault else msgs.DiagnosticLevel.OK,
                f'fault: {fault}' if fault else f'{self._active} drives the arm',
                hardware_id=self.model.name, t_ns=self.get_clock().now().nanoseconds)
            self._pub_state.publish(text)
            self._pub_diag.publish(diagnostics)
        except Exception:  # noqa: BLE001 - as in _publish
            self.publish_errors += 1

    # ------------------------------------------------------------------ commands
    def _on_trajectory(self, msg: JointTrajectory) -> None:
        if not self._accepting(TRAJECTORY_CONTROLLER, self._topic[TRAJECTORY_COMMAND_TOPIC]):
            return
        times = [p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points]
        if not self.driver.command_trajectory(times, [list(p.positions) for p in msg.points],
                                              list(msg.joint_names)):
            self._reject(f'{self._topic[TRAJECTORY_COMMAND_TOPIC]}: unknown joints, not '
                         'finite or unordered points')

    def _on_forward(self, msg: Float64MultiArray) -> None:
        if self._accepting(FORWARD_CONTROLLER, self._topic[FORWARD_COMMAND_TOPIC]) and \
                not self.driver.command_positions(list(msg.data), ARM_JOINTS):
            self._reject(f'{self._topic[FORWARD_COMMAND_TOPIC]}: need {len(ARM_JOINTS)} '
                         'finite positions')

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
        # carried over to the driver's monotonic clock: no stamp is compared across clocks.
        age = (self.get_clock().now().nanoseconds - stamp) * 1e-9
        # a NaN is the bus thread's to judge: a fault in current mode
        if self.driver.command_effort(list(msg.effort), list(msg.name),
                                      self.driver.clock() - age):
            self._newest_source_ns = stamp
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
            ok, message = self.driver.request_mode(
                'current' if active == EFFORT_CONTROLLER else 'position')
            if not ok:
                return SetParametersResult(successful=False, reason=message)
            self._active = active
            self.get_logger().info(f'active_arm_controller {active}: {message}')
        return SetParametersResult(successful=True)

    def _on_clear_fault(self, request: Trigger.Request, response: Trigger.Response
                        ) -> Trigger.Response:
        old = self.driver.clear_fault()
        response.success = True
        response.message = f'cleared: {old}' if old else 'no fault latched'
        self.get_logger().info(f'{self._clear_fault}: {response.message}')
        return response

    def destroy_node(self) -> None:
        """Hold in position mode, then stop the bus thread and put the servos' settings
        back. The hold is written by the bus thread itself while it still cycles: a loop
        stopped first would leave current-mode servos silent, and their Bus Watchdog would
        take their torque before close() holds them."""
        thread = getattr(self, '_thread', None)
        if thread is None:                # refused at start, or never started: no bus touched
            super().destroy_node()
            return
        if thread.is_alive() and 'current' in self.driver.modes:
            self.driver.request_mode('position')
            deadline = time.monotonic() + 1.0
            while 'current' in self.driver.modes and time.monotonic() < deadline:
                time.sleep(0.005)
        self._stop.set()
        thread.join(timeout=5.0)
        if thread.is_alive():      # two threads on one port would garble both
            self.get_logger().error('the bus thread did not stop in 5 s: the bus is left as '
                                    'it is (the Bus Watchdog stops the servos)')
            super().destroy_node()
            return
        try:
            if self.driver.is_open:
                self.driver.close()
                self.get_logger().info('bus closed: every joint holds its pose in position '
                                       'mode')
        except BusError as err:
            self.get_logger().error(f'closing the bus: {err}; the Bus Watchdog stops the servos')
        super().destroy_node()


def main(args: list[str] | None = None) -> None:
    """Console script ``driver_node`` (launch/torque.launch.py starts it)."""
    from plag_ros.ros.nodes import spin_node
    spin_node(DriverNode, args, start=DriverNode.start_bus)


if __name__ == '__main__':
    main()
