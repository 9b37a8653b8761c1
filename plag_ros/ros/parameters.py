"""Node parameters from the core's settings dataclasses (:mod:`plag_ros.core.options`).

Descriptors make ``ros2 param describe`` useful and let rclpy refuse out-of-range values
before a node's own validation runs.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)

from plag_ros.core.options import Option
from plag_ros.core.plausibility import PlausibilityConfig

if TYPE_CHECKING:
    from rclpy.node import Node
    from rclpy.parameter import Parameter

__all__ = ['PLAUSIBILITY_PARAMETERS', 'bool_descriptor', 'choice', 'descriptor',
           'doubles_descriptor', 'float_descriptor', 'int_descriptor', 'plausibility_config',
           'str_descriptor']

_Choice = TypeVar('_Choice', bound=str)


def choice(values: Mapping[str, object], name: str, allowed: tuple[_Choice, ...]) -> _Choice:
    """The string parameter ``name`` of ``values`` as one of ``allowed`` (typed as that
    ``Literal``).

    Raises:
        ValueError: the value is none of ``allowed``; the message names the parameter.
    """
    value = str(values[name])
    for option in allowed:
        if value == option:
            return option
    raise ValueError(f'parameter {name} must be one of {list(allowed)}, got {value!r}')


def descriptor(kind: int, description: str, *, read_only: bool = False,
               low: float | None = None, high: float | None = None,
               constraints: str = '') -> ParameterDescriptor:
    """Descriptor of ``kind`` (a ``ParameterType``); ``low``/``high`` set a numeric range."""
    d = ParameterDescriptor(type=kind, description=description, read_only=read_only,
                            additional_constraints=constraints)
    if kind == ParameterType.PARAMETER_DOUBLE and low is not None and high is not None:
        d.floating_point_range = [FloatingPointRange(from_value=float(low),
                                                     to_value=float(high), step=0.0)]
    if kind == ParameterType.PARAMETER_INTEGER and low is not None and high is not None:
        d.integer_range = [IntegerRange(from_value=int(low), to_value=int(high), step=1)]
    return d


def float_descriptor(description: str, low: float, high: float, *,
                     read_only: bool = False) -> ParameterDescriptor:
    return descriptor(ParameterType.PARAMETER_DOUBLE, description, read_only=read_only,
                      low=low, high=high)


def int_descriptor(description: str, low: int, high: int, *,
                   read_only: bool = False) -> ParameterDescriptor:
    return descriptor(ParameterType.PARAMETER_INTEGER, description, read_only=read_only,
                      low=low, high=high)


def str_descriptor(description: str, *, read_only: bool = False,
                   constraints: str = '') -> ParameterDescriptor:
    return descriptor(ParameterType.PARAMETER_STRING, description, read_only=read_only,
                      constraints=constraints)


def bool_descriptor(description: str, *, read_only: bool = False) -> ParameterDescriptor:
    return descriptor(ParameterType.PARAMETER_BOOL, description, read_only=read_only)


def doubles_descriptor(description: str, *, read_only: bool = False) -> ParameterDescriptor:
    return descriptor(ParameterType.PARAMETER_DOUBLE_ARRAY, description, read_only=read_only)


_PLAUSIBILITY = PlausibilityConfig()     # the one source of the plausibility.* defaults

PLAUSIBILITY_PARAMETERS: dict[str, tuple[object, ParameterDescriptor]] = {
    'plausibility.enabled': (_PLAUSIBILITY.enabled, bool_descriptor(
        'reject joint states the arm cannot produce (beyond the URDF limits, too fast, '
        'impossible jumps), counted per reason', read_only=True)),
    'plausibility.position_margin': (_PLAUSIBILITY.position_margin, float_descriptor(
        'allowed excess beyond the URDF position limits [rad or m]', 0.0, 100.0,
        read_only=True)),
    'plausibility.velocity_factor': (_PLAUSIBILITY.velocity_factor, float_descriptor(
        'allowed multiple of the URDF velocity limit (measured velocity, step between '
        'samples)', 0.01, 1000.0, read_only=True)),
    'plausibility.continuous_bound': (_PLAUSIBILITY.continuous_bound, float_descriptor(
        'largest |q| of a continuous joint [rad]', 0.0, 1e9, read_only=True)),
}
"""(default, descriptor) of the plausibility limits a node reading joint_states declares."""


def plausibility_config(values: Mapping[str, object]) -> PlausibilityConfig:
    """The :class:`PlausibilityConfig` of a node's declared ``plausibility.*`` values."""
    return PlausibilityConfig(
        enabled=bool(values['plausibility.enabled']),
        position_margin=float(values['plausibility.position_margin']),   # type: ignore[arg-type]
        velocity_factor=float(values['plausibility.velocity_factor']),   # type: ignore[arg-type]
        continuous_bound=float(values['plausibility.continuous_bound']))  # type: ignore[arg-type]


_TYPES = {'bool': ParameterType.PARAMETER_BOOL, 'int': ParameterType.PARAMETER_INTEGER,
          'float': ParameterType.PARAMETER_DOUBLE, 'str': ParameterType.PARAMETER_STRING,
          'floats': ParameterType.PARAMETER_DOUBLE_ARRAY,
          'strs': ParameterType.PARAMETER_STRING_ARRAY}


def option_descriptor(opt: Option) -> ParameterDescriptor:
    """The ROS descriptor of a core :class:`~plag_ros.core.options.Option`."""
    constraints = '' if opt.choices is None else f'one of {list(opt.choices)}'
    return descriptor(_TYPES[opt.kind], opt.doc, read_only=opt.read_only, low=opt.low,
                      high=opt.high, constraints=constraints)


def declare_options(node: Node, opts: Sequence[Option]) -> dict[str, Any]:
    """Declare every option as a parameter of ``node``; returns ``{name: value}``."""
    for opt in opts:
        node.declare_parameter(opt.name, opt.default, option_descriptor(opt))
    return option_values(node, opts)


def option_values(node: Node, opts: Sequence[Option],
                  overrides: Sequence[Parameter] = ()) -> dict[str, Any]:
    """``{name: value}`` of the declared options, with ``overrides`` (a pending set)."""
    values = {opt.name: node.get_parameter(opt.name).value for opt in opts}
    values.update({p.name: p.value for p in overrides if p.name in values})
    return values
