"""Signals that end a ``plag-ros`` command cleanly: they only set an event.

A handler that raises (KeyboardInterrupt) lands wherever the main thread is; inside rclpy's
native take of a message pybind11 turns it into ``RuntimeError: Unable to convert call
argument '0' to Python object``, which once ended a CI run's ``plag-ros sim --foxglove``
with exit 1 on a plain Ctrl-C. The commands' loops read the event between spins instead,
and their ``finally`` blocks close bags and stop node processes.
"""
from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ['stop_on_signals']

Handler = Callable[[int, Any], Any] | int | None


def stop_on_signals(stop: threading.Event,
                    signals: Iterable[int] = (signal.SIGINT, signal.SIGTERM)
                    ) -> dict[int, Handler]:
    """Make each of ``signals`` set ``stop`` and nothing else (main thread only).

    Returns:
        The handlers replaced, by signal, for ``signal.signal`` to put back.
    """
    def handler(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        stop.set()
    return {sig: signal.signal(sig, handler) for sig in signals}
