"""The layers drawn in docs/layers.md hold: no import runs back up, the core has no ROS.

Two checks, each shown able to fail:

* Static: every ``import`` and ``from ... import`` in every module of the package (at
  module level or inside a function, where lazy imports hide) is read with ``ast``; an
  import from one package into another must be an arrow of the picture in
  ``docs/layers.md``. The modules are found by walking the source tree, so a new module
  is checked the day it is added.
* Dynamic: every ``plag_ros.core`` module is imported in a fresh interpreter (this test
  process has long imported rclpy through other tests), which then lists the ROS modules
  that ended up in ``sys.modules``: there must be none. The ``io`` modules may use
  ``rosbags`` but must not pull in rclpy or a message package either.
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / 'plag_ros'
PICTURE = REPO / 'docs' / 'layers.md'

ROS_PACKAGES = frozenset({
    'rclpy', 'rcl_interfaces', 'builtin_interfaces', 'std_msgs', 'sensor_msgs',
    'geometry_msgs', 'visualization_msgs', 'diagnostic_msgs', 'std_srvs', 'rosgraph_msgs',
    'trajectory_msgs', 'controller_manager_msgs', 'launch', 'launch_ros',
    'ament_index_python',
})
ROS_PREFIXES = ('rosidl_', 'rmw_', 'rpyutils')


def drawn_arrows(text: str) -> set[tuple[str, str]]:
    """``(importer, imported)`` pairs of the mermaid block of docs/layers.md."""
    block = re.search(r'```mermaid\n(.*?)```', text, re.S)
    assert block, 'docs/layers.md has no mermaid picture'
    return set(re.findall(r'^\s*(\w+)\s*-->\s*(\w+)\s*$', block.group(1), re.M))


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    """Dotted name -> file of every module under ``root`` (a source tree walk)."""
    out = {}
    for path in sorted(root.rglob('*.py')):
        parts = list(path.relative_to(root.parent).with_suffix('').parts)
        if parts[-1] == '__init__':
            parts.pop()
        out['.'.join(parts)] = path
    return out


def layer_of(module: str) -> str | None:
    """The package layer of a ``plag_ros`` module (None for the top ``plag_ros``)."""
    parts = module.split('.')
    return parts[1] if len(parts) > 1 and parts[0] == 'plag_ros' else None


def imports_of(name: str, path: Path) -> list[tuple[int, str]]:
    """``(line, imported module)`` of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == '__init__.py' else name.rsplit('.', 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split('.')[:len(package.split('.')) - node.level + 1]
                target = '.'.join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ''
            out.append((node.lineno, target))
            # ``from plag_ros import core`` imports the package core
            out += [(node.lineno, f'{target}.{a.name}') for a in node.names
                    if target == 'plag_ros']
    return out


def crossings(arrows: set[tuple[str, str]], root: Path = PACKAGE) -> list[str]:
    """Imports between layers that the picture does not draw, as readable lines."""
    bad = []
    for name, path in modules(root).items():
        here = layer_of(name)
        for line, target in imports_of(name, path):
            there = layer_of(target)
            if here is None or there is None or here == there:
                continue
            if (here, there) not in arrows:
                bad.append(f'{path.relative_to(root.parent)}:{line} {here} imports {there} '
                           f'({target})')
    return bad


def test_every_package_is_in_the_picture():
    drawn = {p for arrow in drawn_arrows(PICTURE.read_text()) for p in arrow}
    packages = {p.name for p in PACKAGE.iterdir() if (p / '__init__.py').is_file()}
    assert packages == drawn, f'drawn {sorted(drawn)}, in the package {sorted(packages)}'


def test_no_import_crosses_a_layer_the_picture_forbids():
    assert crossings(drawn_arrows(PICTURE.read_text())) == []


def test_the_picture_is_a_stack():
    """Arrows only point down: no two packages import each other, even through a third."""
    arrows = drawn_arrows(PICTURE.read_text())
    reach = {a: {b for x, b in arrows if x == a} for a, _ in arrows}
    for _ in range(len(reach)):
        for a in reach:
            reach[a] |= {c for b in set(reach[a]) for c in reach.get(b, ())}
    assert all(a not in reach[a] for a in reach), reach


def ros_imports(layer: str, root: Path = PACKAGE) -> list[str]:
    """Imports of a ROS package anywhere in a layer's source (lazy ones included)."""
    return [f'{path.relative_to(root.parent)}:{line} {target}'
            for name, path in modules(root).items() if layer_of(name) == layer
            for line, target in imports_of(name, path)
            if target.split('.')[0] in ROS_PACKAGES or target.startswith(ROS_PREFIXES)]


@pytest.mark.parametrize('layer', ['core', 'io'])
def test_core_and_io_source_has_no_ros_import(layer):
    assert ros_imports(layer) == []


def test_the_static_check_can_fail(tmp_path):
    """A core module importing the ROS adapter, lazily inside a function, is caught."""
    pkg = tmp_path / 'plag_ros'
    for sub in ('core', 'ros'):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / '__init__.py').write_text('')
    (pkg / '__init__.py').write_text('')
    (pkg / 'ros' / 'messages.py').write_text('X = 1\n')
    (pkg / 'core' / 'model.py').write_text(
        'def f():\n    from ..ros import messages\n    return messages.X\n')
    (pkg / 'core' / 'ok.py').write_text('from plag_ros.core import model\n')
    found = crossings({('ros', 'core')}, pkg)
    assert found == ['plag_ros/core/model.py:2 core imports ros (plag_ros.ros)'], found
    (pkg / 'core' / 'paths.py').write_text(
        'def share():\n    from ament_index_python.packages import get_package_share_directory\n'
        '    return get_package_share_directory("plag_ros")\n')
    assert ros_imports('core', pkg) == [
        'plag_ros/core/paths.py:2 ament_index_python.packages'], ros_imports('core', pkg)


_PROBE = """
import importlib, json, sys
packages, prefixes = set(json.loads(sys.argv[1])), tuple(json.loads(sys.argv[2]))
def ros():
    return {n.split('.')[0] for n in sys.modules
            if n.split('.')[0] in packages or n.startswith(prefixes)}
found = {}
for module in sys.argv[3:]:
    before = ros()
    importlib.import_module(module)
    found[module] = sorted(ros() - before)
print(json.dumps(found))
"""


def ros_modules_imported_by(names: list[str]) -> dict[str, list[str]]:
    """Per module, the ROS packages its import added to a fresh interpreter's sys.modules."""
    done = subprocess.run(
        [sys.executable, '-c', _PROBE, json.dumps(sorted(ROS_PACKAGES)),
         json.dumps(ROS_PREFIXES), *names],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, 'PYTHONPATH': str(REPO)})
    assert done.returncode == 0, f'importing {names} failed:\n{done.stderr}'
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('layer', ['core', 'io'])
def test_core_and_io_import_no_ros(layer):
    names = [n for n in modules() if layer_of(n) == layer]
    assert len(names) > 3, names
    found = ros_modules_imported_by(names)
    assert {m: r for m, r in found.items() if r} == {}


def test_the_import_probe_can_fail():
    """Modules that do use ROS are caught, and generated type support counts as ROS."""
    found = ros_modules_imported_by(['plag_ros.ros.messages', 'plag_ros.ros.input_thread'])
    assert {'std_msgs', 'sensor_msgs', 'visualization_msgs'} <= set(
        found['plag_ros.ros.messages']), found
    assert any(n.startswith('rosidl_') for n in found['plag_ros.ros.messages']), found
    found = ros_modules_imported_by(['rclpy'])
    assert 'rclpy' in found['rclpy'], found
