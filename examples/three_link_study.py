"""Seed 002's three-link arm study: see :mod:`plag_ros.core.studies.three_link`.

Usage: ``python examples/three_link_study.py OUTPUT_DIR [--duration 6] [--rate 200]
[--no-control]``.
"""
from __future__ import annotations

import sys

from plag_ros.core.studies.three_link import main

if __name__ == '__main__':
    sys.exit(main())
