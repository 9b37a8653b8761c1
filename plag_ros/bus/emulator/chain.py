"""Servos on one bus: instruction packets in, the status packets real servos send out.

The Protocol 2.0 rules applied here (ROBOTIS e-manual,
``ROBOTIS-GIT/emanual/docs/en/dxl/protocol2.md`` @ 01179568a085cfc99bdad6e880e43fa871bd318a
and the newer text of the same page, "Response Policy"; the servo rules in
:mod:`plag_ros.bus.emulator.servo`):

* every servo hears every packet (that is what feeds each one's Bus Watchdog); a packet to
  an ID nobody has is not answered;
* broadcast (0xFE) PING, SYNC READ and BULK READ are answered, one status packet per servo
  in the order of the IDs in the instruction (PING: in ID order); broadcast READ, WRITE,
  SYNC WRITE and BULK WRITE are not;
* Status Return Level (68): 0 answers PING only, 1 PING and the reads, 2 everything;
* a packet whose CRC fails is answered with a CRC Error by the servo it names (the e-manual
  defines the error but does not say whether it is sent; the servos of this chain send it);
* an unknown instruction, or ACTION with nothing registered, answers an Instruction Error;
  so do the instructions not modelled here (factory reset, clear, backup, the fast reads);
* a malformed parameter block (a READ without its four bytes, a SYNC block cut short)
  answers a Data Length Error where an answer is due (the e-manual is silent);
* a servo whose Baud Rate (8) is not the bus's hears nothing.

Faults for tests (:class:`ReplyFaults`, :attr:`ServoChain.powered`): replies of one ID
dropped, late or corrupted, an ID that never answers, writes to one ID lost, and the bus
without power (nothing
heard or answered; the servos keep their state and their last goals, and an armed watchdog
stops them). Overload and overheating are the servo's own
(:meth:`plag_ros.bus.emulator.servo.Servo.hardware_error`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from plag_ros.bus.emulator.servo import Servo
from plag_ros.bus.protocol import (
    ALERT,
    BROADCAST_ID,
    ErrorNumber,
    FrameError,
    Instruction,
    Packet,
    encode_status,
)

__all__ = ['BAUD_CODES', 'Reply', 'ReplyFaults', 'ServoChain']

BAUD_CODES = {9600: 0, 57600: 1, 115200: 2, 1_000_000: 3, 2_000_000: 4, 3_000_000: 5,
              4_000_000: 6, 4_500_000: 7}
"""Baud Rate (8) value of each rate [bit/s] (e-manual, X430/X540 "Baud Rate")."""
_READS = frozenset({Instruction.READ, Instruction.SYNC_READ, Instruction.BULK_READ})
LOST = -1
"""The error of a write the servo never heard (:attr:`ReplyFaults.lose`): no answer."""


@dataclass
class ReplyFaults:
    """Faults injected into one servo's replies (tests).

    Attributes:
        silent: the servo never answers (it still hears and obeys).
        drop: drop the next ``drop`` replies.
        corrupt: corrupt the CRC of the next ``corrupt`` replies.
        late: [s] send every reply this much later.
        lose: the ``lose``-th next write to the servo (WRITE, or its part of a SYNC or
            BULK WRITE; 1 = the next, 0 = none) is lost: the servo never hears it, so it
            neither obeys nor answers it, as with a packet cut on the wire.
    """

    silent: bool = False
    drop: int = 0
    corrupt: int = 0
    late: float = 0.0
    lose: int = 0


@dataclass(frozen=True)
class Reply:
    """A status packet to send ``delay`` seconds after the previous one (or after the
    instruction, for the first)."""

    servo_id: int
    packet: bytes
    delay: float


class ServoChain:
    """The servos of one bus.

    Args:
        servos: the servos, in any order (IDs must differ).
        baud_rate: the bus's rate [bit/s]; servos set to another rate are deaf.
    """

    def __init__(self, servos: Sequence[Servo], baud_rate: int = 3_000_000) -> None:
        ids = [s.id for s in servos]
        if len(set(ids)) != len(ids):
            raise ValueError(f'servo IDs repeat: {ids}')
        self.servos = list(servos)
        self.baud_code = BAUD_CODES[baud_rate]
        self._by_id: dict[int, Servo] = {}
        self.powered = True
        self.faults: dict[int, ReplyFaults] = {}
        self.instructions = 0
        """Packets taken (CRC failures included)."""
        self.replies = 0
        """Status packets sent (dropped ones not counted)."""
        self.frame_errors = 0
        """Packets taken off the bus that failed their CRC or length."""
        self.foreign_status = 0
        """Status packets seen on the bus (another device's answers, or an echo)."""

    def servo(self, servo_id: int) -> Servo | None:
        """The servo answering ``servo_id`` now (IDs and baud rates can be rewritten)."""
        servo = self._by_id.get(servo_id)
        if servo is not None and servo.id == servo_id and servo.mem[8] == self.baud_code:
            return servo
        self._by_id = {s.id: s for s in self.servos if s.mem[8] == self.baud_code}
        return self._by_id.get(servo_id)

    def fault(self, servo_id: int) -> ReplyFaults:
        """The reply faults of ``servo_id`` (created on first use)."""
        return self.faults.setdefault(servo_id, ReplyFaults())

    def handle(self, packet: Packet | FrameError, t: float) -> list[Reply]:
        """The replies to one packet taken off the bus at time ``t`` [s]."""
        if not self.powered:
            return []
        self.instructions += 1
        for each in self.servos:
            each.last_packet = t
        if isinstance(packet, FrameError):
            self.frame_errors += 1
            named = self.servo(packet.id)
            if packet.reason != 'crc' or named is None:
                return []
            return self._replies([(named, ErrorNumber.CRC | (ALERT if named.alert else 0),
                                   b'')])
        if packet.instruction == Instruction.STATUS:
            self.foreign_status += 1
            return []                  # another servo's answer on the same wire
        # A servo answers as it was when the instruction came: a write of Status Return
        # Level is answered at the old level, a reboot with the alert it clears.
        before = {id(s): (s.mem[68], s.alert) for s in self.servos}
        answers = self._answers(packet)
        if packet.id == BROADCAST_ID and packet.instruction not in (
                Instruction.PING, Instruction.SYNC_READ, Instruction.BULK_READ):
            return []
        out = []
        for servo, error, data in answers:
            if error is LOST:
                continue                 # never heard: nothing to answer
            level, alert = before[id(servo)]
            if packet.instruction == Instruction.PING or level == 2 or (
                    level == 1 and packet.instruction in _READS):
                out.append((servo, error | (ALERT if alert or servo.alert else 0), data))
        return self._replies(out)

    def _replies(self, answers: list[tuple[Servo, int, bytes]]) -> list[Reply]:
        out = []
        for servo, error, data in answers:
            fault = self.faults.get(servo.id)
            if fault is not None and fault.silent:
                continue
            if fault is not None and fault.drop > 0:
                fault.drop -= 1
                continue
            packet = encode_status(servo.id, error, data)
            delay = servo.return_delay
            if fault is not None:
                delay += fault.late
                if fault.corrupt > 0:
                    fault.corrupt -= 1
                    packet = packet[:-1] + bytes((packet[-1] ^ 0x5A,))
            out.append(Reply(servo.id, packet, delay))
            self.replies += 1
        return out

    def _targets(self, packet_id: int) -> list[Servo]:
        if packet_id == BROADCAST_ID:
            return sorted((s for s in self.servos if s.mem[8] == self.baud_code),
                          key=lambda s: s.id)
        servo = self.servo(packet_id)
        return [servo] if servo is not None else []

    def _answers(self, packet: Packet) -> list[tuple[Servo, int, bytes]]:
        """(servo, error, data) of every servo the packet asks for an answer."""
        inst, params = packet.instruction, packet.params
        if inst == Instruction.SYNC_READ:
            return self._sync_read(packet)
        if inst == Instruction.SYNC_WRITE:
            self._sync_write(packet)
            return []
        if inst == Instruction.BULK_READ:
            return self._bulk_read(packet)
        if inst == Instruction.BULK_WRITE:
            self._bulk_write(packet)
            return []
        out = []
        for servo in self._targets(packet.id):
            out.append(self._single(servo, inst, params))
        return out

    def _single(self, servo: Servo, inst: int, params: bytes) -> tuple[Servo, int, bytes]:
        if inst == Instruction.PING:
            return servo, ErrorNumber.NONE, servo.read(0, 2)[1] + bytes((servo.mem[6],))
        if inst == Instruction.READ:
            if len(params) != 4:
                return servo, ErrorNumber.DATA_LENGTH, b''
            error, data = servo.read(_u16(params, 0), _u16(params, 2))
            return servo, error, data
        if inst in (Instruction.WRITE, Instruction.REG_WRITE):
            if len(params) < 3:
                return servo, ErrorNumber.DATA_LENGTH, b''
            if inst == Instruction.WRITE and self._lost(servo):
                return servo, LOST, b''
            if inst == Instruction.REG_WRITE:
                servo.registered = (_u16(params, 0), bytes(params[2:]))
                servo.mem[69] = 1
                return servo, ErrorNumber.NONE, b''
            return servo, servo.write(_u16(params, 0), bytes(params[2:])), b''
        if inst == Instruction.ACTION:
            if servo.registered is None:
                return servo, ErrorNumber.INSTRUCTION, b''
            address, data = servo.registered
            servo.registered, servo.mem[69] = None, 0
            return servo, servo.write(address, data), b''
        if inst == Instruction.REBOOT:
            servo.reboot()
            return servo, ErrorNumber.NONE, b''
        return servo, ErrorNumber.INSTRUCTION, b''

    def _lost(self, servo: Servo) -> bool:
        """Whether a write to ``servo`` is lost (:attr:`ReplyFaults.lose`); counts it."""
        fault = self.faults.get(servo.id)
        if fault is None or fault.lose <= 0:
            return False
        fault.lose -= 1
        return fault.lose == 0

    def _sync_read(self, packet: Packet) -> list[tuple[Servo, int, bytes]]:
        params = packet.params
        if packet.id != BROADCAST_ID or len(params) < 5:
            return []
        address, length = _u16(params, 0), _u16(params, 2)
        out = []
        for servo_id in params[4:]:
            servo = self.servo(servo_id)
            if servo is not None:
                error, data = servo.read(address, length)
                out.append((servo, error, data))
        return out

    def _sync_write(self, packet: Packet) -> None:
        params = packet.params
        if packet.id != BROADCAST_ID or len(params) < 4:
            return
        address, length = _u16(params, 0), _u16(params, 2)
        block = 1 + length
        for k in range(4, len(params) - block + 1, block):
            servo = self.servo(params[k])
            if servo is not None and not self._lost(servo):
                servo.write(address, bytes(params[k + 1:k + block]))

    def _bulk_read(self, packet: Packet) -> list[tuple[Servo, int, bytes]]:
        params = packet.params
        if packet.id != BROADCAST_ID:
            return []
        out = []
        for k in range(0, len(params) - 4, 5):
            servo = self.servo(params[k])
            if servo is not None:
                error, data = servo.read(_u16(params, k + 1), _u16(params, k + 3))
                out.append((servo, error, data))
        return out

    def _bulk_write(self, packet: Packet) -> None:
        params = packet.params
        k = 0
        while packet.id == BROADCAST_ID and k + 5 <= len(params):
            length = _u16(params, k + 3)
            servo = self.servo(params[k])
            if servo is not None and k + 5 + length <= len(params) and not self._lost(servo):
                servo.write(_u16(params, k + 1), bytes(params[k + 5:k + 5 + length]))
            k += 5 + length


def _u16(data: bytes, offset: int) -> int:
    return data[offset] | data[offset + 1] << 8
