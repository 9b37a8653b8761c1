"""Who commands the arm: the impedance node's take-over and hand-back, as plain state.

On enable the node takes the arm from the driver's controller (the forward path switches
controllers, the trajectory path starts streaming to the driver's own controller); after a
disable or a latched fault it holds for ``switch.hold_s`` and gives the arm back. A driver
silent for ``input_loss_s`` while we hold the arm is taken as gone: a restarted driver
brings its controllers back without our switch, so when joint states return nothing is
commanded until the node has switched again.

This module keeps that bookkeeping; the node awaits the switch services and calls in here.
Times are monotonic seconds from the caller.
"""
from __future__ import annotations

from dataclasses import dataclass

from plag_ros.core.control.settings import CommandKind, SwitchMethod

__all__ = ['ArmOwnership']


@dataclass
class ArmOwnership:
    """Take-over state of one command path.

    Attributes:
        kind: the command path (:attr:`ImpedanceSettings.command_kind`).
        switch_method: the forward path's ``switch.method``; None on the other paths.
        hold_s: hold this long before giving the arm back [s].
        input_loss_s: joint states absent this long mean the driver is gone [s].
        switched: we hold the arm (switched in by us, or streaming trajectory points).
        switching: a controller switch is under way.
        release_at: when to give the arm back [s], or None.
        driver_lost: the driver went silent while we held the arm.
        last_input: when the last joint state arrived [s].
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

    @property
    def commanding(self) -> bool:
        """Whether commands go out: always on an effort interface without a switch (the
        simulator) and on a forward path switched by hand; else only while we hold the arm
        (the bus driver's current mode included). A disabled node leaves the driver's
        controller to other users (MoveIt)."""
        return (self.kind == 'effort' and self.switch_method is None) or \
            self.switch_method == 'none' or self.switched

    def taken(self) -> None:
        """The arm is ours after an enable (a switch made, or none needed)."""
        self.release_at = None
        if self.kind == 'trajectory' or self.switch_method not in (None, 'none'):
            self.switched = True

    def schedule_release(self, now: float) -> None:
        """Give the arm back ``hold_s`` from ``now`` (unless already due)."""
        if self.switched and self.release_at is None:
            self.release_at = now + self.hold_s

    def release_due(self, now: float) -> bool:
        """True once, when the scheduled hand-back is due."""
        if self.release_at is None or now < self.release_at:
            return False
        self.release_at = None
        return True

    def input_arrived(self, now: float) -> bool:
        """A joint state arrived. True when it ends a driver loss: the switch is then
        taken as gone (nothing is commanded until the node switches again)."""
        self.last_input = now
        if not self.driver_lost:
            return False
        self.driver_lost, self.switched, self.release_at = False, False, None
        return True

    def input_lost(self, now: float) -> bool:
        """True once, when joint states have been absent ``input_loss_s`` while a switch
        of ours holds the arm."""
        if self.switched and not self.driver_lost and self.switch_method not in (None, 'none') \
                and now - self.last_input > self.input_loss_s:
            self.driver_lost = True
            return True
        return False
