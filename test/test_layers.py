"""The layers drawn in docs/layers.md hold: no import runs back up, the core has no ROS.

Four checks, each shown able to fail:

* Static: every ``import`` and ``from ... import`` in every module of the package (at
  module level or inside a function, where lazy imports hide) is read with ``ast``; an
  import from one package into another must be an arrow of the picture in
  ``docs/layers.md``. The modules are found by walking the source tree, so a new module
  is checked the day it is added.
* Dynamic: every ``plag_ros.core`` module is imported in a fresh interpreter (this test
  process has long imported rclpy through other tests), which then lists the ROS modules
  that ended up in ``sys.modules``: there must be none. The ``io`` modules may use
  ``rosbags`` but must not pull in rclpy or a message package either.
* Inside the core: its concept packages (the second picture of ``docs/layers.md``) import
  each other only along the drawn arrows, and no module of the whole package imports itself
  through others (no import circle, lazy and type-checking imports included).
* Size: no module over ``MAX_LINES`` lines without a ``Size`` paragraph in its docstring
  that says why, and no node over ``MAX_NODE_LINES`` (a node wires topics to the core).
"""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
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


MAX_LINES = 600
MAX_NODE_LINES = 400


def drawn_arrows(text: str, picture: int = 0) -> set[tuple[str, str]]:
    """``(importer, imported)`` pairs of a mermaid block of docs/layers.md (0: the
    package's layers, 1: the core's concept packages)."""
    blocks = re.findall(r'```mermaid\n(.*?)```', text, re.S)
    assert len(blocks) > picture, f'docs/layers.md has no mermaid picture {picture}'
    return set(re.findall(r'^\s*(\w+)\s*-->\s*(\w+)\s*$', blocks[picture], re.M))


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


def core_package_of(module: str) -> str | None:
    """The concept package of a ``plag_ros.core`` module (None outside them)."""
    parts = module.split('.')
    return parts[2] if len(parts) > 2 and parts[:2] == ['plag_ros', 'core'] else None


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


def crossings(arrows: set[tuple[str, str]], root: Path = PACKAGE,
              level: Callable[[str], str | None] = layer_of) -> list[str]:
    """Imports between layers (``level``: the package layers or the core's concept
    packages) that the picture does not draw, as readable lines."""
    bad = []
    for name, path in modules(root).items():
        here = level(name)
        for line, target in imports_of(name, path):
            there = level(target)
            if here is None or there is None or here == there:
                continue
            if (here, there) not in arrows:
                bad.append(f'{path.relative_to(root.parent)}:{line} {here} imports {there} '
                           f'({target})')
    return bad


def test_every_package_is_in_the_picture():
    drawn = {p for arrow in drawn_arrows(PICTURE.read_text()) for p in arrow}
    packages = {p.name for p in PACKAGE.iterdir() if (p / '__init__.py').is_file()} | {
        p.stem for p in PACKAGE.glob('*.py') if p.name != '__init__.py'}
    assert packages == drawn, f'drawn {sorted(drawn)}, in the package {sorted(packages)}'


def test_no_import_crosses_a_layer_the_picture_forbids():
    assert crossings(drawn_arrows(PICTURE.read_text())) == []


def bus_side_of(module: str) -> str | None:
    """``'host'`` or ``'emulator'`` for a module of that side of ``plag_ros.bus`` (None for
    the shared modules and everything else)."""
    parts = module.split('.')
    return parts[2] if len(parts) > 2 and parts[:2] == ['plag_ros', 'bus'] and parts[2] in (
        'host', 'emulator') else None


def test_the_two_sides_of_the_bus_never_import_each_other():
    """The host's driver knows the servos only through the e-manual's facts in the shared
    modules, and the emulator knows its clients only through the wire: neither side imports
    the other (the shared modules are drawn to both)."""
    assert crossings(set(), level=bus_side_of) == []


def test_the_bus_side_check_can_fail(tmp_path):
    root = tmp_path / 'plag_ros'
    for side in ('host', 'emulator'):
        (root / 'bus' / side).mkdir(parents=True)
        (root / 'bus' / side / '__init__.py').write_text('')
    (root / 'bus' / 'host' / 'driver.py').write_text('from plag_ros.bus.emulator import arm\n')
    assert crossings(set(), root, level=bus_side_of) == [
        'plag_ros/bus/host/driver.py:1 host imports emulator (plag_ros.bus.emulator)']


def core_packages(root: Path = PACKAGE) -> set[str]:
    return {p.name for p in (root / 'core').iterdir() if (p / '__init__.py').is_file()}


def test_every_core_package_is_in_the_picture():
    drawn = {p for arrow in drawn_arrows(PICTURE.read_text(), 1) for p in arrow}
    assert core_packages() == drawn, f'drawn {sorted(drawn)}, in core {sorted(core_packages())}'
    loose = [p.name for p in (PACKAGE / 'core').glob('*.py') if p.name != '__init__.py']
    assert loose == [], f'core modules outside a concept package: {loose}'


def test_no_core_import_crosses_a_concept_the_picture_forbids():
    assert crossings(drawn_arrows(PICTURE.read_text(), 1), level=core_package_of) == []


@pytest.mark.parametrize('picture', [0, 1])
def test_the_picture_is_a_stack(picture):
    """Arrows only point down: no two packages import each other, even through a third."""
    arrows = drawn_arrows(PICTURE.read_text(), picture)
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


def module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (``from a import b`` counts as ``a.b``
    when that is a module; a package's ``__init__`` as the package)."""
    found = modules(root)
    graph: dict[str, set[str]] = {name: set() for name in found}
    for name, path in found.items():
        tree = ast.parse(path.read_text(), str(path))
        named = {(n.lineno, f'{n.module}.{a.name}') for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module and not n.level
                 for a in n.names}
        for _line, target in imports_of(name, path) + sorted(named):
            if target in found and target != name and not name.startswith(target + '.'):
                graph[name].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Groups of modules that import each other, through others or directly (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_through_others():
    assert circles(module_graph()) == []


def test_the_circle_check_can_fail(tmp_path):
    """Two apps importing each other (one lazily, one for types only) are one circle."""
    pkg = tmp_path / 'plag_ros'
    (pkg / 'apps').mkdir(parents=True)
    for init in (pkg, pkg / 'apps'):
        (init / '__init__.py').write_text('')
    (pkg / 'apps' / 'fleet.py').write_text(
        'def run():\n    from plag_ros.apps import analyze\n    return analyze\n')
    (pkg / 'apps' / 'analyze.py').write_text(
        'from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n'
        '    from plag_ros.apps.fleet import run\n')
    (pkg / 'apps' / 'other.py').write_text('from plag_ros.apps import fleet\n')
    assert circles(module_graph(pkg)) == [['plag_ros.apps.analyze', 'plag_ros.apps.fleet']]


def oversized(root: Path = PACKAGE) -> list[str]:
    """Modules over the size limits: a node over MAX_NODE_LINES, any other module over
    MAX_LINES without a paragraph of its docstring starting ``Size``."""
    bad = []
    for name, path in modules(root).items():
        lines = len(path.read_text().splitlines())
        if '.nodes.' in name:
            if lines > MAX_NODE_LINES:
                bad.append(f'{name}: {lines} lines, a node (at most {MAX_NODE_LINES})')
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ''
        if lines > MAX_LINES and not re.search(r'^Size\b', doc, re.M):
            bad.append(f'{name}: {lines} lines and no Size paragraph saying why')
    return bad


def test_no_module_is_oversized_without_a_reason():
    assert oversized() == []


def test_the_size_check_can_fail(tmp_path):
    pkg = tmp_path / 'plag_ros'
    (pkg / 'ros' / 'nodes').mkdir(parents=True)
    body = 'x = 1\n' * (MAX_LINES + 1)
    (pkg / 'big.py').write_text('"""Big."""\n' + body)
    (pkg / 'reasoned.py').write_text('"""Big.\n\nSize: one state machine."""\n' + body)
    (pkg / 'ros' / 'nodes' / 'node.py').write_text('"""Size: no."""\n' + body)
    assert oversized(pkg) == [
        f'plag_ros.big: {MAX_LINES + 2} lines and no Size paragraph saying why',
        f'plag_ros.ros.nodes.node: {MAX_LINES + 2} lines, a node (at most {MAX_NODE_LINES})']


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
