"""The physics modules import no ROS: neither rclpy nor any message package.

DESIGN.md and style.md: ``model``, ``dynamics``, ``kernel``, ``filters``, ``control`` and
``simulation`` run without a ROS install (offline analysis, notebooks, other middleware);
``messages.py`` is the one place where arrays meet ROS messages. Each module is imported in
a fresh interpreter (this test process has long imported rclpy through other tests), which
then lists every ROS module that ended up in ``sys.modules``.

Negative cases show the check can fail: modules that do import rclpy or message packages
must be reported.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

PHYSICS_MODULES = (
    'plag_ros.core.model',
    'plag_ros.core.dynamics',
    'plag_ros.core.kernel',
    'plag_ros.core.filters',
    'plag_ros.core.control',
    'plag_ros.core.simulation',
    'plag_ros.core.compact',
    'plag_ros.core.analysis',
    'plag_ros.core.stability',
    'plag_ros.core.oscillation',
    'plag_ros.core.closed_loop',
    'plag_ros.core.friction',
)
"""Modules that must stay ROS-free; add new physics modules here."""

LATER_PHYSICS_MODULES = ('plag_ros.core.motors', 'plag_ros.core.plausibility')
"""Physics-side modules that other branches add: checked as soon as they exist."""

ROS_PACKAGES = frozenset({
    'rclpy', 'rcl_interfaces', 'builtin_interfaces', 'std_msgs', 'sensor_msgs',
    'geometry_msgs', 'visualization_msgs', 'diagnostic_msgs', 'std_srvs', 'rosgraph_msgs',
    'trajectory_msgs',
})
ROS_PREFIXES = ('rosidl_',)

_PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
packages, prefixes = set(json.loads(sys.argv[2])), tuple(json.loads(sys.argv[3]))
top = {name.split('.')[0] for name in sys.modules}
print(json.dumps(sorted(n for n in top if n in packages or n.startswith(prefixes))))
"""


def ros_modules_imported_by(module: str) -> list[str]:
    """Top-level ROS packages in ``sys.modules`` after importing ``module`` afresh."""
    done = subprocess.run(
        [sys.executable, '-c', _PROBE, module, json.dumps(sorted(ROS_PACKAGES)),
         json.dumps(ROS_PREFIXES)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, 'PYTHONPATH': str(REPO)})
    assert done.returncode == 0, f'importing {module} failed:\n{done.stderr}'
    return json.loads(done.stdout.strip().splitlines()[-1])


def _physics_modules() -> list[str]:
    later = [m for m in LATER_PHYSICS_MODULES if importlib.util.find_spec(m) is not None]
    return [*PHYSICS_MODULES, *later]


@pytest.mark.parametrize('module', _physics_modules())
def test_physics_module_imports_no_ros(module):
    assert ros_modules_imported_by(module) == [], (
        f'{module} pulls in ROS; keep message and rclpy use in messages.py and nodes/')


@pytest.mark.parametrize('module,expected', [
    ('plag_ros.ros.input_thread', {'rclpy'}),
    ('plag_ros.ros.messages', {'std_msgs', 'sensor_msgs', 'visualization_msgs'}),
])
def test_the_probe_reports_modules_that_do_import_ros(module, expected):
    """The check can fail: modules that do use ROS are caught."""
    found = set(ros_modules_imported_by(module))
    assert expected <= found, found


def test_the_probe_sees_a_rosidl_package():
    """Generated-type support (rosidl_*) counts as ROS too."""
    found = ros_modules_imported_by('std_msgs.msg')
    assert 'std_msgs' in found and any(n.startswith('rosidl_') for n in found), found
