"""Launch files, parameter files and the rviz config, checked without ros2 launch or rviz2.

These checks need neither ``launch``/``launch_ros`` nor rviz2 (test_launch_live.py runs the
launch files under the real launch_ros where it is importable): the launch files are read
as Python syntax trees. A launch file writes a node out (``Node(package=..., ...)``) or
builds it from the shared description of plag_ros/ros/node_setups.py (``sim_setup()``,
``robot_setup(...)``, turned into ``Node`` actions by a helper of the launch file, whose
syntax tree shows which field of a setup goes where); either way, every plag_ros
executable started must be a console script of setup.py whose module exists, every
parameter file passed must exist and address the node by the name it is given, every
launch configuration must be declared, and every parameter set on top of the files or in
the YAML files must be one the node declares. ``plag-ros sim``/``plag-ros run`` start the
same nodes with the same files and overrides as the launch files. The
declared names come from the real nodes: each is started over DDS (ROS_DOMAIN_ID 13) and
asked through its ``list_parameters`` service. The rviz config must be YAML whose topics
are published, with the display's message type, by those running nodes.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from parameter_files import flatten
from rcl_interfaces.srv import ListParameters
from ros_helpers import REPO, RosClient, start_node

from plag_ros.apps.bringup import SIM_CONTROL_DEMO, NodeSpec, robot_specs, sim_specs
from plag_ros.ros import node_setups
from plag_ros.ros.controller_file import CONTROLLER, read_controller_file

DOMAIN_ID = 13
LAUNCH_FILES = sorted((REPO / 'launch').glob('*.launch.py'))    # every one, generic checks
OWN_LAUNCH_FILES = [REPO / 'launch' / 'crane_x7.launch.py', REPO / 'launch' / 'sim.launch.py']
RVIZ = REPO / 'config' / 'plag_ros.rviz'
# Default node names (the name each node gives itself) by executable.
NODE_NAMES = {'dynamics_node': 'plag_dynamics', 'sim_node': 'plag_sim',
              'impedance_node': 'plag_impedance'}
RVIZ_TYPES = {
    'rviz_default_plugins/RobotModel': 'std_msgs/msg/String',
    'rviz_default_plugins/Effort': 'sensor_msgs/msg/JointState',
    'rviz_default_plugins/MarkerArray': 'visualization_msgs/msg/MarkerArray',
    'rviz_default_plugins/Image': 'sensor_msgs/msg/Image',
}


@dataclass
class LaunchNode:
    package: str
    executable: str
    name: str | None
    files: list[str] = field(default_factory=list)        # string constants ending .yaml/.rviz
    params: list[str] = field(default_factory=list)       # names set on top of the files
    condition: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)   # literal values (else source)
    remappings: list[tuple[str, str]] = field(default_factory=list)


def _const(node: ast.AST | None):
    return node.value if isinstance(node, ast.Constant) else None


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _call_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, 'attr', '')


def _literal(node: ast.AST):
    """A literal's value, else its source text (a launch substitution, say)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


class _Resolve(ast.NodeTransformer):
    """Replaces names by expressions (a helper's arguments by the caller's values)."""

    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.names.get(node.id, node)


def _resolved(node: ast.AST, names: dict[str, ast.expr]) -> str:
    return ast.unparse(_Resolve(names).visit(ast.parse(ast.unparse(node), mode='eval')))


def _setup_nodes(tree: ast.Module, generator: ast.GeneratorExp,
                 local: dict[str, ast.expr], path: Path) -> list[LaunchNode]:
    """The nodes of ``*(helper(setup, ...) for setup in node_setups.X(...))``.

    The setups are the shared description's own; what the helper makes of each setup is
    read from its syntax tree: ``setup.<field>`` in each ``Node`` argument.
    """
    imported = {alias.asname or alias.name for n in tree.body
                if isinstance(n, ast.ImportFrom) and n.module == 'plag_ros.ros.node_setups'
                for alias in n.names}
    source = generator.generators[0].iter
    assert isinstance(source, ast.Call) and _call_name(source) in imported, (
        f'{path.name}: nodes from {ast.unparse(source)}, not from plag_ros.ros.node_setups')
    arguments = [_literal(a) if isinstance(a, ast.Constant) else _resolved(a, local)
                 for a in source.args]
    setups = getattr(node_setups, _call_name(source))(*arguments)
    call = generator.elt
    assert isinstance(call, ast.Call), ast.unparse(call)
    helper = next(f for f in tree.body
                  if isinstance(f, ast.FunctionDef) and f.name == _call_name(call))
    variable = generator.generators[0].target.id
    params = [a.arg for a in helper.args.args]
    assert params[0] == variable, f'{path.name}: {helper.name} takes the setup first'
    at_call = dict(zip(params[1:], (ast.parse(_resolved(a, local), mode='eval').body
                                    for a in call.args[1:]), strict=True))
    made, = [n for n in ast.walk(helper) if isinstance(n, ast.Call) and _call_name(n) == 'Node']
    kw = {k.arg: k.value for k in made.keywords}
    helper_locals = {t.id: a.value for a in ast.walk(helper) if isinstance(a, ast.Assign)
                     for t in a.targets if isinstance(t, ast.Name)}
    source_of = {key: ast.unparse(value) for key, value in kw.items()}
    parameters = ast.unparse(helper_locals.get(source_of['parameters'], kw['parameters']))
    appended = ' '.join(ast.unparse(n) for n in ast.walk(helper) if isinstance(n, ast.Call)
                        and _call_name(n) == 'append')
    # The helper passes each field of the setup where launch_ros wants it.
    assert source_of['package'] in ('PACKAGE', repr(node_setups.PACKAGE)), source_of
    assert source_of['executable'] == f'{variable}.executable', source_of
    assert source_of['name'] == f'{variable}.name', source_of
    assert "'config'" in parameters and f'{variable}.params_file' in parameters, parameters
    assert f'{variable}.overrides' in parameters + appended, (parameters, appended)
    assert f'{variable}.remappings' in source_of['remappings'], source_of
    condition = kw['condition']
    assert isinstance(condition, ast.IfExp) and \
        ast.unparse(condition.test) == f'{variable}.control_only', source_of['condition']
    nodes = []
    for setup in setups:
        chosen = condition.body if setup.control_only else condition.orelse
        text = _resolved(chosen, at_call)
        nodes.append(LaunchNode(
            node_setups.PACKAGE, setup.executable, setup.name, files=[setup.params_file],
            params=list(setup.overrides), condition=None if text == 'None' else text,
            overrides=dict(setup.overrides), remappings=list(setup.remappings)))
    return nodes


def parse_launch(path: Path) -> tuple[list[LaunchNode], set[str], set[str]]:
    """Nodes, declared launch arguments and used launch configurations of a launch file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    generate = [f for f in tree.body
                if isinstance(f, ast.FunctionDef) and f.name == 'generate_launch_description']
    assert generate, f'{path.name}: no generate_launch_description()'
    local = {t.id: a.value for a in ast.walk(generate[0]) if isinstance(a, ast.Assign)
             for t in a.targets if isinstance(t, ast.Name)}
    nodes, declared, used = [], set(), set()
    for starred in (n for n in ast.walk(generate[0]) if isinstance(n, ast.Starred)):
        if isinstance(starred.value, ast.GeneratorExp):
            nodes += _setup_nodes(tree, starred.value, local, path)
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _call_name(call)
        if name == 'DeclareLaunchArgument':
            declared.add(_const(call.args[0]))
        elif name == 'LaunchConfiguration':
            used.add(_const(call.args[0]))
        elif name == 'Node':
            kw = {k.arg: k.value for k in call.keywords}
            if _const(kw['package']) is None:
                continue                     # a helper's Node: read through its setups above
            node = LaunchNode(_const(kw['package']), _const(kw['executable']),
                              _const(kw.get('name')))
            for key in ('parameters', 'arguments'):
                if key in kw:
                    node.files += [s for s in _strings(kw[key])
                                   if s.endswith(('.yaml', '.rviz', '.urdf'))]
            for d in ast.walk(kw.get('parameters', ast.List(elts=[]))):
                if isinstance(d, ast.Dict):
                    node.params += [_const(k) for k in d.keys]
                    node.overrides.update(
                        (_const(k), _literal(v)) for k, v in zip(d.keys, d.values, strict=True))
            if 'remappings' in kw:
                node.remappings = [tuple(pair) for pair in _literal(kw['remappings'])]
            if 'condition' in kw:
                node.condition = ast.unparse(kw['condition'])
            nodes.append(node)
    return nodes, declared, used


def console_scripts() -> dict[str, str]:
    """setup.py console_scripts: name -> 'module:function'."""
    tree = ast.parse((REPO / 'setup.py').read_text())
    scripts = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if _const(key) == 'console_scripts':
                    for entry in value.elts:
                        name, target = (s.strip() for s in entry.value.split('='))
                        scripts[name] = target
    return scripts


def _plag_nodes() -> list[tuple[Path, LaunchNode]]:
    return [(path, node) for path in LAUNCH_FILES for node in parse_launch(path)[0]
            if node.package == 'plag_ros']


def test_launch_files_exist_and_parse():
    assert set(OWN_LAUNCH_FILES) <= set(LAUNCH_FILES)
    for path in LAUNCH_FILES:
        nodes, declared, used = parse_launch(path)
        assert nodes, path.name
        assert used <= declared, f'{path.name}: undeclared launch arguments {used - declared}'
    for path in OWN_LAUNCH_FILES:
        nodes, declared, used = parse_launch(path)
        assert {'control', 'rviz'} <= declared, path.name
        executables = {n.executable for n in nodes}
        assert {'dynamics_node', 'impedance_node', 'rviz2'} <= executables, path.name
        impedance = next(n for n in nodes if n.executable == 'impedance_node')
        assert 'control' in impedance.condition, f'{path.name}: impedance behind control:='
        rviz = next(n for n in nodes if n.executable == 'rviz2')
        assert 'rviz' in rviz.condition and 'plag_ros.rviz' in rviz.files
    for path in LAUNCH_FILES:    # MoveIt's demo.launch.py already runs a node named rviz2
        assert {n.name for n in parse_launch(path)[0] if n.executable == 'rviz2'} <= \
            {'plag_rviz'}, path.name
    sim_nodes = parse_launch(REPO / 'launch' / 'sim.launch.py')[0]
    assert 'sim_node' in {n.executable for n in sim_nodes}
    real_nodes = parse_launch(REPO / 'launch' / 'crane_x7.launch.py')[0]
    assert 'sim_node' not in {n.executable for n in real_nodes}   # the robot is real
    # control:=true loads our position controller, inactive, with the shipped file.
    spawner, = [n for n in real_nodes if n.package == 'controller_manager']
    tree = ast.parse((REPO / 'launch' / 'crane_x7.launch.py').read_text())
    # (a condition given by name is the expression assigned to that name)
    assigned = {t.id: ast.unparse(a.value) for a in ast.walk(tree) if isinstance(a, ast.Assign)
                for t in a.targets if isinstance(t, ast.Name)}
    spawn_condition = assigned.get(spawner.condition, spawner.condition)
    assert spawner.executable == 'spawner' and 'control' in spawn_condition
    assert 'spawn' in spawn_condition.replace('spawner', '')
    # The file check runs exactly when the spawner does.
    check, = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and
              _call_name(c) == 'OpaqueFunction' and
              'check_controller_file' in ast.unparse(c)]
    assert {k.arg: ast.unparse(k.value) for k in check.keywords} == {
        'function': 'check_controller_file', 'condition': spawner.condition}
    # ... from the controllers_file argument, whose default is the shipped file
    spawner_call, = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and
                     _call_name(c) == 'Node' and _const(c.keywords[0].value) ==
                     'controller_manager']
    assert 'controllers_file' in ast.unparse(spawner_call)
    argument, = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and
                 _call_name(c) == 'DeclareLaunchArgument' and
                 _const(c.args[0]) == 'controllers_file']
    assert 'crane_x7_controllers.yaml' in _strings(argument)
    assert (REPO / 'config' / 'crane_x7_controllers.yaml').is_file()
    strings = set(_strings(tree))
    assert {'--inactive', '--param-file', '--controller-manager', '/controller_manager'} <= \
        strings
    controller = yaml.safe_load((REPO / 'config' / 'crane_x7_controllers.yaml').read_text())
    assert 'CONTROLLER' in ast.unparse(spawner_call)    # plag_ros.ros.controller_file's
    assert read_controller_file(REPO / 'config' / 'crane_x7_controllers.yaml').joints == \
        tuple(controller[CONTROLLER]['ros__parameters']['joints'])


def test_executables_are_console_scripts_with_modules():
    scripts = console_scripts()
    for path, node in _plag_nodes():
        assert node.executable in scripts, f'{path.name}: {node.executable} not in setup.py'
        module, _, function = scripts[node.executable].partition(':')
        assert importlib.util.find_spec(module) is not None, f'{module} missing'
        entry = getattr(importlib.import_module(module), function)
        assert callable(entry), scripts[node.executable]
        # each runs plag_ros.ros.nodes.<executable>.main
        assert importlib.util.find_spec(f'plag_ros.ros.nodes.{node.executable}') is not None
        assert f"_console('{node.executable}')" in inspect.getsource(entry)
        assert node.name == NODE_NAMES[node.executable], (
            f'{path.name}: {node.executable} named {node.name!r}, its config files address '
            f'{NODE_NAMES[node.executable]!r}')


def _defaults(path: Path) -> dict[str, object]:
    """Launch argument -> its default value, as the source of ``LaunchConfiguration``."""
    tree = ast.parse(path.read_text())
    return {f'LaunchConfiguration({_const(call.args[0])!r})': _literal(kw.value)
            for call in ast.walk(tree) if isinstance(call, ast.Call)
            and _call_name(call) == 'DeclareLaunchArgument'
            for kw in call.keywords if kw.arg == 'default_value'}


def _launched(path: Path, control: bool) -> list[tuple]:
    """What ``path`` starts of plag_ros with ``control:=<control>``, launch arguments at
    their defaults: (executable, node name, parameter files, overrides, remappings)."""
    defaults = _defaults(path)
    on = "IfCondition(LaunchConfiguration('control'))"
    started = []
    for node in parse_launch(path)[0]:
        if node.package != 'plag_ros':
            continue
        assert node.condition in (None, on), f'{path.name}: {node.condition}'
        if node.condition is None or control:
            overrides = {key: defaults.get(value, value) if isinstance(value, str) else value
                         for key, value in node.overrides.items()}
            started.append((node.executable, node.name, node.files, overrides,
                            node.remappings))
    return started


def _spawned(specs: list[NodeSpec]) -> list[tuple]:
    return [(spec.module, spec.name, [spec.params_file], spec.params,
             list(spec.remaps.items())) for spec in specs]


def test_plag_ros_sim_and_run_start_what_the_launch_files_start():
    """Same executables, node names, files and overrides, in the same order, as the launch
    file of the same setup (``plag-ros sim --control``'s demo overlay aside)."""
    sim, robot = REPO / 'launch' / 'sim.launch.py', REPO / 'launch' / 'crane_x7.launch.py'
    for control in (False, True):
        assert _launched(sim, control) == _spawned(sim_specs(control)), control
        # (the launch hands its controllers_file argument, the shipped file by default, to
        # the controller, which checks the loaded controller against it)
        shipped = "PathJoinSubstitution([share, 'config', 'crane_x7_controllers.yaml'])"
        assert _launched(robot, control) == _spawned(
            robot_specs('topic', control, controller_file=shipped)), control
    # The simulator's model is waited for without a timeout, with and without ros2 launch.
    dynamics, = [s for s in sim_specs(False) if s.module == 'dynamics_node']
    assert dynamics.params['robot_description_timeout'] == 0.0
    # The real robot's description source is the launch argument's (default 'topic').
    robot_dynamics, = [n for n in parse_launch(robot)[0] if n.executable == 'dynamics_node']
    assert robot_dynamics.overrides['robot_description_source'] == \
        "LaunchConfiguration('robot_description_source')"


def test_parameter_and_rviz_files_exist_and_address_the_node():
    for path, node in _plag_nodes():
        assert node.files, f'{path.name}: {node.executable} gets no parameter file'
        for name in node.files:
            file = REPO / ('urdf' if name.endswith('.urdf') else 'config') / name
            assert file.is_file(), f'{path.name}: {file} missing'
            if name.endswith('.yaml'):
                content = yaml.safe_load(file.read_text())
                assert node.name in content or '/**' in content, (
                    f'{name} has no section for {node.name}')
                assert 'ros__parameters' in content.get(node.name, content.get('/**'))


@pytest.fixture(scope='module')
def running(tmp_path_factory):
    """Every plag_ros node of the launch files, running with its parameter file."""
    client = RosClient(DOMAIN_ID, 'plag_test_launch')
    log_dir = tmp_path_factory.mktemp('launch_nodes')
    nodes = {}
    for _, node in _plag_nodes():
        if node.executable in nodes:
            continue
        files = [f for f in node.files if f.endswith('.yaml')]
        # Dynamics: the bundled URDF, so the node is complete without the simulator.
        params = {'robot_description_source': 'file'} if node.executable == 'dynamics_node' \
            else {}
        nodes[node.executable] = start_node(node.executable, domain_id=DOMAIN_ID,
                                            log_dir=log_dir,
                                            params_file=REPO / 'config' / files[0],
                                            params=params)
    try:
        yield client, nodes
    finally:
        for process in nodes.values():     # signal all first: they shut down in parallel
            if process.alive():
                process.process.send_signal(signal.SIGINT)
        for process in nodes.values():
            process.stop()
        client.close()


def _declared(client: RosClient, node_name: str, process) -> set[str]:
    service = client.node.create_client(ListParameters, f'/{node_name}/list_parameters')
    try:
        assert service.wait_for_service(timeout_sec=60.0), (
            f'{node_name} did not come up:\n{process.output()[-3000:]}')
        future = service.call_async(ListParameters.Request())
        client.wait_for(future.done, 20.0, f'{node_name} list_parameters')
        return set(future.result().result.names)
    finally:
        client.node.destroy_client(service)


def test_every_parameter_set_is_declared_by_the_node(running):
    client, nodes = running
    for path, node in _plag_nodes():
        declared = _declared(client, node.name, nodes[node.executable])
        assert not set(node.params) - declared, (
            f'{path.name}: {node.executable} does not declare {set(node.params) - declared}')
        for name in (f for f in node.files if f.endswith('.yaml')):
            content = yaml.safe_load((REPO / 'config' / name).read_text())
            section = content.get(node.name, content.get('/**'))['ros__parameters']
            unknown = set(flatten(section)) - declared
            assert not unknown, f'config/{name}: {node.name} does not declare {unknown}'
    # `plag-ros sim --control`'s overlay on the shared setup, too.
    by_name = {node.name: node.executable for _, node in _plag_nodes()}
    for name, params in SIM_CONTROL_DEMO.items():
        unknown = set(params) - _declared(client, name, nodes[by_name[name]])
        assert not unknown, f'SIM_CONTROL_DEMO: {name} does not declare {unknown}'


def test_rviz_config_names_published_topics(running):
    client, nodes = running
    config = yaml.safe_load(RVIZ.read_text())
    displays = config['Visualization Manager']['Displays']
    assert config['Visualization Manager']['Global Options']['Fixed Frame'] == 'world'
    wanted = {}
    for display in displays:
        cls = display['Class']
        if cls in RVIZ_TYPES:
            topic = display['Description Topic' if 'RobotModel' in cls else 'Topic']['Value']
            wanted[topic] = RVIZ_TYPES[cls]
    assert set(RVIZ_TYPES.values()) == set(wanted.values()), 'a display kind is missing'
    assert wanted['/plag_dynamics/joint_states'] == 'sensor_msgs/msg/JointState'

    def published() -> dict[str, list[str]]:
        return dict(client.node.get_topic_names_and_types())

    def all_there() -> bool:
        topics = published()
        return all(t in topics and wanted[t] in topics[t] for t in wanted)

    try:
        client.wait_for(all_there, 60.0, 'rviz topics')
    except AssertionError as err:
        raise AssertionError(f'{err}: rviz wants {wanted}, graph has {published()}') from err
    # Namespaces of the marker display are the components the node publishes.
    markers = next(d for d in displays if d['Class'].endswith('/MarkerArray'))
    from plag_ros.ros.messages import COMPONENTS
    assert set(markers['Namespaces']) == set(COMPONENTS)
