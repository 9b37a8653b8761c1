"""Who commands the arm: the impedance node's take-over and hand-back bookkeeping."""
from __future__ import annotations

import pytest

from plag_ros.core.control.arm_ownership import ArmOwnership, driver_joint_check
from plag_ros.core.dynamics.motors import ARM_JOINTS, GRIPPER_JOINT


def forward(**kw) -> ArmOwnership:
    return ArmOwnership('forward', 'controller_manager', hold_s=0.5, input_loss_s=1.0, **kw)


@pytest.mark.parametrize('kind, method, before, after', [
    ('forward', 'controller_manager', False, True),
    ('forward', 'sim', False, True),
    ('forward', 'none', True, True),         # switched by hand: always commanding
    ('trajectory', None, False, True),
    ('effort', None, True, True),            # no controller to take the arm from
])
def test_commands_go_out_only_while_the_arm_is_ours(kind, method, before, after):
    own = ArmOwnership(kind, method, hold_s=0.5, input_loss_s=1.0)
    assert own.commanding is before
    own.taken(0.0)
    assert own.commanding is after


def test_the_hand_back_is_due_once_after_the_hold():
    own = forward()
    own.schedule_release(10.0)
    assert own.release_at is None            # not ours: nothing to give back
    own.taken(0.0)
    own.schedule_release(10.0)
    own.schedule_release(10.3)               # already scheduled: the first one stands
    assert not own.release_due(10.49)
    assert own.release_due(10.5)
    assert not own.release_due(10.6)
    own.schedule_release(11.0)
    own.taken(0.0)                              # enabled again within the hold: stay
    assert own.release_at is None and own.switched


@pytest.mark.parametrize('kind, method', [('forward', 'controller_manager'),
                                          ('trajectory', None)])
def test_a_silent_driver_is_taken_as_gone_and_its_return_drops_our_switch(kind, method):
    """On the trajectory path too: our points streamed on through a silence would reach a
    restarted trajectory controller as a hold of the pose the arm had before."""
    own = ArmOwnership(kind, method, hold_s=0.5, input_loss_s=1.0, last_input=0.0)
    assert not own.input_lost(5.0)           # not ours: a silence means nothing
    own.taken(0.0)
    assert not own.input_arrived(1.0)
    assert not own.input_lost(2.0)          # 1.0 s exactly: not yet
    assert own.commanding
    assert own.input_lost(2.01)
    assert not own.commanding                # the servos hold the last position command
    assert not own.input_lost(3.0)           # reported once
    own.schedule_release(3.0)
    assert own.input_arrived(3.5)            # back: our switch did not survive
    assert not own.switched and own.release_at is None and not own.commanding
    assert not own.input_arrived(3.6)


def test_the_effort_paths_hold_goes_on_when_the_driver_is_taken_as_gone():
    """Its hold is torque: stopped, an effort interface without a hold of its own would
    drop the arm (the bus driver's stale limit ends it there, long before)."""
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    own.taken(0.0)
    own.input_arrived(1.0)
    assert not any(own.input_lost(t) for t in (1.0, 1.5, 2.0))
    assert own.input_lost(2.01) and own.commanding


def test_no_loss_without_a_take():
    """A path switched by hand, or the simulator's effort interface, has nothing of ours
    to lose: its commands go out whatever the silence."""
    for kind, method in (('forward', 'none'), ('effort', None)):
        own = ArmOwnership(kind, method, hold_s=0.5, input_loss_s=1.0)
        own.taken(0.0)
        assert not own.input_lost(100.0) and own.commanding


def test_the_bus_drivers_current_mode_is_given_back_at_once():
    """Its position mode holds the present pose in the servos' loop; our hold there would be
    open-loop gravity torque for hold_s. The forward path keeps its hold."""
    current = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    current.taken(0.0)
    current.schedule_release(10.0)
    assert current.hold_time == 0.0 and current.release_due(10.0)
    assert forward().hold_time == 0.5
    assert ArmOwnership('forward', 'driver', hold_s=0.5, input_loss_s=1.0).hold_time == 0.5


def test_a_driver_fault_while_the_arm_is_ours_ends_our_commands_until_the_next_take():
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    assert not own.driver_reported('stale effort command', ours=True, now=0.0)   # not ours yet
    own.taken(0.0)
    assert not own.driver_reported('', ours=True, current=True, now=0.0)
    assert own.commanding
    assert own.driver_reported('stale effort command', ours=True, current=False, now=0.0) == \
        'stale effort command'
    assert not own.commanding and own.switched           # given back by the node, not here
    assert not own.driver_reported('stale effort command', ours=True, now=0.0)    # once per take
    own.switched = False                                   # the hand-back
    assert not own.commanding
    own.taken(0.0)                                            # a new enable, the driver cleared
    assert own.commanding and own.driver_fault == ''


def test_a_driver_model_not_ours_while_the_arm_is_ours_ends_our_commands():
    """A driver restarted with another model while we hold the arm (its first state
    reaches us after its joint states): its gravity torque is not the law's, at once,
    whatever else it shows; nothing while we do not hold the arm (the enable judges it)."""
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    assert not own.driver_reported('', ours=False, current=False, model='not ours', now=0.0)
    own.taken(0.0)
    assert own.driver_reported('', ours=False, current=False, model='not ours',
                               now=0.0) == 'not ours'
    assert not own.commanding


def test_the_driver_holding_the_arm_is_judged_only_on_messages_after_our_switch():
    """A state sent before our switch reached the driver (delivered late) shows another
    controller and the arm in position mode: that proves nothing. Once the driver has shown
    ours, another controller means it was switched or restarted; once it has shown current
    mode, position mode means it left it (a fault cleared before we read it)."""
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    own.taken(0.0)
    assert not own.driver_reported('', ours=False, current=False, now=0.0)       # from before
    assert not own.driver_reported('', ours=True, current=False, now=0.0)        # switch pending
    assert own.driver_reported('', ours=False, current=False, now=0.0) == \
        'another arm controller is active'
    own.taken(0.0)
    assert not own.driver_reported('', ours=True, current=True, now=0.0)
    assert own.driver_reported('', ours=True, current=False, now=0.0) == \
        'the arm joints left current mode'
    own.taken(0.0)
    own.switching = True                                    # our own hand-back under way
    assert not own.driver_reported('', ours=False, current=False, now=0.0)
    forward_driver = ArmOwnership('forward', 'driver', hold_s=0.5, input_loss_s=1.0)
    forward_driver.taken(0.0)                                  # position mode: no mode to judge
    assert not forward_driver.driver_reported('', ours=True, current=None, now=0.0)


def test_a_driver_that_never_shows_current_mode_after_the_switch_holds_the_arm_itself():
    """The switch answered, but the driver faulted in that cycle and someone cleared the
    fault before we read it: its state then shows our controller in position mode, never
    current mode. Past ``confirm_s`` after the take that is the driver's hold, judged on a
    message received then (its once-a-second republish), never on our clock alone; once
    current mode was seen in time, later messages are judged as before."""
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0, confirm_s=5.0)
    own.taken(100.0)
    assert not own.driver_reported('', ours=True, current=False, now=101.0)   # pending
    assert not own.driver_reported('', ours=True, current=False, now=105.0)   # at the limit
    why = own.driver_reported('', ours=True, current=False, now=106.0)
    assert why.startswith('not in current mode with our controller 6.0 s after the switch')
    assert not own.commanding and own.needs_switch()
    own.taken(200.0)                                      # enabled again: a new deadline
    assert not own.driver_reported('', ours=True, current=True, now=200.5)
    assert not own.driver_reported('', ours=True, current=True, now=300.0)    # seen in time
    own.taken(300.0)                  # the first message after the take comes late, but shows
    assert not own.driver_reported('', ours=True, current=True, now=310.0)   # current mode
    assert own.commanding
    own.taken(400.0)
    assert own.driver_reported('', ours=False, current=False, now=406.0).startswith(
        'not in current mode')                            # a driver that never took ours
    forward_driver = ArmOwnership('forward', 'driver', hold_s=0.5, input_loss_s=1.0,
                                  confirm_s=5.0)          # position mode: ours is enough
    forward_driver.taken(0.0)
    assert not forward_driver.driver_reported('', ours=True, current=None, now=9.0)
    forward_driver.taken(10.0)
    assert forward_driver.driver_reported('', ours=False, current=None, now=16.0).startswith(
        'not with our controller 6.0 s')
    no_deadline = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    no_deadline.taken(0.0)
    assert not no_deadline.driver_reported('', ours=True, current=False, now=1e6)


def test_a_hand_back_due_before_an_enable_is_void_after_it():
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    own.taken(0.0)
    due_at = own.takes
    own.taken(0.0)                     # enabled again before the hand-back task ran
    assert own.takes != due_at


def test_an_enable_switches_again_when_the_driver_took_the_arm_back():
    """A hand-back that failed after a driver fault leaves the switch ours on paper: the
    next enable must switch, not trust it (the driver may run another controller)."""
    own = ArmOwnership('effort', 'driver', hold_s=0.5, input_loss_s=1.0)
    assert own.needs_switch()
    own.taken(0.0)
    assert not own.needs_switch()
    own.driver_reported('', ours=True, current=True, now=0.0)
    own.driver_reported('', ours=False, current=False, now=0.0)      # a switch by hand
    assert own.switched and own.needs_switch()


def test_the_driver_joint_check_wants_every_arm_joint_by_a_name_it_knows():
    arm = list(ARM_JOINTS)
    driver = [*arm, GRIPPER_JOINT]
    assert driver_joint_check(arm, driver) == 'ok'
    assert driver_joint_check(list(reversed(arm)), driver) == 'ok'     # by name, any order
    assert 'left out' in driver_joint_check(arm[:6], driver)
    assert 'not its arm joints' in driver_joint_check([*arm[:6], 'wrist'], driver)
    assert 'not its arm joints' in driver_joint_check([*arm, GRIPPER_JOINT], driver)


def test_our_own_stall_is_not_taken_for_a_silent_driver():
    """The timer ticks every few ms; a gap of its own longer than half input_loss_s means
    this process was stopped or starved: the joint states it did not read were not missing."""
    own = forward()
    own.taken(0.0)
    for t in (0.0, 0.005, 0.4, 0.8):
        own.input_arrived(t)
        assert not own.input_lost(t)
    assert not own.input_lost(3.8)           # 3 s stopped: ours, counted again from here
    ticks = [round(3.8 + 0.01 * k, 2) for k in range(1, 102)]
    assert [t for t in ticks if own.input_lost(t)] == [4.81]   # silent while we tick
