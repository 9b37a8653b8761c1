"""The simulator's controller-manager rules, without ROS (every suite).

test_switch_parity.py holds these rules to the real Kilted controller manager over DDS, in the
suite that has it; here the same rules are checked on their own, so Humble's and Jazzy's
suites (no controller_manager_msgs, no ros2_control build) still run them. The expected
answers are read from ros2_control 5.16's ``ControllerManager::switch_controller_cb``: unknown
names first, then already-active and not-active names, then the command-interface claims.
"""
from __future__ import annotations

import pytest

from plag_ros.ros.emulated_controller_manager import (
    BEST_EFFORT,
    JOINT_STATE_BROADCASTER,
    STRICT,
    EmulatedControllerManager,
    crane_x7_controllers,
)

JOINTS = ['j1', 'j2']
JTC = 'arm_jtc'
FORWARD = 'arm_forward'
TYPES = [(JTC, 'joint_trajectory_controller/JointTrajectoryController'),
         (FORWARD, 'forward_command_controller/ForwardCommandController')]
DRIVER_UP = frozenset({JTC, JOINT_STATE_BROADCASTER})


@pytest.fixture
def manager() -> EmulatedControllerManager:
    return EmulatedControllerManager(crane_x7_controllers(TYPES, JOINTS, [*JOINTS, 'finger']))


def test_the_list_names_claims_only_for_active_controllers(manager):
    listed = {c.name: c for c in manager.list_controllers(DRIVER_UP)}
    assert list(listed) == [FORWARD, JTC, JOINT_STATE_BROADCASTER]   # newest loaded first
    assert listed[JTC].state == 'active'
    assert listed[JTC].claimed_interfaces == ('j1/position', 'j2/position')
    assert listed[FORWARD].state == 'inactive' and listed[FORWARD].claimed_interfaces == ()
    assert listed[FORWARD].required_command_interfaces == ('j1/position', 'j2/position')
    assert listed[JOINT_STATE_BROADCASTER].required_command_interfaces == ()
    assert len(listed[JOINT_STATE_BROADCASTER].required_state_interfaces) == 9


@pytest.mark.parametrize('strictness', [STRICT, BEST_EFFORT])
def test_a_claimed_interface_refuses_any_strictness(manager, strictness):
    outcome = manager.switch(DRIVER_UP, [FORWARD], [], strictness)
    assert not outcome.ok and outcome.active == DRIVER_UP
    assert "'j1/position' is currently claimed by another controller" in outcome.message


def test_the_swap_in_one_request_is_accepted(manager):
    outcome = manager.switch(DRIVER_UP, [FORWARD], [JTC], STRICT)
    assert outcome.ok and outcome.message == 'Successfully switched controllers!'
    assert outcome.active == {FORWARD, JOINT_STATE_BROADCASTER}
    assert (outcome.deactivated, outcome.activated) == ((JTC,), (FORWARD,))


def test_two_controllers_wanting_one_interface_refuse(manager):
    outcome = manager.switch({JOINT_STATE_BROADCASTER}, [JTC, FORWARD], [], STRICT)
    assert not outcome.ok
    assert f"'{FORWARD}'" in outcome.message and 'being activated' in outcome.message


def test_strict_stops_at_the_first_unknown_name(manager):
    outcome = manager.switch(DRIVER_UP, [FORWARD], [JTC, 'nope', 'other'], STRICT)
    assert not outcome.ok and outcome.active == DRIVER_UP
    assert outcome.message == ("Could not deactivate controller with name 'nope' because no "
                               'controller with this name exists')


def test_best_effort_skips_what_cannot_be_done(manager):
    # An unknown name after a known one is skipped; the swap still happens.
    outcome = manager.switch(DRIVER_UP, [FORWARD], ['nope', JTC], BEST_EFFORT)
    assert outcome.ok and outcome.active == {FORWARD, JOINT_STATE_BROADCASTER}
    assert 'Deactivated controllers: [ arm_jtc ]' in outcome.message
    # An already active controller is dropped from the request, leaving nothing to do.
    outcome = manager.switch(DRIVER_UP, [JTC], [], BEST_EFFORT)
    assert outcome.ok and not outcome.changed and outcome.active == DRIVER_UP
    assert 'no controllers need to be activated or deactivated' in outcome.message
    # The last name unknown with none found before it: refused.
    assert not manager.switch(DRIVER_UP, ['nope'], [], BEST_EFFORT).ok


@pytest.mark.parametrize(('activate', 'deactivate', 'phrase'), [
    ([JTC], [], 'is already active'),
    ([], [FORWARD], 'can not be deactivated since it is not active'),
])
def test_strict_refuses_a_state_it_cannot_change(manager, activate, deactivate, phrase):
    outcome = manager.switch(DRIVER_UP, activate, deactivate, STRICT)
    assert not outcome.ok and phrase in outcome.message and outcome.active == DRIVER_UP


def test_a_restart_keeps_its_own_interfaces(manager):
    outcome = manager.switch(DRIVER_UP, [JTC], [JTC], STRICT)
    assert outcome.ok and outcome.active == DRIVER_UP
    assert outcome.deactivated == outcome.activated == (JTC,)
