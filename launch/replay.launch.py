"""plag_ros from a recorded bag: a bag player plus the dynamics node on sim time.

The bag (``ros2 bag record /joint_states`` or ``plag-ros record`` on the robot, sqlite3 or
mcap) is played with ``/clock`` carrying the bag time; ``plag_dynamics``
(config/crane_x7.yaml, ``use_sim_time: true``) decomposes the replayed joint states as it
would live. The player is ``player:=plag`` (default): ``plag-ros replay BAG --clock``, this
package's own player (rosbags, no ROS install beyond rclpy needed), which waits until the
dynamics node subscribes before the first message; or ``player:=ros2``: ``ros2 bag play
--clock`` (ros2cli and rosbag2 needed: without a ``ros2`` executable on PATH the launch
stops at once with an error that says so, instead of running without the bag).
The robot's ``robot_description`` is usually not in the bag, so the model comes from the
bundled URDF (``robot_description_source:=file``) unless told otherwise. rviz2 (node
``plag_rviz``) with config/plag_ros.rviz starts with ``rviz:=true``; ``control:=true`` adds
the partial-impedance controller (config/impedance.yaml) on sim time, to study the
commands it would have sent during the recorded motion (nothing executes them on a
replay).

Usage: ``ros2 launch plag_ros replay.launch.py bag:=/path/to/bag [rate:=1.0]
[loop:=true] [player:=plag|ros2] [rviz:=true] [control:=true]``. Without ``ros2 launch``,
``plag-ros replay BAG --clock`` and ``dynamics_node --ros-args -p use_sim_time:=true`` do
the same.
"""
import shutil  # noqa: I001 - launch (below) is the ROS package, not launch/

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, ExecuteProcess, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare

from plag_ros.ros.node_setups import PACKAGE, replay_setup

PLAYERS = ('plag', 'ros2')


def _player(context, bag, rate, loop, player):
    """The bag player's process, or a clear error when it cannot run here."""
    name = player.perform(context)
    if name not in PLAYERS:
        raise RuntimeError(f'replay.launch.py: player:={name!r}, expected one of {PLAYERS}')
    looping = loop.perform(context).lower() in ('true', '1')
    if name == 'ros2':
        if shutil.which('ros2') is None:
            raise RuntimeError(
                'replay.launch.py: player:=ros2 needs `ros2 bag play` (ros2cli, rosbag2), '
                'and no ros2 executable is on PATH; use player:=plag (plag-ros replay)')
        cmd = ['ros2', 'bag', 'play', bag, '--clock', '--rate', rate]
    else:
        cmd = [ExecutableInPackage('plag-ros', 'plag_ros'), 'replay', bag, '--clock',
               '--rate', rate, '--wait-subscribers', '1']
    return [ExecuteProcess(cmd=cmd + (['--loop'] if looping else []), output='screen',
                           name='bag_player')]


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
    bag = LaunchConfiguration('bag')
    rate = LaunchConfiguration('rate')
    loop = LaunchConfiguration('loop')
    rviz = LaunchConfiguration('rviz')
    control = LaunchConfiguration('control')
    description_source = LaunchConfiguration('robot_description_source')
    player = LaunchConfiguration('player')
    return LaunchDescription([
        DeclareLaunchArgument('bag', description='rosbag2 bag directory (or .mcap/.db3 file) '
                                                 'holding /joint_states'),
        DeclareLaunchArgument('rate', default_value='1.0', description='playback speed'),
        DeclareLaunchArgument('loop', default_value='false', description='replay forever'),
        DeclareLaunchArgument('player', default_value='plag',
                              description="'plag': plag-ros replay (no ROS CLI needed); "
                                          "'ros2': ros2 bag play"),
        DeclareLaunchArgument('rviz', default_value='false',
                              description='start rviz2 with the plag_ros displays'),
        DeclareLaunchArgument('control', default_value='false',
                              description='start the partial-impedance controller on sim '
                                          'time (its commands reach no robot)'),
        DeclareLaunchArgument('robot_description_source', default_value='file',
                              description="dynamics model: 'file' (bundled URDF) or 'topic' "
                                          '(a robot_description published alongside)'),
        OpaqueFunction(function=_player, args=[bag, rate, loop, player]),
        *(plag_node(setup, share, control) for setup in replay_setup(description_source)),
        Node(
            package='rviz2',
            executable='rviz2',
            name='plag_rviz',   # MoveIt's demo.launch.py already runs a node named rviz2
            arguments=['-d', PathJoinSubstitution([share, 'config', 'plag_ros.rviz'])],
            parameters=[{'use_sim_time': True}],
            condition=IfCondition(rviz),
        ),
    ])
