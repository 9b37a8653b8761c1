"""Every test file has exactly one home (test/homes.py), and the suites run what it says."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from homes import ALONE, CORE, FLOORS, HOMES, ROS, SUITES

TEST_DIR = Path(__file__).resolve().parent
REPO = TEST_DIR.parent


def test_every_test_file_on_disk_has_one_home_and_no_home_names_a_missing_file():
    on_disk = {path.name for path in TEST_DIR.glob('test_*.py')}
    assert sorted(on_disk - HOMES.keys()) == [], 'test files with no home in test/homes.py'
    assert sorted(HOMES.keys() - on_disk) == [], 'homes of test files that do not exist'
    assert {home for home in HOMES.values()} <= {CORE, ROS, FLOORS}
    assert ALONE <= HOMES.keys(), 'files that run alone must be test files with a home'


def test_each_home_is_a_declared_marker(pytestconfig):
    declared = {marker.split(':')[0] for marker in pytestconfig.getini('markers')}
    assert {CORE, ROS, FLOORS, 'alone'} <= declared


def _marks_of(target: str) -> str:
    """The pytest -m expression the Makefile's ``target`` passes (before the long filter)."""
    text = (REPO / 'Makefile').read_text()
    body = re.search(rf'^{target}:.*?\n((?:\t.*\n)+)', text, re.M)
    assert body, target
    marks = re.search(r"PYTEST_MARKS='([^'$]*)", body.group(1))
    assert marks, f'{target} passes no PYTEST_MARKS'
    return marks.group(1).strip()


@pytest.mark.parametrize('suite, target', [('jazzy', 'test-jazzy'), ('humble', 'test-humble')])
def test_the_makefile_runs_the_homes_each_suite_lists(suite, target):
    expression = _marks_of(target)
    # evaluate the -m expression for a test of each home, as pytest would
    for home in (CORE, ROS, FLOORS):
        selected = eval(expression, {}, {name: name == home for name in (CORE, ROS, FLOORS)})
        assert selected == (home in SUITES[suite]), (suite, home, expression)
    assert set(SUITES['kilted']) == {CORE, ROS, FLOORS}
