"""Kusaka and Tanaka 2022 [PL], section 3: pendulums, slider reconstruction, 10 DoF; see
:mod:`plag_ros.core.studies.pendulums`.

Usage: ``python examples/partial_lagrangian_pendulums.py OUTPUT_DIR [--duration 10]
[--damping tip|joint]``.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import sys

from plag_ros.core.studies.pendulums import main

if __name__ == '__main__':
    sys.exit(main())
