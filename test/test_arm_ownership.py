"""Who commands the arm: the impedance node's take-over and hand-back bookkeeping."""
from __future__ import annotations

import pytest

from plag_ros.core.control.arm_ownership import ArmOwnership


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
    own.taken()
    assert own.commanding is after


def test_the_hand_back_is_due_once_after_the_hold():
    own = forward()
    own.schedule_release(10.0)
    assert own.release_at is None            # not ours: nothing to give back
    own.taken()
    own.schedule_release(10.0)
    own.schedule_release(10.3)               # already scheduled: the first one stands
    assert not own.release_due(10.49)
    assert own.release_due(10.5)
    assert not own.release_due(10.6)
    own.schedule_release(11.0)
    own.taken()                              # enabled again within the hold: stay
    assert own.release_at is None and own.switched


def test_a_silent_driver_is_taken_as_gone_and_its_return_drops_our_switch():
    own = forward(last_input=0.0)
    assert not own.input_lost(5.0)           # not ours: a silence means nothing
    own.taken()
    assert not own.input_arrived(1.0)
    assert not own.input_lost(2.0)          # 1.0 s exactly: not yet
    assert own.input_lost(2.01)
    assert not own.input_lost(3.0)           # reported once
    own.schedule_release(3.0)
    assert own.input_arrived(3.5)            # back: our switch did not survive
    assert not own.switched and own.release_at is None and not own.commanding
    assert not own.input_arrived(3.6)


def test_no_loss_without_a_switch():
    own = ArmOwnership('forward', 'none', hold_s=0.5, input_loss_s=1.0)
    own.taken()
    assert not own.input_lost(100.0)
    own = ArmOwnership('trajectory', None, hold_s=0.5, input_loss_s=1.0)
    own.taken()
    assert not own.input_lost(100.0)
