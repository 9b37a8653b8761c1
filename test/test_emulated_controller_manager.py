"""The simulator's controller-manager rules, without ROS (every suite).

No controller manager runs in CI (ros2_control is on no package registry; on a ROS 2
install test_switch_parity.py holds these rules to a real one over DDS). Here the rules are
held, per release, to the answers recorded from ros2_control's source in
test/data/ros2_control_upstream.yaml (section ``switch_controller``, with the commit and the
lines of controller_manager.cpp for each): the switch sequence plag_ros and test_switch_parity
use, on the CRANE-X7's own controllers, and the cases where the releases differ (a restart,
an unknown name under BEST_EFFORT, two controllers wanting one interface). The rule-by-rule
tests below follow Kilted's (and Jazzy's) ``switch_controller_cb``: unknown names first,
then already-active and not-active names, then the command-interface claims.
"""
from __future__ import annotations

import pytest
import yaml
from ros2_control_rig import ARM, HARDWARE_JOINTS
from ros_helpers import REPO

from plag_ros.ros.emulated_controller_manager import (
    BEST_EFFORT,
    JOINT_STATE_BROADCASTER,
    RELEASES,
    STRICT,
    EmulatedControllerManager,
    crane_x7_controllers,
    release_for,
)
from plag_ros.ros.nodes.sim_node import ARM_CONTROLLER_TYPES

RECORDED = yaml.safe_load((REPO / 'test' / 'data' / 'ros2_control_upstream.yaml').read_text())[
    'switch_controller']
STRICTNESS = {'STRICT': STRICT, 'BEST_EFFORT': BEST_EFFORT}
DRIVER_ACTIVE = frozenset({JOINT_STATE_BROADCASTER, 'crane_x7_arm_controller'})

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


# ------------------------------------------------ per release, against the recorded answers
def _crane_x7(release: str) -> EmulatedControllerManager:
    """The simulator's controllers (the driver's two and ours) under ``release``'s rules."""
    return EmulatedControllerManager(crane_x7_controllers(
        list(ARM_CONTROLLER_TYPES.items()), ARM, HARDWARE_JOINTS), release=release)


def test_the_recorded_releases_are_the_emulated_ones():
    assert set(RECORDED) == set(RELEASES)
    assert RECORDED['kilted']['sequence'] == RECORDED['jazzy']['sequence']   # one file
    assert {r: RECORDED[r]['commit'][:8] for r in RELEASES} == {
        'humble': '0941f73c', 'jazzy': '9ffbf97f', 'kilted': 'cbe7d2c3'}


@pytest.mark.parametrize('release', RELEASES)
def test_the_switch_sequence_answers_as_each_release_does(release):
    """The sequence of test_switch_parity.py, step after step from the driver's bring-up."""
    manager = _crane_x7(release)
    first_interface = f'{ARM[0]}/position'
    active = DRIVER_ACTIVE
    for step in RECORDED[release]['sequence']:
        outcome = manager.switch(active, step['activate'], step['deactivate'],
                                 STRICTNESS[step['strictness']])
        assert outcome.ok == step['ok'], (release, step, outcome.message)
        if step['message'] is not None:       # (Humble's answer has no message)
            assert outcome.message == step['message'].format(first_interface=first_interface)
        assert outcome.active == frozenset(step['active']), (release, step)
        active = outcome.active


@pytest.mark.parametrize('release', RELEASES)
def test_where_the_releases_differ_each_answers_as_its_own(release):
    manager = _crane_x7(release)
    for case in RECORDED[release]['edge_cases']:
        before = frozenset(case.get('from', DRIVER_ACTIVE))
        outcome = manager.switch(before, case['activate'], case['deactivate'],
                                 STRICTNESS[case['strictness']])
        assert (outcome.ok, outcome.active) == (case['ok'], frozenset(case['active'])), (
            release, case, outcome.message)


def test_humble_logs_what_its_answer_cannot_say():
    """Humble answers `ok` alone: its refusal's reason is the line it logs, kept as the
    outcome's message for the simulator's log."""
    recorded = RECORDED['humble']['order']
    outcome = _crane_x7('humble').switch(DRIVER_ACTIVE, ['plag_arm_position_controller'], [],
                                         STRICT)
    conflict = next(c['text'] for c in recorded if c['check'] == 'command interface claimed')
    assert outcome.message.split('\n') == [
        conflict[0].format(name='plag_arm_position_controller',
                           interface=f'{ARM[0]}/position'),
        conflict[1].format(name='plag_arm_position_controller')]


@pytest.mark.parametrize('strictness', [0, 3, 4])
@pytest.mark.parametrize('release', RELEASES)
def test_an_unset_or_automatic_strictness_is_best_effort(release, strictness):
    assert RECORDED[release]['strictness_0'] == 'best_effort'
    manager = _crane_x7(release)
    for step in RECORDED[release]['sequence']:
        if step['strictness'] == 'BEST_EFFORT':
            outcome = manager.switch(DRIVER_ACTIVE, step['activate'], step['deactivate'],
                                     strictness)
            assert outcome.ok == step['ok']


@pytest.mark.parametrize(('distro', 'release'), [('humble', 'humble'), ('jazzy', 'jazzy'),
                                                 ('kilted', 'kilted'), ('rolling', 'kilted'),
                                                 ('', 'kilted'), (None, 'kilted')])
def test_the_simulator_follows_the_install_s_release(distro, release):
    assert release_for(distro) == release


def test_an_unknown_release_is_refused():
    with pytest.raises(ValueError, match='release must be one of'):
        EmulatedControllerManager([], release='foxy')
