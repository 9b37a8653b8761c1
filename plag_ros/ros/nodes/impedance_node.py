"""``plag_impedance``: partial-impedance control of the CRANE-X7.

Per ``joint_states`` message the node maps the joints by name, runs
:class:`plag_ros.core.control.impedance.PartialImpedanceController` (its own estimator, then
the decomposition and the law) and publishes the command at once; a timer at ``rate_hz``
runs the watchdog, which holds when the input goes stale. The model is taken once, at start
(:mod:`plag_ros.ros.robot_description`). Parameters:
:class:`plag_ros.core.control.settings.ImpedanceSettings` (config/impedance.yaml).

Its topics and services (``joint_states`` and ``~/reference`` in; the command on
``command.topic``, ``~/compensation``, ``~/torque``, ``/diagnostics``, ``~/state`` (JSON,
deprecated) out; ``~/enable``) are in :data:`plag_ros.ros.interfaces.IMPEDANCE`.

Command paths (the official driver has position command interfaces only): ``forward``
streams to our ``plag_arm_position_controller``, switched in for ``crane_x7_arm_controller``
on enable and back ``switch.hold_s`` after a disable, a latched fault or shutdown
(:mod:`plag_ros.ros.arm_handover`); values go index by index, so ``command.joints`` must
equal the controller's ``joints`` in order. ``trajectory`` sends one-point trajectories to
the running ``crane_x7_arm_controller``; keep ``command.time_from_start`` 0 (a positive
value interpolates from the sagged measured position and halves the servo stiffness).
``effort`` with ``switch.method driver`` sends ``plag_driver`` a ``sensor_msgs/JointState``
(joints by name, ``effort`` [N*m], the stamp of the joint state it was computed from);
a disable hands back at once, and a driver fault is latched here and ends our commands.
``~/enable`` is refused while nothing subscribes to the command topic or the joints differ.
Nothing is published before the first valid joint state, nothing computed from one stamped
past the stale limit; a position jump that persists latches a fault."""
from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.executors import Executor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.task import Task
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from std_srvs.srv import SetBool
from trajectory_msgs.msg import JointTrajectory

from plag_ros.core.common.rejections import RejectionLog
from plag_ros.core.control.config import ImpedanceConfig
from plag_ros.core.control.impedance import Command, PartialImpedanceController
from plag_ros.core.control.settings import IMPEDANCE_OPTIONS, ImpedanceSettings, safety_parameters
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.arrays import ArrayLagrangian
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.core.estimation.plausibility import PlausibilityGate
from plag_ros.ros import messages as msgs
from plag_ros.ros.arm_handover import SHUTTING_DOWN, ArmHandover, check_names
from plag_ros.ros.controller_switch import sleep
from plag_ros.ros.nodes import spin_node
from plag_ros.ros.parameters import declare_options, option_values
from plag_ros.ros.qos import LATCHED, reliable
from plag_ros.ros.rclpy_compat import quiet_publisher
from plag_ros.ros.robot_description import StartModel

__all__ = ['NODE_NAME', 'ImpedanceNode', 'main']

NODE_NAME = 'plag_impedance'
_RELIABLE = reliable()


class ImpedanceNode(Node):
    """Joint states in; partial-impedance effort or position commands out.

    Args:
        **kwargs: passed to ``rclpy.node.Node`` (``parameter_overrides``, ``context``...).

    Raises:
        ValueError: inconsistent parameters (the message names them).
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        values = declare_options(self, IMPEDANCE_OPTIONS)
        try:
            self.settings = s = ImpedanceSettings.from_values(values)
            check_names(self, s)     # another namespace's names: another arm's
            self.urdf = StartModel(self, s.description)    # first: it spins the node
            self.model, identified = model_with_parameters(self.urdf.model, s.model.parameters)
            self._model_parameters = identified       # over the settings at every change
            config = self._controller_config(s)
            if identified is not None:
                self.get_logger().info(identified.summary())
            self.controller = PartialImpedanceController(
                ArrayLagrangian(self.model), config,
                s.reference_trajectory(int(self.model.actuated.sum())))
        except ValueError as err:
            raise ValueError(f'{self.get_name()}: {err}') from err
        for warning in self.controller.warnings:
            self.get_logger().warning(warning)
        self._reader, self._ref_reader = (msgs.JointStateReader(self.model) for _ in range(2))
        self._gate = PlausibilityGate(self.model, s.plausibility)
        self._act = np.flatnonzero(self.model.actuated)
        self._names = list(self.controller.joint_names)
        # joint_states effort is current * current_to_effort; torque = current * K_t.
        self._effort_to_torque = motors.driver_effort_to_torque(self.model)[self._act]
        self._reject = RejectionLog((), self.get_logger().warning,
                                    'joint_states rejected ({reason}): {detail}')
        self.rejected = self._reject.counts           # joint_states rejected, per reason
        self.commands = 0                             # commands published
        self.last_command: Command | None = None      # from the newest joint state
        self._last_state, self._last_state_ns, self._diagnostics_ns = ('', ''), 0, 0
        self.state_errors = 0                         # states that failed to publish
        self.add_on_set_parameters_callback(self._on_set_parameters)
        # Coroutine callbacks (enable, joint check) await service responses: they and the
        # clients share a reentrant group, or the node's default exclusive group deadlocks.
        self._async_group = ReentrantCallbackGroup()
        kind = self._kind = s.command_kind
        self._command_names = s.command_joints(self.model)
        self._command_idx = np.array([self._names.index(j) for j in self._command_names])
        self._stamped = s.stamped_effort
        self._pub_command = self.create_publisher(JointTrajectory if kind == 'trajectory' else
            JointState if self._stamped else Float64MultiArray, s.command_topic, _RELIABLE)
        self._layout = msgs.array_layout((len(self._command_names),), ['joint'])
        self.handover = ArmHandover(self, s, self._command_names, self._async_group,
                                    self.controller, self.urdf.report(self.model))
        self.own = self.handover.own
        self._release_task: Task | None = None   # the timer's hand-back, once scheduled
        # start_enabled with a switch: at the first valid state, as ~/enable (switch first)
        self._auto_enable = config.start_enabled and self.own.switch_method not in (None, 'none')
        if self._auto_enable:
            self.controller.reconfigure(config.replace(start_enabled=False))
        self._pub_compensation = self.create_publisher(JointState, '~/compensation', _RELIABLE)
        self._pub_torque = self.create_publisher(JointState, '~/torque', _RELIABLE)
        self._pub_state = self.create_publisher(String, '~/state', LATCHED)
        self._pub_diag = quiet_publisher(self, DiagnosticArray, '/diagnostics', _RELIABLE)
        self.create_subscription(JointState, 'joint_states', self.on_joint_state, _RELIABLE)
        self.create_subscription(JointState, '~/reference', self._on_reference, _RELIABLE)
        self.create_service(SetBool, '~/enable', self._on_enable,
                            callback_group=self._async_group)
        self.create_timer(1.0 / s.control.rate_hz, self._on_timer)
        paths = s.compensate.paths
        self.get_logger().info(
            f'{kind} commands on {self.resolve_topic_name(s.command_topic)} for '
            f'{self._command_names}; compensating acceleration {paths("acceleration")}, '
            f'velocity {paths("velocity")} ({s.control.motion_source} motion); '
            + ('enabled at the first joint state' if s.control.start_enabled else
               f'call {self.handover.enable} to start'))

    # ------------------------------------------------------------------ parameters
    def _on_set_parameters(self, parameters: Sequence[Parameter]) -> SetParametersResult:
        holds = self.controller.enabled or self.own.switched or self.own.switching
        guarded = holds and safety_parameters([p.name for p in parameters])
        if guarded:     # what guards the arm never changes under it
            return SetParametersResult(successful=False, reason=f'{", ".join(guarded)}: safety '
                                       'parameters change only while disabled')
        try:
            s = ImpedanceSettings.from_values(
                option_values(self, IMPEDANCE_OPTIONS, parameters))
            reference = s.reference_trajectory(len(self._names)) \
                if any(p.name.startswith('reference.') for p in parameters) else None
            self.controller.reconfigure(self._controller_config(s))
        except ValueError as err:
            return SetParametersResult(successful=False, reason=str(err))
        for warning in self.controller.warnings:
            self.get_logger().warning(warning)
        if reference is not None:
            self.controller.set_reference(reference)
        self.settings = s
        self.own.hold_s, self.own.input_loss_s = s.switch.hold_s, s.input_loss_s
        return SetParametersResult(successful=True)

    def _controller_config(self, s: ImpedanceSettings) -> ImpedanceConfig:
        """``s``'s controller configuration, the identified K_s and armature of
        ``model.parameters`` over the configured ones (at every change too)."""
        config, identified = s.controller_config(self.model), self._model_parameters
        return config if identified is None else \
            config.with_model_parameters(identified, self.model)

    # ------------------------------------------------------------------ inputs
    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def on_joint_state(self, msg: JointState) -> None:
        """The ``joint_states`` callback; sets :attr:`last_command`."""
        now = self._now_ns()
        if self.own.input_arrived(time.monotonic()):
            self._driver_back(now)
        try:
            t_ns, q, qd, effort = self._reader.read(
                msg, velocity=self.settings.filter.velocity_source == 'measured',
                effort=len(msg.effort) > 0)
            garbage = ''
        except msgs.JointStateError as err:
            self._reject(err.reason, str(err))
            if err.reason != 'nonfinite':
                return
            garbage = 'nonfinite'
        else:
            reanchors, garbage = self._gate.reanchors, self._gate.check(t_ns, q, qd) or ''
            if self._gate.reanchors > reanchors:     # a jump that persisted: no resuming
                self.controller.latch_fault('position_jump: the readings stayed at a new pose')
            if garbage:
                self._reject(garbage, f'sample stamped {t_ns} ns is beyond what the arm can do')
        ctl, stale = self.controller, self.controller.stale_samples
        if garbage:   # NaN/inf or impossible: the controller holds, its reason the cause
            command = self.last_command = ctl.hold_on_invalid(
                now, 'nan' if garbage == 'nonfinite' else f'implausible: {garbage}')
        else:         # (None for a stale sample while the command in force is fresh)
            command = self.last_command = ctl.update(
                now, q[self._act], None if qd is None else qd[self._act],
                stamp_ns=t_ns if self.settings.use_header_stamp else None,
                effort=None if effort is None else effort[self._act] * self._effort_to_torque)
            if ctl.stale_samples > stale:
                self._reject('stale_stamp', f'{(t_ns - now) * 1e-6:+.1f} ms from now: not used')
        if not self.own.commanding:
            self.controller.relatch_hold()   # the driver's controller holds the arm now
        self._publish(command, now)
        if self._auto_enable and command is not None and self.executor is not None:
            self._auto_enable = False
            self.executor.create_task(self._start_enabled)

    def _on_reference(self, msg: JointState) -> None:
        try:
            _, q, qd, _ = self._ref_reader.read(msg, velocity=len(msg.velocity) > 0)
            self.controller.set_reference(q=q[self._act], qd=None if qd is None else qd[self._act])
        except ValueError as err:   # the controller counts its own refusals, not the reader's
            self.controller.references['rejected'] += isinstance(err, msgs.JointStateError)
            self.get_logger().warning(f'{self.resolve_topic_name("~/reference")} rejected: {err}')

    # ------------------------------------------------------------------ taking the arm
    async def _on_enable(self, request: SetBool.Request, response: SetBool.Response, *,
                         quiet: bool = False):
        """``~/enable``; ``quiet``: no log lines (a caller that retries)."""
        log, prefix, enable = self.get_logger(), '', self.handover.enable
        if request.data and (not self.controller.enabled or self.own.driver_lost):
            waiting = self.controller.state == 'waiting'
            blocker = self.handover.blocker(self._pub_command.get_subscription_count(),
                                            self._pub_command.topic_name, waiting=waiting,
                                            fault=self.controller.fault,
                                            model=self.urdf.difference)
            ok, message = (False, blocker) if blocker else await self.handover.take()
            if not ok:
                response.success, response.message = False, message
                # a failed switch is an error, the rest not (one call site per severity:
                # rclpy raises at a site that logged another one before)
                if not quiet and not waiting and blocker:
                    log.warning(f'{enable} true: {message}')
                elif not quiet and not waiting:
                    log.error(f'{enable} true: {message}')
                return response
            prefix = f'{message}; ' if message else ''
        response.success, message = self.controller.set_enabled(bool(request.data),
                                                                self._now_ns())
        held = self.handover.taken_and_enabled() if request.data and response.success else ''
        if held:                    # latched: the hand-back follows (watch)
            response.success, message = False, f'{message}, but the driver holds ({held})'
        response.message = prefix + message
        if request.data and not response.success:
            self.own.schedule_release(time.monotonic())
        if not quiet:
            log.info(f'{enable} {request.data}: {response.message}')
        self._publish_state(None, self._now_ns(), force=True)
        return response

    async def _start_enabled(self) -> None:
        """``~/enable true``, tried every 0.1 s for ``switch.timeout_s``: at the first joint
        state the command subscription or the switch service may not be discovered yet.
        A driver outage ends the tries: the arm is not taken after it on its own."""
        timeout_s = self.settings.switch.timeout_s if self.handover.switch else 0.0
        deadline = time.monotonic() + timeout_s
        while True:
            response = await self._on_enable(SetBool.Request(data=True), SetBool.Response(),
                                             quiet=True)
            if response.success or self.controller.enabled or time.monotonic() >= deadline \
                    or self.handover.closing or self.own.driver_lost:   # (no re-take after)
                break
            await sleep(self, 0.1, self._async_group)
        if response.success or response.message == SHUTTING_DOWN:   # (not a give-up)
            self.get_logger().info(f'start_enabled: {response.message}')
        else:
            self.get_logger().error(f'start_enabled: {response.message} (gave up after '
                                    f'{timeout_s:g} s; {self.handover.enable} to try again)')

    def _on_timer(self) -> None:
        now, ctl = self._now_ns(), self.controller
        self._publish(ctl.tick(now), now)
        if self.handover.watch(ctl):
            if self.executor is None:    # timers only fire from an executor spinning the node
                raise RuntimeError(f'{self.get_name()}: timer fired without an executor')
            self._release_task = self.executor.create_task(self.handover.release, self.own.takes)

    def _driver_back(self, now: int) -> None:
        """joint_states is back after the driver was gone: disabled, switched back from
        scratch, the arm left to the driver's controller until ``~/enable``, whatever
        ``resume_after_fault`` says: a driver back from an outage (perhaps restarted)
        holds an arm whose pose and fault nobody has looked at."""
        self.controller.set_enabled(False, now)   # no command from the hold before it
        if self.executor is None:
            raise RuntimeError(f'{self.get_name()}: joint_states taken without an executor')
        self.executor.create_task(self._reacquire)

    async def _reacquire(self) -> None:
        """Switch back from scratch after a driver outage; the arm stays the driver's."""
        await self.handover.reset_after_outage()
        self.get_logger().warning('joint_states is back (the driver was gone): staying '
                                  f'disabled; {self.handover.enable} to take the arm again')

    # ------------------------------------------------------------------ outputs
    def _publish(self, command: Command | None, now: int) -> None:
        if command is not None and self.own.commanding:
            values = command.effort if command.effort is not None else command.position
            if values is None:
                raise RuntimeError('controller command carries neither effort nor position')
            values = values[self._command_idx]
            self._pub_command.publish(
                msgs.joint_trajectory(self._command_names, [self.settings.command.time_from_start],
                                      [values]) if self._kind == 'trajectory'
                # the stamp of the last sample used: holds after it age out at the driver
                else msgs.joint_state(self._command_names, effort=values,
                                      t_ns=self.controller.used_stamp_ns)
                if self._stamped
                else msgs.float64_multi_array(values, layout=self._layout))
            self.commands += 1
            self._pub_compensation.publish(msgs.joint_state(
                self._names, command.q_desired, self.controller.measured_q,
                command.compensation, t_ns=now))
            self._pub_torque.publish(msgs.joint_state(self._names, effort=command.torque,
                                                      t_ns=now))
        self._publish_state(command, now)

    def _publish_state(self, command: Command | None, now: int, *, force: bool = False) -> None:
        """``~/state`` on every change, on ``force`` and at ``state_rate_hz``; /diagnostics
        on every change and once a second; a failure logged and counted, never raised."""
        ctl = self.controller
        key = (ctl.state, ctl.fault)
        changed = force or key != self._last_state
        if not changed and now - self._last_state_ns < 1e9 / self.settings.state_rate_hz:
            return
        if key != self._last_state:
            self.get_logger().info(f'state {ctl.state}' + (f' ({ctl.fault})' if ctl.fault else ''))
        self._last_state, self._last_state_ns = key, now
        try:
            self._send_state(command, now, changed or now - self._diagnostics_ns >= 10**9)
        except Exception as err:  # noqa: BLE001 - a report must not stop the controller
            self.state_errors += 1
            self.get_logger().error(f'state not published: {err!r}', throttle_duration_sec=1)

    def _send_state(self, command: Command | None, now: int, diagnostics_due: bool) -> None:
        ctl = self.controller
        reason = ctl.fault or ('disabled' if not ctl.enabled else '')
        # ERROR: a latched fault; WARN: a hold that ends by itself when its cause is gone
        level = msgs.DiagnosticLevel.ERROR if ctl.latched else \
            msgs.DiagnosticLevel.WARN if ctl.state == 'fault' else msgs.DiagnosticLevel.OK
        text, diagnostics = msgs.node_state(self.get_fully_qualified_name(), {
            'state': ctl.state, 'reason': reason,
            'enabled': ctl.enabled, 'interface': ctl.config.command_interface,
            'command': self._kind, 'topic': self._pub_command.topic_name,
            'switched': self.own.switched, 'joint_check': self.handover.joint_check,
            'driver_lost': self.own.driver_lost,      # (forward path: nothing sent then)
            'driver_fault': self.handover.driver_state_fault,
            'driver_command_delay': self.handover.driver_command_delay,
            'delay_beyond_check': self.handover.delay_beyond_check(),
            'model': self.urdf.report(self.model),
            'alpha': None if command is None else command.alpha,
            'saturated': [] if command is None else
            [self._names[a] for a in np.flatnonzero(command.saturated)],
            'commands': self.commands, 'rejected': self.rejected,
            'estimator_rejected': ctl.estimator.rejected, 'estimator_resets': ctl.estimator.resets,
            'monitor_unjudged': ctl.monitor_unjudged, 'references': ctl.references},
            level, ctl.state + (f': {reason}' if reason else ''),
            hardware_id=self.model.name, t_ns=now)
        self._pub_state.publish(text)
        if diagnostics_due:
            self._pub_diag.publish(diagnostics)
            self._diagnostics_ns = now

    def shutdown_s(self) -> float:
        """The longest :meth:`shutdown` takes [s]."""
        return self.handover.shutdown_s()

    def shutdown(self, executor: Executor) -> None:
        """Hold, then switch the fallback controller back: :meth:`ArmHandover.shut_down`,
        the shutdown hook of :func:`~plag_ros.ros.nodes.spin_node`."""
        self.handover.shut_down(executor, self._publish, lambda: self._release_task)


def main(args: list[str] | None = None) -> None:
    """Console script ``impedance_node``: :class:`ImpedanceNode`, which hands back on exit."""
    spin_node(ImpedanceNode, args, shutdown=ImpedanceNode.shutdown,
              shutdown_s=ImpedanceNode.shutdown_s)


if __name__ == '__main__':
    main()
