"""The three-link arm study of Gunji, Kusaka and Tanaka 2025 [MPF]: see
:mod:`plag_ros.core.studies.three_link`.

Usage: ``python examples/three_link_study.py OUTPUT_DIR [--duration 6] [--rate 200]
[--no-control]``.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import sys

from plag_ros.core.studies.three_link import main

if __name__ == '__main__':
    sys.exit(main())
