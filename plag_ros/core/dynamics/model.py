"""URDF -> kinematic tree of moving bodies, with fixed links lumped and payloads added.

A :class:`RobotModel` is built once from a URDF (a file path or the XML text published on
``robot_description``) and then frozen. It holds flat, index-based arrays in the spirit of
Pinocchio's ``Model``: one entry per moving joint (the generalized coordinates) and one per
*body*. Body ``i < n`` is the child link of moving joint ``i`` with every link hanging from it
by fixed joints lumped in (Kusaka and Tanaka 2022 [PL]: each body owns one partial Lagrangian
``L_i``); payloads added at run time are extra bodies, i.e. extra columns of the partial
torque table ([PL], "extension" and "reconstruction").

Frames: every moving joint ``j`` has a *joint frame* fixed in its parent body at
``T_parent_joint[j]``; the child body frame equals the joint frame rotated by ``q_j`` about
(or translated by ``q_j`` along) ``joint_axis[j]``. Body inertial figures are expressed in the
child body frame (the frame of the joint's URDF child link), about the body's centre of mass.

Size (over ~600 lines): the model is built and validated in one pass over the URDF; the
frozen arrays and the checks that name a bad element stay next to each other.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plag_ros.core.common.shipped import shipped_file

__all__ = ['MOVING_JOINT_TYPES', 'ModelChanges', 'RobotModel', 'actuation_matrix',
           'broken_triangle', 'default_urdf_path', 'without_xml_declaration']

_log = logging.getLogger(__name__)

_DECLARATION = re.compile(r'^\s*<\?xml\b[^>]*\?>', re.S)
_ENCODING = re.compile(rb'^\s*<\?xml\b[^>]*\bencoding\s*=\s*["\']([A-Za-z0-9._-]+)["\']')

IGNORED_URDF_TAGS = ('ros2_control', 'gazebo', 'transmission')
"""Top-level URDF elements that carry no dynamics (the driver's hardware interface, the
simulator's and the transmissions' settings): the robot's own description has them, and
the parser's "Unknown tag" line for each would read like an error at every start."""


def _decode_xml(data: bytes, path: Path) -> str:
    """A URDF file's text, decoded as its XML declaration says (UTF-8 without one)."""
    declared = _ENCODING.match(data)
    encoding = declared.group(1).decode() if declared else 'utf-8'
    try:
        return data.decode(encoding)
    except (LookupError, UnicodeDecodeError) as err:
        raise ValueError(f'malformed URDF: {path} is not {encoding} text: {err}') from err


def without_xml_declaration(text: str) -> str:
    """``text`` without a leading ``<?xml ...?>``: an XML parser refuses a str (already
    decoded) whose declaration names an encoding."""
    return _DECLARATION.sub('', text, count=1)


def _parse_urdf(urdf_parser, text: str):
    """urdf_parser_py's URDF of ``text``.

    The XML declaration is dropped first: ``text`` is already decoded, and an XML parser
    refuses a str whose declaration names an encoding (what the SolidWorks exporter and
    many tools write). The parser's complaints go to this module's logger, except those
    about :data:`IGNORED_URDF_TAGS`, instead of straight to stderr.
    """
    from urdf_parser_py.xml_reflection import core

    ignored = tuple(f'Unknown tag "{tag}" in /robot' for tag in IGNORED_URDF_TAGS)

    def on_error(message: str) -> None:
        if not message.startswith(ignored):
            _log.warning('URDF: %s', message)

    previous, core.on_error = core.on_error, on_error
    try:
        return urdf_parser.URDF.from_xml_string(without_xml_declaration(text))
    finally:
        core.on_error = previous

MOVING_JOINT_TYPES = ('revolute', 'continuous', 'prismatic')
_REJECTED_JOINT_TYPES = ('floating', 'planar')


def default_urdf_path() -> Path:
    """Path of the bundled CRANE-X7 URDF: the checkout's, else an install's (colcon or pip:
    :func:`~plag_ros.core.common.shipped.shipped_file`)."""
    return shipped_file('urdf', 'crane_x7.urdf')


def _rpy_to_matrix(rpy: Sequence[float]) -> np.ndarray:
    """URDF fixed-axis roll-pitch-yaw -> rotation matrix R = Rz(y) Ry(p) Rx(r)."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = (math.cos(r), math.sin(r), math.cos(p), math.sin(p),
                              math.cos(y), math.sin(y))
    return np.array([
        [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
        [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
        [-sp, cp * sr, cp * cr],
    ])


def _pose(origin) -> np.ndarray:
    """4x4 homogeneous transform of a urdf_parser_py Pose (None = identity)."""
    T = np.eye(4)
    if origin is not None:
        if origin.rpy is not None:
            T[:3, :3] = _rpy_to_matrix(origin.rpy)
        if origin.xyz is not None:
            T[:3, 3] = origin.xyz
    return T


def _check_finite(values, what: str) -> None:
    if not np.all(np.isfinite(np.asarray(values, dtype=float))):
        raise ValueError(f'{what} is not finite: {values}')


def _check_inertia(mass: float, inertia: np.ndarray, what: str) -> None:
    """Mass positive, rotational inertia symmetric positive definite."""
    if not mass > 0.0:
        raise ValueError(f'{what}: mass must be positive, got {mass}')
    if not np.allclose(inertia, inertia.T, rtol=0.0, atol=1e-15):
        raise ValueError(f'{what}: inertia is not symmetric')
    eig = np.linalg.eigvalsh(inertia)
    if not eig[0] > 0.0:
        raise ValueError(f'{what}: inertia is not positive definite (eigenvalues {eig})')


def broken_triangle(inertia: np.ndarray) -> str | None:
    """The first triangle inequality a (3, 3) inertia about the COM breaks, as text, or None.

    The diagonal in the given axes is checked first (the figures a URDF shows), then the
    principal moments (an inertia can pass in its own axes and fail in the principal ones
    only through large products of inertia)."""
    inertia = np.asarray(inertia, dtype=np.float64)
    for values, names in ((np.diag(inertia), [f'i{a}' for a in ('xx', 'yy', 'zz')]),
                          (np.linalg.eigvalsh(inertia), ['I_1', 'I_2', 'I_3'])):
        for k in range(3):
            i, j = (k + 1) % 3, (k + 2) % 3
            if values[k] > values[i] + values[j]:
                return (f'{names[k]} <= {names[i]} + {names[j]} ({values[k]:.6g} > '
                        f'{values[i]:.6g} + {values[j]:.6g} = {values[i] + values[j]:.6g})')
    return None


def _combine(m1: float, c1: np.ndarray, I1: np.ndarray,
             m2: float, c2: np.ndarray, I2: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Lump two rigid bodies given in one frame: mass, COM and inertia about the new COM."""
    m = m1 + m2
    c = (m1 * c1 + m2 * c2) / m

    def shift(mass: float, com: np.ndarray) -> np.ndarray:
        d = com - c  # parallel-axis theorem
        return mass * (d @ d * np.eye(3) - np.outer(d, d))

    return m, c, I1 + shift(m1, c1) + I2 + shift(m2, c2)


@dataclass(frozen=True)
class ModelChanges:
    """Every difference between two models, by joint and body name (see
    :meth:`RobotModel.changes_from`).

    Attributes:
        added_joints, removed_joints: moving joints only in the new / the previous model.
        changed_joints: joint name -> what differs, a tuple of ``'type'``, ``'axis'``,
            ``'origin'`` (the joint frame in its parent, ``T_parent_joint``), ``'parent'``,
            ``'mimic'``, ``'limits'``, ``'dynamics'`` (damping or friction).
        added_bodies, removed_bodies: bodies only in the new / the previous model.
        changed_bodies: body name -> what differs: ``'joint'`` (it rides on another joint),
            ``'link'``, ``'mass'``, ``'com'``, ``'inertia'``.
    """

    added_joints: tuple[str, ...]
    removed_joints: tuple[str, ...]
    changed_joints: dict[str, tuple[str, ...]]
    added_bodies: tuple[str, ...]
    removed_bodies: tuple[str, ...]
    changed_bodies: dict[str, tuple[str, ...]]

    def __bool__(self) -> bool:
        return bool(self.added_joints or self.removed_joints or self.changed_joints
                    or self.added_bodies or self.removed_bodies or self.changed_bodies)


@dataclass(frozen=True, eq=False)
class RobotModel:
    """Frozen, index-based kinematic tree of moving joints and bodies.

    Shapes below: n moving joints, B bodies, L URDF links.

    Attributes:
        name: robot name from the URDF.
        root_link: URDF root link (the world frame of the dynamics).
        urdf_xml: URDF text the model was built from (for ``robot_description``).
        joint_names, joint_types: (n,) in tree order (every parent before its children).
        joint_parent: (n,) int, parent moving joint, -1 when the joint hangs from the root.
        joint_axis: (n, 3) unit axis in the joint frame.
        T_parent_joint: (n, 4, 4) joint frame in the parent body frame (root frame for -1).
        joint_lower, joint_upper: (n,) position limits [rad or m] (+-inf for continuous).
        effort_limit [N*m or N], velocity_limit [rad/s or m/s], damping [N*m*s/rad],
        friction (Coulomb) [N*m]: (n,).
        mimic_source: (n,) int, joint followed by a mimic joint, -1 if not a mimic.
        mimic_multiplier, mimic_offset: (n,) q_j = multiplier * q_source + offset.
        body_names: (B,) the child link of each moving joint, then payloads.
        body_joint: (B,) int, moving joint each body rides on.
        body_link: (B,) URDF link each body is attached to (frame of its user figures).
        body_mass: (B,) [kg]; body_com: (B, 3) [m], body_inertia: (B, 3, 3) [kg*m^2] about
            the COM, both in the body's joint child frame.
        link_names: (L,) every URDF link; link_joint: (L,) int moving joint it rides on
            (-1: fixed to the root); T_joint_link: (L, 4, 4) link frame in that joint's child
            frame (root frame for -1).
        gravity: (3,) gravitational acceleration in the root frame [m/s^2], default
            (0, 0, -9.81); [PL]'s examples use 9.8 (``from_urdf(..., gravity=...)``).
        effort_calibration: (n,) identified factor on the driver's effort-to-torque
            conversion (``plag-ros identify --effort-scale``), or None: the conversion as
            :func:`plag_ros.core.dynamics.motors.driver_effort_to_torque` has it (a drive-chain
            figure, not a URDF one: set by :mod:`plag_ros.core.dynamics.model_parameters`).
    """

    name: str
    root_link: str
    urdf_xml: str
    joint_names: tuple[str, ...]
    joint_types: tuple[str, ...]
    joint_parent: np.ndarray
    joint_axis: np.ndarray
    T_parent_joint: np.ndarray
    joint_lower: np.ndarray
    joint_upper: np.ndarray
    effort_limit: np.ndarray
    velocity_limit: np.ndarray
    damping: np.ndarray
    friction: np.ndarray
    mimic_source: np.ndarray
    mimic_multiplier: np.ndarray
    mimic_offset: np.ndarray
    body_names: tuple[str, ...]
    body_joint: np.ndarray
    body_link: tuple[str, ...]
    body_mass: np.ndarray
    body_com: np.ndarray
    body_inertia: np.ndarray
    link_names: tuple[str, ...]
    link_joint: np.ndarray
    T_joint_link: np.ndarray
    gravity: tuple[float, float, float] = (0.0, 0.0, -9.81)
    effort_calibration: np.ndarray | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_urdf(cls, source: str | os.PathLike, *,
                  gravity: Sequence[float] = (0.0, 0.0, -9.81)) -> RobotModel:
        """Build the model from a URDF file path or URDF XML text.

        ``gravity`` is the (3,) gravitational acceleration in the root frame [m/s^2].

        Raises:
            ValueError: unparsable XML, floating/planar/unknown joints, a link with two
                parents or a cycle, a moving body without mass, a non-positive-definite
                inertia, non-finite figures, a mimic joint following an unknown joint, or
                a gravity that is not 3 finite numbers.
            FileNotFoundError: ``source`` looks like a path and does not exist.
        """
        from urdf_parser_py import urdf as urdf_parser

        try:
            g = np.asarray(gravity, dtype=float)
        except (TypeError, ValueError):
            g = np.full(0, np.nan)
        if g.shape != (3,) or not np.all(np.isfinite(g)):
            raise ValueError(f'gravity must be 3 finite numbers [m/s^2], got {gravity!r}')
        text = str(source)
        if isinstance(source, os.PathLike) or not text.lstrip().startswith('<'):
            path = Path(text)
            if not path.is_file():
                raise FileNotFoundError(f'URDF file not found: {path}')
            text = _decode_xml(path.read_bytes(), path)
        try:
            robot = _parse_urdf(urdf_parser, text)
        except Exception as err:  # the parser raises many types on bad XML
            raise ValueError(f'malformed URDF: {err}') from err
        return dataclasses.replace(cls._from_parsed(robot, text),
                                   gravity=(float(g[0]), float(g[1]), float(g[2])))

    @classmethod
    def _from_parsed(cls, robot, text: str) -> RobotModel:
        links = {link.name: link for link in robot.links}
        children: dict[str, list] = {name: [] for name in links}
        parent_of: dict[str, str] = {}
        for joint in robot.joints:
            for end in (joint.parent, joint.child):
                if end not in links:
                    raise ValueError(f'joint {joint.name!r}: unknown link {end!r}')
            if joint.child in parent_of:
                raise ValueError(f'link {joint.child!r} has two parent joints '
                                 f'({parent_of[joint.child]!r} and {joint.name!r})')
            parent_of[joint.child] = joint.name
            children[joint.parent].append(joint)
            if joint.type in _REJECTED_JOINT_TYPES:
                raise ValueError(f'joint {joint.name!r}: type {joint.type!r} is not supported '
                                 '(only revolute, continuous, prismatic and fixed)')
            if joint.type not in MOVING_JOINT_TYPES + ('fixed',):
                raise ValueError(f'joint {joint.name!r}: unknown type {joint.type!r}')
        roots = [name for name in links if name not in parent_of]
        if len(roots) != 1:
            raise ValueError(f'URDF must have exactly one root link, found {roots or "none"} '
                             '(a cycle leaves no root)')
        root = roots[0]

        doc_index = {joint.name: k for k, joint in enumerate(robot.joints)}
        # Walk the tree from the root, composing fixed joints into the moving frames.
        joint_rows: list[dict] = []
        link_rows: dict[str, tuple[int, np.ndarray]] = {root: (-1, np.eye(4))}
        stack = [(root, -1, np.eye(4))]
        visited = {root}
        while stack:
            link_name, frame_joint, T_frame_link = stack.pop()
            for joint in reversed(children[link_name]):
                if joint.child in visited:
                    raise ValueError(f'joint {joint.name!r} closes a cycle')
                visited.add(joint.child)
                origin = _pose(joint.origin)
                _check_finite(origin, f'joint {joint.name!r}: origin')
                T_frame_joint = T_frame_link @ origin
                if joint.type == 'fixed':
                    link_rows[joint.child] = (frame_joint, T_frame_joint)
                    stack.append((joint.child, frame_joint, T_frame_joint))
                    continue
                joint_rows.append({'joint': joint, 'parent': frame_joint,
                                   'T': T_frame_joint, 'doc': doc_index[joint.name]})
                index = len(joint_rows) - 1
                link_rows[joint.child] = (index, np.eye(4))
                stack.append((joint.child, index, np.eye(4)))
        if len(visited) != len(links):
            missing = sorted(set(links) - visited)
            raise ValueError(f'links not reachable from root {root!r}: {missing}')
        # The explicit stack pops the last child first; re-sort joints so parents precede
        # children and siblings keep document order (a stable DFS order).
        order = cls._dfs_order(joint_rows)
        remap = {old: new for new, old in enumerate(order)}
        joint_rows = [joint_rows[old] for old in order]
        for row in joint_rows:
            row['parent'] = remap.get(row['parent'], -1)
        link_rows = {name: (remap.get(j, -1), T) for name, (j, T) in link_rows.items()}

        n = len(joint_rows)
        names = tuple(row['joint'].name for row in joint_rows)
        axis = np.zeros((n, 3))
        lower = np.full(n, -np.inf)
        upper = np.full(n, np.inf)
        effort = np.full(n, np.inf)
        velocity = np.full(n, np.inf)
        damping = np.zeros(n)
        friction = np.zeros(n)
        mimic_source = np.full(n, -1, dtype=np.int64)
        mimic_mult = np.ones(n)
        mimic_off = np.zeros(n)
        for j, row in enumerate(joint_rows):
            joint = row['joint']
            a = np.asarray(joint.axis if joint.axis is not None else (1.0, 0.0, 0.0), float)
            _check_finite(a, f'joint {joint.name!r}: axis')
            if not np.linalg.norm(a) > 0.0:
                raise ValueError(f'joint {joint.name!r}: axis is zero')
            axis[j] = a / np.linalg.norm(a)
            if joint.limit is not None:
                if joint.type != 'continuous':
                    lower[j], upper[j] = joint.limit.lower, joint.limit.upper
                if joint.limit.effort is not None:
                    effort[j] = joint.limit.effort
                if joint.limit.velocity is not None:
                    velocity[j] = joint.limit.velocity
            if joint.dynamics is not None:
                damping[j] = joint.dynamics.damping or 0.0
                friction[j] = joint.dynamics.friction or 0.0
            for what, value in (('limits', (lower[j], upper[j], effort[j], velocity[j])),
                                ('dynamics', (damping[j], friction[j]))):
                if np.any(np.isnan(value)):
                    raise ValueError(f'joint {joint.name!r}: {what} contain NaN')
            if joint.mimic is not None:
                if joint.mimic.joint not in names:
                    raise ValueError(f'joint {joint.name!r} mimics unknown moving joint '
                                     f'{joint.mimic.joint!r}')
                mimic_source[j] = names.index(joint.mimic.joint)
                mimic_mult[j] = 1.0 if joint.mimic.multiplier is None else joint.mimic.multiplier
                mimic_off[j] = 0.0 if joint.mimic.offset is None else joint.mimic.offset

        # Lump every inertial into the moving body it rides on.
        body_mass = np.zeros(n)
        body_com = np.zeros((n, 3))
        body_inertia = np.zeros((n, 3, 3))
        for link_name, link in links.items():
            j, T_joint_link = link_rows[link_name]
            if j < 0 or link.inertial is None:
                continue  # fixed to the root: loads no joint
            inertial = link.inertial
            mass = float(inertial.mass or 0.0)
            T_link_com = _pose(inertial.origin)
            i = inertial.inertia
            I_com = np.array([[i.ixx, i.ixy, i.ixz], [i.ixy, i.iyy, i.iyz],
                              [i.ixz, i.iyz, i.izz]], dtype=float) if i is not None \
                else np.zeros((3, 3))
            _check_finite([mass], f'link {link_name!r}: mass')
            _check_finite(I_com, f'link {link_name!r}: inertia')
            _check_finite(T_link_com, f'link {link_name!r}: inertial origin')
            if mass == 0.0 and not I_com.any():
                continue
            _check_inertia(mass, I_com, f'link {link_name!r}')
            inequality = broken_triangle(I_com)
            if inequality is not None:      # loads (the torque is linear in it), named
                _log.warning('URDF link %r: its inertia breaks the triangle inequality %s; '
                             'no real body has it (plag-ros identify starts from the '
                             'nearest consistent one)', link_name, inequality)
            T = T_joint_link @ T_link_com
            R = T[:3, :3]
            com, inertia = T[:3, 3], R @ I_com @ R.T
            if body_mass[j] == 0.0:
                body_mass[j], body_com[j], body_inertia[j] = mass, com, inertia
            else:
                body_mass[j], body_com[j], body_inertia[j] = _combine(
                    body_mass[j], body_com[j], body_inertia[j], mass, com, inertia)
        for j, row in enumerate(joint_rows):
            if body_mass[j] == 0.0:
                raise ValueError(f'link {row["joint"].child!r} (child of moving joint '
                                 f'{names[j]!r}) has no inertial: a moving body needs mass')

        link_names = tuple(links)
        return cls(
            name=robot.name or '',
            root_link=root,
            urdf_xml=text,
            joint_names=names,
            joint_types=tuple(row['joint'].type for row in joint_rows),
            joint_parent=np.array([row['parent'] for row in joint_rows], dtype=np.int64),
            joint_axis=axis,
            T_parent_joint=np.array([row['T'] for row in joint_rows]).reshape(n, 4, 4),
            joint_lower=lower, joint_upper=upper, effort_limit=effort,
            velocity_limit=velocity, damping=damping, friction=friction,
            mimic_source=mimic_source, mimic_multiplier=mimic_mult, mimic_offset=mimic_off,
            body_names=tuple(row['joint'].child for row in joint_rows),
            body_joint=np.arange(n, dtype=np.int64),
            body_link=tuple(row['joint'].child for row in joint_rows),
            body_mass=body_mass, body_com=body_com, body_inertia=body_inertia,
            link_names=link_names,
            link_joint=np.array([link_rows[name][0] for name in link_names], dtype=np.int64),
            T_joint_link=np.array([link_rows[name][1] for name in link_names]),
        )

    @staticmethod
    def _dfs_order(rows: list[dict]) -> list[int]:
        """Indices of ``rows`` in depth-first, document order (parents first)."""
        kids: dict[int, list[int]] = {}
        for index, row in enumerate(rows):
            kids.setdefault(row['parent'], []).append(index)
        # Sibling order: the URDF document order of the joints.
        for siblings in kids.values():
            siblings.sort(key=lambda k: rows[k]['doc'])
        order: list[int] = []

        def visit(parent: int) -> None:
            for child in kids.get(parent, []):
                order.append(child)
                visit(child)

        visit(-1)
        return order

    # ------------------------------------------------------------------ sizes and lookups
    @property
    def n_joints(self) -> int:
        """Number of generalized coordinates n."""
        return len(self.joint_names)

    @property
    def n_bodies(self) -> int:
        """Number of bodies B (columns of the partial torque table)."""
        return len(self.body_names)

    @property
    def actuated_names(self) -> list[str]:
        """Names of the actuated joints (every joint but the mimic ones), in model order:
        the order of the motor-side arrays (commands, measured effort, identified
        friction)."""
        return [self.joint_names[j] for j in np.flatnonzero(self.actuated)]

    def root_path(self, joint: int) -> list[int]:
        """Joints from the root down to ``joint`` (inclusive), root first: the joints a
        body riding on ``joint`` loads, and the sources whose motion reaches it."""
        path = []
        while joint >= 0:
            path.append(int(joint))
            joint = int(self.joint_parent[joint])
        return path[::-1]

    def parent_name(self, joint: int) -> str | None:
        """Name of the parent moving joint of ``joint`` (None at the root)."""
        parent = int(self.joint_parent[joint])
        return None if parent < 0 else self.joint_names[parent]

    def digest(self) -> str:
        """16 hex digits of every figure of the model, exact to the last bit (joints, bodies,
        link frames, gravity, effort calibration; not the robot's name nor the URDF text;
        -0.0 as 0.0): the same figures written in another text (a comment, a xacro's
        output) give the same digest. Two nodes compare digests to know they compute with
        one model; it covers more than :meth:`changes_from` (every link's frame, gravity,
        the effort calibration)."""
        h = hashlib.sha256()
        for field in dataclasses.fields(self):
            if field.name in ('name', 'urdf_xml'):
                continue
            value = getattr(self, field.name)
            if isinstance(value, str) or (isinstance(value, tuple) and value
                                          and isinstance(value[0], str)):
                h.update(f'{field.name}{value!r}'.encode())
                continue
            array = np.ascontiguousarray(np.asarray(
                np.nan if value is None else value, dtype=float) + 0.0)   # -0.0 -> 0.0
            h.update(f'{field.name}{array.shape}'.encode() + array.tobytes())
        return h.hexdigest()[:16]

    def changes_from(self, previous: RobotModel) -> ModelChanges:
        """What differs in this model from ``previous``, joint by joint and body by body.

        Joints and bodies are matched by name; figures are compared exactly (a change in
        the last bit counts), so a model rebuilt from the same URDF shows no change.
        [PL]'s reconstruction (a joint turned into a slider, a link length changed)
        shows as changed joints; its extension (a link appended) as added joints and bodies.
        """
        joints = {name: k for k, name in enumerate(self.joint_names)}
        old_joints = {name: k for k, name in enumerate(previous.joint_names)}
        changed_joints: dict[str, tuple[str, ...]] = {}
        for name, k in joints.items():
            if name not in old_joints:
                continue
            o = old_joints[name]
            what = []
            if self.joint_types[k] != previous.joint_types[o]:
                what.append('type')
            if not np.array_equal(self.joint_axis[k], previous.joint_axis[o]):
                what.append('axis')
            if not np.array_equal(self.T_parent_joint[k], previous.T_parent_joint[o]):
                what.append('origin')
            if self.parent_name(k) != previous.parent_name(o):
                what.append('parent')
            if not self._same_mimic(k, previous, o):
                what.append('mimic')
            if not all(np.array_equal(getattr(self, f)[k], getattr(previous, f)[o]) for f in (
                    'joint_lower', 'joint_upper', 'effort_limit', 'velocity_limit')):
                what.append('limits')
            if (self.damping[k] != previous.damping[o]
                    or self.friction[k] != previous.friction[o]):
                what.append('dynamics')
            if what:
                changed_joints[name] = tuple(what)
        bodies = {name: i for i, name in enumerate(self.body_names)}
        old_bodies = {name: i for i, name in enumerate(previous.body_names)}
        changed_bodies: dict[str, tuple[str, ...]] = {}
        for name, i in bodies.items():
            if name not in old_bodies:
                continue
            o = old_bodies[name]
            what = []
            if (self.joint_names[self.body_joint[i]]
                    != previous.joint_names[previous.body_joint[o]]):
                what.append('joint')
            if self.body_link[i] != previous.body_link[o]:
                what.append('link')
            if self.body_mass[i] != previous.body_mass[o]:
                what.append('mass')
            if not np.array_equal(self.body_com[i], previous.body_com[o]):
                what.append('com')
            if not np.array_equal(self.body_inertia[i], previous.body_inertia[o]):
                what.append('inertia')
            if what:
                changed_bodies[name] = tuple(what)
        return ModelChanges(
            added_joints=tuple(n for n in self.joint_names if n not in old_joints),
            removed_joints=tuple(n for n in previous.joint_names if n not in joints),
            changed_joints=changed_joints,
            added_bodies=tuple(n for n in self.body_names if n not in old_bodies),
            removed_bodies=tuple(n for n in previous.body_names if n not in bodies),
            changed_bodies=changed_bodies,
        )

    def _same_mimic(self, k: int, previous: RobotModel, o: int) -> bool:
        source, old_source = int(self.mimic_source[k]), int(previous.mimic_source[o])
        if (source < 0) != (old_source < 0):
            return False
        if source < 0:
            return True
        return (self.joint_names[source] == previous.joint_names[old_source]
                and self.mimic_multiplier[k] == previous.mimic_multiplier[o]
                and self.mimic_offset[k] == previous.mimic_offset[o])

    @property
    def actuated(self) -> np.ndarray:
        """(n,) bool, True for joints that are not mimic joints."""
        return self.mimic_source < 0

    def joint_index(self, names: Iterable[str]) -> np.ndarray:
        """Indices of ``names`` in :attr:`joint_names`.

        Raises:
            ValueError: naming every joint the model does not have.
        """
        names = list(names)
        lookup = {name: k for k, name in enumerate(self.joint_names)}
        unknown = [name for name in names if name not in lookup]
        if unknown:
            raise ValueError(f'unknown joint names {unknown}; the model has '
                             f'{list(self.joint_names)}')
        return np.array([lookup[name] for name in names], dtype=np.int64)

    def link_index(self, name: str) -> int:
        """Index of URDF link ``name`` in :attr:`link_names` (ValueError if unknown)."""
        try:
            return self.link_names.index(name)
        except ValueError:
            raise ValueError(f'unknown link {name!r}') from None

    def fill_mimic(self, x: np.ndarray, *, derivative: bool = False) -> np.ndarray:
        """Return ``x`` (..., n) with mimic joints set from the joints they follow.

        Args:
            x: (..., n) positions, or velocities/accelerations when ``derivative``.
            derivative: drop the mimic offset (it vanishes under d/dt).
        """
        x = np.array(x, dtype=float, copy=True)
        mimic = np.flatnonzero(self.mimic_source >= 0)
        if mimic.size:
            src = self.mimic_source[mimic]
            x[..., mimic] = self.mimic_multiplier[mimic] * x[..., src]
            if not derivative:
                x[..., mimic] += self.mimic_offset[mimic]
        return x

    # ------------------------------------------------------------------ payloads
    def with_payload(self, name: str, *, link: str, mass: float, com: Sequence[float],
                     inertia: np.ndarray | Sequence[Sequence[float]]) -> RobotModel:
        """A new model with one more body rigidly attached to ``link``.

        Args:
            name: body name (must be new).
            link: URDF link the payload is fixed to; must ride on a moving joint.
            mass: [kg] > 0.
            com: (3,) centre of mass in the ``link`` frame [m].
            inertia: (3, 3) about the COM, axes of the ``link`` frame [kg*m^2].
        """
        if name in self.body_names:
            raise ValueError(f'body {name!r} already exists; use with_body to replace it')
        joint, com_j, inertia_j = self._body_figures(name, link, mass, com, inertia)
        return dataclasses.replace(
            self,
            body_names=self.body_names + (name,),
            body_joint=np.append(self.body_joint, joint),
            body_link=self.body_link + (link,),
            body_mass=np.append(self.body_mass, float(mass)),
            body_com=np.vstack([self.body_com, com_j]),
            body_inertia=np.concatenate([self.body_inertia, inertia_j[None]]),
        )

    def with_body(self, name: str, *, mass: float, com: Sequence[float],
                  inertia: np.ndarray | Sequence[Sequence[float]]) -> RobotModel:
        """A new model with body ``name`` replaced (figures in its attachment link frame)."""
        if name not in self.body_names:
            raise ValueError(f'unknown body {name!r}; bodies are {list(self.body_names)}')
        i = self.body_names.index(name)
        joint, com_j, inertia_j = self._body_figures(name, self.body_link[i], mass, com,
                                                     inertia)
        body_mass, body_com, body_inertia = (self.body_mass.copy(), self.body_com.copy(),
                                             self.body_inertia.copy())
        body_mass[i], body_com[i], body_inertia[i] = mass, com_j, inertia_j
        return dataclasses.replace(self, body_mass=body_mass, body_com=body_com,
                                   body_inertia=body_inertia)

    def _body_figures(self, name, link, mass, com, inertia):
        """Validate a body's figures and express them in its joint's child frame."""
        k = self.link_index(link)
        joint = int(self.link_joint[k])
        if joint < 0:
            raise ValueError(f'body {name!r}: link {link!r} is fixed to the root, so a body '
                             'there loads no joint')
        com = np.asarray(com, dtype=float).reshape(3)
        inertia = np.asarray(inertia, dtype=float).reshape(3, 3)
        _check_finite(com, f'body {name!r}: com')
        _check_finite(inertia, f'body {name!r}: inertia')
        _check_inertia(float(mass), inertia, f'body {name!r}')
        T = self.T_joint_link[k]
        R = T[:3, :3]
        return joint, T[:3, :3] @ com + T[:3, 3], R @ inertia @ R.T


def actuation_matrix(model: RobotModel) -> tuple[np.ndarray, np.ndarray]:
    """Map actuated coordinates to full ones through the mimic joints.

    Returns:
        G (n, n_act) and offset (n,) with ``q = G q_act + offset``; torques map back as
        ``tau_act = G^T tau`` (virtual work).
    """
    act = np.flatnonzero(model.actuated)
    column = {int(j): a for a, j in enumerate(act)}
    G = np.zeros((model.n_joints, act.size))
    offset = np.zeros(model.n_joints)
    for j in range(model.n_joints):
        src = int(model.mimic_source[j])
        if src < 0:
            G[j, column[j]] = 1.0
        else:
            while model.mimic_source[src] >= 0:  # mimic of a mimic: follow to the actuator
                src = int(model.mimic_source[src])
            G[j, column[src]] = model.mimic_multiplier[j]
            offset[j] = model.mimic_offset[j]
    return G, offset
