"""Taking the arm from the driver's controller for ``plag_impedance``, and giving it back.

The impedance node commands the arm only while it holds it. On the forward path it
switches our controller in (:class:`~plag_ros.ros.controller_switch.ControllerSwitch`) and
back after a hold; on the trajectory path it starts and stops streaming to the driver's
own controller. Before the first enable it checks that ``command.joints`` match the target
controller's ``joints`` parameter (on the bus driver's current mode: the joints its
``~/state`` names). It follows the bus driver's ``~/state``: a fault the driver latches
while we hold the arm is latched as the controller's fault, nothing more is commanded and
the arm is given back at once (the driver already holds it). The bookkeeping (who holds
the arm, when to give it back, a driver taken as gone) is the ROS-free
:class:`~plag_ros.core.control.arm_ownership.ArmOwnership`; this module adds the service calls.
"""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import cast

from rcl_interfaces.srv import GetParameters
from rclpy.client import Client
from rclpy.executors import Executor
from rclpy.node import Node
from rclpy.task import Task
from std_msgs.msg import String

from plag_ros.core.control.arm_ownership import ArmOwnership, driver_joint_check
from plag_ros.core.control.impedance import Command, PartialImpedanceController
from plag_ros.core.control.settings import (
    SHUTDOWN_HOLD_MAX_S,
    TRAJECTORY_CONTROLLER,
    ImpedanceSettings,
    check_own_namespace,
)
from plag_ros.core.control.stability import MIN_GAIN_MARGIN
from plag_ros.ros.controller_file import ControllerFileError, differences, read_controller_file
from plag_ros.ros.controller_switch import (
    ControllerSwitch,
    manager_option,
    read_parameters,
    spin_while,
)
from plag_ros.ros.qos import LATCHED

__all__ = ['CONFIRM_MIN_S', 'DELAY_MAX_PERIODS', 'DELAY_MIN_COUNT', 'JOINT_CHECK_TRIES',
           'MISSED_COMMANDS_SHARE', 'RELEASE_RETRY_S', 'SHUTTING_DOWN', 'SWITCH_BACK_S',
           'ArmHandover', 'check_names']

DELAY_MIN_COUNT = 200
"""Current-mode writes the driver's ``command_delay`` must span (1 s at 200 Hz) before the
node judges it against the delay its gains were checked at."""

DELAY_MAX_PERIODS = 50.0
"""A measured delay beyond this many periods refuses an enable without a check (the
driver's stale limit ends commands far sooner; the check's matrices grow with it)."""

MISSED_COMMANDS_SHARE = 0.01
"""A share of the driver's writes that repeat a command beyond this is commands that came
late or not at all: said, with a period of delay more to set (not refused on its own)."""

JOINT_CHECK_TRIES = 30
"""Attempts, one a second, to read the target controller's ``joints`` parameter."""

RELEASE_RETRY_S = 1.0
"""A hand-back that failed is tried again this much later [s]."""

SWITCH_BACK_S = 3.0
"""On shutdown, the longest wait [s] for an enable's switch under way, and again for the
hand-back."""

SHUTTING_DOWN = 'the node is shutting down'
"""Why an enable is refused once :meth:`ArmHandover.shut_down` began."""

CONFIRM_MIN_S = 1.0
"""The least time the bus driver's state has to show our controller after a take [s]
(``switch.timeout_s`` where longer): it republishes once a second."""


def check_names(node: Node, settings: ImpedanceSettings) -> None:
    """Refuse settings whose switch target, command topic or target controller resolves
    (remaps applied) outside ``node``'s namespace: under /arm1 an absolute
    /controller_manager would switch another arm while /arm1 is commanded.

    Raises:
        ValueError: naming each such parameter (settings.check_own_namespace).
    """
    check_own_namespace(node.get_namespace(), {
        key: node.resolve_service_name(name) if service else node.resolve_topic_name(name)
        for key, (name, service) in settings.ros_names().items()})


def _delay_entry(value: object) -> dict:
    """The driver's ``command_delay`` entry, kept only where every figure is a number in
    range (a foreign publisher's anything else is dropped, not judged);
    ``repeated_share`` 0 where the driver does not report it."""
    if not isinstance(value, dict):
        return {}
    figures = {key: value.get(key) for key in ('p50_ms', 'p99_ms', 'max_ms', 'count')}
    figures['repeated_share'] = value.get('repeated_share', 0.0)
    # the range first: a 400-digit integer makes isfinite raise, a NaN fails both
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < 1e9
               for x in figures.values()):
        return {}
    return figures


class ArmHandover:
    """The switch, the joint check and the ownership state of one impedance node.

    Args:
        node: the node; it owns the clients and the joint check timer.
        settings: the node's settings (command path, switch, hold and loss times).
        command_names: ``command.joints``, validated.
        callback_group: a reentrant group for the service clients and the coroutine timer.
        ctl: the node's controller (latches the bus driver's faults).
        model: the node's model as ``~/state`` reports it (``source``, ``digest``): on the
            bus driver, an enable needs the driver's model to have the same digest.

    Attributes:
        own: who holds the arm (read by the node for every command).
        switch: the controller switch of the forward path, else None.
        joint_check: ``'unchecked'``, ``'ok'`` or the mismatch.
    """

    def __init__(self, node: Node, settings: ImpedanceSettings, command_names: list[str],
                 callback_group, ctl: PartialImpedanceController, model: dict) -> None:
        self.node, self.kind, self.command_names = node, settings.command_kind, command_names
        self.enable = node.resolve_service_name('~/enable')   # its full name, for hints
        self.model = model      # ~/state's model entry: the driver's must have its digest
        self.ctl = ctl
        self.controller = settings.target_controller
        self.switch: ControllerSwitch | None = None
        sw = settings.switch
        # the forward path always switches; the effort path only on the bus driver, whose
        # current mode it switches to (elsewhere efforts need no switch: the simulator)
        if self.kind == 'forward' or (self.kind == 'effort' and sw.method == 'driver'):
            self.switch = ControllerSwitch(
                node, sw.method, controller=self.controller, fallback=sw.fallback,
                manager=sw.controller_manager, sim_node=sw.sim_node,
                driver_node=sw.driver_node, timeout_s=sw.timeout_s,
                callback_group=callback_group)
            if self.switch.error:
                # Not an error until someone enables: ~/enable then refuses with this reason.
                node.get_logger().warning(self.switch.error)
        self.own = ArmOwnership(self.kind, settings.switch.method if self.switch else None,
                                settings.switch.hold_s, settings.input_loss_s,
                                last_input=time.monotonic(),
                                confirm_s=max(sw.timeout_s, CONFIRM_MIN_S))
        self.joint_check = 'unchecked'
        self._file = None
        if self.kind == 'forward' and settings.command.controller_file:
            try:
                self._file = read_controller_file(settings.command.controller_file,
                                                  self.controller, node.get_namespace())
            except ControllerFileError as err:
                self.joint_check = f'{err} (command.controller_file)'
                node.get_logger().error(self.joint_check)
        self._tries = 0
        # relative: the controller's node is in its controller manager's namespace, ours
        # (controller_manager.cpp humble:1427); its full name for messages
        joints_service = f'{self.controller}/get_parameters'
        self.controller_node = node.resolve_service_name(self.controller)
        self._joints_client: Client | None = None if self.kind == 'effort' else node.create_client(
            GetParameters, joints_service, callback_group=callback_group)
        # rclpy's annotation (Kilted's) admits only plain callbacks, but every executor
        # awaits coroutine timer callbacks (rclpy/executors.py, await_or_execute).
        self._timer = node.create_timer(1.0, cast('Callable[[], None]', self._check_joints),
                                        callback_group=callback_group)
        # (its full name, for messages)
        self.driver_node = node.resolve_topic_name(sw.driver_node.rstrip('/')) \
            if self.own.switch_method == 'driver' else None
        self.driver_heard = False
        self.driver_state_fault = ''    # the driver's fault as it reports it now
        self.driver_model: dict = {}    # the driver's model entry as it reports it now
        # the driver's measured delay from a reading to the current written from it
        self.driver_command_delay: dict = {}
        # the newest driver state heard during the switch of a take that shows our
        # controller (as a rule sent after the switch reached the driver): judged once the
        # enable is done: its (fault, current)
        self._heard_in_switch: tuple[str, bool | None] | None = None
        self._taking = False
        self.maybe_ours = False
        """A take and its switch back both went unanswered: the arm may be on our controller
        though not taken (the shutdown then logs the command that gives it back)."""
        self.closing = False
        """The node is shutting down (:meth:`shut_down`): nothing takes the arm or enables."""
        self._checked_joints: list[str] | None = None   # the driver's joints last checked
        if self.driver_node is not None:
            node.create_subscription(String, f'{sw.driver_node.rstrip("/")}/state',
                                     self._on_driver_state, LATCHED)

    @property
    def log(self):
        return self.node.get_logger()

    async def _check_joints(self) -> None:
        """Compare command.joints with the controller's ``joints`` parameter, and its
        parameters with ``command.controller_file`` where given (once)."""
        self._tries += 1
        done = self._joints_client is None or self.joint_check != 'unchecked'
        if done or self._tries > JOINT_CHECK_TRIES:
            self._timer.cancel()
            if not done:
                self.log.warning(f'could not read {self.controller_node} joints parameter in '
                                 f'{JOINT_CHECK_TRIES} s; joint list not checked')
            return
        # (one request: a node that lacks any of the names answers none of them; the JTC
        # has no interface_name)
        names = ['joints', 'interface_name'] if self._file is not None else ['joints']
        loaded = await read_parameters(self.node, self._joints_client, names, 2.0)
        if loaded is None or not isinstance(loaded['joints'], list) \
                or self.joint_check != 'unchecked':
            return
        self._timer.cancel()
        joints, wanted, forward = loaded['joints'], self.command_names, self.kind == 'forward'
        file = self._file
        stale = differences(file, loaded) if file is not None else []
        if file is not None and stale:
            # The spawner skips a controller that is already loaded: the file never reached
            # the running one (ros2_control spawner.py, "Controller already loaded").
            self.joint_check = (
                f'{self.controller_node} runs with other parameters than {file.path}: '
                f'{"; ".join(stale)}. It was loaded before, and the spawner does not load an '
                f'already loaded controller again: switch it off, `ros2 control '
                f'unload_controller {self.controller}{self._manager_option()}`, then launch '
                'again')
            self.log.error(self.joint_check)
        elif joints == wanted if forward else sorted(joints) == sorted(wanted):
            self.joint_check = 'ok'
            self.log.info(f'{self.controller_node} joints match command.joints' +
                          (f' and {file.path}' if file is not None else ''))
        else:
            self.joint_check = (f'command.joints {wanted} do not match {self.controller_node} '
                                f'joints {joints}' + (' (forward commands go index by index: '
                                                      'same order)' if forward else ''))
            self.log.error(self.joint_check)

    def _manager_option(self) -> str:
        """`` -c <controller manager>`` for a hint's ``ros2 control`` line where the
        controller manager is not the root one: ``switch.controller_manager``, also where
        the user switches by hand (``none``: it is a real one all the same)."""
        switch = self.switch
        return manager_option(switch.manager) if switch is not None and \
            switch.method in ('controller_manager', 'none') and \
            switch.manager.startswith('/') else ''

    def _on_driver_state(self, msg: String) -> None:
        """The bus driver's ``~/state``: its joints against ``command.joints`` (effort path,
        once), and whether it holds the arm itself while we hold it
        (:meth:`ArmOwnership.driver_reported`): then the controller latches that as its fault."""
        try:
            state = json.loads(msg.data)
            fault, modes = str(state['fault']), dict(state['modes'])
            active = str(state['active_arm_controller'])
            model = dict(state.get('model') or {})
        except (ValueError, KeyError, TypeError) as err:
            self.log.warning(f'{self.driver_node}/state unreadable: {err!r}',
                             throttle_duration_sec=1.0)
            return
        self.driver_heard, self.driver_state_fault, self.driver_model = True, fault, model
        effort = self.kind == 'effort'
        joints = list(modes)
        if effort and joints != self._checked_joints:
            # checked again whenever the joints change (a driver restarted with another chain)
            self._checked_joints = joints
            self.joint_check = driver_joint_check(self.command_names, joints)
            # (one call site per severity: rclpy refuses another one at a site it has seen)
            if self.joint_check == 'ok':
                self.log.info(f'{self.driver_node}: {self.joint_check}')
            else:
                self.log.error(f'{self.driver_node}: {self.joint_check}')
        current = all(modes.get(j) == 'current' for j in self.command_names) if effort \
            else None   # (command.joints are arm joints: driver_joint_check)
        ours = active == self.controller
        if self._taking and ours:
            self._heard_in_switch = (fault, current)
        self._judge(fault, ours, current)
        self.driver_command_delay = _delay_entry(state.get('command_delay'))
        beyond = self.delay_beyond_check()
        if beyond:
            self.log.warning(beyond, throttle_duration_sec=10.0)

    def _judge(self, fault: str, ours: bool, current: bool | None) -> str:
        """Latch the driver's hold as the controller's fault where the driver's state
        (its ``fault``, whether the active controller is ``ours``, whether the arm is in
        ``current`` mode) says it holds the arm itself (:meth:`ArmOwnership.driver_reported`).
        Returns the reason ('' when it does not)."""
        reason = self.own.driver_reported(fault, ours=ours, current=current,
                                          model=self.model_mismatch(), now=time.monotonic())
        if reason:
            self.ctl.latch_fault(f'driver fault: {reason}')
            self.log.error(
                f'{self.driver_node} holds the arm itself ({reason}); nothing more is '
                f'commanded and the arm is handed back. To go on: {self.enable} false, '
                f'{self.driver_node}/clear_fault if it latched a fault, {self.enable} true')
        return reason

    def delay_beyond_check(self) -> str:
        """Why the delay the driver measures is longer than the one the gain check verified
        the gains at ('' when it is not, on the position path, or before the driver has
        measured :data:`DELAY_MIN_COUNT` writes): the 99th percentile of its
        ``command_delay`` against ``delay_periods`` periods."""
        measured = self.driver_command_delay
        p99 = measured.get('p99_ms', math.nan)
        config = self.ctl.config
        assumed_ms = config.delay_periods / config.rate_hz * 1e3
        if self.kind != 'effort' or measured.get('count', 0) < DELAY_MIN_COUNT:
            return ''
        missed = measured['repeated_share'] > MISSED_COMMANDS_SHARE
        if not (p99 > assumed_ms or missed):
            return ''
        what = (f'a command delay of {p99:.1f} ms at p99' if p99 > assumed_ms else
                f'{measured["repeated_share"]:.1%} of its writes repeating a command (one '
                'that did not come in time: a period of delay more each)')
        return (f'{self.driver_node} measures {what}, beyond the {assumed_ms:.1f} ms the '
                f'gain check verified the gains at (delay_periods {config.delay_periods:g} '
                f'at {config.rate_hz:g} Hz): set delay_periods to '
                f'{math.ceil(max(p99, assumed_ms) * config.rate_hz / 1e2) / 10 + missed:g} or '
                'more while disabled (the check then says whether the gains still pass)')

    def _delay_refusal(self, beyond: str) -> str:
        """An enable's refusal where the gains fail the check at the measured delay's p99
        ('' where they pass there). Missed commands are only said: a late command shows
        as one of them too (the one before it written again), and its lateness is in the
        p99 already."""
        config = self.ctl.config
        periods = self.driver_command_delay['p99_ms'] * config.rate_hz / 1e3
        if periods > DELAY_MAX_PERIODS:      # beyond what a driver's stale limit lets by
            return f'{beyond}; {periods:.0f} periods is beyond any verified gains (refused)'
        try:
            margin = self.ctl.smallest_margin(periods)
        except Exception as err:  # noqa: BLE001 - an enable must be answered
            return f'{beyond}; the check at that delay failed: {err!r} (refused)'
        if margin < MIN_GAIN_MARGIN:
            return (f'{beyond}; at that delay the gains have a gain margin of {margin:.2f} '
                    f'(< {MIN_GAIN_MARGIN:g}) (refused)')
        return ''

    def model_mismatch(self) -> str:
        """How the bus driver's model, as its last ``~/state`` reports it, differs from
        this node's ('' when the digests agree, or without a bus driver): its gravity
        torque at the switch and in the hold would not be the law's."""
        theirs = self.driver_model.get('digest')
        if self.driver_node is None or theirs == self.model['digest']:
            return ''
        return (f"{self.driver_node}'s model ({self.driver_model.get('source')}, digest "
                f"{theirs}) is not this node's ({self.model['source']}, digest "
                f"{self.model['digest']}): give both the same robot_description_source, "
                'urdf_path and model.parameters')

    def blocker(self, subscribers: int, topic: str, *, waiting: bool = False,
                fault: str = '', model: str = '') -> str:
        """Why an enable must be refused now ('' when it may go ahead), given the number of
        ``subscribers`` to the command ``topic``, whether the controller is still
        ``waiting`` for its first valid joint state, its ``fault`` and how the robot's
        ``robot_description`` differs from the node's ``model`` ('' where it does not).
        Checked before any switch: a driver put in current mode for a controller that
        cannot run yet gets its hold torque, from a set point that may not be where the
        arm is. During a driver outage the controller may still be enabled (holding): an
        enable then is refused too, not answered 'already enabled'."""
        if self.own.driver_lost:
            return (f'no joint_states for over {self.own.input_loss_s:g} s: the driver is '
                    'taken as gone; enable once it is back (refused)')
        if subscribers == 0:
            return (f'nothing subscribes to {topic}: is the controller loaded and the driver '
                    'running? (refused)')
        if self.joint_check not in ('ok', 'unchecked'):
            return f'{self.joint_check} (refused)'
        if self.driver_node is not None and not self.driver_heard:
            return f'no {self.driver_node}/state yet: is the driver running? (refused)'
        mismatch = self.model_mismatch()
        if mismatch:
            return f'{mismatch} (refused)'
        beyond = self.delay_beyond_check()
        refused = self._delay_refusal(beyond) if beyond else ''
        if refused and self.driver_state_fault:
            # both said: the fault is the first thing to clear (the driver would refuse
            # the switch for it), the delay the one that still refuses after the clear
            return (f'{self.driver_node} holds the arm for its fault '
                    f'({self.driver_state_fault}): clear it first with '
                    f'{self.driver_node}/clear_fault; and {refused}')
        if refused:
            return refused
        if model:
            return f'{model} (refused)'
        if self.own.switching:
            return 'a controller switch is under way (refused)'
        if waiting:
            return 'no valid joint state yet'
        if fault:
            return (f'the controller is not ready ({fault}): fresh joint states clear it, a '
                    f'latched fault needs {self.enable} false (refused)')
        return ''

    async def _call(self, release: bool) -> tuple[bool, str]:
        if self.switch is None:
            raise RuntimeError('no controller switch on this command path')
        self.own.switching = True
        try:
            ok, message = await (self.switch.release() if release else self.switch.activate())
        finally:
            self.own.switching = False
        self.maybe_ours = self.maybe_ours and not (release and ok)
        return ok, message

    async def take(self) -> tuple[bool, str]:
        """Take the arm for an enable: switch in where needed. Returns (ok, message);
        refused once the node is :attr:`closing` (a switch it answers then makes the arm
        ours for :meth:`shut_down` to give back)."""
        if self.closing:
            return False, SHUTTING_DOWN
        message = ''
        self._heard_in_switch = None
        if self.switch is not None and self.own.needs_switch():
            self._taking = True
            try:
                ok, message = await self._call(release=False)
            finally:
                self._taking = False
            if not ok and self.switch.unanswered:
                # It may have switched all the same (the bus driver then gives current mode
                # the model's gravity until its stale fault, and refuses the JTC's commands
                # for good): switch back, which is harmless where nothing switched.
                back_ok, back = await self._call(release=True)
                self.maybe_ours = not back_ok and self.switch.unanswered   # (refused: not ours)
                message += ('; switched back in case it had switched: ' if back_ok else
                            '; the switch back, in case it had switched, failed too: ') + back
            if not ok:
                return False, message
        self.own.taken(time.monotonic())
        self.maybe_ours = False
        return (False, SHUTTING_DOWN) if self.closing else (True, message)

    def taken_and_enabled(self) -> str:
        """After a take and the controller's enable: judge the driver's newest state
        that showed our controller during the switch (:meth:`ArmOwnership.driver_reported`
        ignores messages while a switch is under way), so that a fault in it is latched
        now, not at the driver's next republish a second later. Returns why the driver
        holds the arm itself ('' when it does not): the enable then did not take it."""
        heard, self._heard_in_switch = self._heard_in_switch, None
        return self._judge(heard[0], True, heard[1]) if heard is not None else ''

    async def release(self, takes: int | None = None) -> None:
        """Give the arm back after the hold (switch the fallback controller back in);
        ``takes``: the :attr:`ArmOwnership.takes` it was due at (an enable since voids it)."""
        own = self.own
        if takes is not None and takes != own.takes:
            return
        if self.kind == 'trajectory' and own.switched:
            own.switched = False
            self.log.info(f'stopped streaming; {TRAJECTORY_CONTROLLER} holds the last point')
            return
        if self.switch is None or not own.switched or own.switching:
            return
        ok, message = await self._call(release=True)
        if ok:
            own.switched = False
            self.log.info(message)
        else:
            own.release_at = time.monotonic() + RELEASE_RETRY_S   # not every timer tick
            again = '' if self.closing else f' (again in {RELEASE_RETRY_S:g} s)'
            self.log.error(f'{message}; our controller keeps holding the arm{again}')

    async def reset_after_outage(self) -> None:
        """Back to the fallback after a driver outage, whatever state it left: the release
        fails harmlessly when a restarted driver never had our switch (refused: logged as
        information). Tried once: a release that goes unanswered (a driver that ran on
        behind a stalled path) is an error, with the command that switches back by hand
        in its message; our controller may then still hold its last command, and the
        next enable switches from scratch."""
        if self.switch is not None:
            ok, message = await self._call(release=True)
            if ok or not self.switch.unanswered:
                self.log.info(f'after the driver outage: {message}')
            else:
                self.log.error(f'after the driver outage: {message}; our controller may '
                               'still hold its last command')

    def watch(self, ctl: PartialImpedanceController) -> bool:
        """The timer's part: notice a silent driver, schedule the hand-back after a
        disable or a latched fault of ``ctl`` (not once :attr:`closing`). True when the
        hand-back is due now."""
        if self.closing:    # the shutdown hook gives the arm back itself, once
            return False
        own, now = self.own, time.monotonic()
        if own.input_lost(now):
            # (A SIGKILLed driver keeps its DDS publisher for the lease duration: the
            # outage, not the graph, says it is gone.)
            doing = {'forward': 'sending nothing more (the servos hold our last command)',
                     'trajectory': 'sending nothing more (the trajectory controller holds '
                                   'our last point)'}.get(self.kind, 'holding')
            back = 'switch back and ' if self.switch is not None else ''
            self.log.warning(
                f'no joint_states for {own.input_loss_s:g} s: taking the driver as gone; '
                f'{doing}. When joint_states returns we {back}stay disabled until '
                f'{self.enable}')
        if own.switched and (not ctl.enabled or ctl.state == 'fault' and ctl.latched):
            own.schedule_release(now)
        # (not while a switch is under way: its task would find nothing to do)
        return not own.switching and own.release_due(now) and (not ctl.enabled or ctl.latched)

    def abandoned(self) -> bool:
        """At shutdown: True when there is nothing to give back (the arm is not ours and no
        switch is under way), or no context to do it with (the command that gives the arm
        back by hand is then logged, as it is after a take whose switch back went
        unanswered: :attr:`maybe_ours`)."""
        if not (self.own.switched or self.own.switching):
            if self.maybe_ours:
                self.not_handed_back('an enable switch and its switch back went unanswered; '
                                     'the arm may still be on our controller', anyway=True)
            return True
        if self.node.context.ok():
            return False
        self.not_handed_back('context gone before switching back')
        return True

    def not_handed_back(self, why: str, *, anyway: bool = False) -> None:
        """While the arm may be ours (or ``anyway``): log ``why`` and the command that gives
        it back."""
        if (self.own.switched or self.own.switching or anyway) and self.switch is not None:
            back = self.switch.by_hand(self.switch.fallback, self.switch.controller)
            self.log.error(f'{why}: run `{back}`')

    def shutdown_s(self) -> float:
        """The longest :meth:`shut_down` takes [s]."""
        return SHUTDOWN_HOLD_MAX_S + SWITCH_BACK_S + 1.5

    def shut_down(self, executor: Executor, publish: Callable[[Command | None, int], None],
                  pending: Callable[[], Task | None]) -> None:
        """The node's exit (a signal, an external shutdown, a callback's exception), with
        ``executor`` spinning the node. From here on nothing enables (:attr:`closing`: a
        take is refused, and one under way that succeeds only makes the arm ours to give
        back). An enable's switch under way may end first; the controller is disabled and
        its hold sent with ``publish(command, now_ns)`` for ``switch.hold_s`` (at most
        ``SHUTDOWN_HOLD_MAX_S``); then the fallback controller is switched back, after
        ``pending()`` (the timer's hand-back, which :meth:`release` would skip) is answered
        and logged. An enable's switch still unanswered then may yet be carried out: the
        switch back is sent all the same, behind it on the same service. The waits share
        ``SWITCH_BACK_S`` (the hand-back has 1 s at least): all of it within
        :meth:`shutdown_s`. A hand-back not done by then is logged with the command that
        does it by hand, as is a hand-back that an exception here cut short."""
        self.closing = True
        try:
            self._hand_back(executor, publish, pending)
        except BaseException:
            self.not_handed_back('the shutdown failed before it handed the arm back')
            raise

    def _hand_back(self, executor: Executor, publish: Callable[[Command | None, int], None],
                   pending: Callable[[], Task | None]) -> None:
        """:meth:`shut_down`'s waits, hold and hand-back."""
        if self.abandoned():
            return
        own, start = self.own, time.monotonic()
        spin_while(executor, lambda: own.switching, start + SWITCH_BACK_S)
        now = self.node.get_clock().now().nanoseconds
        self.ctl.set_enabled(False, now)
        publish(self.ctl.hold(now), now)
        hold_s = min(own.hold_time, SHUTDOWN_HOLD_MAX_S)
        spin_while(executor, lambda: True, time.monotonic() + hold_s)
        deadline = max(start + hold_s + SWITCH_BACK_S, time.monotonic() + 1.0)
        timers = pending()      # made during the hold, maybe
        spin_while(executor, lambda: (timers is not None and not timers.done()) or
                   (own.switching and not self._taking), deadline)
        unanswered = own.switching and self._taking and self.switch is not None
        task = executor.create_task(self._switch_back if unanswered else self.release)
        spin_while(executor, lambda: not task.done(), max(deadline, time.monotonic() + 0.1))
        if unanswered and task.done() and task.exception() is None and task.result():
            return
        if own.switched or own.switching:   # (unanswered, or take()'s own switch back)
            self.not_handed_back(f'not switched back {SWITCH_BACK_S:g} s after the hold')

    async def _switch_back(self) -> bool:
        """Switch the fallback back in without waiting for the switch under way (an
        enable's, unanswered: it may yet be carried out, and this request comes after it).
        Whether it was done."""
        assert self.switch is not None
        ok, message = await self.switch.release()
        if ok:
            # (answered after the enable's switch, which the service carried out first:
            # take() has marked the arm ours by now)
            self.own.switched = self.maybe_ours = False
            self.log.warning(f'an enable switch went unanswered at shutdown; {message}')
        return ok
