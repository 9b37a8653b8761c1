"""The bus loop in a process of its own: nothing the ROS node runs can stall the servos.

``plag_driver`` ran its bus loop on a thread of the node's process, under one GIL with the
rclpy executor, its publishers and its garbage collector: a stall there (a burst of
callbacks, a collection, the process stopped) stopped the cycle too, and past the Bus
Watchdog (0.1 s) a servo in current mode makes no torque. Here the loop (open, sync read,
envelope, sync write at ``rate_hz``, :class:`~plag_ros.bus.host.driver.BusDriver`) runs in
a child process, ``python -m plag_ros.bus.host.loop_process``, with one thread; the node
talks to it through two Unix SOCK_SEQPACKET socket pairs (one message per record, kept
whole):

* calls, node to loop, each answered: the commands, mode requests, fault clears and the
  stop. The loop serves them between its cycles, while it waits for the next one;
* records, loop to node, never waited for: each reading, the state (modes, fault,
  counts, command delay) on a change and :data:`STATE_EVERY_S` besides, log lines and the
  close. The loop sends them without blocking: a node that does not read (stopped,
  stalled) loses records, counted in ``dropped_records``, and never holds up a cycle.

What ends the loop, and what it leaves:

* the ``stop`` call (the node's shutdown), the node's death however it died (SIGKILL too:
  its end of the call socket closes, and the loop checks its parent's pid every cycle),
  or SIGTERM to the loop itself: joints in current mode go to the position hold through
  the cycle (at most :data:`HOLD_WAIT_S`), then :meth:`BusDriver.close` holds every joint
  and puts the settings back. SIGINT is ignored: a Ctrl-C at a terminal reaches the whole
  process group, and the node decides when its bus closes;
* a SIGKILL of the loop itself: nothing runs any more, and the servos' Bus Watchdog stops
  them (in current mode the arm falls: ``docs/concepts/torque-mode.md``'s checklist). The
  node sees the loop's end (:class:`BusLoopProcess`), says so as its fault and starts a
  new loop, which opens the bus holding the present pose with that fault latched.
"""
from __future__ import annotations

import contextlib
import errno
import math
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.host.driver import BusDriver, BusError, DriverSettings

if TYPE_CHECKING:
    from plag_ros.core.dynamics.model import RobotModel

__all__ = ['CALLS', 'BusLoopProcess', 'DriverRecipe', 'LoopLink', 'call_message', 'closed_text',
           'ended_text', 'run_loop']

STATE_EVERY_S = 0.2
"""[s] the loop's state record at least this often (the node publishes it once a second)."""
OPEN_EVERY_S = 1.0
"""[s] a bus that does not open is tried again this often."""
HOLD_WAIT_S = 1.0
"""[s] at a stop, the longest the cycle runs on for the current-mode joints' hold."""
STOP_WAIT_S = HOLD_WAIT_S + 4.0
"""[s] the node's longest wait for the loop's end at a stop: the hold, then the close (a
sync write, every servo's settings put back and read back, a retry each)."""
CALL_TIMEOUT_S = 1.0
"""[s] the node's longest wait for a call's answer (the loop answers between cycles)."""
RESTART_AFTER_S = 0.2
"""[s] a loop that ended on its own is started again after this long (its start, Python's
and numpy's import, takes about 1.5 s more: a loop that dies at once is not restarted in a
tight loop)."""
NODE_GONE = 'the node is gone'
_PEER_GONE = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})
LATE_MARGIN_S = 0.2
"""[s] a call that reaches the loop with less than this left before its deadline is
refused: its answer must reach the node before the node gives up, or a call the node took
for failed would have acted."""
SERVE_SLACK_S = 0.001
"""[s] past a cycle's deadline the loop answers the calls waiting for at most this long,
then cycles: a burst of calls cannot hold a cycle back."""
MESSAGE_BYTES = 1 << 18
"""[bytes] the receive buffer: more than the largest message a Unix socket takes without
privileges (its send buffer, ``net.core.wmem_max``, 208 KiB by default), so none is cut."""
MAX_CALL_BYTES = 200_000
"""[bytes] a call larger than this is refused by the node (a trajectory of about 2 600
points of 7 joints): larger ones would not fit the socket."""
_TEXT_CHARS = 1500           # a fault or log text longer than this is cut in a record
CALLS = frozenset({'command_effort', 'command_positions', 'command_trajectory',
                   'request_mode', 'clear_fault'})
"""The :class:`BusDriver` methods the node may call; ``stop`` ends the loop."""


@dataclass(frozen=True)
class DriverRecipe:
    """What the loop builds its :class:`BusDriver` from; pickled to the loop process.

    Attributes:
        config: the servo chain. settings: the bus's settings.
        model: the robot model whose gravity torque a switch and a hold use (None: none).
        torque_calibration: (8,) factors on the torque constants, or None.
        arm_joints: the joints that may go to current mode (None: all but the last).
    """

    config: BusConfig
    settings: DriverSettings
    model: RobotModel | None = None
    torque_calibration: tuple[float, ...] | None = None
    arm_joints: tuple[str, ...] | None = None

    def build(self, *, gravity: bool = True) -> BusDriver:
        """The driver (no port opened). ``gravity`` False leaves the model out: the
        node's check of the settings, which never drives the bus.

        Raises:
            ValueError: bad settings, or a model without a joint of the chain.
        """
        from plag_ros.bus.host.driver import gravity_in_chain_order

        joints = [s.joint for s in self.config.servos]
        g = (gravity_in_chain_order(self.model, joints)
             if gravity and self.model is not None else None)
        return BusDriver(self.config, self.settings, torque_calibration=self.torque_calibration,
                         gravity=g, arm_joints=self.arm_joints)


def call_message(call_id: int, name: str, args: tuple, deadline: float = math.inf) -> bytes:
    """One call as it goes to the loop: ``name`` (one of :data:`CALLS`, or ``stop``) with
    ``args``, refused by the loop after the monotonic ``deadline`` [s] (a stop never is)."""
    return pickle.dumps((call_id, name, args, deadline), pickle.HIGHEST_PROTOCOL)


def closed_text(held: bool | None, why: str) -> tuple[str, str]:
    """(log level, text) of a ``closed`` record (:class:`BusLoopProcess`)."""
    if held:
        return 'info', 'bus closed: every joint holds its pose in position mode'
    if held is None:
        return 'info', f'the bus loop ended before the bus opened ({why})'
    return 'error', f'closing the bus: {why}; the Bus Watchdog stops the servos'


def ended_text(code: int | str | None, restarting: bool, held: bool | None) -> str:
    """The fault an ``ended`` record is said as, while the node is not stopping."""
    return (f'the bus loop process ended (exit code {code}), '
            + ('after holding the arm' if held else
               'without a close: the servos are left to their Bus Watchdog')
            + ('; starting it again' if restarting else
               '; not started again (it was asked to end): restart plag_driver'))


def _text(value: str) -> str:
    return value if len(value) <= _TEXT_CHARS else value[:_TEXT_CHARS] + ' [...]'


class LoopLink:
    """The loop's side of the two sockets: answers calls, sends records without blocking.

    Args:
        calls: the call socket (SOCK_SEQPACKET). records: the record socket.
        parent_pid: the node's pid (None: not checked): a loop whose parent changed
            (reparented: the node died) stops.
    """

    def __init__(self, calls: socket.socket, records: socket.socket,
                 parent_pid: int | None = None) -> None:
        self.calls, self.records, self.parent_pid = calls, records, parent_pid
        self.dropped = 0            # records a full socket refused (the node not reading)
        self.malformed = 0          # calls that could not be read
        self._buffer = bytearray(MESSAGE_BYTES)
        self._view = memoryview(self._buffer)
        self.stop_asked = False     # the stop call, SIGTERM or the node's death
        self.why_stopped = ''

    def send(self, *record: Any) -> None:
        """One record to the node; dropped (counted) where its socket is full."""
        try:
            self.records.send(pickle.dumps(record, pickle.HIGHEST_PROTOCOL),
                              socket.MSG_DONTWAIT)
        except OSError as err:
            if err.errno in _PEER_GONE:
                self.stop(NODE_GONE)
            else:                    # full (EAGAIN), short of memory (ENOBUFS): dropped
                self.dropped += 1

    def say(self, text: str) -> None:
        """Tell the node's log; straight to stderr (the node's, inherited) once the node
        is gone, where its launch or its log file still shows it."""
        if self.why_stopped == NODE_GONE:
            with contextlib.suppress(OSError):     # the node's stderr may be gone with it
                print(f'[plag_driver bus loop {os.getpid()}] {text}', file=sys.stderr,
                      flush=True)
        else:
            self.send('log', 'info', _text(text))

    def stop(self, why: str) -> None:
        if not self.stop_asked:
            self.stop_asked, self.why_stopped = True, why

    def parent_alive(self) -> bool:
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            self.stop(NODE_GONE)
        return not self.stop_asked

    def serve(self, driver: BusDriver, until: float, clock: Callable[[], float]) -> bool:
        """Answer the node's calls until monotonic ``until`` (those waiting at least once);
        False once the loop should stop."""
        while not self.stop_asked and clock() < until + SERVE_SLACK_S:
            try:
                ready, _, _ = select.select([self.calls], [], [], max(until - clock(), 0.0))
            except OSError:
                ready = [self.calls]           # a closed socket: the recv says so
            if not ready:
                break
            try:
                size = self.calls.recv_into(self._buffer)
            except OSError:
                size = 0
            if not size:
                self.stop(NODE_GONE)
                break
            try:
                call_id, name, args, deadline = pickle.loads(self._view[:size])
            except Exception:  # noqa: BLE001 - a malformed call: dropped, the loop lives
                self.malformed += 1
                continue
            if name == 'stop':
                self.stop('stop asked')
                self._answer(call_id, True, None)
                break
            if name not in CALLS:
                self._answer(call_id, False, f'no such call {name!r}')
                continue
            if clock() > deadline - LATE_MARGIN_S:    # never done after its caller gave up
                self._answer(call_id, False, f'{name} came after its caller gave up')
                continue
            try:
                self._answer(call_id, True, getattr(driver, name)(*args))
            except Exception as err:  # noqa: BLE001 - a bug in a call: told, the loop lives
                self._answer(call_id, False, repr(err))
        return not self.stop_asked

    def _answer(self, call_id: int, ok: bool, value: Any) -> None:
        try:
            self.calls.send(pickle.dumps((call_id, ok, value), pickle.HIGHEST_PROTOCOL),
                            socket.MSG_DONTWAIT)
        except OSError as err:
            if err.errno in _PEER_GONE:
                self.stop(NODE_GONE)
            else:                    # the node no longer waits for it: its call timed out
                self.dropped += 1


def _state(driver: BusDriver, link: LoopLink, cycle_errors: int, not_open: str = ''
           ) -> dict[str, Any]:
    return {'modes': list(driver.modes), 'fault': _text(driver.fault),
            'not_open': _text(not_open), 'counts': dict(driver.counts),
            'cycle_errors': cycle_errors, 'dropped_records': link.dropped,
            'command_delay': driver.command_delay(), 'is_open': driver.is_open,
            'pid': os.getpid()}


def run_loop(driver: BusDriver, link: LoopLink, rate_hz: float, *, initial_fault: str = '',
             clock: Callable[[], float] = time.monotonic) -> None:
    """Open the bus (tried again every :data:`OPEN_EVERY_S` until it answers), cycle it at
    ``rate_hz`` serving the node's calls between cycles, and at the stop hold and close
    (module docstring). ``initial_fault``: latched once the bus is open (a loop started
    again after one that died). An exception out of a cycle is a fault that holds the arm,
    counted in ``cycle_errors`` and logged once per kind; one out of the loop's own code (a
    bug) ends it, after the hold and the close."""
    driver.log = lambda text: link.send('log', 'warning', _text(text))
    said = ''
    while link.serve(driver, clock(), clock) and link.parent_alive():   # a stop first
        try:
            reading = driver.open()
            break
        except Exception as err:  # noqa: BLE001 - BusError, or a bug: the loop lives
            why = str(err) if isinstance(err, BusError) else repr(err)
            if why != said:
                said = why
                link.send('log', 'error', _text(f'{why}; trying again every second'))
            link.send('state', _state(driver, link, 0, why))
            link.serve(driver, clock() + OPEN_EVERY_S, clock)
    else:
        link.send('closed', None, link.why_stopped)
        return
    if initial_fault:
        driver.fault = initial_fault
    link.send('log', 'info', f'bus open: servos {driver.ids} hold their pose in position mode')
    link.send('state', _state(driver, link, 0))
    link.send('reading', reading)
    period = 1.0 / rate_hz
    try:
        _cycle(driver, link, period, clock)
    finally:            # a stop, the node gone, or a bug out of the loop's own code
        _hold_and_close(driver, link, period, clock)


def _cycle(driver: BusDriver, link: LoopLink, period: float,
           clock: Callable[[], float]) -> None:
    """Cycle the open bus, serving the node's calls between cycles, until the stop."""
    deadline, state_at, key, cycle_errors = clock(), clock(), None, 0
    failures: set[str] = set()
    while link.parent_alive():
        try:
            reading = driver.cycle()
        except Exception as err:  # noqa: BLE001 - the loop must outlive any cycle
            reading = None
            cycle_errors += 1
            driver.fail_safe(f'bus cycle failed: {err!r}')
            if repr(err) not in failures:    # once per kind: no log flood at 200 Hz
                failures.add(repr(err))
                link.send('log', 'error', _text(f'bus cycle failed: {err!r} (a fault: the '
                                                'arm holds in position mode; counted)'))
        if reading is not None:
            link.send('reading', reading)
        now = clock()
        if (tuple(driver.modes), driver.fault) != key or now - state_at >= STATE_EVERY_S:
            key, state_at = (tuple(driver.modes), driver.fault), now
            link.send('state', _state(driver, link, cycle_errors))
        deadline += period
        if deadline < now:
            deadline = now                # late: start again from now, do not burst
        link.serve(driver, deadline, clock)


def _hold_and_close(driver: BusDriver, link: LoopLink, period: float,
                    clock: Callable[[], float]) -> None:
    """The stop: current-mode joints to the position hold through the cycle (a loop that
    stopped first would leave them silent until their Bus Watchdog takes their torque),
    then :meth:`BusDriver.close`."""
    if 'current' in driver.modes:
        driver.request_mode('position')
        end = clock() + HOLD_WAIT_S
        while 'current' in driver.modes and clock() < end:
            try:
                driver.cycle()
            except Exception as err:  # noqa: BLE001 - as in run_loop
                driver.fail_safe(f'bus cycle failed: {err!r}')
            time.sleep(period)
    try:
        driver.close()
        link.send('closed', True, '')
        if link.why_stopped == NODE_GONE:          # (after the close: stderr may block)
            link.say('the node is gone: the bus closed, every joint holding its pose in '
                     'position mode')
    except Exception as err:  # noqa: BLE001 - told; the Bus Watchdog stops the servos
        why = _text(str(err) if isinstance(err, BusError) else repr(err))
        link.send('closed', False, why)
        if link.why_stopped == NODE_GONE:
            link.say(f'closing the bus: {why}; the Bus Watchdog stops the servos')


class BusLoopProcess:
    """The node's handle on the loop process: starts it (and again after it ends on its
    own), calls into it, and hands each record to a callback on a thread of its own.

    Args:
        recipe: the driver to build there. rate_hz: the loop's rate [Hz].
        on_record: ``(kind, payload)`` per record: ``reading`` (:class:`Reading`),
            ``state`` (dict), ``log`` ((level, text)), ``closed`` ((held, text): True
            when :meth:`BusDriver.close` held the arm, False with why not, None with why
            the loop ended before the bus opened), ``ended`` (the loop's exit: (code,
            restarting, held as in ``closed``, None without a close).
    """

    def __init__(self, recipe: DriverRecipe, rate_hz: float,
                 on_record: Callable[[str, Any], None]) -> None:
        self.recipe, self.rate_hz, self.on_record = recipe, rate_hz, on_record
        self.process: subprocess.Popen | None = None
        self._calls: socket.socket | None = None
        self._call_lock = threading.Lock()
        self._call_id = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self.restarts = 0
        self.callback_errors = 0
        self._answer_buffer = bytearray(MESSAGE_BYTES)
        self._not_started = ''

    @property
    def pid(self) -> int | None:
        """The loop process's pid (None before the start)."""
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the loop process and the thread that reads its records."""
        records = self._spawn('')
        self._thread = threading.Thread(target=self._read, args=(records,),
                                        name='plag_driver_records', daemon=True)
        self._thread.start()

    def _spawn(self, initial_fault: str) -> socket.socket | None:
        """A new loop process; its record socket (None: it could not be started, said as
        an ``ended`` record)."""
        made: list[socket.socket] = []
        try:
            calls, their_calls = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            made += [calls, their_calls]
            records, their_records = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            made += [records, their_records]
            fds = (their_calls.fileno(), their_records.fileno())
            process = subprocess.Popen(
                [sys.executable, '-m', 'plag_ros.bus.host.loop_process', *map(str, fds)],
                stdin=subprocess.PIPE, pass_fds=fds,
                # a session of its own: the terminal's Ctrl-Z, Ctrl-\ and hang-up, and a
                # signal to the node's process group, do not stop it without a hold; the
                # node's death it sees by itself
                start_new_session=True)
            assert process.stdin is not None
            with process.stdin:
                process.stdin.write(pickle.dumps((self.recipe, self.rate_hz, initial_fault,
                                                  os.getpid())))
            their_calls.close()
            their_records.close()
        except Exception as err:  # noqa: BLE001 - said as the exit; the reading thread tries again
            self._not_started = repr(err)
            for each in made:
                each.close()
            return None
        with self._call_lock:
            if self._calls is not None:
                self._calls.close()           # the ended loop's
            self.process, self._calls = process, calls
            if self._stopping.is_set():       # a stop that came while this one started
                with contextlib.suppress(OSError):
                    self._send(calls, 'stop', (), math.inf)
        return records

    def _read(self, records: socket.socket | None) -> None:
        buffer = bytearray(MESSAGE_BYTES)
        view = memoryview(buffer)
        while True:
            held: bool | None = None
            code: int | str | None = None
            while records is not None:
                try:
                    size = records.recv_into(buffer)
                except OSError:
                    size = 0
                if not size:
                    break
                try:
                    kind, *payload = pickle.loads(view[:size])
                except Exception:  # noqa: BLE001 - cannot happen from the loop; counted
                    self.callback_errors += 1
                    continue
                if kind == 'closed':
                    held = payload[0]
                self._hand_on(kind, payload[0] if len(payload) == 1 else tuple(payload))
            if records is not None:
                records.close()
                assert self.process is not None
                code = self.process.wait()
            else:
                code = f'none: it did not start: {self._not_started}'
            # exit 0: it was asked to end (the stop call, SIGTERM) and did, holding
            restarting = not self._stopping.is_set() and code != 0
            self._hand_on('ended', (code, restarting, held))
            if not restarting or self._stopping.wait(
                    RESTART_AFTER_S if records is not None else OPEN_EVERY_S):
                return
            self.restarts += 1
            records = self._spawn(f'the bus loop process ended (exit code {code}); started '
                                  'again, holding the present pose')

    def _hand_on(self, kind: str, payload: Any) -> None:
        try:
            self.on_record(kind, payload)
        except Exception as err:  # noqa: BLE001 - the reading thread outlives a callback
            self.callback_errors += 1
            if self.callback_errors == 1:
                print(f'plag_driver: a bus loop record ({kind}) raised {err!r} in its '
                      'callback (counted, said once)', file=sys.stderr, flush=True)

    def _send(self, calls: socket.socket, name: str, args: tuple, deadline: float) -> int:
        """Send one call (never waiting: a loop that takes no calls refuses it); its id."""
        self._call_id += 1
        data = call_message(self._call_id, name, args, deadline)
        if len(data) > MAX_CALL_BYTES:
            raise ValueError(f'{name}: {len(data)} bytes, more than a call may carry '
                             f'({MAX_CALL_BYTES})')
        calls.send(data, socket.MSG_DONTWAIT)
        return self._call_id

    def call(self, name: str, *args: Any, timeout: float = CALL_TIMEOUT_S
             ) -> tuple[bool, Any]:
        """Call the loop's driver: (True, its return value), or (False, why not: no loop,
        a call too large, no answer within ``timeout`` [s], or the call raised there). A
        call not answered in time is not done later: it carries its deadline, and the loop
        refuses it once past."""
        with self._call_lock:
            calls = self._calls
            if calls is None:
                return False, 'the bus loop is not running'
            end = time.monotonic() + timeout
            try:
                call_id = self._send(calls, name, args, end)
                poller = select.poll()
                poller.register(calls, select.POLLIN)
                while True:
                    ready = poller.poll(max(end - time.monotonic(), 0.0) * 1e3)
                    if not ready:
                        return False, f'the bus loop did not answer {name} in {timeout:g} s'
                    size = calls.recv_into(self._answer_buffer)
                    if not size:
                        return False, 'the bus loop ended'
                    answer_id, ok, value = pickle.loads(memoryview(self._answer_buffer)[:size])
                    if answer_id == call_id:     # (an answer to a call that timed out: left)
                        return ok, value
            except ValueError as err:
                return False, str(err)
            except BlockingIOError:
                return False, f'the bus loop takes no calls (its queue is full): {name} refused'
            except OSError as err:
                return False, f'the bus loop is gone: {err}'

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping.is_set()

    def stop(self, timeout: float = 0.0) -> bool:
        """Ask the loop to hold and close, and wait for it; False if it had not ended
        within ``timeout`` [s] (it is left running: it closes the bus when it sees that
        this process is gone). Once more: waits again."""
        if not self._stopping.is_set():
            self._stopping.set()
            self.call('stop')
        if self._thread is not None:
            self._thread.join(timeout)
        return not self.alive()


def main(argv: list[str] | None = None) -> int:
    """The loop process: argv = the call and record sockets' descriptors; the recipe, the
    rate, the fault to latch and the node's pid come pickled on stdin."""
    calls_fd, records_fd = (int(a) for a in (argv or sys.argv[1:])[:2])
    recipe, rate_hz, initial_fault, parent_pid = pickle.loads(sys.stdin.buffer.read())
    link = LoopLink(socket.socket(fileno=calls_fd), socket.socket(fileno=records_fd),
                    parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: link.stop('SIGTERM'))
    try:
        driver = recipe.build()
    except Exception as err:  # noqa: BLE001 - told to the node, which says so as its fault
        link.send('log', 'error', _text(f'the bus loop cannot build its driver: {err!r}'))
        return 2
    import gc
    gc.collect()
    gc.freeze()              # what the loop made so far is never collected in a cycle
    run_loop(driver, link, rate_hz, initial_fault=initial_fault)
    return 0


if __name__ == '__main__':
    sys.exit(main())
