"""Node parameters from the core's settings dataclasses (:mod:`plag_ros.core.common.options`).

A node lists its options once (``options(Settings())``), declares them here and reads
them back into its settings with :func:`plag_ros.core.common.options.build`. Descriptors make
``ros2 param describe`` useful (description with the unit, allowed values, range) and let
rclpy refuse a value out of range or a write to a read-only parameter before the node's
own validation runs.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)

from plag_ros.core.common.options import Option

if TYPE_CHECKING:
    from rclpy.node import Node
    from rclpy.parameter import Parameter

__all__ = ['declare_options', 'option_descriptor', 'option_values']

_TYPES = {'bool': ParameterType.PARAMETER_BOOL, 'int': ParameterType.PARAMETER_INTEGER,
          'float': ParameterType.PARAMETER_DOUBLE, 'str': ParameterType.PARAMETER_STRING,
          'floats': ParameterType.PARAMETER_DOUBLE_ARRAY,
          'strs': ParameterType.PARAMETER_STRING_ARRAY}


def option_descriptor(opt: Option) -> ParameterDescriptor:
    """The ROS descriptor of a core :class:`~plag_ros.core.common.options.Option`."""
    d = ParameterDescriptor(
        type=_TYPES[opt.kind], description=opt.doc, read_only=opt.read_only,
        additional_constraints='' if opt.choices is None else f'one of {list(opt.choices)}')
    if opt.low is not None and opt.high is not None:
        if opt.kind == 'float':
            d.floating_point_range = [FloatingPointRange(
                from_value=float(opt.low), to_value=float(opt.high), step=0.0)]
        elif opt.kind == 'int':
            d.integer_range = [IntegerRange(from_value=int(opt.low), to_value=int(opt.high),
                                            step=1)]
    return d


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
