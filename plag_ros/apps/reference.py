"""The docs' reference pages, made from the code they describe (never written twice).

* node parameters from the settings dataclasses every node declares its parameters from
  (:mod:`plag_ros.core.common.options`);
* topics and services from :data:`plag_ros.ros.interfaces.NODE_INTERFACES`, which
  ``test/test_interfaces.py`` holds against the running nodes;
* the command line from the parsers ``plag-ros`` itself uses
  (:func:`plag_ros.apps.cli.command_parser`).

``docs/conf.py`` calls :func:`write_reference` before Sphinx reads the sources; the three
pages are build products, not files of the repository.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path

from plag_ros.bus.host.driver import DRIVER_NODE_OPTIONS
from plag_ros.core.common.options import Option
from plag_ros.core.control.settings import IMPEDANCE_OPTIONS, safety_parameters
from plag_ros.core.decomposition.settings import dynamics_options
from plag_ros.core.simulation.settings import sim_options

__all__ = ['NODE_OPTIONS', 'cli_page', 'node_options', 'parameters_page', 'topics_page',
           'write_reference']

NODE_OPTIONS = {
    'plag_dynamics': (dynamics_options, 'config/crane_x7.yaml'),
    'plag_impedance': (lambda: IMPEDANCE_OPTIONS, 'config/impedance.yaml'),
    'plag_sim': (sim_options, 'config/sim.yaml'),
    'plag_driver': (lambda: DRIVER_NODE_OPTIONS, 'config/torque_mode.yaml'),
}
"""Node name -> (its option list, the shipped parameter file). The nodes declare exactly
these (``OPTIONS`` of each node module; test_interfaces compares them with the running
nodes), read here from the core so the docs build needs no rclpy."""


def node_options(node: str) -> list[Option]:
    """The parameters ``node`` declares, in declaration order."""
    return list(NODE_OPTIONS[node][0]())


def _cell(text: object) -> str:
    return str(text).replace('|', '\\|').replace('\n', ' ')


def _default(opt: Option) -> str:
    if isinstance(opt.default, str):
        return f"`'{opt.default}'`"
    if isinstance(opt.default, bool):
        return f'`{str(opt.default).lower()}`'
    return f'`{opt.default}`'


def _allowed(opt: Option) -> str:
    if opt.choices:
        return ', '.join(f"`'{c}'`" for c in opt.choices)
    if opt.low is not None and opt.high is not None:
        return f'[{opt.low:g}, {opt.high:g}]'
    return ''


def parameters_page() -> str:
    """Markdown: every node's parameters with type, default, allowed values, whether they
    change at run time (the impedance node's safety parameters only while it is disabled),
    and their description."""
    lines = ['# Node parameters', '',
             'Generated from the settings dataclasses the nodes declare their parameters '
             'from; `ros2 param describe NODE NAME` shows the same text. The shipped '
             'parameter files override some defaults for the CRANE-X7. "while disabled": a '
             'safety parameter of `plag_impedance`, refused while the controller is enabled '
             '(`plag_ros.core.control.settings.TUNABLE_WHILE_ENABLED` lists what is not one).',
             '']
    for node, (_, config) in NODE_OPTIONS.items():
        lines += [f'## {node}', '', f'Parameter file: `{config}`.', '',
                  '| parameter | type | default | allowed | at run time | description |',
                  '|---|---|---|---|---|---|']
        lines += [f'| `{o.name}` | {o.kind} | {_cell(_default(o))} | {_cell(_allowed(o))} | '
                  f'{_at_run_time(node, o)} | {_cell(o.doc)} |' for o in node_options(node)]
        lines.append('')
    return '\n'.join(lines)


def _at_run_time(node: str, option: Option) -> str:
    if option.read_only:
        return 'no'
    return 'while disabled' if node == 'plag_impedance' and safety_parameters([option.name]) \
        else 'yes'


_DIRECTIONS = {'out': 'publishes', 'in': 'subscribes', 'service': 'serves',
               'client': 'calls'}


def topics_page() -> str:
    """Markdown: every node's topics and services (``plag_ros.ros.interfaces``)."""
    from plag_ros.ros.interfaces import NODE_INTERFACES

    lines = ['# Topics and services', '',
             'Generated from `plag_ros/ros/interfaces.py`, which the tests compare with '
             'what each running node creates. `~/x` is private to the node '
             '(`/plag_dynamics/x`); `<body>` stands for each body of the model; `{x}` for '
             'the value of the node parameter `x`.', '']
    for node, endpoints in NODE_INTERFACES.items():
        lines += [f'## {node}', '', '| | name | type | QoS | content | when |',
                  '|---|---|---|---|---|---|']
        for e in endpoints:
            when = ', '.join(f'`{k}: {v}`' for k, v in e.when)
            lines.append(f'| {_DIRECTIONS[e.direction]} | `{e.name}` | `{e.type}` | '
                         f'{_cell(e.qos)} | {_cell(e.content)} | {when} |')
        lines.append('')
    return '\n'.join(lines)


def _usage(parser: argparse.ArgumentParser) -> Iterable[str]:
    yield '```text'
    yield parser.format_usage().strip()
    yield '```'
    yield ''
    yield '| argument | default | description |'
    yield '|---|---|---|'
    for action in parser._actions:                        # argparse has no public list
        if isinstance(action, argparse._HelpAction):
            continue
        name = ', '.join(action.option_strings) or action.dest
        if action.option_strings and action.nargs != 0:
            name += f' {action.metavar or action.dest.upper()}'
        default = '' if action.default in (None, argparse.SUPPRESS, False, []) else \
            f'`{action.default}`'
        help_text = (action.help or '') % {'default': action.default} \
            if action.help and '%(' in action.help else (action.help or '')
        if action.choices is not None and not isinstance(action.choices, range):
            help_text += ' (one of ' + ', '.join(f'`{c}`' for c in action.choices) + ')'
        yield f'| `{_cell(name)}` | {_cell(default)} | {_cell(help_text)} |'


def cli_page(commands: Sequence[str] | None = None) -> str:
    """Markdown: every ``plag-ros`` command with its usage and arguments."""
    from plag_ros.apps.cli import COMMANDS, command_parser

    lines = ['# The `plag-ros` command line', '',
             'Generated from the parsers `plag-ros` itself uses; `plag-ros COMMAND --help` '
             'prints the same.', '']
    for command in commands or list(COMMANDS):
        lines += [f'## plag-ros {command}', '', COMMANDS[command][1] + '.', '',
                  *_usage(command_parser(command)), '']
    return '\n'.join(lines)


def write_reference(folder: str | Path) -> list[Path]:
    """Write parameters.md, topics.md and cli.md into ``folder``; the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, page in (('parameters.md', parameters_page), ('topics.md', topics_page),
                       ('cli.md', cli_page)):
        path = folder / name
        text = page()
        if not path.is_file() or path.read_text() != text:   # unchanged: keep Sphinx's cache
            path.write_text(text)
        written.append(path)
    return written
