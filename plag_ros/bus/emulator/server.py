"""The emulated servo bus on a pseudo-terminal, in real time.

A client opens the pty's slave side (``/dev/pts/N``, or a short symlink to it) as it would
open ``/dev/ttyUSB0`` of a U2D2: ROBOTIS' ``dynamixel-sdk``, the CRANE-X7's
``crane_x7_control`` or any other Dynamixel client. The baud rate it sets does not matter on
a pty (3 Mbit/s is accepted like any other).

One loop does everything, so a reply never waits for another thread: it waits on the pty
until the next physics step is due, answers what came meanwhile from the state of the last
step (after each servo's Return Delay Time), and steps the physics of the bus's arm every
``dt`` of wall time. A step that comes late takes the time it missed (the physics splits it
into substeps of ``dt``: it runs faster than real time), up to ``max_catch_up`` (two steps by
default); beyond that the catch-up is bounded: the rest is skipped, simulated time falls
behind wall time for good (the simulated arm runs slow) and the schedule restarts from now.
Such a late step is never silent: it is counted (:attr:`PtyBus.late_steps`, the shortfall in
:attr:`PtyBus.dropped_s`, the worst lag in :attr:`PtyBus.largest_lag`) and logged with its
lag, at most once every :data:`~plag_ros.core.common.rejections.LOG_THROTTLE_S` seconds (the
Python logger ``plag_ros.bus.emulator.server``, or the ``log`` given).

In lockstep (``lockstep=`` a control period) the physics does not follow the wall clock: it
advances one control period, in steps of at most ``dt``, each time a client's group read
(SYNC READ or BULK READ, a driver's once-a-cycle read) comes, and then answers it. A client
that cycles on a simulated clock advanced by the same period then sees the arm it would see
in real time with no jitter at all, however slow or busy the machine: what a test of a
control law's effect needs. Time between the read and the next one's arrival does not exist
for the physics (a mode switch's torque-off window lasts no simulated time), and the
servos' Bus Watchdog, which counts simulated time, expires only when one period is longer
than it: a stalled client stalls the physics too.

Facts about clients on a pty (read in dynamixel-sdk 4.1.0 from PyPI, ``port_handler.py``;
the same in DynamixelSDK's C++ ``port_handler_linux.cpp``, humble 0d3403df): the SDK flushes
its input before every instruction and reopens the port on every ``setBaudRate``, and a pty
master reads EIO while no slave is open, so the server keeps a slave descriptor of its own.
The C++ handler copies the device path into a 100-byte buffer: keep link paths short.
"""
from __future__ import annotations

import array
import errno
import functools
import logging
import math
import os
import pty
import select
import termios
import time
import tty
from collections.abc import Callable
from pathlib import Path

from plag_ros.bus.emulator.arm import BusArm
from plag_ros.core.common.rejections import LOG_THROTTLE_S

__all__ = ['PtyBus']

_log = logging.getLogger(__name__)


class PtyBus:
    """The servo bus of ``arm`` on a new pseudo-terminal.

    Args:
        arm: the simulated arm with its servos.
        dt: physics step [s] of wall time.
        link: also reachable at this path (a symlink, replaced if it is one already).
        max_catch_up: the most simulated time [s] one late step may take (default two
            steps: a longer catch-up costs more substeps and falls further behind).
        keep_served: keep :attr:`served` (tests, ``--dynamixel-record``).
        lockstep: None (real time), or the simulated time [s] each group read advances.
        log: where the line about a late step goes (default: this module's logger, at
            warning level).

    Attributes:
        path: the pty's slave device.
        steps: physics steps taken. longest_step: the longest one's wall time [s].
        dropped_s: simulated time not taken because the loop fell behind [s].
        late_steps: steps that came later than ``max_catch_up`` allows to catch up.
        largest_lag: the most a step was behind wall time [s] (how late it came, + dt).
    """

    def __init__(self, arm: BusArm, dt: float = 0.002, link: str | Path | None = None,
                 max_catch_up: float | None = None, keep_served: bool = False,
                 lockstep: float | None = None,
                 log: Callable[[str], object] | None = None) -> None:
        self.arm, self.dt = arm, float(dt)
        if lockstep is not None and not (lockstep > 0.0 and math.isfinite(lockstep)):
            raise ValueError(f'lockstep must be a positive period [s], got {lockstep}')
        self.lockstep = lockstep
        self._owed = 0.0                # lockstep: simulated time not yet stepped [s]
        self.max_catch_up = 2.0 * self.dt if max_catch_up is None else float(max_catch_up)
        self._master, self._slave = pty.openpty()
        tty.setraw(self._slave)
        attrs = termios.tcgetattr(self._slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(self._slave, termios.TCSANOW, attrs)
        os.set_blocking(self._master, False)
        self.path = os.ttyname(self._slave)
        self.link = Path(link) if link else None
        if self.link is not None:
            if self.link.is_symlink():
                self.link.unlink()
            self.link.symlink_to(self.path)
        self.steps = 0
        self.longest_step = 0.0
        self.dropped_s = 0.0
        self.late_steps = 0
        self.largest_lag = 0.0
        self._log = _log.warning if log is None else log
        self._last_log = -math.inf
        self.bytes_in = 0
        self.keep_served = keep_served
        self.served = array.array('q')
        """Pairs (physics steps taken, instructions taken), flat, after each read of the pty
        that held an instruction: which step's state its replies came from."""

    def close(self) -> None:
        """Close the pty (clients see the device go) and remove the link."""
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        if self.link is not None and self.link.is_symlink():
            self.link.unlink()

    def __enter__(self) -> PtyBus:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def serve(self, should_stop: Callable[[], bool],
              on_step: Callable[[BusArm], None] | None = None) -> None:
        """Serve until ``should_stop()`` is true; ``on_step(arm)`` after every physics step."""
        if self.lockstep is not None:
            advance = functools.partial(self._advance, on_step)
            while not should_stop():
                # the timeout only lets should_stop be seen while no client speaks
                ready, _, _ = select.select([self._master], [], [], 0.05)
                if ready:
                    self._answer(advance)
            return
        dt = self.dt
        next_step = time.monotonic() + dt
        while not should_stop():
            now = time.monotonic()
            if now >= next_step:
                late = now - next_step
                take = min(dt + late, self.max_catch_up)
                if take < dt + late:
                    self._late(now, dt + late, take)
                self._step(take, on_step)
                next_step = next_step + dt if late < dt else now + dt
                now = time.monotonic()
            # after every step, before the next: a loop behind on physics still answers
            ready, _, _ = select.select([self._master], [], [], max(0.0, next_step - now))
            if ready:
                self._answer()

    def _late(self, now: float, lag: float, take: float) -> None:
        """Count a step ``lag`` seconds behind wall time that takes ``take`` of it; log it
        unless a late step was logged lately."""
        self.dropped_s += lag - take
        self.late_steps += 1
        self.largest_lag = max(self.largest_lag, lag)
        if now - self._last_log >= LOG_THROTTLE_S:
            self._last_log = now
            self._log(f'emulated bus: physics {lag * 1e3:.1f} ms behind wall time; caught up '
                      f'{take * 1e3:.1f} ms, skipped {(lag - take) * 1e3:.1f} ms '
                      f'({self.late_steps} late steps, {self.dropped_s:.3f} s skipped so far; '
                      f'longest step {self.longest_step * 1e3:.1f} ms)')

    def _step(self, dt: float, on_step: Callable[[BusArm], None] | None) -> None:
        """One physics step of ``dt`` [s], timed and counted; then ``on_step(arm)``."""
        began = time.perf_counter()
        self.arm.step(dt)
        self.longest_step = max(self.longest_step, time.perf_counter() - began)
        self.steps += 1
        if on_step is not None:
            on_step(self.arm)

    def _answer(self, before_group_read: Callable[[], None] | None = None) -> None:
        """Take what the pty holds and write the replies (``before_group_read``: see
        :meth:`BusArm.receive`)."""
        try:
            data = os.read(self._master, 65536)
        except OSError as err:
            if err.errno in (errno.EAGAIN, errno.EIO):
                return
            raise
        self.bytes_in += len(data)
        before = self.arm.chain.instructions
        replies = self.arm.receive(data, before_group_read)
        if self.keep_served and self.arm.chain.instructions != before:
            self.served.extend((self.steps, self.arm.chain.instructions))
        pending = b''                  # replies due at once go out in one write
        for reply in replies:
            if reply.delay > 0.0:
                if pending:
                    self._write(pending)
                    pending = b''
                _sleep(reply.delay)
            pending += reply.packet
        if pending:
            self._write(pending)

    def _advance(self, on_step: Callable[[BusArm], None] | None) -> None:
        """Lockstep: one control period of physics in steps of ``dt`` (a period that is not
        a whole number of steps carries its remainder to the next read)."""
        assert self.lockstep is not None
        self._owed += self.lockstep
        n = max(0, math.floor(self._owed / self.dt + 1e-9))
        for _ in range(n):
            self._step(self.dt, on_step)
        self._owed = max(0.0, self._owed - n * self.dt)

    def _write(self, packet: bytes) -> None:
        view = memoryview(packet)
        while view:
            try:
                sent = os.write(self._master, view)
            except BlockingIOError:
                select.select([], [self._master], [], 0.01)
                continue
            view = view[sent:]


def _sleep(seconds: float) -> None:
    """Wait ``seconds``: a sleep for the bulk, a spin for the last half millisecond (a
    Return Delay Time is 0-508 us)."""
    end = time.perf_counter() + seconds
    if seconds > 0.001:
        time.sleep(seconds - 0.0005)
    while time.perf_counter() < end:
        pass
