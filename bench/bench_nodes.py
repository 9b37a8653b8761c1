"""Live dynamics node over DDS: latency, drops and CPU at 200 Hz, 500 Hz and 1 kHz.

For each rate a fresh ``plag_dynamics`` node (config/crane_x7.yaml, bundled URDF,
``filter.rate_hz`` set to the feed rate) runs as a subprocess; a feeder subprocess publishes
``joint_states`` (8 joints, shuffled order, wall-clock stamps of its cycle; each sample is
serialized before its cycle, and the feeder sleeps with 1 ns timer slack and then busy-waits
the last 0.3 ms, so that it publishes on its cycle like a C++ driver's control loop) at the
rate for the duration,
and this process receives ``~/joint_states`` (the first output of a sample) and the last
``~/body/<body>`` message (the last output of a sample). Printed per rate:

* latency p50/p99/max from the input stamp to the receipt of the first and the last output
  (same machine, same wall clock; the receiver takes the two timed topics as raw CDR on
  plag_ros' InputThread, without an executor, so it adds as little as it can), and the
  node's own stamp-to-publish-done p99 from its /diagnostics (worst one-second window),
  which leaves out the receiver's executor;
* dropped: samples fed that the node never received plus outputs it published that never
  arrived (the node's own received/published counters from /diagnostics); with
  ``--param output_rate_hz:=200.0`` outputs are decimated by design, not dropped;
* CPU of the node process over the feed (utime + stime from /proc/<pid>/stat), in cores;
* Pinocchio peer: ``pin.rnea`` timed in this process on as many samples as were fed, with
  the node's CPU time per sample and the in-process ``engine.decompose`` time per sample as
  ratios to it (RNEA computes only the n joint torques; the node computes the full
  (n, B, n) decomposition, the estimator and 15 messages per sample).

Usage: ``python bench/bench_nodes.py [--duration 10] [--rates 200 500 1000] [--repeat N]
[--save L.npz] [--versus NAME:=VALUE]`` (``--repeat``: N interleaved runs per rate and their
median and spread, as one run on a shared machine is one sample; ``--save``: every latency
in arrival order, to see when the slow samples came; ``--versus``: each run also with that
parameter, interleaved, and the ratio of the medians, e.g. ``publish_components:=false``
for what the per-component topics cost).
Targets: nothing dropped at 500 Hz, p99 <= 3 ms, under half a core at 200 Hz.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from plag_ros.ros.rclpy_compat import confine_to_localhost  # noqa: E402

DOMAIN_ID = 17
SPIN_S = 0.0003          # the feeder busy-waits the last 0.3 ms of each cycle
NODE = '/plag_dynamics'


def _env() -> dict[str, str]:
    env = dict(os.environ)
    confine_to_localhost(env)
    env.update({'ROS_DOMAIN_ID': str(DOMAIN_ID), 'RMW_IMPLEMENTATION': 'rmw_fastrtps_cpp',
                'PYTHONPATH': os.pathsep.join(filter(None, [str(REPO),
                                                            os.environ.get('PYTHONPATH')]))})
    return env


def feed(rate_hz: float, duration_s: float, wait_s: float) -> None:
    """Feeder subprocess: publish joint_states at ``rate_hz``; print the count as JSON."""
    import ctypes

    import rclpy
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
    from plag_ros.ros import messages as msgs

    model = RobotModel.from_urdf(default_urdf_path())
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    names = [names[i] for i in np.random.default_rng(0).permutation(len(names))]
    rclpy.init(args=[])
    node = rclpy.create_node('plag_bench_feed', start_parameter_services=False)
    pub = node.create_publisher(JointState, 'joint_states',
                                QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    deadline = time.monotonic() + wait_s
    while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    period = 1.0 / rate_hz
    phase = np.arange(len(names), dtype=float)
    k = model.joint_index(names)     # around mid-range: a motion within the joint limits
    middle = 0.5 * (model.joint_lower[k] + model.joint_upper[k])
    count = 0
    late_ns = []
    # Linux timer slack (50 us by default) lets sleeps end late; 1 ns keeps the wake-up on
    # time (p99 oversleep here 0.48 -> 0.25 ms), so the busy-wait before the cycle is short.
    ctypes.CDLL(None).prctl(29, 1, 0, 0, 0)     # PR_SET_TIMERSLACK
    # Stamps are the scheduled sample times on the wall clock, as a driver stamps its
    # control cycle: a feeder delayed by the OS does not bunch the stamps together.
    start_ns = time.time_ns()
    start = time.perf_counter()
    while True:
        offset = count * period
        if offset >= duration_s:
            break
        # The sample is serialized before its cycle, as a C++ driver has it ready: building
        # and converting a Python message after the stamp (~0.2 ms here) would count as the
        # node's latency.
        q = middle + 0.4 * np.sin(2 * np.pi * 0.5 * offset + phase)
        t_ns = start_ns + round(offset * 1e9)
        raw = serialize_message(msgs.joint_state(names, q, t_ns=t_ns))
        # Sleep to just before the cycle, then spin to it: a driver's control loop publishes
        # on its cycle, while time.sleep alone oversleeps by up to ~1 ms here and that
        # lateness would count as the node's latency.
        delay = start + offset - time.perf_counter()
        if delay > SPIN_S:
            time.sleep(delay - SPIN_S)
        while time.perf_counter() < start + offset:
            pass
        pub.publish(raw)
        late_ns.append(time.time_ns() - t_ns)
        count += 1
    elapsed = time.perf_counter() - start
    print(json.dumps({'sent': count, 'elapsed_s': elapsed,
                      'late_p99_ms': float(np.percentile(late_ns, 99)) * 1e-6,
                      'late_max_ms': float(np.max(late_ns)) * 1e-6}), flush=True)
    node.destroy_node()
    rclpy.try_shutdown()


def _cpu_s(pid: int) -> float:
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def _pct(x: np.ndarray, p: float) -> float:
    return float(np.percentile(x, p)) if x.size else float('nan')


def bench_rate(rate_hz: float, duration_s: float, log_dir: Path,
               extra: list[str] = ()) -> dict:
    """One node, one feed; returns the figures."""
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
    from plag_ros.ros.input_thread import InputThread

    model = RobotModel.from_urdf(default_urdf_path())
    last_body = model.body_names[-1]
    log = open(log_dir / f'node_{int(rate_hz)}.log', 'wb')  # noqa: SIM115
    node_proc = subprocess.Popen(
        [sys.executable, '-m', 'plag_ros.ros.nodes.dynamics_node', '--ros-args',
         '--params-file', str(REPO / 'config' / 'crane_x7.yaml'),
         '-p', 'robot_description_source:=file', '-p', f'filter.rate_hz:={float(rate_hz)}',
         *[a for p in extra for a in ('-p', p)]],
        env=_env(), stdout=log, stderr=subprocess.STDOUT)
    context = rclpy.Context()
    rclpy.init(args=[], context=context, domain_id=DOMAIN_ID)
    # The receiver should disturb what it measures as little as it can, like a C++
    # subscriber: the two timed topics are served by plag_ros' InputThread (a wait set of
    # their own, no executor) and taken as raw CDR, the receipt time read before anything
    # else and the header stamp read from the bytes (offset 4: after the encapsulation
    # header, Header.stamp.sec int32 and nanosec uint32 come first). The executor serves
    # only /diagnostics, and the node has no parameter services.
    node = rclpy.create_node('plag_bench_receiver', context=context,
                             start_parameter_services=False)
    qos = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
    first: list[int] = []
    last: list[int] = []
    diag: dict[str, str] = {}

    def stamp_of(raw: bytes) -> int:
        sec, nsec = struct.unpack_from('<iI', raw, 4)
        return sec * 1_000_000_000 + nsec

    def on_first(raw: bytes) -> None:
        now = time.time_ns()
        first.append(now - stamp_of(raw))

    def on_last(raw: bytes) -> None:
        now = time.time_ns()
        last.append(now - stamp_of(raw))

    processing: list[float] = []
    node_p99: list[float] = []

    def on_diag(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith(NODE):
                diag.clear()
                diag.update({kv.key: kv.value for kv in status.values})
                value = float(diag.get('processing_p50_ms', 'nan'))
                if value == value:
                    processing.append(value)
                    # the node's own stamp -> publish-done p99 over this window
                    node_p99.append(float(diag.get('latency_p99_ms', 'nan')))

    # The instrument takes the private wait set where this rclpy is the checked one (no
    # executor of its own to disturb the node); elsewhere it falls back and says so.
    timed = [InputThread(node, JointState, f'{NODE}/joint_states', on_first, qos, raw=True,
                         private_wait_set=True),
             InputThread(node, JointState, f'{NODE}/body/{last_body}', on_last, qos,
                         raw=True, private_wait_set=True)]
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diag, qos)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    # Wait for the node to be up (it publishes diagnostics once its model is loaded).
    deadline = time.monotonic() + 120.0
    while not diag.get('model_source') and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.1)
    feeder = subprocess.Popen([sys.executable, __file__, '--feed', str(rate_hz),
                               '--duration', str(duration_s)], env=_env(),
                              stdout=subprocess.PIPE, text=True)
    # CPU window: from the first output to the end of the feed.
    while not first and feeder.poll() is None:
        executor.spin_once(timeout_sec=0.01)
    cpu0, wall0 = _cpu_s(node_proc.pid), time.monotonic()
    while feeder.poll() is None:
        executor.spin_once(timeout_sec=0.1)
    cpu1, wall1 = _cpu_s(node_proc.pid), time.monotonic()
    fed = json.loads(feeder.stdout.read().strip().splitlines()[-1])
    sent = fed['sent']
    settle = time.monotonic() + 3.0
    while time.monotonic() < settle:
        executor.spin_once(timeout_sec=0.05)
    figures = {
        'rate_hz': rate_hz, 'sent': sent, 'outputs': len(first), 'last_outputs': len(last),
        # Lost on the way in (node's subscription queue) plus lost on the way out.
        'dropped': (sent - int(diag.get('received', 0))
                    + int(diag.get('published', 0)) - len(first)),
        'node_received': diag.get('received'), 'node_published': diag.get('published'),
        'node_rejected': diag.get('rejected'),
        'p50_ms': _pct(np.array(first) * 1e-6, 50), 'p99_ms': _pct(np.array(first) * 1e-6, 99),
        'max_ms': float(np.max(first) * 1e-6) if first else float('nan'),
        'last_p50_ms': _pct(np.array(last) * 1e-6, 50),
        'last_p99_ms': _pct(np.array(last) * 1e-6, 99),
        'cpu_cores': (cpu1 - cpu0) / max(wall1 - wall0, 1e-9),
        'cpu_s_per_sample': (cpu1 - cpu0) / max(len(first), 1) if first else float('nan'),
        'processing_p50_ms': float(np.median(processing)) if processing else float('nan'),
        'node_p99_ms': float(np.nanmax(node_p99)) if node_p99 else float('nan'),
        'feeder_late_p99_ms': fed['late_p99_ms'],
        'feeder_late_max_ms': fed['late_max_ms'],
        'first_ns': np.array(first, dtype=np.int64),
        'last_ns': np.array(last, dtype=np.int64),
    }
    executor.shutdown()
    for thread in timed:
        thread.destroy()
    node.destroy_node()
    context.try_shutdown()
    node_proc.send_signal(signal.SIGINT)
    try:
        node_proc.wait(15)
    except subprocess.TimeoutExpired:
        node_proc.kill()
    log.close()
    return figures


def pinocchio_peer(n_samples: int) -> tuple[float, float]:
    """Seconds per sample of pin.rnea and of engine.decompose, in this process."""
    import pinocchio as pin
    import torch

    from plag_ros.core.dynamics.engine import PartialLagrangian
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    torch.set_num_threads(1)
    model = RobotModel.from_urdf(default_urdf_path())
    pmodel = pin.buildModelFromXML(model.urdf_xml)
    pdata = pmodel.createData()
    rng = np.random.default_rng(1)
    q = rng.uniform(-1, 1, (n_samples, pmodel.nq))
    v = rng.uniform(-1, 1, (n_samples, pmodel.nv))
    a = rng.uniform(-1, 1, (n_samples, pmodel.nv))
    start = time.perf_counter()
    for i in range(n_samples):
        pin.rnea(pmodel, pdata, q[i], v[i], a[i])
    rnea = (time.perf_counter() - start) / n_samples
    engine = PartialLagrangian(model)
    n = model.n_joints
    count = min(n_samples, 2000)
    qs = rng.uniform(-1, 1, (count, 3, n))
    for i in range(20):
        engine.decompose(*qs[i]).numpy()
    start = time.perf_counter()
    for i in range(count):
        engine.decompose(*qs[i]).numpy()
    return rnea, (time.perf_counter() - start) / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=10.0)
    parser.add_argument('--rates', type=float, nargs='+', default=[200.0, 500.0, 1000.0])
    parser.add_argument('--param', action='append', default=[], metavar='NAME:=VALUE',
                        help='extra dynamics node parameter, e.g. publish_bodies:=false')
    parser.add_argument('--repeat', type=int, default=1, metavar='N',
                        help='run the rates N times (interleaved) and print the median and '
                             'spread per rate: one run on a shared machine is one sample')
    parser.add_argument('--save', type=Path, default=None, metavar='NPZ',
                        help='save every latency [ns] per rate, in arrival order')
    parser.add_argument('--versus', default=None, metavar='NAME:=VALUE',
                        help='also run each rate with this parameter (interleaved) and print '
                             'the ratio of the medians')
    parser.add_argument('--feed', type=float, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.feed is not None:
        feed(args.feed, args.duration, wait_s=120.0)
        return 0
    log_dir = Path(tempfile.mkdtemp(prefix='bench_nodes_'))
    print(f'bench_nodes: {args.duration:g} s per rate, node parameters {args.param or "default"}, '
          f'node logs in {log_dir}, '
          f'{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}')
    header = (f"{'rate':>6} {'sent':>6} {'out':>6} {'drop':>5} {'p50':>7} {'p99':>7} "
              f"{'max':>7} {'last p50':>9} {'last p99':>9} {'cpu':>6} {'ms cpu/sample':>13}")
    print(header + '   (latency ms from input stamp; cpu in cores)')
    rows: list[dict] = []
    for repeat in range(args.repeat):
        for rate in args.rates:
            variants = [('base', args.param)]
            if args.versus:
                variants.append((args.versus, [*args.param, args.versus]))
            for name, params in variants:
                f = bench_rate(rate, args.duration, log_dir, params)
                f['repeat'], f['variant'] = repeat, name
                rows.append(f)
                print(f'[{name}] ', end='')
                _print_row(f)
    if args.repeat > 1 or args.versus:
        for name in dict.fromkeys(r['variant'] for r in rows):
            print(f'[{name}] ', end='')
            _print_summary([r for r in rows if r['variant'] == name], args.rates)
    if args.versus:
        def median(rate: float, variant: str, key: str) -> float:
            return float(np.median([r[key] for r in rows
                                    if r['rate_hz'] == rate and r['variant'] == variant]))

        for rate in args.rates:
            ratios = ', '.join(
                f'{key} {median(rate, "base", key) / median(rate, args.versus, key):.2f}x'
                for key in ('cpu_cores', 'p50_ms', 'p99_ms'))
            print(f'{rate:6.0f} Hz  medians base / {args.versus}: {ratios}', flush=True)
    if args.save is not None:
        suffix = (lambda r: f"_{r['repeat']}") if args.repeat > 1 else (lambda r: '')
        np.savez(args.save, **{f"{kind}_{r['rate_hz']:.0f}{suffix(r)}": r[f'{kind}_ns']
                               for r in rows for kind in ('first', 'last')})
    n_samples = max(int(r['sent']) for r in rows)
    rnea_s, decompose_s = pinocchio_peer(n_samples)
    node_s = rows[0]['cpu_s_per_sample']
    print(f'Pinocchio peer ({n_samples} samples, this process): pin.rnea '
          f'{rnea_s * 1e6:.1f} us/sample; engine.decompose {decompose_s * 1e6:.1f} us/sample '
          f'({decompose_s / rnea_s:.0f}x rnea); node CPU at {rows[0]["rate_hz"]:.0f} Hz '
          f'{node_s * 1e6:.0f} us/sample ({node_s / rnea_s:.0f}x rnea)')
    return 0


P99_TARGET_MS = 3.0


def _print_row(f: dict) -> None:
    print(f"{f['rate_hz']:6.0f} {f['sent']:6d} {f['outputs']:6d} {f['dropped']:5d} "
          f"{f['p50_ms']:7.2f} {f['p99_ms']:7.2f} {f['max_ms']:7.2f} "
          f"{f['last_p50_ms']:9.2f} {f['last_p99_ms']:9.2f} {f['cpu_cores']:6.2f} "
          f"{f['cpu_s_per_sample'] * 1e3:13.3f}   node received {f['node_received']} "
          f"published {f['node_published']} rejected {f['node_rejected']} "
          f"in-callback p50 {f['processing_p50_ms']:.2f} ms, stamp to publish-done p99 "
          f"(worst 1 s window) {f['node_p99_ms']:.2f} ms, feeder late p99 "
          f"{f['feeder_late_p99_ms']:.2f} max {f['feeder_late_max_ms']:.2f} ms",
          flush=True)


def _print_summary(rows: list[dict], rates: list[float]) -> None:
    """Per rate over the repeats: median and range of p99, p50 and CPU; drops in total."""
    print(f'over {len(rows) // len(rates)} runs per rate:')
    for rate in rates:
        runs = [r for r in rows if r['rate_hz'] == rate]
        p99 = np.array([r['p99_ms'] for r in runs])
        p50 = np.array([r['p50_ms'] for r in runs])
        cpu = np.array([r['cpu_cores'] for r in runs])
        print(f'{rate:6.0f} Hz  p99 median {np.median(p99):.2f} ms ({p99.min():.2f}-'
              f'{p99.max():.2f}), <= {P99_TARGET_MS:g} ms in {int((p99 <= P99_TARGET_MS).sum())}'
              f' of {len(runs)}; p50 median {np.median(p50):.2f} ms; cpu median '
              f'{np.median(cpu):.2f} cores ({cpu.min():.2f}-{cpu.max():.2f}); dropped '
              f"{sum(r['dropped'] for r in runs)} in all", flush=True)


if __name__ == '__main__':
    sys.exit(main())
