"""The ``plag-ros`` command: one entry point for bring-up, demo and offline tools.

Each subcommand lives in the module that owns its concept; that module provides
``configure(parser)`` to add its arguments and ``run(args) -> int`` to execute it. The
table below is the only place that knows them all, so ``plag-ros --help`` stays cheap
(modules are imported only when their command runs).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ['COMMANDS', 'command_parser', 'main']

# command -> (module under plag_ros.apps, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    'demo': ('demo', 'decompose a CRANE-X7 trajectory offline and print the result'),
    'analyze': ('analyze', 'analyse a rosbag2 bag offline: output bag, npz, csv, plots'),
    'replay': ('replay', "publish a bag's joint states with their timing (and /clock)"),
    'record': ('replay', 'record /joint_states and the dynamics outputs into a bag'),
    'sim': ('bringup', 'simulated CRANE-X7 + live dynamics node, summary each second'),
    'run': ('bringup', "live dynamics node joining a real robot's ROS 2 graph"),
    'study': ('study', "run one of the papers' experiments: figures and summary.json"),
    'identify': ('identify', "fit the arm's inertial parameters, friction and armature to "
                             'recorded torques'),
    'excite': ('excite', 'design an excitation trajectory for identify; play it on the arm '
                         'or the simulator'),
}


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='plag-ros',
        description='Partial Lagrangian dynamics for the CRANE-X7 (ROS 2).')
    sub = parser.add_subparsers(dest='command', metavar='COMMAND', required=True)
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text)
    return parser


def command_parser(command: str) -> argparse.ArgumentParser:
    """The full parser of ``plag-ros COMMAND`` (what ``--help`` shows; the docs' CLI
    reference is made from it)."""
    module = importlib.import_module(f'plag_ros.apps.{COMMANDS[command][0]}')
    parser = argparse.ArgumentParser(prog=f'plag-ros {command}',
                                     description=COMMANDS[command][1])
    module.configure(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``plag-ros COMMAND ...`` and return its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser()
    # Parse the command name first, then let its module add the real arguments.
    known, _ = parser.parse_known_args(argv[:1] or argv)
    module = importlib.import_module(f'plag_ros.apps.{COMMANDS[known.command][0]}')
    args = command_parser(known.command).parse_args(argv[1:])
    args.command = known.command
    return int(module.run(args) or 0)


if __name__ == '__main__':
    sys.exit(main())
