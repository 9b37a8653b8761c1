"""The QoS profiles the nodes publish and subscribe with, written once (the interface
table names them: :data:`plag_ros.ros.interfaces.RELIABLE` and
:data:`~plag_ros.ros.interfaces.LATCHED`)."""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

__all__ = ['LATCHED', 'reliable']


def reliable(depth: int = 10) -> QoSProfile:
    """Reliable, volatile, keeping the last ``depth`` messages."""
    return QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)


LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Reliable, transient local, depth 1: a subscriber that joins late still gets the newest
message (a node's ``~/state``, the array names, ``robot_description``)."""
