"""Thin rclpy nodes over the plag_ros library, and the shutdown idiom they share."""
from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # rclpy is imported lazily: importing plag_ros.nodes stays cheap
    from rclpy.node import Node

__all__ = ['dynamics_main', 'impedance_main', 'sim_main', 'spin_node']

SPIN_POLL_S = 0.1
"""Longest executor wait [s]: the spin loop looks at the context and Ctrl-C this often."""
SHUTDOWN_DEADLINE_S = 4.0
"""After the first Ctrl-C, a shutdown still under way this long [s] is a bug: every thread's
stack goes to stderr and the process exits with 1 (``faulthandler``), inside launch's 5 s
before it escalates to SIGTERM, instead of hanging until SIGKILL."""


class _QuietInterrupts:
    """Python's SIGINT handler while a node runs: count; raise KeyboardInterrupt once.

    rclpy's own SIGINT handler (installed by ``rclpy.init``, in C) wakes the executor and
    shuts the contexts down, then calls the handler that was there before it, this one.
    The ``KeyboardInterrupt`` is still needed: without it a node was seen to outlive
    launch's 5 s and get SIGTERM (1 in 5 runs; likely cause: the executor woke before the
    context was shut down, found it valid and waited again). Python's default raises at every
    Ctrl-C, so a second one (``ros2 launch`` in a terminal delivers two) landed in
    ``destroy_node()``. This one raises only while ``raise_once`` is set (constructor and
    spin) and clears it before raising: every later Ctrl-C is only counted.
    """

    def __init__(self) -> None:
        self.count = 0
        self.raise_once = False

    def __call__(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1:
            faulthandler.dump_traceback_later(SHUTDOWN_DEADLINE_S, exit=True)
        if self.raise_once:
            self.raise_once = False
            raise KeyboardInterrupt


def _quiet_sigint() -> _QuietInterrupts | None:
    """Install (or keep, with its count) the counting handler; None off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    if not isinstance(handler, _QuietInterrupts):
        handler = _QuietInterrupts()
        signal.signal(signal.SIGINT, handler)
    return handler


def _exit_at_once(signum, frame) -> None:
    os._exit(0)     # nothing started yet: nothing to clean up, no traceback


def _console(module: str) -> None:
    """A console script: a SIGINT handler first, then the seconds-long import, then run.

    A Ctrl-C while torch, scipy and numba load (about 4 s) ends the process at once with
    exit code 0 instead of a traceback out of some import (and instead of finishing the
    import first, which would outlast launch's 5 s before it escalates to SIGTERM).
    :func:`spin_node` replaces the handler before ``rclpy.init``.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_at_once)
    importlib.import_module(f'{__name__}.{module}').main()


def dynamics_main() -> None:
    """Console script ``dynamics_node``."""
    _console('dynamics_node')


def sim_main() -> None:
    """Console script ``sim_node``."""
    _console('sim_node')


def impedance_main() -> None:
    """Console script ``impedance_node``."""
    _console('impedance_node')


def spin_node(factory: Callable[[], Node], args: list[str] | None = None) -> None:
    """Init rclpy, spin the node ``factory()`` builds, and always shut down cleanly.

    The try/except/finally shape works on Humble, Jazzy and Kilted alike: Ctrl-C and an
    external shutdown end the spin quietly, and the node is destroyed before the context.

    Shutdown is quiet and complete however it is asked for:

    * In the main thread, Python's SIGINT handler is replaced before ``rclpy.init`` (after
      it, ``signal.signal`` would displace rclpy's handler) by :class:`_QuietInterrupts`:
      the first Ctrl-C ends the constructor or the spin with ``KeyboardInterrupt``, and
      no later one can land in ``destroy_node()`` when ``ros2 launch`` in a terminal
      delivers Ctrl-C twice (the terminal's process group and launch itself).
      The process exits with 0 (SIGINT is ignored once rclpy is shut down).
    * rclpy shuts the context down from its own thread while a callback may be
      publishing: the ``RCLError`` that publish (or building the node) raises once the
      context is gone is a consequence of the shutdown and ends the spin quietly, as does
      any exception after a Ctrl-C; an exception while the context is valid and no Ctrl-C
      came is a bug and propagates.
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException

    from . import rclpy_compat

    interrupts = _quiet_sigint()

    def interrupted() -> bool:
        return interrupts is not None and interrupts.count > 0

    rclpy.init(args=args)
    node: Node | None = None
    try:
        if not interrupted():       # a Ctrl-C before init: do not start at all
            if interrupts is not None:
                interrupts.raise_once = True
            node = factory()
            # Not rclpy.spin: its wait has no timeout. A wake-up taken before the shutdown it
            # announces leaves it waiting for good, our Python handler deferred behind the C
            # call: the likely cause of a dynamics node that outlived SIGINT and SIGTERM
            # once in a CI run's 60 launch Ctrl-Cs. A bounded wait looks at both every
            # SPIN_POLL_S.
            executor = rclpy.get_global_executor()
            executor.add_node(node)
            try:
                while rclpy.ok() and not interrupted():
                    executor.spin_once(timeout_sec=SPIN_POLL_S)
            finally:
                executor.remove_node(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok() and not interrupted():
            raise
        # else: a publish, take or entity creation that raced the shutdown, or the
        # KeyboardInterrupt turned into another error inside rclpy's C extension (pybind11
        # reports one raised while it converts a taken message as a RuntimeError).
    finally:
        if interrupts is not None:
            interrupts.raise_once = False
        if node is not None:
            node.destroy_node()
        rclpy_compat.try_shutdown()   # and uninstall rclpy's handler: ours is Python's again
        if interrupts is not None:
            # Interpreter finalization resets a Python-function handler to SIG_DFL, and a
            # late second Ctrl-C would then kill the process (exit -2); SIG_IGN stays.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        faulthandler.cancel_dump_traceback_later()   # shut down in time: the caller goes on
