"""Kusaka and Tanaka 2025 [PTT]: double pendulum vs MuJoCo, branched pendulum, per-branch
partial torque tables; see :mod:`plag_ros.core.studies.branching`.

Usage: ``python examples/branching_partial_torque_tensor.py OUTPUT_DIR [--duration 10]``.

[PTT] T. Kusaka, T. Tanaka, "Partial Torque Tensor and Its Building Block Representation
for Dynamics of Branching Structures Using Computational Graph", Robotics 2025, 14(3), 31,
doi:10.3390/robotics14030031.
"""
from __future__ import annotations

import sys

from plag_ros.core.studies.branching import main

if __name__ == '__main__':
    sys.exit(main())
