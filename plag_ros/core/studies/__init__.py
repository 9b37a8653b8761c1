"""Seed experiments as runnable studies: ``plag-ros study NAME OUT`` or the scripts in
``examples/``. Each study writes its figures and a ``summary.json`` of the numbers its
test checks. :data:`STUDIES` maps each name to its module under this package."""
from __future__ import annotations

STUDIES: dict[str, tuple[str, str]] = {
    'three-link': ('three_link', "seed 002: three-link arm, Figs. 5-14, eq. 1's 1/2"),
    'pendulums': ('pendulums', 'seed 000 sec. 3: 1-3 link PD, slider reconstruction, 10 DoF'),
    'branching': ('branching', 'seed 001: double pendulum vs MuJoCo, branched pendulum, '
                               'per-branch tables'),
}
"""study name -> (module in plag_ros.core.studies, one-line description)"""
