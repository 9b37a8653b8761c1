"""Seed 001: double pendulum vs MuJoCo, branched pendulum, per-branch partial torque tables;
see :mod:`plag_ros.core.studies.branching`.

Usage: ``python examples/seed001_branching.py OUTPUT_DIR [--duration 10]``.
"""
from __future__ import annotations

import sys

from plag_ros.core.studies.branching import main

if __name__ == '__main__':
    sys.exit(main())
