"""The launch actions of node_setups' descriptions: one place for the four launch files.

``launch/sim.launch.py``, ``crane_x7.launch.py``, ``torque.launch.py`` and
``replay.launch.py`` turn each :class:`~plag_ros.ros.node_setups.NodeSetup` into a
launch_ros ``Node`` and each :class:`~plag_ros.ros.node_setups.LaunchArgument` into a
``DeclareLaunchArgument`` with these functions, and take the nodes they start beside ours,
robot_state_publisher on the bundled URDF and rviz2 with config/plag_ros.rviz, from here
too (:func:`state_publisher_node`, :func:`rviz_node`), written once. :func:`namespaced`
puts what a launch file starts into its ``namespace:=``. launch and launch_ros
come with a ROS 2 install only (no package registry has them), so each function imports
them when called: the rest of plag_ros, and CI, which checks these functions by their
syntax trees (test/launch_syntax.py), never need them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plag_ros.ros.node_setups import (
    PACKAGE,
    LaunchArgument,
    NodeSetup,
    check_params_file,
    namespace_of,
    own_params_file,
    parameter_layers,
)

__all__ = ['TF_REMAPS', 'launch_argument', 'namespaced', 'plag_node', 'rviz_node',
           'state_publisher_node']

TF_REMAPS = [('/tf', 'tf'), ('/tf_static', 'tf_static')]
"""tf2_ros's broadcasters and listeners use the absolute ``/tf`` and ``/tf_static``
(geometry2 humble d0dbd51 transform_broadcaster.h:72, transform_listener.h:139-153): remapped
to the relative names, rcl expands both sides of a rule in the node's namespace, so they
stay ``/tf`` in the root and become ``/arm1/tf`` in ``/arm1``: one TF tree per arm, its
frames unprefixed (ros2/rcl humble 6d0fd90 remap.c:127-131 and 214-217). rviz2's own TF
listener node keeps the global arguments, these remaps with them (geometry2 humble
transform_listener.cpp:49-54)."""


def namespaced(namespace: Any, actions: Sequence[Any]) -> Any:
    """``actions`` in the namespace the ``namespace`` launch configuration names
    (node_setups.namespace_of, which refuses one that is no ROS namespace): a scoped
    ``GroupAction`` whose first action pushes it (launch_ros ``PushRosNamespace``) when one
    is given, and pushes nothing for '' (no ``-r __ns:=/`` on any node: each starts as it
    did before the argument existed).

    launch visits the entities an action returns depth first, before the next action
    (launch humble f31c1ff visit_all_entities_and_collect_futures_impl.py:32-45), so the
    push comes before every node of the group, those an ``OpaqueFunction`` returns too; the
    group's scope ends it (group_action.py:110-140).
    """
    from launch.actions import GroupAction, OpaqueFunction
    from launch_ros.actions import PushRosNamespace

    def push(context: Any) -> list:
        full = namespace_of(namespace.perform(context))
        return [PushRosNamespace(full)] if full else []

    return GroupAction([OpaqueFunction(function=push), *actions])


def spawner_param_file(controllers_file: Any, namespace: Any) -> Any:
    """The spawner's ``--param-file``: a substitution that gives the ``controllers_file``
    launch configuration's file itself in the root and, in the namespace the ``namespace``
    one names, a temporary copy keyed by the controller's full name
    (controller_file.spawner_file: no spawner release takes one key in both).
    """
    from launch.substitution import Substitution

    from plag_ros.ros.controller_file import spawner_file

    class SpawnerParamFile(Substitution):
        def perform(self, context: Any) -> str:
            return spawner_file(controllers_file.perform(context),
                                namespace_of(namespace.perform(context)))

    return SpawnerParamFile()


def plag_node(setup: NodeSetup, share: Any, control: Any, params_file: Any,
              namespace: Any) -> Any:
    """The launch_ros ``Node`` of one setup, made when the launch runs (an
    ``OpaqueFunction``): whether the user's ``params_file`` is given, and so whether the
    node gets it, is known only then (launch_ros would pass an empty path on as a file).

    Args:
        setup: the node, its parameter file (under ``share``/config), the parameters set on
            top of it, its remappings, and whether it runs only with the controller.
        share: the package's share directory (``FindPackageShare``).
        control: the ``control`` launch configuration (the condition of a
            ``control_only`` node).
        params_file: the ``params_file`` launch configuration: a file of the user's, handed
            over after the bundled one (``node_setups.parameter_layers``), or ''.
        namespace: the ``namespace`` launch configuration (the node is put there by
            :func:`namespaced`): the user's file must reach the node there.
    """
    from launch.actions import OpaqueFunction
    from launch.conditions import IfCondition
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.actions import Node

    def node(context: Any) -> list:
        own = own_params_file(params_file.perform(context))
        if own:    # what the launch sets wins silently over the file: refuse a clash
            check_params_file(own, setup, {
                key: value.perform(context) if hasattr(value, 'perform') else value
                for key, value in setup.overrides.items()},
                namespace_of(namespace.perform(context)))
        bundled, *rest = parameter_layers(setup, own)
        parameters = [PathJoinSubstitution([share, 'config', bundled]), *rest]
        return [Node(package=PACKAGE, executable=setup.executable, name=setup.name,
                     output='screen', parameters=parameters,
                     remappings=list(setup.remappings),
                     condition=IfCondition(control) if setup.control_only else None)]

    return OpaqueFunction(function=node)


def launch_argument(argument: LaunchArgument, share: Any) -> Any:
    """The ``DeclareLaunchArgument`` of one argument (a share-relative default joined to
    ``share``; no choices is None: launch refuses an empty list)."""
    from launch.actions import DeclareLaunchArgument
    from launch.substitutions import PathJoinSubstitution

    default = argument.default
    if argument.in_share:
        default = PathJoinSubstitution([share, *(argument.default or '').split('/')])
    return DeclareLaunchArgument(argument.name, default_value=default,
                                 choices=list(argument.choices) or None,
                                 description=argument.description)


def state_publisher_node(share: Any, when: Any,
                         remappings: Sequence[tuple[str, str]] = ()) -> Any:
    """robot_state_publisher with the bundled URDF (urdf/crane_x7.urdf under ``share``), on
    the graph's ``joint_states``: its ``tf`` (:data:`TF_REMAPS`: ``/tf`` in the root) and,
    unless ``remappings`` move it, ``robot_description``.

    Args:
        share: the package's share directory (``FindPackageShare``).
        when: the boolean launch configuration it runs under (``rviz``,
            ``robot_state_publisher``).
        remappings: where its topics go instead, after :data:`TF_REMAPS` (sim.launch.py
            keeps ``robot_description`` the simulator's alone).
    """
    from launch.conditions import IfCondition
    from launch.substitutions import Command, PathJoinSubstitution
    from launch_ros.actions import Node
    from launch_ros.parameter_descriptions import ParameterValue

    return Node(package='robot_state_publisher', executable='robot_state_publisher',
                name='robot_state_publisher',
                parameters=[{'robot_description': ParameterValue(
                    Command(['cat ', PathJoinSubstitution([share, 'urdf', 'crane_x7.urdf'])]),
                    value_type=str)}],
                remappings=[*TF_REMAPS, *remappings], output='screen',
                condition=IfCondition(when))


def rviz_node(share: Any, when: Any, sim_time: bool = False) -> Any:
    """rviz2 with config/plag_ros.rviz, named ``plag_rviz`` (MoveIt's demo.launch.py already
    runs a node named rviz2), under the boolean launch configuration ``when``; on the bag's
    clock with ``sim_time`` (replay.launch.py). Its displays' topics are relative (they
    resolve in its namespace) and its TF is :data:`TF_REMAPS`'."""
    from launch.conditions import IfCondition
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.actions import Node

    return Node(package='rviz2', executable='rviz2', name='plag_rviz',
                arguments=['-d', PathJoinSubstitution([share, 'config', 'plag_ros.rviz'])],
                parameters=[{'use_sim_time': True}] if sim_time else None,
                remappings=list(TF_REMAPS), condition=IfCondition(when))
