"""One emulated Dynamixel X servo: its control table and the firmware under it.

The table side follows the ROBOTIS e-manual (model pages and their includes, read at the
commits named in ``tables/*.yaml``; what a servo answers is summarised in
``docs/concepts/servo-bus.md``):

* reads of any address below 662 (a gap reads 0), writes checked item by item: a write must
  cover whole items (Data Length Error), may not touch a read-only or undefined address or
  the EEPROM (0-63) while the torque is on (Access Error), and must stay in the item's range,
  a range that may be another item's value (Goal Current within +-Current Limit, Goal
  Position within the position limits in Operating Mode 3) (Data Range Error);
* Indirect Data bytes read and write the byte their Indirect Address names;
* Operating Mode changes reset the profile, Goal PWM and Goal Current (to the PWM and
  Current Limits) and the position gains (to their initial values);
* Hardware Error Status (70) with the Shutdown mask (63): a shutdown error turns the torque
  off until a reboot, and every status packet carries the alert bit while 70 is not 0;
* Bus Watchdog (98, 20 ms units): checked while the torque is on; on expiry it reads -1,
  the servo stops (goal position := present position, goal current := 0, profile 0) and
  writes to the goal items answer a Data Range Error until 0 is written to 98.

The firmware side drives the project's simulated arm (:mod:`plag_ros.core.simulation`),
with the one servo model of :mod:`plag_ros.core.dynamics.motors`:

* Position Control (3) and Current-based Position Control (5): a position spring of
  stiffness :func:`~plag_ros.core.dynamics.motors.position_loop_stiffness` at the written
  Position P Gain, with the motor's back-EMF damping, towards the profile generator's
  position, saturating at the stall torque times PWM Limit / 885 (and, in mode 5, at the
  torque of Goal Current);
* Current Control (0): the torque of Goal Current within Current Limit,
  ``current * 2.69 mA * torque constant``, and, when it drives the motion, within what the
  12 V supply allows at that speed: the stall torque falling to 0 at the no-load speed
  (46 rev/min for the XM430-W350), so that no joint is driven faster than its motor can;
* the velocity-based profile (Profile Velocity 0.229 rev/min, Profile Acceleration 214.577
  rev/min^2, 0 = unlimited): a trapezoid towards Goal Position, re-planned from the present
  profile velocity when the goal changes;
* Present Position in encoder counts (4096 per turn, 2048 at the joint's zero, plus Homing
  Offset), Present Velocity in 0.229 rev/min, Present Current the torque the servo makes
  over the torque constant in 2.69 mA, Present PWM that torque over the stall torque in
  units of 885, Realtime Tick, Moving, Moving Status (profile ongoing).

Not modelled (a client that relies on them sees the difference): Position I and D Gains and
the feedforward gains (stored, read back, not acting; the CRANE-X7's driver writes 0 for I
and D), the velocity loop, Velocity (1), Extended Position (4) and PWM (16) Control Modes
(writing them answers a Data Range Error), the time-based profile and Drive Mode's reverse
bit, the temperature and voltage sensors (35 degC and 12.0 V unless a fault sets them),
Secondary ID, backup and factory reset.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass

from plag_ros.bus.control_table import (
    CURRENT_UNIT,
    HOME_COUNT,
    INDIRECT_BLOCKS,
    PROFILE_ACCELERATION_UNIT,
    RETURN_DELAY_UNIT,
    TABLE_END,
    VELOCITY_UNIT,
    WATCHDOG_UNIT,
    ControlTable,
    Item,
)
from plag_ros.bus.protocol import ErrorNumber
from plag_ros.core.dynamics.motors import (
    PULSE_RAD,
    PWM_FULL_SCALE,
    Motor,
    position_loop_stiffness,
)

__all__ = ['OVERHEATING', 'OVERLOAD', 'Drive', 'Servo']

OVERLOAD = 0x20
"""Hardware Error Status bit 5."""
OVERHEATING = 0x04
"""Hardware Error Status bit 2."""
GOAL_ITEMS = frozenset({'Goal PWM', 'Goal Current', 'Goal Velocity', 'Goal Position'})
MODELLED_MODES = frozenset({0, 3, 5})
EXTENDED_GOAL = 1_048_575
TEMPERATURE_C = 35
VOLTAGE_DV = 120


@dataclass(frozen=True)
class Drive:
    """What one servo asks of its joint for the next physics step.

    Attributes:
        position: True for a position spring, False for a torque (or nothing, torque off).
        goal: [rad] the spring's goal (the profile's present position).
        torque: [N*m] the torque of a current-mode servo (0 with the torque off).
        stiffness: [N*m/rad] the spring's stiffness.
        torque_limit: [N*m] saturation of whatever the servo makes.
    """

    position: bool
    goal: float
    torque: float
    stiffness: float
    torque_limit: float


class Servo:
    """One servo: the table in memory and the firmware state.

    Args:
        table: its model's control table.
        motor: its motor (stall torque, torque constant) from the motor table.
        eeprom: values set in the EEPROM at power-on, by item name (ID, limits, ...).
        firmware_version: what address 6 reads.
    """

    def __init__(self, table: ControlTable, motor: Motor, eeprom: dict[str, int],
                 firmware_version: int) -> None:
        self.table, self.motor = table, motor
        self.firmware_version = firmware_version
        self._eeprom = dict(eeprom)
        self.mem = bytearray(TABLE_END)
        self.last_packet = 0.0
        """Time [s] of the last packet this servo heard (the watchdog's reference)."""
        self.registered: tuple[int, bytes] | None = None
        """(address, data) of a REG_WRITE waiting for ACTION."""
        self.temperature = TEMPERATURE_C
        self._codecs = {item.name: _codec(item) for item in table.items}
        # Indirect Data byte -> its Indirect Address slot (None for every other address)
        self._slot: list[int | None] = [None] * TABLE_END
        for first_address, first_data, slots in INDIRECT_BLOCKS:
            for k in range(slots):
                self._slot[first_data + k] = first_address + 2 * k
        self.power_on()

    # ------------------------------------------------------------------ memory
    def get(self, name: str) -> int:
        """Value of item ``name`` as stored (signed where the item is)."""
        codec, address, _, _ = self._codecs[name]
        return codec.unpack_from(self.mem, address)[0]

    def _put(self, name: str, value: int) -> None:
        """Store ``value`` in item ``name``, clipped to what its bytes hold."""
        codec, address, lo, hi = self._codecs[name]
        codec.pack_into(self.mem, address, min(max(int(value), lo), hi))

    @property
    def id(self) -> int:
        return self.mem[7]

    @property
    def torque_on(self) -> bool:
        return self.mem[64] == 1

    @property
    def return_delay(self) -> float:
        """Return Delay Time [s]."""
        return self.mem[9] * RETURN_DELAY_UNIT

    @property
    def alert(self) -> bool:
        """The status packets' alert bit: a hardware error is present."""
        return self.mem[70] != 0

    def power_on(self) -> None:
        """Every item at its initial value, the EEPROM at the configured ones."""
        self.mem[:] = bytes(TABLE_END)
        for item in self.table.items:
            if item.initial is not None:
                self._put(item.name, item.initial)
        for name, value in self._eeprom.items():
            self._put(name, value)
        self._put('Firmware Version', self.firmware_version)
        self._boot()

    def reboot(self) -> None:
        """The REBOOT instruction: RAM back to its initial values (EEPROM kept), hardware
        errors and the watchdog error cleared, torque off."""
        for item in self.table.items:
            if not item.eeprom and item.initial is not None:
                self._put(item.name, item.initial)
        self.mem[70] = 0
        self.temperature = TEMPERATURE_C
        self._boot()

    def _boot(self) -> None:
        self._shutdown = False
        self._watchdog_error = False
        self._booted = True              # goal := present at the first sense
        self._profile_position = 0.0     # [counts]
        self._profile_velocity = 0.0     # [counts/s]
        self._watchdog_since = self.last_packet
        self.registered = None
        self._put('Goal PWM', self.get('PWM Limit'))
        self._put('Goal Current', self.get('Current Limit'))

    def _target(self, address: int) -> int:
        """The address an access to ``address`` reaches (through an indirect slot)."""
        slot = self._slot[address]
        return address if slot is None else self.mem[slot] | self.mem[slot + 1] << 8

    def read(self, address: int, length: int) -> tuple[int, bytes]:
        """(error, data) of a READ of ``length`` bytes at ``address``."""
        if address < 0 or length < 0 or address + length > TABLE_END:
            return ErrorNumber.ACCESS, b''
        mem, slot = self.mem, self._slot
        if not any(slot[address:address + length]):
            return ErrorNumber.NONE, bytes(mem[address:address + length])
        return ErrorNumber.NONE, bytes(
            [mem[a] if s is None else mem[mem[s] | mem[s + 1] << 8]
             for a, s in zip(range(address, address + length), slot[address:address + length])])

    def write(self, address: int, data: bytes) -> int:
        """A WRITE of ``data`` at ``address``: the error number; nothing is written on an
        error."""
        if address < 0 or address + len(data) > TABLE_END:
            return ErrorNumber.ACCESS
        at, target = self.table.at, self._target
        groups: dict[int, tuple[Item, bytearray, set[int]]] = {}   # by item address
        for offset, byte in enumerate(data):
            reached = target(address + offset)
            item = at(reached)
            if item is None:
                return ErrorNumber.ACCESS
            group = groups.get(item.address)
            if group is None:
                group = groups[item.address] = (item, bytearray(item.size), set())
            group[1][reached - item.address] = byte
            group[2].add(reached)
        values: list[tuple[Item, int]] = []
        for item, given, covered in groups.values():
            if len(covered) != item.size:
                return ErrorNumber.DATA_LENGTH
            if not item.writable or (item.eeprom and self.torque_on):
                return ErrorNumber.ACCESS
            value = int.from_bytes(given, 'little', signed=item.signed)
            if not self._in_range(item, value):
                return ErrorNumber.DATA_RANGE
            values.append((item, value))
        for item, value in values:
            self._apply(item, value)
        return ErrorNumber.NONE

    def _bound(self, bound: int | str | None) -> int | None:
        if bound is None or isinstance(bound, int):
            return bound
        negative = bound.startswith('-')
        value = self.get(bound.lstrip('-'))
        return -value if negative else value

    def _in_range(self, item: Item, value: int) -> bool:
        name = item.name
        if self._watchdog_error and name in GOAL_ITEMS:
            return False
        if name == 'Operating Mode':
            return value in MODELLED_MODES
        if name == 'Goal Position' and self.mem[11] != 3:
            return -EXTENDED_GOAL <= value <= EXTENDED_GOAL
        lo, hi = self._bound(item.low), self._bound(item.high)
        return (lo is None or value >= lo) and (hi is None or value <= hi)

    def _apply(self, item: Item, value: int) -> None:
        name = item.name
        if name == 'Torque Enable' and value == 1 and self._shutdown:
            return                     # only a reboot brings the torque back after a shutdown
        if name == 'Operating Mode' and value != self.mem[11]:
            for reset in ('Profile Velocity', 'Profile Acceleration'):
                self._put(reset, 0)
            self._put('Goal PWM', self.get('PWM Limit'))
            self._put('Goal Current', self.get('Current Limit'))
            for gain in ('Position P Gain', 'Position I Gain', 'Position D Gain',
                         'Feedforward 1st Gain', 'Feedforward 2nd Gain'):
                self._put(gain, self.table[gain].initial or 0)
        if name == 'Bus Watchdog':
            self._watchdog_error = False
            self._watchdog_since = self.last_packet
        if name == 'Torque Enable' and value == 1 and not self.torque_on:
            self._profile_position = float(self.get('Present Position'))
            self._profile_velocity = 0.0
        self._put(name, value)

    # ------------------------------------------------------------------ faults
    def hardware_error(self, bits: int) -> None:
        """Raise Hardware Error Status bits (:data:`OVERLOAD`, :data:`OVERHEATING`, ...):
        with a bit of the Shutdown mask the torque goes off until a reboot."""
        self.mem[70] |= bits & 0x3F
        if bits & OVERHEATING:
            self.temperature = self.get('Temperature Limit') + 1
        if bits & self.mem[63]:
            self._shutdown = True
            self.mem[64] = 0

    def heat(self, degc: int) -> None:
        """Present Temperature := ``degc``; above Temperature Limit (31) the servo raises
        Overheating (e-manual "Temperature Limit": the bit, and Torque Enable := 0 when
        Shutdown (63) has it)."""
        self.temperature = degc
        if degc > self.get('Temperature Limit'):
            self.hardware_error(OVERHEATING)
            self.temperature = degc

    # ------------------------------------------------------------------ firmware
    def sense(self, q: float, qd: float, torque: float, t: float) -> None:
        """Update the present items from the joint's state.

        Args:
            q: [rad] joint position; qd: [rad/s]; torque: [N*m] the torque the motor made
                over the last step; t: [s] the servo's clock.
        """
        homing = self.get('Homing Offset')
        present = HOME_COUNT + round(q / PULSE_RAD) + homing
        velocity = round(qd / VELOCITY_UNIT)
        if self._booted:               # power-on: goal and profile start where the joint is
            self._booted = False
            self._put('Goal Position', present)
            self._profile_position = float(present)
            self._profile_velocity = 0.0
            self._watchdog_since = t
        motor = self.motor
        current = round(torque / motor.torque_constant / CURRENT_UNIT)
        pwm = round(torque / motor.stall_torque * PWM_FULL_SCALE)
        ongoing = self._profile_position != self.get('Goal Position')
        # Realtime Tick (120) to Present Temperature (146) in one go
        _PRESENT.pack_into(
            self.mem, 120, int(t * 1000.0) % 32768,
            int(abs(velocity) > self.get('Moving Threshold')), 0x02 if ongoing else 0x00,
            min(max(pwm, -32768), 32767), min(max(current, -32768), 32767),
            _int32(velocity), _int32(present),
            _int32(round(self._profile_velocity * PULSE_RAD / VELOCITY_UNIT)),
            _int32(round(self._profile_position)), VOLTAGE_DV, min(self.temperature, 255))

    def _expire_watchdog(self) -> None:
        self._watchdog_error = True
        self._put('Bus Watchdog', -1)
        present = self.get('Present Position')
        self._put('Goal Position', present)
        self._put('Goal Current', 0)
        self._put('Profile Velocity', 0)
        self._put('Profile Acceleration', 0)
        self._profile_position, self._profile_velocity = float(present), 0.0

    def drive(self, t: float, dt: float) -> Drive:
        """What the servo makes over the next ``dt`` seconds, from its table at time ``t``."""
        motor = self.motor
        watchdog = self.get('Bus Watchdog')
        if (self.torque_on and watchdog > 0 and not self._watchdog_error
                and t - max(self.last_packet, self._watchdog_since) > watchdog * WATCHDOG_UNIT):
            self._expire_watchdog()
        if not self.torque_on:
            return Drive(False, 0.0, 0.0, 0.0, 0.0)
        mode = self.mem[11]
        kt = motor.torque_constant
        current_limit = self.get('Current Limit') * CURRENT_UNIT * kt
        if mode == 0:
            limit = min(motor.stall_torque, current_limit)
            torque = min(max(self.get('Goal Current') * CURRENT_UNIT * kt, -limit), limit)
            # the supply's voltage: with the motion, the torque falls from the stall torque
            # at rest to 0 at the no-load speed (the line of position mode's back-EMF)
            v = self.get('Present Velocity') * VELOCITY_UNIT
            if torque * v > 0.0:
                most = motor.stall_torque * max(0.0, 1.0 - abs(v) / motor.no_load_speed)
                torque = math.copysign(min(abs(torque), most), torque)
            return Drive(False, 0.0, torque, 0.0, limit)
        limit = motor.stall_torque * self.get('PWM Limit') / PWM_FULL_SCALE
        if mode == 5:
            limit = min(limit, abs(self.get('Goal Current')) * CURRENT_UNIT * kt)
        self._profile_step(dt)
        offset = HOME_COUNT + self.get('Homing Offset')
        goal = (self._profile_position - offset) * PULSE_RAD
        stiffness = float(position_loop_stiffness(motor.stall_torque,
                                                  self.get('Position P Gain')))
        return Drive(True, goal, 0.0, stiffness, limit)

    def _profile_step(self, dt: float) -> None:
        """Move the profile's position [counts] towards Goal Position for ``dt`` seconds."""
        goal = float(self.get('Goal Position'))
        profile_velocity = self.get('Profile Velocity')
        if profile_velocity == 0:
            self._profile_position, self._profile_velocity = goal, 0.0
            return
        v_max = min(profile_velocity, self.get('Velocity Limit') or profile_velocity) \
            * VELOCITY_UNIT / PULSE_RAD
        acceleration = self.get('Profile Acceleration') * PROFILE_ACCELERATION_UNIT / PULSE_RAD
        left = goal - self._profile_position
        v = self._profile_velocity
        if acceleration > 0.0:
            # the fastest speed from which steps slowing by a dt each stop exactly at the
            # goal (n steps of n a dt, (n-1) a dt, ... cover a dt^2 n (n + 1) / 2)
            dv = acceleration * dt
            braking = dv * (math.sqrt(0.25 + 2.0 * abs(left) / (dv * dt)) - 0.5)
            v_target = math.copysign(min(v_max, braking), left)
            v = min(max(v_target, v - dv), v + dv)
        else:
            v = math.copysign(v_max, left)
        step = v * dt
        if abs(step) >= abs(left) or left == 0.0:
            self._profile_position, self._profile_velocity = goal, 0.0
        else:
            self._profile_position += step
            self._profile_velocity = v


_PRESENT = struct.Struct('<HBBhhiiiiHB')
"""Realtime Tick, Moving, Moving Status, Present PWM, Current, Velocity, Position, Velocity
and Position Trajectory, Present Input Voltage and Temperature (addresses 120-146)."""


def _int32(value: int) -> int:
    return min(max(value, -(1 << 31)), (1 << 31) - 1)


def _codec(item: Item) -> tuple[struct.Struct, int, int, int]:
    """(struct, address, lowest, highest value its bytes hold) of one item."""
    bits = 8 * item.size
    code = {1: 'b', 2: 'h', 4: 'i'}[item.size]
    if item.signed:
        return struct.Struct('<' + code), item.address, -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return struct.Struct('<' + code.upper()), item.address, 0, (1 << bits) - 1
