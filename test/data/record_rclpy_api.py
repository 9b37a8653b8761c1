#!/usr/bin/env python3
"""Record the Python API of one rclpy release from its source, without importing it.

``test/test_rclpy_humble_api.py`` checks every rclpy name the package uses against the
record of Humble's rclpy (no Humble wheels exist to run it on). Regenerate with a clone
(or bare mirror) of github.com/ros2/rclpy:

    python3 test/data/record_rclpy_api.py RCLPY_GIT_DIR humble test/data/rclpy_humble_api.json

What is recorded: the names bound at the top level of every module of the Python package
(``rclpy/rclpy/**/*.py``, read with ``ast``; private names left out), the names in each
class body, the parameters of every function and method, and the names the C extension
``rclpy._rclpy`` registers with pybind11 (a regular expression over ``rclpy/src/rclpy``).
"""
import ast
import json
import re
import subprocess
import sys


def git(gitdir, *args):
    return subprocess.run(['git', '-C', gitdir, *args], check=True,
                          capture_output=True, text=True).stdout


def strip_comments(text):
    """Drop // and /* */ comments, keeping string literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith('//', i):
            i = text.find('\n', i)
            i = n if i < 0 else i
        elif text.startswith('/*', i):
            i = text.find('*/', i) + 2
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def skip_balanced(text, i, op, cl):
    """text[i] == op; return the index just past the matching cl."""
    depth = 0
    while i < len(text):
        if text[i] == op:
            depth += 1
        elif text[i] == cl:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def statement(text, i):
    """text from i to the first ';' outside (), {}, [] and string literals."""
    depth, j, n = 0, i, len(text)
    while j < n:
        c = text[j]
        if c == '"':
            j += 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == '\\' else 1
        elif c in '({[':
            depth += 1
        elif c in ')}]':
            depth -= 1
        elif c == ';' and depth <= 0:
            return text[i:j]
        j += 1
    return text[i:]


def bound_names(stmts):
    """Names bound at this statement level (descending into if/try/with/for/while)."""
    names = set()

    def targets(t):
        if isinstance(t, ast.Name):
            names.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                targets(e)
        elif isinstance(t, ast.Starred):
            targets(t.value)

    for s in stmts:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(s.name)
        elif isinstance(s, ast.Assign):
            for t in s.targets:
                targets(t)
        elif isinstance(s, (ast.AnnAssign, ast.AugAssign)):
            targets(s.target)
        elif isinstance(s, ast.Import):
            for a in s.names:
                names.add(a.asname or a.name.split('.')[0])
        elif isinstance(s, ast.ImportFrom):
            for a in s.names:
                if a.name != '*':
                    names.add(a.asname or a.name)
        elif isinstance(s, ast.If):
            names |= bound_names(s.body) | bound_names(s.orelse)
        elif isinstance(s, ast.Try) or type(s).__name__ == 'TryStar':
            names |= bound_names(s.body) | bound_names(s.orelse) | bound_names(s.finalbody)
            for h in s.handlers:
                if h.name:
                    names.add(h.name)
                names |= bound_names(h.body)
        elif isinstance(s, (ast.With, ast.AsyncWith)):
            for it in s.items:
                if it.optional_vars is not None:
                    targets(it.optional_vars)
            names |= bound_names(s.body)
        elif isinstance(s, (ast.For, ast.AsyncFor)):
            targets(s.target)
            names |= bound_names(s.body) | bound_names(s.orelse)
        elif isinstance(s, ast.While):
            names |= bound_names(s.body) | bound_names(s.orelse)
        elif type(s).__name__ == 'TypeAlias':
            targets(s.name)
    return names


def parameters(fn):
    """Parameter names of a def; '**' at the end when it takes any keyword."""
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    return names + (['**'] if a.kwarg is not None else [])


def public(names):
    return sorted(n for n in names if not n.startswith('_') or n in ('__all__', '__version__'))


def main(gitdir, branch, out):
    commit = git(gitdir, 'rev-parse', branch).strip()
    pkg = git(gitdir, 'show', f'{commit}:rclpy/package.xml')
    version = re.search(r'<version>([^<]+)</version>', pkg).group(1)
    files = git(gitdir, 'ls-tree', '-r', '--name-only', commit, '--', 'rclpy/rclpy').split()
    modules, classes, signatures = {}, {}, {}
    for f in sorted(files):
        if not f.endswith('.py'):
            continue
        mod = f[len('rclpy/'):-3].replace('/', '.')
        if mod.endswith('.__init__'):
            mod = mod[:-len('.__init__')]
        tree = ast.parse(git(gitdir, 'show', f'{commit}:{f}'), filename=f)
        modules[mod] = public(bound_names(tree.body))
        for s in tree.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                signatures[f'{mod}.{s.name}'] = parameters(s)
            if isinstance(s, ast.ClassDef):
                # all class-level names incl. dunders such as __init__/__enter__
                classes[f'{mod}.{s.name}'] = sorted(bound_names(s.body))
                for m in s.body:
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        signatures[f'{mod}.{s.name}.{m.name}'] = parameters(m)

    # C extension rclpy._rclpy (pybind11): regex over rclpy/src/rclpy/*.cpp|*.hpp
    srcs = [f for f in git(gitdir, 'ls-tree', '-r', '--name-only', commit, '--',
                           'rclpy/src/rclpy').split() if f.endswith(('.cpp', '.hpp'))]
    top, cls_methods = set(), {}
    mod_re = r'(?:m|module)'
    for f in srcs:
        text = strip_comments(git(gitdir, 'show', f'{commit}:{f}'))
        for mm in re.finditer(r'\b' + mod_re + r'\s*\.\s*def\s*\(\s*"(\w+)"', text):
            top.add(mm.group(1))
        for mm in re.finditer(r'\b' + mod_re + r'\s*\.\s*attr\s*\(\s*"(\w+)"\s*\)\s*=',
                              text):
            top.add(mm.group(1))
        for mm in re.finditer(r'py::register_exception\s*<[^;]*?>\s*\(\s*' + mod_re +
                              r'\s*,\s*"(\w+)"', text, re.S):
            top.add(mm.group(1))
        for mm in re.finditer(r'py::(class_|enum_)\s*<', text):
            # skip the template argument list, then expect (m|module, "Name"
            i = skip_balanced(text, mm.end() - 1, '<', '>')
            m2 = re.match(r'\s*\(\s*' + mod_re + r'\s*,\s*"(\w+)"', text[i:])
            if not m2:
                continue
            name = m2.group(1)
            top.add(name)
            # the statement: up to the ';' at bracket depth 0
            chain = statement(text, i)
            meths = set(re.findall(r'\.\s*def(?:_static|_property_readonly|_property|'
                                   r'_readwrite|_readonly)?\s*\(\s*"(\w+)"', chain))
            if re.search(r'\.\s*def\s*\(\s*py::init', chain):
                meths.add('__init__')
            if mm.group(1) == 'enum_':
                meths |= set(re.findall(r'\.\s*value\s*\(\s*"(\w+)"', chain))
            cls_methods.setdefault(f'rclpy._rclpy.{name}', set()).update(meths)
    modules['rclpy._rclpy'] = sorted(top)
    for k, v in cls_methods.items():
        classes[k] = sorted(v)

    data = {
        'repository': 'ros2/rclpy',
        'branch': branch,
        'commit': commit,
        'package_version': version,
        'how': ('python ast over `git show <commit>:rclpy/rclpy/**/*.py` (module top-level '
                'bindings incl. if/try/with bodies, leading-underscore names dropped except '
                '__all__/__version__; class bodies: all def/assign names) + regex over '
                'rclpy/src/rclpy/*.cpp pybind11 m.def/py::class_/py::enum_/'
                'register_exception and .def* in class chains; parameters of every def; '
                'script test/data/record_rclpy_api.py'),
        'modules': dict(sorted(modules.items())),
        'classes': dict(sorted(classes.items())),
        'signatures': dict(sorted(signatures.items())),
    }
    with open(out, 'w') as fh:
        json.dump(data, fh, indent=1, sort_keys=False)
        fh.write('\n')


if __name__ == '__main__':
    main(*sys.argv[1:4])
