"""The torque-mode driver's cycle on the emulated bus: period error, missed cycles, CPU,
and the time from a joint state to the current written from it.

``python -m plag_ros.apps.dynamixel_bus`` runs in its own process (a pty) and
:class:`plag_ros.bus.driver.BusDriver` drives it through dynamixel-sdk in this process, in
current mode, commanding each reading's gravity torque (the engine), as the impedance node
would, at each rate. Per rate it prints:

* the cycle period's error against the nominal period (p50/p99) and the missed cycles
  (a period over 1.5 nominal);
* the CPU the driver's process used (process time over wall time; the SDK busy-waits for
  replies, so this is mostly the bus, not the arithmetic);
* state-to-current: from a reading to the sync write that carries the current computed from
  it (the next cycle's, as in plag_driver, where commands arrive between cycles);
* the peer, in the same process and on the same bus: one cycle of the robot's own driver's
  traffic (crane_x7_control: SYNC READ 10 bytes, SYNC WRITE 4 bytes; ``test/dxl_client.py``).

Usage: ``python bench/bench_driver.py [--duration 10] [--rates 200 500]``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'test'))


def one_rate(rate: float, duration: float) -> dict[str, float]:
    from torque_rig import EmulatedBus, loop, move_to, new_driver

    from plag_ros.core.dynamics.motors import ARM_JOINTS

    with tempfile.TemporaryDirectory() as tmp:
        bus = EmulatedBus(Path(tmp))
        try:
            driver = new_driver(bus.link, rate_hz=rate)
            driver.open()
            move_to(driver, np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0]), 1.0, 0.5)
            driver.request_mode('current')
            read_at: list[float] = []
            written: list[tuple[float, float]] = []   # (reading time, write time) pairs
            pending: list[float] = []
            group = driver._write_group
            send = group.txPacket

            def timed_send():
                now = time.monotonic()
                if pending:
                    written.append((pending.pop(), now))
                return send()

            group.txPacket = timed_send

            def command(reading) -> None:
                read_at.append(reading.t)
                driver.command_effort(driver.gravity_torque(reading.position)[:7], ARM_JOINTS)
                pending[:] = [reading.t]

            cpu, wall = time.process_time(), time.monotonic()
            starts = loop(driver, duration, command, rate_hz=rate)
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            group.txPacket = send
            fault = driver.fault
            driver.close()
        finally:
            bus.stop()
    period = np.diff(starts)
    nominal = 1.0 / rate
    latency = np.array([w - r for r, w in written])
    return {'cycles': len(starts), 'p50': np.percentile(period - nominal, 50) * 1e3,
            'p99': np.percentile(period - nominal, 99) * 1e3,
            'missed': int(np.sum(period > 1.5 * nominal)), 'cpu': cpu / wall,
            'latency50': np.median(latency) * 1e3, 'latency99': np.percentile(latency, 99) * 1e3,
            'fault': fault}


def peer_cycle(n: int = 400) -> tuple[float, float]:
    """Median [ms] of one crane_x7_control-like cycle and of one BusDriver cycle (position
    mode), on one bus."""
    from dxl_client import DriverClient
    from torque_rig import EmulatedBus, new_driver

    with tempfile.TemporaryDirectory() as tmp:
        bus = EmulatedBus(Path(tmp))
        try:
            client = DriverClient(str(bus.link))
            client.on_init()
            goals = client.activate()
            peer = []
            for _ in range(n):
                t = time.perf_counter()
                client.sync_read()
                client.sync_write(goals)
                peer.append(time.perf_counter() - t)
            client.close()
            driver = new_driver(bus.link)
            driver.open()
            ours = []
            for _ in range(n):
                t = time.perf_counter()
                driver.cycle()
                ours.append(time.perf_counter() - t)
            driver.close()
        finally:
            bus.stop()
    return float(np.median(peer) * 1e3), float(np.median(ours) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=10.0)
    parser.add_argument('--rates', type=float, nargs='+', default=[200.0, 500.0])
    args = parser.parse_args()
    peer, ours = peer_cycle()
    print(f'one cycle, median: BusDriver {ours:.3f} ms (13 B read, 6 B write), '
          f'crane_x7_control traffic {peer:.3f} ms (10 B, 4 B): {ours / peer:.2f}x')
    for rate in args.rates:
        r = one_rate(rate, args.duration)
        print(f'{rate:g} Hz, {r["cycles"]} cycles: period error p50 {r["p50"]:+.3f} ms, p99 '
              f'{r["p99"]:+.3f} ms, {r["missed"]} missed; CPU {r["cpu"]:.2f} of a core; '
              f'state-to-current p50 {r["latency50"]:.2f} ms, p99 {r["latency99"]:.2f} ms'
              + (f'; fault: {r["fault"]}' if r['fault'] else ''))


if __name__ == '__main__':
    main()
