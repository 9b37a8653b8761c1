"""Every file path and dotted name of the package that the documentation, the
requirements, the Makefile, the benchmarks, the configuration and the package's own
docstrings and comments name still exists.

A path into the repository's own folders (``plag_ros/.../x.py``, ``test/...``,
``bench/...``, ``examples/...``, ``launch/...``, ``docs/...``, ``config/...``) must be a
file of the repository; a dotted name
(``plag_ros.io.bag_writer.ROSBAGS_TESTED``, or ``plag_ros.apps.cli:main``) must be an
importable module, or an attribute reached from the longest importable module prefix.
A file move that leaves such a reference behind fails here, naming the file and line.
"""
from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCANNED = ('README.md', 'requirements*.txt', 'requirements/*.txt', 'Makefile', 'bench/*.py',
           'plag_ros/**/*.py',
           'docs/**/*.md', 'config/*.yaml')

# Not part of a longer path or name (``share/plag_ros/...``, ``lib/plag_ros``).
_START = r'(?<![\w/.-])'
# A file of the repository's own folders (not out/, not a share/ of an install).
PATH = re.compile(_START + r'(?:plag_ros|test|bench|examples|launch|docs|config|urdf)/'
                  r'[\w/.-]*?\w\.(?:py|yaml|md|png|json|urdf|rviz|npz|txt)\b')
# A file name is not a dotted name (``plag_ros.rviz``, ``plag_ros.egg-info``).
DOTTED = re.compile(_START + r'plag_ros(?!\.(?:rviz|yaml|xml|urdf|md|py|egg)\b)'
                    r'(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?(?![-\w])')


# The changelog's porting table names where things were: by design, not any more.
HISTORY = ('docs/changelog.md',)


def _scanned_files() -> list[Path]:
    files = {path for pattern in SCANNED for path in REPO.glob(pattern) if path.is_file()
             and '_build' not in path.parts and 'generated' not in path.parts}
    return sorted(files)


def _documentation() -> str:
    """README.md and every page of docs/, one text (what a user reads)."""
    pages = [REPO / 'README.md', *sorted((REPO / 'docs').rglob('*.md'))]
    return '\n'.join(p.read_text() for p in pages
                     if '_build' not in p.parts and 'generated' not in p.parts)


def _references(pattern: re.Pattern) -> list[tuple[str, str]]:
    """(name, 'file:line') of every match of ``pattern`` in the scanned files."""
    found = []
    for path in _scanned_files():
        text = path.read_text(encoding='utf-8', errors='replace')
        for number, line in enumerate(text.splitlines(), 1):
            for match in pattern.finditer(line):
                found.append((match.group(), f'{path.relative_to(REPO)}:{number}'))
    return found


def resolves(dotted: str) -> bool:
    """Whether ``dotted`` (``pkg.module.attr.attr`` or ``pkg.module:attr``) names an
    importable module or an attribute of one."""
    module_part, _, colon_attr = dotted.partition(':')
    parts = module_part.split('.')
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module('.'.join(parts[:k]))
        except ModuleNotFoundError as err:
            # only "this prefix is no module" moves on to a shorter one; a module that
            # exists but fails to import is an error of its own, raised to the test
            prefix = '.'.join(parts[:k])
            if err.name is None or not (prefix == err.name or prefix.startswith(err.name + '.')):
                raise
            continue
        rest = parts[k:] + ([colon_attr] if colon_attr else [])
        if colon_attr and k < len(parts):
            return False          # 'module:attr' must name the module in full
        for name in rest:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_the_scan_covers_the_files_and_finds_references():
    """The globs still match the files they are meant for, and each kind of reference is
    found (a broken pattern would otherwise pass on nothing)."""
    names = {str(p.relative_to(REPO)) for p in _scanned_files()}
    for expected in ('README.md', 'requirements.txt', 'requirements/libraries.txt',
                     'Makefile', 'config/crane_x7.yaml'):
        assert expected in names
    assert any(name.startswith('bench/') for name in names)
    assert _references(PATH) and _references(DOTTED)


def test_patterns_and_resolution_on_known_cases():
    """The two patterns and the resolver against cases whose answer is known."""
    line = ('see plag_ros/io/npz.py, plag_ros.io.bag_writer.ROSBAGS_TESTED and '
            'plag_ros.apps.cli:main; not share/plag_ros/x.py, plag_ros.egg-info nor '
            'config/plag_ros.rviz or plag_ros.rviz.')
    assert [m.group() for m in PATH.finditer(line)] == ['plag_ros/io/npz.py',
                                                        'config/plag_ros.rviz']
    assert [m.group() for m in PATH.finditer(
        'run test/test_x.py and bench/b.py, see docs/layers.md; not out/demo/a.png')] == [
        'test/test_x.py', 'bench/b.py', 'docs/layers.md']
    assert [m.group() for m in DOTTED.finditer(line)] == [
        'plag_ros.io.bag_writer.ROSBAGS_TESTED', 'plag_ros.apps.cli:main']
    assert resolves('plag_ros.io.bag_writer.ROSBAGS_TESTED')
    assert resolves('plag_ros.apps.cli:main')
    assert resolves('plag_ros.core.dynamics.model.RobotModel.from_urdf')
    assert not resolves('plag_ros.io.bag_writer.NO_SUCH_NAME')
    assert not resolves('plag_ros.npz')                # the module moved to plag_ros.io
    assert not resolves('plag_ros.io:save_npz')        # npz's function, not io's


@pytest.mark.parametrize('path,where', sorted(set(_references(PATH))))
def test_file_path_exists(path, where):
    assert (REPO / path).is_file(), f'{where}: {path} is not a file of the repository'


# A config file named after the package (``plag_ros.foxglove.json``) is no dotted name.
FILE_NAMES = ('.json', '.xml', '.yaml', '.rviz')


@pytest.mark.parametrize('dotted,where', sorted(
    {r for r in _references(DOTTED) if not r[1].startswith(HISTORY)
     and not r[0].endswith(FILE_NAMES)}))
def test_dotted_name_resolves(dotted, where):
    assert resolves(dotted), f'{where}: {dotted} is neither a module nor an attribute of one'


# The command-line package behind each `ros2 <verb>` (ros2cli's verbs live in packages of
# their own; `ros2 control` in ros2controlcli).
VERB_PACKAGES = {'launch': 'ros2launch', 'run': 'ros2run', 'service': 'ros2service',
                 'topic': 'ros2topic', 'param': 'ros2param', 'bag': 'ros2bag',
                 'control': 'ros2controlcli', 'node': 'ros2node'}


def readme_ros2_verbs(text: str) -> set[str]:
    """The verbs of every ``ros2 VERB`` command in ``text`` (inline code or a code line)."""
    return set(re.findall(r'(?:`|^\s*)ros2 ([a-z0-9_]+)\b', text, re.M))


def test_package_xml_names_the_command_line_of_every_documented_command():
    verbs = readme_ros2_verbs(_documentation())
    assert {'launch', 'control', 'service', 'topic'} <= verbs, verbs
    assert readme_ros2_verbs('run `ros2 foo bar` and\n    ros2 baz') == {'foo', 'baz'}
    depends = set(re.findall(r'<exec_depend>([^<]+)</exec_depend>',
                             (REPO / 'package.xml').read_text()))
    unknown = verbs - set(VERB_PACKAGES)
    assert not unknown, f'add the package of `ros2 {unknown}` to VERB_PACKAGES'
    missing = {VERB_PACKAGES[v] for v in verbs} - depends
    assert not missing, f'package.xml lacks <exec_depend> on {sorted(missing)}'


def test_workspace_paths_in_the_docs_exist():
    """The install commands name files in a colcon workspace (``src/plag_ros/...``): each
    must be a file of this repository (a '/txt' for '.txt' once broke the pip command)."""
    text = _documentation()
    named = re.findall(r'src/plag_ros/([\w./-]*\w)', text)
    assert len(named) >= 4, named
    missing = sorted({p for p in named if not (REPO / p).is_file()})
    assert not missing, f'the docs name workspace files that do not exist: {missing}'
