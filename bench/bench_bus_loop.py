"""The bus loop beside a busy node: on a thread of the node's process (how ``plag_driver``
ran it before) against a process of its own (how it runs now,
``plag_ros.bus.host.loop_process``).

For each rate and each host of the loop: a fresh emulated bus in real time, the same loop
(:func:`~plag_ros.bus.host.loop_process.run_loop`: open, sync read, envelope, sync write,
its records read by a thread of this process, as the node's), and in this process, for the
loop's whole run, ``--busy`` threads doing a busy node's work as fast as they can (the
CRANE-X7's partial decomposition of one sample after another, each kept 20 s as Python
objects, as a plot buffer or a recorder would: the garbage collector's work grows with
them). Measured on the emulator's record, what the servos' Bus Watchdog sees: the bus's
silences (the time between two physics steps that served an instruction) over the run less
its first 2 s: their p99 and the longest [ms], and how many passed the watchdog's 100 ms
(past which a servo in current mode makes no torque). Also the readings the reading thread
got (a loop in a process drops those it cannot send rather than wait) and the busy
threads' samples a second. Ratio: the thread's longest silence over the process's.

Usage: ``python bench/bench_bus_loop.py [--seconds 10] [--rates 200 500] [--busy 2]``.
"""
from __future__ import annotations

import argparse
import collections
import pickle
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'test'))

WATCHDOG_S = 0.1
HISTORY = 20000         # samples a busy thread keeps (20 s at 1 kHz)


def busy(stop: threading.Event, done: list[int]) -> None:
    """A busy node's work, without end: one sample's partial decomposition after another,
    each sample also kept as Python objects for 2 s (a history, as a plot buffer or a
    recorder keeps one: the garbage collector's work grows with it)."""
    from plag_ros.core.dynamics.arrays import ArrayLagrangian
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    engine = ArrayLagrangian(RobotModel.from_urdf(default_urdf_path()))
    rng = np.random.default_rng(0)
    n = engine.model.n_joints
    history: collections.deque = collections.deque(maxlen=HISTORY)
    while not stop.is_set():
        q, qd, qdd = rng.uniform(-1.0, 1.0, (3, n))
        out = engine.decompose_arrays(q, qd, qdd)
        history.append({name: value.tolist() for name, value in out.items()})
        done[0] += 1


def one_run(host: str, rate_hz: float, seconds: float, n_busy: int) -> dict[str, float]:
    from torque_rig import EmulatedBus

    from plag_ros.bus.chain_file import CRANE_X7_BUS, BusConfig
    from plag_ros.bus.host.driver import DriverSettings
    from plag_ros.bus.host.loop_process import (
        MESSAGE_BYTES,
        BusLoopProcess,
        DriverRecipe,
        LoopLink,
        call_message,
        run_loop,
    )

    readings = [0]

    def on_record(kind: str, payload) -> None:
        readings[0] += kind == 'reading'

    with tempfile.TemporaryDirectory() as tmp:
        bus = EmulatedBus(Path(tmp))
        recipe = DriverRecipe(BusConfig.load(CRANE_X7_BUS), DriverSettings(
            port=str(bus.link), rate_hz=rate_hz, watchdog_s=2.5, failed_reads=100))
        stop, done = threading.Event(), [0]
        workers = [threading.Thread(target=busy, args=(stop, done), daemon=True)
                   for _ in range(n_busy)]
        for w in workers:
            w.start()
        time.sleep(1.0)                          # the workers past their start-up
        started = time.monotonic()
        try:
            if host == 'process':
                loop = BusLoopProcess(recipe, rate_hz, on_record)
                loop.start()
                time.sleep(seconds)
                ended = time.monotonic()
                loop.stop(10.0)
            else:
                node_calls, loop_calls = socket.socketpair(socket.AF_UNIX,
                                                           socket.SOCK_SEQPACKET)
                node_records, loop_records = socket.socketpair(socket.AF_UNIX,
                                                               socket.SOCK_SEQPACKET)

                def read() -> None:
                    while data := node_records.recv(MESSAGE_BYTES):
                        kind, *payload = pickle.loads(data)
                        on_record(kind, payload[0] if len(payload) == 1 else payload)

                reader = threading.Thread(target=read, daemon=True)
                reader.start()
                thread = threading.Thread(target=run_loop, args=(
                    recipe.build(), LoopLink(loop_calls, loop_records), rate_hz), daemon=True)
                thread.start()
                time.sleep(seconds)
                ended = time.monotonic()
                node_calls.send(call_message(1, 'stop', ()))
                thread.join(10.0)
                loop_records.close()
                reader.join(10.0)
        finally:
            stop.set()
            for w in workers:
                w.join()
            record = bus.stop()
    # the bus's silences from the emulator's record (what the servos' watchdog sees), over
    # the run less its first 2 s (the loop's start and the open)
    wall = np.unique(record['wall'][record['served'][:, 0]])
    wall = wall[(wall > started + 2.0) & (wall < ended)]
    gaps = np.diff(wall) * 1e3
    return {'p99': float(np.percentile(gaps, 99.0)), 'max': float(gaps.max()),
            'over': int((gaps > WATCHDOG_S * 1e3).sum()), 'readings': readings[0],
            'busy_hz': done[0] / (seconds + 1.0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--rates', type=float, nargs='*', default=[200.0, 500.0])
    parser.add_argument('--busy', type=int, default=2,
                        help='threads doing dynamics work beside the loop (default 2)')
    args = parser.parse_args()
    print(f'the bus loop for {args.seconds:g} s on the emulated bus (real time), '
          f'{args.busy} busy dynamics threads in the node process')
    print(f'{"rate":>6} {"host":<8} {"silence p99 [ms]":>17} {"longest [ms]":>13} '
          f'{"over 100 ms":>12} {"readings":>9} {"busy [1/s]":>10}')
    for rate in args.rates:
        longest = {}
        for host in ('thread', 'process'):
            r = one_run(host, rate, args.seconds, args.busy)
            longest[host] = r['max']
            print(f'{rate:>6g} {host:<8} {r["p99"]:>17.2f} {r["max"]:>13.1f} {r["over"]:>12d} '
                  f'{r["readings"]:>9d} {r["busy_hz"]:>10.0f}', flush=True)
        print(f'{rate:>6g} longest silence, thread / process: '
              f'{longest["thread"] / longest["process"]:.2f}x')

if __name__ == '__main__':
    main()
