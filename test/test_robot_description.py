"""The model of the nodes that command the arm (plag_ros.ros.robot_description): taken from
``robot_description`` once, at start, with the URDF file as the stated fallback; a later
description with another model is logged, never taken; a driver model without a joint of
the servo chain stops the driver at start; every launch gives all its nodes one source.

Models are compared with ``RobotModel.changes_from`` (exact, body by body) against URDF
texts built here: the bundled CRANE-X7 with a heavier wrist link (a tool clamped on), a
body mass the bundled file does not have."""
from __future__ import annotations

import signal
import time

import pytest
import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter
from ros_domains import domain
from ros_helpers import LATCHED, start_node, wait_until
from std_msgs.msg import String

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros import node_setups
from plag_ros.ros.nodes.driver_node import DriverNode
from plag_ros.ros.nodes.impedance_node import ImpedanceNode

DOMAIN_ID = 86
BUNDLED = default_urdf_path().read_text()
WRIST = 'crane_x7_wrist_link'
WRIST_MASS = '<mass value="0.14"/>'
assert BUNDLED.count(WRIST_MASS) == 1
HEAVY = BUNDLED.replace(WRIST_MASS, '<mass value="0.64"/>')
# one revolute joint: no CRANE-X7 chain joint at all
ONE_JOINT = """<robot name="one_joint">
  <link name="base"/>
  <link name="arm"><inertial><origin xyz="0 0 0.1"/><mass value="1.0"/>
    <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="arm"/>
    <axis xyz="0 0 1"/><limit lower="-1" upper="1" effort="1" velocity="1"/></joint>
</robot>"""


def source(kind: str, timeout_s: float = 5.0) -> list[Parameter]:
    return [Parameter('robot_description_source', value=kind),
            Parameter('robot_description_timeout', value=timeout_s)]


@pytest.fixture
def context():
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=domain(DOMAIN_ID))
    try:
        yield context
    finally:
        context.try_shutdown()


def spin_until(node, predicate, what: str, timeout_s: float = 30.0) -> None:
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            assert time.monotonic() < deadline, f'timed out waiting for {what}'
            executor.spin_once(timeout_sec=0.05)
    finally:
        executor.remove_node(node)
        executor.shutdown()


def test_the_controller_takes_the_published_model_once(context):
    """plag_impedance with 'topic' takes the robot's description (the heavy wrist, not the
    bundled file); the same model written otherwise changes nothing; another model (the
    bundled file) is counted and not taken: the controller keeps the model it started with."""
    publisher = rclpy.create_node('plag_test_description', context=context)
    pub = publisher.create_publisher(String, 'robot_description', LATCHED)
    pub.publish(String(data=HEAVY))
    node = ImpedanceNode(context=context, parameter_overrides=source('topic', 60.0))
    try:
        heavy = RobotModel.from_urdf(HEAVY)
        assert node.urdf.source == 'topic'
        assert not node.model.changes_from(heavy)
        assert 'mass' in node.model.changes_from(
            RobotModel.from_urdf(BUNDLED)).changed_bodies[WRIST]
        # robot_state_publisher's text of the same model: a comment more
        pub.publish(String(data=HEAVY.replace('<robot ', '<!-- xacro -->\n<robot ', 1)))
        spin_until(node, lambda: node.urdf.received == 1, 'the same model')
        assert node.urdf.changed == 0
        pub.publish(String(data=BUNDLED))
        spin_until(node, lambda: node.urdf.received == 2, 'another model')
        assert node.urdf.changed == 1
        assert not node.model.changes_from(heavy)
    finally:
        node.destroy_node()
        publisher.destroy_node()


def test_without_a_description_the_controller_falls_back_to_the_file(context):
    """No robot_description within the timeout: the bundled URDF, said as 'fallback'; a
    description that does not load is rejected and the wait goes on to the same end."""
    publisher = rclpy.create_node('plag_test_description', context=context)
    pub = publisher.create_publisher(String, 'robot_description', LATCHED)
    pub.publish(String(data='<robot name="broken"><link name="a"/>'))
    start = time.monotonic()
    node = ImpedanceNode(context=context, parameter_overrides=source('topic', 1.0))
    try:
        assert time.monotonic() - start >= 1.0
        assert node.urdf.source == f'fallback:{default_urdf_path()}'
        assert not node.model.changes_from(RobotModel.from_urdf(BUNDLED))
    finally:
        node.destroy_node()
        publisher.destroy_node()


def test_the_parameter_source_and_the_file_source(context, tmp_path):
    """'parameter' takes the robot_description parameter, 'file' urdf_path: no wait."""
    path = tmp_path / 'heavy.urdf'
    path.write_text(HEAVY)
    heavy = RobotModel.from_urdf(HEAVY)
    for overrides, said in (
            (source('parameter') + [Parameter('robot_description', value=HEAVY)], 'parameter'),
            (source('file') + [Parameter('urdf_path', value=str(path))], f'file:{path}')):
        node = ImpedanceNode(context=context, parameter_overrides=overrides)
        try:
            assert node.urdf.source == said
            assert not node.model.changes_from(heavy)
        finally:
            node.destroy_node()


def test_the_driver_refuses_a_model_without_the_chains_joints(context, tmp_path):
    """plag_driver's model must actuate every joint of its servo chain: another robot's
    description stops it at start (before it opens a port), with the joints it lacks."""
    with pytest.raises(ValueError, match=r"'one_joint' has no actuated joints \[.*"
                                         r"crane_x7_shoulder_fixed_part_pan_joint"):
        DriverNode(context=context, parameter_overrides=[
            Parameter('port', value=str(tmp_path / 'no_bus_here')),
            *source('parameter'), Parameter('robot_description', value=ONE_JOINT)])


@pytest.mark.parametrize('module', ['impedance_node', 'driver_node'])
def test_ctrl_c_ends_a_wait_for_the_description(tmp_path, module):
    """A node waiting without end for robot_description (timeout 0, as sim.launch.py's
    controller does) ends on SIGINT at once, with exit code 0: ``ros2 launch`` must not
    escalate to SIGKILL because the robot never came up."""
    node = start_node(module, domain_id=DOMAIN_ID, log_dir=tmp_path,
                      params={'robot_description_source': 'topic',
                              'robot_description_timeout': 0.0,
                              'port': str(tmp_path / 'no_bus_here')}
                      if module == 'driver_node' else
                      {'robot_description_source': 'topic', 'robot_description_timeout': 0.0})
    try:
        wait_until(lambda: 'waiting for robot_description' in node.output(), 120.0,
                   'the wait')
        node.process.send_signal(signal.SIGINT)
        node.process.wait(30)
        assert node.process.returncode == 0, node.tail()
        assert 'Traceback' not in node.output(), node.tail()
    finally:
        if node.alive():
            node.process.kill()


@pytest.mark.parametrize('setups', [
    node_setups.sim_setup(), node_setups.robot_setup('file'), node_setups.replay_setup('topic'),
    node_setups.torque_setup('/dev/ttyUSB0', 'topic'), node_setups.torque_setup()])
def test_every_node_of_a_setup_takes_its_model_from_one_source(setups):
    """The controller's model is the dynamics node's (and the driver's): one source, one
    timeout, for every node of a launch that loads a model."""
    sources = {(s.name, s.overrides.get('robot_description_source'),
                s.overrides.get('robot_description_timeout')) for s in setups
               if s.executable != 'sim_node'}
    assert len({(src, timeout) for _, src, timeout in sources}) == 1, sources
    assert all(src is not None for _, src, _ in sources), sources
