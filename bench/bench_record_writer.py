"""What crash-safe recording costs: ``BagWriter(flush_period=0.5)`` against the default.

Writes a generated 200 Hz CRANE-X7 ``/joint_states`` stream message by message, as
``plag-ros record`` does (one ``write`` per received message), for each storage with
(a) the default writer (mcap chunks of 1 MiB, one sqlite3 transaction), (b) a flush every
0.5 s of message time without fsync (survives a killed process), (c) the same with fsync
(survives a power cut; what ``plag-ros record`` does). Prints the write time per message
and per second of recording, the file size and the flush count. Best of ``--repeat`` runs.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_record_writer.py [--seconds 60]``.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.io.bag import JOINT_STATE_TYPE, typestore_for
from plag_ros.io.bag_writer import BagWriter
from plag_ros.io.cdr import TEMPLATE_NS, CdrTemplate
from plag_ros.ros.messages import joint_state

RATE_HZ = 200.0


def _stream(seconds: float) -> tuple[np.ndarray, np.ndarray]:
    model = RobotModel.from_urdf(default_urdf_path())
    names = list(model.joint_names)
    count = int(seconds * RATE_HZ)
    t_ns = 1_700_000_000_000_000_000 + np.arange(count, dtype=np.int64) * 5_000_000
    rng = np.random.default_rng(0)
    q = np.cumsum(rng.normal(0.0, 1e-3, (count, len(names))), axis=0)
    template = CdrTemplate(joint_state(names, np.zeros(len(names)), np.zeros(len(names)),
                                       np.zeros(len(names)), t_ns=TEMPLATE_NS))
    return t_ns, template.fill(t_ns, {'position': q, 'velocity': q, 'effort': q})


def _run(path: Path, storage: str, t_ns: np.ndarray, rows: np.ndarray,
         flush_period: float | None, fsync: bool) -> tuple[float, int, int]:
    start = time.perf_counter()
    with BagWriter(path, storage=storage, typestore=typestore_for('kilted'),
                   flush_period=flush_period, fsync=fsync) as writer:
        conn = writer.add_topic('/joint_states', JOINT_STATE_TYPE)
        for t, row in zip(t_ns.tolist(), rows):
            writer.write(conn, t, row.data)
    elapsed = time.perf_counter() - start
    size = sum(p.stat().st_size for p in path.iterdir())
    return elapsed, size, writer.flushes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=60.0, help='recording length [s]')
    parser.add_argument('--repeat', type=int, default=3)
    args = parser.parse_args()
    t_ns, rows = _stream(args.seconds)
    print(f'{len(t_ns)} JointState messages of {rows.shape[1]} bytes '
          f'({args.seconds:.0f} s at {RATE_HZ:.0f} Hz)')
    print(f"{'storage':8} {'writer':28} {'us/msg':>8} {'ms per s rec':>12} {'bytes':>10} "
          f"{'flushes':>8}")
    variants = [('default (no flush)', None, False), ('flush 0.5 s, no fsync', 0.5, False),
                ('flush 0.5 s + fsync', 0.5, True)]
    with tempfile.TemporaryDirectory() as tmp:
        for storage in ('mcap', 'sqlite3'):
            for label, period, fsync in variants:
                best = None
                for k in range(args.repeat):
                    path = Path(tmp) / f'{storage}_{period}_{fsync}_{k}'
                    result = _run(path, storage, t_ns, rows, period, fsync)
                    if best is None or result[0] < best[0]:
                        best = result
                elapsed, size, flushes = best
                print(f'{storage:8} {label:28} {elapsed / len(t_ns) * 1e6:8.1f} '
                      f'{elapsed / args.seconds * 1e3:12.2f} {size:10d} {flushes:8d}')


if __name__ == '__main__':
    main()
