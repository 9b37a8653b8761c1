"""Our arm controller's ros2_control parameter file, read and checked before it is used.

``crane_x7.launch.py control:=true`` hands ``config/crane_x7_controllers.yaml`` (or the file
named by its ``controllers_file`` argument) to controller_manager's spawner. The spawner
passes only the file's *path* to the controller manager, which opens it in its own process
(ros-controls/ros2_control ``controller_manager.cpp``, humble around L2694-2712), and a
controller that is already loaded is skipped without reading the file again. So the file is
checked here, where the launch runs, and plag_impedance compares the loaded controller's
parameters with it (:func:`differences`).

The controller type is ``forward_command_controller/ForwardCommandController`` with
``interface_name: position``: ros2_controllers ships it on Humble, Jazzy and Kilted and keeps
it on master, where ``position_controllers/JointGroupPositionController`` (the same
controller with the interface fixed to position) was removed (ros2_controllers #2016).
No rclpy here: plain YAML.
"""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

__all__ = ['CONTROLLER', 'CONTROLLER_TYPE', 'ControllerFile', 'ControllerFileError',
           'differences', 'node_section', 'read_controller_file', 'section_reaches',
           'spawner_copy', 'spawner_file', 'spawner_key', 'spawner_type_arguments']

# The name core.impedance_settings.FORWARD_CONTROLLER gives too (a test holds them equal);
# not imported from there: that module pulls in torch, and launch files import this one.
CONTROLLER = 'plag_arm_position_controller'
CONTROLLER_TYPE = 'forward_command_controller/ForwardCommandController'
INTERFACE = 'position'     # the only command interface the CRANE-X7's hardware exports


def section_reaches(key: str, full_name: str) -> bool:
    """Whether a parameter file's section ``key`` (``plag_impedance``, ``/**``,
    ``/**/plag_impedance``) reaches the node ``full_name`` (``/arm1/plag_impedance``).

    rclpy's rule (ros2/rclpy humble b488272 node.cpp:280-288, jazzy 85415f7 :306-314): a
    ``/`` is put in front of a key without one, every ``/*`` becomes ``(/\\w+)`` (so
    ``/**`` is ``(/\\w+)*``) and the result must match the whole full name as a regex.
    So ``plag_impedance:`` reaches ``/plag_impedance`` only, ``/**/plag_impedance:`` that
    node in any namespace.
    """
    key = key if key.startswith('/') else f'/{key}'
    try:
        return re.fullmatch(key.replace('/*', r'(/\w+)'), full_name) is not None
    except re.error:
        return False


def node_section(content: object, node: str, namespace: str = '/'
                 ) -> dict[str, object] | None:
    """The ``ros__parameters`` a parameter file's ``content`` (its YAML, loaded) gives
    the node ``node`` in ``namespace``: every section that reaches its full name
    (:func:`section_reaches`), merged parameter by parameter (nested groups too) in the
    file's order; None where none does."""
    if not isinstance(content, Mapping):
        return None
    full = f'{namespace.rstrip("/")}/{node}'
    found: dict[str, object] | None = None
    for key, section in content.items():
        parameters = section.get('ros__parameters') if isinstance(section, Mapping) else None
        if isinstance(key, str) and isinstance(parameters, Mapping) and \
                section_reaches(key, full):
            found = _merged(found or {}, parameters)
    return found


def _merged(base: Mapping[str, object], more: Mapping[str, object]) -> dict[str, object]:
    """``more`` over ``base``, nested mappings merged key by key (``switch: {method: x}``
    in a later section leaves an earlier ``switch.timeout_s``)."""
    merged = dict(base)
    for key, value in more.items():
        earlier = merged.get(key)
        merged[key] = _merged(earlier, value) if isinstance(earlier, Mapping) and \
            isinstance(value, Mapping) else value
    return merged


class ControllerFileError(ValueError):
    """The controller file cannot be used; the message names the file and the fix."""


@dataclass(frozen=True)
class ControllerFile:
    """What the file sets for our controller.

    Attributes:
        path: the file.
        type: the controller type (``<controller>.ros__parameters.type``).
        joints: the commanded joints, in the order of the command's values.
        interface_name: the command interface (``position``).
    """

    path: Path
    type: str
    joints: tuple[str, ...]
    interface_name: str


def read_controller_file(path: str | os.PathLike, controller: str = CONTROLLER,
                         namespace: str | None = None) -> ControllerFile:
    """Read ``controller``'s section of the ros2_control parameter file ``path``, for the
    controller in ``namespace`` (``/arm1``; None or ``/``: the root).

    In the root the section is the bare ``controller:`` key, the one every spawner release
    takes there (see :func:`spawner_key`). In a namespace it is every section that rcl
    gives the controller's node (:func:`section_reaches`: ``/arm1/<controller>``,
    ``/**/<controller>``, ``/**``) and the bare key, which crane_x7.launch.py re-keys
    (:func:`spawner_copy`), merged in the file's order.

    Raises:
        ControllerFileError: the file is missing, unreadable, not YAML, has no such section
            (in a namespace the message says how to key it), or lacks the controller's
            ``type``, ``joints`` (unique names) or ``interface_name: position``.
    """
    path = Path(path)
    key, parameters = _section(path, controller, namespace)
    where = f'{path}: {key}.ros__parameters'
    kind, joints, interface = (parameters.get(k) for k in ('type', 'joints', 'interface_name'))
    if not isinstance(kind, str) or not kind:
        raise ControllerFileError(f'{where}.type is missing (the spawner reads the type '
                                  f'from here; {CONTROLLER_TYPE})')
    if (not isinstance(joints, Sequence) or isinstance(joints, str) or not joints
            or not all(isinstance(j, str) and j for j in joints)):
        raise ControllerFileError(f'{where}.joints must be a non-empty list of joint names')
    if len(set(joints)) != len(joints):
        raise ControllerFileError(f'{where}.joints names a joint twice: {list(joints)}')
    if interface != INTERFACE:
        raise ControllerFileError(f'{where}.interface_name must be {INTERFACE!r} (the '
                                  f'CRANE-X7 exports position commands only), got {interface!r}')
    return ControllerFile(path, kind, tuple(joints), interface)


def _content(path: Path) -> object:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ControllerFileError(f'controller file {path} does not exist') from None
    except OSError as err:   # a directory, no permission
        raise ControllerFileError(f'controller file {path} cannot be read: {err}') from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ControllerFileError(f'controller file {path} is not valid YAML: {err}') from None


def _section(path: Path, controller: str, namespace: str | None
             ) -> tuple[str, Mapping[str, object]]:
    """The key (or keys, joined) and the ``ros__parameters`` of ``controller``'s section
    (:func:`read_controller_file`)."""
    content = _content(path)
    sections = content if isinstance(content, Mapping) else {}
    if not namespace or namespace == '/':
        section = sections.get(controller)
        parameters = section.get('ros__parameters') if isinstance(section, Mapping) else None
        if not isinstance(parameters, Mapping):
            raise ControllerFileError(f'controller file {path} has no {controller}: '
                                      'ros__parameters: section')
        return controller, parameters
    full = f'{namespace.rstrip("/")}/{controller}'
    keys: list[str] = []
    merged: dict[str, object] = {}
    for key, section in sections.items():
        found = section.get('ros__parameters') if isinstance(section, Mapping) else None
        if isinstance(key, str) and isinstance(found, Mapping) and \
                (key == controller or section_reaches(key, full)):
            keys.append(key)
            merged = _merged(merged, found)
    if not keys:
        raise ControllerFileError(
            f'controller file {path} has no section for {full} (namespace:='
            f'{namespace.strip("/")}): key it `{controller}:` (the launch hands the spawner '
            f'a copy keyed {full}) or `{full}:`; a key like `/{controller}:` reaches the '
            'controller in the root only')
    return ', '.join(keys), merged


def spawner_key(namespace: str | None, controller: str = CONTROLLER) -> str:
    """The key of ``controller``'s section in the file crane_x7.launch.py hands the
    spawner: the bare name in the root, the full name ``/arm1/<controller>`` in a namespace.

    Those are the keys every supported ros2_control release takes (the versions, files and
    lines are test/data/namespace_upstream.yaml's ``controller_section_keys``): Humble's
    spawner up to 2.37.0 passes the bare name to ros2param, which takes that key or ``/**``
    only, and Jazzy's before 4.19.0 looks the type up under the bare name (root) or
    ``<namespace>/<controller>`` only, so ``/**/<controller>`` fails there.
    """
    return controller if not namespace or namespace == '/' else \
        f'{namespace.rstrip("/")}/{controller}'


def spawner_copy(path: str | os.PathLike, namespace: str,
                 controller: str = CONTROLLER) -> dict[str, object]:
    """The content of the file the spawner gets for ``controller`` in ``namespace``: the
    section :func:`read_controller_file` reads there, keyed :func:`spawner_key`."""
    read_controller_file(path, controller, namespace)      # refuses an unusable file
    _, parameters = _section(Path(path), controller, namespace)
    return {spawner_key(namespace, controller): {'ros__parameters': dict(parameters)}}


def spawner_file(path: str, namespace: str | None, controller: str = CONTROLLER) -> str:
    """The file to hand the spawner: ``path`` itself in the root; in a namespace a copy
    (:func:`spawner_copy`) written to a new temporary file, whose path it returns. The
    controller manager opens the path it is given, so it must run on this machine."""
    if not namespace or namespace == '/':
        read_controller_file(path, controller)
        return path
    content = spawner_copy(path, namespace, controller)
    handle, copy = tempfile.mkstemp(prefix=f'{controller}_', suffix='.yaml')
    # readable by a controller manager running as another user (mkstemp gives 0600)
    os.fchmod(handle, 0o644)
    with os.fdopen(handle, 'w') as out:
        out.write(f'# {controller} of {path}, keyed for {namespace} by plag_ros\n')
        yaml.safe_dump(content, out, default_flow_style=False, sort_keys=False)
    return copy


def differences(expected: ControllerFile, loaded: Mapping[str, object]) -> list[str]:
    """Where the loaded controller's parameters (name -> value, as read from its
    ``get_parameters``; None for one it does not have) differ from the file's."""
    wanted = {'joints': list(expected.joints), 'interface_name': expected.interface_name}
    return [f'{name} is {loaded.get(name)!r}, the file says {value!r}'
            for name, value in wanted.items() if loaded.get(name) != value]


def spawner_type_arguments(distro: str) -> list[str]:
    """Extra spawner flags naming the controller type, for the ROS distribution ``distro``.

    The controller manager must know a controller's type before it loads it. The spawner
    reads it from ``--param-file`` on jazzy and later, and on humble since ros2_control
    2.43.0 (controller_manager CHANGELOG, backport #1680); older humble releases take it
    from ``-t/--controller-type``, which jazzy's spawner no longer accepts (removed in
    4.15.0, #1639). So: the flag on humble (newer humble releases apply the file's type
    after it), nothing elsewhere.
    """
    return ['--controller-type', CONTROLLER_TYPE] if distro == 'humble' else []
