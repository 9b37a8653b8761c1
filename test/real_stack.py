"""The tests that need a ROS 2 install: how they skip, how they are made to run.

launch/launch_ros, ros2_control's controller manager and spawner, and robot_state_publisher
are on no package registry, so CI (a plain virtualenv with the rclpy and message wheels)
has none of them: the tests marked ``launch`` and ``ros2_control`` skip there with the
reason and these commands, and our side of each interface is checked in every suite
against facts recorded from their sources (test/data). On a ROS 2 install they run as
written in docs/testing.md ("What is tested how"); ``PLAG_REQUIRE_LAUNCH=1`` and
``PLAG_REQUIRE_ROS2_CONTROL=1`` turn a skip into a failure, so a run that was meant to
exercise the real stack cannot pass without it.
"""
from __future__ import annotations

import os

import pytest

__all__ = ['LAUNCH_ENABLE', 'ROS2_CONTROL_ENABLE', 'missing_or_fail']

_BUILD = ('source /opt/ros/$ROS_DISTRO/setup.bash; in the colcon workspace `colcon build '
          '--packages-select plag_ros && source install/setup.bash`; from src/plag_ros, '
          '`pip install -r requirements/test-tools.txt`')
LAUNCH_ENABLE = (f'on a ROS 2 install (Humble, Jazzy): {_BUILD}, then '
                 '`PLAG_REQUIRE_LAUNCH=1 python3 -m pytest -q test -m launch`')
"""How to run the tests marked ``launch`` (the real launch/launch_ros)."""
ROS2_CONTROL_ENABLE = (
    'on a ROS 2 install (Humble, Jazzy): `sudo apt install ros-$ROS_DISTRO-ros2-control '
    'ros-$ROS_DISTRO-ros2-controllers ros-$ROS_DISTRO-robot-state-publisher`, '
    f'{_BUILD}, then `PLAG_REQUIRE_LAUNCH=1 PLAG_REQUIRE_ROS2_CONTROL=1 python3 -m pytest -q '
    'test -m ros2_control`')
"""How to run the tests marked ``ros2_control`` (controller manager, spawner,
robot_state_publisher)."""


def missing_or_fail(why: str, variable: str) -> None:
    """Skip the calling test module because ``why``; fail instead when ``variable`` is 1."""
    if os.environ.get(variable) == '1':
        pytest.fail(f'{variable}=1 but {why}', pytrace=False)
    pytest.skip(why, allow_module_level=True)
