"""The documentation's commands are ones the package accepts, and its reference pages are
complete.

Which test runs each command end to end is said where the command is documented (the
demo: test_bringup; analyze: test_analysis, test_fleet, test_api; the real-arm steps:
test_real_arm_steps on a ROS 2 install; identify and excite: test_identification_acceptance,
test_excite_live). Here every command of README.md and docs/ is held against what it
invokes, so a renamed option or target fails the day it happens:

* ``plag-ros ...`` lines of the shell blocks, and inline ones without placeholders, parse
  with the very parser ``plag-ros`` uses (optional ``[...]`` parts with and without);
* ``make TARGET`` names a target of the Makefile;
* ``ros2 launch plag_ros FILE name:=value`` names a launch file of the package and
  arguments it declares (``plag_ros.ros.node_setups``), with a value among their choices;
* the generated reference pages list every parameter each node declares from its settings
  and every endpoint of the interface table (test_interfaces holds both against the
  running nodes);
* the layout page names every module of the package.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from plag_ros.apps.cli import COMMANDS, command_parser
from plag_ros.apps.reference import NODE_OPTIONS, node_options, parameters_page, topics_page
from plag_ros.ros import node_setups
from plag_ros.ros.interfaces import NODE_INTERFACES

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / 'README.md', *sorted((REPO / 'docs').rglob('*.md'))]
PAGES = [p for p in PAGES if '_build' not in p.parts and 'generated' not in p.parts]
LAUNCH_ARGUMENTS = {'sim.launch.py': node_setups.sim_arguments,
                    'crane_x7.launch.py': node_setups.robot_arguments,
                    'torque.launch.py': node_setups.torque_arguments,
                    'replay.launch.py': node_setups.replay_arguments}


def shell_lines(text: str) -> list[str]:
    """Commands of the ```bash blocks: continuation lines joined, comments and a trailing
    ``&`` dropped."""
    out = []
    for block in re.findall(r'```(?:bash|sh|shell)\n(.*?)```', text, re.S):
        joined = re.sub(r'\s*\\\n\s*', ' ', block)
        for line in joined.splitlines():
            line = re.sub(r'\s+#.*$', '', line).strip().rstrip('&').strip()
            if line and not line.startswith('#'):
                out.append(line)
    return out


def inline_code(text: str) -> list[str]:
    return re.findall(r'`([^`\n]+)`', re.sub(r'```.*?```', '', text, flags=re.S))


def documented(prefix: str, *, blocks: bool = True, inline: bool = True
               ) -> list[tuple[str, str]]:
    """(command, page) of every documented command starting with ``prefix``: in shell
    blocks, and in inline code (a table's ``\\|`` read as ``|``)."""
    found = []
    for page in PAGES:
        text = page.read_text()
        commands = (shell_lines(text) if blocks else []) + \
            ([c.replace('\\|', '|') for c in inline_code(text)] if inline else [])
        for command in commands:
            for part in re.split(r'\s*(?:&&|;|\|\|)\s*', command):
                if part.startswith(prefix):
                    found.append((part, str(page.relative_to(REPO))))
    return sorted(set(found))


def variants(command: str) -> list[str]:
    """The command without its ``[optional]`` parts, and with them (brackets removed)."""
    if '[' not in command:
        return [command]
    return [re.sub(r'\s*\[[^\]]*\]', '', command), re.sub(r'\[([^\]]*)\]', r'\1', command)]


def plag_ros_commands() -> list[tuple[str, str]]:
    """Whole commands: the shell blocks' ``plag-ros`` lines."""
    return [(c, p) for c, p in documented('plag-ros ', inline=False) if '...' not in c]


def plag_ros_mentions() -> list[tuple[str, str]]:
    """Inline ``plag-ros COMMAND [--option ...]``: the command and the options named."""
    return documented('plag-ros ', blocks=False)


def test_the_scan_finds_the_commands():
    commands = [c for c, _ in plag_ros_commands()]
    assert len(commands) > 10, commands
    assert any(c.startswith('plag-ros analyze') for c in commands)
    assert shell_lines('```bash\nplag-ros record a &   # note\nmake \\\n  demo\n```') == [
        'plag-ros record a', 'make demo']
    assert variants('plag-ros sim [--control] [--duration S]') == [
        'plag-ros sim', 'plag-ros sim --control --duration S']


@pytest.mark.parametrize('command,page', plag_ros_commands())
def test_every_plag_ros_command_parses(command, page):
    for variant in variants(command):
        argv = shlex.split(variant)[1:]
        assert argv[0] in COMMANDS, f'{page}: `{variant}`: no command {argv[0]!r}'
        try:
            command_parser(argv[0]).parse_args(argv[1:])
        except SystemExit as exc:
            pytest.fail(f'{page}: `{variant}` is refused by plag-ros {argv[0]} ({exc})')


@pytest.mark.parametrize('command,page', plag_ros_mentions())
def test_every_mentioned_command_and_option_exists(command, page):
    argv = shlex.split(command.replace('[', ' ').replace(']', ' ').replace('|', ' '))
    assert argv[1] in COMMANDS, f'{page}: `{command}`: no command {argv[1]!r}'
    known = {o for a in command_parser(argv[1])._actions for o in a.option_strings}
    unknown = [o.split('=')[0] for o in argv[2:] if o.startswith('-')
               and o.split('=')[0] not in known]
    assert not unknown, f'{page}: `{command}`: plag-ros {argv[1]} has no {unknown}'


def test_a_wrong_option_is_caught():
    with pytest.raises(SystemExit):
        command_parser('analyze').parse_args(['bag', '-o', 'out', '--no-such-option'])


def makefile_targets() -> set[str]:
    return set(re.findall(r'^([\w-]+):', (REPO / 'Makefile').read_text(), re.M))


@pytest.mark.parametrize('command,page', documented('make '))
def test_every_make_target_exists(command, page):
    targets = [t for t in shlex.split(command)[1:] if '=' not in t and not t.startswith('-')]
    assert set(targets) <= makefile_targets(), f'{page}: `{command}`'


@pytest.mark.parametrize('command,page', documented('ros2 launch plag_ros '))
def test_every_launch_line_uses_declared_arguments(command, page):
    for variant in variants(command):
        argv = shlex.split(variant)
        arguments = {a.name: a for a in LAUNCH_ARGUMENTS[argv[3]]()}
        for pair in argv[4:]:
            name, _, value = pair.partition(':=')
            assert name in arguments, f'{page}: `{variant}`: {argv[3]} has no {name!r}'
            choices = arguments[name].choices
            for one in value.split('|'):             # `player:=plag|ros2`: either
                if choices and one:
                    assert one in choices, f'{page}: `{variant}`: {name}:={one}'


def test_the_parameter_reference_lists_every_declared_parameter():
    page = parameters_page()
    for node in NODE_OPTIONS:
        section = page.split(f'## {node}\n', 1)[1].split('\n## ', 1)[0]
        listed = re.findall(r'^\| `([\w.]+)` \|', section, re.M)
        assert listed == [o.name for o in node_options(node)], node
        assert len(listed) > 5


def test_the_topic_reference_lists_every_endpoint():
    page = topics_page()
    for node, endpoints in NODE_INTERFACES.items():
        section = page.split(f'## {node}\n', 1)[1].split('\n## ', 1)[0]
        rows = re.findall(r'^\| \w+ \| `([^`]+)` \| `([^`]+)` \|', section, re.M)
        assert rows == [(e.name, e.type) for e in endpoints], node


def test_the_layout_page_names_every_module():
    """docs/layers.md says what each module is: a module added or moved without its row
    fails here."""
    text = (REPO / 'docs' / 'layers.md').read_text().split('\n## Modules\n', 1)[1]
    missing = []
    for path in sorted((REPO / 'plag_ros').rglob('*.py')):
        parts = path.relative_to(REPO / 'plag_ros').parts
        if path.name == '__init__.py' or parts[:2] == ('core', 'studies'):
            continue
        if len(parts) == 1:
            wanted = f'plag_ros/{path.name}'
        elif parts[0] == 'core':
            wanted = '/'.join(parts[1:])
        elif parts[0] == 'apps' or parts[:2] == ('ros', 'nodes'):
            wanted = path.stem
        else:                       # io/bag.py: `bag.py`; bus/host/driver.py: `host/driver.py`
            wanted = '/'.join(parts[1:])
        if f'`{wanted}`' not in text:
            missing.append(str(path.relative_to(REPO)))
    assert missing == [], f'docs/layers.md does not name {missing}'


def test_the_reference_reads_the_options_the_nodes_declare():
    """The parameter reference is made from the core's option lists; each node declares
    its module's ``OPTIONS`` (test_interfaces: and nothing else, on the running node)."""
    from plag_ros.ros.nodes import dynamics_node, impedance_node, sim_node

    declared = {'plag_dynamics': dynamics_node.OPTIONS, 'plag_sim': sim_node.OPTIONS,
                'plag_impedance': impedance_node.IMPEDANCE_OPTIONS}
    for node, options in declared.items():
        assert [o.name for o in options] == [o.name for o in node_options(node)], node
