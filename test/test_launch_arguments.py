"""The launch files' arguments and their start-up decisions, in every suite.

launch/launch_ros are on no package registry, so CI cannot run ``ros2 launch`` (the tests
marked ``launch`` do, on a ROS 2 install). What those live runs showed about our side is
checked here without them:

* each launch file declares exactly the arguments of its ``node_setups.*_arguments()``
  (read from its syntax tree by test/launch_syntax.py), and uses no other;
* each argument's default and choices are what the launch file's ``Usage:`` line and the
  README promise, and each default passes the check launch makes of it (a default outside
  the choices, or a boolean default ``IfCondition`` cannot read, would stop every launch);
  launch's rules are those recorded in test/data/launch_upstream.yaml;
* crane_x7.launch.py ``rviz:=true``: the line that says what rviz2 will lack (no ``/tf``, no
  ``/robot_description``) and how to get it;
* replay.launch.py: without robot_state_publisher installed, ``robot_state_publisher:=auto``
  says so at start and ``true`` ends the launch with the reason; ``player:=ros2`` without
  a ``ros2`` executable ends it with the reason; and the launch file hands those decisions
  (``node_setups.replay_tf``, ``replay_player``) to launch as they are;
* rviz2 and robot_state_publisher on the bundled URDF are written once
  (plag_ros/ros/launch_actions.py), and each launch file starts them under the conditions
  and with the remappings it did when it wrote them out;
* ``params_file:=`` (every launch file, default ''): the user's file goes to every plag_ros
  node after its bundled one and before the launch's own settings, and with the default
  each node gets exactly what it got before the argument existed; a path that is no
  parameter file ends the launch with the reason;
* ``namespace:=`` (every launch file, default ''): every node the launch starts is in the
  list of ``launch_actions.namespaced`` (the 5 s view check is not), a text that is no ROS
  namespace ends the launch with the reason (rmw's rules, checked against the installed
  rclpy), the view check looks in the namespace, a params_file section that would miss
  the namespaced node or an absolute name of another arm is refused, and a replay plays
  the bag's topics into the namespace, /clock aside;
* the console scripts' shebang is ``/usr/bin/env python3`` (setup.cfg), so a node runs the
  python3 first on PATH, whichever python ran colcon.
"""
from __future__ import annotations

import argparse
import ast
import configparser
import inspect
import re
from pathlib import Path

import pytest
import yaml
from launch_syntax import LAUNCH_FILES, launch_arguments, parse_launch
from ros_helpers import REPO

from plag_ros.ros import launch_actions, node_setups
from plag_ros.ros.node_setups import (
    NO_TF,
    check_params_file,
    own_params_file,
    parameter_layers,
    replay_player,
    replay_tf,
)

LAUNCH = yaml.safe_load((REPO / 'test' / 'data' / 'launch_upstream.yaml').read_text())
TABLES = {'sim.launch.py': node_setups.sim_arguments,
          'crane_x7.launch.py': node_setups.robot_arguments,
          'replay.launch.py': node_setups.replay_arguments,
          'torque.launch.py': node_setups.torque_arguments}
# What the launch files' docstrings and the README promise a user: name -> default
# (None: must be given).
PROMISED_DEFAULTS = {
    'sim.launch.py': {'control': 'false', 'rviz': 'false', 'params_file': '', 'namespace': ''},
    'crane_x7.launch.py': {'control': 'false', 'spawn_controller': 'true', 'rviz': 'false',
                           'robot_description_source': 'topic',
                           'controllers_file': 'config/crane_x7_controllers.yaml',
                           'robot_state_publisher': 'false', 'params_file': '',
                           'namespace': ''},
    'replay.launch.py': {'bag': None, 'rate': '1.0', 'loop': 'false', 'player': 'plag',
                         'rviz': 'false', 'control': 'false',
                         'robot_description_source': 'file', 'robot_state_publisher': 'auto',
                         'params_file': '', 'namespace': ''},
    'torque.launch.py': {'port': '/dev/ttyUSB0', 'control': 'false', 'rviz': 'false',
                         'robot_description_source': 'file', 'params_file': '',
                         'namespace': ''},
}


def _usage(path: Path) -> str:
    """The ``Usage: ``...```` text of a launch file's docstring, on one line."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ''
    found = re.search(r'Usage: ``(.+?)``', doc, re.S)
    assert found, f'{path.name}: no Usage line'
    return ' '.join(found.group(1).split())


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_each_launch_file_declares_the_arguments_of_node_setups(path):
    arguments = launch_arguments(path)
    assert arguments == TABLES[path.name]()
    names = [a.name for a in arguments]
    assert len(set(names)) == len(names), names
    _, declared, used = parse_launch(path)
    assert declared == set(names), f'{path.name}: declared {declared}'
    assert used <= declared, f'{path.name}: undeclared {used - declared}'


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_defaults_and_choices_are_the_promised_ones(path):
    arguments = {a.name: a for a in launch_arguments(path)}
    assert {n: a.default for n, a in arguments.items()} == PROMISED_DEFAULTS[path.name]
    usage = _usage(path)
    for name, argument in arguments.items():
        # every argument is in the Usage line; a required one outside brackets
        shown = re.search(rf'(\[?){name}:=(\S+?)\]?(?:\s|$)', usage)
        assert shown, f'{path.name}: {name} missing from the Usage line: {usage}'
        assert (shown.group(1) == '') == (argument.default is None), (name, usage)
        if argument.choices:
            assert set(shown.group(2).split('|')) == set(argument.choices), (name, usage)
            for choice in argument.choices:     # and the description names each choice
                assert f"'{choice}'" in argument.description, (name, choice)
    shipped = arguments.get('controllers_file')
    if shipped is not None:
        assert shipped.in_share and (REPO / shipped.default).is_file()


@pytest.mark.parametrize('release', sorted(LAUNCH['releases']))
def test_every_default_passes_the_checks_launch_makes(release):
    """launch's DeclareLaunchArgument refuses a default outside its choices, and its
    IfCondition refuses any string but the ones it knows; each release's rules as
    recorded."""
    facts = LAUNCH['releases'][release]
    assert facts['declare_launch_argument']['accepts_choices'], release
    true, false = (facts['if_condition'][k] for k in ('true', 'false'))
    fold = facts['if_condition']['case_insensitive']
    for path in LAUNCH_FILES:
        for argument in launch_arguments(path):
            if argument.choices:
                assert argument.default in argument.choices, (path.name, argument)
            if argument.boolean:
                value = argument.default.lower() if fold else argument.default
                assert value in true + false, (release, path.name, argument)
                # and the package reads it as launch does
                assert node_setups.is_true(argument.default) == (value in true)


@pytest.mark.parametrize('value', ['true', 'True', 'TRUE', '1', 'false', 'False', '0'])
def test_is_true_reads_a_boolean_as_if_condition_does(value):
    facts = LAUNCH['releases']['humble']['if_condition']
    assert node_setups.is_true(value) == (value.lower() in facts['true'])


def test_every_launch_configuration_the_launch_files_read_is_boolean_where_a_condition_is():
    """An argument read by IfCondition must be a boolean one (no choices list to check)."""
    for path in LAUNCH_FILES:
        text = path.read_text()
        booleans = {a.name for a in launch_arguments(path) if a.boolean}
        variables = dict(re.findall(r"(\w+) = LaunchConfiguration\('(\w+)'\)", text))
        for variable in re.findall(r'IfCondition\((\w+)\)', text):
            if variable in variables:
                assert variables[variable] in booleans, (path.name, variable)


# ----------------------------------------------------------------- replay's decisions
def test_replay_without_robot_state_publisher_says_so_at_start():
    tf = replay_tf('auto', installed=False)
    assert not tf.runs and tf.message == NO_TF
    assert 'robot_state_publisher is not installed' in NO_TF and '/tf' in NO_TF
    assert replay_tf('auto', installed=True) == node_setups.ReplayTf(True)
    assert replay_tf('true', installed=True) == node_setups.ReplayTf(True)
    for installed in (False, True):        # asked to leave it out: no word about it
        assert replay_tf('false', installed) == node_setups.ReplayTf(False)
    with pytest.raises(ValueError, match='robot_state_publisher:=true, and '
                                         'robot_state_publisher is not installed'):
        replay_tf('true', installed=False)
    with pytest.raises(ValueError, match="expected one of \\('auto', 'true', 'false'\\)"):
        replay_tf('sometimes', installed=True)


def test_replay_player_needs_ros2_only_for_ros2_bag_play():
    assert replay_player('plag', ros2_on_path=False) == 'plag'
    assert replay_player('ros2', ros2_on_path=True) == 'ros2'
    with pytest.raises(ValueError, match='player:=ros2 needs `ros2 bag play`.*use player:=plag'):
        replay_player('ros2', ros2_on_path=False)
    with pytest.raises(ValueError, match="player:='vlc'"):
        replay_player('vlc', ros2_on_path=True)


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    return next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name)


def test_replay_launch_hands_the_decisions_to_launch_as_they_are():
    """The launch file's OpaqueFunctions: the player from replay_player with PATH's ros2,
    robot_state_publisher from replay_tf with the ament index's answer, and the start-up
    line is the decision's own message, as a LogInfo."""
    tree = ast.parse((REPO / 'launch' / 'replay.launch.py').read_text())
    player = ast.unparse(_function(tree, '_player'))
    assert "replay_player(player.perform(context), ros2_on_path=shutil.which('ros2') is not " \
           'None)' in player
    tf = ast.unparse(_function(tree, '_tf'))
    assert "replay_tf(mode.perform(context), _installed('robot_state_publisher', " \
           "'robot_state_publisher'))" in tf
    state_publisher = _function(tree, '_state_publisher')
    first = state_publisher.body[1:3]      # after the docstring: the decision, then its use
    assert ast.unparse(first[0]) == 'tf = _tf(context, mode)'
    assert ast.unparse(first[1]) == ('if not tf.runs:\n    return [LogInfo(msg=tf.message)] '
                                     'if tf.message else []')
    # the launch's OpaqueFunctions are these two, with the arguments they read
    calls = {ast.unparse(k.value): ast.unparse(c) for c in ast.walk(tree)
             if isinstance(c, ast.Call) and c.func.__dict__.get('id') == 'OpaqueFunction'
             for k in c.keywords if k.arg == 'function'}
    assert set(calls) == {'_player', '_state_publisher'}, calls
    assert 'state_publisher' in calls['_state_publisher']


def test_console_scripts_run_the_python_on_path():
    """setup.cfg: the scripts colcon installs start with ``#!/usr/bin/env python3``."""
    config = configparser.ConfigParser()
    config.read(REPO / 'setup.cfg')
    assert config['build_scripts']['executable'] == '/usr/bin/env python3'
    # and where ament_python wants them: lib/<package>
    for section in ('develop', 'install'):
        key = 'script_dir' if section == 'develop' else 'install_scripts'
        assert config[section][key] == '$base/lib/plag_ros', section


@pytest.mark.parametrize(('tf', 'description', 'missing'), [
    (1, 1, None), (0, 1, '/tf'), (1, 0, '/robot_description'),
    (0, 0, '/tf or /robot_description')])
def test_crane_x7_launch_says_what_rviz2_will_lack(tf, description, missing):
    line = node_setups.view_inputs_line({'/tf': tf, '/robot_description': description})
    if missing is None:
        assert line == 'rviz2 inputs: /tf and /robot_description are published'
    else:
        assert line.startswith('rviz2 will show no arm and no Effort arrows: nothing '
                               f'publishes {missing}.'), line
        assert 'robot_state_publisher:=true' in line     # and how to get it
    # the launch file counts the publishers of exactly these topics, in its namespace, and
    # logs the line
    source = ast.unparse(_function(ast.parse((REPO / 'launch' / 'crane_x7.launch.py')
                                             .read_text()), 'check_view_inputs'))
    assert "inputs = view_inputs(namespace_of(LaunchConfiguration('namespace')." \
        'perform(context)))' in source
    assert 'view_inputs_line({topic: node.count_publishers(topic) for topic in inputs}, ' \
        'inputs)' in source and 'LogInfo(msg=view_inputs_line(' in source
    assert node_setups.VIEW_INPUTS == node_setups.view_inputs(None) == \
        ('/tf', '/robot_description')


def test_the_view_check_looks_in_the_launchs_namespace():
    """The launch's own node sits in the root: the names it counts are full ones."""
    inputs = node_setups.view_inputs('/arm1')
    assert inputs == ('/arm1/tf', '/arm1/robot_description')
    assert node_setups.view_inputs_line(dict.fromkeys(inputs, 1), inputs) == \
        'rviz2 inputs: /arm1/tf and /arm1/robot_description are published'
    line = node_setups.view_inputs_line({'/tf': 1, '/robot_description': 1}, inputs)
    assert 'nothing publishes /arm1/tf or /arm1/robot_description' in line
    assert '/tf remapped to tf' in line, line


# ------------------------------------------------- the nodes started beside plag_ros's
# What each launch file starts beside the plag_ros nodes: rviz2 and robot_state_publisher
# on the bundled URDF, under these launch configurations, with these remappings.
# /tf and /tf_static always remapped to the relative names: the same in the root, the
# namespace's own TF tree in one (launch_actions.TF_REMAPS).
_TF = [('/tf', 'tf'), ('/tf_static', 'tf_static')]
VIEWERS = {
    'crane_x7.launch.py': {'robot_state_publisher': ('IfCondition(state_publisher)', _TF),
                           'rviz2': ('IfCondition(rviz)', _TF)},
    'sim.launch.py': {'robot_state_publisher': (
        'IfCondition(rviz)',
        [*_TF, ('robot_description', 'robot_state_publisher/robot_description')]),
        'rviz2': ('IfCondition(rviz)', _TF)},
    'torque.launch.py': {'robot_state_publisher': ('IfCondition(rviz)', _TF),
                         'rviz2': ('IfCondition(rviz)', _TF)},
    'replay.launch.py': {'rviz2': ('IfCondition(rviz)', _TF)},
}


@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_rviz2_and_robot_state_publisher_are_written_once(path):
    """Each launch file takes them from plag_ros.ros.launch_actions (rviz_node,
    state_publisher_node) and writes neither out itself; replay.launch.py's own
    robot_state_publisher, on the bag's description, aside."""
    tree = ast.parse(path.read_text())
    written = {constant for call in ast.walk(tree) if isinstance(call, ast.Call)
               and getattr(call.func, 'id', '') == 'Node'
               for k in call.keywords if k.arg == 'package'
               for constant in [getattr(k.value, 'value', None)]}
    assert 'rviz2' not in written, path.name
    if path.name != 'replay.launch.py':
        assert 'robot_state_publisher' not in written, path.name
    nodes = parse_launch(path)[0]
    seen = {n.executable: (n.condition, n.remappings) for n in nodes
            if n.package in ('rviz2', 'robot_state_publisher') and n.files}
    assert seen == VIEWERS[path.name], path.name
    for node in nodes:
        if node.package == 'rviz2':
            assert node.name == 'plag_rviz' and node.files == ['plag_ros.rviz']
            # on the bag's clock in a replay only
            assert node.overrides == ({'use_sim_time': True} if path.name == 'replay.launch.py'
                                      else {}), path.name
        elif node.package == 'robot_state_publisher' and node.files:
            assert node.files == ['crane_x7.urdf'] and node.params == ['robot_description']


# ----------------------------------------------------------------------- params_file
SETUPS = {'sim.launch.py': node_setups.sim_setup(),
          'crane_x7.launch.py': node_setups.robot_setup('topic', 'controllers.yaml'),
          'torque.launch.py': node_setups.torque_setup(),
          'replay.launch.py': node_setups.replay_setup()}


@pytest.mark.parametrize('name', sorted(SETUPS))
def test_params_file_comes_after_the_bundled_file_and_before_the_launch_settings(name):
    for setup in SETUPS[name]:
        bundled = [setup.params_file]
        overrides = [dict(setup.overrides)] if setup.overrides else []
        # the default: the bundled file and the overrides, as plag_node made them before
        assert parameter_layers(setup) == parameter_layers(setup, None) == \
            bundled + overrides, setup.name
        assert parameter_layers(setup, '/home/me/mine.yaml') == \
            [*bundled, '/home/me/mine.yaml', *overrides], setup.name
    # every launch file declares the argument and hands it to each plag_ros node
    path = REPO / 'launch' / name
    assert 'params_file' in {a.name for a in launch_arguments(path)}
    calls = [ast.unparse(c) for c in ast.walk(ast.parse(path.read_text()))
             if isinstance(c, ast.Call) and getattr(c.func, 'id', '') == 'plag_node']
    assert calls == ['plag_node(setup, share, control, params_file, namespace)'], calls
    assert "params_file = LaunchConfiguration('params_file')" in path.read_text()


def test_the_simulators_switch_method_wins_over_a_params_file():
    """The launch's own settings come last: a user file cannot switch the simulator's
    controller through a controller manager it does not have."""
    impedance, = [s for s in node_setups.sim_setup() if s.name == 'plag_impedance']
    assert parameter_layers(impedance, 'mine.yaml')[-1]['switch.method'] == 'sim'


def test_params_file_is_checked_before_any_node_starts(tmp_path):
    assert own_params_file('') is None and own_params_file('  ') is None
    good = tmp_path / 'mine.yaml'
    good.write_text('plag_impedance:\n  ros__parameters:\n    stiffness: [5.0]\n')
    assert own_params_file(str(good)) == str(good)
    with pytest.raises(ValueError, match=r'params_file:=.*missing.yaml: no such file'):
        own_params_file(str(tmp_path / 'missing.yaml'))
    with pytest.raises(ValueError, match='no such file'):
        own_params_file(str(tmp_path))             # a directory
    for text in ('stiffness: [5.0\n', '- 1\n- 2\n', '', 'plag_impedance: 3\n'):
        bad = tmp_path / 'bad.yaml'
        bad.write_text(text)
        with pytest.raises(ValueError, match=r'params_file:=.*bad.yaml: not a'):
            own_params_file(str(bad))
    # the bundled files pass the check (a user's copy of one is a good start)
    for bundled in ('crane_x7.yaml', 'impedance.yaml', 'sim.yaml', 'torque_mode.yaml'):
        assert own_params_file(str(REPO / 'config' / bundled))


# ------------------------------------------------- what a params_file may not decide
def _file(tmp_path, text: str) -> str:
    path = tmp_path / 'mine.yaml'
    path.write_text(text)
    return own_params_file(str(path))


def _setup(setups, name):
    found, = [s for s in setups if s.name == name]
    return found


def test_a_params_file_cannot_silently_lose_to_a_launch_argument(tmp_path):
    """The launch's settings come after the file and win: a value there that differs is
    refused by name, not dropped (a port in the file while port:= opens /dev/ttyUSB0)."""
    torque = node_setups.torque_setup('/dev/ttyUSB0', 'file')
    driver = _setup(torque, 'plag_driver')
    at_launch = {'port': '/dev/ttyUSB0', 'robot_description_source': 'file'}
    mine = _file(tmp_path, 'plag_driver:\n  ros__parameters:\n    port: /dev/ttyACM0\n'
                           '    torque_limit: [1.0]\n')
    with pytest.raises(ValueError, match=r"plag_driver: port is '/dev/ttyACM0' there, but "
                                         r"this launch sets it to '/dev/ttyUSB0'"):
        check_params_file(mine, driver, at_launch)
    check_params_file(mine, driver, {**at_launch, 'port': '/dev/ttyACM0'})    # port:= agrees
    # a /** section reaches every node, and counts as theirs
    mine = _file(tmp_path, '/**:\n  ros__parameters:\n    robot_description_source: topic\n')
    for setup in torque:
        with pytest.raises(ValueError, match='robot_description_source'):
            check_params_file(mine, setup, at_launch)
    # launch text read as YAML, as the node gets it: 0 in the file is the sim's '0.0'
    dynamics = _setup(node_setups.sim_setup(), 'plag_dynamics')
    mine = _file(tmp_path, '/plag_dynamics:\n  ros__parameters:\n'
                           '    robot_description_timeout: 0\n    output_rate_hz: 50.0\n')
    check_params_file(mine, dynamics, {'robot_description_source': 'topic',
                                       'robot_description_timeout': '0.0'})


def test_torque_modes_effort_path_and_fault_policy_are_not_a_params_file_knob(tmp_path):
    impedance = _setup(node_setups.torque_setup(), 'plag_impedance')
    assert set(impedance.fixed) == set(node_setups.TORQUE_MODE_FIXED)
    # each is torque_mode.yaml's to say (its values are written there once)
    bundled = yaml.safe_load((REPO / 'config' / 'torque_mode.yaml').read_text())
    section = bundled['/**/plag_impedance']['ros__parameters']
    flat = {**section, **{f'switch.{k}': v for k, v in section['switch'].items()}}
    assert all(key in flat for key in node_setups.TORQUE_MODE_FIXED), flat.keys()
    # the driver starts in position mode, and a disable or a fault hands back to its hold
    driver = _setup(node_setups.torque_setup(), 'plag_driver')
    assert set(driver.fixed) == set(node_setups.DRIVER_FIXED)
    driver_section = bundled['/**/plag_driver']['ros__parameters']
    assert driver_section['active_arm_controller'] == flat['switch.fallback'] == \
        'crane_x7_arm_controller'
    for setup, text in [(driver, '/**:\n  ros__parameters:\n    active_arm_controller: '
                                 'plag_arm_effort_controller\n'),
                        (impedance, '/**/plag_impedance:\n  ros__parameters:\n    switch:\n'
                                    '      fallback: plag_arm_effort_controller\n')]:
        with pytest.raises(ValueError, match='is fixed by torque_mode.yaml'):
            check_params_file(_file(tmp_path, text), setup,
                              {'robot_description_source': 'file', 'port': '/dev/ttyUSB0'})
    # a file written for crane_x7.launch.py: the position path through controller_manager
    mine = _file(tmp_path, 'plag_impedance:\n  ros__parameters:\n'
                           '    command_interface: position\n    switch:\n'
                           '      method: controller_manager\n    stiffness: [5.0]\n')
    with pytest.raises(ValueError, match=r"command_interface \('position'\) is fixed by "
                                         r'torque_mode.yaml.*switch.method'):
        check_params_file(mine, impedance, {'robot_description_source': 'file'})
    # the same file is a good one for the robot's own bring-up, and gains alone pass here
    robot = _setup(node_setups.robot_setup(), 'plag_impedance')
    check_params_file(mine, robot, {'robot_description_source': 'topic'})
    gains = _file(tmp_path, 'plag_impedance:\n  ros__parameters:\n    stiffness: [5.0]\n')
    check_params_file(gains, impedance, {'robot_description_source': 'file'})


def test_plag_node_checks_the_file_against_what_the_launch_sets():
    source = inspect.getsource(launch_actions.plag_node)
    assert 'check_params_file(own, setup, {' in source
    assert "value.perform(context) if hasattr(value, 'perform') else value" in source


# ------------------------------------------------------------------------- namespace:=
@pytest.mark.parametrize('path', LAUNCH_FILES, ids=lambda p: p.name)
def test_every_node_the_launch_starts_is_in_its_namespace(path):
    """One ``namespaced(namespace, [...])`` holds every node, those an OpaqueFunction
    writes out too (replay's robot_state_publisher); the 5 s view check, whose node is
    launch_ros's own, and the argument checks stay outside."""
    nodes = parse_launch(path)[0]
    assert nodes and all(node.namespaced for node in nodes), \
        [(n.executable, n.namespaced) for n in nodes]
    tree = ast.parse(path.read_text())
    groups = [c for c in ast.walk(tree) if isinstance(c, ast.Call)
              and getattr(c.func, 'id', '') == 'namespaced']
    assert len(groups) == 1 and ast.unparse(groups[0].args[0]) == 'namespace', path.name
    assert "namespace = LaunchConfiguration('namespace')" in path.read_text()
    inside = {id(n) for n in ast.walk(groups[0])}
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and getattr(call.func, 'id', '') in (
                'TimerAction', 'DeclareLaunchArgument') or \
                ast.unparse(call).startswith('OpaqueFunction(function=check_controller_file'):
            assert id(call) not in inside, ast.unparse(call)


def test_namespaced_pushes_a_namespace_only_when_one_is_given():
    """'' (the default) leaves every node as it was: no PushRosNamespace, so no
    ``-r __ns:=/``; a namespace is pushed first in a scoped group."""
    source = inspect.getsource(launch_actions.namespaced)
    assert 'full = namespace_of(namespace.perform(context))' in source
    assert 'return [PushRosNamespace(full)] if full else []' in source
    assert 'return GroupAction([OpaqueFunction(function=push), *actions])' in source
    assert 'scoped=False' not in source


@pytest.mark.parametrize(('text', 'full'), [
    ('', None), ('  ', None), ('/', None), ('arm1', '/arm1'), ('/arm1', '/arm1'),
    ('/arm1/', '/arm1'), ('lab/arm_1', '/lab/arm_1'), ('_a', '/_a'),
    ('1arm', ValueError), ('/arm-1', ValueError), ('/a//b', ValueError), ('~/a', ValueError),
    ('arm1//', ValueError), ('//arm1', ValueError), ('/lab/2', ValueError),
    ('arm 1', ValueError)])
def test_namespace_of_follows_rmws_rules(text, full):
    """Checked against the installed rclpy (rmw_validate_namespace) where it gives one."""
    from rclpy.exceptions import InvalidNamespaceException
    from rclpy.validate_namespace import validate_namespace
    if full is ValueError:
        with pytest.raises(ValueError, match=r'namespace:=.* is not a ROS namespace'):
            node_setups.namespace_of(text)
        # and rmw refuses it too, made absolute
        with pytest.raises(InvalidNamespaceException):
            validate_namespace(text if text.startswith('/') else f'/{text}')
    else:
        assert node_setups.namespace_of(text) == full
        assert validate_namespace(full or '/')


def test_a_replay_plays_the_bag_into_its_namespace_but_clock():
    """The nodes of a namespaced replay listen in /arm1, rclpy's time source on the
    absolute /clock (ros2/rclpy humble b488272 time_source.py:26)."""
    from rclpy.time_source import CLOCK_TOPIC
    assert node_setups.CLOCK == CLOCK_TOPIC == '/clock'
    topics = ['/joint_states', '/clock', '/robot_description']
    assert node_setups.replay_remaps(topics, None) == []
    assert node_setups.replay_remaps(topics, '/arm1') == [
        '--remap', '/joint_states:=/arm1/joint_states',
        '/robot_description:=/arm1/robot_description']
    assert node_setups.replay_remaps(['/clock'], '/arm1') == []
    assert node_setups.namespaced_topic('/joint_states', '/arm1') == '/arm1/joint_states'
    assert node_setups.namespaced_topic('/joint_states', None) == '/joint_states'
    assert node_setups.namespaced_topic('/clock', '/arm1') == '/clock'
    # the launch file hands the namespace to either player, checked by namespace_of
    source = ast.unparse(_function(ast.parse((REPO / 'launch' / 'replay.launch.py')
                                             .read_text()), '_player'))
    assert 'full = namespace_of(namespace.perform(context))' in source
    assert '*replay_remaps(_bag_topics(bag.perform(context)) if full else [], full)' in source
    assert "*(['--namespace', full] if full else [])" in source
    # and plag-ros replay has the option
    from plag_ros.apps import replay
    parser = argparse.ArgumentParser(prog='plag-ros replay')
    replay.configure(parser)
    assert parser.parse_args(['bag', '--namespace', 'arm1']).namespace == 'arm1'


def test_a_namespaced_ros2_replay_of_a_bag_without_listable_topics_does_not_play(tmp_path):
    """Without its --remap arguments ros2 bag play would publish the bag's absolute topics
    (/crane_x7_arm_controller/joint_trajectory among them) in the root namespace: in a
    namespace an unreadable bag ends the launch with the reason; in the root nothing
    changes (the player reports the bag)."""
    with pytest.raises(ValueError, match=r'namespace:=arm1 player:=ros2.*b: no bag.*player:=plag'):
        node_setups.replay_remaps('b: no bag', '/arm1')
    assert node_setups.replay_remaps('b: no bag', None) == []
    # the launch file's _bag_topics gives the reason, not [], for a bag it cannot open
    tree = ast.parse((REPO / 'launch' / 'replay.launch.py').read_text())
    handler, = [h for h in ast.walk(_function(tree, '_bag_topics'))
                if isinstance(h, ast.ExceptHandler)]
    assert ast.unparse(handler.type) == 'BagError' and handler.name == 'err'
    returned, = [r for r in ast.walk(handler) if isinstance(r, ast.Return)]
    assert ast.unparse(returned.value) == "f'{path}: {err}'"


def test_a_params_file_must_reach_the_namespaced_node(tmp_path):
    """Under namespace:=arm1 a bare ``plag_impedance:`` section reaches /plag_impedance
    only: the node would start without the file's values. ``/**/`` reaches it."""
    robot = _setup(node_setups.robot_setup(), 'plag_impedance')
    at_launch = {'robot_description_source': 'topic'}
    for key in ('plag_impedance', '/plag_impedance'):
        mine = _file(tmp_path, f'{key}:\n  ros__parameters:\n    stiffness: [5.0]\n')
        check_params_file(mine, robot, at_launch)                  # the root: fine
        with pytest.raises(ValueError, match=rf"in namespace /arm1: its section '{key}' does "
                                             r'not reach /arm1/plag_impedance \(key it '
                                             r'/\*\*/plag_impedance\)'):
            check_params_file(mine, robot, at_launch, '/arm1')
    for key in ('/**/plag_impedance', '/arm1/plag_impedance', '/**'):
        mine = _file(tmp_path, f'{key}:\n  ros__parameters:\n    stiffness: [5.0]\n')
        check_params_file(mine, robot, at_launch, '/arm1')
    # another arm's section in a shared file is that arm's business
    mine = _file(tmp_path, '/arm2/plag_impedance:\n  ros__parameters:\n    stiffness: [5.0]\n')
    check_params_file(mine, robot, at_launch, '/arm1')


def test_a_params_file_cannot_switch_another_arm(tmp_path):
    """A copy of a root file's absolute /controller_manager would switch the root arm while
    /arm1 is commanded: refused at launch (the node refuses it at start too)."""
    robot = _setup(node_setups.robot_setup(), 'plag_impedance')
    at_launch = {'robot_description_source': 'topic'}
    mine = _file(tmp_path, '/**/plag_impedance:\n  ros__parameters:\n    switch:\n'
                           '      controller_manager: /controller_manager\n'
                           '    command:\n      topic: /arm1/plag_arm_position_controller/'
                           'commands\n')
    check_params_file(mine, robot, at_launch)
    with pytest.raises(ValueError, match=r"switch.controller_manager \('/controller_manager'\) "
                                         r"is another arm's \(give a relative name\)"):
        check_params_file(mine, robot, at_launch, '/arm1')
    assert set(node_setups.NAMESPACED_NAMES) == {
        'command.topic', 'command.controller', 'switch.controller_manager', 'switch.sim_node',
        'switch.driver_node'}


def test_plag_node_checks_the_file_in_the_launchs_namespace():
    source = inspect.getsource(launch_actions.plag_node)
    assert 'namespace_of(namespace.perform(context)))' in source
