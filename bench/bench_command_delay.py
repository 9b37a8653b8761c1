"""The torque path's delay as the gain check models it, measured through DDS.

The whole torque-mode stack runs as on the arm, each part in its own process: the emulated
servo bus (real time), ``plag_driver``, ``plag_dynamics`` (not on the command's path, but on
the same cores) and ``plag_impedance`` with config/torque_mode.yaml. The arm is bent through
the driver's position path, the controller enabled, and it holds the pose for
``--seconds``. ``plag_driver`` measures each effort command's delay from the reading it was
computed from to the cycle that writes its current (``command_delay`` in ``~/state``: the
driver's read, the publish of joint_states, one DDS hop, the controller, one DDS hop back,
the wait for the next cycle); this bench collects its windows of 1000 commands, once a
second.

Printed: p50, p99 and max of the delay [ms] (the median over the windows, and the worst
window's p99), the same in periods of 200 Hz, and the smallest gain margin of the shipped
torque-mode gains at 1-4.5 periods, at the configured ``delay_periods`` and at the measured
p99 (the check requires 2.0).

What it cannot show: a real USB adapter's latency timer (1 ms set by the driver's
install notes) and the servos' own reply delay, which the emulator answers at once.

Usage: ``PYTHONPATH=$PWD python bench/bench_command_delay.py [--seconds 20] [--repeat 1]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'test'))

from parameter_files import shipped_controller  # noqa: E402
from ros_helpers import RosClient  # noqa: E402
from test_driver_node import DOMAIN_ID, bent_torque_stack, enable, last, tear_down  # noqa: E402
from torque_rig import JOINTS, EmulatedBus  # noqa: E402

from plag_ros.core.control import stability  # noqa: E402

RATE_HZ = 200.0


def smallest_margin(controller, delay_periods: float) -> tuple[float, str]:
    """The smallest gain margin over the commanded joints at ``delay_periods``, as the
    node's gain check computes it, and its joint."""
    margins = controller.gain_margins(delay_periods)
    joint = min(margins, key=margins.get)
    return margins[joint], joint


def run(seconds: float, tmp: Path) -> list[dict]:
    """One stack, enabled ``seconds``; the driver's command_delay windows, one a second."""
    bus = EmulatedBus(tmp)
    nodes: list = []
    windows: list[dict] = []
    try:
        with RosClient(DOMAIN_ID, 'plag_bench_delay') as client:
            reports, states = bent_torque_stack(client, bus, tmp, nodes)
            response = enable(client, True)
            if not response.success:
                raise RuntimeError(f'enable refused: {response.message}')
            client.wait_for(lambda: last(states)['state'] == 'enabled', 60.0, 'the ramp')
            for _ in range(round(seconds)):
                time.sleep(1.0)
                report = last(reports)
                if report['fault']:
                    raise RuntimeError(f"driver fault: {report['fault']}")
                if report['modes'][JOINTS[3]] == 'current' and report['command_delay']:
                    windows.append(report['command_delay'])
            enable(client, False)
    finally:
        tear_down(nodes, bus)
    return windows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--seconds', type=float, default=20.0)
    parser.add_argument('--repeat', type=int, default=1)
    args = parser.parse_args()
    period_ms = 1e3 / RATE_HZ   # the driver's cycle (plag_driver's rate_hz default)
    worst = []
    for k in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            windows = run(args.seconds, Path(tmp))
        p50 = np.median([w['p50_ms'] for w in windows])
        p99 = np.array([w['p99_ms'] for w in windows])
        top = max(w['max_ms'] for w in windows)
        worst.append(p99.max())
        print(f'run {k + 1}: {len(windows)} windows of up to 1000 commands; delay p50 '
              f'{p50:.2f} ms, p99 median {np.median(p99):.2f} ms (worst window '
              f'{p99.max():.2f}), max {top:.2f} ms; in periods of {period_ms:g} ms: p50 '
              f'{p50 / period_ms:.2f}, p99 {np.median(p99) / period_ms:.2f} '
              f'(worst {p99.max() / period_ms:.2f})')
    controller = shipped_controller('torque_mode.yaml')
    configured = controller.config.delay_periods
    measured = max(worst) / period_ms
    margins = [f'{d:g}: {smallest_margin(controller, d)[0]:.2f}'
               for d in (1.0, 2.0, 3.0, 3.5, 4.0, 4.5)]
    print(f'smallest margin of the shipped gains by delay [periods]: {", ".join(margins)}')
    for what, delay in (('configured', configured), ('measured worst p99', measured)):
        margin, joint = smallest_margin(controller, delay)
        print(f'shipped torque-mode gains at the {what} delay ({delay:.2f} periods): '
              f'smallest margin {margin:.2f} ({joint}; the check requires '
              f'{stability.MIN_GAIN_MARGIN:g})')
    print(json.dumps({'worst_p99_ms': round(max(worst), 3)}))


if __name__ == '__main__':
    main()
