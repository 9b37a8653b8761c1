"""Protocol 2.0 packets against the e-manual's worked examples (test/data/dynamixel/
protocol2.yaml: every instruction and status packet the protocol page prints, with the page
and commit each was read from) and the protocol's own rules."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from plag_ros.bus.protocol import (
    ALERT,
    FrameError,
    Instruction,
    Packet,
    PacketReader,
    crc16,
    encode,
    encode_status,
    stuff,
    unstuff,
)

DATA = yaml.safe_load((Path(__file__).parent / 'data' / 'dynamixel' / 'protocol2.yaml')
                      .read_text())
EXAMPLES = DATA['examples']


def _hex(text: str) -> bytes:
    return bytes.fromhex(text.replace(' ', ''))


def _instruction_bytes(example: dict) -> bytes:
    return _hex(example.get('corrected_instruction') or example['instruction'])


def test_crc_is_crc16_buypass():
    # the catalogue's check value of CRC-16/BUYPASS (poly 0x8005, init 0, no reflection)
    assert crc16(b'123456789') == 0xFEE8
    assert crc16(b'56789', crc16(b'1234')) == 0xFEE8


@pytest.mark.parametrize('example', EXAMPLES, ids=[e['name'] for e in EXAMPLES])
def test_every_worked_instruction_is_encoded_byte_for_byte(example):
    wire = _instruction_bytes(example)
    packet = PacketReader().feed(wire)
    assert len(packet) == 1 and isinstance(packet[0], Packet)
    p = packet[0]
    assert encode(p.id, p.instruction, p.params) == wire
    if example['name'].startswith('fast'):
        return                         # their status is one joint packet, not modelled
    for status in example['status']:
        got = PacketReader().feed(_hex(status['bytes']))
        assert len(got) == 1 and isinstance(got[0], Packet), status
        s = got[0]
        assert s.id == status['id'] and s.instruction == Instruction.STATUS
        assert encode_status(s.id, s.error, s.data) == _hex(status['bytes'])


def test_the_two_misprinted_crcs_are_caught():
    bad = [e for e in EXAMPLES if not e['crc_ok']]
    assert {e['name'] for e in bad} == {'control_table_backup_restore', 'fast_bulk_read'}
    for example in bad:
        got = PacketReader().feed(_hex(example['instruction']))
        assert len(got) == 1 and isinstance(got[0], FrameError) and got[0].reason == 'crc'


def test_stuffing_round_trip_and_length():
    payload = b'\x03\x74\x00\xff\xff\xfd\x01'
    assert stuff(payload) == b'\x03\x74\x00\xff\xff\xfd\xfd\x01'
    assert unstuff(stuff(payload)) == payload
    wire = encode(1, Instruction.WRITE, b'\x74\x00\xff\xff\xfd\x01')
    assert wire[5] | wire[6] << 8 == len(wire) - 7        # LEN counts the stuffed bytes
    (p,) = PacketReader().feed(wire)
    assert p.params == b'\x74\x00\xff\xff\xfd\x01'


def test_reader_takes_any_split_skips_noise_and_resyncs_after_a_bad_crc():
    rng = random.Random(7)
    packets = [encode(rng.randrange(0, 253), Instruction.WRITE,
                      bytes(rng.randrange(256) for _ in range(rng.randrange(2, 30))))
               for _ in range(40)]
    bad = bytearray(encode(5, Instruction.READ, b'\x84\x00\x04\x00'))
    bad[-1] ^= 0xFF
    stream = b'\x00\x13' + b''.join(packets[:20]) + bytes(bad) + b''.join(packets[20:])
    reader, out = PacketReader(), []
    k = 0
    while k < len(stream):
        n = rng.randrange(1, 17)
        out += reader.feed(stream[k:k + n])
        k += n
    good = [p.raw for p in out if isinstance(p, Packet)]
    errors = [p for p in out if isinstance(p, FrameError)]
    assert good == packets
    assert len(errors) == 1 and errors[0].id == 5 and errors[0].reason == 'crc'
    assert reader.skipped == 2 + len(bad) - 3     # the noise, the bad packet after its header


def test_status_error_byte_with_alert():
    wire = encode_status(3, 0x04 | ALERT)
    (p,) = PacketReader().feed(wire)
    assert p.error == 0x84 and p.data == b''


def test_ids_outside_the_protocol_are_refused():
    with pytest.raises(ValueError):
        encode(0xFD, Instruction.PING)
    with pytest.raises(ValueError):
        encode(256, Instruction.PING)
