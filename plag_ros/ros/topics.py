"""The dynamics node's output interface: its name, topics and message types, in one place.

The live node (:mod:`plag_ros.ros.nodes.dynamics_node`), the offline output bag
(:mod:`plag_ros.ros.output_bag`), the message builders (:mod:`plag_ros.ros.messages`) and the
rviz config tests all read the topic list from here, so a topic added or renamed in one
place reaches every consumer. Names are relative to the node (``~/<name>``).
"""
from __future__ import annotations

__all__ = [
    'ARRAY_TOPICS',
    'BODY_PREFIX',
    'COMPONENT_PREFIX',
    'COMPONENT_TOPICS',
    'DYNAMICS_NODE_NAME',
    'IMAGE_TOPIC',
    'MARKERS_TOPIC',
    'NAMES_TOPIC',
    'OUTPUT_TYPES',
    'STATE_TOPIC',
    'node_topic',
]

DYNAMICS_NODE_NAME = 'plag_dynamics'
"""Default name of the dynamics node; its outputs live under ``/plag_dynamics/``."""

STATE_TOPIC = 'joint_states'
"""Filtered q, qd and the joint torque (effort), ``sensor_msgs/JointState``."""

ARRAY_TOPICS = ('partial', 'acceleration', 'velocity', 'gravity', 'friction')
"""Decomposition arrays published as labelled ``std_msgs/Float64MultiArray``, in the order
the node publishes them."""

BODY_PREFIX = 'body/'
"""``~/body/<link>``: one column of the partial table per body, ``sensor_msgs/JointState``."""

COMPONENT_PREFIX = 'component/'
COMPONENT_TOPICS = ('acceleration', 'velocity', 'gravity', 'friction')
"""``~/component/<name>``: one per-joint torque component, ``sensor_msgs/JointState`` with
the joint names and the component in ``effort``, every sample: the acceleration,
velocity-product and gravity parts (summed over bodies and sources; the three add up to the
effort of ``~/joint_states``) and the joint friction (not part of that torque). PlotJuggler
and Foxglove split a JointState by joint name, where a Float64MultiArray is unnamed
indices."""

MARKERS_TOPIC = 'markers'
IMAGE_TOPIC = 'partial_image'
NAMES_TOPIC = 'names'

OUTPUT_TYPES: dict[str, str] = {
    STATE_TOPIC: 'sensor_msgs/msg/JointState',
    **{name: 'std_msgs/msg/Float64MultiArray' for name in ARRAY_TOPICS},
    MARKERS_TOPIC: 'visualization_msgs/msg/MarkerArray',
    IMAGE_TOPIC: 'sensor_msgs/msg/Image',
    NAMES_TOPIC: 'std_msgs/msg/String',
}
"""Message type of every fixed output topic (``~/body/<link>`` and ``~/component/<name>``
are JointState too)."""


def node_topic(name: str, node: str = DYNAMICS_NODE_NAME) -> str:
    """Absolute topic of the node's output ``name``, e.g. ``/plag_dynamics/partial``."""
    return f'/{node}/{name}'
