"""The two command paths to the CRANE-X7 driver, measured against plag_sim over DDS.

For each path (``forward``: Float64MultiArray to plag_arm_position_controller, switched in
through the sim's emulated controller manager; ``trajectory``: one-point JointTrajectory to
crane_x7_arm_controller with ``time_from_start`` 0, and the same with 5 ms) a fresh
``plag_sim`` + ``plag_impedance`` pair runs as subprocesses (ROS_DOMAIN_ID 56), the arm
starts about horizontal, the impedance node is enabled and the elbow follows a 0.3 rad,
0.5 Hz sine (the hold reference elsewhere). Printed per path:

* tracking: RMS and max of (q_d - q) of the elbow over the last 6 s (q_d from
  ``~/compensation``.position, q from joint_states), and the max drift of the tilt;
* latency: receipt of a joint state -> receipt of the command it caused, both at this
  process (p50/p99): one DDS hop in, the law, one hop out;
* the delay the gain check models, as a 200 Hz controller manager would write each
  command: its read stamps a joint state, and a command that arrives ``a`` after that
  stamp is taken by the first update after it and written in that cycle, ceil(a / 5 ms)
  periods after the read (p50/p99/max, in periods), and the smallest gain margin of
  config/impedance.yaml's gains at the p99 and at the max (the check requires 2; the file
  assumes ``delay_periods`` 3.0). ``a`` runs from the simulator's stamp to the receipt
  here, which stands in for the receipt at the controller manager (one machine, one clock).

What it cannot show: the real JTC's spline interpolation and the real controller
manager's read and write times (the servos' replies on the bus: the torque path's
driver measures those, ``bench/bench_command_delay.py``).

Usage: ``python bench/bench_command_paths.py [--seconds 8]``.
"""
from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'test'))

from parameter_files import shipped_controller  # noqa: E402
from ros_helpers import REPO, RosClient, start_node  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import Float64MultiArray  # noqa: E402
from std_srvs.srv import SetBool  # noqa: E402
from trajectory_msgs.msg import JointTrajectory  # noqa: E402

from plag_ros.core.dynamics import motors  # noqa: E402

DOMAIN = 56
Q_H = '[0.0, 1.5, 0.0, -0.4, 0.0, 0.0, 0.0, 0.0]'
ELBOW, TILT = 3, 1
ARM = list(motors.ARM_JOINTS)
# crane_x7_control's controller manager rate (read, update, write once a period), as recorded
CM_RATE_HZ = float(yaml.safe_load((REPO / 'test' / 'data' / 'dynamixel' /
                                   'crane_x7_control_sequence.yaml').read_text())
                   ['defaults']['control_rate_hz'])
POSITION_PATH = shipped_controller('impedance.yaml')


def smallest_margin(delay_periods: float) -> str:
    """config/impedance.yaml's gains' smallest gain margin at ``delay_periods``, and where."""
    margins = POSITION_PATH.gain_margins(delay_periods)
    joint = min(margins, key=margins.get)
    return f'{margins[joint]:.2f} ({joint})'


def run(kind: str, tfs: float, seconds: float, log_dir: Path) -> str:
    client = RosClient(DOMAIN, 'plag_bench_paths')
    states = client.collect(JointState, 'joint_states')
    comp = client.collect(JointState, '/plag_impedance/compensation')
    if kind == 'forward':
        commands = client.collect(Float64MultiArray, '/plag_arm_position_controller/commands')
    else:
        commands = client.collect(JointTrajectory, '/crane_x7_arm_controller/joint_trajectory')
    sim = start_node('sim_node', domain_id=DOMAIN, log_dir=log_dir,
                     params_file=REPO / 'config' / 'sim.yaml',
                     params={'initial_positions': Q_H})
    amplitude = '[0.0, 0.0, 0.0, 0.3, 0.0, 0.0, 0.0, 0.0]'
    ctl = start_node('impedance_node', domain_id=DOMAIN, log_dir=log_dir,
                     params_file=REPO / 'config' / 'impedance.yaml',
                     params={'switch.method': 'sim', 'command.type': kind,
                             'command.time_from_start': tfs, 'ramp_s': 0.5,
                             'reference.mode': 'sine', 'reference.amplitude': amplitude,
                             'reference.frequency_hz': '[0.5]', 'stale_periods': 20.0})
    try:
        client.wait_for(lambda: len(states) > 400, 60.0, 'joint states')
        cli = client.node.create_client(SetBool, '/plag_impedance/enable')
        assert cli.wait_for_service(timeout_sec=30.0)
        deadline = time.monotonic() + 60.0
        while True:          # the node may still be starting (torch import, first state)
            future = cli.call_async(SetBool.Request(data=True))
            client.wait_for(future.done, 15.0, 'enable')
            if future.result().success or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert future.result().success, future.result().message
        # The receipt here stands in for the controller manager's: this process's own
        # collector must not pause it (the last run's messages took ~0.1 s to collect).
        gc.collect()
        time.sleep(0.5)
        gc.disable()
        start_s, start_c, start_k = len(states), len(comp), len(commands)
        client.wait_for(lambda: len(states) - start_s > 200 * seconds, seconds + 30, 'run')
        s = states[start_s + 400:]
        t_s = np.array([t for t, _ in s]) * 1e-9
        q = np.array([[m.position[list(m.name).index(j)] for j in ARM] for _, m in s])
        c = comp[start_c + 400:]
        t_c = np.array([t for t, _ in c]) * 1e-9
        q_d = np.array([m.position[ELBOW] for _, m in c])
        err = np.interp(t_s, t_c, q_d) - q[:, ELBOW]
        tilt = np.abs(q[:, TILT] - q[0, TILT]).max()
        # latency: each command after the joint state received just before it
        t_k = np.array([t for t, _ in commands[start_k:]]) * 1e-9
        t_all = np.array([t for t, _ in states[start_s:]]) * 1e-9
        idx = np.searchsorted(t_all, t_k) - 1
        lat = (t_k - t_all[np.clip(idx, 0, None)])[idx >= 0] * 1e3
        rms, worst = np.sqrt(np.mean(err ** 2)) * 1e3, np.abs(err).max() * 1e3
        p50, p99 = np.percentile(lat, 50), np.percentile(lat, 99)
        # from the read (the state's stamp) to the controller manager's write of the command
        stamps = np.array([m.header.stamp.sec + m.header.stamp.nanosec * 1e-9
                           for _, m in states[start_s:]])
        periods = np.ceil((t_k[idx >= 0] - stamps[idx[idx >= 0]]) * CM_RATE_HZ)
        d50, d99, d_max = np.percentile(periods, 50), np.percentile(periods, 99), periods.max()
        return (f'{kind:10s} tfs {tfs * 1e3:3.0f} ms  elbow tracking RMS {rms:6.1f} mrad, '
                f'max {worst:6.1f} mrad; tilt drift {tilt * 1e3:5.1f} mrad; '
                f'state->command p50 {p50:.2f} ms p99 {p99:.2f} ms; read->write at '
                f'{CM_RATE_HZ:g} Hz p50 {d50:g} p99 {d99:g} max {d_max:g} periods '
                f'(impedance.yaml gains: margin {smallest_margin(d99)} at the p99, '
                f'{smallest_margin(d_max)} at the max)')
    finally:
        gc.enable()
        ctl.stop()
        sim.stop()
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=8.0)
    args = parser.parse_args()
    log_dir = Path(tempfile.mkdtemp(prefix='plag_bench_paths_'))
    for kind, tfs in (('forward', 0.0), ('trajectory', 0.0), ('trajectory', 0.005)):
        run_dir = log_dir / f'{kind}_{tfs * 1e3:.0f}ms'
        run_dir.mkdir()
        try:
            print(run(kind, tfs, args.seconds, run_dir), flush=True)
        except (ValueError, AssertionError) as err:
            print(f'{kind:10s} tfs {tfs * 1e3:3.0f} ms  failed: {err}', flush=True)
        faults = [line.split(']: ')[-1][:160] for line in
                  (run_dir / 'impedance_node.log').read_text().splitlines()
                  if 'state fault (' in line and 'warming_up' not in line
                  and 'stale' not in line]
        if faults:
            print(f'    faults: {faults}', flush=True)


if __name__ == '__main__':
    main()
