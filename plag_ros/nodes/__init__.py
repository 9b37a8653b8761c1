"""Thin rclpy nodes over the plag_ros library, and the shutdown idiom they share."""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable

__all__ = ['spin_node']


def _ignore_sigint() -> None:
    """Ignore SIGINT from now on; retried if a SIGINT lands while it is being set."""
    if threading.current_thread() is not threading.main_thread():
        return
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def spin_node(factory: Callable[[], object], args: list[str] | None = None) -> None:
    """Init rclpy, spin the node ``factory()`` builds, and always shut down cleanly.

    The try/except/finally shape works on Humble, Jazzy and Kilted alike: Ctrl-C and an
    external shutdown end the spin quietly, and the node is destroyed before the context.

    Shutdown is quiet and complete however it is asked for:

    * rclpy's SIGINT handler shuts the context down from its own thread while a callback
      may be publishing: the ``RCLError`` that publish raises once the context is gone is
      a consequence of the shutdown and ends the spin like the ``KeyboardInterrupt``; an
      exception while the context is still valid is a bug and propagates.
    * ``ros2 launch`` in a terminal delivers Ctrl-C to each node twice (the terminal's
      process group and launch itself): SIGINT is ignored from the moment the spin ends,
      so a second one cannot cut ``destroy_node()`` short. The process exits with 0.
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
    except Exception:
        if rclpy.ok():
            raise
        # else: a publish or take that raced the shutdown; nothing was lost.
    finally:
        _ignore_sigint()
        if node is not None:
            node.destroy_node()
        try:
            # uninstalls rclpy's handlers last, which restores Python's SIGINT handler
            rclpy.try_shutdown()
        except KeyboardInterrupt:
            pass
        _ignore_sigint()
