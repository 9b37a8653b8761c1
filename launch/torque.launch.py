"""plag_ros torque mode on the real CRANE-X7: our bus driver in place of the robot's.

Read docs/concepts/torque-mode.md (the safety checklist) first. Do not run the robot's own
bring-up (``crane_x7_control``) beside this: both would own the servo bus. This file starts:

* ``plag_driver`` (config/torque_mode.yaml) on ``port``: ``/joint_states`` like
  crane_x7_control, position mode until the controller switches it to current mode;
* ``plag_dynamics`` (dynamics_node, config/crane_x7.yaml);
* ``plag_impedance`` (impedance_node, config/torque_mode.yaml: effort interface,
  ``switch.method: driver``) when ``control:=true``; ``~/enable`` puts the arm joints in
  current mode, a disable or a fault gives them back to position mode;
* rviz2 (node ``plag_rviz``, config/plag_ros.rviz) and robot_state_publisher with the bundled
  URDF on ``/joint_states`` (its ``/tf`` and ``robot_description``) when ``rviz:=true``.

The plag_ros nodes are those of ``torque_setup()`` in plag_ros/ros/node_setups.py.

All three take their model from ``robot_description_source``: the bundled URDF
(``file``, the default) or the ``robot_description`` of a robot_state_publisher the lab
runs (``topic``).

``params_file:=PATH`` hands every plag_ros node a parameter file of yours after its bundled
one (docs/tutorials/live.md, "Launch arguments").

``namespace:=NS`` (default '': the root) starts every node under ``/NS``: its topics,
services and TF (``/NS/tf``) are that arm's own, beside another arm's bring-up
(docs/tutorials/live.md, "Launch arguments"). Under an outer ``PushRosNamespace`` of
yours the launch-time checks still assume ``/NS`` or the root: give the whole namespace
with ``namespace:=``.

Usage: ``ros2 launch plag_ros torque.launch.py [port:=/dev/ttyUSB0] [control:=true]
[rviz:=true] [robot_description_source:=file|topic] [params_file:=PATH]
[namespace:=NS]``. The arguments, their defaults and the values each accepts are
``torque_arguments()`` of plag_ros/ros/node_setups.py.
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
from plag_ros.ros.node_setups import PACKAGE, torque_arguments, torque_setup


def generate_launch_description():
    share = FindPackageShare(PACKAGE)
    control = LaunchConfiguration('control')
    params_file = LaunchConfiguration('params_file')
    rviz = LaunchConfiguration('rviz')
    namespace = LaunchConfiguration('namespace')
    return LaunchDescription([
        *(launch_argument(argument, share) for argument in torque_arguments()),
        namespaced(namespace, [
            *(plag_node(setup, share, control, params_file, namespace)
              for setup in torque_setup(LaunchConfiguration('port'),
                                        LaunchConfiguration('robot_description_source'))),
            state_publisher_node(share, rviz),
            rviz_node(share, rviz),
        ]),
    ])
