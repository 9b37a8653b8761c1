"""Test-wide settings: float64 everywhere, a ROS 2 graph confined to this machine."""
from __future__ import annotations

import os
import sys
from pathlib import Path

# Generated robots (test/robots.py) and ROS helpers are imported as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from plag_ros.ros.rclpy_compat import localhost_only_environment  # noqa: E402

# Every ROS test runs its nodes on this machine only, over Fast DDS; each test module
# picks its own ROS_DOMAIN_ID so modules never see each other's topics.
# The variable that does so depends on the release (rclpy_compat): Jazzy warns at every
# node start on Humble's.
os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
for _name, _value in localhost_only_environment().items():
    os.environ.setdefault(_name, _value)
if 'ROS_LOCALHOST_ONLY' not in localhost_only_environment():
    os.environ.pop('ROS_LOCALHOST_ONLY', None)
