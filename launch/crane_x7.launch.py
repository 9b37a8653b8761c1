"""plag_ros on the real CRANE-X7: join the robot's running ROS 2 graph.

The robot's own bring-up (crane_x7_ros: ``ros2 launch crane_x7_examples demo.launch.py``
or ``crane_x7_control``) runs separately and provides ``/joint_states`` (200 Hz, reliable)
and ``robot_description`` (transient local, from ``demo.launch.py``'s
robot_state_publisher only). This file adds:

* ``plag_dynamics`` (dynamics_node, config/crane_x7.yaml): the live decomposition;
* ``plag_impedance`` (impedance_node, config/impedance.yaml) when ``control:=true``;
* with ``control:=true`` (and ``spawn_controller:=true``, the default) controller_manager's
  ``spawner``: it loads ``plag_arm_position_controller`` (config/crane_x7_controllers.yaml,
  a position_controllers/JointGroupPositionController on the 7 arm joints) into the robot's
  ``/controller_manager`` and configures it INACTIVE; enabling plag_impedance switches the
  arm from ``crane_x7_arm_controller`` to it. ``spawn_controller:=false`` leaves the
  robot's controllers alone (a machine without controller_manager installed);
* rviz2 (node ``plag_rviz``) with config/plag_ros.rviz when ``rviz:=true``.

The plag_ros nodes are those of ``robot_setup()`` in plag_ros/ros/node_setups.py, the
description ``plag-ros run`` (the dynamics node without ``ros2 launch``) reads too.

Usage: ``ros2 launch plag_ros crane_x7.launch.py [control:=true] [rviz:=true]``.
"""
import os  # noqa: I001 - launch is the ROS package, not launch/: keep it apart

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution, PythonExpression
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare

from plag_ros.ros.node_setups import PACKAGE, robot_setup

CONTROLLER = 'plag_arm_position_controller'
CONTROLLER_TYPE = 'position_controllers/JointGroupPositionController'


def spawner_type_arguments(distro: str) -> list[str]:
    """Extra spawner flags naming the controller type, for the ROS distribution ``distro``.

    The controller manager must know a controller's type before it loads it. The spawner
    reads it from ``--param-file`` on jazzy and later, and on humble only since
    ros2_control 2.46.0 (2024-12, backport #1894); older humble releases take it from
    ``-t/--controller-type``, which jazzy's spawner no longer accepts. So: the flag on
    humble (harmless on new releases, which set the same value again), nothing elsewhere.
    """
    return ['--controller-type', CONTROLLER_TYPE] if distro == 'humble' else []


def plag_node(setup, share, control):
    """The launch_ros Node of one plag_ros.ros.node_setups.NodeSetup."""
    parameters = [PathJoinSubstitution([share, 'config', setup.params_file])]
    if setup.overrides:
        parameters.append(dict(setup.overrides))
    return Node(package=PACKAGE, executable=setup.executable, name=setup.name,
                output='screen', parameters=parameters, remappings=list(setup.remappings),
                condition=IfCondition(control) if setup.control_only else None)


def generate_launch_description():
    share = FindPackageShare(PACKAGE)
    control = LaunchConfiguration('control')
    rviz = LaunchConfiguration('rviz')
    spawn = LaunchConfiguration('spawn_controller')
    description_source = LaunchConfiguration('robot_description_source')
    return LaunchDescription([
        DeclareLaunchArgument('control', default_value='false',
                              description='start the partial-impedance controller'),
        DeclareLaunchArgument('spawn_controller', default_value='true',
                              description=f'with control:=true, load {CONTROLLER} inactive '
                                          "into /controller_manager (controller_manager's "
                                          'spawner)'),
        DeclareLaunchArgument('rviz', default_value='false',
                              description='start rviz2 with the plag_ros displays'),
        DeclareLaunchArgument('robot_description_source', default_value='topic',
                              description="dynamics model: 'topic' (the robot's "
                                          "robot_description) or 'file' (bundled URDF)"),
        *(plag_node(setup, share, control) for setup in robot_setup(description_source)),
        # Flags of ros-controls/ros2_control controller_manager/controller_manager/spawner.py,
        # present on the humble and jazzy branches alike: positional controller name,
        # -c/--controller-manager, -p/--param-file (loaded into the controller before
        # configure), --inactive (configure, do not activate; added on humble in #755,
        # 2022, replacing the deprecated --stopped, which jazzy no longer has); on humble
        # also -t/--controller-type (spawner_type_arguments).
        Node(
            package='controller_manager',
            executable='spawner',
            arguments=[CONTROLLER, '--controller-manager', '/controller_manager',
                       '--param-file',
                       PathJoinSubstitution([share, 'config', 'crane_x7_controllers.yaml']),
                       '--inactive', *spawner_type_arguments(os.environ.get('ROS_DISTRO', ''))],
            output='screen',
            # (PythonExpression, not AndSubstitution: Humble's launch has no AndSubstitution)
            condition=IfCondition(PythonExpression(
                ["'", control, "'.lower() in ('true', '1') and '", spawn,
                 "'.lower() in ('true', '1')"])),
        ),
        Node(
            package='rviz2',
            executable='rviz2',
            name='plag_rviz',   # MoveIt's demo.launch.py already runs a node named rviz2
            arguments=['-d', PathJoinSubstitution([share, 'config', 'plag_ros.rviz'])],
            condition=IfCondition(rviz),
        ),
    ])
