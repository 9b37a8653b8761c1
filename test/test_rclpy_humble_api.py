"""Every rclpy name and message field the package uses exists on ROS 2 Humble.

Humble's rclpy (3.3) has no wheels to run the suite on, so its API is recorded from its
source (``test/data/rclpy_humble_api.json``, ros2/rclpy ``humble`` at the commit the file
names; ``test/data/record_rclpy_api.py`` regenerates it), and so are the fields and
constants of the messages the package uses (``test/data/humble_msg_fields.json``).

The check walks the source of ``plag_ros/`` with ``ast``: every ``import rclpy...`` and
``from rclpy... import ...``, every attribute chain on a name so bound, the keywords of
every call to an rclpy function or class, the ``Node`` methods a node class calls on
itself, and every attribute read from a message class. An import inside ``try:`` whose
handler catches ImportError is a guarded fallback and is not held against Humble (its
``except`` branch is: that is the Humble path).
"""
from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / 'data'
RCLPY = json.loads((DATA / 'rclpy_humble_api.json').read_text())
MESSAGES = json.loads((DATA / 'humble_msg_fields.json').read_text())

# rclpy's C extension is reached through this name on every release.
_EXTENSION_ALIAS = 'rclpy.impl.implementation_singleton.rclpy_implementation'
_GUARDS = {'ImportError', 'ModuleNotFoundError', 'AttributeError'}
# Generated on every message class, not fields of the definition.
_MESSAGE_CLASS_ATTRIBUTES = {'get_fields_and_field_types', 'SLOT_TYPES', 'Request',
                             'Response', 'Event'}


def _canonical(dotted: str) -> str:
    # private: rclpy's C extension (rclpy._rclpy) is rclpy's own private API, used by plag_ros
    return 'rclpy._rclpy' + dotted[len(_EXTENSION_ALIAS):] \
        if dotted.startswith(_EXTENSION_ALIAS) else dotted


def humble_lacks(dotted: str) -> str:
    """'' when Humble's rclpy has ``dotted`` (``rclpy.qos.QoSProfile.depth``), else what
    is missing. Past a name whose members are not recorded (a re-exported or C class,
    an instance attribute) nothing more is checked."""
    dotted = _canonical(dotted)
    parts = dotted.split('.')
    module = next((('.'.join(parts[:k]), k) for k in range(len(parts), 0, -1)
                   if '.'.join(parts[:k]) in RCLPY['modules']), None)
    if module is None:
        return f'module {dotted} does not exist on Humble'
    name, k = module
    if k == len(parts):
        return ''
    member = parts[k]
    if member not in RCLPY['modules'][name] and f'{name}.{member}' not in RCLPY['modules']:
        return f'{name}.{member} does not exist on Humble'
    cls = f'{name}.{member}'
    if k + 1 < len(parts) and cls in RCLPY['classes']:
        attribute = parts[k + 1]
        if attribute not in RCLPY['classes'][cls]:
            return f'{cls}.{attribute} does not exist on Humble'
    return ''


def _keywords_problem(dotted: str, keywords: list[str]) -> str:
    dotted = _canonical(dotted)
    signature = RCLPY['signatures'].get(dotted) or \
        RCLPY['signatures'].get(f'{dotted}.__init__')
    if signature is None or '**' in signature:
        return ''
    unknown = [k for k in keywords if k not in signature]
    return f'{dotted}() takes no {unknown} on Humble' if unknown else ''


def _message_types() -> dict[str, str]:
    """Importable class path -> recorded type, e.g. 'std_srvs.srv.SetBool.Request'."""
    out = {}
    for full in MESSAGES['types']:
        package, name = full.split('/')
        if name.endswith(('_Request', '_Response')):
            base, part = name.rsplit('_', 1)
            out[f'{package}.srv.{base}.{part}'] = full
            out[f'{package}.srv.{base}'] = full.rsplit('_', 1)[0] + '_Request'
        else:
            out[f'{package}.msg.{name}'] = full
    return out


MESSAGE_CLASSES = _message_types()


class _Checker(ast.NodeVisitor):
    """Collects what Humble lacks in one module's source."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.aliases: dict[str, str] = {}     # local name -> dotted rclpy or message path
        self.problems: list[str] = []
        self._guarded = 0
        self._node_classes: list[set[str]] = []

    def _report(self, node: ast.AST, problem: str) -> None:
        if problem and not self._guarded:
            self.problems.append(f'{self.path}:{getattr(node, "lineno", 0)}: {problem}')

    # -- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split('.')[0] == 'rclpy':
                self._report(node, humble_lacks(alias.name))
                if alias.asname:
                    self.aliases[alias.asname] = alias.name
                else:
                    self.aliases['rclpy'] = 'rclpy'

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ''
        for alias in node.names:
            dotted = f'{module}.{alias.name}'
            if module.split('.')[0] == 'rclpy':
                self._report(node, humble_lacks(dotted))
                self.aliases[alias.asname or alias.name] = dotted
            elif dotted in MESSAGE_CLASSES:
                self.aliases[alias.asname or alias.name] = dotted

    def visit_Try(self, node: ast.Try) -> None:
        names = set()
        for handler in node.handlers:
            kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else \
                [handler.type]
            names |= {k.id for k in kinds if isinstance(k, ast.Name)}
        guarded = bool(names & _GUARDS)
        self._guarded += guarded
        for statement in node.body:
            self.visit(statement)
        self._guarded -= guarded
        for part in (*node.handlers, *node.orelse, *node.finalbody):
            self.visit(part)

    # -- uses
    def _dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return f'{base}.{node.attr}' if base else None
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted and dotted.split('.')[0] == 'rclpy':
            # One report per chain: its inner links are prefixes of this one.
            self._report(node, humble_lacks(dotted))
            return
        if dotted:
            owner = dotted.rsplit('.', 1)[0]
            if owner in MESSAGE_CLASSES and node.attr not in _MESSAGE_CLASS_ATTRIBUTES:
                record = MESSAGES['types'][MESSAGE_CLASSES[owner]]
                if node.attr not in record['fields'] and node.attr not in record['constants']:
                    self._report(node, f'{owner}.{node.attr} does not exist on Humble')
        if self._node_classes and isinstance(node.value, ast.Name) \
                and node.value.id == 'self' and isinstance(node.ctx, ast.Load) \
                and node.attr not in self._node_classes[-1]:
            if node.attr not in RCLPY['classes']['rclpy.node.Node']:
                self._report(node, f'rclpy.node.Node.{node.attr} does not exist on Humble')
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        keywords = [k.arg for k in node.keywords if k.arg is not None]
        dotted = self._dotted(node.func)
        if dotted and dotted.split('.')[0] == 'rclpy':
            self._report(node, _keywords_problem(dotted, keywords))
        elif self._node_classes and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == 'self' \
                and node.func.attr not in self._node_classes[-1]:
            self._report(node, _keywords_problem(f'rclpy.node.Node.{node.func.attr}',
                                                 keywords))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        is_node = any(self._dotted(base) == 'rclpy.node.Node' for base in node.bases)
        if is_node:   # names the class itself defines or assigns on self
            own = {n.name for n in ast.walk(node)
                   if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            own |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
                    and isinstance(n.value, ast.Name) and n.value.id == 'self'
                    and isinstance(n.ctx, ast.Store)}
            self._node_classes.append(own)
        self.generic_visit(node)
        if is_node:
            self._node_classes.pop()


def check_source(source: str, path: str = '<source>') -> list[str]:
    """What Humble lacks among the rclpy names and message fields ``source`` uses."""
    checker = _Checker(path)
    checker.visit(ast.parse(source))
    return checker.problems


def test_record_is_humble():
    assert RCLPY['branch'] == 'humble' and RCLPY['package_version'].startswith('3.3.')
    assert len(RCLPY['commit']) == 40 and MESSAGES['branch'] == 'humble'
    # The record knows the event handlers where Humble has them.
    assert 'PublisherEventCallbacks' in RCLPY['modules']['rclpy.qos_event']
    assert 'rclpy.event_handler' not in RCLPY['modules']


def test_humble_has_the_private_wait_set_calls_the_input_thread_checks():
    """The input thread's private calls exist in Humble's C extension (their argument types are
    in its wait_set.cpp and subscription.cpp, the same as Jazzy's and Kilted's; the node
    checks them again at start-up, rclpy_compat.private_wait_set_problem)."""
    from plag_ros.ros.rclpy_compat import WAIT_SET_SIGNATURES

    # private: the record's names of rclpy's C extension, the private API under check
    for cls, method in WAIT_SET_SIGNATURES:
        assert method in RCLPY['classes'][f'rclpy._rclpy.{cls}'], (cls, method)
    assert humble_lacks(f'{_EXTENSION_ALIAS}.WaitSet') == ''


def test_package_uses_only_what_humble_has():
    problems = []
    files = sorted((REPO / 'plag_ros').rglob('*.py'))
    assert len(files) > 30
    for path in files:
        problems += check_source(path.read_text(), str(path.relative_to(REPO)))
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('source, lacking', [
    ('from rclpy.event_handler import PublisherEventCallbacks', 'rclpy.event_handler'),
    ('import rclpy.event_handler', 'rclpy.event_handler'),
    ('import rclpy\nrclpy.event_handler.PublisherEventCallbacks()', 'rclpy.event_handler'),
    ('from rclpy.qos import QoSProfile\nQoSProfile.no_such_member', 'no_such_member'),
    ('import rclpy\nrclpy.init(no_such_keyword=1)', 'no_such_keyword'),
    ('from rclpy.node import Node\nclass N(Node):\n    def f(self):\n'
     '        self.create_publisher(int, "t", 1, no_such_keyword=2)', 'no_such_keyword'),
    ('from rclpy.node import Node\nclass N(Node):\n    def f(self):\n'
     '        self.no_such_method()', 'no_such_method'),
    ('from visualization_msgs.msg import Marker\nMarker.ARROW_STRIP', 'ARROW_STRIP'),
    ('try:\n    import yaml\nexcept ImportError:\n'
     '    from rclpy.event_handler import X', 'rclpy.event_handler'),
])
def test_checker_finds_what_humble_lacks(source, lacking):
    problems = check_source(source)
    assert len(problems) == 1 and lacking in problems[0], problems


@pytest.mark.parametrize('source', [
    'try:\n    from rclpy.event_handler import PublisherEventCallbacks\n'
    'except ImportError:\n    from rclpy.qos_event import PublisherEventCallbacks',
    'from rclpy.qos import QoSProfile\nQoSProfile(depth=1)',
    'import rclpy\nrclpy.init(args=None, domain_id=3)',
    'from visualization_msgs.msg import Marker\nMarker.ARROW\nMarker.ADD',
    'from rclpy.node import Node\nclass N(Node):\n    def f(self):\n'
    '        self.create_publisher(int, "t", 1, event_callbacks=None)\n'
    '        self.g()\n    def g(self):\n        pass',
])
def test_checker_accepts_what_humble_has(source):
    assert check_source(source) == []


@pytest.mark.parametrize('path', sorted(MESSAGE_CLASSES))
def test_installed_message_definitions_equal_humble(path):
    """The messages installed here (Kilted or Jazzy) have Humble's fields: what the
    package reads and writes on them, it can read and write on Humble. Constants may only
    have been added (Jazzy's Marker.ARROW_STRIP), never changed."""
    module, _, name = path.rpartition('.')
    if module.endswith('.srv'):
        return   # the service itself; its Request and Response are their own cases
    if name in ('Request', 'Response'):
        module, _, service = module.rpartition('.')
        cls = getattr(getattr(importlib.import_module(module), service), name)
    else:
        cls = getattr(importlib.import_module(module), name)
    record = MESSAGES['types'][MESSAGE_CLASSES[path]]
    assert cls.get_fields_and_field_types() == record['fields']
    for constant, value in record['constants'].items():
        got = getattr(cls, constant)
        if isinstance(got, bytes):   # 'byte' constants (DiagnosticStatus levels)
            got = int.from_bytes(got, 'little')
        assert str(got).lower() == value.strip('"\'').lower() or float(got) == float(value)
