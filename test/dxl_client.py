"""A Dynamixel client made of ROBOTIS' dynamixel-sdk only, doing what the CRANE-X7's driver
does on its bus (test/data/dynamixel/crane_x7_control_sequence.yaml: crane_x7_control at
rt-net/crane_x7_ros 52fca058 over rt_manipulators_cpp cf8726bc): the tests' stand-in for
that driver, which is on no package registry. It mirrors the recorded sequence, not the
driver's code: the indirect addresses, one SYNC READ of 10 bytes at 634 and one SYNC WRITE of
4 bytes at 649 a cycle, the driver's conversions.

Every packet it sends is counted (:attr:`DriverClient.sent`), so that a test can tell which
physics step of the emulator's record (``--record``) answered which read.

Run as a script it holds the arm in position mode for a while at a rate and writes what it
read (``python test/dxl_client.py PORT SECONDS RATE OUT.npz [--cycles] [--latency-ms MS]``):
for SECONDS of wall time (bench/bench_bus.py: the cycles a machine keeps), or with
``--cycles`` for exactly SECONDS x RATE cycles on the RATE schedule (a test: the count does
not depend on how busy the machine is); ``--latency-ms`` replaces the SDK's 16 ms latency
timer, which with 2 ms more is half its wait for a reply.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import dynamixel_sdk as sdk
import numpy as np
import yaml

SEQUENCE = yaml.safe_load((Path(__file__).parent / 'data' / 'dynamixel'
                           / 'crane_x7_control_sequence.yaml').read_text())
IDS = [int(i) for i in SEQUENCE['servo_config']['ids_ros2_joint']]
CURRENT_TO_EFFORT = {int(k): float(v) for k, v in SEQUENCE['current_to_effort'].items()}
READ_START, READ_LENGTH, WRITE_START, WRITE_LENGTH = 634, 10, 649, 4
READ_TARGETS = ([132, 133, 134, 135], [128, 129, 130, 131], [126, 127])   # item-major
WRITE_TARGETS = [116, 117, 118, 119]


def position_rad(count: int) -> float:
    """The driver's decode: ``(int32(count) - 2048) * pi / 2048``."""
    return (count - 2048) * math.pi / 2048.0


def goal_count(rad: float) -> int:
    """The driver's encode: ``rad * 2048 / pi + 2048``, truncated."""
    return int(rad * 2048.0 / math.pi + 2048.0)


class DriverClient:
    """The driver's traffic through dynamixel-sdk on ``port``."""

    def __init__(self, port: str, baud_rate: int = 3_000_000) -> None:
        self.port = sdk.PortHandler(port)
        self.packets = sdk.PacketHandler(2.0)
        # the driver's order: set the baud rate, then open (the port opens twice)
        if not (self.port.setBaudRate(baud_rate) and self.port.openPort()):
            raise RuntimeError(f'cannot open {port}')
        self.sent = 0
        self.read_group = sdk.GroupSyncRead(self.port, self.packets, READ_START, READ_LENGTH)
        self.write_group = sdk.GroupSyncWrite(self.port, self.packets, WRITE_START,
                                              WRITE_LENGTH)
        for i in IDS:
            self.read_group.addParam(i)
            self.write_group.addParam(i, bytes(4))

    def close(self) -> None:
        self.port.closePort()

    # single transactions, counted; each returns (value or None, comm result, error byte)
    def read(self, servo_id: int, address: int, size: int):
        self.sent += 1
        fn = {1: self.packets.read1ByteTxRx, 2: self.packets.read2ByteTxRx,
              4: self.packets.read4ByteTxRx}[size]
        return fn(self.port, servo_id, address)

    def write(self, servo_id: int, address: int, value: int, size: int):
        self.sent += 1
        fn = {1: self.packets.write1ByteTxRx, 2: self.packets.write2ByteTxRx,
              4: self.packets.write4ByteTxRx}[size]
        return fn(self.port, servo_id, address, value)

    def sync_read(self) -> tuple[int, dict[int, tuple[int, int, int]]]:
        """(comm result, {id: (position count, velocity, current)}) of one SYNC READ."""
        self.sent += 1
        result = self.read_group.txRxPacket()
        if result != sdk.COMM_SUCCESS:
            return result, {}
        out = {}
        for i in IDS:
            position = _signed(self.read_group.getData(i, READ_START, 4), 4)
            velocity = _signed(self.read_group.getData(i, READ_START + 4, 4), 4)
            current = _signed(self.read_group.getData(i, READ_START + 8, 2), 2)
            out[i] = (position, velocity, current)
        return result, out

    def sync_write(self, counts: dict[int, int]) -> int:
        self.sent += 1
        for i in IDS:
            self.write_group.changeParam(i, int(counts[i]).to_bytes(4, 'little'))
        return self.write_group.txPacket()

    # the driver's phases
    def on_init(self) -> list[tuple[str, int, int, object]]:
        """The start-up transactions; (what, id, address, (value, result, error)) each."""
        log = []
        for i in IDS:
            for address in (48, 52, 38):
                log.append(('read', i, address, self.read(i, address, 2)))
        for i in IDS:
            mode = self.read(i, 11, 1)
            log.append(('read', i, 11, mode))
            if mode[0] != 3:
                log.append(('write', i, 11, self.write(i, 11, 3, 1)))
        for k, targets in enumerate(READ_TARGETS):
            base = 578 + 2 * sum(len(t) for t in READ_TARGETS[:k])
            for i in IDS:
                for j, target in enumerate(targets):
                    log.append(('write', i, base + 2 * j,
                                self.write(i, base + 2 * j, target, 2)))
        for i in IDS:
            for j, target in enumerate(WRITE_TARGETS):
                log.append(('write', i, 608 + 2 * j, self.write(i, 608 + 2 * j, target, 2)))
        return log

    def activate(self) -> dict[int, int]:
        """Activation: read, command the present pose, gains 800/0/0, torque on, read.
        Returns the goal counts written."""
        _, state = self.sync_read()
        goals = {i: goal_count(position_rad(state[i][0])) for i in IDS}
        self.sync_write(goals)
        for i in IDS:
            for address, gain in ((84, 800), (82, 0), (80, 0)):
                self.write(i, address, gain, 2)
        for i in IDS:
            self.write(i, 64, 1, 1)
        self.sync_read()
        return goals

    def deactivate(self) -> None:
        for i in IDS:
            for address, gain in ((84, 5), (82, 0), (80, 0)):
                self.write(i, address, gain, 2)


def _signed(value: int, size: int) -> int:
    bits = 8 * size
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def hold(port: str, seconds: float, rate: float, *, cycles: int | None = None
         ) -> dict[str, np.ndarray]:
    """Start like the driver, hold the present pose on a ``rate`` schedule (a late cycle is
    followed at once by the next) for ``seconds``, or for ``cycles`` cycles however long
    they take; per cycle: the packet count of its SYNC READ, the counts, velocities and
    currents read, the comm result, its start and its duration [s]."""
    client = DriverClient(port)
    client.on_init()
    goals = client.activate()
    index, counts, results, starts, durations = [], [], [], [], []
    period = 1.0 / rate
    start = time.perf_counter()
    k = 0
    while (k < cycles) if cycles is not None else (time.perf_counter() - start < seconds):
        k += 1
        begin = time.perf_counter()
        starts.append(begin)
        result, state = client.sync_read()
        index.append(client.sent)
        results.append(result)
        counts.append([state.get(i, (0, 0, 0)) for i in IDS])
        client.sync_write(goals)
        durations.append(time.perf_counter() - begin)
        delay = start + k * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    client.deactivate()
    client.close()
    return {'index': np.array(index), 'state': np.array(counts), 'result': np.array(results),
            'start': np.array(starts), 'duration': np.array(durations)}


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description='hold the arm as the CRANE-X7 driver does')
    parser.add_argument('port')
    parser.add_argument('seconds', type=float)
    parser.add_argument('rate', type=float)
    parser.add_argument('out')
    parser.add_argument('--cycles', action='store_true',
                        help='run seconds x rate cycles, however long they take')
    parser.add_argument('--latency-ms', type=int, default=None,
                        help="the SDK's LATENCY_TIMER [ms] (default 16)")
    args = parser.parse_args()
    if args.latency_ms is not None:
        sdk.port_handler.LATENCY_TIMER = args.latency_ms
    np.savez(args.out, **hold(args.port, args.seconds, args.rate,
                              cycles=round(args.seconds * args.rate) if args.cycles else None))
