"""Thin rclpy nodes over the plag_ros library, and the shutdown idiom they share."""
from __future__ import annotations

import ctypes
import faulthandler
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:   # rclpy is imported lazily: importing plag_ros.ros.nodes stays cheap
    from rclpy.executors import Executor
    from rclpy.node import Node

__all__ = ['EXIT_WITH_PARENT', 'driver_main', 'dynamics_main', 'exit_with_parent',
           'impedance_main', 'sim_main', 'spin_node']

N = TypeVar('N', bound='Node')

SPIN_POLL_S = 0.1
"""Longest executor wait [s]: the spin loop looks at the context and Ctrl-C this often."""
SHUTDOWN_DEADLINE_S = 4.0
"""After the first Ctrl-C, a shutdown still under way this long [s] is a bug: every thread's
stack goes to stderr and the process exits with 1 (``faulthandler``), inside launch's 5 s
before it escalates to SIGTERM, instead of hanging until SIGKILL."""
EXIT_WITH_PARENT = 'PLAG_EXIT_WITH_PARENT'
"""Environment variable: the pid of the process that started the node (a ``plag-ros``
command). The node then gets SIGTERM, its usual shutdown, when that process dies, however
it died: a ``plag-ros`` killed with SIGKILL left its nodes running, an orphaned driver on
the graph beside the next run's."""
_PR_SET_PDEATHSIG = 1     # linux/prctl.h


class _QuietInterrupts:
    """Python's SIGINT and SIGTERM handler while a node runs: count; raise
    ``KeyboardInterrupt`` once while ``raise_once`` is set.

    rclpy's own handlers are not installed (``SignalHandlerOptions.NO``): in C they shut the
    context down from a thread of their own, which then ran beside the node's teardown. A
    CI run caught a dynamics node stuck for good in ``Publisher.destroy`` (Kilted, Fast DDS)
    right after such a shutdown, SIGTERM included. Here a signal is only counted, the spin
    loop sees the count within ``SPIN_POLL_S``, and the main thread alone destroys the node
    and then shuts the context down. ``raise_once`` is set while the node is built (seconds
    of model loading that a Ctrl-C must cut short) and cleared before raising: a second
    Ctrl-C (``ros2 launch`` in a terminal delivers two) never lands in ``destroy_node()``.
    """

    def __init__(self) -> None:
        self.count = 0
        self.raise_once = False
        self.armed = False

    def arm(self, seconds: float) -> None:
        """The stacks and exit 1 ``seconds`` from now, unless cancelled first."""
        self.armed = True
        faulthandler.dump_traceback_later(seconds, exit=True)

    def __call__(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1 and not self.armed:     # (a shutdown hook armed its own)
            self.arm(SHUTDOWN_DEADLINE_S)
        if self.raise_once:
            self.raise_once = False
            raise KeyboardInterrupt


def _quiet_signals() -> _QuietInterrupts | None:
    """Install (or keep, with its count) the counting handler for SIGINT and SIGTERM; None
    off the main thread (Python handles signals there only)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGINT)
    if not isinstance(handler, _QuietInterrupts):
        handler = _QuietInterrupts()
        signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return handler


def exit_with_parent() -> None:
    """Ask the kernel for SIGTERM when the process named by :data:`EXIT_WITH_PARENT` dies
    (Linux: ``prctl(PR_SET_PDEATHSIG)``; nothing elsewhere or without the variable). The
    signal follows the thread that started this process, so the starter must start its
    nodes from its main thread. One that died before the request is SIGTERM at once. Call
    it once a SIGTERM handler is in (:func:`spin_node` does)."""
    parent = os.environ.pop(EXIT_WITH_PARENT, '')
    if not parent.isdigit() or not sys.platform.startswith('linux'):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        print(f'{EXIT_WITH_PARENT}: prctl failed: {os.strerror(ctypes.get_errno())}',
              file=sys.stderr)
    if os.getppid() != int(parent):
        os.kill(os.getpid(), signal.SIGTERM)


def _exit_at_once(signum, frame) -> None:
    os._exit(0)     # nothing started yet: nothing to clean up, no traceback


def _console(module: str) -> None:
    """A console script: a SIGINT handler first, then the seconds-long import, then run.

    A Ctrl-C while scipy, numba and rclpy load (1.5-2 s; a node imports no torch) ends the
    process at once with exit code 0 instead of a traceback out of some import (and instead
    of finishing the import first, which on a loaded machine can outlast launch's 5 s before
    it escalates to SIGTERM).
    :func:`spin_node` replaces the handler before ``rclpy.init``.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _exit_at_once)
    # A crash in native code (a segmentation fault) then prints every Python thread's
    # stack to stderr, which launch shows beside "process has died": one CI run saw an
    # impedance node die with -11 on Ctrl-C and nothing to say where.
    faulthandler.enable()
    importlib.import_module(f'{__name__}.{module}').main()


def dynamics_main() -> None:
    """Console script ``dynamics_node``."""
    _console('dynamics_node')


def sim_main() -> None:
    """Console script ``sim_node``."""
    _console('sim_node')


def driver_main() -> None:
    """Console script ``driver_node``: the servo bus driver ``plag_driver`` (torque mode)."""
    _console('driver_node')


def impedance_main() -> None:
    """Console script ``impedance_node``."""
    _console('impedance_node')


def spin_node(factory: Callable[[], N], args: list[str] | None = None, *,
              start: Callable[[N], None] | None = None,
              companions: Callable[[N], Iterable[Node]] | None = None,
              shutdown: Callable[[N, Executor], None] | None = None,
              shutdown_s: Callable[[N], float] | None = None) -> None:
    """Init rclpy, spin the node ``factory()`` builds, and always shut down cleanly.

    ``companions(node)``, where given, yields more nodes built beside it (the simulator's
    controller stand-ins), spun on the same executor and destroyed before it, in reverse
    order; each is taken as it is yielded, so a build cut short destroys those built.

    ``start(node)``, where given, runs once the node is built and a signal no longer
    raises, before the spin: what must not begin in a half-built node that nobody will
    destroy (the driver's bus loop: a Ctrl-C landing between its start and the end of
    the constructor would leave it driving the servos with no hold at exit). A signal
    during ``start`` is seen by the spin loop, and the node is destroyed as usual; after a
    signal or a shutdown ``start`` is skipped.

    ``shutdown(node, executor)``, where given, runs once the spin of a built node ends,
    however it ended (a signal, an external shutdown, a callback's exception), while the
    context is up and the node still on ``executor``, which it may spin: the controller
    holds and switches the arm back there. It must end by itself within
    ``shutdown_s(node)`` seconds (its own timeouts bound it; read when it starts), which
    the deadline below adds to ``SHUTDOWN_DEADLINE_S``, counted again from its start. What
    it raises is logged, not raised: the teardown goes on.

    The try/except/finally shape works on Humble, Jazzy and Kilted alike: Ctrl-C and an
    external shutdown end the spin quietly, and the node is destroyed before the context.

    Shutdown is quiet, ordered and complete however it is asked for:

    * In the main thread, :class:`_QuietInterrupts` handles SIGINT and SIGTERM and rclpy
      installs none of its own: a signal is counted, the spin loop (a wait of at most
      ``SPIN_POLL_S``, where ``rclpy.spin`` waits without end) sees it, and this thread
      alone runs ``shutdown``, destroys the node and then shuts the context down. Nothing
      tears the context down beside the teardown. A signal while the node is being built
      ends the build with ``KeyboardInterrupt``; no later one can land in ``shutdown`` or
      ``destroy_node()`` when ``ros2 launch`` in a terminal delivers Ctrl-C twice. The
      process exits with 0.
    * A shutdown still under way ``SHUTDOWN_DEADLINE_S`` after the first signal (after
      the start of ``shutdown``: that plus ``shutdown_s(node)``) is a bug: every thread's
      stack goes to stderr and the process exits with 1.
    * An external ``rclpy.shutdown`` ends the spin too; an exception from a callback while
      the context is valid and no signal came is a bug and propagates (after
      ``shutdown``). One after a signal or a shutdown (a publish or an entity creation
      that raced it) ends the spin quietly.

    The executor is the node's own, shut down before the nodes and the context, so that
    its guard conditions and tasks are not torn down after the context at exit (a CI run
    saw the impedance node die with -11 after a clean Ctrl-C hold and switch-back when
    they were).
    """
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from plag_ros.ros import rclpy_compat

    interrupts = _quiet_signals()
    exit_with_parent()       # after the handler: a SIGTERM from here on is a clean shutdown

    def interrupted() -> bool:
        return interrupts is not None and interrupts.count > 0

    rclpy.init(args=args, signal_handler_options=(
        SignalHandlerOptions.NO if interrupts is not None else SignalHandlerOptions.ALL))
    node: N | None = None
    others: list[Node] = []
    executor = SingleThreadedExecutor()
    spinning = False
    try:
        if not interrupted():       # a signal before init: do not start at all
            if interrupts is not None:
                interrupts.raise_once = True
            node = factory()
            others.extend(companions(node) if companions is not None else ())
            if interrupts is not None:
                interrupts.raise_once = False    # from here the loop below sees a signal
            built: list[Node] = [node, *others]
            for each in built:
                executor.add_node(each)
            spinning = True
            if start is not None and not interrupted() and rclpy.ok():
                start(node)
            while rclpy.ok() and not interrupted():
                executor.spin_once(timeout_sec=SPIN_POLL_S)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok() and not interrupted():
            raise
    finally:
        if interrupts is not None:
            interrupts.raise_once = False
        try:
            if shutdown is not None and spinning and node is not None:
                _shut_down(node, shutdown, shutdown_s, executor, interrupts)
        finally:
            executor.shutdown(timeout_sec=1.0)     # takes the nodes off it, too
            destroyed: list[Node] = [node, *others] if node is not None else []
            for each in reversed(destroyed):
                each.destroy_node()
            rclpy_compat.try_shutdown()
            if interrupts is not None:
                # Interpreter finalization resets a Python-function handler to SIG_DFL,
                # and a late Ctrl-C or launch's SIGTERM 5 s after the first (a long
                # hand-back) would then kill the process (exit -2, -15); SIG_IGN stays.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            faulthandler.cancel_dump_traceback_later()   # in time: the caller goes on


def _shut_down(node: N, shutdown: Callable[[N, Executor], None],
               shutdown_s: Callable[[N], float] | None, executor: Executor,
               interrupts: _QuietInterrupts | None) -> None:
    """``shutdown(node, executor)`` under a deadline of its own bound (how long the node's
    settings say it takes, read now) plus ``SHUTDOWN_DEADLINE_S``, counted from now (a
    signal during it does not shorten it); what it raises logged on the node, never
    raised."""
    seconds = SHUTDOWN_DEADLINE_S + (shutdown_s(node) if shutdown_s is not None else 0.0)
    if interrupts is not None:
        interrupts.arm(seconds)
    try:
        shutdown(node, executor)
    except Exception as err:  # noqa: BLE001 - best effort on the way out
        node.get_logger().error(f'shutdown failed: {err!r}')

