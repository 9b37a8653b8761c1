"""Test-wide settings: float64 everywhere, a ROS 2 graph confined to this machine, and each
test file's home (test/homes.py) as its pytest marker."""
from __future__ import annotations

import importlib.abc
import os
import sys
from pathlib import Path

import pytest

# Generated robots (test/robots.py) and ROS helpers are imported as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from homes import ALONE, CORE, HOMES  # noqa: E402

# `PLAG_TEST_HOME=core` (the Makefile's core run): only the core home runs, and any import
# of ROS fails the test that made it, so a file that needs ROS cannot stay in the core home.
CORE_ONLY = os.environ.get('PLAG_TEST_HOME') == CORE
ROS_MODULES = ('rclpy', 'rcl_interfaces', 'rosidl_runtime_py', 'rosidl_parser', 'rpyutils',
               'builtin_interfaces', 'std_msgs', 'std_srvs', 'sensor_msgs', 'geometry_msgs',
               'trajectory_msgs', 'visualization_msgs', 'diagnostic_msgs', 'rosgraph_msgs',
               'controller_manager_msgs', 'launch', 'launch_ros')


class _NoRos(importlib.abc.MetaPathFinder):
    """Refuses the ROS packages: a core test that imports one (directly or through the
    package) is in the wrong home."""

    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ROS_MODULES:
            raise ImportError(f'{name}: a test in the core home imported ROS '
                              '(PLAG_TEST_HOME=core); its home is "ros" (test/homes.py)')
        return None


if CORE_ONLY:
    sys.meta_path.insert(0, _NoRos())
else:
    from plag_ros.ros.rclpy_compat import localhost_only_environment

    # Every ROS test runs its nodes on this machine only, over Fast DDS, in a domain of its
    # own (ros_helpers). The variable that does so depends on the release (rclpy_compat):
    # Jazzy warns at every node start on Humble's.
    os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
    for _name, _value in localhost_only_environment().items():
        os.environ.setdefault(_name, _value)
    if 'ROS_LOCALHOST_ONLY' not in localhost_only_environment():
        os.environ.pop('ROS_LOCALHOST_ONLY', None)


def pytest_collection_modifyitems(config, items):
    """Mark each test with its file's home; a file with none stops the run at collection.

    Files with a test marked ``long`` go first, keeping their order otherwise: pytest-xdist
    (``--dist loadfile --no-loadscope-reorder``) hands out whole files in this order, and a
    long file started last would leave one core idle while it runs on the other.
    """
    homeless = sorted({item.path.name for item in items} - HOMES.keys())
    if homeless:
        raise pytest.UsageError(f'test files with no home in test/homes.py: {homeless}')
    for item in items:
        item.add_marker(HOMES[item.path.name])
        if item.path.name in ALONE:
            item.add_marker('alone')
    long_files = {item.path for item in items if item.get_closest_marker('long')}
    items.sort(key=lambda item: item.path not in long_files)


def pytest_ignore_collect(collection_path, config):
    """In the core run, a file of another home is not even imported (its imports are ROS)."""
    if CORE_ONLY and collection_path.suffix == '.py' and collection_path.name in HOMES:
        return HOMES[collection_path.name] != CORE or None
    return None
