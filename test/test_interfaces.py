"""The interface table and the parameter reference are what the nodes really create.

Each node is started as a user starts it (a subprocess, Fast DDS, a domain of this module's
own) in the configurations the table distinguishes; a client node then reads from the ROS
graph the topics the node publishes and subscribes to, the services it serves and calls,
with their types, and compares them with the table's endpoints for those settings. The
docs' topic reference is generated from the same table, so the reference cannot say what the
nodes do not do. The graph API reports names and types; QoS is checked where the table's
durability matters (the latched topics), from the publishers' own profiles.

The parameters each node declares (its ``list_parameters`` service) are the options the
docs' parameter reference is generated from (:func:`plag_ros.apps.reference.node_options`),
rclpy's own ``use_sim_time`` (and Jazzy's ``start_type_description_service``) aside.

The same holds under ``-r __ns:=/arm1`` (what ``namespace:=arm1`` gives a node): every
endpoint but ``/diagnostics`` is then ``/arm1``'s, the simulator's controller stand-ins and
emulated controller manager included, and an absolute switch target outside ``/arm1``
stops the impedance node at start.
"""
from __future__ import annotations

import importlib.util

import pytest
from parameter_files import node_parameters

from plag_ros.apps.reference import node_options
from plag_ros.bus.host.driver import DriverNodeSettings
from plag_ros.core.common.options import build
from plag_ros.core.control.settings import ImpedanceSettings
from plag_ros.core.decomposition.settings import DynamicsSettings
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.simulation.settings import SimSettings
from plag_ros.ros.interfaces import LATCHED, NODE_INTERFACES, Endpoint

pytest.importorskip('rclpy')
from rcl_interfaces.srv import ListParameters  # noqa: E402
from rclpy.expand_topic_name import expand_topic_name  # noqa: E402
from rclpy.qos import DurabilityPolicy  # noqa: E402
from ros_helpers import RosClient, start_node, wait_until  # noqa: E402

DOMAIN_ID = 43

# What every rclpy node has, whatever it does: the parameter services, rosout and the
# parameter events (rclpy/node.py; get_type_description from Jazzy on).
_PARAMETER_SERVICES = ('describe_parameters', 'get_parameter_types', 'get_parameters',
                       'get_type_description', 'list_parameters', 'set_parameters',
                       'set_parameters_atomically')
_EVERY_NODE_TOPICS = ('/rosout', '/parameter_events')
_RCLPY_PARAMETERS = {'use_sim_time', 'start_type_description_service'}
HAS_CONTROLLER_MANAGER_MSGS = importlib.util.find_spec('controller_manager_msgs') is not None


def absolute(name: str, node: str, namespace: str = '/') -> str:
    """A name as rcl expands it for a node in ``namespace`` (the root by default)."""
    return expand_topic_name(name, node, namespace)


def expected(node: str, settings: object, bodies: list[str], namespace: str = '/'
             ) -> dict[str, set[tuple[str, str]]]:
    """direction -> {(absolute name, type)} the table promises for ``settings``."""
    out: dict[str, set[tuple[str, str]]] = {d: set() for d in ('out', 'in', 'service', 'client')}
    for e in NODE_INTERFACES[node]:
        if not e.applies(settings):
            continue
        if 'controller_manager_msgs' in e.type and not HAS_CONTROLLER_MANAGER_MSGS:
            continue   # the node says so at start and does without (controller_switch.py)
        name = e.resolved_name(settings)
        for each in ([name.replace('<body>', b) for b in bodies] if '<body>' in name
                     else [name]):
            out[e.direction].add((absolute(each, node, namespace), e.type))
    return out


def seen(client: RosClient, node: str, namespace: str = '/'
         ) -> dict[str, set[tuple[str, str]]]:
    """direction -> {(name, type)} the graph shows for ``node``, the generic ones left out."""
    graph = client.node

    def pairs(found) -> set[tuple[str, str]]:
        return {(name, t) for name, types in found for t in types}

    own = {absolute(f'~/{s}', node, namespace) for s in _PARAMETER_SERVICES}
    return {
        'out': {p for p in pairs(graph.get_publisher_names_and_types_by_node(node, namespace))
                if p[0] not in _EVERY_NODE_TOPICS},
        'in': {p for p in pairs(graph.get_subscriber_names_and_types_by_node(node, namespace))
               if p[0] not in _EVERY_NODE_TOPICS},
        'service': {p for p in pairs(graph.get_service_names_and_types_by_node(node, namespace))
                    if p[0] not in own},
        'client': pairs(graph.get_client_names_and_types_by_node(node, namespace)),
    }


@pytest.fixture
def client():
    """A probe of its own for each test: a graph cache is a participant's, and what one
    gets wrong (a stopped node of the same name kept, a new one's endpoints missed) would
    stay for the module's later tests. One suite run saw /arm1/plag_impedance, started
    after a node of that name had stopped, with no endpoints at all for 60 s."""
    c = RosClient(DOMAIN_ID, 'plag_interfaces_probe')
    yield c
    c.close()


def _check(client: RosClient, tmp_path, module: str, params: dict, nodes: dict,
           namespace: str = '/') -> None:
    """Start ``module`` with ``params`` in ``namespace`` (``-r __ns:=``); each node in
    ``nodes`` (name -> settings) must show exactly the table's endpoints there."""
    bodies = list(RobotModel.from_urdf(default_urdf_path()).body_names)
    process = start_node(module, domain_id=DOMAIN_ID, log_dir=tmp_path, params=params,
                         remaps={'__ns': namespace} if namespace != '/' else None)
    try:
        for node, settings in nodes.items():
            want = expected(node, settings, bodies, namespace)
            def joined(n: str = node) -> bool:
                assert process.alive(), f'{module} ended:\n{process.tail(40)}'
                return (n, namespace) in client.node.get_node_names_and_namespaces()

            wait_until(joined, 60.0, f'{node} to join the graph in {namespace}')
            try:
                wait_until(lambda n=node, w=want: seen(client, n, namespace) == w, 60.0,
                           f'{node} to show the endpoints of the table')
            except AssertionError:
                got = seen(client, node, namespace)
                diff = {d: {'missing': sorted(want[d] - got[d]),
                            'not in the table': sorted(got[d] - want[d])}
                        for d in want if want[d] != got[d]}
                raise AssertionError(f'{node} ({params}): {diff}\n{process.tail()}') from None
        for node in nodes:
            if node == 'controller_manager':
                continue
            declared = set(client.call(ListParameters,
                                       absolute('~/list_parameters', node, namespace),
                                       ListParameters.Request()).result.names)
            assert declared - _RCLPY_PARAMETERS == {o.name for o in node_options(node)}, node
        for node, settings in nodes.items():
            for e in NODE_INTERFACES[node]:
                if e.direction == 'out' and e.qos == LATCHED and e.applies(settings):
                    infos = client.node.get_publishers_info_by_topic(
                        absolute(e.resolved_name(settings), node, namespace))
                    mine = [i for i in infos if i.node_name == node]
                    assert mine and all(i.qos_profile.durability ==
                                        DurabilityPolicy.TRANSIENT_LOCAL for i in mine), e
    finally:
        process.stop()


DYNAMICS_CASES = {
    'file': {'robot_description_source': 'file'},
    'topic, then the file': {'robot_description_source': 'topic',
                             'robot_description_timeout': 0.5, 'publish_components': False},
}


@pytest.mark.parametrize('case', list(DYNAMICS_CASES))
def test_the_dynamics_node_has_the_tables_endpoints(client, tmp_path, case):
    params = DYNAMICS_CASES[case]
    _check(client, tmp_path, 'dynamics_node', params,
           {'plag_dynamics': build(DynamicsSettings, params)})


IMPEDANCE_CASES = {
    'forward, controller manager': {},
    'forward, simulator switch': {'switch.method': 'sim'},
    'trajectory': {'command.type': 'trajectory'},
    # the effort path's gains are refused without a rotor inertia in the model (the stability
    # check): this case is about the endpoints, so the check only warns
    'effort': {'command_interface': 'effort', 'gain_check': 'warn'},
    # torque mode as shipped (its gains pass the check with the delay it states)
    'effort to plag_driver': node_parameters('torque_mode.yaml', 'plag_impedance'),
}


@pytest.mark.parametrize('case', list(IMPEDANCE_CASES))
def test_the_impedance_node_has_the_tables_endpoints(client, tmp_path, case):
    params = IMPEDANCE_CASES[case]
    _check(client, tmp_path, 'impedance_node', params,
           {'plag_impedance': ImpedanceSettings.from_values(params)})


def test_the_sim_node_and_its_controller_manager_have_the_tables_endpoints(client, tmp_path):
    nodes: dict[str, object] = {'plag_sim': build(SimSettings, {})}
    if HAS_CONTROLLER_MANAGER_MSGS:
        nodes['controller_manager'] = None
    _check(client, tmp_path, 'sim_node', {}, nodes)


def test_the_driver_node_has_the_tables_endpoints(client, tmp_path):
    """plag_driver creates its endpoints before the bus answers (it tries the port every
    second), so a port that does not exist shows them all."""
    _check(client, tmp_path, 'driver_node', {'port': str(tmp_path / 'no_bus_here')},
           {'plag_driver': build(DriverNodeSettings, {})})


def test_the_comparison_can_fail():
    """An endpoint the table gained, or a condition it got wrong, changes the expectation."""
    settings = ImpedanceSettings.from_values({'command.type': 'trajectory'})
    want = expected('plag_impedance', settings, [])
    assert ('/crane_x7_arm_controller/joint_trajectory',
            'trajectory_msgs/msg/JointTrajectory') in want['out']
    assert not any(t == 'std_msgs/msg/Float64MultiArray' for _, t in want['out'])
    extra = Endpoint('out', '~/extra', 'std_msgs/msg/String', LATCHED, 'x')
    assert extra.applies(settings) and absolute(extra.name, 'n') == '/n/extra'
    assert not Endpoint('out', 'x', 't', '', '', (('command_kind', 'effort'),)).applies(settings)


# ------------------------------------------------------------------ in a namespace
ARM = '/arm1'
NAMESPACED_IMPEDANCE_CASES = {
    'forward, controller manager': {},
    'forward, simulator switch': {'switch.method': 'sim'},
    'effort to plag_driver': node_parameters('torque_mode.yaml', 'plag_impedance', ARM),
}


@pytest.mark.parametrize('case', list(NAMESPACED_IMPEDANCE_CASES))
def test_the_impedance_node_in_a_namespace_has_the_tables_endpoints_there(client, tmp_path,
                                                                          case):
    """Its commands, switch and joint check go to /arm1's controllers, not the root's."""
    params = NAMESPACED_IMPEDANCE_CASES[case]
    _check(client, tmp_path, 'impedance_node', params,
           {'plag_impedance': ImpedanceSettings.from_values(params)}, ARM)


def test_the_sim_node_and_its_companions_in_a_namespace(client, tmp_path):
    """The controller stand-ins and the emulated controller manager are made without the
    global arguments: the simulator passes its namespace on, so two simulators never
    answer one /controller_manager."""
    nodes: dict[str, object] = {'plag_sim': build(SimSettings, {})}
    if HAS_CONTROLLER_MANAGER_MSGS:
        nodes['controller_manager'] = None
    _check(client, tmp_path, 'sim_node', {}, nodes, ARM)


def test_the_sim_nodes_controller_stand_ins_follow_its_namespace(client, tmp_path):
    process = start_node('sim_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                         remaps={'__ns': ARM})
    try:
        wanted = {('plag_arm_position_controller', ARM), ('crane_x7_arm_controller', ARM)}

        def there() -> bool:
            assert process.alive(), process.tail(40)
            return wanted <= set(client.node.get_node_names_and_namespaces())

        wait_until(there, 60.0, 'the controller stand-ins in /arm1')
        assert not {(n, ns) for n, ns in client.node.get_node_names_and_namespaces()
                    if n in ('plag_arm_position_controller', 'crane_x7_arm_controller',
                             'controller_manager') and ns != ARM}
    finally:
        process.stop()


def test_the_driver_node_in_a_namespace_has_the_tables_endpoints_there(client, tmp_path):
    _check(client, tmp_path, 'driver_node', {'port': str(tmp_path / 'no_bus_here')},
           {'plag_driver': build(DriverNodeSettings, {})}, ARM)


def test_the_impedance_node_refuses_another_arms_controller_manager(client, tmp_path):
    """A copied root file's /controller_manager under /arm1: the node does not start."""
    process = start_node('impedance_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                         params={'switch.controller_manager': '/controller_manager'},
                         remaps={'__ns': ARM})
    try:
        wait_until(lambda: not process.alive(), 120.0, 'the impedance node to refuse')
        assert "switch.controller_manager (/controller_manager/switch_controller): outside " \
            "this node's namespace /arm1" in process.output(), process.tail(40)
    finally:
        process.stop()


def _parameters(client: RosClient, node: str, names: list[str]) -> dict[str, str]:
    """String parameters of the running ``node`` (full name), read over get_parameters."""
    from rcl_interfaces.srv import GetParameters
    response = client.call(GetParameters, f'{node}/get_parameters',
                           GetParameters.Request(names=names))
    return dict(zip(names, (v.string_value for v in response.values), strict=True))


@pytest.mark.parametrize(('key', 'reaches'), [('/**/plag_impedance', True),
                                              ('plag_impedance', False)])
def test_a_parameter_file_section_reaches_a_namespaced_node_as_recorded(client, tmp_path,
                                                                         key, reaches):
    """The installed rcl, not test/data/namespace_upstream.yaml's account of it: under
    __ns:=/arm1 a /**/ section reaches the node, a bare name does not (the node then runs
    on its defaults). The bundled files are keyed /**/ for that reason."""
    path = tmp_path / 'mine.yaml'
    path.write_text(f'{key}:\n  ros__parameters:\n    command_interface: effort\n'
                    '    gain_check: warn\n')
    process = start_node('impedance_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                         params_file=path, remaps={'__ns': ARM})
    try:
        got = _parameters(client, f'{ARM}/plag_impedance', ['command_interface'])
        assert got['command_interface'] == ('effort' if reaches else 'position'), \
            process.tail(40)
    finally:
        process.stop()
