"""plag_ros in a namespace (``/arm1``): its names and parameter files are the arm's own.

Two arms on one graph run one bring-up each in its own namespace (issue 51). So every name
a node talks to by default is relative and rcl expands it in the node's namespace: in the
root each is exactly the name it was when they were absolute, under ``-r __ns:=/arm1`` it
is the arm's own; ``/diagnostics`` and ``/clock`` stay absolute. The names are expanded by
the installed rcl (rclpy.expand_topic_name, no graph needed). A parameter file's section
reaches a node when its key, as rclpy matches it, matches the node's full name: a bare
``plag_impedance:`` reaches ``/plag_impedance`` only, so every bundled section is keyed
``/**/<node>:``. Those rules, and how the spawner reads its ``-c`` and its
``--param-file``, are upstream's, recorded with their commits in
test/data/namespace_upstream.yaml.

The impedance node refuses a name that leaves its namespace (a copied file's
``/controller_manager`` would switch another arm's controllers): ``foreign_names``.
"""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
import yaml
from rclpy.expand_topic_name import expand_topic_name
from ros_helpers import REPO

from plag_ros.core.control import settings as control_settings
from plag_ros.core.control.settings import ImpedanceSettings, SwitchSettings
from plag_ros.ros import interfaces

FACTS = yaml.safe_load((REPO / 'test' / 'data' / 'namespace_upstream.yaml').read_text())
CONFIG = REPO / 'config'
# (crane_x7_controllers.yaml is keyed for the root: the launch re-keys it in a namespace)
PARAMETER_FILES = ('crane_x7.yaml', 'impedance.yaml', 'sim.yaml', 'torque_mode.yaml')
ARM = '/arm1'
# torque mode's effort path (its fault policy is the only one ImpedanceSettings admits there)
TORQUE_MODE = {'command_interface': 'effort', 'switch.method': 'driver',
               'resume_after_fault': False}


def resolve(name: str, namespace: str, node: str = 'plag_impedance') -> str:
    """``name`` as rcl expands it for ``node`` in ``namespace``."""
    return expand_topic_name(name, node, namespace)


def _section(file: str, node: str) -> dict:
    """The one section of a bundled file for ``node``, whatever its key."""
    content = yaml.safe_load((CONFIG / file).read_text())
    found = [section['ros__parameters'] for key, section in content.items()
             if key.rsplit('/', 1)[-1] == node]
    assert len(found) == 1, (file, node, list(content))
    return found[0]


def _shipped_switch(file: str) -> dict:
    return _section(file, 'plag_impedance').get('switch', {})


def _names() -> dict[str, tuple[str, str]]:
    """what -> (the name as the package gives it, today's name in the root)."""
    switch = SwitchSettings()
    from plag_ros.ros.controller_switch import ControllerSwitch
    defaults = {k: p.default for k, p in
                inspect.signature(ControllerSwitch.__init__).parameters.items()}
    names = {
        'FORWARD_COMMAND_TOPIC': (control_settings.FORWARD_COMMAND_TOPIC,
                                  '/plag_arm_position_controller/commands'),
        'TRAJECTORY_COMMAND_TOPIC': (control_settings.TRAJECTORY_COMMAND_TOPIC,
                                     '/crane_x7_arm_controller/joint_trajectory'),
        'EFFORT_COMMAND_TOPIC': (control_settings.EFFORT_COMMAND_TOPIC,
                                 '/plag_arm_effort_controller/commands'),
        'switch.controller_manager': (switch.controller_manager, '/controller_manager'),
        'switch.sim_node': (switch.sim_node, '/plag_sim'),
        'switch.driver_node': (switch.driver_node, '/plag_driver'),
        'impedance.yaml switch.controller_manager': (
            _shipped_switch('impedance.yaml')['controller_manager'], '/controller_manager'),
        'impedance.yaml switch.sim_node': (_shipped_switch('impedance.yaml')['sim_node'],
                                           '/plag_sim'),
        'impedance.yaml switch.driver_node': (
            _shipped_switch('impedance.yaml')['driver_node'], '/plag_driver'),
        'torque_mode.yaml switch.driver_node': (
            _shipped_switch('torque_mode.yaml')['driver_node'], '/plag_driver'),
        'ControllerSwitch manager': (defaults['manager'], '/controller_manager'),
        'ControllerSwitch sim_node': (defaults['sim_node'], '/plag_sim'),
        'ControllerSwitch driver_node': (defaults['driver_node'], '/plag_driver'),
    }
    for display, topic in _rviz_topics().items():
        names[f'plag_ros.rviz {display}'] = (topic, {
            'RobotModel': '/robot_description'}.get(display, f'/plag_dynamics/{display}'))
    return names


def _rviz_topics() -> dict[str, str]:
    """Display -> its topic in config/plag_ros.rviz (RobotModel: the description's)."""
    config = yaml.safe_load((CONFIG / 'plag_ros.rviz').read_text())
    topics = {}
    for display in config['Visualization Manager']['Displays']:
        kind = display['Class'].rsplit('/', 1)[-1]
        if kind == 'RobotModel':
            topics[kind] = display['Description Topic']['Value']
        elif 'Topic' in display:
            topics[{'Effort': 'joint_states', 'MarkerArray': 'markers',
                    'Image': 'partial_image'}[kind]] = display['Topic']['Value']
    assert len(topics) == 4, topics
    return topics


@pytest.mark.parametrize('what', list(_names()))
def test_every_default_name_is_todays_in_the_root_and_the_arms_own_in_a_namespace(what):
    name, today = _names()[what]
    assert resolve(name, '/') == today, what
    assert resolve(name, ARM) == f'{ARM}{today}', what


@pytest.mark.parametrize('node', list(interfaces.NODE_INTERFACES))
def test_every_endpoint_of_the_table_is_in_the_nodes_namespace_but_diagnostics(node):
    """The interfaces table (test_interfaces holds it to the running nodes) under /arm1:
    every topic and service but /diagnostics is the arm's own, for every command path."""
    cases = [ImpedanceSettings.from_values(values) for values in (
        {}, {'switch.method': 'sim'}, {'command.type': 'trajectory'},
        {'command_interface': 'effort'}, TORQUE_MODE)] if node == 'plag_impedance' else [None]
    for settings in cases:
        for endpoint in interfaces.NODE_INTERFACES[node]:
            name = endpoint.name if settings is None else endpoint.resolved_name(settings)
            if '{' in name:     # another node's setting (the simulator's pace_topic)
                continue
            full = resolve(name.replace('<body>', 'world'), ARM, node)
            if endpoint.name == '/diagnostics':      # kept: the aggregator listens there
                assert full == '/diagnostics'
            else:
                assert full.startswith(f'{ARM}/'), (node, endpoint.name, full)


def test_the_kept_absolute_names_are_the_plans():
    """/clock is rclpy's own (two replays on one graph need two domains)."""
    from rclpy.time_source import CLOCK_TOPIC
    assert CLOCK_TOPIC == '/clock'
    kept = {e.name for endpoints in interfaces.NODE_INTERFACES.values() for e in endpoints
            if e.name.startswith('/')}
    assert kept == {'/diagnostics'}, kept


def test_recorded_expansions_are_what_rcl_does():
    for name, node, namespace, full in FACTS['expansion']:
        assert resolve(name, namespace, node) == full, (name, namespace)


# --------------------------------------------------------------------- the spawner
def _spawner_controller_manager(value: str, namespace: str) -> str:
    """The controller manager the spawner asks, by its rule (namespace_upstream.yaml)."""
    if value.startswith('/'):
        return value
    return f'{namespace}/{value}' if namespace != '/' else f'/{value}'


def test_the_spawner_asks_the_controller_manager_of_its_own_namespace():
    for value, namespace, asked in FACTS['spawner_controller_manager']['cases']:
        assert _spawner_controller_manager(value, namespace) == asked
    tree = ast.parse((REPO / 'launch' / 'crane_x7.launch.py').read_text())
    spawner, = [c for c in ast.walk(tree) if isinstance(c, ast.Call)
                and any(k.arg == 'executable' and getattr(k.value, 'value', None) == 'spawner'
                        for k in c.keywords)]
    arguments, = [k.value for k in spawner.keywords if k.arg == 'arguments']
    texts = [getattr(e, 'value', None) for e in arguments.elts]
    assert '-n' not in texts and '--namespace' not in texts     # refused with __ns
    flag = next(i for i, t in enumerate(texts) if t in ('-c', '--controller-manager'))
    value = texts[flag + 1]
    assert _spawner_controller_manager(value, '/') == '/controller_manager'
    assert _spawner_controller_manager(value, ARM) == f'{ARM}/controller_manager'


# --------------------------------------------------------- the parameter files' sections
def test_section_keys_reach_the_nodes_as_rclpy_matches_them():
    from plag_ros.ros.controller_file import section_reaches
    for key, full, reaches in FACTS['parameter_sections']['rclpy']['cases']:
        assert section_reaches(key, full) is reaches, (key, full)


@pytest.mark.parametrize('file', PARAMETER_FILES)
def test_every_bundled_section_reaches_its_node_in_the_root_and_in_a_namespace(file):
    """A bare ``plag_impedance:`` reaches /plag_impedance only: a namespaced node would
    start on code defaults without a word."""
    from plag_ros.ros.controller_file import section_reaches
    content = yaml.safe_load((CONFIG / file).read_text())
    assert content
    for key in content:
        node = key.rsplit('/', 1)[-1]
        for namespace in ('', ARM, '/lab/arm1'):
            assert section_reaches(key, f'{namespace}/{node}'), (file, key, namespace)


def _release_cases(namespace: str, key: str) -> list[tuple[str, bool]]:
    """The recorded releases and whether each takes ``key`` for the controller spawned in
    ``namespace``."""
    from plag_ros.ros.controller_file import CONTROLLER
    return [(release, works) for release, ns, template, works
            in FACTS['controller_section_keys']['cases']
            if ns.format(ns=ARM) == namespace and
            template.format(controller=CONTROLLER, ns=ARM) == key]


def test_the_spawner_gets_a_key_every_supported_release_takes():
    """The root's file keeps its bare key (a /**/ key fails on Humble <= 2.37.0 and 2.43.x
    and on Jazzy < 4.19.0); in a namespace the spawner gets the full name, which every
    release from the recorded minimum takes, and rcl gives the controller's node."""
    from plag_ros.ros.controller_file import CONTROLLER, section_reaches, spawner_key
    facts = FACTS['controller_section_keys']
    content = yaml.safe_load((CONFIG / 'crane_x7_controllers.yaml').read_text())
    assert set(content) == {spawner_key(None)} == {spawner_key('/')} == {CONTROLLER}
    root = _release_cases('/', CONTROLLER)
    assert root and all(works for _, works in root), root
    assert not all(works for _, works in _release_cases('/', f'/**/{CONTROLLER}'))
    key = spawner_key(ARM)
    cases = _release_cases(ARM, key)
    assert key == f'{ARM}/{CONTROLLER}' and cases
    old = {'humble <= 2.37.0', 'jazzy 4.10.0-4.14.0'}     # below namespace_minimum
    assert facts['namespace_minimum'] == {'humble': '2.38.0', 'jazzy': '4.15.0'}
    assert {release for release, works in cases if not works} == old
    spawner = FACTS['parameter_sections']['spawner']
    assert key in [k.format(controller=CONTROLLER, namespace=ARM) for k in spawner['keys']]
    assert key != CONTROLLER and section_reaches(key, f'{ARM}/{CONTROLLER}')


def test_a_namespaced_spawner_gets_a_copy_of_the_section_keyed_by_its_full_name(tmp_path):
    from plag_ros.ros.controller_file import (
        CONTROLLER,
        read_controller_file,
        spawner_copy,
        spawner_file,
    )
    shipped = CONFIG / 'crane_x7_controllers.yaml'
    section = yaml.safe_load(shipped.read_text())[CONTROLLER]
    copy = spawner_copy(shipped, ARM)
    assert copy == {f'{ARM}/{CONTROLLER}': section}
    # in the root the spawner gets the file itself, as before the namespace argument
    assert spawner_file(str(shipped), None) == str(shipped)
    written = Path(spawner_file(str(shipped), ARM))
    try:
        assert written != shipped and yaml.safe_load(written.read_text()) == copy
        fields = ('type', 'joints', 'interface_name')
        assert [getattr(read_controller_file(written, namespace=ARM), f) for f in fields] == \
            [getattr(read_controller_file(shipped), f) for f in fields]
    finally:
        written.unlink()


@pytest.mark.parametrize('key, namespace, usable', [
    ('{c}', None, True),
    ('/**/{c}', None, False),        # the root's check is the bare key's, as before
    ('/{c}', None, False),
    ('{c}', ARM, True),              # re-keyed for the spawner
    ('/**/{c}', ARM, True),
    ('/arm1/{c}', ARM, True),
    ('/{c}', ARM, False),            # reaches the root's controller only
    ('/arm2/{c}', ARM, False),
    ('/arm1/{c}', None, False),
])
def test_the_launch_refuses_a_controllers_file_that_misses_the_namespaced_controller(
        tmp_path, key, namespace, usable):
    """Without the check the spawner fails well after start ("Missing namespace" or no
    parameters for the controller); the refusal says how to key the section."""
    from plag_ros.ros.controller_file import CONTROLLER, ControllerFileError, read_controller_file
    section = yaml.safe_load((CONFIG / 'crane_x7_controllers.yaml').read_text())[CONTROLLER]
    path = tmp_path / 'controllers.yaml'
    path.write_text(yaml.safe_dump({key.format(c=CONTROLLER): section}))
    if usable:
        assert read_controller_file(path, namespace=namespace).joints == \
            tuple(section['ros__parameters']['joints'])
    elif namespace:
        with pytest.raises(ControllerFileError, match=(
                rf'no section for {ARM}/{CONTROLLER} \(namespace:=arm1\): key it '
                rf'`{CONTROLLER}:` .* or `{ARM}/{CONTROLLER}:`')):
            read_controller_file(path, namespace=namespace)
    else:
        with pytest.raises(ControllerFileError, match=rf'has no {CONTROLLER}: ros__parameters'):
            read_controller_file(path, namespace=namespace)
    # crane_x7.launch.py checks the file for its namespace
    import ast
    tree = ast.parse((REPO / 'launch' / 'crane_x7.launch.py').read_text())
    check, = [f for f in tree.body if isinstance(f, ast.FunctionDef)
              and f.name == 'check_controller_file']
    assert "namespace=namespace_of(LaunchConfiguration('namespace')" in ast.unparse(check)


# ------------------------------------------------------- a name outside the namespace
def test_foreign_names_are_those_outside_the_nodes_namespace():
    from plag_ros.core.control.settings import check_own_namespace, foreign_names
    names = {'switch.controller_manager': '/controller_manager/switch_controller',
             'command.topic': '/arm1/plag_arm_position_controller/commands',
             'command.controller': '/arm10/plag_arm_position_controller/get_parameters'}
    assert foreign_names('/', names) == []
    assert foreign_names('/arm1', names) == [
        'switch.controller_manager (/controller_manager/switch_controller)',
        'command.controller (/arm10/plag_arm_position_controller/get_parameters)']
    with pytest.raises(ValueError, match=r"switch.controller_manager \(/controller_manager/"
                                         r"switch_controller\).*outside this node's namespace"
                                         r' /arm1'):
        check_own_namespace('/arm1', names)
    check_own_namespace('/', names)


SWITCH_CASES = {
    'forward, controller manager': ({}, 'switch.controller_manager'),
    'forward, simulator': ({'switch.method': 'sim'}, 'switch.sim_node'),
    'trajectory': ({'command.type': 'trajectory'}, None),
    'effort to plag_driver': (TORQUE_MODE, 'switch.driver_node'),
}


@pytest.mark.parametrize('case', list(SWITCH_CASES))
def test_the_impedance_node_refuses_an_old_absolute_switch_target_in_a_namespace(case):
    """The names the node checks at start: its defaults stay in /arm1; an absolute one of
    a copied root file (today's /controller_manager ...) is refused by parameter."""
    from plag_ros.core.control.settings import foreign_names
    values, switch_key = SWITCH_CASES[case]
    settings = ImpedanceSettings.from_values(values)
    names = settings.ros_names()
    assert ('command.topic' in names) and (switch_key is None or switch_key in names), names

    def resolved(s: ImpedanceSettings, namespace: str) -> dict[str, str]:
        return {k: resolve(n, namespace) for k, (n, _) in s.ros_names().items()}

    assert foreign_names(ARM, resolved(settings, ARM)) == []
    assert foreign_names('/', resolved(settings, '/')) == []
    old = {'command.topic': '/' + settings.command_topic.lstrip('/')}
    if switch_key is not None:
        old[switch_key] = '/' + getattr(settings.switch, switch_key.split('.')[1])
    rooted = ImpedanceSettings.from_values({**values, **old})
    assert sorted(k.split(' ')[0] for k in foreign_names(ARM, resolved(rooted, ARM))) == \
        sorted(old), case


# ----------------------------------------------------------------- the hand-back hints
class _Client:
    srv_name = 'unresolved'
    callback_group = None

    def service_is_ready(self) -> bool:
        return False


class _Node:
    """What ControllerSwitch asks of its node, for a node in ``namespace``."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace

    def resolve_service_name(self, name: str) -> str:
        return resolve(name, self.namespace)

    def create_client(self, *args, **kwargs) -> _Client:
        return _Client()


@pytest.mark.parametrize(('namespace', 'option'), [
    ('/', ''), (ARM, f' -c {ARM}/controller_manager')])
def test_the_switch_hints_name_the_namespaced_controller_manager(namespace, option):
    """A ``ros2 control`` line copied from /arm1's log must switch /arm1's arm (without
    -c it switches the root's /controller_manager)."""
    import asyncio

    from plag_ros.ros.controller_switch import ControllerSwitch, switch_command
    switch = ControllerSwitch(_Node(namespace), 'controller_manager',
                              controller='plag_arm_position_controller',
                              fallback='crane_x7_arm_controller')
    assert switch.manager == resolve('controller_manager', namespace)
    assert switch_command('a', 'b', switch.manager).endswith(f'--strict{option}')
    # without controller_manager_msgs (CI): the hint names the manager too
    ok, message = asyncio.run(switch.activate())
    assert not ok
    if switch.error:
        assert f'--strict{option}`' in message, message
    else:
        assert f'{resolve("controller_manager", namespace)}/switch_controller not ' \
            'discovered' in message, message


def test_every_switch_hint_passes_the_controller_manager():
    """switch_command's default is the root's controller manager: every call in plag_ros
    names the one in use."""
    calls = []
    for path in (REPO / 'plag_ros').rglob('*.py'):
        for call in ast.walk(ast.parse(path.read_text())):
            if isinstance(call, ast.Call) and getattr(call.func, 'id', '') == 'switch_command':
                calls.append((path.name, ast.unparse(call)))
    assert calls
    for where, call in calls:
        assert call.count(',') >= 2, (where, call)


def test_node_section_merges_every_section_that_reaches_the_node_as_rcl_does():
    """Parameter by parameter, nested groups too, in the file's order; a section for
    another namespace or node is left out."""
    from plag_ros.ros.controller_file import node_section
    content = {'/**': {'ros__parameters': {'switch': {'timeout_s': 2.0, 'method': 'none'}}},
               '/**/plag_impedance': {'ros__parameters': {'switch': {'method': 'sim'}}},
               '/arm2/plag_impedance': {'ros__parameters': {'stiffness': [1.0]}},
               'plag_impedance': {'ros__parameters': {'stiffness': [2.0]}}}
    assert node_section(content, 'plag_impedance', ARM) == {
        'switch': {'timeout_s': 2.0, 'method': 'sim'}}
    assert node_section(content, 'plag_impedance') == {
        'switch': {'timeout_s': 2.0, 'method': 'sim'}, 'stiffness': [2.0]}
    assert node_section(content, 'plag_dynamics', ARM) == {
        'switch': {'timeout_s': 2.0, 'method': 'none'}}
    assert node_section({'plag_dynamics': {'ros__parameters': {}}}, 'plag_impedance') is None


def _switch(method: str, namespace: str):
    from plag_ros.ros.controller_switch import ControllerSwitch
    return ControllerSwitch(_Node(namespace), method, controller='plag_arm_position_controller',
                            fallback='crane_x7_arm_controller')


@pytest.mark.parametrize('namespace', ['/', ARM])
def test_the_by_hand_switch_names_what_switches_for_each_method(namespace):
    """Only the controller_manager method has a controller manager to give ``ros2 control``;
    the simulator and the bus driver switch by their ``active_arm_controller`` parameter,
    set on the node's full name so that the line reaches this arm's node."""
    from plag_ros.ros.controller_switch import switch_command
    back = ('crane_x7_arm_controller', 'plag_arm_position_controller')
    assert _switch('controller_manager', namespace).by_hand(*back) == switch_command(
        *back, resolve('controller_manager', namespace))
    for method, node in (('sim', 'plag_sim'), ('driver', 'plag_driver')):
        assert _switch(method, namespace).by_hand(*back) == (
            f'ros2 param set {resolve(node, namespace)} active_arm_controller '
            'crane_x7_arm_controller')
    assert resolve('plag_driver', namespace) == ('/plag_driver' if namespace == '/'
                                                 else f'{ARM}/plag_driver')
    assert _switch('none', namespace).by_hand(*back) == ''


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def error(self, text: str) -> None:
        self.lines.append(text)


@pytest.mark.parametrize(('method', 'hint'), [
    ('driver', f'`ros2 param set {ARM}/plag_driver active_arm_controller '
               'crane_x7_arm_controller`'),
    ('sim', f'`ros2 param set {ARM}/plag_sim active_arm_controller crane_x7_arm_controller`'),
    ('controller_manager', f'--activate crane_x7_arm_controller --strict -c {ARM}/'
                           'controller_manager`')])
def test_the_hand_back_logged_without_a_context_follows_the_switch_method(method, hint):
    """In torque mode (switch.method driver) no controller manager runs: the hand-back
    line logged when the context is gone sets the bus driver's parameter instead."""
    from types import SimpleNamespace

    from plag_ros.ros.arm_handover import ArmHandover
    log = _Log()
    handover = SimpleNamespace(
        own=SimpleNamespace(switched=True, switching=False), switch=_switch(method, ARM),
        log=log, node=SimpleNamespace(context=SimpleNamespace(ok=lambda: False)))
    handover.not_handed_back = lambda why: ArmHandover.not_handed_back(handover, why)
    assert ArmHandover.abandoned(handover)
    assert len(log.lines) == 1 and log.lines[0].endswith(hint), log.lines


@pytest.mark.parametrize(('method', 'option'), [
    ('controller_manager', f' -c {ARM}/controller_manager'),
    ('none', f' -c {ARM}/controller_manager'), ('sim', ''), ('driver', '')])
def test_the_unload_hint_names_the_namespaced_controller_manager(method, option):
    """switch.method none switches by hand on a real controller manager: the
    ``unload_controller`` line must reach /arm1's too."""
    from types import SimpleNamespace

    from plag_ros.ros.arm_handover import ArmHandover
    handover = SimpleNamespace(switch=_switch(method, ARM))
    assert ArmHandover._manager_option(handover) == option


def _prose(path) -> list[tuple[int, str]]:
    """The string literals of ``path`` that hold prose (white space) and are no docstring."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docstrings and any(c.isspace() for c in node.value)]


def test_no_message_names_a_service_by_its_private_name():
    """A log line or an answer telling an operator to call ``~/enable`` or
    ``~/clear_fault`` gives him a name that, typed by hand, reaches no node (or the root's
    under two arms): every message of the nodes and of the hand-over names the full one.
    (The names given to create_service and the like have no white space.)"""
    ros = REPO / 'plag_ros' / 'ros'
    paths = [*sorted((ros / 'nodes').glob('*.py')), ros / 'arm_handover.py',
             ros / 'controller_switch.py']
    private = [(path.name, line, text) for path in paths for line, text in _prose(path)
               if '~/' in text]
    assert not private, private
