"""Seed 000 section 3: pendulums, slider reconstruction, 10 DoF; see
:mod:`plag_ros.core.studies.pendulums`.

Usage: ``python examples/seed000_pendulums.py OUTPUT_DIR [--duration 10]
[--damping tip|joint]``.
"""
from __future__ import annotations

import sys

from plag_ros.core.studies.pendulums import main

if __name__ == '__main__':
    sys.exit(main())
