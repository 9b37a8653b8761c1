"""Where a test run's time went: per test file and in total, from pytest's JUnit XML.

Usage: python .ci/times.py REPORT.xml [REPORT.xml ...]

Each report is one pytest run (``--junitxml``); a file's time is the sum of its tests' set-up,
call and tear-down (under pytest-xdist the files run side by side, so the sum over files
exceeds the run's wall time, which the caller prints). Slowest files first.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict


def file_times(paths: list[str]) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Seconds and test counts per test file (``classname`` 'test.test_x' -> 'test_x.py')."""
    seconds: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    outcomes: dict[str, int] = defaultdict(int)
    for path in paths:
        for case in ET.parse(path).getroot().iter('testcase'):
            name = case.get('classname', '').split('.')
            module = next((part for part in name if part.startswith('test_')), '.'.join(name))
            entry = seconds[f'{module}.py']
            entry[0] += float(case.get('time') or 0.0)
            entry[1] += 1
            kind = next((child.tag for child in case
                         if child.tag in ('failure', 'error', 'skipped')), 'passed')
            outcomes[kind] += 1
    return seconds, outcomes


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    seconds, outcomes = file_times(paths)
    total = sum(entry[0] for entry in seconds.values())
    print(f'== test time per file ({len(seconds)} files, {total:.0f} s of tests in all; '
          + ', '.join(f'{count} {kind}' for kind, count in sorted(outcomes.items())) + ')')
    for name, (spent, count) in sorted(seconds.items(), key=lambda kv: -kv[1][0]):
        print(f'{spent:8.1f} s  {count:4d} tests  {name}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
