"""An emulated ros2_control controller manager for the simulator's arm controllers.

What it is for: ``plag_sim`` stands in for the CRANE-X7 driver, whose controller manager
switches the arm between the driver's JointTrajectoryController and our forward position
controller. Where ``controller_manager_msgs`` can be imported, the simulator serves the real
service names and types (``/controller_manager/switch_controller`` and
``/controller_manager/list_controllers``), so a client (plag_impedance with
``switch.method: controller_manager``, ``ros2 control``) cannot tell the simulator from the
robot by the answers it gets.

Two parts:

* :class:`EmulatedControllerManager`: the rules, without ROS. Its
  :meth:`~EmulatedControllerManager.switch` follows ``ControllerManager::switch_controller``
  of the ros2_control release it is told (``controller_manager/src/controller_manager.cpp``,
  read at the commits of test/data/ros2_control_upstream.yaml, section
  ``switch_controller``): Humble 2.54.0 (0941f73c) and Jazzy 4.46.0 (9ffbf97f); Kilted
  5.16.0 (cbe7d2c3) has Jazzy's file byte for byte. For what can happen with controllers
  that are all loaded and configured (active or inactive), none chained, on hardware whose
  interfaces are all available: the same checks in the same order, the same ok flags and
  the same message texts (Humble's answer has no message: there the text is its log line).
  Chaining, fallback controllers, unconfigured controllers, hardware errors and Humble's
  wait for one update cycle before it answers cannot occur here or change no answer, and
  are left out.
* :func:`controller_manager_node`: a ``controller_manager`` node serving both services with
  those rules; None when ``controller_manager_msgs`` cannot be imported (it has no PyPI
  wheel), in which case the simulator's ``active_arm_controller`` parameter stays the only
  switch.

The manager holds no state of its own: each call gets the set of active controllers from
its caller (the simulator), so the parameter path and the service path cannot disagree.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rclpy.context import Context
    from rclpy.node import Node

__all__ = ['BEST_EFFORT', 'JOINT_STATE_BROADCASTER', 'RELEASES', 'STRICT', 'ControllerSpec',
           'ControllerStatus', 'EmulatedControllerManager', 'SwitchOutcome',
           'controller_manager_node', 'crane_x7_controllers', 'release_for']

BEST_EFFORT = 1
"""``SwitchController.Request.BEST_EFFORT``: skip what cannot be done."""
STRICT = 2
"""``SwitchController.Request.STRICT``: refuse the whole request if any part fails."""

JOINT_STATE_BROADCASTER = 'joint_state_controller'
"""The driver's joint state broadcaster (rt-net crane_x7_control names it so)."""

NODE_NAME = 'controller_manager'

RELEASES = ('humble', 'jazzy', 'kilted')
"""The ros2_control releases whose switch rules are emulated."""

# The real controller manager's texts (controller_manager.cpp, ros2_control 4.46 and 5.16).
NO_SUCH_CONTROLLER = ("Could not {action} controller with name '{name}' because no controller "
                      'with this name exists')
ALREADY_ACTIVE = "Controller with name '{name}' is already active."
NOT_ACTIVE = "Controller with name '{name}' can not be deactivated since it is not active."
NOTHING_TO_DO = ('After checking the controllers, no controllers need to be activated or '
                 'deactivated.')
CLAIMED = ("Unable to activate controller '{name}' since the command interface '{interface}' "
           'is currently claimed by another controller.')
BEING_ACTIVATED = ("Unable to activate controller '{name}' since the command interface "
                   "'{interface}' will be used by another controller that is being activated.")
SWITCHED = 'Successfully switched controllers!'
# Humble's (2.54.0), whose answer carries only `ok`: the lines it logs instead.
HUMBLE_NO_SUCH_CONTROLLER = ("Could not '{action}' controller with name '{name}' because no "
                             'controller with this name exists')
HUMBLE_NOT_INACTIVE = ("Controller with name '{name}' is not inactive so its following "
                       'controllers do not have to be checked, because it cannot be activated.')
HUMBLE_NOTHING_TO_DO = 'Empty activate and deactivate list, not requesting switch'
HUMBLE_CONFLICT = ("Resource conflict for controller '{name}'. Command interface "
                   "'{interface}' is already claimed.")
HUMBLE_NOT_ACTIVATED = "Could not activate controller : '{name}'"
HUMBLE_SWITCHED = 'Successfully switched controllers'


def release_for(distro: str | None) -> str:
    """The rules to emulate on a ROS 2 distribution (``ROS_DISTRO``): its own where they are
    recorded, else the newest recorded (Kilted's; a plain virtualenv has no ROS_DISTRO)."""
    name = (distro or '').strip().lower()
    return name if name in RELEASES else RELEASES[-1]


@dataclass(frozen=True)
class ControllerSpec:
    """One loaded controller: what ListControllers reports about it besides its state.

    ``command_interfaces`` are the interfaces it claims while active (its
    ``command_interface_configuration``, ``<joint>/<interface>``); ``state_interfaces``
    the ones it reads.
    """

    name: str
    type: str
    command_interfaces: tuple[str, ...] = ()
    state_interfaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerStatus:
    """One entry of a ListControllers answer (the fields of ControllerState we fill)."""

    name: str
    state: str                               # 'active' or 'inactive'
    type: str
    claimed_interfaces: tuple[str, ...]      # the command interfaces it holds now
    required_command_interfaces: tuple[str, ...]
    required_state_interfaces: tuple[str, ...]


@dataclass(frozen=True)
class SwitchOutcome:
    """The answer to one SwitchController request and what it changes.

    ``deactivated`` and ``activated`` are the controllers stopped and started (a name in
    both is a restart); ``active`` is the set of active controllers afterwards. From Jazzy
    on, a refused request changes nothing; Humble checks command interfaces only while it
    switches, so a request it refuses for a claimed interface has still stopped what it was
    asked to stop and started the controllers that found their interfaces free.
    """

    ok: bool
    message: str
    active: frozenset[str]
    deactivated: tuple[str, ...] = ()
    activated: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether any controller was (re)started or stopped."""
        return bool(self.deactivated or self.activated)


def crane_x7_controllers(arm_controllers: Sequence[tuple[str, str]], arm_joints: Sequence[str],
                         joints: Sequence[str]) -> list[ControllerSpec]:
    """The controllers of the CRANE-X7 bring-up plus ours, in the order the real manager lists
    them after the driver's spawner and ours ran (the newest loaded first).

    Args:
        arm_controllers: (name, type) of each arm controller; each claims the ``position``
            command interface of every arm joint.
        arm_joints: the arm controllers' joints, in their ``joints`` order.
        joints: every joint of the hardware; the joint state broadcaster reads their
            position, velocity and effort and claims nothing.
    """
    positions = tuple(f'{joint}/position' for joint in arm_joints)
    specs = [ControllerSpec(name, kind, positions,
                            positions if kind.startswith('joint_trajectory_controller/') else ())
             for name, kind in reversed(arm_controllers)]
    specs.append(ControllerSpec(
        JOINT_STATE_BROADCASTER, 'joint_state_broadcaster/JointStateBroadcaster', (),
        tuple(f'{joint}/{kind}' for joint in joints for kind in ('position', 'velocity',
                                                                  'effort'))))
    return specs


class EmulatedControllerManager:
    """The switching rules and the controller list of a controller manager, without ROS.

    Args:
        controllers: every loaded controller, in list order. All are configured: each one
            is either active or inactive, as the caller's active set says.
        release: whose rules :meth:`switch` follows, one of :data:`RELEASES`.
    """

    def __init__(self, controllers: Iterable[ControllerSpec], release: str = 'kilted') -> None:
        if release not in RELEASES:
            raise ValueError(f'release must be one of {RELEASES}, got {release!r}')
        self.controllers = {spec.name: spec for spec in controllers}
        self.release = release

    def list_controllers(self, active: Iterable[str]) -> list[ControllerStatus]:
        """What ListControllers answers while the controllers in ``active`` are active."""
        on = frozenset(active)
        return [ControllerStatus(spec.name, 'active' if spec.name in on else 'inactive',
                                 spec.type, spec.command_interfaces if spec.name in on else (),
                                 spec.command_interfaces, spec.state_interfaces)
                for spec in self.controllers.values()]

    def switch(self, active: Iterable[str], activate: Sequence[str],
               deactivate: Sequence[str], strictness: int) -> SwitchOutcome:
        """Answer a SwitchController request as the manager's release does.

        Args:
            active: the controllers active before the request.
            activate, deactivate: the request's lists, in their order.
            strictness: :data:`STRICT`, or anything else, which the real manager treats as
                BEST_EFFORT (0 means its default, ``best_effort`` on every release; Jazzy's
                AUTO and FORCE_AUTO fall back to BEST_EFFORT).

        Returns:
            The ok flag and message, and the active set afterwards.
        """
        if self.release == 'humble':
            return self._switch_humble(frozenset(active), activate, deactivate,
                                       strictness == STRICT)
        return self._switch_jazzy(frozenset(active), activate, deactivate, strictness)

    def _switch_jazzy(self, before: frozenset[str], activate: Sequence[str],
                      deactivate: Sequence[str], strictness: int) -> SwitchOutcome:
        """Jazzy's and Kilted's ``switch_controller_cb`` (controller_manager.cpp 1858-2441,
        interface checks 4312-4415; the same file on both)."""
        strict = strictness == STRICT
        message = ''

        def refused(text: str) -> SwitchOutcome:
            return SwitchOutcome(False, text, before)

        # 1. Every named controller must exist, the deactivations first. STRICT stops at the
        # first unknown name; BEST_EFFORT collects the complaints and fails only when the
        # list's last name is unknown and none before it was found (the real loop keeps
        # the verdict of its last step).
        def known(names: Sequence[str], action: str) -> tuple[list[str], str | None]:
            nonlocal message
            found: list[str] = []
            good = True
            for name in names:
                if name in self.controllers:
                    found.append(name)
                    good = True
                    continue
                error = NO_SUCH_CONTROLLER.format(action=action, name=name)
                if strict:
                    return found, error
                message += error + '\n'
                good = bool(found)
            return found, (None if good else message)

        to_deactivate, error = known(deactivate, 'deactivate')
        if error is not None:
            return refused(error)
        to_activate, error = known(activate, 'activate')
        if error is not None:
            return refused(error)

        # 2. A controller to activate must not be active already, unless it is also being
        # deactivated (a restart). BEST_EFFORT drops it from the request.
        kept = []
        for name in to_activate:
            if name in before and name not in to_deactivate:
                if strict:
                    return refused(ALREADY_ACTIVE.format(name=name))
                continue
            kept.append(name)
        to_activate = kept

        # 3. A controller to deactivate must be active.
        kept = []
        for name in to_deactivate:
            if name not in before:
                if strict:
                    return refused(NOT_ACTIVE.format(name=name))
                continue
            kept.append(name)
        to_deactivate = kept

        if not to_activate and not to_deactivate:
            return SwitchOutcome(True, NOTHING_TO_DO, before)

        # 4. Command interfaces, whatever the strictness: one held by an active controller
        # that stays active, or wanted by two controllers of this request, refuses it all.
        claimed = {itf for name in before for itf in self.controllers[name].command_interfaces}
        freed = {itf for name in to_deactivate
                 for itf in self.controllers[name].command_interfaces}
        wanted: set[str] = set()
        for name in to_activate:
            if name in to_deactivate:
                continue          # a restart takes back what it gives up
            for interface in self.controllers[name].command_interfaces:
                if interface in claimed and interface not in freed:
                    return refused(CLAIMED.format(name=name, interface=interface))
                if interface in wanted:
                    return refused(BEING_ACTIVATED.format(name=name, interface=interface))
                wanted.add(interface)

        # 5. The switch. Only a non-STRICT answer lists what was done.
        after = (before - set(to_deactivate)) | set(to_activate)
        text = SWITCHED
        if not strict:
            if to_deactivate:
                text += f'\nDeactivated controllers: [ {" ".join(to_deactivate)} ]'
            if to_activate:
                text += f'\nActivated controllers: [ {" ".join(to_activate)} ]'
        return SwitchOutcome(True, text, frozenset(after), tuple(to_deactivate),
                             tuple(to_activate))

    def _switch_humble(self, before: frozenset[str], activate: Sequence[str],
                       deactivate: Sequence[str], strict: bool) -> SwitchOutcome:
        """Humble's ``switch_controller`` (controller_manager.cpp 943-1398) and the update
        cycle it waits for (``activate_controllers``, 1577-1718).

        The request is checked name by name, then handed to the update cycle, which stops
        what it is asked to stop and starts the rest in order, skipping a controller whose
        command interface is still claimed. The answer is false when any controller asked
        for did not start, whatever the strictness.
        """
        log: list[str] = []

        def refused(text: str) -> SwitchOutcome:
            return SwitchOutcome(False, '\n'.join([*log, text]), before)

        # 1. Unknown names, the deactivations first: STRICT refuses at the first one,
        # BEST_EFFORT logs and skips each (it never fails for them).
        known: dict[str, list[str]] = {}
        for action, names in (('deactivate', deactivate), ('activate', activate)):
            known[action] = []
            for name in names:
                if name in self.controllers:
                    known[action].append(name)
                    continue
                text = HUMBLE_NO_SUCH_CONTROLLER.format(action=action, name=name)
                if strict:
                    return refused(text)
                log.append(text)
        # 2. A controller to activate must be inactive: a restart (active, in both lists)
        # is refused too, or under BEST_EFFORT only deactivated.
        to_activate = []
        for name in known['activate']:
            if name in before:
                if strict:
                    return refused(HUMBLE_NOT_INACTIVE.format(name=name))
                log.append(HUMBLE_NOT_INACTIVE.format(name=name))
                continue
            to_activate.append(name)
        # 3. A controller to deactivate must be active.
        to_deactivate = []
        for name in known['deactivate']:
            if name not in before:
                if strict:
                    return refused(NOT_ACTIVE.format(name=name))
                log.append(NOT_ACTIVE.format(name=name))
                continue
            to_deactivate.append(name)
        if not to_activate and not to_deactivate:
            return SwitchOutcome(True, '\n'.join([*log, HUMBLE_NOTHING_TO_DO]), before)

        # 4. The update cycle: stop, then start in order; a claimed interface skips one.
        after = set(before - set(to_deactivate))
        claimed = {itf for name in after for itf in self.controllers[name].command_interfaces}
        started = []
        for name in to_activate:
            wanted = self.controllers[name].command_interfaces
            clash = next((itf for itf in wanted if itf in claimed), None)
            if clash is not None:
                log += [HUMBLE_CONFLICT.format(name=name, interface=clash),
                        HUMBLE_NOT_ACTIVATED.format(name=name)]
                continue
            claimed.update(wanted)
            after.add(name)
            started.append(name)
        ok = len(started) == len(to_activate)
        return SwitchOutcome(ok, '\n'.join([*log, HUMBLE_SWITCHED] if ok else log),
                             frozenset(after), tuple(to_deactivate), tuple(started))


def controller_manager_node(manager: EmulatedControllerManager, *, context: Context,
                            active: Callable[[], Iterable[str]],
                            apply: Callable[[SwitchOutcome], None],
                            update_rate_hz: int = 0, namespace: str = '') -> Node | None:
    """A node named ``controller_manager`` serving ``~/switch_controller`` and
    ``~/list_controllers`` (controller_manager_msgs) with ``manager``'s rules.

    Args:
        manager: the rules and the controller list.
        context: the rclpy context of the simulator.
        active: returns the controllers active now (asked at every request).
        apply: makes a switch happen (called whenever the outcome ``changed``).
        update_rate_hz: reported as each controller's ``update_rate``.
        namespace: the node's namespace: the simulator's, as a controller manager shares
            its robot's ('' = the root).

    Returns:
        The node, or None when ``controller_manager_msgs`` cannot be imported.
    """
    try:
        from controller_manager_msgs.msg import ControllerState
        from controller_manager_msgs.srv import ListControllers, SwitchController
    except ImportError:
        return None
    from rclpy.node import Node

    # Not the process's global arguments: a launch file's `-r __node:=plag_sim` would rename
    # this node too (and so its `__ns` does not reach it: the namespace is passed).
    node = Node(NODE_NAME, context=context, namespace=namespace, use_global_arguments=False)
    log = node.get_logger()

    def on_switch(request, response):
        outcome = manager.switch(active(), list(request.activate_controllers),
                                 list(request.deactivate_controllers), request.strictness)
        if outcome.changed:          # (Humble's refusals can have changed something)
            apply(outcome)
        response.ok = outcome.ok
        if hasattr(response, 'message'):      # from Jazzy on; Humble's answer is `ok` alone
            response.message = outcome.message
        what = (f'activate {list(request.activate_controllers)}, deactivate '
                f'{list(request.deactivate_controllers)}, strictness {request.strictness}')
        text = outcome.message.strip().replace('\n', '; ')    # one log line
        if outcome.ok:
            log.info(f'switch ({what}): {text}')
        else:
            log.warning(f'switch refused ({what}): {text}')
        return response

    def on_list(request, response):
        for status in manager.list_controllers(active()):
            entry = ControllerState(name=status.name, state=status.state, type=status.type,
                                    claimed_interfaces=list(status.claimed_interfaces))
            # Fields newer than the oldest supported release's message, set where present.
            for field, value in (('update_rate', min(max(update_rate_hz, 0), 65535)),
                                 ('required_command_interfaces',
                                  list(status.required_command_interfaces)),
                                 ('required_state_interfaces',
                                  list(status.required_state_interfaces))):
                if hasattr(entry, field):
                    setattr(entry, field, value)
            response.controller.append(entry)
        return response

    node.create_service(SwitchController, '~/switch_controller', on_switch)
    node.create_service(ListControllers, '~/list_controllers', on_list)
    return node
