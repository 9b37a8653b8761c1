"""The torque-mode driver's cycle on the emulated bus: period error, missed cycles, CPU,
and the time from a joint state to the current written from it.

``python -m plag_ros.apps.dynamixel_bus`` runs in its own process (a pty) and
:class:`plag_ros.bus.host.driver.BusDriver` drives it through dynamixel-sdk in this process, in
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

With ``--scenario N``: the partial-impedance scenario on the bus, N times (each on a fresh
bus; ``test/torque_rig.py``): the elbow swings 0.5 rad at 1 Hz about a bent pose; the laws
are the shipped parameter files as the impedance node reads them (config/torque_mode.yaml
with and without its elbow -> tilt compensation, config/impedance.yaml on the position
path), built under ``gain_check: refuse``; the controller runs in this process as the
impedance node would, each reading's command written at the next cycle. It prints the tilt's
deviation (RMS of q - q_d from 1 s on), the elbow's swing and the cut, in real time (the
machine's jitter included) and, with ``--lockstep``, with the bus in lockstep at 200 Hz
(deterministic; ``test_bus_driver.py`` gates that run at 80 %). ``--motion-source desired``
compensates from the elbow's desired motion instead of the measured one the files give.

Usage: ``python bench/bench_driver.py [--duration 10] [--rates 200 500] [--scenario 3]
[--lockstep] [--motion-source desired]``.
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
    from torque_rig import BENT, EmulatedBus, loop, move_to, new_driver

    from plag_ros.core.dynamics.motors import ARM_JOINTS

    with tempfile.TemporaryDirectory() as tmp:
        bus = EmulatedBus(Path(tmp))
        try:
            driver = new_driver(bus.link, rate_hz=rate)
            driver.open()
            move_to(driver, BENT, 1.0, 0.5)
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
    parser.add_argument('--rates', type=float, nargs='*', default=[200.0, 500.0])
    parser.add_argument('--scenario', type=int, default=0, metavar='N',
                        help='also run the partial-impedance scenario N times')
    parser.add_argument('--lockstep', action='store_true',
                        help='run each scenario also with the bus in lockstep at 200 Hz '
                             '(what test_bus_driver.py gates)')
    parser.add_argument('--motion-source', choices=['desired', 'measured'], default=None,
                        help="the propagation torques' motion (default: the files', "
                             'measured)')
    args = parser.parse_args()
    from torque_rig import run_scenario

    for run in range(args.scenario):
        for lockstep in (None, 200.0) if args.lockstep else (None,):
            with tempfile.TemporaryDirectory() as tmp:
                began = time.monotonic()
                results = run_scenario(Path(tmp), lockstep, args.motion_source)
                took = time.monotonic() - began
            line = '; '.join(f'{name} {r.tilt_rms * 1e3:.1f} mrad (elbow {r.elbow_swing:.2f} '
                             'rad' + (f', {r.fault}' if r.fault else '') + ')'
                             for name, r in results.items())
            cut = 1.0 - results['compensated'].tilt_rms / results['plain'].tilt_rms
            where = 'real time' if lockstep is None else f'lockstep {lockstep:g} Hz'
            print(f'scenario {run + 1}, {where}: tilt rms {line}; current mode cut {cut:.1%} '
                  f'({took:.1f} s)')
    if not args.rates:
        return
    peer, ours = peer_cycle()
    from plag_ros.bus.host.driver import READ_LENGTH, WRITE_LENGTH
    print(f'one cycle, median: BusDriver {ours:.3f} ms ({READ_LENGTH} B read, {WRITE_LENGTH} '
          'B write), '
          f'crane_x7_control traffic {peer:.3f} ms (10 B, 4 B): {ours / peer:.2f}x')
    for rate in args.rates:
        r = one_rate(rate, args.duration)
        print(f'{rate:g} Hz, {r["cycles"]} cycles: period error p50 {r["p50"]:+.3f} ms, p99 '
              f'{r["p99"]:+.3f} ms, {r["missed"]} missed; CPU {r["cpu"]:.2f} of a core; '
              f'state-to-current p50 {r["latency50"]:.2f} ms, p99 {r["latency99"]:.2f} ms'
              + (f'; fault: {r["fault"]}' if r['fault'] else ''))


if __name__ == '__main__':
    main()
