"""Every third-party import of plag_ros is declared where its installer reads it.

The imports are collected from the source (every module, module level and inside
functions) and each is held to one declaration: a library in ``setup.py``'s
``install_requires`` (``requirements/libraries.txt``), an optional feature's extra in
``extras_require``, a ROS package among ``package.xml``'s ``exec_depend`` keys (with its
wheel in ``requirements/ros-*.txt`` where one exists), or a library another declared one
requires. Independent checks: the installed distributions' own metadata
(``importlib.metadata``) says which distribution provides each import and what each one
requires, and ``test/data/rosdep_keys.yaml`` (read from ros/rosdistro) says that every key
``package.xml`` names resolves on Humble, Jazzy and Kilted.
"""
from __future__ import annotations

import ast
import importlib.metadata as metadata
import re
import runpy
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import setuptools
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
DISTRIBUTIONS = ('humble', 'jazzy', 'kilted')

LIBRARY, EXTRA, ROS, VIA = 'library', 'extra', 'ros', 'via'
IMPORTS: dict[str, tuple[str, str, str]] = {
    # import name: (how it is declared, the distribution or rosdep key, the extra or the
    # distribution that requires it)
    'numpy': (LIBRARY, 'numpy', ''),
    'scipy': (LIBRARY, 'scipy', ''),
    'numba': (LIBRARY, 'numba', ''),
    'matplotlib': (LIBRARY, 'matplotlib', ''),
    'tqdm': (LIBRARY, 'tqdm', ''),
    'yaml': (LIBRARY, 'pyyaml', ''),
    'isal': (LIBRARY, 'isal', ''),
    'urdf_parser_py': (LIBRARY, 'urdfdom-py', ''),
    'clarabel': (LIBRARY, 'clarabel', ''),
    'rosbags': (LIBRARY, 'rosbags', ''),
    'dask': (LIBRARY, 'dask', ''),
    'distributed': (LIBRARY, 'distributed', ''),     # dask[distributed]
    'pyarrow': (LIBRARY, 'pyarrow', ''),
    'foxglove': (LIBRARY, 'foxglove-sdk', ''),
    'torch': (LIBRARY, 'torch', ''),
    'dynamixel_sdk': (EXTRA, 'dynamixel-sdk', 'driver'),
    'pandas': (EXTRA, 'pandas', 'pandas'),
    'pinocchio': (EXTRA, 'pin', 'peer'),
    'mujoco': (EXTRA, 'mujoco', 'studies'),
    # rosbags' own requirements: the chunk codecs of bag_recovery.py
    'lz4': (VIA, 'lz4', 'rosbags'),
    'backports': (VIA, 'backports.zstd', 'rosbags'),
    'compression': (VIA, '', ''),       # the standard library's zstd from Python 3.14 on
    'rclpy': (ROS, 'rclpy', ''),
    'rcl_interfaces': (ROS, 'rcl_interfaces', ''),
    'builtin_interfaces': (ROS, 'builtin_interfaces', ''),
    'std_msgs': (ROS, 'std_msgs', ''),
    'sensor_msgs': (ROS, 'sensor_msgs', ''),
    'trajectory_msgs': (ROS, 'trajectory_msgs', ''),
    'geometry_msgs': (ROS, 'geometry_msgs', ''),
    'visualization_msgs': (ROS, 'visualization_msgs', ''),
    'diagnostic_msgs': (ROS, 'diagnostic_msgs', ''),
    'std_srvs': (ROS, 'std_srvs', ''),
    'rosgraph_msgs': (ROS, 'rosgraph_msgs', ''),
    'controller_manager_msgs': (ROS, 'controller_manager_msgs', ''),
    'launch': (ROS, 'launch', ''),
    'launch_ros': (ROS, 'launch_ros', ''),
}
PULLED_BY_RCLPY = {'rcl_interfaces', 'builtin_interfaces'}
"""ROS packages the code imports that come with the rclpy wheel, not listed beside it."""
NO_WHEEL = {'controller_manager_msgs', 'launch', 'launch_ros'}
"""ROS packages without a ros-* wheel on PyPI: only a ROS install has them (their tests are
opt-in where one is, docs/testing.md)."""


def third_party_imports() -> dict[str, set[str]]:
    """Top-level names of the modules plag_ros imports that are neither its own nor the
    standard library's, each with the files that import it."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / 'plag_ros').rglob('*.py')):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split('.')[0]
                if top not in sys.stdlib_module_names and top not in ('plag_ros', '__future__'):
                    found.setdefault(top, set()).add(str(path.relative_to(REPO)))
    return found


def setup_arguments(monkeypatch) -> dict:
    """The keyword arguments setup.py gives setuptools.setup (nothing is built)."""
    captured: dict = {}
    monkeypatch.setattr(setuptools, 'setup', lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(REPO)
    runpy.run_path(str(REPO / 'setup.py'), run_name='__main__')
    return captured


def by_name(requirements: list[str]) -> dict[str, Requirement]:
    parsed = [Requirement(line) for line in requirements]
    return {canonicalize_name(r.name): r for r in parsed}


def package_keys(kind: str) -> list[str]:
    root = ET.parse(REPO / 'package.xml').getroot()
    return [element.text or '' for element in root.iter(kind)]


def provided_by(import_name: str) -> set[str] | None:
    """The installed distributions that provide ``import_name`` (None: none installed)."""
    names = metadata.packages_distributions().get(import_name)
    return {canonicalize_name(n) for n in names} if names else None


def test_every_third_party_import_is_declared_once():
    found = third_party_imports()
    undeclared = {name: sorted(files) for name, files in found.items() if name not in IMPORTS}
    assert not undeclared, f'declare these imports (setup.py, package.xml) and list them in ' \
                           f'IMPORTS: {undeclared}'
    assert not set(IMPORTS) - set(found), f'no longer imported: {set(IMPORTS) - set(found)}'


def test_libraries_and_extras_are_in_setup_py_and_name_what_provides_the_import(monkeypatch):
    arguments = setup_arguments(monkeypatch)
    required = by_name(arguments['install_requires'])
    extras = {feature: by_name(lines) for feature, lines in arguments['extras_require'].items()}
    # one definition: setup.py reads the libraries from requirements/libraries.txt
    listed = [line.split('#', 1)[0].strip() for line in
              (REPO / 'requirements' / 'libraries.txt').read_text().splitlines()]
    assert by_name([line for line in listed if line]).items() <= required.items()
    for name, (kind, dist, feature) in IMPORTS.items():
        if kind == LIBRARY:
            assert canonicalize_name(dist) in required or (
                name == 'distributed' and 'distributed' in required['dask'].extras), name
        elif kind == EXTRA:
            assert canonicalize_name(dist) in extras[feature], (name, feature)
        else:
            continue
        providers = provided_by(name)
        if providers is not None:                  # installed: its own metadata agrees
            assert canonicalize_name(dist) in providers, (name, providers)
    used = {feature for kind, _, feature in IMPORTS.values() if kind == EXTRA}
    assert used == set(extras), f'extras without an import: {set(extras) - used}'


def test_each_extra_is_named_in_the_install_how_to_and_the_tests_install_it(monkeypatch):
    """A lab reads which extra serves which feature in docs/howto/install-ros2.md; the test
    requirements install a version each extra admits (the suites run every feature)."""
    extras = setup_arguments(monkeypatch)['extras_require']
    howto = (REPO / 'docs' / 'howto' / 'install-ros2.md').read_text()
    test_lines: list[str] = []
    for path in ('requirements-test.txt', 'requirements/test-tools.txt'):
        test_lines += [line.split('#', 1)[0].strip() for line in
                       (REPO / path).read_text().splitlines()]
    tested = by_name([line for line in test_lines if line and not line.startswith('-')])
    for feature, lines in extras.items():
        assert f'`{feature}`' in howto, f'docs/howto/install-ros2.md does not name {feature}'
        for requirement in by_name(lines).values():
            pin = tested[canonicalize_name(requirement.name)]
            versions = re.findall(r'[\d.]+', str(pin.specifier))
            assert versions and all(requirement.specifier.contains(v) for v in versions), \
                (feature, str(requirement), str(pin))


def test_libraries_others_require_are_required_by_them():
    """lz4 and backports.zstd come with rosbags (its metadata); the standard library's
    ``compression.zstd`` is tried first where it exists (Python 3.14)."""
    for name, (kind, dist, via) in IMPORTS.items():
        if kind != VIA or not dist:
            continue
        wanted = {canonicalize_name(Requirement(r).name)
                  for r in metadata.requires(via) or [] if 'extra ==' not in r}
        assert canonicalize_name(dist) in wanted, (name, via, sorted(wanted))


def test_ros_imports_are_package_xml_keys_with_wheels_where_pypi_has_them():
    exec_keys = set(package_keys('exec_depend'))
    wheels = {}
    # the wheels' names: ros-<package> (Kilted's), ros-jazzy-<package> (Jazzy's)
    for distribution, prefix in (('kilted', 'ros-'), ('jazzy', 'ros-jazzy-')):
        lines = (REPO / 'requirements' / f'ros-{distribution}.txt').read_text().splitlines()
        wheels[prefix] = {Requirement(line.split('#', 1)[0]).name for line in lines
                          if line.split('#', 1)[0].strip()}
    for kind, key, _ in IMPORTS.values():
        if kind != ROS:
            continue
        assert key in exec_keys, f'package.xml lacks <exec_depend>{key}</exec_depend>'
        if key in NO_WHEEL:
            continue
        for prefix, names in wheels.items():
            wheel = prefix + key.replace('_', '-')
            pulled = with_rclpy(prefix)
            # a package the rclpy wheel brings is checked where that wheel is installed
            assert wheel in names or (wheel in pulled if pulled is not None else
                                      key in PULLED_BY_RCLPY), (prefix, key)
    for key in ('dynamixel_sdk', 'urdfdom_py', 'pinocchio'):      # the rest of the code's
        assert key in exec_keys | set(package_keys('test_depend')), key


def with_rclpy(prefix: str) -> set[str] | None:
    """The wheels the rclpy wheel named ``prefix + 'rclpy'`` requires, by its metadata
    (None: not installed in this suite)."""
    try:
        return {canonicalize_name(Requirement(r).name)
                for r in metadata.requires(prefix + 'rclpy') or []}
    except metadata.PackageNotFoundError:
        return None


@pytest.mark.parametrize('kind', ['exec_depend', 'test_depend'])
def test_every_package_xml_key_resolves_on_every_distribution(kind):
    """rosdep installs each key of package.xml on Humble, Jazzy and Kilted: a released
    package of the distribution or a rosdep rule for its Ubuntu, as read from
    ros/rosdistro (test/data/rosdep_keys.yaml)."""
    recorded = yaml.safe_load((REPO / 'test' / 'data' / 'rosdep_keys.yaml').read_text())
    for key in package_keys(kind):
        assert key in recorded, f'{key}: record where it resolves in test/data/rosdep_keys.yaml'
        missing = [d for d in DISTRIBUTIONS if not recorded[key].get(d)]
        assert not missing, f'{key} does not resolve on {missing}'
