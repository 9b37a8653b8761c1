"""Switching the CRANE-X7 arm between the driver's trajectory controller and ours.

The official bring-up (rt-net/crane_x7_ros ``crane_x7_control/launch/crane_x7_control.launch.py``)
activates ``crane_x7_arm_controller`` (a JointTrajectoryController) on the 7 arm joints. The
controller manager refuses a second active controller claiming the same position command
interfaces, so streaming to our ``plag_arm_position_controller`` (a
``forward_command_controller/ForwardCommandController`` on the position interface,
config/crane_x7_controllers.yaml)
needs ``controller_manager/switch_controller`` (controller_manager_msgs/srv/SwitchController:
``activate_controllers``, ``deactivate_controllers``, ``strictness`` STRICT = 2,
``activate_asap``, ``timeout``; ros-controls/ros2_control controller_manager_msgs). When the
JTC is activated again it starts from the last value of the command interfaces
(ros2_controllers joint_trajectory_controller parameter
``set_last_command_interface_value_as_state_on_activation``, default true), so switching back
after our hold does not move the arm.

Three targets:

* ``controller_manager``: the real service. controller_manager_msgs has no PyPI wheel, so it
  is imported only here and only when used; without it the switch fails with a message that
  names the ``ros2 control switch_controllers`` command to run by hand.
* ``sim``: the simulator's emulated controller manager, the ``active_arm_controller``
  parameter of ``plag_sim`` set through rcl_interfaces/srv/SetParameters. It exercises the
  same switch logic end to end over DDS; it is not the controller manager.
* ``driver``: our bus driver ``plag_driver``'s ``active_arm_controller`` parameter, the same
  request as ``sim``; naming ``plag_arm_effort_controller`` there puts the arm's servos in
  current mode (:mod:`plag_ros.ros.nodes.driver_node`).
* ``none``: no switch (the user switched by hand).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import cast

from rcl_interfaces.msg import Parameter as ParameterMsg
from rcl_interfaces.msg import ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.client import Client
from rclpy.executors import Executor
from rclpy.node import Node
from rclpy.task import Future

from plag_ros.core.control.settings import SWITCH_METHODS
from plag_ros.ros.emulated_controller_manager import STRICT

__all__ = ['METHODS', 'STRICT', 'ControllerSwitch', 'call', 'read_parameters', 'sleep',
           'by_hand_command', 'manager_option', 'switch_command', 'switch_request_fields']

METHODS = SWITCH_METHODS     # the switch.method values, defined with the parameter


def switch_command(activate: str, deactivate: str, manager: str = '/controller_manager'
                   ) -> str:
    """The ``ros2 control`` command line doing the same switch by hand.

    ``switch_controllers`` takes ``--activate`` / ``--deactivate`` (and ``--strict``) on
    Humble and later (ros2controlcli; Humble also still accepts the deprecated
    ``--start`` / ``--stop``). ``manager`` is the controller manager's full name (a
    namespaced node's ``/arm1/controller_manager``): given with ``-c`` unless it is the
    root one, so that a hint copied from a namespaced arm's log switches that arm only.
    """
    return (f'ros2 control switch_controllers --deactivate {deactivate} --activate {activate} '
            f'--strict{manager_option(manager)}')


def by_hand_command(method: str, activate: str, deactivate: str, switcher: str) -> str:
    """The command line that makes the switch ``deactivate -> activate`` by hand, for
    ``switch.method`` ``method``; '' for ``none`` (nothing of ours switches).

    ``switcher`` is the full name of what switches, the one an operator in another
    namespace must type: the controller manager (``controller_manager``:
    :func:`switch_command`), else the node whose ``active_arm_controller`` parameter picks
    the arm's controller (``sim``: the simulator, ``driver``: the bus driver; no controller
    manager runs there, so ``ros2 control`` would reach none or another arm's).
    """
    if method == 'controller_manager':
        return switch_command(activate, deactivate, switcher)
    if method in ('sim', 'driver'):
        return f'ros2 param set {switcher} active_arm_controller {activate}'
    return ''


def manager_option(manager: str) -> str:
    """`` -c <manager>`` for a ``ros2 control`` command line, '' for the root
    ``/controller_manager`` (ros2controlcli's default)."""
    return '' if manager == '/controller_manager' else f' -c {manager}'


def switch_request_fields(activate: str, deactivate: str, timeout_s: float) -> dict[str, object]:
    """The SwitchController request, field by field: one STRICT switch, at once.

    Only fields present on Humble, Jazzy and Kilted alike (Humble also has the deprecated
    ``start_controllers``/``stop_controllers``/``start_asap``, which are left at their
    defaults; test/data/ros2_control_upstream.yaml records each release's definition).
    ``timeout`` is a builtin_interfaces/Duration given as ``(sec, nanosec)``.
    """
    return {'activate_controllers': [activate], 'deactivate_controllers': [deactivate],
            'strictness': STRICT, 'activate_asap': True,
            'timeout': (int(timeout_s), int(round(timeout_s % 1.0 * 1e9)))}


async def sleep(node: Node, seconds: float, callback_group=None) -> None:
    """Wait ``seconds`` inside an rclpy coroutine callback without blocking the executor
    (a one-shot timer completes a future). ``callback_group`` must not be the awaiting
    callback's if that group is mutually exclusive (see :func:`call`)."""
    done: Future = Future()
    timer = node.create_timer(seconds, lambda: done.set_result(None) if not done.done() else None,
                              callback_group=callback_group)
    try:
        await done
    finally:
        node.destroy_timer(timer)


def spin_while(executor: Executor, busy: Callable[[], object], until: float) -> None:
    """Spin ``executor`` in steps of 10 ms while ``busy()``, up to ``time.monotonic()``
    ``until`` and while its context is up: a shutdown's bounded wait for callbacks. A
    callback that raises is logged (once) and the wait goes on: a failing joint-state
    callback must not stop the hand-back."""
    failed = False
    while busy() and time.monotonic() < until and executor.context.ok():
        try:
            executor.spin_once(timeout_sec=0.01)
        except Exception as err:  # noqa: BLE001 - the wait outlives a broken callback
            if not failed:
                failed = True
                for node in executor.get_nodes()[:1]:
                    node.get_logger().error(f'a callback failed during shutdown: {err!r}')


async def call(node: Node, client, request, timeout_s: float):
    """Await ``client``'s response to ``request``, None after ``timeout_s`` or when the
    service is not there (inside an rclpy coroutine callback).

    The awaiting callback, ``client`` and this timer must not share a mutually exclusive
    callback group: the awaiting callback holds it until it returns, so the response could
    never be taken (use one :class:`rclpy.callback_groups.ReentrantCallbackGroup`).
    """
    deadline = time.monotonic() + timeout_s
    if not client.service_is_ready():
        return None   # never block the executor waiting for discovery: callers retry
    future = client.call_async(request)
    timer = node.create_timer(max(deadline - time.monotonic(), 0.01), future.cancel,
                              callback_group=client.callback_group)
    try:
        result = await future
    finally:
        node.destroy_timer(timer)
    if future.cancelled():
        client.remove_pending_request(future)
        return None
    return result


class ControllerSwitch:
    """Activate ``controller`` in place of ``fallback`` and back.

    Args:
        node: the node that owns the service clients.
        method: one of :data:`METHODS`.
        controller: our controller's name.
        fallback: the controller it replaces (the driver's JTC).
        manager: controller manager node (``controller_manager`` method); a relative name
            is in ``node``'s namespace.
        sim_node: simulator node (``sim`` method).
        driver_node: bus driver node (``driver`` method).
        timeout_s: deadline of one switch [s].
        callback_group: of the service client; reentrant (see :func:`call`).
    """

    def __init__(self, node: Node, method: str, *, controller: str, fallback: str,
                 manager: str = 'controller_manager', sim_node: str = 'plag_sim',
                 driver_node: str = 'plag_driver', timeout_s: float = 5.0,
                 callback_group=None) -> None:
        if method not in METHODS:
            raise ValueError(f'switch.method must be one of {METHODS}, got {method!r}')
        self.node, self.method = node, method
        self.controller, self.fallback = controller, fallback
        # the full name, as a user must type it in a command line (-c): relative in the
        # node's namespace (rcl expands every client's name so). Kept as given where rcl
        # refuses it (RCLError, a RuntimeError) and the method never calls it: an empty or
        # odd value left in a file must not stop a node switching through the simulator.
        try:
            self.manager = node.resolve_service_name(manager.rstrip('/'))
        except RuntimeError:
            if method == 'controller_manager':
                raise
            self.manager = manager
        self.timeout_s = timeout_s
        self.error = ''
        # The last switch's request went out and got no answer in time: it may have been
        # carried out all the same (the caller switches back to be sure).
        self.unanswered = False
        # SwitchController or SetParameters, after the method; None for 'none' and when
        # the controller_manager messages cannot be imported (self.error says so).
        self._client: Client | None = None
        # the service's full name, for messages (Humble's Client.srv_name is the text
        # given, relative or not: rclpy humble client.py:59)
        self.target = ''
        # the full name of what switches, for by_hand_command
        self.switcher = self.manager if method == 'controller_manager' else ''
        if method == 'controller_manager':
            try:
                from controller_manager_msgs.srv import SwitchController
            except ImportError as err:
                self.error = (
                    f'controller_manager_msgs cannot be imported ({err}): source your ROS 2 '
                    'install (ros-<distro>-controller-manager-msgs) or switch by hand: '
                    f'`{self.by_hand(controller, fallback)}` (and back '
                    f'with `{self.by_hand(fallback, controller)}`), then set '
                    'switch.method none')
            else:
                self._srv = SwitchController
                name = f'{manager.rstrip("/")}/switch_controller'
                self.target = node.resolve_service_name(name)
                self._client = node.create_client(SwitchController, name,
                                                  callback_group=callback_group)
        elif method in ('sim', 'driver'):
            target = sim_node if method == 'sim' else driver_node
            self.switcher = node.resolve_service_name(target.rstrip('/'))
            name = f'{target.rstrip("/")}/set_parameters'
            self.target = node.resolve_service_name(name)
            self._client = node.create_client(SetParameters, name,
                                              callback_group=callback_group)

    def by_hand(self, on: str, off: str) -> str:
        """The command line switching ``off -> on`` by hand through this switch's target
        ('' for ``none``): :func:`by_hand_command`."""
        return by_hand_command(self.method, on, off, self.switcher)

    async def activate(self) -> tuple[bool, str]:
        """Our controller on, the fallback off."""
        return await self._switch(self.controller, self.fallback)

    async def release(self) -> tuple[bool, str]:
        """The fallback on, our controller off."""
        return await self._switch(self.fallback, self.controller)

    def _no_answer(self, on: str, off: str) -> str:
        """Why the switch ``off -> on`` failed when its request went unanswered (it may yet
        be carried out, or never); for a hand-back (``on`` the fallback), with the command
        that makes it by hand. Not for a take: the caller switches back, and a take made
        by hand would leave our controller with nothing commanding it."""
        by_hand = f'; by hand: `{self.by_hand(on, off)}`' if on == self.fallback else ''
        return (f'switch {off} -> {on}: no answer from {self.target} within '
                f'{self.timeout_s:g} s{by_hand}')

    async def _switch(self, on: str, off: str) -> tuple[bool, str]:
        what = f'{off} -> {on}'
        self.unanswered = False
        if self.method == 'none':
            return True, f'no switch (switch.method none): {on} must be active'
        if self.error:
            return False, self.error
        client = self._client
        if client is None:
            return False, f'switch {what}: no service client for switch.method {self.method}'
        if not client.service_is_ready():
            return False, f'switch {what}: {self.target} not discovered (yet)'
        if self.method == 'controller_manager':
            request = self._srv.Request()
            fields = switch_request_fields(on, off, self.timeout_s)
            request.timeout.sec, request.timeout.nanosec = cast(tuple, fields.pop('timeout'))
            for name, value in fields.items():
                setattr(request, name, value)
            response = await call(self.node, client, request, self.timeout_s)
            self.unanswered = response is None
            if response is None:
                return False, self._no_answer(on, off)
            if not response.ok:
                detail = getattr(response, 'message', '')
                return False, f'switch {what} refused by the controller manager {detail}'
            return True, f'switched {what}'
        request = SetParameters.Request(parameters=[ParameterMsg(
            name='active_arm_controller', value=ParameterValue(
                type=ParameterType.PARAMETER_STRING, string_value=on))])
        response = await call(self.node, client, request, self.timeout_s)
        self.unanswered = response is None
        if response is None:
            return False, self._no_answer(on, off)
        if not response.results or not response.results[0].successful:
            return False, f'switch {what} refused: {response.results[0].reason}'
        return True, f'switched {what} ({"simulator" if self.method == "sim" else "bus driver"})'


async def read_parameters(node: Node, client, names: list[str], timeout_s: float
                          ) -> dict[str, object] | None:
    """Parameters ``names`` of another node through ``client`` (rcl_interfaces
    GetParameters): name -> Python value (a list for an array, None for one the node does
    not have); None when the node cannot be asked."""
    response = await call(node, client, GetParameters.Request(names=names), timeout_s)
    if response is None or len(response.values) != len(names):
        return None
    values: dict[str, object] = {}
    for name, value in zip(names, response.values, strict=True):
        kind = value.type
        values[name] = (list(value.string_array_value)
                        if kind == ParameterType.PARAMETER_STRING_ARRAY
                        else value.string_value if kind == ParameterType.PARAMETER_STRING
                        else None)
    return values
