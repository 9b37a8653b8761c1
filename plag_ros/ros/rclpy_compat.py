"""The rclpy differences between the ROS 2 releases the nodes run on, in one place.

Supported: Humble (rclpy 3.3), Jazzy (7.1) and Kilted (9.1). What differs for this package:

* **Publisher event callbacks** live in ``rclpy.qos_event`` on Humble and in
  ``rclpy.event_handler`` from Iron on (ros2/rclpy ``humble``: ``rclpy/qos_event.py``; the
  ``jazzy`` and ``kilted`` branches: ``rclpy/event_handler.py``, with ``qos_event`` kept
  as a deprecated alias). :data:`PublisherEventCallbacks` is whichever the running rclpy
  has.
* **``rclpy.try_shutdown``** uninstalls rclpy's signal handlers on Kilted only (ros2/rclpy
  ``kilted``: ``rclpy/__init__.py``); on Humble and Jazzy it shuts the context down and
  leaves rclpy's SIGINT handler installed (``rclpy/utilities.py``). :func:`try_shutdown`
  does both on all three, so a node's own handler is Python's again afterwards, and skips
  the uninstall where rclpy installed nothing: that call is not harmless then (see there).
* **Discovery on this machine only** is ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` from
  Iron on and ``ROS_LOCALHOST_ONLY=1`` on Humble; Jazzy's rcl still honours the old one
  but warns on every process start (``ROS_LOCALHOST_ONLY is deprecated``).
  :func:`localhost_only_environment` gives the one the running release reads.
* **The private wait-set calls** of :mod:`.input_thread`'s opt-in private way
  (``_rclpy.WaitSet`` and ``Subscription.take_message`` from rclpy's C extension, the calls
  ``rclpy.wait_for_message`` makes) are not a public API. :func:`private_wait_set_problem`
  checks the running extension's signatures against the ones read in the three branches'
  sources; the input thread takes that way only when they match, and otherwise its public
  executor way, saying why in the log.
* **An executor a signal cut short** in its constructor prints a traceback at exit:
  ``Executor.__del__`` reads ``_sigint_gc``, the constructor's last attribute (ros2/rclpy
  ``rclpy/executors.py`` on all three branches; a CI run's impedance node printed
  ``AttributeError: 'SingleThreadedExecutor' object has no attribute '_sigint_gc'`` after a
  Ctrl-C during its wait for ``robot_description``). :func:`signals_held` defers the
  signal until the executor is built.

Anything else the package calls exists with the same meaning on all three:
``test/test_rclpy_humble_api.py`` checks every rclpy name the package uses against the
names of Humble's rclpy, recorded from its source in ``test/data/rclpy_humble_api.json``.
"""
from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from types import FrameType

from rclpy.signals import (
    SignalHandlerOptions,
    get_current_signal_handlers_options,
    uninstall_signal_handlers,
)
from rclpy.utilities import try_shutdown as try_shutdown_context

try:   # Iron and later
    from rclpy.event_handler import PublisherEventCallbacks
    IRON_OR_LATER = True
except ImportError:   # Humble
    from rclpy.qos_event import PublisherEventCallbacks
    IRON_OR_LATER = False

__all__ = ['IRON_OR_LATER', 'PublisherEventCallbacks', 'WAIT_SET_SIGNATURES',
           'confine_to_localhost', 'localhost_only_environment', 'private_wait_set_problem',
           'quiet_publisher', 'signals_held', 'try_shutdown']
# IRON_OR_LATER: ``rclpy.event_handler`` and the discovery range both came with Iron.

# The C-extension calls the input thread makes, as (class, method) -> argument types after
# ``self`` and the result type. Identical in ros2/rclpy humble, jazzy and kilted
# (src/rclpy/wait_set.cpp and src/rclpy/subscription.cpp of each branch).
WAIT_SET_SIGNATURES: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ('WaitSet', '__init__'): (('int',) * 6 + ('Context',), 'None'),
    ('WaitSet', 'clear_entities'): ((), 'None'),
    ('WaitSet', 'add_subscription'): (('Subscription',), 'int'),
    ('WaitSet', 'add_guard_condition'): (('GuardCondition',), 'int'),
    ('WaitSet', 'wait'): (('int',), 'None'),
    ('WaitSet', 'get_ready_entities'): (('str',), 'list'),
    ('Subscription', 'take_message'): (('object', 'bool'), 'object'),
}

_SIGNATURE = re.compile(r'^\w+\((?P<args>.*)\)\s*->\s*(?P<result>[\w.\[\], ]+)$')


def _type_name(annotation: str) -> str:
    """'rclpy._rclpy_pybind11.Context' -> 'Context'; 'typing.SupportsInt' -> 'int'."""
    name = annotation.strip().rsplit('.', 1)[-1]
    return {'SupportsInt': 'int', 'SupportsFloat': 'float'}.get(name, name)


def parse_pybind_signature(doc: str | None) -> tuple[tuple[str, ...], str] | None:
    """Argument types after ``self`` and the result type from a pybind11 docstring's first
    line (``name(self: T, arg0: int, ...) -> R``); None when it is not one."""
    if not doc:
        return None
    match = _SIGNATURE.match(doc.strip().splitlines()[0])
    if match is None:
        return None
    args = [a for a in match['args'].split(', ') if a]
    if not args or not args[0].startswith('self'):
        return None
    types = []
    for arg in args[1:]:
        _, _, annotation = arg.partition(':')
        types.append(_type_name(annotation.split('=')[0]))
    return tuple(types), _type_name(match['result'])


def private_wait_set_problem(extension: object | None = None) -> str:
    """'' when rclpy's C extension has the wait-set calls :mod:`.input_thread` makes, with
    the signatures read in the supported releases' sources; else what differs.

    Args:
        extension: the ``_rclpy`` module (default: the one rclpy loaded).
    """
    if extension is None:
        try:
            from rclpy.impl.implementation_singleton import rclpy_implementation as extension
        except ImportError as err:   # pragma: no cover - rclpy itself is missing
            return f'rclpy C extension not importable ({err})'
    for (cls_name, method), (want_args, want_result) in WAIT_SET_SIGNATURES.items():
        cls = getattr(extension, cls_name, None)
        call = getattr(cls, method, None) if cls is not None else None
        if call is None:
            return f'_rclpy.{cls_name}.{method} does not exist'
        got = parse_pybind_signature(getattr(call, '__doc__', None))
        if got is None:
            return f'_rclpy.{cls_name}.{method} has no signature to check'
        if got != (want_args, want_result):
            return (f'_rclpy.{cls_name}.{method}{got[0]} -> {got[1]}, expected '
                    f'{want_args} -> {want_result}')
    return ''


def quiet_publisher(node, msg_type, topic: str, qos):
    """``node.create_publisher`` without rclpy's default QoS event handlers.

    Each default handler joins the executor's wait set, which is rebuilt per callback: with
    ~20 outputs that cost ~1 ms per joint state, half the CPU at 200 Hz. Keep the defaults
    on the one or two topics where a QoS mismatch must still be reported.
    """
    return node.create_publisher(
        msg_type, topic, qos,
        event_callbacks=PublisherEventCallbacks(use_default_callbacks=False))


def try_shutdown() -> None:
    """Shut the default context down if it is up, and uninstall rclpy's signal handlers
    if rclpy installed any (what ``rclpy.try_shutdown`` does on Kilted; Humble's and
    Jazzy's leave them).

    A process that handles SIGINT itself (``SignalHandlerOptions.NO``) must not call
    rclpy's uninstall: in C it first puts back the handler it saved at install, which is
    none, i.e. ``SIG_DFL``, and only then sees that the handler it replaced was not its own
    and restores that (``unregister_sigint_signal_handler`` in ``src/rclpy/
    signal_handler.cpp``, the same on the humble, jazzy and rolling branches). The second
    Ctrl-C that ``ros2 launch`` sends after the terminal's, arriving in between, ended the
    impedance node with -SIGINT in CI.
    """
    installed = get_current_signal_handlers_options() != SignalHandlerOptions.NO
    try_shutdown_context()
    if installed:
        uninstall_signal_handlers()


@contextmanager
def signals_held() -> Iterator[None]:
    """Run the block with SIGINT and SIGTERM held back, then hand each one that came
    meanwhile to the handler in place before (which may raise ``KeyboardInterrupt`` out of
    the ``with``, after the block's assignments: an executor built inside is whole and
    can be shut down by the caller's clean-up).

    Held by swapping Python's handlers, not by a signal mask: a signal blocked in the main
    thread is delivered to another thread (DDS has several) and Python still runs its
    handler in the main thread. Only a signal whose handler is a Python function is held;
    one left at its default action or to rclpy's handler is not (installed in C, it is
    invisible to ``signal.getsignal`` and a swap would drop it for good), nor anything off
    the main thread (Python runs handlers there only).
    """
    rclpy_has = get_current_signal_handlers_options().name   # NO, SIGINT, SIGTERM or ALL
    on_main = threading.current_thread() is threading.main_thread()
    held: dict[int, Callable[[int, FrameType | None], object]] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if on_main and rclpy_has not in ('ALL', sig.name) and callable(handler):
            held[sig] = handler
    came: list[int] = []
    for signum in held:
        signal.signal(signum, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
        raised: BaseException | None = None
        for signum in came:     # each one, as it would have been: a count stays right
            try:
                held[signum](signum, None)
            except BaseException as err:  # noqa: BLE001 - raised below, the first one
                raised = raised or err
        if raised is not None:
            raise raised


def localhost_only_environment() -> dict[str, str]:
    """The environment that limits DDS discovery to this machine on the running release
    (set both and Jazzy warns at every start; set only the new one and Humble ignores it)."""
    if IRON_OR_LATER:
        return {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST'}
    return {'ROS_AUTOMATIC_DISCOVERY_RANGE': 'LOCALHOST', 'ROS_LOCALHOST_ONLY': '1'}


def confine_to_localhost(env: MutableMapping[str, str]) -> dict[str, str]:
    """Limit DDS discovery in ``env`` (``os.environ`` or a child's environment) to this
    machine, dropping ``ROS_LOCALHOST_ONLY`` where the release would warn on it; returns
    the variables set."""
    localhost = localhost_only_environment()
    if 'ROS_LOCALHOST_ONLY' not in localhost:
        env.pop('ROS_LOCALHOST_ONLY', None)
    env.update(localhost)
    return localhost
