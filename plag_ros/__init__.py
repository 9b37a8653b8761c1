"""plag_ros: partial Lagrangian inverse dynamics and partial-impedance control for ROS 2.

For a notebook, the top level is enough (:mod:`plag_ros.api`, numpy in and out)::

    import plag_ros as plag
    robot = plag.load_robot()
    result = plag.decompose(robot, plag.read_bag('run_bag', robot))

The package's layers, each importing only the ones below it (``docs/layers.md``):

* :mod:`plag_ros.core`: the physics and the control law, one package per concept; no ROS.
* :mod:`plag_ros.io`: bags and npz files, through ``rosbags``; no rclpy.
* :mod:`plag_ros.bus`: the CRANE-X7's servo bus: the torque-mode driver of the real arm
  (ROBOTIS' dynamixel-sdk) and the emulated servos it is tested on; no ROS.
* :mod:`plag_ros.api`: the researcher's entry point above (core and io).
* :mod:`plag_ros.ros`: the ROS 2 adapter (messages, topics, parameters, the nodes).
* :mod:`plag_ros.apps`: the ``plag-ros`` command line.

The names of :mod:`plag_ros.api` are loaded on first use, so that importing a node or the
command line does not pay for the engine.
"""
from __future__ import annotations

import importlib
from typing import Any

__all__ = ['Estimate', 'Recording', 'Result', '__version__', 'decompose', 'estimate',
           'load_robot', 'read_bag']

__version__ = '0.1.0'

_API = frozenset(__all__) - {'__version__'}


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module('plag_ros.api'), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
