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
bundled URDF (``robot_description_source:=file``) unless told otherwise.
robot_state_publisher (on sim time) turns the replayed joint states into ``/tf``, so that
rviz2 or Foxglove draw the arm and the Effort arrows: it takes the description the bag
holds (``plag-ros record`` records ``/robot_description``), else the bundled URDF, and
publishes it on ``robot_description`` (with ``player:=ros2``, which republishes the bag's
own, on ``robot_state_publisher/robot_description``). The player waits until the
dynamics node, robot_state_publisher and, with ``control:=true``, the controller all
subscribe to the joint states. ``robot_state_publisher:=auto`` (default) runs
it when it is installed and says at start-up when it is not; ``true`` requires it,
``false`` leaves it out (a graph that has one). rviz2 (node
``plag_rviz``) with config/plag_ros.rviz starts with ``rviz:=true``; ``control:=true`` adds
the partial-impedance controller (config/impedance.yaml) on sim time, to study the
commands it would have sent during the recorded motion (nothing executes them on a
replay).

``params_file:=PATH`` hands every plag_ros node a parameter file of yours after its bundled
one (docs/tutorials/live.md, "Launch arguments").

``namespace:=NS`` puts the nodes under ``/NS`` and plays the bag's topics there too
(``plag-ros replay --namespace NS``; ``ros2 bag play --remap T:=/NS/T`` for each topic of
the bag, node_setups.replay_remaps); ``/clock`` stays in the root, where rclpy's time
source listens, so two replays on one graph still need two ROS domains.

With ``player:=ros2`` a bag whose topics cannot be listed ends the launch (unremapped,
``ros2 bag play`` would publish them in the root). Under an outer ``PushRosNamespace`` of
yours the checks and the bag's topics still assume ``/NS`` or the root: give the whole
namespace with ``namespace:=`` (docs/tutorials/live.md).
Usage: ``ros2 launch plag_ros replay.launch.py bag:=/path/to/bag [rate:=1.0]
[loop:=true] [player:=plag|ros2] [rviz:=true] [control:=true]
[robot_description_source:=file|topic] [robot_state_publisher:=auto|true|false]
[params_file:=PATH] [namespace:=NS]`` (``replay_arguments()`` of
plag_ros/ros/node_setups.py). Without ``ros2 launch``, ``plag-ros replay BAG --clock`` and
``dynamics_node --ros-args -p use_sim_time:=true`` do the same.
"""
import shutil  # noqa: I001 - launch (below) is the ROS package, not launch/
from pathlib import Path

from ament_index_python.packages import PackageNotFoundError, get_package_prefix
from launch import LaunchDescription
from launch.actions import ExecuteProcess, LogInfo, OpaqueFunction
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.substitutions import ExecutableInPackage, FindPackageShare

from plag_ros.io.bag import BagError, bag_robot_description, open_bag
from plag_ros.ros.launch_actions import (
    TF_REMAPS,
    launch_argument,
    namespaced,
    plag_node,
    rviz_node,
)
from plag_ros.ros.node_setups import (
    PACKAGE,
    is_true,
    namespace_of,
    replay_arguments,
    replay_player,
    replay_remaps,
    replay_setup,
    replay_tf,
)


def _player(context, bag, rate, loop, player, state_publisher, control, namespace):
    """The bag player's process (plag_ros.ros.node_setups.replay_player raises, with the
    reason, where the player named cannot run here), playing the bag's topics into the
    namespace (/clock aside)."""
    name = replay_player(player.perform(context), ros2_on_path=shutil.which('ros2') is not None)
    full = namespace_of(namespace.perform(context))
    if name == 'ros2':
        cmd = ['ros2', 'bag', 'play', bag, '--clock', '--rate', rate,
               *replay_remaps(_bag_topics(bag.perform(context)) if full else [], full)]
    else:
        # every joint_states subscriber this launch starts, so none misses the start
        subscribers = (1 + _tf(context, state_publisher).runs
                       + is_true(control.perform(context)))
        cmd = [ExecutableInPackage('plag-ros', 'plag_ros'), 'replay', bag, '--clock',
               '--rate', rate, '--wait-subscribers', str(subscribers),
               *(['--namespace', full] if full else [])]
    return [ExecuteProcess(cmd=cmd + (['--loop'] if is_true(loop.perform(context)) else []),
                           output='screen', name='bag_player')]


def _bag_topics(path):
    """The bag's topics, or why they cannot be listed (a str: replay_remaps refuses it in
    a namespace; in the root the player says what is wrong with the bag)."""
    try:
        with open_bag(path) as reader:
            return list(reader.topics)
    except BagError as err:
        return f'{path}: {err}'


def _installed(package, executable):
    """Whether the ament index knows ``package`` and it has ``lib/<package>/<executable>``."""
    try:
        return (Path(get_package_prefix(package)) / 'lib' / package / executable).is_file()
    except PackageNotFoundError:
        return False


def _tf(context, mode):
    """plag_ros.ros.node_setups.replay_tf for ``robot_state_publisher:=`` on this machine."""
    return replay_tf(mode.perform(context),
                     _installed('robot_state_publisher', 'robot_state_publisher'))


def _state_publisher(context, bag, mode, player, share):
    """robot_state_publisher on the replayed joint states, with the bag's description or
    the bundled URDF; or the start-up line that says why there is none."""
    tf = _tf(context, mode)
    if not tf.runs:
        return [LogInfo(msg=tf.message)] if tf.message else []
    try:
        description = bag_robot_description(bag.perform(context))
    except BagError:
        description = None          # the player reports a bad bag with its own error
    remappings = list(TF_REMAPS)
    if description is None:
        origin = 'the bundled URDF (the bag holds no /robot_description)'
        urdf = Path(share.perform(context)) / 'urdf' / 'crane_x7.urdf'
        description = urdf.read_text()
    else:
        origin = "the bag's /robot_description"
        if player.perform(context) == 'ros2':
            # ros2 bag play republishes the bag's own: one publisher of the latched topic
            remappings.append(('robot_description', 'robot_state_publisher/robot_description'))
    return [LogInfo(msg=f'robot_state_publisher: description from {origin}'),
            Node(package='robot_state_publisher', executable='robot_state_publisher',
                 name='robot_state_publisher', output='screen', remappings=remappings,
                 parameters=[{'robot_description': description, 'use_sim_time': True}])]




def generate_launch_description():
    share = FindPackageShare(PACKAGE)
    bag = LaunchConfiguration('bag')
    rate = LaunchConfiguration('rate')
    loop = LaunchConfiguration('loop')
    rviz = LaunchConfiguration('rviz')
    control = LaunchConfiguration('control')
    params_file = LaunchConfiguration('params_file')
    description_source = LaunchConfiguration('robot_description_source')
    player = LaunchConfiguration('player')
    state_publisher = LaunchConfiguration('robot_state_publisher')
    namespace = LaunchConfiguration('namespace')
    return LaunchDescription([
        *(launch_argument(argument, share) for argument in replay_arguments()),
        OpaqueFunction(function=_player,
                       args=[bag, rate, loop, player, state_publisher, control, namespace]),
        namespaced(namespace, [
            OpaqueFunction(function=_state_publisher,
                           args=[bag, state_publisher, player, share]),
            *(plag_node(setup, share, control, params_file, namespace)
              for setup in replay_setup(description_source)),
            rviz_node(share, rviz, sim_time=True),
        ]),
    ])
