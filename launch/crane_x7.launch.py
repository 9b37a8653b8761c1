"""plag_ros on the real CRANE-X7: join the robot's running ROS 2 graph.

The robot's own bring-up (crane_x7_ros: ``ros2 launch crane_x7_examples demo.launch.py``
or ``crane_x7_control``) runs separately and provides ``/joint_states`` (200 Hz, reliable)
and ``robot_description`` (transient local, from ``demo.launch.py``'s
robot_state_publisher only). This file adds:

* ``plag_dynamics`` (dynamics_node, config/crane_x7.yaml): the live decomposition;
* ``plag_impedance`` (impedance_node, config/impedance.yaml) when ``control:=true``;
* with ``control:=true`` (and ``spawn_controller:=true``, the default) controller_manager's
  ``spawner``: it loads ``plag_arm_position_controller`` (``controllers_file``, by default
  config/crane_x7_controllers.yaml: a forward_command_controller/ForwardCommandController on
  the position interfaces of the 7 arm joints) into the robot's ``/controller_manager`` and
  configures it INACTIVE; enabling plag_impedance switches the arm from
  ``crane_x7_arm_controller`` to it. The file is checked first (a missing, unreadable or
  incomplete file ends the launch with the reason), and plag_impedance compares the loaded
  controller with it. ``spawn_controller:=false`` leaves the robot's controllers alone (a
  machine without controller_manager installed);
* rviz2 (node ``plag_rviz``) with config/plag_ros.rviz when ``rviz:=true``. Its arm and
  Effort arrows need ``/tf`` and ``robot_description``, which MoveIt's ``demo.launch.py``
  provides (its robot_state_publisher) and ``crane_x7_control.launch.py`` alone does on Jazzy
  (crane_x7_ros #212) but not on Humble. Five seconds after start, with ``rviz:=true``, the
  launch looks for publishers of both and says at once when there are none;
* robot_state_publisher on the robot's ``/joint_states`` with the bundled URDF when
  ``robot_state_publisher:=true``: for a bring-up without one.

The plag_ros nodes are those of ``robot_setup()`` in plag_ros/ros/node_setups.py, the
description ``plag-ros run`` (the dynamics node without ``ros2 launch``) reads too.

``params_file:=PATH`` hands every plag_ros node a parameter file of yours after its bundled
one (docs/tutorials/live.md, "Launch arguments").

``namespace:=NS`` (default '': the root) starts every node under ``/NS``: its topics,
services and TF (``/NS/tf``) are that arm's own, beside another arm's bring-up
(docs/tutorials/live.md, "Launch arguments").
The robot's own bring-up must then run in the same namespace, with ``/tf`` and
``/tf_static`` remapped to ``tf`` and ``tf_static``: the spawner loads the controller into
``/NS/controller_manager`` and plag_impedance commands ``/NS/...``.

The controller file is checked for the namespace's controller, and the spawner gets a
temporary copy keyed ``/NS/plag_arm_position_controller`` (ros2_control >= 2.38.0 on
Humble, >= 4.15.0 on Jazzy; the robot's controller manager must run on this machine).
Under an outer ``PushRosNamespace`` of yours the checks still assume ``/NS`` or the root:
give the whole namespace with ``namespace:=`` (docs/tutorials/live.md).
Usage: ``ros2 launch plag_ros crane_x7.launch.py [control:=true] [spawn_controller:=false]
[rviz:=true] [robot_description_source:=topic|file] [controllers_file:=PATH]
[robot_state_publisher:=true] [params_file:=PATH] [namespace:=NS]``. The arguments, their
defaults and the values each accepts are ``robot_arguments()`` of
plag_ros/ros/node_setups.py.
"""
import os  # noqa: I001 - launch is the ROS package, not launch/: keep it apart

from launch import LaunchDescription
from launch.actions import LogInfo, OpaqueFunction, TimerAction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PythonExpression
from launch_ros.actions import Node
from launch_ros.ros_adapters import get_ros_node
from launch_ros.substitutions import FindPackageShare

from plag_ros.ros.controller_file import CONTROLLER, read_controller_file, spawner_type_arguments
from plag_ros.ros.launch_actions import (
    launch_argument,
    namespaced,
    plag_node,
    rviz_node,
    spawner_param_file,
    state_publisher_node,
)
from plag_ros.ros.node_setups import (
    PACKAGE,
    namespace_of,
    robot_arguments,
    robot_setup,
    view_inputs,
    view_inputs_line,
)


def check_controller_file(context) -> list:
    """Before the spawner runs (and under its condition): the controller file must be
    there, readable and complete, with a section that reaches the controller in the
    launch's namespace (controller_file.read_controller_file; the spawner then gets the
    file itself in the root, a copy keyed ``/NS/plag_arm_position_controller`` in a
    namespace: launch_actions.spawner_param_file).

    The spawner passes only the path, and the controller manager reads the file in its own
    process when it creates the controller: a bad file would fail there, later, with a
    message in the robot's log. Raising here ends the launch with the reason instead.
    """
    read_controller_file(LaunchConfiguration('controllers_file').perform(context),
                         namespace=namespace_of(LaunchConfiguration('namespace')
                                                .perform(context)))
    return []


def start_graph_view(context) -> list:
    """launch_ros's own node (humble 25a207c, jazzy 62c56e5), created at start so that
    discovery has run by the time check_view_inputs looks at the graph."""
    get_ros_node(context)
    return []


def check_view_inputs(context) -> list:
    """With rviz:=true, a few seconds in: say so when nothing publishes /tf or the robot
    description in the launch's namespace (rviz2 would show no arm and no Effort arrows,
    without a word)."""
    node = get_ros_node(context)
    inputs = view_inputs(namespace_of(LaunchConfiguration('namespace').perform(context)))
    return [LogInfo(msg=view_inputs_line({topic: node.count_publishers(topic)
                                          for topic in inputs}, inputs))]


def generate_launch_description():
    share = FindPackageShare(PACKAGE)
    control = LaunchConfiguration('control')
    params_file = LaunchConfiguration('params_file')
    rviz = LaunchConfiguration('rviz')
    spawn = LaunchConfiguration('spawn_controller')
    description_source = LaunchConfiguration('robot_description_source')
    controllers_file = LaunchConfiguration('controllers_file')
    state_publisher = LaunchConfiguration('robot_state_publisher')
    namespace = LaunchConfiguration('namespace')
    # control:=true and spawn_controller:=true. (PythonExpression, not AndSubstitution:
    # Humble's launch has no AndSubstitution)
    spawning = IfCondition(PythonExpression(
        ["'", control, "'.lower() in ('true', '1') and '", spawn,
         "'.lower() in ('true', '1')"]))
    return LaunchDescription([
        *(launch_argument(argument, share) for argument in robot_arguments()),
        OpaqueFunction(function=check_controller_file, condition=spawning),
        namespaced(namespace, [
            *(plag_node(setup, share, control, params_file, namespace)
              for setup in robot_setup(description_source, controllers_file)),
            # Flags of ros-controls/ros2_control controller_manager/controller_manager/
            # spawner.py, present on the humble and jazzy branches alike: positional
            # controller name, -c/--controller-manager, -p/--param-file (loaded into the
            # controller before configure), --inactive (configure, do not activate; added on
            # humble in #755, 2022, replacing the deprecated --stopped, which jazzy no longer
            # has); on humble also -t/--controller-type (spawner_type_arguments). The
            # controller manager's name is relative: the spawner puts its own namespace in
            # front (humble 0941f73 spawner.py:183-192), /controller_manager in the root. No
            # -n/--namespace: with the group's __ns it raises (177-181).
            Node(
                package='controller_manager',
                executable='spawner',
                arguments=[CONTROLLER, '--controller-manager', 'controller_manager',
                           '--param-file', spawner_param_file(controllers_file, namespace),
                           '--inactive',
                           *spawner_type_arguments(os.environ.get('ROS_DISTRO', ''))],
                output='screen',
                condition=spawning,
            ),
            state_publisher_node(share, state_publisher),
            rviz_node(share, rviz),
        ]),
        OpaqueFunction(function=start_graph_view, condition=IfCondition(rviz)),
        TimerAction(period=5.0, actions=[OpaqueFunction(function=check_view_inputs)],
                    condition=IfCondition(rviz)),
    ])
