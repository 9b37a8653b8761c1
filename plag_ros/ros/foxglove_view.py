"""A live view of plag_ros without a ROS desktop: its topics served to Foxglove.

:class:`FoxgloveView` subscribes to the topics a user plots (the input joint states, the
dynamics node's joint torque and its per-joint components, the markers and the heat map,
the robot description, the impedance node's state) and serves each, byte for byte, on a
Foxglove WebSocket channel of the same name: ``ros2msg`` schema (the message definition
rosbags generates, as rosbag2's mcap files carry it) and ``cdr`` encoding, the CDR the
subscription received, so Foxglove decodes exactly what DDS carried. The server and the
protocol are the maintained ``foxglove-sdk``'s (``foxglove.start_server``, Rust threads of
its own: the ROS executor is not blocked); nothing here speaks the protocol.

``plag-ros sim --foxglove`` and ``plag-ros run --foxglove`` open one on 127.0.0.1:8765;
Foxglove connects with "Open connection" -> ``ws://127.0.0.1:8765``, and
``config/plag_ros.foxglove.json`` lays out its plots.
"""
from __future__ import annotations

import time
from collections.abc import Sequence

from rclpy.node import Node

from plag_ros.io.bag import JOINT_STATE_TYPE
from plag_ros.ros import qos, topics
from plag_ros.ros.messages import message_class

__all__ = ['DEFAULT_HOST', 'DEFAULT_PORT', 'FoxgloveView', 'view_topics']

DEFAULT_HOST = '127.0.0.1'
"""Served on this machine only unless told otherwise (the view is not authenticated)."""
DEFAULT_PORT = 8765
"""Foxglove's default WebSocket port."""

IMPEDANCE_STATE = '/plag_impedance/state'
"""The impedance node's ``~/state`` (served with ``control``)."""

LATCHED = ('/robot_description', topics.node_topic(topics.NAMES_TOPIC), IMPEDANCE_STATE)
"""Topics published transient local: subscribed the same way, so a late view gets them."""


def view_topics(*, control: bool = False) -> list[tuple[str, str]]:
    """(topic, message type) of each channel: inputs, torques, components, visuals."""
    served = [('/joint_states', JOINT_STATE_TYPE), ('/robot_description', 'std_msgs/msg/String')]
    served += [(topics.node_topic(name), topics.OUTPUT_TYPES[name])
               for name in (topics.STATE_TOPIC, topics.NAMES_TOPIC, topics.MARKERS_TOPIC,
                            topics.IMAGE_TOPIC)]
    served += [(topics.node_topic(topics.COMPONENT_PREFIX + name), JOINT_STATE_TYPE)
               for name in topics.COMPONENT_TOPICS]
    if control:
        served.append((IMPEDANCE_STATE, 'std_msgs/msg/String'))
    return served


class FoxgloveView:
    """Serve ``served`` topics of ``node``'s graph on a Foxglove WebSocket server.

    Args:
        node: the rclpy node that subscribes (its executor delivers the messages).
        served: (topic, ``pkg/msg/Type``) pairs, e.g. :func:`view_topics`.
        host: address to listen on; port: TCP port (0: a free one, see :attr:`port`).

    Raises:
        RuntimeError: foxglove-sdk is not installed, or the port cannot be bound.
    """

    def __init__(self, node: Node, served: Sequence[tuple[str, str]], *,
                 host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
        try:
            import foxglove
        except ImportError as err:
            raise RuntimeError('the Foxglove view needs foxglove-sdk: pip install '
                               'foxglove-sdk') from err
        from rosbags.typesys import Stores, get_typestore

        store = get_typestore(Stores.ROS2_KILTED)   # definitions identical on all three
        try:
            self._server = foxglove.start_server(name='plag_ros', host=host, port=port)
        except RuntimeError as err:
            raise RuntimeError(f'Foxglove view: cannot serve on {host}:{port}: {err}') from err
        self.channels = {}
        for topic, msgtype in served:
            definition, _ = store.generate_msgdef(msgtype, ros_version=2)
            channel = foxglove.Channel(
                topic, message_encoding='cdr',
                schema=foxglove.Schema(name=msgtype, encoding='ros2msg',
                                       data=definition.encode()))
            self.channels[topic] = channel
            latched = topic in LATCHED
            node.create_subscription(message_class(msgtype), topic, self._forward(channel),
                                     qos.LATCHED if latched else qos.reliable(100), raw=True)

    @staticmethod
    def _forward(channel):
        def log(raw: bytes) -> None:
            channel.log(raw, log_time=time.time_ns())
        return log

    @property
    def port(self) -> int:
        """The TCP port served (0 once closed)."""
        return self._server.port

    def close(self) -> None:
        """Stop serving (the SDK's server lives until stopped, not until collected)."""
        self._server.stop()
