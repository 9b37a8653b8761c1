"""Who commands the arm: the impedance node's take-over and hand-back, as plain state.

On enable the node takes the arm from the driver's controller (the forward path switches
controllers, the trajectory path starts streaming to the driver's own controller); after a
disable or a latched fault it holds for ``switch.hold_s`` and gives the arm back; the bus
driver's current mode is given back at once (its position mode holds the pose the arm has,
where our hold would be open-loop torque). A driver silent for ``input_loss_s`` while we
hold the arm is taken as gone: a restarted driver brings its controllers back without our
switch, so when joint states return nothing is commanded until an enable has switched
again. A driver that reports a fault of its own while we hold the arm holds it itself:
nothing is commanded from then on, and the arm is given back at once; so does a driver
whose state has not shown our controller (on the effort path: with the arm in current
mode) within ``confirm_s`` of the take: whatever kept it from that (a fault in the
switch's own cycle, cleared by hand before we read it, for one), we would otherwise go on
commanding into its position hold.

This module keeps that bookkeeping; the node awaits the switch services and calls in here.
Times are monotonic seconds from the caller.
"""
from __future__ import annotations

from dataclasses import dataclass

from plag_ros.core.control.settings import CommandKind, SwitchMethod
from plag_ros.core.dynamics.motors import ARM_JOINTS

__all__ = ['ArmOwnership', 'driver_joint_check']


@dataclass
class ArmOwnership:
    """Take-over state of one command path.

    Attributes:
        kind: the command path (:attr:`ImpedanceSettings.command_kind`).
        switch_method: the forward path's ``switch.method``; None on the other paths.
        hold_s: hold this long before giving the arm back [s] (not on the bus driver:
            :attr:`hold_time`).
        input_loss_s: joint states absent this long mean the driver is gone [s].
        switched: we hold the arm (switched in by us, or streaming trajectory points).
        switching: a controller switch is under way.
        release_at: when to give the arm back [s], or None.
        driver_lost: the driver went silent while we held the arm.
        last_input: when the last joint state arrived [s].
        last_check: the last :meth:`input_lost` call [s].
        driver_fault: why the bus driver holds the arm itself, reported while we held it
            ('' when it does not); its position hold has the arm until the next take.
        driver_confirmed: the driver's state has shown our controller since the take.
        current_seen: ... and the arm's joints all in current mode.
        takes: the number of takes so far (a hand-back due before the latest is void).
        confirm_s: the bus driver must show our controller (on the effort path: and
            current mode) within this long of the take [s]; 0: no deadline.
        taken_at: when the latest take finished [s].
    """

    kind: CommandKind
    switch_method: SwitchMethod | None
    hold_s: float
    input_loss_s: float
    switched: bool = False
    switching: bool = False
    release_at: float | None = None
    driver_lost: bool = False
    last_input: float = 0.0
    driver_fault: str = ''
    driver_confirmed: bool = False
    current_seen: bool = False
    takes: int = 0
    last_check: float = 0.0
    confirm_s: float = 0.0
    taken_at: float = 0.0

    @property
    def hold_time(self) -> float:
        """How long a disable holds before the hand-back [s]: ``hold_s``; 0 in the bus
        driver's current mode, whose switch to position mode holds the present pose in the
        servos' own loop where our hold would be open-loop torque."""
        return 0.0 if self.kind == 'effort' and self.switch_method == 'driver' else self.hold_s

    @property
    def commanding(self) -> bool:
        """Whether commands go out: always on an effort interface without a switch (the
        simulator) and on a forward path switched by hand; else only while we hold the arm
        (the bus driver's current mode included) and the driver has not taken it back with
        a fault. A disabled node leaves the driver's controller to other users (MoveIt).
        On the position paths nothing goes out once the driver is taken as gone
        (:attr:`driver_lost`): its servos hold the last position command (the trajectory
        controller its last point), and a hold sent on for as long as the silence lasts is
        a command from no reading, which a restarted driver would take from a pose it no
        longer has. (An effort interface has no hold of its own: the hold's gravity torque
        goes on there.)"""
        return (self.kind == 'effort' and self.switch_method is None) or \
            self.switch_method == 'none' or (self.switched and not self.driver_fault and
                                             not (self.driver_lost and self.kind != 'effort'))

    def needs_switch(self) -> bool:
        """Whether an enable must switch (again): the arm is not ours, or the bus driver
        took it back (a fault, another controller) and a hand-back has not finished."""
        return not self.switched or bool(self.driver_fault)

    def taken(self, now: float) -> None:
        """The arm is ours after an enable (a switch made, or none needed) at ``now``."""
        self.release_at, self.driver_fault, self.taken_at = None, '', now
        self.driver_confirmed = self.current_seen = False
        self.takes += 1
        if self.kind == 'trajectory' or self.switch_method not in (None, 'none'):
            self.switched = True

    def schedule_release(self, now: float) -> None:
        """Give the arm back :attr:`hold_time` from ``now`` (unless already due)."""
        if self.switched and self.release_at is None:
            self.release_at = now + self.hold_time

    def driver_reported(self, fault: str, *, ours: bool, current: bool | None = None,
                        model: str = '', now: float) -> str:
        """The bus driver's state while we hold the arm: its ``fault`` ('' when none),
        whether its active arm controller is ``ours``, on the effort path whether the
        arm's joints are all in ``current`` mode, and how its ``model`` differs from ours
        ('' when it does not). Returns, once per take, why the driver must hold the arm
        itself ('' while it need not): a fault; a model not ours (a driver restarted
        with another one: its gravity torque is not the law's); another active controller
        (a restarted driver, a switch by hand) or the arm out of current mode, once ours
        and current mode have been seen since the take (a message sent before our switch
        reached it shows neither, and proves nothing); a message received at ``now`` more
        than ``confirm_s`` after the take when no message since the take has shown ours
        (on the effort path: ours with the arm in current mode), this one included (the
        driver republishes its state every second: judged on its messages, not on our
        clock, a stall of ours is no driver's fault). From then on nothing is commanded."""
        if not self.switched or self.switching or self.driver_fault:
            return ''
        self.driver_confirmed |= ours
        self.current_seen |= bool(ours and current)
        if fault:
            reason = fault
        elif model:
            reason = model
        elif self.driver_confirmed and not ours:
            reason = 'another arm controller is active'
        elif self.current_seen and current is False:
            reason = 'the arm joints left current mode'
        elif self.confirm_s > 0 and now - self.taken_at > self.confirm_s and not (
                self.current_seen if current is not None else self.driver_confirmed):
            reason = (f'not {"in current mode " if current is not None else ""}with our '
                      f'controller {now - self.taken_at:.1f} s after the switch '
                      f'(confirmation time {self.confirm_s:g} s)')
        else:
            return ''
        self.driver_fault = reason
        return reason

    def release_due(self, now: float) -> bool:
        """True once, when the scheduled hand-back is due."""
        if self.release_at is None or now < self.release_at:
            return False
        self.release_at = None
        return True

    def input_arrived(self, now: float) -> bool:
        """A joint state arrived. True when it ends a driver loss: the switch is then
        taken as gone (nothing is commanded until an enable switches again)."""
        self.last_input = now
        if not self.driver_lost:
            return False
        self.driver_lost, self.switched, self.release_at = False, False, None
        return True

    def input_lost(self, now: float) -> bool:
        """True once, when joint states have been absent ``input_loss_s`` while we hold the
        arm (a switch of ours, or our trajectory points). Called on every timer tick: a gap
        between two calls of more than half ``input_loss_s`` is our own stall (a stopped or
        starved process), not the driver's silence, and the count starts again (the
        driver's state says what it did meanwhile)."""
        if now - self.last_check > self.input_loss_s / 2:
            self.last_input = max(self.last_input, now)
        self.last_check = now
        if self.switched and not self.driver_lost and now - self.last_input > self.input_loss_s:
            self.driver_lost = True
            return True
        return False


def driver_joint_check(command: list[str], driver: list[str]) -> str:
    """'ok', or why ``command.joints`` cannot drive the bus driver's current mode: they
    must be its arm joints (``driver``: the joints of its state), every one of them (the
    driver refuses a command that leaves one out; its gripper stays in position mode)."""
    unknown = [j for j in command if j not in driver or j not in ARM_JOINTS]
    left_out = [j for j in ARM_JOINTS if j in driver and j not in command]
    if not unknown and not left_out:
        return 'ok'
    why = ([f'not its arm joints {unknown}'] if unknown else []) + \
        ([f'left out {left_out}'] if left_out else [])
    return "command.joints do not match the driver's arm joints: " + '; '.join(why)
