"""Test-wide settings: float64 everywhere, a ROS 2 graph confined to this machine."""
from __future__ import annotations

import os
import sys
from pathlib import Path

# Generated robots (test/robots.py) and ROS helpers are imported as plain modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Every ROS test runs its nodes on this machine only, over Fast DDS; each test module
# picks its own ROS_DOMAIN_ID so modules never see each other's topics.
os.environ.setdefault('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp')
os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
os.environ.setdefault('ROS_LOCALHOST_ONLY', '1')
