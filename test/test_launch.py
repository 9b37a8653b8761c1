"""Launch files, parameter files and the rviz config, checked without ros2 launch or rviz2.

These checks need neither ``launch``/``launch_ros`` nor rviz2 (test_launch_live.py runs the
launch files under the real launch_ros where it is importable): the launch files are read
as Python syntax trees: every plag_ros executable they start must be a console script of
setup.py whose module exists, every parameter file they pass must exist and address the
node by the name the launch file gives it, every launch configuration must be declared,
and every parameter they or the YAML files set must be one the node declares. The
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

import pytest
import yaml
from rcl_interfaces.srv import ListParameters
from ros_helpers import REPO, RosClient, start_node

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
    params: list[str] = field(default_factory=list)       # keys of parameter dict literals
    condition: str | None = None


def _const(node: ast.AST | None):
    return node.value if isinstance(node, ast.Constant) else None


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _call_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, 'attr', '')


def parse_launch(path: Path) -> tuple[list[LaunchNode], set[str], set[str]]:
    """Nodes, declared launch arguments and used launch configurations of a launch file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    assert any(isinstance(f, ast.FunctionDef) and f.name == 'generate_launch_description'
               for f in tree.body), f'{path.name}: no generate_launch_description()'
    nodes, declared, used = [], set(), set()
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = _call_name(call)
        if name == 'DeclareLaunchArgument':
            declared.add(_const(call.args[0]))
        elif name == 'LaunchConfiguration':
            used.add(_const(call.args[0]))
        elif name == 'Node':
            kw = {k.arg: k.value for k in call.keywords}
            node = LaunchNode(_const(kw['package']), _const(kw['executable']),
                              _const(kw.get('name')))
            for key in ('parameters', 'arguments'):
                if key in kw:
                    node.files += [s for s in _strings(kw[key])
                                   if s.endswith(('.yaml', '.rviz', '.urdf'))]
            for d in ast.walk(kw.get('parameters', ast.List(elts=[]))):
                if isinstance(d, ast.Dict):
                    node.params += [_const(k) for k in d.keys]
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
    assert spawner.executable == 'spawner' and 'control' in spawner.condition
    assert spawner.files == ['crane_x7_controllers.yaml']
    assert (REPO / 'config' / 'crane_x7_controllers.yaml').is_file()
    tree = ast.parse((REPO / 'launch' / 'crane_x7.launch.py').read_text())
    strings = set(_strings(tree))
    assert {'--inactive', '--param-file', '--controller-manager', '/controller_manager'} <= \
        strings
    controller = yaml.safe_load((REPO / 'config' / 'crane_x7_controllers.yaml').read_text())
    assert any(isinstance(n, ast.Assign) and _const(n.value) in controller
               for n in tree.body), 'the spawned controller is not in the shipped file'


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


def _flatten(params: dict, prefix: str = '') -> list[str]:
    names = []
    for key, value in params.items():
        if isinstance(value, dict):
            names += _flatten(value, f'{prefix}{key}.')
        else:
            names.append(f'{prefix}{key}')
    return names


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
            unknown = set(_flatten(section)) - declared
            assert not unknown, f'config/{name}: {node.name} does not declare {unknown}'


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
