"""Launch files, parameter files and the rviz config, checked without ros2 launch or rviz2.

These checks need neither ``launch``/``launch_ros`` nor rviz2, which no package registry
carries (test_launch_live.py runs the launch files under the real launch_ros on a ROS 2
install): the launch files are read as Python syntax trees (test/launch_syntax.py). Every
plag_ros executable started must be a console script of setup.py whose module exists,
every parameter file passed must exist and address the node by the name it is given,
every launch configuration must be declared, and every parameter set on top of the files
or in the YAML files must be one the node declares. ``plag-ros sim``/``plag-ros run``
start the same nodes with the same files and overrides as the launch files. The declared
names come from the real nodes: each is started over DDS (logical domain 13) and asked
through its ``list_parameters`` service. The rviz config must be YAML whose topics are
published, with the display's message type, by those running nodes. The launch
arguments are checked in test_launch_arguments.py.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import signal
from pathlib import Path

import pytest
import yaml
from launch_syntax import (
    LAUNCH_FILES,
    LaunchNode,
    call_name,
    console_scripts,
    constant,
    default_source,
    launch_arguments,
    parse_launch,
    string_constants,
)
from parameter_files import flatten
from rcl_interfaces.srv import ListParameters
from rclpy.expand_topic_name import expand_topic_name
from ros_helpers import REPO, RosClient, start_node

from plag_ros.apps.bringup import (
    SIM_CONTROL_DEMO,
    BusSpec,
    NodeSpec,
    config_path,
    robot_specs,
    sim_specs,
    torque_specs,
    with_params_file,
)
from plag_ros.ros.controller_file import CONTROLLER, node_section, read_controller_file

DOMAIN_ID = 13
OWN_LAUNCH_FILES = [REPO / 'launch' / 'crane_x7.launch.py', REPO / 'launch' / 'sim.launch.py']
RVIZ = REPO / 'config' / 'plag_ros.rviz'
# Default node names (the name each node gives itself) by executable.
NODE_NAMES = {'dynamics_node': 'plag_dynamics', 'sim_node': 'plag_sim',
              'impedance_node': 'plag_impedance', 'driver_node': 'plag_driver'}
RVIZ_TYPES = {
    'rviz_default_plugins/RobotModel': 'std_msgs/msg/String',
    'rviz_default_plugins/Effort': 'sensor_msgs/msg/JointState',
    'rviz_default_plugins/MarkerArray': 'visualization_msgs/msg/MarkerArray',
    'rviz_default_plugins/Image': 'sensor_msgs/msg/Image',
}


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
              call_name(c) == 'OpaqueFunction' and
              'check_controller_file' in ast.unparse(c)]
    assert {k.arg: ast.unparse(k.value) for k in check.keywords} == {
        'function': 'check_controller_file', 'condition': spawner.condition}
    # ... from the controllers_file argument, whose default is the shipped file
    spawner_call, = [c for c in ast.walk(tree) if isinstance(c, ast.Call) and
                     call_name(c) == 'Node' and constant(c.keywords[0].value) ==
                     'controller_manager']
    assert 'controllers_file' in ast.unparse(spawner_call)
    argument, = [a for a in launch_arguments(REPO / 'launch' / 'crane_x7.launch.py')
                 if a.name == 'controllers_file']
    assert argument.in_share and argument.default == 'config/crane_x7_controllers.yaml'
    assert (REPO / 'config' / 'crane_x7_controllers.yaml').is_file()
    strings = set(string_constants(tree))
    # (relative: the spawner puts its namespace in front, the root's /controller_manager here)
    assert {'--inactive', '--param-file', '--controller-manager', 'controller_manager'} <= \
        strings and '/controller_manager' not in strings
    controller = yaml.safe_load((REPO / 'config' / 'crane_x7_controllers.yaml').read_text())
    assert 'CONTROLLER' in ast.unparse(spawner_call)    # plag_ros.ros.controller_file's
    assert read_controller_file(REPO / 'config' / 'crane_x7_controllers.yaml').joints == \
        tuple(node_section(controller, CONTROLLER)['joints'])


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
    return {f'LaunchConfiguration({a.name!r})': default_source(a)
            for a in launch_arguments(path) if a.default is not None}


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
        # plag-ros run --driver PORT: the port argument's default in the launch file
        assert _launched(REPO / 'launch' / 'torque.launch.py', control) == _spawned(
            torque_specs('/dev/ttyUSB0', control)), control
    # The simulator's model is waited for without a timeout, with and without ros2 launch.
    dynamics, = [s for s in sim_specs(False) if s.module == 'dynamics_node']
    assert dynamics.params['robot_description_timeout'] == 0.0
    # The real robot's description source is the launch argument's (default 'topic').
    robot_dynamics, = [n for n in parse_launch(robot)[0] if n.executable == 'dynamics_node']
    assert robot_dynamics.overrides['robot_description_source'] == \
        "LaunchConfiguration('robot_description_source')"


def test_plag_ros_params_file_comes_where_the_launch_files_put_params_file(tmp_path):
    """``plag-ros sim|run --params-file F``: F after each node's bundled file and before
    the command's own settings (``-p``), the order of the launch files' ``params_file:=``
    (node_setups.parameter_layers); the bus process takes none. A file that sets what the
    command sets (the port) or torque mode fixes (the switch), or no file at all, is
    refused with the reason, as the launch files refuse it."""
    def written(name: str, section: str, parameters: dict) -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump({section: {'ros__parameters': parameters}}))
        return str(path)

    own = written('own.yaml', '/**/plag_driver', {'stale_s': 2.0})
    for spec in with_params_file(torque_specs('/dev/ttyUSB0', True), own):
        command = spec.command()
        files = [command[i + 1] for i, arg in enumerate(command) if arg == '--params-file']
        assert files == [str(config_path(str(spec.params_file))), own], spec.module
        assert command.index(own) < (command.index('-p') if '-p' in command
                                     else len(command)), spec.module
    bus = BusSpec('/tmp/dxl0')
    assert with_params_file([bus], own) == [bus]
    for name, section, parameters, reason in [
            ('port.yaml', '/**/plag_driver', {'port': '/dev/ttyUSB1'}, 'port'),
            ('switch.yaml', '/**/plag_impedance', {'switch': {'method': 'none'}},
             'switch.method')]:
        with pytest.raises(ValueError, match=reason):
            with_params_file(torque_specs('/dev/ttyUSB0', True),
                             written(name, section, parameters))
    with pytest.raises(ValueError, match='no such file'):
        with_params_file(sim_specs(False), str(tmp_path / 'missing.yaml'))


def test_parameter_and_rviz_files_exist_and_address_the_node():
    for path, node in _plag_nodes():
        assert node.files, f'{path.name}: {node.executable} gets no parameter file'
        for name in node.files:
            file = REPO / ('urdf' if name.endswith('.urdf') else 'config') / name
            assert file.is_file(), f'{path.name}: {file} missing'
            if name.endswith('.yaml'):
                # in the root and in a namespace (namespace:=arm1) alike
                content = yaml.safe_load(file.read_text())
                for namespace in ('/', '/arm1'):
                    assert node_section(content, node.name, namespace), (
                        f'{name} has no section for {node.name} in {namespace}')


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
    name = f'/{node_name}/list_parameters'
    try:
        # (a query, sent again until answered: RosClient.call)
        response = client.call(ListParameters, name, ListParameters.Request(), timeout=120.0)
    except AssertionError as err:
        raise AssertionError(f'{err}: {node_name} did not answer:\n'
                             f'{process.output()[-3000:]}') from None
    return set(response.result.names)


def test_every_parameter_set_is_declared_by_the_node(running):
    client, nodes = running
    for path, node in _plag_nodes():
        declared = _declared(client, node.name, nodes[node.executable])
        assert not set(node.params) - declared, (
            f'{path.name}: {node.executable} does not declare {set(node.params) - declared}')
        for name in (f for f in node.files if f.endswith('.yaml')):
            section = node_section(yaml.safe_load((REPO / 'config' / name).read_text()),
                                   node.name)
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
            # relative, in rviz2's namespace: the root's here
            wanted[expand_topic_name(topic, 'plag_rviz', '/')] = RVIZ_TYPES[cls]
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
