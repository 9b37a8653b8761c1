"""Soak: simulator, dynamics node and impedance node together for a long run, minute by minute.

The same graph as ``plag-ros sim --control`` (the simulator standing in for the driver at
200 Hz, the dynamics node, the impedance node enabled with the elbow following a sine)
runs in a private ROS domain on this machine for ``--minutes``. Printed per minute:

* the resident memory (VmRSS from /proc) of each node process [MB];
* the dynamics node's latency from input stamp to the receipt of ``~/joint_states`` here,
  p50 / p99 [ms];
* drops: input samples the simulator stamped that produced no output here (the estimator's
  warm-up after a gap aside), and the node's own rejected count (/diagnostics).

Targets (issue 16): RSS growth below 5 MB after the first minute; no drift in p99.
Usage: ``python bench/soak.py [--minutes 10]``; the runs go into bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _rss_mb(pid: int) -> float:
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024.0
    return float('nan')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--minutes', type=float, default=10.0)
    args = parser.parse_args()

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from plag_ros.apps.bringup import SIM_CONTROL_DEMO, NodeProcess, sim_specs, with_overlay
    from plag_ros.ros import messages as msgs
    from plag_ros.ros.domains import isolate

    isolate(None)
    log_dir = Path(tempfile.mkdtemp(prefix='plag_soak_'))
    specs = with_overlay(sim_specs(control=True), SIM_CONTROL_DEMO)   # plag-ros sim --control
    children = [NodeProcess(s.command(), log_dir / f'{s.module}.log', label=s.module)
                for s in specs]
    rclpy.init()
    node = rclpy.create_node('plag_soak')
    reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    latency: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    rejected = {'value': '-'}

    def on_output(msg: JointState) -> None:
        stamp = msgs.stamp_to_ns(msg.header.stamp)
        outputs.append(stamp)
        latency.append((time.time_ns() - stamp) * 1e-6)

    def on_diag(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith('/plag_dynamics'):
                values = {kv.key: kv.value for kv in status.values}
                rejected['value'] = values.get('rejected', rejected['value'])

    node.create_subscription(JointState, '/plag_dynamics/joint_states', on_output, reliable)
    node.create_subscription(JointState, 'joint_states',
                             lambda m: inputs.append(msgs.stamp_to_ns(m.header.stamp)), reliable)
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, reliable)
    print(f'soak: {args.minutes:g} min, logs in {log_dir}', flush=True)
    print(' min   rss sim  rss dyn  rss imp   p50 ms   p99 ms   inputs  no-output  rejected',
          flush=True)
    rows = []
    try:
        begin = time.monotonic()
        while not outputs and time.monotonic() - begin < 120:
            rclpy.spin_once(node, timeout_sec=0.1)
        start = time.monotonic()
        latency.clear()                   # from here on: the warm-up is behind
        inputs.clear()
        outputs.clear()
        minute = 1
        while time.monotonic() - start < args.minutes * 60:
            rclpy.spin_once(node, timeout_sec=0.01)
            if any(not c.alive() for c in children):
                print('soak: a node died', file=sys.stderr)
                return 1
            if time.monotonic() - start >= minute * 60:
                out = set(outputs)
                missing = sum(1 for t in inputs[:-50] if t not in out)
                lat = np.array(latency)
                row = (minute, *[_rss_mb(c.pid) for c in children],
                       float(np.percentile(lat, 50)), float(np.percentile(lat, 99)),
                       len(inputs), missing, rejected['value'])
                rows.append(row)
                print(f'{row[0]:4d} {row[1]:8.1f} {row[2]:8.1f} {row[3]:8.1f} {row[4]:8.2f} '
                      f'{row[5]:8.2f} {row[6]:8d} {row[7]:10d} {row[8]:>9}', flush=True)
                latency.clear()
                inputs.clear()
                outputs.clear()
                minute += 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
        for child in reversed(children):
            child.stop()
    if len(rows) >= 2:
        growth = [rows[-1][i] - rows[0][i] for i in (1, 2, 3)]
        p99 = [r[5] for r in rows]
        print(f'soak: RSS growth after the first minute sim {growth[0]:+.1f} MB, dynamics '
              f'{growth[1]:+.1f} MB, impedance {growth[2]:+.1f} MB (target < 5 MB); p99 '
              f'first {p99[0]:.2f} ms, last {p99[-1]:.2f} ms, max {max(p99):.2f} ms', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
