"""plag_ros on the real CRANE-X7: join the robot's running ROS 2 graph.

The robot's own bring-up (crane_x7_ros: ``ros2 launch crane_x7_examples demo.launch.py``
or ``crane_x7_control``) runs separately and provides ``/joint_states`` (200 Hz, reliable)
and ``robot_description`` (transient local). This file adds:

* ``plag_dynamics`` (dynamics_node, config/crane_x7.yaml): the live decomposition;
* ``plag_impedance`` (impedance_node, config/impedance.yaml) when ``control:=true``;
* rviz2 with config/plag_ros.rviz when ``rviz:=true``.

Usage: ``ros2 launch plag_ros crane_x7.launch.py [control:=true] [rviz:=true]``.
"""
from launch import LaunchDescription  # noqa: I001 - launch is the ROS package, not launch/
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare('plag_ros')
    control = LaunchConfiguration('control')
    rviz = LaunchConfiguration('rviz')
    description_source = LaunchConfiguration('robot_description_source')
    return LaunchDescription([
        DeclareLaunchArgument('control', default_value='false',
                              description='start the partial-impedance controller'),
        DeclareLaunchArgument('rviz', default_value='false',
                              description='start rviz2 with the plag_ros displays'),
        DeclareLaunchArgument('robot_description_source', default_value='topic',
                              description="dynamics model: 'topic' (the robot's "
                                          "robot_description) or 'file' (bundled URDF)"),
        Node(
            package='plag_ros',
            executable='dynamics_node',
            name='plag_dynamics',
            output='screen',
            parameters=[PathJoinSubstitution([share, 'config', 'crane_x7.yaml']),
                        {'robot_description_source': description_source}],
        ),
        Node(
            package='plag_ros',
            executable='impedance_node',
            name='plag_impedance',
            output='screen',
            parameters=[PathJoinSubstitution([share, 'config', 'impedance.yaml'])],
            condition=IfCondition(control),
        ),
        Node(
            package='rviz2',
            executable='rviz2',
            name='rviz2',
            arguments=['-d', PathJoinSubstitution([share, 'config', 'plag_ros.rviz'])],
            condition=IfCondition(rviz),
        ),
    ])
