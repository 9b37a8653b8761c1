"""Dynamixel Protocol 2.0 packets: framing, byte stuffing, CRC-16 and the status error byte.

An instruction packet on the wire is ``FF FF FD 00 | ID | LEN_L LEN_H | INST | params | CRC_L
CRC_H``; a status packet has ``INST = 0x55`` and an error byte before its parameters. ``LEN``
counts the instruction byte, the (stuffed) parameters, the error byte of a status packet and the
two CRC bytes. Inside the instruction and parameters every ``FF FF FD`` is sent as ``FF FF FD
FD`` (byte stuffing), and the CRC (16 bit, polynomial 0x8005, initial value 0, no reflection:
CRC-16/BUYPASS) covers every byte from the header to the last parameter as sent, stuffing
included. Numbers in parameters are little endian, negative ones two's complement.

Facts read in the ROBOTIS e-manual, ``ROBOTIS-GIT/emanual/docs/en/dxl/protocol2.md`` at
01179568a085cfc99bdad6e880e43fa871bd318a ("Instruction Packet", "Status Packet", "Packet
Process", the error table); the CRC parameters are those that reproduce every worked example
there (``test/data/dynamixel/protocol2.yaml``). Pure Python, no I/O: the emulated
servo chain and any client share it.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ['ALERT', 'BROADCAST_ID', 'HEADER', 'ErrorNumber', 'FrameError', 'Instruction',
           'Packet', 'PacketReader', 'crc16', 'encode', 'encode_status', 'stuff', 'unstuff']

HEADER = b'\xff\xff\xfd\x00'
"""Header (``FF FF FD``) and the reserved byte (``00``) that opens every packet."""
BROADCAST_ID = 0xFE
MAX_ID = 0xFC
"""Highest unicast ID (252): ``FD`` and ``FF`` would repeat the header."""
ALERT = 0x80
"""Bit 7 of a status packet's error byte: the servo has a hardware error (read address 70)."""
_STUFFED = b'\xff\xff\xfd\xfd'


class Instruction(enum.IntEnum):
    """Instruction byte of a packet (e-manual, Protocol 2.0, "Instruction")."""
    PING = 0x01
    READ = 0x02
    WRITE = 0x03
    REG_WRITE = 0x04
    ACTION = 0x05
    FACTORY_RESET = 0x06
    REBOOT = 0x08
    CLEAR = 0x10
    CONTROL_TABLE_BACKUP = 0x20
    STATUS = 0x55
    SYNC_READ = 0x82
    SYNC_WRITE = 0x83
    FAST_SYNC_READ = 0x8A
    BULK_READ = 0x92
    BULK_WRITE = 0x93
    FAST_BULK_READ = 0x9A


class ErrorNumber(enum.IntEnum):
    """Bits 0-6 of a status packet's error byte (e-manual, Protocol 2.0, "Error")."""
    NONE = 0x00
    RESULT_FAIL = 0x01
    INSTRUCTION = 0x02
    CRC = 0x03
    DATA_RANGE = 0x04
    DATA_LENGTH = 0x05
    DATA_LIMIT = 0x06
    ACCESS = 0x07


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) if crc & 0x8000 else crc << 1
        table.append(crc & 0xFFFF)
    return tuple(table)


_TABLE = _crc_table()


def crc16(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-16 of ``data`` as Protocol 2.0 computes it; ``crc`` continues an earlier one."""
    table = _TABLE
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[((crc >> 8) ^ byte) & 0xFF]
    return crc


def stuff(payload: bytes) -> bytes:
    """``payload`` (instruction and parameters) with ``FD`` added after every ``FF FF FD``."""
    return payload.replace(b'\xff\xff\xfd', _STUFFED) if b'\xff\xff\xfd' in payload \
        else payload


def unstuff(payload: bytes) -> bytes:
    """Undo :func:`stuff`: every ``FF FF FD FD`` becomes ``FF FF FD``."""
    return payload.replace(_STUFFED, b'\xff\xff\xfd') if _STUFFED in payload else payload


def _frame(packet_id: int, body: bytes) -> bytes:
    """Header, ID, length and CRC around ``body`` (the stuffed bytes after the length)."""
    packet = HEADER + bytes((packet_id, (len(body) + 2) & 0xFF, (len(body) + 2) >> 8)) + body
    crc = crc16(packet)
    return packet + bytes((crc & 0xFF, crc >> 8))


def encode(packet_id: int, instruction: int, params: bytes = b'') -> bytes:
    """An instruction packet, stuffed, with its length and CRC.

    Args:
        packet_id: 0-252, or :data:`BROADCAST_ID`.
        instruction: an :class:`Instruction`.
        params: the parameters as the e-manual lists them (little endian numbers).
    """
    if not 0 <= packet_id <= BROADCAST_ID or packet_id == 0xFD:
        raise ValueError(f'packet ID {packet_id} is not 0-252 or 254')
    return _frame(packet_id, stuff(bytes((instruction,)) + bytes(params)))


def encode_status(packet_id: int, error: int, params: bytes = b'') -> bytes:
    """A status packet of servo ``packet_id``: ``error`` is the error byte (an
    :class:`ErrorNumber`, with :data:`ALERT` or-ed in while the servo has a hardware error),
    ``params`` the data read (nothing for a write)."""
    return _frame(packet_id, stuff(bytes((Instruction.STATUS, error)) + bytes(params)))


@dataclass(frozen=True)
class Packet:
    """One packet taken off the wire, CRC checked and unstuffed.

    Attributes:
        id: packet ID (254 for broadcast).
        instruction: instruction byte (0x55 for a status packet).
        params: the parameters; for a status packet the error byte first.
        raw: the packet as it came, stuffing included.
    """
    id: int
    instruction: int
    params: bytes
    raw: bytes

    @property
    def error(self) -> int:
        """Error byte of a status packet."""
        if self.instruction != Instruction.STATUS or not self.params:
            raise ValueError('not a status packet')
        return self.params[0]

    @property
    def data(self) -> bytes:
        """Parameters after the error byte of a status packet."""
        return self.params[1:] if self.instruction == Instruction.STATUS else self.params


@dataclass(frozen=True)
class FrameError:
    """A framed packet that failed its CRC or is too short to hold an instruction.

    Attributes:
        id: the packet ID it carried.
        instruction: its instruction byte, None when it had none.
        reason: ``'crc'`` or ``'length'``.
        raw: the bytes as they came.
    """
    id: int
    instruction: int | None
    reason: str
    raw: bytes


class PacketReader:
    """Finds packets in a byte stream fed in pieces of any size.

    Bytes before a header are skipped (a servo waits for the next header). A packet whose
    CRC does not match is reported as a :class:`FrameError` and the search restarts after
    its header: its length field may itself be the corrupt byte.

    Args:
        max_length: largest LEN accepted; a longer one is taken as noise.
    """

    def __init__(self, max_length: int = 1024) -> None:
        self._buf = bytearray()
        self.max_length = max_length
        self.skipped = 0
        """Bytes dropped while looking for a header."""

    def pending(self) -> int:
        """Bytes held for a packet not yet complete."""
        return len(self._buf)

    def clear(self) -> None:
        self._buf.clear()

    def feed(self, data: bytes) -> list[Packet | FrameError]:
        """Add ``data``; return the packets (and framing errors) it completes, in order."""
        buf = self._buf
        buf += data
        out: list[Packet | FrameError] = []
        while True:
            start = buf.find(HEADER)
            if start < 0:
                # Keep a tail that may be the start of a header split across reads.
                keep = next((k for k in (3, 2, 1) if buf.endswith(HEADER[:k])), 0)
                self.skipped += len(buf) - keep
                del buf[:len(buf) - keep]
                return out
            if start:
                self.skipped += start
                del buf[:start]
            if len(buf) < 7:
                return out
            length = buf[5] | buf[6] << 8
            if length < 3 or length > self.max_length:
                out.append(FrameError(buf[4], None, 'length', bytes(buf[:7])))
                del buf[:3]
                continue
            total = 7 + length
            if len(buf) < total:
                return out
            raw = bytes(buf[:total])
            if crc16(raw[:-2]) != (raw[-2] | raw[-1] << 8):
                out.append(FrameError(raw[4], raw[7], 'crc', raw))
                del buf[:3]
                continue
            del buf[:total]
            body = unstuff(raw[7:-2])
            out.append(Packet(raw[4], body[0], body[1:], raw))
