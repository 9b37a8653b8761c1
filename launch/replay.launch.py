"""plag_ros from a recorded bag: ``ros2 bag play --clock`` plus the dynamics node on sim time.

The bag (``ros2 bag record /joint_states`` on the robot, sqlite3 or mcap) is played with
``ros2 bag play --clock`` so ``/clock`` carries the bag time; ``plag_dynamics``
(config/crane_x7.yaml, ``use_sim_time: true``) decomposes the replayed joint states as it
would live. The robot's ``robot_description`` is usually not in the bag, so the model
comes from the bundled URDF (``robot_description_source:=file``) unless told otherwise.
rviz2 with config/plag_ros.rviz starts with ``rviz:=true``; ``control:=true`` adds the
partial-impedance controller (config/impedance.yaml) on sim time, to study the commands it
would have sent during the recorded motion (nothing executes them on a replay).

Usage: ``ros2 launch plag_ros replay.launch.py bag:=/path/to/bag [rate:=1.0]
[loop:=true] [rviz:=true] [control:=true]``. Without a ROS install, ``plag-ros replay BAG
--clock`` and ``dynamics_node --ros-args -p use_sim_time:=true`` do the same.
"""
from launch import LaunchDescription  # noqa: I001 - launch is the ROS package, not launch/
from launch.actions import DeclareLaunchArgument, ExecuteProcess
from launch.conditions import IfCondition, UnlessCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description():
    share = FindPackageShare('plag_ros')
    bag = LaunchConfiguration('bag')
    rate = LaunchConfiguration('rate')
    loop = LaunchConfiguration('loop')
    rviz = LaunchConfiguration('rviz')
    control = LaunchConfiguration('control')
    description_source = LaunchConfiguration('robot_description_source')
    play = ['ros2', 'bag', 'play', bag, '--clock', '--rate', rate]
    return LaunchDescription([
        DeclareLaunchArgument('bag', description='rosbag2 bag directory (or .mcap/.db3 file) '
                                                 'holding /joint_states'),
        DeclareLaunchArgument('rate', default_value='1.0', description='playback speed'),
        DeclareLaunchArgument('loop', default_value='false', description='replay forever'),
        DeclareLaunchArgument('rviz', default_value='false',
                              description='start rviz2 with the plag_ros displays'),
        DeclareLaunchArgument('control', default_value='false',
                              description='start the partial-impedance controller on sim '
                                          'time (its commands reach no robot)'),
        DeclareLaunchArgument('robot_description_source', default_value='file',
                              description="dynamics model: 'file' (bundled URDF) or 'topic' "
                                          '(a robot_description published alongside)'),
        ExecuteProcess(cmd=play, output='screen', condition=UnlessCondition(loop)),
        ExecuteProcess(cmd=play + ['--loop'], output='screen', condition=IfCondition(loop)),
        Node(
            package='plag_ros',
            executable='dynamics_node',
            name='plag_dynamics',
            output='screen',
            parameters=[PathJoinSubstitution([share, 'config', 'crane_x7.yaml']),
                        {'use_sim_time': True,
                         'robot_description_source': description_source}],
        ),
        Node(
            package='plag_ros',
            executable='impedance_node',
            name='plag_impedance',
            output='screen',
            parameters=[PathJoinSubstitution([share, 'config', 'impedance.yaml']),
                        {'use_sim_time': True}],
            condition=IfCondition(control),
        ),
        Node(
            package='rviz2',
            executable='rviz2',
            name='rviz2',
            arguments=['-d', PathJoinSubstitution([share, 'config', 'plag_ros.rviz'])],
            parameters=[{'use_sim_time': True}],
            condition=IfCondition(rviz),
        ),
    ])
