"""The emulated servo bus: what a cycle costs the emulator, and what a client sees.

Two parts:

* * in this process, on a :class:`plag_ros.bus.emulator.arm.BusArm` without a pty: the
  emulator's cost of one control cycle of the CRANE-X7's driver (one SYNC READ of 10 bytes
  from 8 servos and one SYNC WRITE of 4 bytes to them, as bytes in and status packets out),
  and of one 2 ms physics step with the eight servos' firmware; the peer is ROBOTIS'
  dynamixel-sdk building and parsing the same cycle's packets in this process (its
  ``GroupSyncRead`` / ``GroupSyncWrite`` packet work without a port);
* over the pty: ``python -m plag_ros.apps.dynamixel_bus`` in its own process and
  dynamixel-sdk as the client (``test/dxl_client.py``: the driver's start-up, then a SYNC
  READ and a SYNC WRITE per cycle holding the arm) at each rate, its cycle p50/p99, the
  rate it kept and the replies it missed, beside the time a real 3 Mbit/s bus needs for the
  same bytes (10 bits a byte, no gaps, no USB latency).

Usage: ``python bench/bench_bus.py [--duration 10] [--rates 200 500]``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'test'))

IDS = list(range(2, 10))


def _median_us(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e6


def in_process(n: int = 2000) -> None:
    from plag_ros.bus.chain_file import BusConfig
    from plag_ros.bus.emulator.arm import BusArm
    from plag_ros.bus.protocol import Instruction, encode
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
    from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

    model = RobotModel.from_urdf(default_urdf_path())
    sim = Simulator(model, SimulatorConfig(dt=0.002))
    sim.reset(np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0, 0.0]))
    arm = BusArm(sim, BusConfig.load())
    for i in IDS:
        for k, target in enumerate((132, 133, 134, 135, 128, 129, 130, 131, 126, 127)):
            arm.receive(encode(i, Instruction.WRITE, (578 + 2 * k).to_bytes(2, 'little')
                               + target.to_bytes(2, 'little')))
        for k, target in enumerate((116, 117, 118, 119)):
            arm.receive(encode(i, Instruction.WRITE, (608 + 2 * k).to_bytes(2, 'little')
                               + target.to_bytes(2, 'little')))
        arm.receive(encode(i, Instruction.WRITE, bytes((64, 0, 1))))
    read = encode(0xFE, Instruction.SYNC_READ, bytes((0x7A, 0x02, 10, 0)) + bytes(IDS))
    write = encode(0xFE, Instruction.SYNC_WRITE, bytes((0x89, 0x02, 4, 0)) + b''.join(
        bytes((i,)) + arm.chain.servo(i).get('Present Position').to_bytes(4, 'little')
        for i in IDS))
    replies = arm.receive(read)
    reply_bytes = sum(len(r.packet) for r in replies)

    def cycle():
        arm.receive(read)
        arm.receive(write)

    for _ in range(200):
        arm.step(0.002)
    cycle_us = _median_us(cycle, n)
    step_us = _median_us(lambda: arm.step(0.002), n // 4)

    import dynamixel_sdk as sdk

    class NoPort:                       # the SDK's packet work without a device
        is_using = False

        def clearPort(self):
            pass

        def writePort(self, packet):
            return len(packet)

        def setPacketTimeout(self, length):
            pass

    packets = sdk.PacketHandler(2.0)
    port = NoPort()
    group_read = sdk.GroupSyncRead(port, packets, 634, 10)
    group_write = sdk.GroupSyncWrite(port, packets, 649, 4)
    for i in IDS:
        group_read.addParam(i)
        group_write.addParam(i, bytes(4))
    rx = [list(r.packet) for r in replies]

    def sdk_cycle():
        group_read.txPacket()
        for raw in rx:                  # the SDK's check of each status packet's CRC
            assert sdk.DXL_MAKEWORD(raw[-2], raw[-1]) == packets.updateCRC(0, raw, len(raw) - 2)
        group_write.txPacket()

    sdk_us = _median_us(sdk_cycle, n)
    wire = (len(read) + reply_bytes + len(write)) * 10 / 3e6 * 1e6
    print(f'emulator, one driver cycle (SYNC READ 8x10 B + SYNC WRITE 8x4 B): {cycle_us:.0f} us '
          f'median; dynamixel-sdk building and checking the same packets: {sdk_us:.0f} us '
          f'({cycle_us / sdk_us:.2f}x)')
    print(f'emulator, one 2 ms physics step with 8 servos: {step_us:.0f} us median '
          f'({step_us / 2000:.0%} of a core at 500 Hz)')
    print(f'a real 3 Mbit/s bus: {len(read) + reply_bytes + len(write)} bytes a cycle, '
          f'{wire:.0f} us on the wire')


def over_pty(duration: float, rates: list[float]) -> None:
    wire_us = (22 + 8 * 21 + 47) * 10 / 3e6 * 1e6
    for rate in rates:
        with tempfile.TemporaryDirectory() as folder:
            link = Path(folder) / 'dxl'
            bus = subprocess.Popen([sys.executable, '-m', 'plag_ros.apps.dynamixel_bus',
                                    '--link', str(link)], stdout=subprocess.PIPE, text=True)
            bus.stdout.readline()
            out = Path(folder) / 'client.npz'
            subprocess.run([sys.executable, str(ROOT / 'test' / 'dxl_client.py'), str(link),
                            str(duration), str(rate), str(out)], check=True)
            bus.send_signal(2)
            summary = bus.communicate(timeout=60)[0].strip().splitlines()[-1]
            data = np.load(out)
        d = data['duration'] * 1e3
        missed = int(np.sum(data['result'] != 0))
        print(f'{rate:.0f} Hz for {duration:g} s: {len(d)} cycles ({len(d) / duration:.0f} Hz '
              f'kept), {missed} missed; client cycle p50 {np.median(d):.2f} ms, p99 '
              f'{np.percentile(d, 99):.2f} ms, max {d.max():.1f} ms; the wire alone '
              f'{wire_us / 1e3:.2f} ms (p50 {np.median(d) * 1e3 / wire_us:.1f}x)')
        print(f'  {summary}')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=10.0)
    parser.add_argument('--rates', type=float, nargs='+', default=[200.0, 500.0])
    args = parser.parse_args()
    in_process()
    over_pty(args.duration, args.rates)


if __name__ == '__main__':
    main()
