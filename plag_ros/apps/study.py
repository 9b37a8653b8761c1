"""``plag-ros study NAME OUT [options]``: run one paper's study (:mod:`plag_ros.core.studies`).

Each study writes its figures and ``summary.json`` into OUT; the options after OUT are
the study's own (``plag-ros study NAME OUT --help``).
"""
from __future__ import annotations

import argparse
import importlib

from plag_ros.core.studies import STUDIES


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments: the study name, then everything the study takes."""
    lines = '\n'.join(f'  {name:14s} {text}' for name, (_, text) in STUDIES.items())
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = f'studies:\n{lines}'
    parser.add_argument('name', choices=sorted(STUDIES), help='which study')
    parser.add_argument('args', nargs=argparse.REMAINDER,
                        help='output folder and the study options')


def run(args: argparse.Namespace) -> int:
    """Import the study and run its ``main`` on the remaining arguments."""
    module = importlib.import_module(f'plag_ros.core.studies.{STUDIES[args.name][0]}')
    return int(module.main(list(args.args)) or 0)
