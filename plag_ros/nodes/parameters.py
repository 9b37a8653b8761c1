"""ROS parameter descriptors shared by the nodes: type, range and read-only flag in one call.

Descriptors make ``ros2 param describe`` useful and let rclpy refuse out-of-range values
before a node's own validation runs.
"""
from __future__ import annotations

from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)

__all__ = ['descriptor', 'float_descriptor', 'int_descriptor', 'str_descriptor',
           'bool_descriptor', 'doubles_descriptor']


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
