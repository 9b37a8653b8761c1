"""Launch files read as Python syntax trees: what they start and declare, without launch.

A launch file writes a node out (``Node(package=..., ...)``), takes one a helper of
plag_ros/ros/launch_actions.py writes out (``rviz_node(share, rviz)``: read as that helper's
``Node`` with the launch file's arguments in place), or builds it from the shared
description of plag_ros/ros/node_setups.py (``sim_setup()``, ``robot_setup(...)``, turned
into ``Node`` actions by ``plag_node`` of plag_ros/ros/launch_actions.py, whose syntax tree
shows which field of a setup goes where); its arguments likewise come from
``node_setups.*_arguments()`` through ``launch_argument``, which hands each field to
``DeclareLaunchArgument``. A node is ``namespaced`` when the launch file puts it (its call,
its generator, or the ``OpaqueFunction(function=f)`` whose ``f`` writes it out) in the list
of ``namespaced(namespace, [...])`` (plag_ros/ros/launch_actions.py). Used by
test_launch.py and test_launch_arguments.py, which run in every suite: launch/launch_ros
are on no package registry.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ros_helpers import REPO

from plag_ros.ros import node_setups

__all__ = ['LAUNCH_FILES', 'LaunchNode', 'call_name', 'console_scripts', 'constant',
           'default_source', 'launch_arguments', 'literal_value', 'parse_launch',
           'string_constants']

LAUNCH_FILES = sorted((REPO / 'launch').glob('*.launch.py'))    # every one, generic checks
LAUNCH_ACTIONS = REPO / 'plag_ros' / 'ros' / 'launch_actions.py'


@dataclass
class LaunchNode:
    """One node a launch file starts, as its syntax tree says."""

    package: str
    executable: str
    name: str | None
    files: list[str] = field(default_factory=list)        # string constants ending .yaml/.rviz
    params: list[str] = field(default_factory=list)       # names set on top of the files
    condition: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)   # literal values (else source)
    remappings: list[tuple[str, str]] = field(default_factory=list)
    namespaced: bool = False      # in the list of namespaced(namespace, [...])


def constant(node: ast.AST | None):
    return node.value if isinstance(node, ast.Constant) else None


def string_constants(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def call_name(call: ast.Call) -> str:
    return call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, 'attr', '')


def literal_value(node: ast.AST):
    """A literal's value (a list's starred literal lists spliced in), else its source
    text (a launch substitution, say)."""
    if isinstance(node, ast.List) and any(isinstance(e, ast.Starred) for e in node.elts):
        values = []
        for element in node.elts:
            value = literal_value(element.value if isinstance(element, ast.Starred)
                                  else element)
            if isinstance(element, ast.Starred) and not isinstance(value, (list, tuple)):
                return ast.unparse(node)
            values += list(value) if isinstance(element, ast.Starred) else [value]
        return values
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


class _Resolve(ast.NodeTransformer):
    """Replaces names by expressions (a helper's arguments by the caller's values)."""

    def __init__(self, names: dict[str, ast.expr]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return self.names.get(node.id, node)


def _resolved(node: ast.AST, names: dict[str, ast.expr]) -> str:
    return ast.unparse(_Resolve(names).visit(ast.parse(ast.unparse(node), mode='eval')))


def _setup_nodes(tree: ast.Module, generator: ast.GeneratorExp,
                 local: dict[str, ast.expr], path: Path) -> list[LaunchNode]:
    """The nodes of ``*(helper(setup, ...) for setup in node_setups.X(...))``.

    The setups are the shared description's own; what the helper makes of each setup is
    read from its syntax tree: ``setup.<field>`` in each ``Node`` argument.
    """
    imported = {alias.asname or alias.name for n in tree.body
                if isinstance(n, ast.ImportFrom) and n.module == 'plag_ros.ros.node_setups'
                for alias in n.names}
    source = generator.generators[0].iter
    assert isinstance(source, ast.Call) and call_name(source) in imported, (
        f'{path.name}: nodes from {ast.unparse(source)}, not from plag_ros.ros.node_setups')
    arguments = [literal_value(a) if isinstance(a, ast.Constant) else _resolved(a, local)
                 for a in source.args]
    setups = getattr(node_setups, call_name(source))(*arguments)
    call = generator.elt
    assert isinstance(call, ast.Call), ast.unparse(call)
    helper = _helper(tree, generator)
    variable = generator.generators[0].target.id
    params = [a.arg for a in helper.args.args]
    assert params[0] == variable, f'{path.name}: {helper.name} takes the setup first'
    at_call = dict(zip(params[1:], (ast.parse(_resolved(a, local), mode='eval').body
                                    for a in call.args[1:]), strict=True))
    made, = [n for n in ast.walk(helper) if isinstance(n, ast.Call) and call_name(n) == 'Node']
    kw = {k.arg: k.value for k in made.keywords}
    helper_locals = {t.id: a.value for a in ast.walk(helper) if isinstance(a, ast.Assign)
                     for t in a.targets if isinstance(t, ast.Name)}
    source_of = {key: ast.unparse(value) for key, value in kw.items()}
    parameters = ast.unparse(helper_locals.get(source_of['parameters'], kw['parameters']))
    # The helper passes each field of the setup where launch_ros wants it; the parameters
    # are node_setups.parameter_layers' (the bundled file joined to share/config, then the
    # user's params_file where given, then the overrides), in that order.
    assert source_of['package'] in ('PACKAGE', repr(node_setups.PACKAGE)), source_of
    assert source_of['executable'] == f'{variable}.executable', source_of
    assert source_of['name'] == f'{variable}.name', source_of
    layers, = [a for a in ast.walk(helper) if isinstance(a, ast.Assign)
               and isinstance(a.value, ast.Call) and call_name(a.value) == 'parameter_layers']
    own = ast.unparse(layers.value.args[1])
    assert ast.unparse(layers.value.args[0]) == variable, ast.unparse(layers)
    assert ast.unparse(helper_locals[own]) == f'own_params_file({params[3]}.perform(context))'
    bundled, rest = layers.targets[0].elts
    assert parameters == (f"[PathJoinSubstitution([share, 'config', {ast.unparse(bundled)}]), "
                          f'*{ast.unparse(rest.value)}]'), parameters
    assert f'{variable}.remappings' in source_of['remappings'], source_of
    condition = kw['condition']
    assert isinstance(condition, ast.IfExp) and \
        ast.unparse(condition.test) == f'{variable}.control_only', source_of['condition']
    nodes = []
    for setup in setups:
        chosen = condition.body if setup.control_only else condition.orelse
        text = _resolved(chosen, at_call)
        nodes.append(LaunchNode(
            node_setups.PACKAGE, setup.executable, setup.name, files=[setup.params_file],
            params=list(setup.overrides), condition=None if text == 'None' else text,
            overrides=dict(setup.overrides), remappings=list(setup.remappings)))
    return nodes


def _helper(tree: ast.Module, generator: ast.GeneratorExp) -> ast.FunctionDef:
    """The function that ``*(helper(x, ...) for x in ...)`` calls: the launch file's own,
    or plag_ros.ros.launch_actions' where the launch file imports it from there."""
    call = generator.elt
    assert isinstance(call, ast.Call), ast.unparse(call)
    name = call_name(call)
    shared = {alias.asname or alias.name for n in tree.body
              if isinstance(n, ast.ImportFrom) and n.module == 'plag_ros.ros.launch_actions'
              for alias in n.names}
    if name in shared:
        tree = ast.parse(LAUNCH_ACTIONS.read_text(), filename=str(LAUNCH_ACTIONS))
    return next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == name)


def _made_by(tree: ast.Module, generator: ast.GeneratorExp) -> str:
    """What the generator's helper returns a call of ('Node', 'DeclareLaunchArgument')."""
    returned = [n.value for n in ast.walk(_helper(tree, generator))
                if isinstance(n, ast.Return) and isinstance(n.value, ast.Call)]
    return call_name(returned[-1]) if returned else ''


def launch_arguments(path: Path) -> list[node_setups.LaunchArgument]:
    """The launch arguments ``path`` declares, read from its syntax tree.

    A launch file declares its arguments as ``*(helper(argument, share) for argument in
    node_setups.X_arguments())``: the list is node_setups' own, and the helper's syntax tree
    must hand each field to ``DeclareLaunchArgument`` where launch reads it (the name
    first, ``default_value``, a share-relative default joined to ``share``, ``choices``
    (None where there are none: launch takes an empty list as "no value allowed") and
    ``description``).
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    generate = next(f for f in tree.body
                    if isinstance(f, ast.FunctionDef) and f.name == 'generate_launch_description')
    generators = [n.value for n in ast.walk(generate) if isinstance(n, ast.Starred)
                  and isinstance(n.value, ast.GeneratorExp)
                  and _made_by(tree, n.value) == 'DeclareLaunchArgument']
    assert len(generators) == 1, f'{path.name}: launch arguments not from node_setups'
    generator = generators[0]
    source = generator.generators[0].iter
    imported = {alias.asname or alias.name for n in tree.body
                if isinstance(n, ast.ImportFrom) and n.module == 'plag_ros.ros.node_setups'
                for alias in n.names}
    assert isinstance(source, ast.Call) and call_name(source) in imported and \
        not source.args, f'{path.name}: arguments from {ast.unparse(source)}'
    helper = _helper(tree, generator)
    variable = generator.generators[0].target.id
    assert helper.args.args[0].arg == variable, f'{path.name}: {helper.name} takes it first'
    declare, = [n for n in ast.walk(helper) if isinstance(n, ast.Call)
                and call_name(n) == 'DeclareLaunchArgument']
    kw = {k.arg: ast.unparse(k.value) for k in declare.keywords}
    assert [ast.unparse(a) for a in declare.args] == [f'{variable}.name'], path.name
    assert kw['description'] == f'{variable}.description', kw
    assert kw['choices'] == f'list({variable}.choices) or None', kw
    # default_value: the field, or, for a share-relative one, the path joined to `share`
    default = kw['default_value']
    assigned = [ast.unparse(a) for a in ast.walk(helper) if isinstance(a, ast.Assign)
                and isinstance(a.targets[0], ast.Name) and a.targets[0].id == default]
    assert assigned == [f'{default} = {variable}.default', f'{default} = PathJoinSubstitution('
                        f"[share, *({variable}.default or '').split('/')])"], assigned
    in_share, = [n for n in ast.walk(helper) if isinstance(n, ast.If)]
    assert ast.unparse(in_share.test) == f'{variable}.in_share', ast.unparse(in_share.test)
    return getattr(node_setups, call_name(source))()


def _picked(node: ast.expr) -> ast.expr:
    """``node`` with the choices its literals decide made: ``A if LITERAL else B`` becomes
    A or B, ``list(X)`` X (what a shared helper's arguments turn into once resolved)."""
    if isinstance(node, ast.IfExp):
        try:
            test = ast.literal_eval(node.test)
        except ValueError:
            return node
        return _picked(node.body if test else node.orelse)
    if isinstance(node, ast.Call) and call_name(node) == 'list' and len(node.args) == 1:
        return _picked(node.args[0])
    return node


def _shared_node(call: ast.Call, helper: ast.FunctionDef) -> ast.Call | None:
    """The ``Node(...)`` a launch_actions helper writes out (a literal package), its
    arguments resolved to the launch file's ``call`` of it (a parameter it does not pass:
    the default); None for a helper of another kind (``plag_node``: read through its
    setups)."""
    made = [n for n in ast.walk(helper) if isinstance(n, ast.Call) and call_name(n) == 'Node']
    if len(made) != 1:
        return None
    kw = {k.arg: k.value for k in made[0].keywords}
    if constant(kw.get('package')) is None:
        return None
    params = [a.arg for a in helper.args.args]
    given = dict(zip(params, call.args, strict=False))
    given |= {k.arg: k.value for k in call.keywords}
    defaults = dict(zip(params[len(params) - len(helper.args.defaults):],
                        helper.args.defaults, strict=True))
    names = {name: given.get(name, defaults.get(name)) for name in params}
    assert None not in names.values(), f'{helper.name}: {ast.unparse(call)} misses an argument'
    names = {**_module_constants(), **names}
    resolved = ast.parse(_resolved(made[0], names), mode='eval').body
    assert isinstance(resolved, ast.Call)
    for keyword in resolved.keywords:
        keyword.value = _picked(keyword.value)
    return resolved


def _module_constants() -> dict[str, ast.expr]:
    """launch_actions' module-level literals (``TF_REMAPS``), for its helpers' Nodes."""
    tree = ast.parse(LAUNCH_ACTIONS.read_text(), filename=str(LAUNCH_ACTIONS))
    return {t.id: a.value for a in tree.body if isinstance(a, ast.Assign)
            for t in a.targets if isinstance(t, ast.Name) and t.id.isupper()}


def _namespaced(tree: ast.Module) -> tuple[set[int], set[str]]:
    """What the launch file puts in ``namespaced(namespace, [...])``: the ids of the
    syntax nodes in that list, and the functions its ``OpaqueFunction(function=f)`` run."""
    inside: set[int] = set()
    functions: set[str] = set()
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and call_name(call) == 'namespaced':
            assert len(call.args) == 2 and isinstance(call.args[1], ast.List), \
                ast.unparse(call)
            for node in ast.walk(call.args[1]):
                inside.add(id(node))
                if isinstance(node, ast.Call) and call_name(node) == 'OpaqueFunction':
                    functions |= {k.value.id for k in node.keywords
                                  if k.arg == 'function' and isinstance(k.value, ast.Name)}
    return inside, functions


def default_source(argument: node_setups.LaunchArgument) -> object:
    """An argument's default as the launch file's source writes it."""
    if argument.in_share:
        parts = ', '.join(repr(p) for p in (argument.default or '').split('/'))
        return f'PathJoinSubstitution([share, {parts}])'
    return argument.default


def parse_launch(path: Path) -> tuple[list[LaunchNode], set[str], set[str]]:
    """Nodes, declared launch arguments and used launch configurations of a launch file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    generate = [f for f in tree.body
                if isinstance(f, ast.FunctionDef) and f.name == 'generate_launch_description']
    assert generate, f'{path.name}: no generate_launch_description()'
    local = {t.id: a.value for a in ast.walk(generate[0]) if isinstance(a, ast.Assign)
             for t in a.targets if isinstance(t, ast.Name)}
    nodes, declared, used = [], set(), set()
    inside, functions = _namespaced(tree)
    # the function each syntax node is written in (a Node an OpaqueFunction's f returns)
    owner = {id(n): f.name for f in tree.body if isinstance(f, ast.FunctionDef)
             for n in ast.walk(f)}
    for starred in (n for n in ast.walk(generate[0]) if isinstance(n, ast.Starred)):
        if not isinstance(starred.value, ast.GeneratorExp):
            continue
        if _made_by(tree, starred.value) == 'DeclareLaunchArgument':
            declared |= {a.name for a in launch_arguments(path)}
        else:
            made = _setup_nodes(tree, starred.value, local, path)
            for node in made:
                node.namespaced = id(starred.value) in inside
            nodes += made
    shared = {alias.asname or alias.name: alias.name for n in tree.body
              if isinstance(n, ast.ImportFrom) and n.module == 'plag_ros.ros.launch_actions'
              for alias in n.names}
    actions = ast.parse(LAUNCH_ACTIONS.read_text(), filename=str(LAUNCH_ACTIONS))
    helpers = {f.name: f for f in actions.body if isinstance(f, ast.FunctionDef)}
    written = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    # a node a launch_actions helper writes out (rviz2, robot_state_publisher) is read as
    # if the launch file wrote it, with the launch file's arguments in place; each with the
    # call the launch file makes
    calls = [(call, call) for call in written]
    calls += [(made, call) for call in written if call_name(call) in shared
              for made in [_shared_node(call, helpers[shared[call_name(call)]])] if made]
    for call, origin in calls:
        name = call_name(call)
        if name == 'DeclareLaunchArgument' and call.args and constant(call.args[0]):
            # (written out; a helper's, from node_setups, is read by launch_arguments)
            declared.add(constant(call.args[0]))
        elif name == 'LaunchConfiguration':
            used.add(constant(call.args[0]))
        elif name == 'Node':
            kw = {k.arg: k.value for k in call.keywords}
            if constant(kw['package']) is None:
                continue                     # a helper's Node: read through its setups above
            node = LaunchNode(constant(kw['package']), constant(kw['executable']),
                              constant(kw.get('name')))
            for key in ('parameters', 'arguments'):
                if key in kw:
                    node.files += [s for s in string_constants(kw[key])
                                   if s.endswith(('.yaml', '.rviz', '.urdf'))]
            for d in ast.walk(kw.get('parameters', ast.List(elts=[]))):
                if isinstance(d, ast.Dict):
                    node.params += [constant(k) for k in d.keys]
                    node.overrides.update((constant(k), literal_value(v))
                                          for k, v in zip(d.keys, d.values, strict=True))
            if 'remappings' in kw and ast.unparse(kw['remappings']) != 'None':
                node.remappings = [tuple(pair) for pair in literal_value(kw['remappings'])]
            if 'condition' in kw:
                node.condition = ast.unparse(kw['condition'])
            node.namespaced = id(origin) in inside or owner.get(id(origin)) in functions
            nodes.append(node)
    return nodes, declared, used


def console_scripts() -> dict[str, str]:
    """setup.py console_scripts: name -> 'module:function'."""
    tree = ast.parse((REPO / 'setup.py').read_text())
    scripts = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if constant(key) == 'console_scripts':
                    for entry in value.elts:
                        name, target = (s.strip() for s in entry.value.split('='))
                        scripts[name] = target
    return scripts
