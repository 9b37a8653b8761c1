"""Thin rclpy nodes over the plag_ros library, and the shutdown idiom they share."""
from __future__ import annotations

from collections.abc import Callable

__all__ = ['spin_node']


def spin_node(factory: Callable[[], object], args: list[str] | None = None) -> None:
    """Init rclpy, spin the node ``factory()`` builds, and always shut down cleanly.

    The try/except/finally shape works on Humble, Jazzy and Kilted alike: Ctrl-C and an
    external shutdown end the spin quietly, and the node is destroyed before the context.
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException

    rclpy.init(args=args)
    node = None
    try:
        node = factory()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
