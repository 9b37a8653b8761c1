"""Arrays <-> ROS 2 messages: the one place the package's numbers meet message types.

The live dynamics node publishes with these builders and the bag tools write the very same
messages into bags, so a topic recorded live and one produced offline read back alike.
Every builder is a pure function (arrays + names + stamp -> message) or a small object
that precomputes the constant parts of a message once (layouts, names, colours) so the
per-sample work is a byte copy: float64 arrays go into ``float64[]`` fields as
``array.array('d')`` built from the array's bytes (rclpy stores those without a per-element
check; a Python list costs ~25x more).

Conventions:

* Stamps are integer nanoseconds ``t_ns`` on the way in and out.
* Joint arrays are in model order (``RobotModel.joint_names``); :class:`JointStateReader`
  maps a ``sensor_msgs/JointState`` in any name order onto it, filling mimic joints from
  the joints they follow.
* ``std_msgs/Float64MultiArray`` layouts follow the std_msgs documentation: dims outermost
  first, ``size`` the length of the dimension, ``stride`` the number of elements spanned
  by one step of the *enclosing* dimension, i.e. ``stride[0]`` is the total size and
  ``stride[i] = prod(shape[i:])``; labels name the index (``joint``, ``body``,
  ``source``). The data is the C-order (row-major) flattening.

Size (over ~600 lines): by design the one place arrays meet ROS messages (readers,
builders, layouts, markers, the partial-table image), so that no other module imports a
message type for numbers.
"""
from __future__ import annotations

import array
import importlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from itertools import repeat

import numpy as np
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import (
    ColorRGBA,
    Float64MultiArray,
    Header,
    MultiArrayDimension,
    MultiArrayLayout,
    String,
)
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint
from visualization_msgs.msg import Marker, MarkerArray

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate
from plag_ros.ros import topics

__all__ = [
    'ARRAY_LABELS',
    'COMPONENTS',
    'DecompositionMessages',
    'DiagnosticLevel',
    'JointStateError',
    'JointStateReader',
    'MarkerBuilder',
    'PartialImageBuilder',
    'array_layout',
    'body_joint_states',
    'diagnostic_array',
    'diagnostic_status',
    'node_state',
    'state_values',
    'duration',
    'float64_array',
    'float64_multi_array',
    'image_to_numpy',
    'joint_component',
    'joint_state',
    'joint_state_arrays',
    'joint_trajectory',
    'marker_components',
    'message_class',
    'multi_array_to_numpy',
    'names_message',
    'ns_to_stamp',
    'parse_names',
    'stamp_to_ns',
]

COMPONENTS = ('torque', 'acceleration', 'velocity', 'gravity', 'friction')
"""Per-joint torque components shown as markers: the rigid-body torque, its acceleration,
velocity-product and gravity parts (summed over bodies and sources) and joint friction."""

ARRAY_LABELS: dict[str, tuple[str, ...]] = {
    'partial': ('joint', 'body'),
    'acceleration': ('joint', 'body', 'source'),
    'velocity': ('joint', 'body', 'source'),
    'gravity': ('joint', 'body'),
    'friction': ('joint',),
    'torque': ('joint',),
}
"""Index labels of each decomposition array published as Float64MultiArray."""

# Marker colours per component (RGBA), chosen to stay apart in rviz's default dark grey.
_COMPONENT_COLOURS = {
    'torque': (0.95, 0.95, 0.95, 1.0),
    'acceleration': (0.20, 0.60, 1.00, 0.9),
    'velocity': (1.00, 0.55, 0.10, 0.9),
    'gravity': (0.30, 0.85, 0.30, 0.9),
    'friction': (0.85, 0.30, 0.85, 0.9),
}


class DiagnosticLevel:
    """``diagnostic_msgs/DiagnosticStatus`` levels as the bytes rclpy expects."""

    OK = DiagnosticStatus.OK
    WARN = DiagnosticStatus.WARN
    ERROR = DiagnosticStatus.ERROR
    STALE = DiagnosticStatus.STALE


# --- stamps and arrays --------------------------------------------------------------------


def message_class(msgtype: str):
    """``pkg/msg/Type`` -> the rclpy message class (ImportError if not installed)."""
    package, kind, name = msgtype.split('/')
    return getattr(importlib.import_module(f'{package}.{kind}'), name)


def stamp_to_ns(stamp: Time) -> int:
    """``builtin_interfaces/Time`` -> integer nanoseconds."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def ns_to_stamp(t_ns: int) -> Time:
    """Integer nanoseconds -> ``builtin_interfaces/Time`` (floor division for sec)."""
    sec, nanosec = divmod(int(t_ns), 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


def duration(seconds: float) -> Duration:
    """Seconds >= 0 -> ``builtin_interfaces/Duration`` (nanoseconds rounded)."""
    sec, nanosec = divmod(int(round(seconds * 1e9)), 1_000_000_000)
    return Duration(sec=sec, nanosec=nanosec)


def joint_trajectory(joint_names: Sequence[str], times: Iterable[float],
                     positions: Iterable[np.ndarray],
                     velocities: Iterable[np.ndarray] | None = None) -> JointTrajectory:
    """A ``trajectory_msgs/JointTrajectory``, header stamp 0 (the controller starts it on
    arrival).

    Args:
        joint_names: (J,) names, the order of every point's values.
        times: (P,) time_from_start of the points [s].
        positions: (P, J) [rad]; velocities: (P, J) [rad/s] or None (positions only).
    """
    rows = zip(times, positions, velocities if velocities is not None else repeat(None))
    return JointTrajectory(joint_names=list(joint_names), points=[
        JointTrajectoryPoint(positions=np.asarray(p, dtype=np.float64).tolist(),
                             velocities=[] if v is None else
                             np.asarray(v, dtype=np.float64).tolist(),
                             time_from_start=duration(float(t)))
        for t, p, v in rows])


def float64_array(values: np.ndarray | Sequence[float]) -> array.array:
    """C-order float64 copy of ``values`` as ``array.array('d')`` (fast message field)."""
    return array.array('d', np.ascontiguousarray(values, dtype=np.float64).tobytes())


def _header(t_ns: int, frame_id: str) -> Header:
    return Header(stamp=ns_to_stamp(t_ns), frame_id=frame_id)


# --- JointState ---------------------------------------------------------------------------


class JointStateError(ValueError):
    """A ``JointState`` message that cannot be mapped onto the model.

    Attributes:
        reason: one of ``'unknown_name'``, ``'missing_name'``, ``'duplicate_name'``,
            ``'length_mismatch'``, ``'nonfinite'`` (for counting rejections).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JointStateReader:
    """Map ``sensor_msgs/JointState`` messages (any name order) onto a model's joints.

    The joint name list of the first message is resolved once and cached; a driver that
    always publishes the same names (the usual case) costs one tuple comparison per
    message. Mimic joints may be absent from the message: they are always filled from
    the joints they follow (``RobotModel.fill_mimic``), so a stray mimic value is ignored.

    Args:
        model: the robot; arrays come out in ``model.joint_names`` order, (n,).
    """

    def __init__(self, model: RobotModel) -> None:
        self.model = model
        self._lookup = {name: k for k, name in enumerate(model.joint_names)}
        self._required = set(model.actuated_names)
        self._names: tuple[str, ...] | None = None
        self._src: np.ndarray = np.zeros(0, dtype=np.int64)   # message index per actuated
        self._dst: np.ndarray = np.zeros(0, dtype=np.int64)   # model index
        mimic = np.flatnonzero(model.mimic_source >= 0)
        self._mimic = mimic
        self._mimic_src = model.mimic_source[mimic]
        self._mimic_mult = model.mimic_multiplier[mimic]
        self._mimic_off = model.mimic_offset[mimic]

    def _resolve(self, names: tuple[str, ...]) -> None:
        unknown = [name for name in names if name not in self._lookup]
        if unknown:
            raise JointStateError('unknown_name', f'unknown joint names {unknown}; the model '
                                  f'has {list(self.model.joint_names)}')
        if len(set(names)) != len(names):
            dup = sorted({name for name in names if names.count(name) > 1})
            raise JointStateError('duplicate_name', f'joint names repeated: {dup}')
        missing = [name for name in self.model.joint_names
                   if name in self._required and name not in names]
        if missing:
            raise JointStateError('missing_name', f'joint_states lacks joints {missing}')
        pairs = [(i, self._lookup[name]) for i, name in enumerate(names)
                 if name in self._required]
        self._src = np.array([i for i, _ in pairs], dtype=np.int64)
        self._dst = np.array([k for _, k in pairs], dtype=np.int64)
        self._names = names

    def read(self, msg: JointState, *, velocity: bool = False,
             effort: bool = False) -> tuple[int, np.ndarray, np.ndarray | None,
                                            np.ndarray | None]:
        """Arrays of one message in model order.

        Args:
            msg: the joint states.
            velocity: also return the velocities (required in the message then).
            effort: also return the efforts (required in the message then).

        Returns:
            ``(t_ns, q, qd, effort)``: stamp [ns] and (n,) float64 arrays in model order
            with mimic joints filled; ``qd``/``effort`` are None unless requested.

        Raises:
            JointStateError: unknown, missing or repeated names, a position/velocity/effort
                array whose length differs from the names, or a non-finite value of a
                used joint; ``reason`` says which.
        """
        names = msg.name
        key = tuple(names)
        if key != self._names:
            self._resolve(key)
        n_names = len(key)
        out = [stamp_to_ns(msg.header.stamp),
               self._take('position', msg.position, n_names, derivative=False)]
        out.append(self._take('velocity', msg.velocity, n_names, derivative=True)
                   if velocity else None)
        out.append(self._take('effort', msg.effort, n_names, derivative=True)
                   if effort else None)
        return tuple(out)  # type: ignore[return-value]

    def optional_effort(self, msg: JointState) -> np.ndarray | None:
        """(n,) efforts of a message :meth:`read` has just accepted, in model order, or None
        when the message carries none (or not one per name). Never raises: a non-finite
        effort comes out as NaN for that joint, mimic joints are NaN (they have no drive of
        their own), and the caller decides what an effort it cannot use means."""
        if self._names is None or len(msg.effort) != len(self._names):
            return None
        raw = np.asarray(msg.effort, dtype=np.float64)
        x = np.full(self.model.n_joints, np.nan)
        x[self._dst] = raw[self._src]
        return x

    def _take(self, field: str, values, n_names: int, *, derivative: bool) -> np.ndarray:
        if len(values) != n_names:
            raise JointStateError('length_mismatch', f'joint_states has {n_names} names but '
                                  f'{len(values)} {field} values')
        raw = np.frombuffer(values, dtype=np.float64) if isinstance(values, array.array) \
            else np.asarray(values, dtype=np.float64)
        x = np.zeros(self.model.n_joints)
        x[self._dst] = raw[self._src]
        # x @ x is one fast test; it also overflows for finite values above ~1e154, which
        # are left to the plausibility limits
        if not math.isfinite(x @ x) and not np.isfinite(x).all():
            bad = [self.model.joint_names[k] for k in np.flatnonzero(~np.isfinite(x))]
            raise JointStateError('nonfinite', f'joint_states {field} is not finite for '
                                  f'joints {bad}')
        if self._mimic.size:
            x[self._mimic] = self._mimic_mult * x[self._mimic_src]
            if not derivative:
                x[self._mimic] += self._mimic_off
        return x


def joint_state(names: Sequence[str], q: np.ndarray | None = None,
                qd: np.ndarray | None = None, effort: np.ndarray | None = None, *,
                t_ns: int, frame_id: str = '') -> JointState:
    """Build a ``sensor_msgs/JointState``.

    Args:
        names: (n,) joint names, the order of the arrays.
        q: (n,) positions [rad or m], or None for an empty field.
        qd: (n,) velocities [rad/s or m/s], or None.
        effort: (n,) efforts [N*m or N], or None.
        t_ns: header stamp [ns].
        frame_id: header frame.

    Raises:
        ValueError: an array whose length differs from ``names``.
    """
    msg = JointState(header=_header(t_ns, frame_id), name=list(names))
    n = len(msg.name)
    for field, values in (('position', q), ('velocity', qd), ('effort', effort)):
        if values is None:
            continue
        data = float64_array(values)
        if len(data) != n:
            raise ValueError(f'joint_state: {field} has {len(data)} values for {n} names')
        setattr(msg, field, data)
    return msg


def joint_state_arrays(msg: JointState) -> tuple[int, list[str], np.ndarray, np.ndarray,
                                                   np.ndarray]:
    """Raw content of a ``JointState``: ``(t_ns, names, q, qd, effort)`` in message order.

    Empty fields come back as empty arrays; use :class:`JointStateReader` to map onto a
    model.
    """
    return (stamp_to_ns(msg.header.stamp), list(msg.name),
            np.array(msg.position, dtype=np.float64), np.array(msg.velocity, dtype=np.float64),
            np.array(msg.effort, dtype=np.float64))


def body_joint_states(joint_names: Sequence[str], partial: np.ndarray, *, t_ns: int,
                      frame_id: str = '') -> list[JointState]:
    """One ``JointState`` per body: the torque at every joint caused by that body.

    Args:
        joint_names: (n,) joint names.
        partial: (n, B) partial torque table ``partial[k, i]`` [N*m or N].
        t_ns: header stamp [ns].
        frame_id: header frame.

    Returns:
        B messages; message i carries ``partial[:, i]`` in ``effort``.
    """
    columns = np.ascontiguousarray(np.asarray(partial, dtype=np.float64).T)
    names = list(joint_names)
    header = _header(t_ns, frame_id)
    out = []
    for column in columns:
        msg = JointState(header=header, name=names)
        msg.effort = array.array('d', column.tobytes())
        out.append(msg)
    return out


class DecompositionMessages:
    """The dynamics node's per-sample outputs of one model as serialized CDR, from templates.

    Names, layouts and frames are encoded once (:class:`plag_ros.io.cdr.CdrTemplate` of the
    messages the pure builders :func:`joint_state`, :func:`float64_multi_array` and
    :func:`body_joint_states` make); :meth:`fill` writes only the stamp and the float64
    values, and the node publishes the bytes as they are (filling and converting rclpy
    messages instead made the node's back-to-back callback 0.20 ms rather than 0.12 ms).
    The offline analysis fills the same templates in bulk, so bags and live topics agree
    byte for byte.

    Args:
        model: the robot (n joints, B bodies).
        frame_id: header frame of the stamped messages.
        arrays: decomposition arrays to carry as Float64MultiArray (keys of
            :data:`ARRAY_LABELS`).
        components: per-joint components to carry as JointState (names of
            :data:`plag_ros.ros.topics.COMPONENT_TOPICS`).

    Attributes (after :meth:`fill`):
        joint_state: CDR of the filtered q, qd and the torque (effort), model joint order.
        arrays: name -> CDR of the Float64MultiArray with its labelled layout.
        bodies: (B,) CDR of the JointState carrying ``partial[:, i]`` in effort.
        components: name -> CDR of the JointState carrying that component's (n,) per-joint
            torque (:func:`marker_components`) in effort, stamped like the joint state.
        templates: 'joint_state', each array name and 'effort' (the JointState of every
            ``~/body/<body>`` and ``~/component/<name>``) -> template.
    """

    def __init__(self, model: RobotModel, *, frame_id: str,
                 arrays: Sequence[str] = topics.ARRAY_TOPICS,
                 components: Sequence[str] = topics.COMPONENT_TOPICS) -> None:
        n, B = model.n_joints, model.n_bodies
        shapes = {'partial': (n, B), 'acceleration': (n, B, n), 'velocity': (n, B, n),
                  'gravity': (n, B), 'friction': (n,), 'torque': (n,)}
        names = list(model.joint_names)
        zeros = np.zeros(n)
        self.templates: dict[str, CdrTemplate] = {'joint_state': CdrTemplate(joint_state(
            names, zeros, zeros, zeros, t_ns=TEMPLATE_NS, frame_id=frame_id))}
        for name in arrays:
            layout = array_layout(shapes[name], ARRAY_LABELS[name])
            self.templates[name] = CdrTemplate(float64_multi_array(np.zeros(shapes[name]),
                                                                   layout=layout))
        # every body's and component's JointState has the same names and frame, and only
        # effort: one template serves all
        self.templates['effort'] = CdrTemplate(body_joint_states(
            names, np.zeros((n, 1)), t_ns=TEMPLATE_NS, frame_id=frame_id)[0])
        unknown = set(components) - set(topics.COMPONENT_TOPICS)
        if unknown:
            raise ValueError(f'unknown components {sorted(unknown)}; known: '
                             f'{topics.COMPONENT_TOPICS}')
        self._array_names = tuple(arrays)
        self._component_names = tuple(components)
        self._state_slots = self.templates['joint_state'].slots(
            ['position', 'velocity', 'effort'])
        self._data_slots = {name: self.templates[name].slots(['data']) for name in arrays}
        self._effort_slots = self.templates['effort'].slots(['effort'])
        self._n_bodies = B
        self.joint_state = b''
        self.arrays: dict[str, bytes] = {}
        self.bodies: list[bytes] = []
        self.components: dict[str, bytes] = {}

    def fill(self, t_ns: int, q: np.ndarray, qd: np.ndarray,
             decomposition: Mapping[str, np.ndarray], *, bodies: bool = True) -> None:
        """Serialize one sample into :attr:`joint_state`, :attr:`arrays` (and :attr:`bodies`).

        Args:
            t_ns: input stamp [ns].
            q: (n,) filtered positions; qd: (n,) filtered velocities.
            decomposition: ``Decomposition.numpy()`` of the sample (torque (n,),
                partial (n, B), ...).
            bodies: also refill :attr:`bodies`.
        """
        self.fill_state(t_ns, q, qd, decomposition['torque'])
        self.fill_arrays(decomposition, bodies=bodies, t_ns=t_ns)

    def fill_state(self, t_ns: int, q: np.ndarray, qd: np.ndarray, torque: np.ndarray) -> None:
        """Serialize :attr:`joint_state` alone: (n,) q, qd and torque, stamp ``t_ns``.

        The node publishes it before the arrays are filled: it is the output that carries
        the stamp, the one a controller or a latency measurement waits for.
        """
        self.joint_state = self.templates['joint_state'].fill_one(
            t_ns, self._state_slots, np.concatenate([q, qd, torque]))

    def fill_arrays(self, decomposition: Mapping[str, np.ndarray], *, bodies: bool,
                    t_ns: int) -> None:
        """Serialize :attr:`arrays`, :attr:`components` (and :attr:`bodies`), stamped
        ``t_ns``, of one sample."""
        self.arrays = {name: self.templates[name].fill_one(0, self._data_slots[name],
                                                           decomposition[name])
                       for name in self._array_names}
        effort = self.templates['effort']
        self.components = {
            name: effort.fill_one(t_ns, self._effort_slots,
                                  joint_component(name, decomposition[name]))
            for name in self._component_names}
        if bodies:
            columns = decomposition['partial'].T
            self.bodies = [effort.fill_one(t_ns, self._effort_slots, columns[i])
                           for i in range(self._n_bodies)]


# --- Float64MultiArray --------------------------------------------------------------------


def array_layout(shape: Sequence[int], labels: Sequence[str]) -> MultiArrayLayout:
    """Labelled row-major layout: ``size`` per dim, ``stride[i] = prod(shape[i:])``.

    Raises:
        ValueError: ``labels`` and ``shape`` differ in length, or a size is negative.
    """
    shape = [int(s) for s in shape]
    if len(labels) != len(shape):
        raise ValueError(f'array_layout: {len(labels)} labels for a {len(shape)}-d shape')
    if any(s < 0 for s in shape):
        raise ValueError(f'array_layout: negative size in {shape}')
    dims = []
    for i, label in enumerate(labels):
        dims.append(MultiArrayDimension(label=str(label), size=shape[i],
                                        stride=int(math.prod(shape[i:]))))
    return MultiArrayLayout(dim=dims, data_offset=0)


def float64_multi_array(values: np.ndarray, labels: Sequence[str] | None = None, *,
                        layout: MultiArrayLayout | None = None) -> Float64MultiArray:
    """``std_msgs/Float64MultiArray`` of ``values`` (C order) with a labelled layout.

    Args:
        values: (d0, d1, ...) array.
        labels: one label per dim (ignored when ``layout`` is given).
        layout: a precomputed layout for ``values.shape`` (see :func:`array_layout`);
            rclpy keeps a reference, so one layout object can serve every message.
    """
    values = np.asarray(values, dtype=np.float64)
    if layout is None:
        if labels is None:
            raise ValueError('float64_multi_array needs labels or a layout')
        layout = array_layout(values.shape, labels)
    msg = Float64MultiArray(layout=layout)
    msg.data = array.array('d', np.ascontiguousarray(values).tobytes())
    return msg


def multi_array_to_numpy(msg: Float64MultiArray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Inverse of :func:`float64_multi_array`: ``(values shaped by the layout, labels)``.

    Raises:
        ValueError: the layout is inconsistent (strides not row-major, or a total size that
            does not match the data).
    """
    dims = list(msg.layout.dim)
    shape = tuple(int(d.size) for d in dims)
    for i, d in enumerate(dims):
        if d.stride != math.prod(shape[i:]):
            raise ValueError(f'layout dim {i} ({d.label!r}): stride {d.stride} is not the '
                             f'row-major {math.prod(shape[i:])}')
    data = np.array(msg.data, dtype=np.float64)[msg.layout.data_offset:]
    if data.size != math.prod(shape):
        raise ValueError(f'layout {shape} needs {math.prod(shape)} values, data has '
                         f'{data.size}')
    return data.reshape(shape), tuple(d.label for d in dims)


# --- names --------------------------------------------------------------------------------


def names_message(model: RobotModel, *, components: Sequence[str] = COMPONENTS) -> String:
    """``std_msgs/String`` with the JSON index of every published array.

    JSON keys: ``joints`` (n, index k), ``bodies`` (B, index i), ``sources`` (n, index s:
    the joint whose motion propagates), ``components`` (marker namespaces) and ``arrays``
    (labels of each Float64MultiArray topic). Publish it latched (transient local).
    """
    payload = {
        'joints': list(model.joint_names),
        'bodies': list(model.body_names),
        'sources': list(model.joint_names),
        'components': list(components),
        'arrays': {name: list(labels) for name, labels in ARRAY_LABELS.items()},
        'root_link': model.root_link,
    }
    return String(data=json.dumps(payload))


def parse_names(msg: String) -> dict:
    """Inverse of :func:`names_message`: the decoded JSON dict."""
    return json.loads(msg.data)


# --- markers ------------------------------------------------------------------------------


_SUMMED_AXES = {'torque': (), 'acceleration': (-1, -2), 'velocity': (-1, -2),
                'gravity': (-1,), 'friction': ()}
"""Axes of each decomposition array summed into its per-joint component (body, source)."""


def joint_component(name: str, values: np.ndarray) -> np.ndarray:
    """The (..., n) per-joint value of component ``name`` of :data:`COMPONENTS` from its
    decomposition array ``values`` (e.g. acceleration (..., n, B, n) summed over bodies and
    sources), any leading batch dims."""
    axes = _SUMMED_AXES[name]
    return values.sum(axis=axes) if axes else values


def marker_components(decomposition: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The per-joint values of :data:`COMPONENTS`, (..., n) each, from decomposition arrays
    with any leading batch dims (``Decomposition.numpy()`` of one sample or of many)."""
    return {name: joint_component(name, decomposition[name]) for name in COMPONENTS}


class MarkerBuilder:
    """Arrows along each joint axis at the joint origin, one namespace per component.

    Marker ``(ns=component, id=k)`` is an ARROW from the origin of joint k's child frame
    along ``value * scale`` times the joint axis (world frame): its direction shows the
    sign of the torque about the axis (right-hand rule), its length the magnitude.

    Args:
        model: the robot.
        frame_id: frame of the poses (the model root link).
        scale: arrow length per unit torque [m/(N*m)].
        shaft_diameter: arrow shaft diameter [m].
        components: namespaces to build (subset of :data:`COMPONENTS`).
    """

    def __init__(self, model: RobotModel, *, frame_id: str, scale: float = 0.02,
                 shaft_diameter: float = 0.008,
                 components: Sequence[str] = COMPONENTS) -> None:
        unknown = [c for c in components if c not in _COMPONENT_COLOURS]
        if unknown:
            raise ValueError(f'unknown marker components {unknown}; known: {COMPONENTS}')
        self.model = model
        self.frame_id = frame_id
        self.scale = float(scale)
        self.components = tuple(components)
        self._shaft = float(shaft_diameter)
        self._links = np.array([model.link_index(model.body_link[k])
                                for k in range(model.n_joints)], dtype=np.int64)
        # body_link[k] is joint k's child link: its T_joint_link is the identity.
        self._axis = model.joint_axis.copy()

        # Marker objects are built once and updated in place: constructing ~45 markers per
        # frame costs ~10 ms in rclpy, updating their points ~0.3 ms.
        self._array: MarkerArray | None = None
        self._built_for: tuple[str, ...] = ()
        self._templates: dict[tuple[str, ...], CdrTemplate] = {}
        self._slots: dict[tuple[str, ...], np.ndarray] = {}

    def _prepare(self, components: tuple[str, ...]) -> MarkerArray:
        markers = []
        for component in components:
            r, g, b, a = _COMPONENT_COLOURS[component]
            colour = ColorRGBA(r=r, g=g, b=b, a=a)
            for k in range(self.model.n_joints):
                marker = Marker(ns=component, id=k, type=Marker.ARROW, action=Marker.ADD,
                                color=colour, points=[Point(), Point()])
                marker.header.frame_id = self.frame_id
                marker.pose.orientation.w = 1.0
                marker.scale.x = self._shaft
                marker.scale.y = 2.0 * self._shaft
                marker.scale.z = 2.0 * self._shaft
                markers.append(marker)
        self._array = MarkerArray(markers=markers)
        self._built_for = components
        return self._array

    def build(self, T_world_link: np.ndarray, values: Mapping[str, np.ndarray], *,
              t_ns: int) -> MarkerArray:
        """Markers for one sample.

        The returned message is reused (updated in place) by the next call: publish it
        before building the next one, or copy it.

        Args:
            T_world_link: (L, 4, 4) pose of every URDF link (``engine.link_poses(q)``).
            values: component -> (n,) torque [N*m or N]; components missing here are
                skipped.
            t_ns: header stamp [ns].
        """
        components = self._present(values)
        array = self._array
        if array is None or components != self._built_for:
            array = self._prepare(components)
        points = self._arrows(np.asarray(T_world_link)[None],
                              {c: np.asarray(values[c])[None] for c in components},
                              components)[0].tolist()                          # (C, n, 2, 3)
        stamp = ns_to_stamp(t_ns)
        n = self.model.n_joints
        markers = array.markers
        for c in range(len(components)):
            for k in range(n):
                marker = markers[c * n + k]
                marker.header.stamp = stamp
                p0, p1 = marker.points
                p0.x, p0.y, p0.z = points[c][k][0]
                p1.x, p1.y, p1.z = points[c][k][1]
        return array

    def _present(self, values: Mapping[str, np.ndarray]) -> tuple[str, ...]:
        """This builder's components that ``values`` holds, in namespace order."""
        return tuple(c for c in self.components if c in values)

    def _arrows(self, T_world_link: np.ndarray, values: Mapping[str, np.ndarray],
                components: tuple[str, ...]) -> np.ndarray:
        """Start and end point [m] of every arrow, (M, C, n, 2, 3), for M samples of
        (M, L, 4, 4) link poses and component -> (M, n) values: the one place the arrow
        geometry is computed, for :meth:`build`, :meth:`point_fields` and
        :meth:`serialize` alike (their bytes must agree)."""
        T = np.asarray(T_world_link, dtype=np.float64)[:, self._links]          # (M, n, 4, 4)
        origin = T[:, :, :3, 3]
        axis = np.einsum('mkij,kj->mki', T[:, :, :3, :3], self._axis)
        value = np.stack([np.asarray(values[c], dtype=np.float64) for c in components],
                         axis=1)                                               # (M, C, n)
        tips = origin[:, None] + axis[:, None] * (value * self.scale)[..., None]
        return np.stack([np.broadcast_to(origin[:, None], tips.shape), tips], axis=3)

    def point_fields(self, T_world_link: np.ndarray,
                     values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Arrow start and end points of M samples, by CDR field path of the MarkerArray.

        Args:
            T_world_link: (M, L, 4, 4) link poses; values: component -> (M, n) torques.

        Returns:
            ``'markers.<m>.points.<p>.<x|y|z>'`` -> (M,) coordinates [m], for
            :meth:`plag_ros.io.cdr.CdrTemplate.fill` on a template of :meth:`build`.
        """
        components = self._present(values)
        points = self._arrows(T_world_link, values, components)
        n = self.model.n_joints
        return {f'markers.{c * n + k}.points.{p}.{coord}': points[:, c, k, p, x]
                for c in range(len(components)) for k in range(n) for p in range(2)
                for x, coord in enumerate('xyz')}

    def template(self, components: Sequence[str] | None = None) -> CdrTemplate:
        """CDR template of the markers of ``components`` (default: all of this builder's).

        The stamp and points are filled per sample (:meth:`point_fields`); everything else
        (namespaces, ids, colours, sizes, frame) is what :meth:`build` writes.
        """
        components = tuple(self.components if components is None else components)
        if components not in self._templates:
            n = self.model.n_joints
            poses = np.broadcast_to(np.eye(4), (len(self.model.link_names), 4, 4))
            message = self.build(poses, {c: np.zeros(n) for c in components},
                                 t_ns=TEMPLATE_NS)
            self._templates[components] = CdrTemplate(message)
        return self._templates[components]

    def serialize(self, T_world_link: np.ndarray, values: Mapping[str, np.ndarray], *,
                  t_ns: int) -> bytes:
        """The CDR bytes of ``build(T_world_link, values, t_ns=t_ns)``, to publish as is.

        Publishing ~45 markers as rclpy objects costs ~0.9 ms of conversion per frame;
        writing their points into the template costs ~30 us (bench/bench_nodes.py).
        """
        components = self._present(values)
        template = self.template(components)
        if components not in self._slots:
            # the order of _arrows: component, joint, start/end point, x/y/z
            n = self.model.n_joints
            self._slots[components] = template.slots([
                f'markers.{m}.points.{p}.{coord}' for m in range(len(components) * n)
                for p in range(2) for coord in 'xyz'])
        points = self._arrows(np.asarray(T_world_link)[None],
                              {c: np.asarray(values[c])[None] for c in components},
                              components)
        return template.fill_one(t_ns, self._slots[components], points)


# --- heat map -----------------------------------------------------------------------------

# Diverging blue-white-red anchors (ColorBrewer RdBu, reversed: negative blue, positive red).
_RDBU = np.array([
    [5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240],
    [247, 247, 247],
    [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31],
], dtype=np.float64)


def _diverging_lut(levels: int = 256) -> np.ndarray:
    """(levels, 3) uint8 colour table from -1 (index 0) to +1 (index levels - 1)."""
    x = np.linspace(0.0, 1.0, levels)
    anchors = np.linspace(0.0, 1.0, len(_RDBU))
    lut = np.stack([np.interp(x, anchors, _RDBU[:, c]) for c in range(3)], axis=-1)
    return np.round(lut).astype(np.uint8)


class PartialImageBuilder:
    """Heat map of the partial torque table as an ``rgb8`` ``sensor_msgs/Image``.

    Row k (top to bottom) is joint k, column i (left to right) body i; each cell is
    ``cell`` x ``cell`` pixels. Colour is a diverging map, white at zero, blue negative,
    red positive, saturating at ``+-limit`` (or at the sample's largest magnitude when
    ``limit`` is 0, so the map always uses its full range).

    Args:
        n_joints: rows n.
        n_bodies: columns B.
        cell: pixels per table cell (>= 1).
        limit: saturation magnitude [N*m]; 0 = per-image auto scale.
        frame_id: header frame.
    """

    LEVELS = 256

    def __init__(self, n_joints: int, n_bodies: int, *, cell: int = 16, limit: float = 0.0,
                 frame_id: str = '') -> None:
        if cell < 1:
            raise ValueError(f'cell must be >= 1 pixel, got {cell}')
        if not limit >= 0.0:
            raise ValueError(f'limit must be >= 0, got {limit}')
        self.shape = (int(n_joints), int(n_bodies))
        self.cell = int(cell)
        self.limit = float(limit)
        self.frame_id = frame_id
        self._lut = _diverging_lut(self.LEVELS)
        self._template: CdrTemplate | None = None

    def colours(self, partial: np.ndarray) -> np.ndarray:
        """(n, B) table -> (n * cell, B * cell, 3) uint8 image."""
        partial = np.asarray(partial, dtype=np.float64)
        if partial.shape != self.shape:
            raise ValueError(f'partial must have shape {self.shape}, got {partial.shape}')
        limit = self.limit or float(np.max(np.abs(partial), initial=0.0))
        unit = partial / limit if limit > 0.0 else np.zeros_like(partial)
        index = np.rint((np.clip(unit, -1.0, 1.0) + 1.0) * 0.5 * (self.LEVELS - 1))
        rgb = self._lut[index.astype(np.intp)]                                   # (n, B, 3)
        return np.repeat(np.repeat(rgb, self.cell, axis=0), self.cell, axis=1)

    @property
    def pixel_bytes(self) -> int:
        """Size of the rgb8 pixel data [bytes]; it ends every serialized image."""
        return 3 * self.shape[0] * self.cell * self.shape[1] * self.cell

    def template(self) -> CdrTemplate:
        """CDR template of :meth:`build`'s message; its last :attr:`pixel_bytes` bytes are
        the pixels, everything before them is the same for every table."""
        if self._template is None:
            self._template = CdrTemplate(self.build(np.zeros(self.shape), t_ns=TEMPLATE_NS))
        return self._template

    def serialize(self, partial: np.ndarray, *, t_ns: int) -> bytes:
        """The CDR bytes of ``build(partial, t_ns=t_ns)``, to publish as is (the image
        message's 62 kB of pixels are not converted into an rclpy sequence)."""
        raw = bytearray(self.template().fill_one(t_ns))
        raw[len(raw) - self.pixel_bytes:] = self.colours(partial).tobytes()
        return bytes(raw)

    def build(self, partial: np.ndarray, *, t_ns: int) -> Image:
        """The image message of one (n, B) table."""
        rgb = self.colours(partial)
        height, width = rgb.shape[:2]
        return Image(header=_header(t_ns, self.frame_id), height=height, width=width,
                     encoding='rgb8', is_bigendian=0, step=3 * width, data=rgb.tobytes())


def image_to_numpy(msg: Image) -> np.ndarray:
    """``rgb8`` image -> (height, width, 3) uint8 array.

    Raises:
        ValueError: another encoding, or a data size that does not match.
    """
    if msg.encoding != 'rgb8':
        raise ValueError(f'expected an rgb8 image, got {msg.encoding!r}')
    data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    if data.size != msg.step * msg.height or msg.step < 3 * msg.width:
        raise ValueError(f'image data has {data.size} bytes for {msg.height} rows of '
                         f'step {msg.step}')
    return data.reshape(msg.height, msg.step)[:, :3 * msg.width].reshape(
        msg.height, msg.width, 3)


# --- diagnostics --------------------------------------------------------------------------


def diagnostic_status(name: str, level: bytes, message: str,
                      values: Mapping[str, object] | Iterable[tuple[str, object]] = (), *,
                      hardware_id: str = '') -> DiagnosticStatus:
    """One ``diagnostic_msgs/DiagnosticStatus``; values are stringified (floats %.6g)."""
    items = values.items() if isinstance(values, Mapping) else values
    pairs = [KeyValue(key=str(key), value=(f'{value:.6g}' if isinstance(value, float)
                                           else str(value)))
             for key, value in items]
    return DiagnosticStatus(level=level, name=name, message=message,
                            hardware_id=hardware_id, values=pairs)


def diagnostic_array(statuses: Sequence[DiagnosticStatus], *, t_ns: int) -> DiagnosticArray:
    """``diagnostic_msgs/DiagnosticArray`` stamped ``t_ns``."""
    return DiagnosticArray(header=_header(t_ns, ''), status=list(statuses))


def state_values(state: Mapping[str, object], prefix: str = '') -> list[KeyValue]:
    """A node's state as diagnostic key-values: a nested mapping gives dotted keys
    (``model.digest``), a string stays as it is, every other value is its JSON text (numbers
    exact, lists, ``true``, ``null``), so that a reader gets back what ``~/state`` says."""
    out: list[KeyValue] = []
    for key, value in state.items():
        name = f'{prefix}{key}'
        if isinstance(value, Mapping) and value:
            out += state_values(value, f'{name}.')
        else:
            out.append(KeyValue(key=name, value=value if isinstance(value, str)
                                else json.dumps(value)))
    return out


def node_state(name: str, state: Mapping[str, object], level: bytes, message: str, *,
               hardware_id: str, t_ns: int) -> tuple[String, DiagnosticArray]:
    """A node's state in both its forms: the JSON ``std_msgs/String`` of ``~/state`` (kept
    for one release, deprecated) and a ``/diagnostics`` array of one status named ``name``
    carrying the same content (:func:`state_values`), stamped ``t_ns``."""
    status = DiagnosticStatus(level=level, name=name, message=message,
                              hardware_id=hardware_id, values=state_values(state))
    return String(data=json.dumps(state)), diagnostic_array([status], t_ns=t_ns)
