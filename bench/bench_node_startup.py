"""Node start-up: seconds from launch to ready, and resident memory, per node and source tree.

Each node runs as ``python -m plag_ros.ros.nodes.<node>`` (the bundled URDF, its defaults;
the driver on an emulated servo bus, ``python -m plag_ros.apps.dynamixel_bus``) in a private
ROS domain, and this process waits for the first message of a topic the node publishes once
it is built:

* ``plag_dynamics``: ``/plag_dynamics/names`` (latched, after the model and the warm-up);
* ``plag_impedance``: ``/plag_impedance/state`` (latched, after the controller's warm-up);
* ``plag_driver``: ``/plag_driver/state`` (latched, once the servos answered);
* ``plag_sim``: the first ``/joint_states`` (after the simulator's first step).

Printed per node and tree: the median (min-max) over ``--repeat`` runs of the time from
``Popen`` to that message, and of the process's ``VmRSS`` then and ``VmHWM`` (peak
resident) ``--settle`` seconds later (/proc/<pid>/status). The trees given with ``--tree``
(default: this one; e.g. a ``git worktree`` of an older commit as the peer) run interleaved,
so a busy moment of the machine falls on all of them; one unmeasured run per node and tree
first fills numba's cache, as a lab's second start finds it.

Usage: ``python bench/bench_node_startup.py [--repeat 5] [--settle 5] [--tree PATH ...]
[--nodes dynamics impedance driver sim]``.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
import rclpy  # noqa: E402
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402

from plag_ros.ros.rclpy_compat import confine_to_localhost  # noqa: E402

DOMAIN_ID = 118
FILE = ['-p', 'robot_description_source:=file']
NODES = {   # node -> (module, arguments, ready topic, its type)
    'dynamics': ('dynamics_node', FILE, '/plag_dynamics/names', String),
    'impedance': ('impedance_node', FILE, '/plag_impedance/state', String),
    'driver': ('driver_node', FILE, '/plag_driver/state', String),
    'sim': ('sim_node', [], '/joint_states', JointState),
}
READY_TIMEOUT_S = 120.0


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    confine_to_localhost(env)
    env.update(ROS_DOMAIN_ID=str(DOMAIN_ID), RMW_IMPLEMENTATION='rmw_fastrtps_cpp',
               PYTHONPATH=str(tree), PYTHONUNBUFFERED='1')
    return env


def _memory_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` [MB]."""
    found = {}
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        key, _, value = line.partition(':')
        if key in ('VmRSS', 'VmHWM'):
            found[key] = int(value.split()[0]) / 1024.0
    return found


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def one_start(listener, node: str, tree: Path, tmp: Path, settle_s: float) -> dict[str, float]:
    """Start ``node`` from ``tree`` once; seconds to ready and memory [MB]."""
    module, arguments, topic, kind = NODES[node]
    bus = None
    extra: list[str] = []
    env = _env(tree)
    if node == 'driver':
        link = tmp / f'bus-{time.monotonic_ns()}'
        bus = subprocess.Popen([sys.executable, '-m', 'plag_ros.apps.dynamixel_bus', '--link',
                                str(link)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True, env=env)
        if 'Dynamixel bus on' not in bus.stdout.readline():
            raise RuntimeError('the emulated bus did not start')
        extra = ['-p', f'port:={link}']
    arrived: list[float] = []
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                     durability=DurabilityPolicy.VOLATILE if kind is JointState
                     else DurabilityPolicy.TRANSIENT_LOCAL)     # the state topics latch
    subscription = listener.create_subscription(
        kind, topic, lambda _msg: arrived.append(time.perf_counter()), qos)
    log = open(tmp / f'{node}.log', 'w')
    t0 = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, '-m', f'plag_ros.ros.nodes.{module}', '--ros-args', *arguments,
         *extra], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tree)
    try:
        while not arrived:
            rclpy.spin_once(listener, timeout_sec=0.01)
            if process.poll() is not None or time.perf_counter() - t0 > READY_TIMEOUT_S:
                raise RuntimeError(f'{node} from {tree} never became ready (exit '
                                   f'{process.poll()}); see {log.name}')
        ready = _memory_mb(process.pid)
        time.sleep(settle_s)
        settled = _memory_mb(process.pid)
        return {'ready_s': arrived[0] - t0, 'rss_mb': ready['VmRSS'],
                'peak_mb': settled['VmHWM']}
    finally:
        listener.destroy_subscription(subscription)
        _stop(process)
        log.close()
        if bus is not None:
            _stop(bus)


def _line(values: list[float], unit: str, digits: int) -> str:
    a = np.asarray(values)
    return f'{np.median(a):.{digits}f} ({a.min():.{digits}f}-{a.max():.{digits}f}) {unit}'


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=5, help='measured starts per node [5]')
    parser.add_argument('--settle', type=float, default=5.0,
                        help='seconds after ready for the peak memory [5]')
    parser.add_argument('--tree', type=Path, action='append',
                        help='a source tree to start the nodes from (repeatable; default: '
                        'this one)')
    parser.add_argument('--nodes', nargs='+', default=list(NODES), choices=list(NODES))
    args = parser.parse_args()
    trees = [t.resolve() for t in (args.tree or [REPO])]
    os.environ.update(ROS_DOMAIN_ID=str(DOMAIN_ID), RMW_IMPLEMENTATION='rmw_fastrtps_cpp')
    confine_to_localhost(os.environ)
    rclpy.init()
    listener = rclpy.create_node('plag_bench_startup')
    load = os.getloadavg()[0]
    print(f'{os.cpu_count()} CPUs, load {load:.2f}; {args.repeat} starts per node and tree, '
          f'interleaved; memory {args.settle:g} s after ready')
    try:
        with tempfile.TemporaryDirectory() as folder:
            tmp = Path(folder)
            for node in args.nodes:
                runs: dict[Path, list[dict[str, float]]] = {t: [] for t in trees}
                for tree in trees:                   # fills numba's cache, not measured
                    one_start(listener, node, tree, tmp, 0.0)
                for _ in range(args.repeat):
                    for tree in trees:
                        runs[tree].append(one_start(listener, node, tree, tmp, args.settle))
                for tree in trees:
                    r = runs[tree]
                    print(f'{node:9s} {tree.name:12s} ready '
                          f'{_line([x["ready_s"] for x in r], "s", 2)}, RSS at ready '
                          f'{_line([x["rss_mb"] for x in r], "MB", 0)}, peak '
                          f'{_line([x["peak_mb"] for x in r], "MB", 0)}')
                if len(trees) > 1:
                    base = np.median([x['ready_s'] for x in runs[trees[0]]])
                    for tree in trees[1:]:
                        other = np.median([x['ready_s'] for x in runs[tree]])
                        print(f'{"":9s} ready-time ratio {tree.name} / {trees[0].name}: '
                              f'{other / base:.2f}')
    finally:
        listener.destroy_node()
        rclpy.shutdown()
    return 0


if __name__ == '__main__':
    sys.exit(main())
