#!/usr/bin/env python3
"""Record the fields and constants of the messages plag_ros uses, as one ROS release
defines them, from the interface packages' source (no ROS install needed).

``test/test_rclpy_humble_api.py`` compares the record of Humble with the message classes
installed here (Kilted or Jazzy wheels): where every field and constant is the same, a
field access that works here works on Humble too. Regenerate with clones (or bare
mirrors) of github.com/ros2/common_interfaces and github.com/ros2/rcl_interfaces:

    python3 test/data/record_msg_fields.py COMMON_GIT RCL_GIT humble \\
        test/data/humble_msg_fields.json

Fields are written in the form rosidl's Python classes report them
(``get_fields_and_field_types()``: ``sequence<double>``, ``std_msgs/Header``, ...).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys

# What the package imports (grep 'msg import\\|srv import' plag_ros), services as their
# request and response. controller_manager_msgs belongs to ros2_control and differs by
# release: the controller switch handles that itself.
USED = ['sensor_msgs/JointState', 'sensor_msgs/Image', 'std_msgs/Float64MultiArray',
        'std_msgs/String', 'std_msgs/Float64', 'visualization_msgs/Marker',
        'visualization_msgs/MarkerArray', 'diagnostic_msgs/DiagnosticArray',
        'trajectory_msgs/JointTrajectory', 'rosgraph_msgs/Clock',
        'builtin_interfaces/Time', 'builtin_interfaces/Duration',
        'rcl_interfaces/ParameterDescriptor', 'rcl_interfaces/SetParametersResult',
        'rcl_interfaces/Parameter', 'rcl_interfaces/ParameterValue',
        'rcl_interfaces/ParameterType', 'geometry_msgs/Point',
        'std_srvs/SetBool_Request', 'std_srvs/SetBool_Response',
        'rcl_interfaces/GetParameters_Request', 'rcl_interfaces/GetParameters_Response',
        'rcl_interfaces/SetParameters_Request', 'rcl_interfaces/SetParameters_Response']

PRIMITIVES = {'float64': 'double', 'float32': 'float', 'bool': 'boolean', 'byte': 'octet',
              'char': 'uint8', 'string': 'string', 'wstring': 'wstring'}
PRIMITIVES.update({t: t for t in ('int8', 'uint8', 'int16', 'uint16', 'int32', 'uint32',
                                  'int64', 'uint64')})
FIELD = re.compile(r'^(?P<type>[\w/]+(?:<=\d+)?)(?P<array>\[(?:<=)?\d*\])?\s+(?P<name>\w+)'
                   r'(?:\s*=\s*(?P<constant>.+?)|\s+(?P<default>.+?))?\s*$')


def git(gitdir: str, *args: str) -> str:
    return subprocess.run(['git', '-C', gitdir, *args], check=True, capture_output=True,
                          text=True).stdout


def find(dirs: list[str], branch: str, package: str, kind: str, name: str) -> str:
    for gitdir in dirs:
        try:
            return git(gitdir, 'show', f'{branch}:{package}/{kind}/{name}.{kind}')
        except subprocess.CalledProcessError:
            continue
    raise FileNotFoundError(f'{package}/{kind}/{name}.{kind} on {branch}')


def python_type(package: str, text: str, array: str | None) -> str:
    base, _, bound = text.partition('<=')
    if base in PRIMITIVES:
        element = PRIMITIVES[base] + (f'<{bound}>' if bound else '')
    else:
        element = base if '/' in base else f'{package}/{base}'
        if element == 'Header' or element.endswith('/Header') and '/' not in base:
            element = 'std_msgs/Header'
    if not array:
        return element
    inside = array[1:-1]
    if inside == '':
        return f'sequence<{element}>'
    if inside.startswith('<='):
        return f'sequence<{element}, {inside[2:]}>'
    return f'{element}[{inside}]'


def parse(package: str, text: str) -> dict:
    fields: dict[str, str] = {}
    constants: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        match = FIELD.match(line)
        if match is None:
            raise ValueError(f'cannot read {line!r}')
        if match['constant'] is not None:
            constants[match['name']] = match['constant'].strip()
        else:
            kind = match['type']
            if kind == 'Header':
                kind = 'std_msgs/Header'
            fields[match['name']] = python_type(package, kind, match['array'])
    return {'fields': fields, 'constants': constants}


def main(common: str, rcl: str, branch: str, out: str) -> None:
    dirs = [common, rcl]
    records: dict[str, dict] = {}
    todo = list(USED)
    while todo:
        full = todo.pop()
        if full in records:
            continue
        package, name = full.split('/')
        if name.endswith(('_Request', '_Response')):
            base, part = name.rsplit('_', 1)
            request, _, response = find(dirs, branch, package, 'srv', base).partition('\n---')
            record = parse(package, request if part == 'Request' else response)
        else:
            record = parse(package, find(dirs, branch, package, 'msg', name))
        records[full] = record
        for kind in record['fields'].values():
            inner = re.sub(r'^sequence<([^,>]+).*$', r'\1', kind).split('[')[0]
            if '/' in inner:
                todo.append(inner)
    data = {
        'repositories': {'ros2/common_interfaces': git(common, 'rev-parse', branch).strip(),
                         'ros2/rcl_interfaces': git(rcl, 'rev-parse', branch).strip()},
        'branch': branch,
        'how': 'test/data/record_msg_fields.py over the .msg/.srv files of that commit',
        'types': dict(sorted(records.items())),
    }
    with open(out, 'w') as fh:
        json.dump(data, fh, indent=1)
        fh.write('\n')


if __name__ == '__main__':
    main(*sys.argv[1:5])
