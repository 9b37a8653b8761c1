"""The host's side of the CRANE-X7's servo bus: one sync read and one sync write a cycle,
position (3) or current (0) mode per joint, and the safety rules of torque mode.

This is the bus half of ``plag_driver`` (:mod:`plag_ros.ros.nodes.driver_node`), without
ROS: it speaks to the servos through ROBOTIS' ``dynamixel-sdk`` (PyPI), so it runs against
the real arm and against the emulated chain (:mod:`plag_ros.bus.emulator.server`) alike. Register
addresses, units and rules are the e-manual's (the sources are in ``tables/*.yaml`` and
``docs/concepts/servo-bus.md``); what the robot's own driver does on the bus is recorded in
``test/data/dynamixel/crane_x7_control_sequence.yaml``.

One cycle (:meth:`BusDriver.cycle`):

1. SYNC READ of 14 bytes at Indirect Data 1 (224): Torque Enable, Hardware Error Status,
   Bus Watchdog, Present Current, Present Velocity, Present Position, Present Temperature
   (:data:`READ_ITEMS`).
2. The checks: a failed read counts, and :attr:`DriverSettings.failed_reads` in a row are a
   fault; a Hardware Error Status other than 0, a servo whose torque went off, an expired
   Bus Watchdog (the host stalled), a servo near its Temperature Limit and, for the joints
   in current mode, the envelope (:mod:`plag_ros.bus.host.envelope`) are faults.
   Nothing is written from a failed read.
3. A pending mode change (:meth:`BusDriver.request_mode`): torque off, Operating Mode,
   the first goal (the gravity torque of the present pose as current, or the present
   position), the gains the mode change reset, torque on: sync writes in one burst, so the
   torque is off for well under one cycle.
4. SYNC WRITE of 6 bytes at Indirect Data 15 (238): Goal Current and Goal Position
   (:data:`WRITE_ITEMS`). Position joints get their command (clipped to the position
   limits); current joints get the effort command over the torque constant. An effort
   command that is stale, not finite, beyond the joint's torque limit or a step beyond the
   envelope is a fault; :attr:`DriverSettings.failed_writes` failed writes in a row too.
5. After a switch, the switched servos' Operating Mode read back: a sync write has no
   answer, and one lost on the wire is found here.

A fault is latched (:attr:`BusDriver.fault`): every joint in current mode goes to position
mode holding the pose it has (after a failed bus, the last pose read), the position joints
stop where they are, and current mode and position commands are refused until
:meth:`BusDriver.clear_fault`. A servo found with its torque off, or left half switched by
a failed write, is brought back to a position hold (all at once, then one by one with
acknowledged writes); one that cannot be (a shutdown error: only a reboot clears it) is
named ``off``. While the driver runs, the Bus Watchdog (98) of every servo is armed
(:attr:`DriverSettings.watchdog_s`), so a dead or frozen host stops the servos: in position
mode they hold where they are; in current mode their current goes to 0 (the e-manual's
"stops"; free, in the CRANE-X7 maker's words), which is why torque mode needs someone at
the power switch. :meth:`BusDriver.close` holds every joint in position mode at its present
pose, puts back the RAM items :meth:`BusDriver.open` changed and reads every servo back:
the torque stays on.

Size (over ~600 lines): the bus's start, cycle, mode switches and faults share one state
(modes, hold goals, the latched fault) that each rule reads; split, every part would
reach into the others.
"""
from __future__ import annotations

import collections
import contextlib
import fcntl
import functools
import math
import os
import termios
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.control_table import CURRENT_UNIT, HOME_COUNT, VELOCITY_UNIT, WATCHDOG_UNIT
from plag_ros.bus.host.envelope import Envelope
from plag_ros.core.common.options import group, inline, option, options
from plag_ros.core.control.settings import EFFORT_CONTROLLER
from plag_ros.core.dynamics.description import DescriptionSettings
from plag_ros.core.dynamics.model_parameters import ModelSettings
from plag_ros.core.dynamics.motors import MOTORS, PULSE_RAD, Motor

if TYPE_CHECKING:
    from plag_ros.core.dynamics.model import RobotModel

__all__ = ['DRIVER_NODE_OPTIONS', 'DRIVER_OPTIONS', 'EFFORT_CONTROLLER', 'MODES',
           'READ_ITEMS', 'WRITE_ITEMS', 'BusDriver', 'BusError', 'DriverNodeSettings',
           'DriverSettings', 'Reading', 'claim_port', 'gravity_in_chain_order',
           'hardware_error_text']

MODES = {'current': 0, 'position': 3}
"""Operating Mode (11) values the driver uses."""
COMMAND_DELAY_WINDOW = 1000
"""Effort commands whose delay :meth:`BusDriver.command_delay` summarises (5 s at 200 Hz)."""
MISSED_RUN = 2
"""Writes again of one command, no newer one having come, that count as missed commands in
``repeated_share``; a longer run is a stalled controller (the stale limit's to end)."""
READ_ITEMS = (('Torque Enable', 64, 1), ('Hardware Error Status', 70, 1),
              ('Bus Watchdog', 98, 1), ('Present Current', 126, 2),
              ('Present Velocity', 128, 4), ('Present Position', 132, 4),
              ('Present Temperature', 146, 1))
"""What the cycle's sync read brings, in Indirect Data order (14 bytes from 224)."""
ROW = {name: j for j, (name, _, _) in enumerate(READ_ITEMS)}
"""Column of each item of :data:`READ_ITEMS` in a row of the cycle's read."""
WRITE_ITEMS = (('Goal Current', 102, 2), ('Goal Position', 116, 4))
"""What the cycle's sync write sets, in Indirect Data order (6 bytes after the read's)."""
INDIRECT_ADDRESS_1, INDIRECT_DATA_1 = 168, 224
READ_LENGTH = sum(size for _, _, size in READ_ITEMS)
WRITE_LENGTH = sum(size for _, _, size in WRITE_ITEMS)
WRITE_AT = INDIRECT_DATA_1 + READ_LENGTH
SLOTS = READ_LENGTH + WRITE_LENGTH
# RAM items open() changes and close() puts back as open() found them (the P gain no lower
# than the hold needs), besides the indirect addresses: (name, address, size). The EEPROM
# items stay as open() wrote them, and the Bus Watchdog is left off (close()).
PUT_BACK = (('Position D Gain', 80, 2), ('Position I Gain', 82, 2),
            ('Position P Gain', 84, 2), ('Profile Acceleration', 108, 4),
            ('Profile Velocity', 112, 4))
USB_SERIAL_DEVICES = Path('/sys/bus/usb-serial/devices')
TEMPERATURE_LIMIT = ('Temperature Limit', 31, 1)
HOLD_TRIES = 3
"""Tries of each acknowledged write when a servo is brought back to a hold."""
MAP_AGAIN_EVERY_S = 1.0
"""[s] between two tries at mapping again a servo whose mapping did not take and whose
torque has stayed off since: each try is two bursts and two read-backs on the cycle's time,
and one that keeps failing (its writes lost) must not take every cycle nor log in each. A
servo read with its torque on in between (the fault's hold took it) is mapped at once when
it is found with its torque off again (a new reboot)."""
OPEN_EEPROM = {9: 1, 11: 1, 38: 2}
"""Return Delay Time, Operating Mode and Current Limit: the EEPROM items
:meth:`BusDriver.open` sets (address: size [bytes]); a servo takes them only with its
torque off."""
OPEN_RAM = {116: 4, 84: 2, 82: 2, 80: 2, 108: 4, 112: 4}
"""Goal Position, the position gains and the profile: the RAM items :meth:`BusDriver.open`
writes on every servo (address: size [bytes]), in this order (the goal before the gain)."""
READ_BACK = ((9, 31), (64, 56), (INDIRECT_ADDRESS_1, 2 * SLOTS))
"""(first address, length) of the sync reads that bring back what :meth:`BusDriver.open`
sets: 9-39 (the EEPROM items), 64-119 (Torque Enable to Goal Position), the indirect
addresses of the cycle's data."""
INDIRECT_ADDRESSES = frozenset(INDIRECT_ADDRESS_1 + 2 * k for k in range(SLOTS))
READ_BACK_ITEMS = {**OPEN_EEPROM, 64: 1, **OPEN_RAM, **dict.fromkeys(INDIRECT_ADDRESSES, 2)}
"""address: size [bytes] of what :data:`READ_BACK` brings back."""
HOLD_KEPT_COUNTS = 32
"""A servo found holding in position mode at the driver's gain keeps its Goal Position
when it is within this many counts (about 50 mrad) of the hold the driver computes: an
open tried again must not move the arm by the model's sag error each time."""
OPEN_BEYOND_LIMIT_RAD = 0.1
"""How far [rad] beyond a position limit :meth:`BusDriver.open` still takes a joint (and
clips its hold into the limit): further, the servo would swing it back at full speed."""
PORT_ERRORS: tuple[type[Exception], ...] = (OSError, termios.error)
"""What the SDK's port raises when the device fails (unplugged, a second program on the
tty): pyserial's ``SerialException`` (an ``OSError``) from a read or a write,
``termios.error`` from the flush before each packet."""
_ERROR_BITS = {0x01: 'input voltage', 0x04: 'overheating', 0x08: 'motor encoder',
               0x10: 'electrical shock', 0x20: 'overload'}


def latency_timer_file(port: str) -> Path:
    """Where Linux keeps the latency timer [ms] of the USB serial adapter behind ``port``
    (``/dev/ttyUSB0`` -> ``/sys/bus/usb-serial/devices/ttyUSB0/latency_timer``)."""
    return USB_SERIAL_DEVICES / Path(os.path.realpath(port)).name / 'latency_timer'


def hardware_error_text(bits: int) -> str:
    """Hardware Error Status (70) in words (e-manual bit names)."""
    names = [name for bit, name in _ERROR_BITS.items() if bits & bit]
    return ', '.join(names) or f'0x{bits:02x}'


class BusError(RuntimeError):
    """The bus cannot be opened or a servo does not answer as it must at start-up."""


def claim_port(port: str) -> int:
    """Lock the serial device ``port`` for one driver before anything opens it for the
    bus: a descriptor of its own that holds the lock until it is closed.

    The lock is ``flock(LOCK_EX | LOCK_NB)``, the one pyserial's ``exclusive=True`` takes,
    on a descriptor opened with no line setting changed (``O_NOCTTY | O_NONBLOCK``). It
    comes first because every opening of ROBOTIS' ``PortHandler`` (pyserial) sets the
    speed, DTR and RTS and flushes the buffers: done to the port another driver drives,
    that alone would cut its replies off (or, at another ``baud_rate``, its bus). So a
    second driver (another launch left on ``port:=/dev/ttyUSB0``, a second namespace) is
    told before it touches the line; the kernel drops the lock with the descriptor, so a
    killed driver leaves none behind. Programs that do not lock (crane_x7_control, a
    terminal) are not kept out: the lock is advisory.

    Raises:
        BusError: the device cannot be opened, or another process holds its lock.
    """
    try:
        fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise BusError(f'cannot open {port}: {err}') from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        why = ('another process holds it (a second plag_driver, or a program that opened '
               'it with pyserial exclusive=True): two drivers on one bus would each command '
               'the same servos') if isinstance(err, BlockingIOError) else \
            f'it cannot be locked for this driver alone ({err})'
        raise BusError(f'{port} is not ours: {why}') from None
    return fd


ArmController = Literal['crane_x7_arm_controller', 'plag_arm_position_controller',
                        'plag_arm_effort_controller', 'none']
"""Names the driver answers to as ``active_arm_controller`` (the impedance node's switch,
``switch.method driver``): the effort controller puts the arm joints in current mode, any
other in position mode."""


@dataclass(frozen=True)
class DriverSettings:
    """What the driver writes and checks (``plag_driver``'s parameters, config/torque_mode.yaml).

    Attributes:
        port: serial device of the bus.
        chain: the chain file ('' = the CRANE-X7's, plag_ros/bus/crane_x7.yaml).
        baud_rate: [bit/s]; 0: the chain file's.
        rate_hz: cycles per second.
        p_gain: Position P Gain written in position mode (the robot's driver writes 800).
        torque_limit: [N*m] per servo in chain order, or one value; 0: the continuous
            torque of the motor table (half the stall torque: no X-series continuous
            rating is published; :mod:`plag_ros.core.dynamics.motors`). The largest effort
            an arm joint may be commanded in current mode, and (as Current Limit) the most
            the servo makes there; the position-mode hold is not bound by it (e-manual
            "Current Limit": current and current-based position modes only). Up to the
            stall torque may be set, for short use: held, it trips the servo's Overload
            shutdown (torque off).
        torque_constant: 'datasheet' (stall torque over stall current, the e-manual) or
            'driver' (crane_x7_description's current_to_effort): the published figure that
            turns an effort command into current (:mod:`plag_ros.core.dynamics.motors`); an
            identified ``effort_scale`` multiplies it.
        watchdog_s: Bus Watchdog period [s], a multiple of 20 ms.
        failed_reads: consecutive failed reads that are a fault.
        failed_writes: consecutive failed cycle writes that are a fault.
        stale_s: an effort command older than this, in current mode, is a fault [s].
        limit_margin, stop_deceleration, velocity_limit, torque_step, temperature_margin:
            the envelope of current mode (:mod:`plag_ros.bus.host.envelope`): [rad] from the
            position limits to where a joint could stop, [rad/s^2] the deceleration that
            stop assumes, [rad/s] per servo or one value (0: the servo's no-load speed),
            [N*m] per servo or one value, the largest change of an effort command in one
            cycle, and [degC] below each servo's Temperature Limit (31) where the driver
            faults.
        return_delay: Return Delay Time written [2 us units].
        active_arm_controller: what drives the arm joints (the effort controller: current
            mode).
    """

    port: str = option('/dev/ttyUSB0', 'serial device of the servo bus', read_only=True)
    chain: str = option('', "servo chain file ('' = the CRANE-X7's)", read_only=True)
    baud_rate: int = option(0, "bus speed [bit/s]; 0 = the chain file's", low=0,
                            high=4_500_000, read_only=True)
    rate_hz: float = option(200.0, 'bus cycles (joint_states) per second [Hz]', low=1.0,
                            high=1000.0, read_only=True)
    p_gain: int = option(800, 'Position P Gain written in position mode', low=1,
                         high=16383, read_only=True)
    torque_limit: list[float] = option(
        [0.0], "largest commanded effort and the servos' Current Limit [N*m], per servo in "
        "chain order or one value; 0 = the servo's continuous torque (half its stall "
        'torque)', read_only=True)
    torque_constant: Literal['datasheet', 'driver'] = option(
        'datasheet', "torque constant for effort commands: 'datasheet' (stall torque / stall "
        "current) or 'driver' (crane_x7_description current_to_effort)", read_only=True)
    watchdog_s: float = option(0.1, 'Bus Watchdog period, a multiple of 0.02 [s]', low=0.02,
                               high=2.54, read_only=True)
    failed_reads: int = option(3, 'consecutive failed reads that are a fault', low=1,
                               high=100, read_only=True)
    failed_writes: int = option(3, 'consecutive failed cycle writes that are a fault',
                                low=1, high=100, read_only=True)
    limit_margin: float = option(0.06, 'current mode: the stopping point must stay this far '
                                 'inside the position limits [rad]', low=0.0, high=0.5,
                                 read_only=True)
    stop_deceleration: float = option(15.0, 'current mode: the deceleration the stopping '
                                      'point assumes [rad/s^2]', low=0.1, high=1000.0,
                                      read_only=True)
    velocity_limit: list[float] = option(
        [0.0], "current mode: the largest joint speed [rad/s], per servo in chain order or "
        "one value; 0 = the servo's no-load speed", read_only=True)
    torque_step: list[float] = option(
        [1.0], 'current mode: the largest change of an effort command from one write to the '
        'next [N*m] (a late write: up to two periods of rate_hz worth), per servo in chain '
        'order or one value', read_only=True)
    temperature_margin: float = option(10.0, "fault this far below each servo's Temperature "
                                       'Limit [degC]', low=0.0, high=60.0, read_only=True)
    stale_s: float = option(0.1, 'effort command older than this in current mode is a '
                            'fault [s]', low=0.005, high=5.0, read_only=True)
    return_delay: int = option(0, 'Return Delay Time written [2 us]', low=0, high=254,
                               read_only=True)
    active_arm_controller: ArmController = option(
        'crane_x7_arm_controller', "what drives the arm: 'plag_arm_effort_controller' = "
        'current mode, any other = position mode')

    def __post_init__(self) -> None:
        units = self.watchdog_s / WATCHDOG_UNIT
        if not (1 <= round(units) <= 127 and abs(units - round(units)) < 1e-6):
            raise ValueError(f'watchdog_s must be 0.02 to 2.54 s in steps of 0.02 s, got '
                             f'{self.watchdog_s}')
        if self.watchdog_s < 2.0 / self.rate_hz:
            raise ValueError(f'watchdog_s {self.watchdog_s} s is shorter than two cycles')
        if self.torque_constant not in ('datasheet', 'driver'):
            raise ValueError(f"torque_constant must be 'datasheet' or 'driver', got "
                             f'{self.torque_constant!r}')
        if self.failed_reads < 1 or self.failed_writes < 1 or not (self.stale_s > 0.0):
            raise ValueError('failed_reads and failed_writes must be 1 or more and stale_s '
                             'positive')
        if not (self.stop_deceleration > 0.0 and self.limit_margin >= 0.0):
            raise ValueError('stop_deceleration must be positive and limit_margin not '
                             'negative')


DRIVER_OPTIONS = options(DriverSettings())


@dataclass(frozen=True)
class DriverNodeSettings:
    """``plag_driver``'s parameters: the bus's (:class:`DriverSettings`) and the model's
    (the gravity torque of a switch, an unknown servo and a hold without commands)."""

    bus: DriverSettings = inline(DriverSettings)
    description: DescriptionSettings = inline(DescriptionSettings)
    model: ModelSettings = group(ModelSettings)


DRIVER_NODE_OPTIONS = options(DriverNodeSettings())


@dataclass
class Reading:
    """One cycle's state of the servos, in the chain file's joint order.

    Attributes:
        t: [s] monotonic time the read completed.
        position: (8,) [rad]. velocity: (8,) [rad/s]. current: (8,) [A].
        effort: (8,) current times the robot driver's current_to_effort [N*m], the
            ``joint_states`` convention of crane_x7_control.
        counts: (8,) Present Position [counts].
        temperature: (8,) Present Temperature [degC].
    """

    t: float
    position: np.ndarray
    velocity: np.ndarray
    current: np.ndarray
    effort: np.ndarray
    counts: np.ndarray
    temperature: np.ndarray


@dataclass
class _Command:
    values: np.ndarray | None = None
    at: float = -math.inf


@dataclass
class _Trajectory:
    """A JointTrajectory's points for the arm joints, from ``start`` [s monotonic]."""
    start: float
    times: np.ndarray               # (P,) [s] from start
    positions: np.ndarray           # (P, 7) [rad]
    first: np.ndarray = field(default_factory=lambda: np.zeros(0))   # goal at start

    def at(self, t: float) -> np.ndarray:
        s = t - self.start
        times = np.concatenate([[0.0], self.times])
        points = np.vstack([self.first, self.positions])
        return np.array([np.interp(s, times, points[:, j]) for j in range(points.shape[1])])


def _serialised(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` under the driver's lock: the bus loop's cycle and the commands, mode
    requests and fault clears of other threads (a ROS executor's) never interleave, so a
    request is never lost between the cycle's read of it and its reset."""
    @functools.wraps(method)
    def locked(self: BusDriver, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


class BusDriver:
    """The CRANE-X7's servos through dynamixel-sdk.

    Args:
        config: the chain (IDs, models, joints, position limits).
        settings: what to write and check (``settings.port``: ``/dev/ttyUSB0`` on the arm,
            the emulator's pty in tests).
        torque_calibration: (8,) identified factor on the torque constant (the
            ``effort_scale`` of an identified.yaml), or None.
        gravity: (8,) positions [rad] -> (8,) gravity torque [N*m] of the present pose,
            in chain order; current mode starts with it.
        arm_joints: the joints that may go to current mode (default all but the last,
            the gripper).
        clock: monotonic seconds.

    Attributes:
        joints: (8,) joint names, chain order. modes: (8,) 'position' or 'current'.
        fault: '' or the latched fault. counts: failed reads, rejections, faults by kind.
        reading: the last good :class:`Reading` (None before the first).
    """

    def __init__(self, config: BusConfig, settings: DriverSettings = DriverSettings(),
                 *, torque_calibration: Sequence[float] | None = None,
                 gravity: Callable[[np.ndarray], np.ndarray] | None = None,
                 arm_joints: Sequence[str] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        import dynamixel_sdk as sdk  # the bus's only dependency beyond the core
        self._sdk, self.config, self.settings, self.clock = sdk, config, settings, clock
        self.port_name = settings.port
        self.ids = [s.id for s in config.servos]
        self.joints = [s.joint for s in config.servos]
        n = len(self.ids)
        self.motors: list[Motor] = [MOTORS[s.model] for s in config.servos]
        self.limits = np.array([s.position_limits for s in config.servos], dtype=np.int64)
        arm = self.joints[:-1] if arm_joints is None else list(arm_joints)
        self.arm = np.array([j in arm for j in self.joints])
        self._gravity = gravity or (lambda q: np.zeros(n))
        self._last_gravity = np.zeros(n)
        self._gravity_or_last(np.zeros(n))   # a first call may compile: never inside a cycle
        self.current_to_effort = np.array([m.current_to_effort for m in self.motors])
        kt = np.array([m.torque_constant if settings.torque_constant == 'datasheet'
                       else m.current_to_effort for m in self.motors])
        if torque_calibration is not None:
            kt = kt * np.broadcast_to(np.asarray(torque_calibration, float), (n,))
        self.torque_constant = kt            # N*m per A, the figure commands go through
        stall = np.array([m.stall_torque for m in self.motors])
        limit = _per_servo('torque_limit', settings.torque_limit, n,
                           [m.continuous_torque for m in self.motors])
        if not (np.all(np.isfinite(limit)) and np.all(limit > 0) and np.all(limit <= stall)):
            raise ValueError(f'torque_limit {limit.tolist()} must be positive and at most '
                             f'the stall torques {stall.tolist()} N*m')
        self.torque_limit = limit
        self.stiffness = np.array([m.stiffness(settings.p_gain) for m in self.motors])
        # Current Limit [2.69 mA units] that makes at most torque_limit through the servo's
        # own constant (the datasheet ratio; a calibration only scales what we command)
        self.current_limit = np.floor(limit / np.array([m.torque_constant for m in
                                                        self.motors]) / CURRENT_UNIT).astype(int)
        lower, upper = ((self.limits[:, k] - HOME_COUNT) * PULSE_RAD for k in (0, 1))
        self.envelope = Envelope(
            tuple(self.joints), lower, upper, np.full(n, settings.limit_margin),
            np.full(n, settings.stop_deceleration),
            _per_servo('velocity_limit', settings.velocity_limit, n,
                       [m.no_load_speed for m in self.motors]),
            _per_servo('torque_step', settings.torque_step, n, [math.nan] * n),
            np.full(n, 80.0 - settings.temperature_margin))   # open() reads each servo's
        self.modes = ['position'] * n
        """Per servo: 'position' or 'current', or 'off' (a torque-off servo that could not
        be brought back: only a reboot of the servo can, after a shutdown error)."""
        self.fault = ''
        self.counts: dict[str, int] = {'cycles': 0, 'failed_reads': 0, 'faults': 0,
                                       'rejected_commands': 0, 'mode_switches': 0,
                                       'writes': 0, 'failed_writes': 0, 'holds': 0,
                                       'repeated_commands': 0}
        self.reading: Reading | None = None
        # [s] the longest mode switch from its first packet built to its burst written
        # (the servos are without torque only while the burst is on the wire)
        self.torque_off_s = 0.0
        self._failed = 0
        self._failed_writes = 0
        self._recover = False        # clear_fault asked the next cycle to hold limp servos
        self._switched: tuple[list[int], str] = ([], '')    # a switch to read back
        self._last_effort = np.zeros(n)                # current joints' last command [N*m]
        self._last_effort_at = 0.0                     # when it was written [s, clock]
        self._hold = np.zeros(n, dtype=np.int64)       # position goals [counts]
        self._effort = _Command()
        # [s] per command, at its first write in current mode: from its reading to the write
        self._command_delays: collections.deque[float] = collections.deque(
            maxlen=COMMAND_DELAY_WINDOW)
        self._delay_source: float | None = None    # [s, clock] the written command's reading
        self._delay_taken = math.nan               # ... of the last command whose delay is kept
        # per command written (False), and per write of one again in a short run (True)
        self._repeats: collections.deque[bool] = collections.deque(maxlen=COMMAND_DELAY_WINDOW)
        self._repeat_run = 0                       # writes again of the command in force
        self._forward = _Command()
        self._trajectory: _Trajectory | None = None
        self._pending: str | None = None
        self._lock = threading.RLock()
        # what the last read found wrong (set by _sync_read, acted on by cycle)
        self._expired: list[int] = []
        self._disarmed: list[int] = []       # Bus Watchdog 0: a silent host leaves them be
        self._alerts: list[str] = []
        self._torque_off: list[int] = []
        self._remapped: list[int] = []       # found rebooted (indirect addresses reset)
        self._unmapped: list[int] = []       # ... and not mapped again: read directly
        self._map_due: dict[int, float] = {}  # [s] clock: the next try, of those tried
        # current mode's start: the gravity torque written at the switch, and when
        self._start_effort = np.zeros(n)
        self._entered_current = -math.inf
        self._saved: dict[int, dict[int, int]] = {}
        self.latency_timer_ms: int | None = None
        """[ms] the USB serial adapter's latency timer, read at :meth:`open` (None: none)."""
        self._port: Any = None
        self._claim: int | None = None      # claim_port's descriptor while open
        self.log: Callable[[str], object] = lambda message: None

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` succeeded and :meth:`close` has not run."""
        return self._port is not None

    def gravity_torque(self, positions: np.ndarray) -> np.ndarray:
        """(8,) gravity torque [N*m] of (8,) positions [rad], chain order."""
        return self._gravity(positions)

    # ------------------------------------------------------------------ bus primitives
    @contextlib.contextmanager
    def _port_call(self, what: str) -> Iterator[None]:
        """A port error (:data:`PORT_ERRORS`) inside as a :class:`BusError`, the port freed
        (:meth:`_release_port`): the hold's one-by-one tries, which answer a
        :class:`BusError`, then go on to the next servo instead of stopping at the first."""
        try:
            yield
        except PORT_ERRORS as err:
            self._release_port()
            raise BusError(f'{what}: {err!r}') from err

    def _group_write(self, address: int, size: int, values: dict[int, int]) -> None:
        sdk = self._sdk
        group = sdk.GroupSyncWrite(self._port, self._packets, address, size)
        for servo_id, value in values.items():
            group.addParam(servo_id, int(value).to_bytes(size, 'little', signed=value < 0))
        with self._port_call(f'sync write at {address}'):
            result = group.txPacket()
        if result != sdk.COMM_SUCCESS:
            raise BusError(f'sync write at {address}: {self._packets.getTxRxResult(result)}')

    @contextlib.contextmanager
    def _one_write(self) -> Iterator[None]:
        """The sync writes made inside go to the port in one write when the block ends,
        none if it raises. A sync write has no answer to wait for, so a burst that turns
        the torque off and on again reaches the servos back to back (about 0.1 ms a packet
        at 3 Mbit/s): how long they are without torque no longer depends on when the
        operating system runs this thread between two writes.

        A block inside another adds its packets to the outer one's burst.

        Raises:
            BusError: the port refused the burst or took only part of it (the servos may
                have had any prefix of it).
        """
        port = self._port
        queued: list[int] = []
        outer = vars(port).get('writePort')    # an enclosing block's queue, if any

        def queue(packet: list[int]) -> int:
            queued.extend(packet)
            return len(packet)

        port.writePort = queue        # the SDK builds each packet, we only hold it back
        try:
            yield
        finally:
            if outer is None:
                del port.writePort    # PortHandler's own method again
            else:
                port.writePort = outer
        with self._port_call(f'burst of {len(queued)} bytes'):
            written = port.writePort(queued)
        if written != len(queued):
            raise BusError(f'burst of {len(queued)} bytes: the port took {written}')

    def _write(self, servo_id: int, address: int, size: int, value: int) -> None:
        """One acknowledged write (the servo's status packet says it took it)."""
        fn = {1: self._packets.write1ByteTxRx, 2: self._packets.write2ByteTxRx,
              4: self._packets.write4ByteTxRx}[size]
        with self._port_call(f'ID {servo_id}: write of {value} at {address}'):
            result, error = fn(self._port, servo_id, address, value & ((1 << 8 * size) - 1))
        if result != self._sdk.COMM_SUCCESS or error & 0x7F:
            raise BusError(f'ID {servo_id}: write of {value} at {address}: '
                           f'{self._packets.getTxRxResult(result)}, error {error & 0x7F}')

    def _read(self, servo_id: int, address: int, size: int) -> int:
        sdk = self._sdk
        fn = {1: self._packets.read1ByteTxRx, 2: self._packets.read2ByteTxRx,
              4: self._packets.read4ByteTxRx}[size]
        for _ in range(3):
            with self._port_call(f'ID {servo_id}: read of {size} bytes at {address}'):
                value, result, error = fn(self._port, servo_id, address)
            if result == sdk.COMM_SUCCESS and not error & 0x7F:
                return _signed(value, size)
        raise BusError(f'ID {servo_id} does not answer a read of {size} bytes at {address} '
                       f'({self._packets.getTxRxResult(result)})')

    # ------------------------------------------------------------------ start and stop
    @_serialised
    def open(self) -> Reading:
        """Lock the port (:func:`claim_port`), open it, find every servo, save what will
        be changed, configure, hold.

        The servos end in position mode holding their present pose with the torque on.

        Raises:
            BusError: the port (one that raises too, one another process has locked,
                refused before it is opened for the bus), a servo that does not answer, or
                any other exception on the way (chained); after the configuration burst,
                once the servos were told to hold without the Bus Watchdog, before it
                with nothing written.
        """
        sdk = self._sdk
        baud = self.settings.baud_rate or self.config.baud_rate
        self._claim = claim_port(self.port_name)
        self._port = sdk.PortHandler(self.port_name)
        self._packets = sdk.PacketHandler(2.0)
        try:
            opened = self._port.setBaudRate(baud) and self._port.openPort()
        except BaseException as err:
            # the port and its lock let go whatever raised, or every later open would be
            # refused by this driver's own lock: pyserial's no such device (an OSError), a
            # tcflush on an adapter that dropped out mid-open (termios.error, no OSError)
            self._close_port()
            if not isinstance(err, PORT_ERRORS):
                raise
            raise BusError(f'cannot open {self.port_name} at {baud} bit/s: {err}') from None
        if not opened:
            self._close_port()
            raise BusError(f'cannot open {self.port_name} at {baud} bit/s')
        self._unmapped = []                  # the configuration maps every servo
        self._map_due = {}
        try:
            return self._configure()
        except Exception as err:  # noqa: BLE001 - a bug too: _configure has held what it wrote
            self._close_port()
            if isinstance(err, BusError):
                raise
            raise BusError(f'{self.port_name}: {err!r}') from err

    def _close_port(self) -> None:
        """Close the port of a failed open (one that raises on close too)."""
        with contextlib.suppress(Exception):
            self._port.closePort()
        self._port = None
        self._unclaim()

    def _unclaim(self) -> None:
        """Let the port go (:func:`claim_port`'s descriptor closed)."""
        if self._claim is not None:
            with contextlib.suppress(OSError):
                os.close(self._claim)
            self._claim = None

    def _release_port(self) -> None:
        """An exception out of the SDK's port (pyserial raising in a write or a read)
        leaves it marked in use: every later packet, the hold's too, would be refused as
        'port busy'."""
        if self._port is not None:
            self._port.is_using = False

    def _configure(self) -> Reading:
        """Everything read first, with the torque as it was found (an arm another driver
        left held stays held meanwhile); a joint far beyond its limits refuses the open
        before any write. Then one burst (:meth:`_configuration_burst`): the EEPROM items
        and the indirect addresses only where they differ from what the servos hold, the
        torque off only for the servos with an EEPROM item to change, then the goal that
        holds the pose found, the gains, the profile, the Bus Watchdog and the torque on.
        A restarted driver finds nothing to change, and no servo loses its torque; a fresh
        one turns it off only while the burst is on the wire. Everything is read back: a
        servo that missed a packet, or did not take an indirect address with its torque on
        (RAM in the e-manual, locked in ROBOTIS' SDK examples), gets its burst again with
        the torque off; one still not configured and holding is a :class:`BusError`, the
        Bus Watchdog off so that the others keep holding. Whatever raises after the burst
        began (the port, a bug) is raised once every servo is held at the burst's goals with
        the Bus Watchdog off."""
        # nothing from before this open is carried out: the hold starts from the pose found
        self.reading, self._pending, self._trajectory = None, None, None
        self._forward, self._effort = _Command(), _Command()
        limits = [self._read(i, *TEMPERATURE_LIMIT[1:]) for i in self.ids]
        # the servos' own position limits where they are tighter than the chain file's
        own = np.array([(self._read(i, 52, 4), self._read(i, 48, 4)) for i in self.ids])
        self.limits = np.column_stack([np.maximum(self.limits[:, 0], own[:, 0]),
                                       np.minimum(self.limits[:, 1], own[:, 1])])
        self.envelope = replace(
            self.envelope, temperature=np.array(limits, dtype=np.float64)
            - self.settings.temperature_margin,
            lower=(self.limits[:, 0] - HOME_COUNT) * PULSE_RAD,
            upper=(self.limits[:, 1] - HOME_COUNT) * PULSE_RAD)
        try:
            self.latency_timer_ms = int(latency_timer_file(self.port_name).read_text())
        except (OSError, ValueError):
            self.latency_timer_ms = None      # not a USB serial adapter (the emulator's pty)
        present = self._present_counts()
        self._refuse_beyond_limits(present)
        still = self._at_rest(present)
        found = self._read_back(self.ids)
        silent = [i for i in self.ids if i not in found]
        if silent:
            raise BusError(f'IDs {silent} do not answer the read of what open() sets; '
                           'nothing written')
        # what close() puts back: as found before the first try (a failed try wrote some)
        for servo_id in self.ids:
            self._saved.setdefault(servo_id, dict(found[servo_id]))
        self._hold = self._hold_from(still, found)
        wanted = self._open_items(self.ids)
        changes = _differing(wanted, found, OPEN_EEPROM.keys() | INDIRECT_ADDRESSES)
        # the burst writes only position mode: one found in another mode is 'unknown'
        # until a read shows it holding, so that a restore turns its torque off first
        self.modes = ['position' if found[i].get(11) == MODES['position'] else 'unknown'
                      for i in self.ids]
        try:
            reading, untaken = self._burst_and_first_reading(still, wanted, changes)
        except Exception:
            # any part of the burst may have gone out, and it armed the Bus Watchdog: with
            # no one reading, held at the burst's goals (so a servo that was holding keeps
            # its own goal), the watchdog off. Nothing is read first: each reply waited
            # for brings the watchdog's expiry nearer. A servo found in another mode gets
            # its torque off first (_restore): one the burst missed, still in current
            # mode, must not keep its current with the watchdog off.
            self._release_port()
            try:
                left = self._restore(self.ids, still, watchdog=0, goals=self._hold)
                left += self._watchdog_off([i for i in self.ids if i not in left])
                if left:
                    self.log(f'after the failed open, IDs {left} may be without a hold or '
                             'with their Bus Watchdog armed')
            except Exception as err:  # noqa: BLE001 - the open's own error is the one raised
                self.log(f'the hold after the failed open failed too: {err!r}')
            raise
        if reading is None or untaken:
            # held, but no one will read them; one not known to hold (in current mode
            # perhaps) keeps its watchdog, so that its current stops when it expires
            self._watchdog_off([i for i, m in zip(self.ids, self.modes) if m == 'position'])
            raise BusError('no sync read answered by every servo' if reading is None else
                           f'IDs {untaken} are not configured and holding after open')
        self.reading = reading
        return reading

    def _burst_and_first_reading(self, still: Reading, wanted: dict[int, dict[int, int]],
                                 changes: dict[int, dict[int, int]]
                                 ) -> tuple[Reading | None, list[int]]:
        """The configuration burst of :meth:`_configure` (``wanted`` of
        :meth:`_open_items`, ``changes`` the EEPROM items and indirect addresses that
        differ), sent again to the servos whose read-back shows they missed part of it;
        the servos not holding then held (from ``still``, the pose found); the cycle's sync
        read set up and tried. The first reading (None: no sync read answered every
        servo) and the IDs not configured and holding.

        Raises:
            BusError: the port refused the first burst or took part of it.
        """
        sdk = self._sdk
        # only what differs: EEPROM cells wear, and a servo with no EEPROM item to
        # change keeps its torque through the open (plag_driver restarted)
        self._configuration_burst(self.ids, changes, sorted(
            {i for address in OPEN_EEPROM for i in changes.get(address, {})}))
        self._read_group = sdk.GroupSyncRead(self._port, self._packets, INDIRECT_DATA_1,
                                             READ_LENGTH)
        self._write_group = sdk.GroupSyncWrite(self._port, self._packets, WRITE_AT,
                                               WRITE_LENGTH)
        for servo_id in self.ids:
            self._read_group.addParam(servo_id)
            self._write_group.addParam(servo_id, bytes(WRITE_LENGTH))
        # a sync write has no answer: a servo that missed a packet of the burst, or took
        # no indirect address with its torque on, gets its burst again, torque off
        found = self._read_back(self.ids)
        untaken = _untaken(wanted, found)
        if untaken:
            self.log(f'IDs {untaken} did not take the configuration burst: sent again')
            # one that missed its torque on may have sagged since: held where it is now
            fresh = self._hold_from(self._present_pose(still), found)
            for k, servo_id in enumerate(self.ids):
                if servo_id in untaken:
                    self._hold[k] = fresh[k]
            again = self._open_items(untaken)
            differing = _differing(again, found, OPEN_EEPROM.keys() | INDIRECT_ADDRESSES)
            with contextlib.suppress(BusError):      # judged by the read-back below
                self._configuration_burst(untaken, differing, sorted(
                    {i for values in differing.values() for i in values}))
            untaken = _untaken(again, self._read_back(untaken))
        reading = None
        for _ in range(5):
            reading = self._sync_read()
            if reading is not None:
                break
        unheld = self._not_holding(self.ids)
        for k, servo_id in enumerate(self.ids):
            if servo_id not in unheld:
                self.modes[k] = 'position'
        if unheld:
            self.log(f'IDs {unheld} are not holding after open: held one by one')
            # the cycle's read of a servo without its indirect addresses is garbage
            pose = (reading if reading is not None and not untaken
                    else self._present_pose(still))
            untaken = sorted(set(untaken) | set(self._restore(unheld, pose)))
        return reading, untaken

    def _refuse_beyond_limits(self, counts: np.ndarray) -> None:
        """A joint found further beyond its position limits than
        :data:`OPEN_BEYOND_LIMIT_RAD`: the hold clipped into the limits would swing it back
        at the servo's full speed (the profile is off), so nothing is written.

        Raises:
            BusError: naming each such joint, its position and the limits.
        """
        position = (counts - HOME_COUNT) * PULSE_RAD
        far = [f'{joint} at {q:.3f} rad (limits {lo:.3f}, {hi:.3f})'
               for joint, q, lo, hi in zip(self.joints, position, self.envelope.lower,
                                           self.envelope.upper)
               if max(lo - q, q - hi) > OPEN_BEYOND_LIMIT_RAD]
        if far:
            raise BusError(f'{", ".join(far)}: beyond the limits by more than '
                           f'{OPEN_BEYOND_LIMIT_RAD} rad; nothing written (with nothing '
                           'holding the arm, move the joints inside by hand, then open '
                           'again)')

    def _present_pose(self, fallback: Reading, tries: int = 3) -> Reading:
        """The servos at rest where they are now (Present Position read directly, not
        through the indirect addresses, sent up to ``tries`` times), or ``fallback`` if a
        servo does not answer."""
        try:
            return self._at_rest(self._present_counts(tries))
        except BusError:
            return fallback

    def _hold_from(self, pose: Reading, found: dict[int, dict[int, int]]) -> np.ndarray:
        """(8,) Goal Position [counts] that holds ``pose``, within the limits, where a
        servo already holds (``found`` of :meth:`_read_back`) its goal (:meth:`_kept_goals`).
        """
        return self._clip(self._kept_goals(self._clip(self._holding_goal(pose)), found))

    def _at_rest(self, counts: np.ndarray) -> Reading:
        """A :class:`Reading` of servos found at (8,) ``counts``, at rest (the pose a hold
        is computed from before the cycle's read is set up)."""
        zeros = np.zeros(len(self.ids))
        return Reading(self.clock(), (counts - HOME_COUNT) * PULSE_RAD, zeros, zeros, zeros,
                       counts.copy(), zeros)

    def _kept_goals(self, hold: np.ndarray, found: dict[int, dict[int, int]]) -> np.ndarray:
        """(8,) ``hold`` [counts], where a servo already holds in position mode at
        ``p_gain`` with a goal within :data:`HOLD_KEPT_COUNTS` of it, that goal."""
        kept = hold.copy()
        for k, servo_id in enumerate(self.ids):
            got = found.get(servo_id, {})
            if (got.get(64) == 1 and got.get(11) == MODES['position']
                    and got.get(84) == self.settings.p_gain
                    and abs(_signed(got.get(116, 0), 4) - hold[k]) <= HOLD_KEPT_COUNTS):
                kept[k] = _signed(got[116], 4)
        return kept

    def _open_items(self, ids: Sequence[int]) -> dict[int, dict[int, int]]:
        """{address: {ID: value}} of everything :meth:`open` sets on the servos ``ids``:
        the EEPROM items (:data:`OPEN_EEPROM`), the indirect addresses of the cycle's data,
        and the RAM items (:data:`OPEN_RAM`, the goal :attr:`_hold`)."""
        k_of = {servo_id: self.ids.index(servo_id) for servo_id in ids}
        items = {9: dict.fromkeys(ids, self.settings.return_delay),
                 11: dict.fromkeys(ids, MODES['position']),
                 38: {i: int(self.current_limit[k]) for i, k in k_of.items()}}
        targets = [a + k for _, a, size in READ_ITEMS + WRITE_ITEMS for k in range(size)]
        items.update({INDIRECT_ADDRESS_1 + 2 * k: dict.fromkeys(ids, target)
                      for k, target in enumerate(targets)})
        items.update({116: {i: int(self._hold[k]) for i, k in k_of.items()},
                      84: dict.fromkeys(ids, self.settings.p_gain)})
        items.update({address: dict.fromkeys(ids, 0) for address in (82, 80, 108, 112)})
        return items

    def _configuration_burst(self, ids: Sequence[int], changes: dict[int, dict[int, int]],
                             torque_off: Sequence[int]) -> None:
        """One burst (:meth:`_one_write`) that leaves ``ids`` in position mode holding
        :attr:`_hold` with the torque on and the Bus Watchdog armed: ``changes`` {address:
        {ID: value}} (EEPROM items and indirect addresses), with the torque off for the
        servos ``torque_off`` only, then the RAM items of :data:`OPEN_RAM` (after the
        mode: a mode written resets the gains and the profile).

        Raises:
            BusError: the port refused the burst or took part of it.
        """
        wanted = self._open_items(ids)
        with self._one_write():
            # the torque off before the watchdog: a burst cut short after its first packet
            # must not leave a servo in current mode running its current unwatched
            if torque_off:
                self._group_write(64, 1, dict.fromkeys(torque_off, 0))
            self._group_write(98, 1, dict.fromkeys(ids, 0))   # a tripped watchdog refuses goals
            for address, values in changes.items():
                if values:
                    self._group_write(address, OPEN_EEPROM.get(address, 2), values)
            for address, size in OPEN_RAM.items():
                self._group_write(address, size, wanted[address])
            self._group_write(98, 1, dict.fromkeys(ids, self._watchdog_units(None)))
            self._group_write(64, 1, dict.fromkeys(ids, 1))

    def _group_read(self, first: int, length: int, ids: Sequence[int], tries: int = 3
                    ) -> tuple[Any, list[int]]:
        """One ``GroupSyncRead`` of the ``length`` bytes from address ``first`` of each of
        ``ids``, sent up to ``tries`` times until every servo answers. Returns the group and
        the IDs whose answer it holds (none when the last try failed)."""
        sdk = self._sdk
        group = sdk.GroupSyncRead(self._port, self._packets, first, length)
        for servo_id in ids:
            group.addParam(servo_id)
        answered: list[int] = []
        for _ in range(tries):
            with self._port_call(f'sync read of {length} bytes at {first}'):
                result = group.txRxPacket()
            answered = ([i for i in ids if group.isAvailable(i, first, length)]
                        if result == sdk.COMM_SUCCESS else [])
            if len(answered) == len(ids):
                break
        return group, answered

    def _read_back(self, ids: Sequence[int]) -> dict[int, dict[int, int]]:
        """{ID: {address: value}} (unsigned) of the items of :data:`READ_BACK`, for the
        servos of ``ids`` that answered each of its sync reads (each tried three times)."""
        got: dict[int, dict[int, int]] = {servo_id: {} for servo_id in ids}
        for first, length in READ_BACK:
            group, answered = self._group_read(first, length, ids)
            for servo_id in ids:
                if servo_id in got and servo_id in answered:
                    got[servo_id].update({address: group.getData(servo_id, address, size)
                                          for address, size in READ_BACK_ITEMS.items()
                                          if first <= address < first + length})
                else:
                    got.pop(servo_id, None)
        return got

    def _present_counts(self, tries: int = 3) -> np.ndarray:
        """(8,) Present Position [counts] of every servo: one sync read, sent up to
        ``tries`` times.

        Raises:
            BusError: a servo did not answer.
        """
        group, answered = self._group_read(132, 4, self.ids, tries)
        if len(answered) < len(self.ids):
            raise BusError('no sync read of Present Position answered by every servo')
        return np.array([_signed(group.getData(i, 132, 4), 4) for i in self.ids],
                        dtype=np.int64)

    @_serialised
    def close(self) -> None:
        """Hold every joint in position mode at its present pose, put back the RAM items
        :meth:`open` changed (indirect addresses, gains, profile), turn the Bus Watchdog off
        on every servo that holds, and read every servo back before the port closes. Safe
        to call twice.

        A servo holding in position mode keeps its torque on throughout. One still in
        current mode goes to position mode first (the switch's burst, or one by one with
        its torque off only while its mode is written); one that cannot be brought back to
        a hold keeps its Bus Watchdog, so that with nobody commanding it its current stops
        rather than runs on unwatched. The EEPROM items :meth:`open` wrote
        stay as written (Return Delay Time 0, Current Limit from ``torque_limit``, Operating
        Mode 3): putting them back would need the torque off, and a write lost then would
        leave a servo limp with nobody left to notice. The Position P Gain left is the
        larger of the one found at :meth:`open` and ``p_gain``: a lower one found
        (crane_x7_control leaves 5 at its deactivation) would let the arm sag away from the
        hold.

        A port that raises does not cut this short: a failed first read is followed by a
        read of Present Position alone, and only if that fails too is the last reading
        held; a failed put-back still ends in the check that every servo holds.

        Raises:
            BusError: servos that are not holding with the torque on after every try
                (named), or a put-back that failed; the port is closed all the same.
        """
        if self._port is None:
            return
        try:
            try:
                with self._port_call('closing: the first read'):
                    reading = self._sync_read()
            except BusError as err:
                self.log(str(err))
                reading = None
            if reading is None and self.reading is not None:
                # the pose now, read directly: the last reading may be old (a stalled
                # loop), and a hold of where the arm was would swing it back there. Once:
                # meanwhile a servo in current mode runs its last command
                reading = self._present_pose(self.reading, tries=1)
                if reading is self.reading:
                    self.log(f'closing: no read answered; the last reading '
                             f'({self.clock() - reading.t:.3f} s old) is held')
            if reading is not None and 'current' in self.modes:
                try:
                    self._switch('position', reading)
                except BusError as err:
                    self.log(f'closing: the switch to position mode failed ({err}); the '
                             'servos that answer were brought back to a hold')
            saved = self._saved
            ids = [i for i in self.ids if i in saved]
            p_gain = {i: max(saved[i][84], self.settings.p_gain) if i in saved
                      else self.settings.p_gain for i in self.ids}
            stiffness = np.array([m.stiffness(p_gain[i]) for m, i in zip(self.motors,
                                                                          self.ids)])
            goals = self._clip(self._hold if reading is None
                               else self._holding_goal(reading, stiffness))

            def put_back(address: int, size: int) -> None:
                self._group_write(address, size, {i: saved[i][address] for i in ids})

            failed = ''
            # only the servos that hold lose their watchdog: one left in current mode (the
            # port failing through the switch and its hold) keeps it, so that with nobody
            # commanding its current stops, never runs on unwatched
            unheld = self._closing_hold(reading)
            # (before the put-back: a tripped watchdog would refuse its goals)
            self._watchdog_off([i for i in self.ids if i not in unheld])
            try:
                for k in range(SLOTS):
                    put_back(INDIRECT_ADDRESS_1 + 2 * k, 2)
                self._group_write(116, 4, dict(zip(self.ids, goals.tolist())))
                for _, address, size in PUT_BACK:
                    if address == 84:
                        self._group_write(84, 2, p_gain)
                    else:
                        put_back(address, size)
            except BusError as err:
                failed = f'closing: putting back what open() changed failed ({err})'
            left = self._closing_hold(reading)
            # every servo holding now, again: the first pass may not have told (its reads
            # failed), or its watchdog-off may not have been taken
            armed = self._watchdog_off([i for i in self.ids if i not in left])
            if left or failed or armed:
                raise BusError('; '.join(
                    ([f'closing: IDs {left} are not holding in position mode with the '
                      'torque on'] if left else []) + ([failed] if failed else [])
                    + ([f'closing: IDs {armed} may keep their Bus Watchdog armed (their '
                        'hold would lose its gravity offset)'] if armed else [])))
        finally:
            try:
                self._port.closePort()
            finally:
                self._port = None
                self._unclaim()
                self._saved = {}          # the next open saves what it finds then

    def _closing_hold(self, reading: Reading | None) -> list[int]:
        """The servos not holding in position mode with the torque on (one sync read; all,
        if the port raises) brought back to a hold one by one, the Bus Watchdog off, from
        the pose of ``reading`` (none without it). The IDs still not holding."""
        try:
            left = self._not_holding(self.ids)
        except BusError:
            left = list(self.ids)
        if left and reading is not None:
            left = self._hold_servos(left, reading, watchdog=0)
        return left

    # ------------------------------------------------------------------ commands
    @_serialised
    def command_positions(self, positions: Sequence[float], joints: Sequence[str]) -> bool:
        """A forward position command [rad] for ``joints``; False (counted) if not finite
        or a joint is unknown. It replaces any trajectory."""
        values = self._arm_values(positions, joints)
        if values is None:
            return False
        self._forward = _Command(values, self.clock())
        self._trajectory = None
        return True

    @_serialised
    def command_trajectory(self, times: Sequence[float], positions: Sequence[Sequence[float]],
                           joints: Sequence[str]) -> bool:
        """A joint trajectory: (P,) times from now [s], (P, len(joints)) positions [rad],
        followed by linear interpolation from the present goal. False (counted) on bad
        input."""
        maybe = [self._arm_values(p, joints, count=False) for p in positions]
        points = [p for p in maybe if p is not None]
        times_a = np.asarray(times, dtype=np.float64)
        if (not points or len(points) != len(maybe) or times_a.shape != (len(points),)
                or not np.all(np.isfinite(times_a)) or np.any(np.diff(times_a) < 0)
                or times_a[0] < 0):
            self.counts['rejected_commands'] += 1
            return False
        first = self._goal_radians()
        self._trajectory = _Trajectory(self.clock(), times_a, np.vstack(points), first)
        self._forward = _Command()
        return True

    @_serialised
    def command_effort(self, effort: Sequence[float], joints: Sequence[str],
                       source_t: float | None = None) -> bool:
        """An effort command [N*m] for the arm joints, placed by name. ``source_t`` [s, on
        :attr:`clock`]: when the reading it was computed from was taken (default: now).

        False (counted in ``rejected_commands``, the last command kept) for a joint the
        chain does not have, a name twice, an arm joint left out, not as many values as
        names, a source reading older than ``stale_s`` or from the future, or before
        :meth:`open` has found the pose. Checked again
        at each cycle in current mode, where NaN, beyond ``torque_limit``, a step beyond the
        envelope or a source older than ``stale_s`` is a fault.
        """
        now = self.clock()
        at = now if source_t is None else source_t
        try:
            given = np.asarray(effort, dtype=np.float64)
            index = [self.joints.index(j) for j in joints]
        except (ValueError, TypeError):
            given, index = np.zeros(0), []
        named = np.zeros(len(self.ids), dtype=bool)
        named[index] = True
        if (not index or given.shape != (len(index),) or len(set(index)) != len(index)
                or not named[self.arm].all() or not 0.0 <= now - at <= self.settings.stale_s
                or self.reading is None):
            self.counts['rejected_commands'] += 1
            return False
        values = np.full(len(self.ids), np.nan)
        values[index] = given
        self._effort = _Command(values, at)
        return True

    @_serialised
    def request_mode(self, mode: str) -> tuple[bool, str]:
        """Switch the arm joints to ``'current'`` or ``'position'`` at the next cycle.
        Current mode is refused with the reason while a fault is latched, before the first
        reading, where the last reading is already outside the envelope (a joint that
        could not stop inside its limits: it would fault at once), and on a USB adapter
        whose latency timer is over 1 ms (a fault's recovery, a round trip per write,
        would then leave servos without torque for that long each)."""
        if mode not in MODES:
            return False, f"mode must be 'current' or 'position', got {mode!r}"
        if mode == 'current':
            if self.fault:
                return False, f'fault latched ({self.fault}): clear it first'
            if self.reading is None:
                return False, 'no reading yet'
            outside = self.envelope.motion_fault(self.reading.position,
                                                 self.reading.velocity, self.arm)
            if outside:
                return False, f'not from this pose: {outside}'
            disarmed = [i for i in self._disarmed if self.arm[self.ids.index(i)]]
            if disarmed or 'unknown' in self.modes:
                return False, (f'IDs {disarmed} have no Bus Watchdog armed' if disarmed else
                               f'servos of unknown mode: {self.modes}')
            if self.latency_timer_ms is not None and self.latency_timer_ms > 1:
                return False, (f'the USB adapter of {self.port_name} waits '
                               f'{self.latency_timer_ms} ms before it passes a reply on; set '
                               f'it to 1 ({latency_timer_file(self.port_name)})')
        self._pending = mode
        return True, f'arm joints to {mode} mode at the next cycle'

    @_serialised
    def fail_safe(self, reason: str) -> None:
        """Latch ``reason`` and hold from the last reading: the bus loop's answer to an
        exception out of :meth:`cycle` (servos left in current mode without commands would
        lose their torque to the Bus Watchdog, and the same exception would come back every
        cycle)."""
        self._release_port()
        try:
            self._fail(reason, self.reading)
        except Exception as err:  # noqa: BLE001 - the hold's last try: report, never raise
            self.log(f'the hold after {reason!r} failed too: {err!r}')

    @_serialised
    def clear_fault(self) -> str:
        """Unlatch the fault (the joints stay in position mode); the old fault's text. The
        next cycle first brings back to a hold any servo it finds with its torque off."""
        old, self.fault, self._failed, self._failed_writes = self.fault, '', 0, 0
        self._recover = True
        self._map_due.clear()                # a servo still unmapped is tried at once
        return old

    # ------------------------------------------------------------------ the cycle
    @_serialised
    def cycle(self) -> Reading | None:
        """One read, the checks, a pending mode change, one write. None after a failed
        read (nothing is written then)."""
        self.counts['cycles'] += 1
        read_from, self._delay_source = self.clock(), None
        reading = self._sync_read()
        if reading is not None and self._remapped:
            self._map_again()
        if reading is None:
            self.counts['failed_reads'] += 1
            self._failed += 1
            if self._failed >= self.settings.failed_reads:
                self._fail(f'{self._failed} consecutive failed reads', self.reading)
            return None
        self._failed = 0
        self.reading = reading
        if self._disarmed and self.is_open:
            # a hold cut short after its watchdog-off write (one sync write, no reply to
            # wait for): a silent host must stop every servo
            try:
                self._group_write(98, 1, dict.fromkeys(self._disarmed,
                                                       self._watchdog_units(None)))
            except BusError as err:
                self.log(f'arming the Bus Watchdog failed: {err}')
        if self._recover:                # clear_fault: limp servos back to a hold first
            self._recover = False
            if self._torque_off:
                self._torque_off = self._restore(self._torque_off, reading)
        if self._expired:
            # the servos stopped (current mode: no torque) and refuse goals until 98 := 0
            expired, self._expired = self._expired, []
            try:
                self._group_write(98, 1, dict.fromkeys(expired, 0))
                self._group_write(98, 1, dict.fromkeys(
                    expired, round(self.settings.watchdog_s / WATCHDOG_UNIT)))
            except BusError as err:
                self.log(f'clearing the Bus Watchdog failed: {err}')
            self._fail(f'Bus Watchdog expired on IDs {expired}: the host was silent longer '
                       f'than {self.settings.watchdog_s:g} s', reading)
        elif self._alerts:
            self._fail('hardware error: ' + '; '.join(self._alerts), reading)
        elif self._remapped or self._unmapped:
            # (latched again after clear_fault while one is not mapped)
            mapped = (f'IDs {self._unmapped} could not be mapped again: read directly until '
                      'they are (at the next open, or with their torque off)'
                      if self._unmapped else 'mapped again')
            rebooted = [i for i in self.ids if i in self._remapped or i in self._unmapped]
            self._fail(f'IDs {rebooted} came back with their indirect addresses reset (a '
                       f'reboot: a power dip?); {mapped}, held where they are', reading)
        elif self._torque_off:
            self._fail(f'torque off on IDs {self._torque_off}', reading)
        else:
            hot = self.envelope.temperature_fault(reading.temperature)
            if hot:
                self._fail(hot, reading)
        if self._pending is not None:
            mode, self._pending = self._pending, None
            if not (mode == 'current' and self.fault):
                try:
                    self._switch(mode, reading)
                except BusError as err:       # the port failed under the burst
                    self._fail(f'mode switch to {mode} failed: {err}', reading)
        current = np.zeros(len(self.ids), dtype=np.int64)
        unknown = self._unknown()
        if unknown.any():
            self._resolve_unknown(reading)
            unknown = self._unknown()
        in_current = np.array([m == 'current' for m in self.modes])
        outside = self.envelope.motion_fault(reading.position, reading.velocity,
                                             in_current) if in_current.any() else ''
        if not outside and unknown.any():
            # may be in current mode: its speed is watched (not its stopping point, which a
            # position-mode joint parked near its limit may be inside of)
            outside = self.envelope.velocity_fault(reading.velocity, unknown)
        if outside:
            self._fail(outside, reading)
        if in_current.any():
            effort = None if outside else self._checked_effort(reading, in_current)
            if effort is None:
                in_current[:] = False
            else:
                effort = np.where(in_current, effort, 0.0)
                self._last_effort, self._last_effort_at = effort, self.clock()
                current = self._goal_current(effort)
        if unknown.any():
            # a servo whose mode is not known may still be in current mode: its pose's
            # gravity torque, not none (in position mode Goal Current is not used)
            g = np.clip(self._gravity_or_last(reading.position), -self.torque_limit,
                        self.torque_limit)
            current[unknown] = self._goal_current(g)[unknown]
        goals = self._position_goals(reading, in_current)
        group = self._write_group
        for k, servo_id in enumerate(self.ids):
            group.changeParam(servo_id, int(current[k]).to_bytes(2, 'little', signed=True)
                              + int(goals[k]).to_bytes(4, 'little', signed=True))
        self.counts['writes'] += 1
        sent = group.txPacket()
        if self._delay_source is not None and sent == self._sdk.COMM_SUCCESS:
            # from the servos' sample (the read's start: a reading is stamped at its end,
            # as is the command's source) to the packet out
            self._command_delays.append(self.clock() - self._delay_source
                                        + reading.t - read_from)
        elif self._delay_source is not None:     # not sent: its next write is its first
            self._delay_taken = math.nan
        self._delay_source = None
        if sent == self._sdk.COMM_SUCCESS:
            self._failed_writes = 0
        else:
            self.counts['failed_writes'] += 1
            self._failed_writes += 1
            if self._failed_writes >= self.settings.failed_writes:
                self._fail(f'{self._failed_writes} consecutive failed writes', reading)
        if self._switched[0]:
            self._check_switch(reading)
        return reading

    def _map_again(self) -> None:
        """The servos found rebooted by the cycle's read (:attr:`_remapped`, their torque
        still off) mapped again (:meth:`_map`); those the mapping did not take join
        :attr:`_unmapped`: with the torque on after their hold, a real servo may refuse
        indirect addresses, so they are read directly (:meth:`_sync_read`), and left out
        of the cycle's write, until they are mapped: by the next open, or when a read finds
        their torque off (rebooted again; off since the failed try, :data:`MAP_AGAIN_EVERY_S`
        after it)."""
        left = self._map(self._remapped)
        due = self.clock() + MAP_AGAIN_EVERY_S
        self._unmapped = [i for i in self.ids if i in left
                          or (i in self._unmapped and i not in self._remapped)]
        for servo_id in self._remapped:
            # one not mapped would take the cycle's goals through write slots half mapped
            # (a goal's bytes perhaps in part): it keeps its hold's goal, written directly
            if servo_id in left:
                self._write_group.removeParam(servo_id)
                self._map_due[servo_id] = due
            else:                     # (the SDK refuses an ID it has: nothing changes)
                self._write_group.addParam(servo_id, bytes(WRITE_LENGTH))
                self._map_due.pop(servo_id, None)
        self.log(f'IDs {self._remapped} came back with their indirect addresses reset: '
                 + (f'IDs {left} could not be mapped again' if left else 'mapped again'))

    def _map(self, ids: Sequence[int]) -> list[int]:
        """Goal Current 0 (a reboot sets it to the Current Limit) and the indirect addresses
        of the cycle's data written to the servos ``ids`` and read back, twice at most (a
        sync write has no answer). The IDs whose indirect addresses did not read back as
        written (a burst the port cut short, a lost packet)."""
        wanted = {a: v for a, v in self._open_items(ids).items() if a in INDIRECT_ADDRESSES}
        left = list(ids)
        for _ in range(2):
            try:
                with self._one_write():
                    self._group_write(102, 2, dict.fromkeys(left, 0))
                    for address, values in sorted(wanted.items()):
                        self._group_write(address, 2, {i: values[i] for i in left})
                group, answered = self._group_read(INDIRECT_ADDRESS_1, 2 * SLOTS, left,
                                                   tries=1)
            except BusError as err:
                self.log(f'mapping IDs {left} again failed: {err}')
                continue
            left = [i for i in left if i not in answered or any(
                group.getData(i, a, 2) != values[i] for a, values in wanted.items())]
            if not left:
                break
        return left

    def _goal_current(self, torque: np.ndarray) -> np.ndarray:
        """(8,) Goal Current [2.69 mA units, int] of (8,) motor torques [N*m], within each
        servo's Current Limit."""
        amps = np.round(torque / self.torque_constant / CURRENT_UNIT).astype(np.int64)
        return np.clip(amps, -self.current_limit, self.current_limit)

    def _unknown(self) -> np.ndarray:
        """(8,) bool: the arm's servos whose mode is not known (no answer at a hold)."""
        return self.arm & np.array([m == 'unknown' for m in self.modes])

    def _resolve_unknown(self, reading: Reading) -> None:
        """Each cycle while a servo's mode is unknown (it answered the cycle's sync read,
        so it answers again): one sync read of its Operating Mode, no retry, no write. In
        position mode with the torque on it holds, from its present pose; in current mode
        it is a fault, whose hold switches it to position mode by the switch's burst; with
        the torque off it is 'off', brought back at ``~/clear_fault``."""
        ids = [self.ids[k] for k in np.flatnonzero(self._unknown())]
        modes = self._read_modes(ids)
        found_current, found_other = [], []
        for servo_id, value in modes.items():
            k = self.ids.index(servo_id)
            if servo_id in self._torque_off:
                self.modes[k] = 'off'
            elif value == MODES['position']:
                if servo_id in self._disarmed:
                    continue        # a hold cut short after its watchdog-off write: once
                    # the cycle's re-arming shows in a read
                self.modes[k] = 'position'
                self._hold[k] = self._clip(self._holding_goal(reading))[k]
            elif value == MODES['current']:
                self.modes[k] = 'current'
                found_current.append(servo_id)
            else:
                found_other.append(servo_id)
        if modes:
            self.log(f'modes read back: {modes} (IDs {ids} were unknown)')
        if found_current:
            self._fail(f'IDs {found_current} found in current mode after a failed hold',
                       reading)
        if found_other:        # a mode the driver never sets: back to its own hold
            self._fail(f'IDs {found_other} found in another Operating Mode after a failed '
                       'hold', reading)
            self._restore(found_other, reading)

    def _read_modes(self, ids: Sequence[int], tries: int = 1) -> dict[int, int]:
        """Operating Mode (11) of each of ``ids`` that answers one sync read (sent up to
        ``tries`` times until all answer)."""
        group, answered = self._group_read(11, 1, ids, tries=tries)
        return {i: int(group.getData(i, 11, 1)) for i in answered}

    def _checked_effort(self, reading: Reading, joints: np.ndarray) -> np.ndarray | None:
        """The effort command of the current-mode joints, or None after a fault."""
        command, now = self._effort, self.clock()
        if command.values is None or now - command.at > self.settings.stale_s:
            if command.values is None and now - self._entered_current <= self.settings.stale_s:
                return self._start_effort          # gravity until the first command
            age = 'no command' if command.values is None else \
                f'the last is {now - command.at:.3f} s old'
            self._fail(f'stale effort command ({age}; stale_s {self.settings.stale_s:g})',
                       reading)
            return None
        values = command.values
        bad = joints & ~(np.abs(values) <= self.torque_limit)   # NaN fails the comparison
        if bad.any():
            what = {self.joints[k]: float(values[k]) for k in np.flatnonzero(bad)}
            self._fail(f'effort command out of range or not finite: {what} (limits '
                       f'{self.torque_limit[bad].tolist()} N*m)', reading)
            return None
        jump = self.envelope.torque_step_fault(
            self._last_effort, values, joints,
            cycles=(now - self._last_effort_at) * self.settings.rate_hz)
        if jump:
            self._fail(jump, reading)
            return None
        if command.at == self._delay_taken:     # no newer command came: written again
            self.counts['repeated_commands'] += 1
            self._repeat_run += 1
        else:                                   # its first write: a delay to keep
            self._delay_source = self._delay_taken = command.at
            # a command or two missing is a period of delay more each; a longer run is a
            # stalled controller, which the stale limit ends (not a delay)
            if self._repeat_run <= MISSED_RUN:
                self._repeats.extend([True] * self._repeat_run)
            self._repeat_run = 0
            self._repeats.append(False)
        return values

    def command_delay(self) -> dict[str, float]:
        """The delay of the last :data:`COMMAND_DELAY_WINDOW` effort commands written in
        current mode, from the start of the read that took a command's reading (the reading
        is stamped at its end: the read's span is added, that of the writing cycle) to its
        first write's packet sent: ``p50_ms``, ``p99_ms``, ``max_ms`` and ``count`` (empty
        before the first). This is the delay the controller's gain check assumes
        (``delay_periods`` periods); it includes the wait for the next cycle, which a
        command arriving between cycles adds. The servos' own reply time and the USB
        adapter's latency sit inside the read's span; the wire time of the write after the
        packet is sent is not in it. A command written again, no newer one having come, is
        counted in ``counts['repeated_commands']``, not in the delay: a stalled controller
        ends in the stale fault, and its last command's growing age would say nothing of
        the delay of the commands that came. Runs of up to :data:`MISSED_RUN` such writes
        are commands that went missing, each a period of delay more: ``repeated_share`` is
        their share of the commands and those writes."""
        with self._lock:
            delays = np.array(self._command_delays)
            repeats = np.array(self._repeats, dtype=bool)
        if not len(delays):
            return {}
        p50, p99 = np.percentile(delays, [50.0, 99.0]) * 1e3
        return {'p50_ms': round(float(p50), 3), 'p99_ms': round(float(p99), 3),
                'max_ms': round(float(delays.max()) * 1e3, 3), 'count': len(delays),
                'repeated_share': round(float(repeats.mean()), 4)}

    def _position_goals(self, reading: Reading, in_current: np.ndarray) -> np.ndarray:
        """(8,) Goal Position counts: the command for the arm's position joints, the hold
        for the rest, the present position for current joints."""
        goals = self._hold.copy()
        arm_position = self.arm & ~in_current
        command = None
        if self._trajectory is not None:
            command = self._trajectory.at(self.clock())
        elif self._forward.values is not None:
            command = self._forward.values
        if command is not None:
            counts = np.round(command / PULSE_RAD + HOME_COUNT).astype(np.int64)
            goals[arm_position] = counts[arm_position]
            self._hold[arm_position] = goals[arm_position]
        goals[in_current] = reading.counts[in_current]
        return self._clip(goals)

    # ------------------------------------------------------------------ internals
    def _sync_read(self) -> Reading | None:
        sdk, group = self._sdk, self._read_group
        if group.txRxPacket() != sdk.COMM_SUCCESS:
            return None
        raw = np.zeros((len(self.ids), len(READ_ITEMS)), dtype=np.int64)
        for k, servo_id in enumerate(self.ids):
            if not group.isAvailable(servo_id, INDIRECT_DATA_1, READ_LENGTH):
                return None
            offset = INDIRECT_DATA_1
            for j, (_, _, size) in enumerate(READ_ITEMS):
                raw[k, j] = _signed(group.getData(servo_id, offset, size), size)
                offset += size
        # A reboot resets the indirect addresses (RAM) to their defaults, which point at the
        # indirect data itself: the row reads all zeros, Present Temperature 0 degC
        # included, which no running servo reads. Holding its pose (count 0, clipped into
        # the limits) would slam the joint there, and a row half mapped again may mix
        # mapped and unmapped bytes: such rows are read from the items themselves.
        self._remapped = [i for k, i in enumerate(self.ids)
                          if raw[k, ROW['Present Position']] == 0
                          and raw[k, ROW['Present Temperature']] == 0
                          and i not in self._unmapped]
        direct = self._remapped + self._unmapped
        try:
            for k, servo_id in enumerate(self.ids):
                if servo_id in direct:
                    raw[k] = self._direct_row(servo_id)
        except BusError as err:
            self.log(f'IDs {direct} read directly (indirect addresses reset): {err}')
            return None
        # one not mapped whose torque is off again (rebooted once more): mapped now; one
        # whose torque stayed off since its mapping failed, once MAP_AGAIN_EVERY_S passed
        now = self.clock()
        for k, servo_id in enumerate(self.ids):
            if servo_id not in self._unmapped:
                continue
            if raw[k, ROW['Torque Enable']]:
                self._map_due.pop(servo_id, None)
            elif now >= self._map_due.get(servo_id, -math.inf):
                self._remapped.append(servo_id)
        torque, errors, watchdog, current, velocity, counts, temperature = raw.T
        self._expired = [i for i, w in zip(self.ids, watchdog) if w < 0]
        self._disarmed = [i for i, w in zip(self.ids, watchdog) if w == 0]
        self._alerts = [f'ID {i}: {hardware_error_text(int(e))}'
                        for i, e in zip(self.ids, errors) if e]
        # (only a running bus is checked: open() checks its burst itself, _not_holding)
        self._torque_off = [i for i, on in zip(self.ids, torque) if not on] \
            if self.reading is not None else []
        amps = current * CURRENT_UNIT
        return Reading(self.clock(), (counts - HOME_COUNT) * PULSE_RAD,
                       velocity * VELOCITY_UNIT, amps, amps * self.current_to_effort,
                       counts.copy(), (temperature % 256).astype(np.float64))   # unsigned

    def _direct_row(self, servo_id: int) -> np.ndarray:
        """(len(READ_ITEMS),) the items of the cycle's read [raw units, signed] read from
        their own addresses (one read of 64-146, one try: the cycle's time), not through
        the indirect data.

        Raises:
            BusError: no answer.
        """
        first = READ_ITEMS[0][1]
        length = READ_ITEMS[-1][1] + READ_ITEMS[-1][2] - first
        with self._port_call(f'ID {servo_id}: read of {length} bytes at {first}'):
            data, result, error = self._packets.readTxRx(self._port, servo_id, first, length)
        if result == self._sdk.COMM_SUCCESS and not error & 0x7F:
            return np.array([_signed(int.from_bytes(bytes(data[a - first:a - first + n]),
                                                    'little'), n)
                             for _, a, n in READ_ITEMS], dtype=np.int64)
        raise BusError(f'ID {servo_id} does not answer a read of {length} bytes at {first}')

    def _switch(self, mode: str, reading: Reading) -> list[int]:
        """Torque off, mode, first goal, gains, torque on for the arm joints not in
        ``mode``; one burst of sync writes in one write to the port (:meth:`_one_write`). The
        IDs switched. Their Operating Mode is read
        back after the cycle's own write (:meth:`_check_switch`), so that a lost first goal
        is written again before anything else happens on the bus.

        Raises:
            BusError: a write failed; every servo of the switch has then been brought back
                to a position hold (:meth:`_hold_servos`), as far as it answers.
        """
        which = [k for k in range(len(self.ids)) if self.arm[k] and self.modes[k] != mode]
        if not which:
            return []
        ids = [self.ids[k] for k in which]
        # everything computed before the torque goes off: the window is bus writes only
        if mode == 'current':
            start = np.clip(self._gravity_or_last(reading.position), -self.torque_limit,
                            self.torque_limit)
            amps = self._goal_current(start)
            first = (102, 2, {self.ids[k]: int(amps[k]) for k in which})
        else:
            held = self._clip(self._holding_goal(reading))
            first = (116, 4, {self.ids[k]: int(held[k]) for k in which})
        off = time.perf_counter()
        try:
            with self._one_write():
                self._group_write(64, 1, dict.fromkeys(ids, 0))
                self._group_write(11, 1, dict.fromkeys(ids, MODES[mode]))
                self._group_write(*first)
                if mode == 'position':
                    self._group_write(84, 2, dict.fromkeys(ids, self.settings.p_gain))
                self._group_write(64, 1, dict.fromkeys(ids, 1))
            self.torque_off_s = max(self.torque_off_s, time.perf_counter() - off)
        except BusError:
            self._restore(ids, reading)
            raise
        if mode == 'current':
            self._start_effort, self._entered_current = start, self.clock()
            self._last_effort = np.where(self.arm, start, 0.0)
            self._last_effort_at = self._entered_current
            self._effort = _Command()
        else:
            self._hold[which] = held[which]
            self._forward, self._trajectory = _Command(), None
        for k in which:
            self.modes[k] = mode
        self.counts['mode_switches'] += 1
        self._switched = (ids, mode)
        self.log(f'IDs {ids} in {mode} mode')
        return ids

    def _check_switch(self, reading: Reading) -> None:
        """After a switch: its servos' Operating Mode read back (one sync read, up to three
        tries). A lost sync write has no answer: a servo left in the old mode is found
        here, and the switch ends in a position hold and a fault (one left with its torque
        off is found by the next cycle's read). A port that raises latches a fault and is
        raised again: the modes of a switch back are then unknown (:meth:`_resolve_unknown`
        reads them in the next cycles), and a switch to current mode is switched back to
        the hold at once."""
        ids, mode = self._switched
        self._switched = ([], '')
        value = MODES[mode]
        try:
            found = self._read_modes(ids, tries=3)
        except BusError as err:
            if mode == 'position':
                # not known: one may still be in current mode (its packet lost), which
                # 'position' would hide; read each cycle until known, gravity meanwhile.
                # (After a switch to current, 'current' stays: the fault switches every
                # one of them back to the position hold at once.)
                for servo_id in ids:
                    self.modes[self.ids.index(servo_id)] = 'unknown'
            # held before the error leaves cycle(): a caller that dies of it leaves no
            # servo in current mode for the Bus Watchdog to drop
            self._fail(f'mode switch to {mode}: reading the modes back failed: {err}',
                       reading)
            raise
        wrong = [i for i in ids if found.get(i) != value]
        if wrong:
            # as read back, not as intended: one left in current mode gets its torque off
            # before its mode is written (silent: 'unknown', the same)
            names = {v: name for name, v in MODES.items()}
            for servo_id in ids:
                self.modes[self.ids.index(servo_id)] = names.get(found.get(servo_id, -1),
                                                                 'unknown')
            self._restore(ids, reading)
            self._fail(f'mode switch to {mode} failed: IDs {wrong} did not take Operating '
                       f'Mode {value}', reading)

    def _restore(self, ids: Sequence[int], reading: Reading, watchdog: int | None = None,
                 goals: np.ndarray | None = None) -> list[int]:
        """Every servo of ``ids``, whatever a failure left it in (torque off, half switched),
        back to position mode holding the pose of ``reading`` with its torque on: first for
        all at once (one sync write per item, all in one write to the port, then Torque
        Enable and Operating Mode read back), so that no servo waits for the others' round
        trips; then one by one for those the burst did not bring back
        (:meth:`_hold_servos`). ``goals`` (8,) [counts]: the hold's, default the goal that
        holds ``reading``. The IDs left unheld.

        ``watchdog`` 0: a servo that was in another mode leaves the burst with the watchdog
        armed all the same (its mode packet lost, it would run its current unwatched) and
        has it turned off once read back holding."""
        goals = self._clip(self._holding_goal(reading)) if goals is None else goals
        self._hold_here(ids, goals)
        # the mode is taken only with the torque off: a servo in current mode would keep
        # its current, the watchdog written below perhaps off (as a switch does, first)
        other = [i for i in ids if self.modes[self.ids.index(i)] != 'position']
        final = self._watchdog_units(watchdog)
        try:
            with self._one_write():
                if other:
                    self._group_write(64, 1, dict.fromkeys(other, 0))
                # a tripped watchdog refuses goals
                self._group_write(98, 1, dict.fromkeys(ids, 0))
                if other:      # armed again at once: a burst cut short, or a lost torque-off
                    # or mode packet, must not leave a current running unwatched
                    self._group_write(98, 1, dict.fromkeys(other, self._watchdog_units(None)))
                self._group_write(11, 1, dict.fromkeys(ids, MODES['position']))
                self._group_write(116, 4, {i: int(goals[self.ids.index(i)]) for i in ids})
                self._group_write(84, 2, dict.fromkeys(ids, self.settings.p_gain))
                self._group_write(64, 1, dict.fromkeys(ids, 1))
                last = [i for i in ids if final or i not in other]
                if last:
                    self._group_write(98, 1, dict.fromkeys(last, final))
            wrong = self._not_holding(ids)
        except BusError:
            wrong = list(ids)
        for servo_id in ids:
            if servo_id not in wrong:
                self.modes[self.ids.index(servo_id)] = 'position'
        if not final:
            self._watchdog_off([i for i in other if i not in wrong])
        return self._hold_servos(wrong, reading, watchdog, goals) if wrong else []

    def _watchdog_off(self, ids: Sequence[int]) -> list[int]:
        """Bus Watchdog (98) 0 on the servos ``ids``, which no one will read: an armed one
        would expire and its servo stop where it is, without the hold's gravity offset. A
        sync write has no answer, so it is read back, and a servo that did not take it is
        written one by one with an acknowledged write. The IDs it may still be armed on
        (silent or refusing); never raises."""
        if not ids:
            return []
        try:
            self._group_write(98, 1, dict.fromkeys(ids, 0))
            group, answered = self._group_read(98, 1, ids, tries=1)
            left = [i for i in ids if i not in answered or group.getData(i, 98, 1) != 0]
        except BusError:
            left = list(ids)
        for servo_id in list(left):
            with contextlib.suppress(BusError):
                self._write(servo_id, 98, 1, 0)
                left.remove(servo_id)
        return left

    def _not_holding(self, ids: Sequence[int]) -> list[int]:
        """The IDs among ``ids`` not in position mode with the torque on, or not answering
        (one sync read of Operating Mode (11) to Torque Enable (64))."""
        group, answered = self._group_read(11, 54, ids, tries=1)
        return [i for i in ids if i not in answered
                or group.getData(i, 11, 1) != MODES['position'] or group.getData(i, 64, 1) != 1]

    def _hold_here(self, ids: Sequence[int], goals: np.ndarray) -> None:
        """Forget the position commands and make ``goals`` (8,) [counts] the hold of
        ``ids``: after a failure the arm stays where it is, never goes back to a command
        from before."""
        self._forward, self._trajectory = _Command(), None
        for servo_id in ids:
            k = self.ids.index(servo_id)
            self._hold[k] = goals[k]

    def _watchdog_units(self, watchdog: int | None) -> int:
        return round(self.settings.watchdog_s / WATCHDOG_UNIT) if watchdog is None \
            else watchdog

    def _hold_servos(self, ids: Sequence[int], reading: Reading,
                     watchdog: int | None = None, goals: np.ndarray | None = None
                     ) -> list[int]:
        """Bring each servo of ``ids`` back to position mode holding the pose of
        ``reading`` with its torque on: one servo at a time, with acknowledged writes
        (the whole sequence tried :data:`HOLD_TRIES` times), then Torque Enable and
        Operating Mode read back; the Bus Watchdog armed (``watchdog`` [20 ms units], default
        the setting's; ``goals`` (8,) [counts] as in :meth:`_restore`). The slow path of
        :meth:`_restore`: a few round trips per servo.
        Sets :attr:`modes` of each; the IDs that could not be held ('off': the torque reads
        0, as after a shutdown error, which only a reboot clears; 'unknown': no answer)."""
        goals = self._clip(self._holding_goal(reading)) if goals is None else goals
        self._hold_here(ids, goals)
        armed = self._watchdog_units(watchdog)
        position, left = MODES['position'], []
        for servo_id in ids:
            k = self.ids.index(servo_id)
            # the mode needs the torque off, and a tripped Bus Watchdog refuses goals until
            # 98 := 0: off in that order, so a servo in current mode whose port fails
            # between the two is left without torque, never running its last current unwatched
            steps = ((64, 1, 0), (98, 1, 0), (11, 1, position), (116, 4, int(goals[k])),
                     (84, 2, self.settings.p_gain), (64, 1, 1), (98, 1, armed))
            held = False
            for _ in range(HOLD_TRIES):
                try:
                    # already on in position mode: no torque-off moment is needed
                    todo = steps[1:2] + steps[3:5] + steps[6:] if (
                        self._read(servo_id, 64, 1) == 1
                        and self._read(servo_id, 11, 1) == position) else steps
                    for address, size, value in todo:
                        self._write(servo_id, address, size, value)
                    held = (self._read(servo_id, 64, 1) == 1
                            and self._read(servo_id, 11, 1) == position)
                except BusError:
                    continue
                if held:
                    break
            if held:
                self.modes[k] = 'position'
                continue
            try:
                self.modes[k] = 'off' if self._read(servo_id, 64, 1) == 0 else 'unknown'
            except BusError:
                self.modes[k] = 'unknown'
            left.append(servo_id)
        self.counts['holds'] += 1
        held_ids = [i for i in ids if i not in left]
        self.log(f'IDs {held_ids} brought back to a position hold' + (
            f'; IDs {left} could not be (torque off after a shutdown error needs a reboot)'
            if left else ''))
        return left

    def _holding_goal(self, reading: Reading, stiffness: np.ndarray | None = None
                      ) -> np.ndarray:
        """(8,) Goal Position [counts] that holds the present pose: a P-only position loop
        makes torque from an error, so the goal sits the gravity torque's deflection
        (g / K_s at the written P gain; ``stiffness`` (8,) [N*m/rad], default that of
        ``p_gain``) beyond the present position, or the arm would sag by it (37 mrad on the
        elbow at the bent pose) when current mode ends."""
        k_s = self.stiffness if stiffness is None else stiffness
        g = np.clip(self._gravity_or_last(reading.position), -self.torque_limit,
                    self.torque_limit)
        return reading.counts + np.round(g / k_s / PULSE_RAD).astype(np.int64)

    def _gravity_or_last(self, position: np.ndarray) -> np.ndarray:
        """(8,) gravity torque [N*m] of ``position``; if the model raises or gives what
        is not finite, the last one it gave (the pose rarely moved far since: a hold with
        it sags less than one without), logged."""
        try:
            g = np.asarray(self._gravity(position), dtype=np.float64)
            if g.shape == self._last_gravity.shape and np.all(np.isfinite(g)):
                self._last_gravity = g
                return g
            why = f'not finite or not {len(self.ids)} values: {g}'
        except Exception as err:  # noqa: BLE001 - a hold must not fail on the model
            why = repr(err)
        self.log(f'gravity torque failed ({why}): the last one is used')
        return self._last_gravity

    def _fail(self, reason: str, reading: Reading | None) -> None:
        """Latch ``reason`` (the first one stays) and hold: every current joint goes to
        position mode at its pose, and every servo the last read found with its torque off
        is brought back to a hold (one that could not be is tried again after
        :meth:`clear_fault`)."""
        new = not self.fault
        if new:
            self.fault = reason
            self.counts['faults'] += 1
            self.log(f'fault: {reason}; holding in position mode')
        self._pending = None
        if reading is None:
            return
        if new:        # the position joints stop where they are, whatever they followed
            self._hold_here([i for i, m in zip(self.ids, self.modes) if m == 'position'],
                            self._clip(self._holding_goal(reading)))
        switched: list[int] = []
        if 'current' in self.modes:
            try:
                switched = self._switch('position', reading)
            except BusError as err:
                self.log(f'the burst to position mode failed ({err}); the servos were '
                         'brought back to a hold')
                return
        # one that could not be held ('off', 'unknown') waits for clear_fault: no retry
        # every cycle, each costing reply timeouts
        limp = [i for i in self._torque_off if i not in switched
                and self.modes[self.ids.index(i)] not in ('off', 'unknown')]
        if limp:
            self._restore(limp, reading)

    def _arm_values(self, positions: Sequence[float], joints: Sequence[str],
                    count: bool = True) -> np.ndarray | None:
        """(8,) radians: ``positions`` placed by joint name, the present goal elsewhere;
        None (counted unless not ``count``) for bad input, before :meth:`open` has found
        the pose, or while a fault is latched (the hold stays until :meth:`clear_fault`)."""
        if self.fault or self.reading is None:
            self.counts['rejected_commands'] += count
            return None
        values = self._goal_radians()
        try:
            given = np.asarray(positions, dtype=np.float64)
            index = [self.joints.index(j) for j in joints]
        except (ValueError, TypeError):
            given, index = np.zeros(0), []
        if given.shape != (len(joints),) or not index or not np.all(np.isfinite(given)):
            self.counts['rejected_commands'] += count
            return None
        values[index] = given
        return values

    def _goal_radians(self) -> np.ndarray:
        return (self._hold - HOME_COUNT) * PULSE_RAD

    def _clip(self, counts: np.ndarray) -> np.ndarray:
        return np.clip(counts, self.limits[:, 0], self.limits[:, 1])



def gravity_in_chain_order(model: RobotModel, joints: Sequence[str]
                           ) -> Callable[[np.ndarray], np.ndarray]:
    """The ``gravity`` of :class:`BusDriver` for ``model``: (len(joints),) positions [rad]
    in chain order -> gravity torque [N*m] of those joints, same order (the engine's,
    through the model's actuation matrix, mimic joints included).

    Raises:
        ValueError: a chain joint the model does not actuate.
    """
    from plag_ros.core.dynamics.arrays import ArrayLagrangian
    from plag_ros.core.dynamics.model import actuation_matrix

    engine = ArrayLagrangian(model)
    G, offset = actuation_matrix(model)
    act_names = model.actuated_names
    missing = [j for j in joints if j not in act_names]
    if missing:
        raise ValueError(f'the model {model.name!r} has no actuated joints {missing} of the '
                         'servo chain: it is not the robot on this bus')
    index = np.array([act_names.index(j) for j in joints])

    def gravity(q_chain: np.ndarray) -> np.ndarray:
        q_act = np.zeros(len(act_names))
        q_act[index] = q_chain
        return (G.T @ engine.gravity_torque(G @ q_act + offset))[index]

    return gravity


def _per_servo(name: str, given: Sequence[float], n: int, defaults: Sequence[float]
               ) -> np.ndarray:
    """(n,) values of a setting given as one value or one per servo, 0 taking
    ``defaults`` (n,).

    Raises:
        ValueError: another number of values, or a value that is not positive and finite.
    """
    values = np.asarray(given, dtype=np.float64)
    if values.shape not in ((1,), (n,)):
        raise ValueError(f'{name} needs 1 or {n} values, got {values.tolist()}')
    out = np.where(np.broadcast_to(values, (n,)) == 0.0, np.asarray(defaults, float), values)
    if not (np.all(np.isfinite(out)) and np.all(out > 0.0)):
        raise ValueError(f'{name} {out.tolist()} must be positive and finite')
    return out


def _differing(items: dict[int, dict[int, int]], found: dict[int, dict[int, int]],
               addresses: Iterable[int]) -> dict[int, dict[int, int]]:
    """{address: {ID: value}} of ``items`` at ``addresses`` that ``found`` (of
    :meth:`BusDriver._read_back`) does not hold: all of them for a servo not found."""
    return {address: {i: v for i, v in items[address].items()
                      if found.get(i, {}).get(address) != v}
            for address in sorted(addresses)}


def _untaken(items: dict[int, dict[int, int]], found: dict[int, dict[int, int]]
             ) -> list[int]:
    """The IDs whose ``items`` (every address) ``found`` does not hold."""
    return sorted({i for address, values in items.items() for i, v in values.items()
                   if found.get(i, {}).get(address) != v})


def _signed(value: int, size: int) -> int:
    bits = 8 * size
    return value - (1 << bits) if value >= 1 << (bits - 1) else value
