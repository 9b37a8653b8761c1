"""What plag_ros asks of ros2_control, against each release's recorded definitions.

No controller manager runs in CI (none is on a package registry); the CRANE-X7 runs Humble
or Jazzy. test/data/ros2_control_upstream.yaml records, from ros-controls/ros2_control and
ros2_controllers at the commits it names (humble 2.54.0, jazzy 4.46.0 / 4.42.1, kilted
5.16.0 / 5.17.0, master), the service fields, controller types, controller parameters and
spawner options the package relies on. These tests check the request the package builds,
the controller file it ships and the launch file's spawner flags against each of them, and
run in every suite (no ROS needed).
"""
from __future__ import annotations

import pytest
import yaml
from ros_helpers import REPO

from plag_ros.core.control.settings import FORWARD_CONTROLLER
from plag_ros.core.simulation import settings as sim_settings
from plag_ros.ros.controller_file import (
    CONTROLLER,
    CONTROLLER_TYPE,
    read_controller_file,
    spawner_type_arguments,
)
from plag_ros.ros.controller_switch import STRICT, switch_request_fields

UPSTREAM = yaml.safe_load((REPO / 'test' / 'data' / 'ros2_control_upstream.yaml').read_text())
RELEASES = ['humble', 'jazzy', 'kilted']
# The Python type of a value for each message field type the request uses.
FIELD_TYPES = {'string[]': list, 'int32': int, 'bool': bool,
               'builtin_interfaces/Duration': tuple}


@pytest.mark.parametrize('release', RELEASES)
def test_the_switch_request_fits_each_release(release):
    definition = UPSTREAM['controller_manager_msgs'][release]['SwitchController']
    fields = {f['name']: f for f in definition['request']}
    request = switch_request_fields(CONTROLLER, 'crane_x7_arm_controller', 5.0)
    for name, value in request.items():
        assert name in fields, f'{release}: SwitchController has no {name}'
        assert 'deprecated' not in fields[name], f'{release}: {name} is deprecated'
        assert isinstance(value, FIELD_TYPES[fields[name]['type']]), (release, name)
    assert request['strictness'] == definition['constants']['STRICT'] == STRICT
    assert request['timeout'] == (5, 0)
    # The answer: `ok` everywhere; `message` only from jazzy (read with getattr).
    response = {f['name'] for f in definition['response']}
    assert 'ok' in response
    assert ('message' in response) == (release != 'humble')


def test_the_request_builder_can_fail():
    """The check above sees a field a release lacks (Humble's response has no message)."""
    humble = {f['name'] for f in UPSTREAM['controller_manager_msgs']['humble']['SwitchController']
              ['request']}
    assert 'start_controllers' in humble and 'start_controllers' not in {
        f['name'] for f in UPSTREAM['controller_manager_msgs']['jazzy']['SwitchController']
        ['request']}


@pytest.mark.parametrize('release', [*RELEASES, 'master'])
def test_our_controller_type_loads_on_every_release_and_the_next(release):
    """ForwardCommandController with interface_name position: on all three and on master,
    which removed position_controllers/JointGroupPositionController (#2016)."""
    types = UPSTREAM['controller_types'][release]
    assert CONTROLLER_TYPE in types
    assert ('position_controllers/JointGroupPositionController' in types) == \
        (release != 'master')
    forward = UPSTREAM['forward_command_controller'][release]
    assert {p['name'] for p in forward['parameters']} == {'joints', 'interface_name'}
    assert forward['topic'] == '~/commands'
    assert forward['message'] == 'std_msgs/msg/Float64MultiArray'
    shipped = read_controller_file(REPO / 'config' / 'crane_x7_controllers.yaml')
    assert shipped.type == CONTROLLER_TYPE and shipped.interface_name == 'position'
    # One controller name for the launch file, the controller and the simulator.
    assert CONTROLLER == FORWARD_CONTROLLER == sim_settings.FORWARD


@pytest.mark.parametrize('release', RELEASES)
def test_the_jtc_takes_over_from_the_last_command_on_each_release(release):
    """The README's no-jump switch back rests on this default (ros2_controllers#1594)."""
    jtc = UPSTREAM['joint_trajectory_controller'][release]
    setting = jtc['set_last_command_interface_value_as_state_on_activation']
    assert setting['present'] and setting['default'] is True
    assert jtc['joint_trajectory_topic']['topic'] == '~/joint_trajectory'


@pytest.mark.parametrize('release', RELEASES)
def test_the_spawner_flags_of_the_launch_exist_on_each_release(release):
    spawner = UPSTREAM['spawner'][release]
    options = ' '.join(spawner['options'])
    for flag in ('--controller-manager', '--param-file', '--inactive'):
        assert flag in options, f'{release}: no {flag}'
    extra = spawner_type_arguments(release)
    assert ('-t/--controller-type' in options) == (release == 'humble')
    assert all(flag in options for flag in extra if flag.startswith('--')), (release, extra)
    assert spawner['type_from_param_file']
    # Humble reads the type from the file since 2.43.0; the flag covers older releases.
    if release == 'humble':
        assert spawner['since'].startswith('2.43.0') and extra[:1] == ['--controller-type']
    # A loaded controller is skipped, its file unread: plag_impedance checks for that.
    assert 'Controller already loaded, skipping load_controller' in \
        str(spawner['already_loaded'])
