"""plag_ros against the simulated CRANE-X7 (no hardware).

* ``plag_sim`` (sim_node, config/sim.yaml): forward dynamics of the bundled URDF,
  publishing ``joint_states`` (200 Hz) and ``robot_description`` (transient local), taking
  the real driver's ``crane_x7_arm_controller/joint_trajectory`` and our
  ``plag_arm_position_controller/commands``, with an emulated controller switch;
* ``plag_dynamics`` (dynamics_node, config/crane_x7.yaml): the live decomposition, model
  from the simulator's ``robot_description``, waited for without a timeout (a cold start
  of the simulator takes 10-20 s; a fallback to the bundled URDF could differ from it);
* ``plag_impedance`` (impedance_node, config/impedance.yaml) when ``control:=true``,
  switching controllers through the simulator's emulation (``switch.method: sim``);
* rviz2 (node ``plag_rviz``) with config/plag_ros.rviz when ``rviz:=true``, plus
  robot_state_publisher (the bundled URDF, fed by the simulator's ``joint_states``) so
  rviz2 has the TF frames the RobotModel and Effort displays need; on the real robot its
  bring-up provides them. Its own copy of the description goes to
  ``robot_state_publisher/robot_description``, so ``robot_description`` stays the
  simulator's alone.

The plag_ros nodes are those of ``sim_setup()`` in plag_ros/ros/node_setups.py, the
description ``plag-ros sim [--control]`` (the same nodes without ``ros2 launch``) reads too.

``params_file:=PATH`` hands every plag_ros node a parameter file of yours after its bundled
one (docs/tutorials/live.md, "Launch arguments").

``namespace:=NS`` (default '': the root) starts every node under ``/NS``: its topics,
services and TF (``/NS/tf``) are that arm's own, beside another arm's bring-up
(docs/tutorials/live.md, "Launch arguments"). Under an outer ``PushRosNamespace`` of
yours the launch-time checks still assume ``/NS`` or the root: give the whole namespace
with ``namespace:=``.

Usage: ``ros2 launch plag_ros sim.launch.py [control:=true] [rviz:=true]
[params_file:=PATH] [namespace:=NS]`` (``sim_arguments()`` of plag_ros/ros/node_setups.py).
"""
from launch import LaunchDescription  # noqa: I001 - launch is the ROS package, not launch/
from launch.substitutions import LaunchConfiguration
from launch_ros.substitutions import FindPackageShare

from plag_ros.ros.launch_actions import (
    launch_argument,
    namespaced,
    plag_node,
    rviz_node,
    state_publisher_node,
)
from plag_ros.ros.node_setups import PACKAGE, sim_arguments, sim_setup


def generate_launch_description():
    share = FindPackageShare(PACKAGE)
    control = LaunchConfiguration('control')
    params_file = LaunchConfiguration('params_file')
    rviz = LaunchConfiguration('rviz')
    namespace = LaunchConfiguration('namespace')
    return LaunchDescription([
        *(launch_argument(argument, share) for argument in sim_arguments()),
        namespaced(namespace, [
            *(plag_node(setup, share, control, params_file, namespace)
              for setup in sim_setup()),
            # robot_description stays the simulator's alone
            state_publisher_node(
                share, rviz, [('robot_description', 'robot_state_publisher/robot_description')]),
            rviz_node(share, rviz),
        ]),
    ])
