"""The launch actions of node_setups' descriptions: one place for the three launch files.

``launch/sim.launch.py``, ``crane_x7.launch.py`` and ``replay.launch.py`` turn each
:class:`~plag_ros.ros.node_setups.NodeSetup` into a launch_ros ``Node`` and each
:class:`~plag_ros.ros.node_setups.LaunchArgument` into a ``DeclareLaunchArgument`` with
these functions. launch and launch_ros come with a ROS 2 install only (no package
registry has them), so each function imports them when called: the rest of plag_ros, and
CI, which checks these functions by their syntax trees (test/launch_syntax.py), never need
them.
"""
from __future__ import annotations

from typing import Any

from plag_ros.ros.node_setups import PACKAGE, LaunchArgument, NodeSetup

__all__ = ['launch_argument', 'plag_node']


def plag_node(setup: NodeSetup, share: Any, control: Any) -> Any:
    """The launch_ros ``Node`` of one setup.

    Args:
        setup: the node, its parameter file (under ``share``/config), the parameters set on
            top of it, its remappings, and whether it runs only with the controller.
        share: the package's share directory (``FindPackageShare``).
        control: the ``control`` launch configuration (the condition of a
            ``control_only`` node).
    """
    from launch.conditions import IfCondition
    from launch.substitutions import PathJoinSubstitution
    from launch_ros.actions import Node

    parameters = [PathJoinSubstitution([share, 'config', setup.params_file])]
    if setup.overrides:
        parameters.append(dict(setup.overrides))
    return Node(package=PACKAGE, executable=setup.executable, name=setup.name,
                output='screen', parameters=parameters, remappings=list(setup.remappings),
                condition=IfCondition(control) if setup.control_only else None)


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
