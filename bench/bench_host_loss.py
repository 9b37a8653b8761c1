"""What the emulated CRANE-X7 does when its host dies: the drop after a SIGKILL of the driver.

For each of the three poses of ``test/torque_rig.py`` (bent, reaching, folded) and for
each mode of the arm joints (current mode commanding the pose's gravity torque, as the
impedance node's hold would; position mode holding the pose), a driver process is started
on a fresh emulated bus, brought to the pose, and killed with SIGKILL. The bus keeps
simulating in real time; after three seconds its record (simulated time, the emulator's
ground truth) gives, per case:

* when the servos stopped making torque after the last packet (the Bus Watchdog,
  ``watchdog_s``, 0.1 s by default, then 20 ms units);
* the drop: the largest change of any arm joint's position over the 2 s after the last
  packet [mrad], and which joint;
* the tilt's drop alone [mrad].

What each mode does on the watchdog's expiry is the emulator's reading of the e-manual
(``plag_ros/bus/emulator/servo.py``: "the servo stops": goal position := present position,
goal current := 0): in position mode the servo keeps holding where it is, in current mode
it makes no torque and the arm falls under gravity until a limit or the table stops it.

Usage: ``python bench/bench_host_loss.py [--watchdog 0.1]``.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / 'test'))

_CHILD = """
import sys
import numpy as np
from torque_rig import gravity_feed, loop, move_to, new_driver, patient_sdk
patient_sdk()
d = new_driver({link!r}, watchdog_s={watchdog})
d.open()
for attempt in range(5):          # a stall of the machine may fault the set-up: again
    move_to(d, np.array({pose}), 1.0, 0.3)
    feed = None
    if {current}:
        d.request_mode("current")
        feed = gravity_feed(d)
    loop(d, 0.5, feed)
    if not d.fault:
        break
    print("set-up faulted:", d.clear_fault(), file=sys.stderr, flush=True)
print("ready", flush=True)
loop(d, 60.0, feed)
"""


def one_case(pose: list[float], current: bool, watchdog: float) -> dict[str, float]:
    from torque_rig import JOINTS, EmulatedBus

    with tempfile.TemporaryDirectory() as tmp:
        bus = EmulatedBus(Path(tmp))
        script = Path(tmp) / 'driver.py'
        script.write_text(_CHILD.format(link=str(bus.link), watchdog=watchdog, pose=pose,
                                        current=current))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / 'test')]))
        child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                 text=True, env=env, cwd=ROOT)
        try:
            if child.stdout.readline().strip() != 'ready':
                raise RuntimeError('the driver process did not reach the pose')
            time.sleep(0.5)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            child.kill()
        time.sleep(3.0)        # the bus simulates on: the fall, in its own record
        record = bus.stop()
    t, q, effort = record['t'], record['q'][:, :7], record['effort'][:, :7]
    last_packet = t[record['served'][:, 0].max()]
    after = (t >= last_packet) & (t <= last_packet + 2.0)
    moved = np.abs(q[after] - q[after][0]).max(axis=0)
    stopped = np.flatnonzero((t > last_packet) & np.all(effort == 0.0, axis=1))
    worst = int(np.argmax(moved))
    return {'drop_mrad': 1e3 * moved[worst], 'joint': JOINTS[worst],
            'tilt_mrad': 1e3 * moved[1],
            'torque_off_ms': 1e3 * (t[stopped[0]] - last_packet) if stopped.size else
            float('nan')}


def main() -> None:
    from torque_rig import POSES

    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--watchdog', type=float, default=0.1,
                        help="the driver's watchdog_s [s] (default 0.1, its default)")
    args = parser.parse_args()
    print(f'SIGKILL of the driver, Bus Watchdog {args.watchdog:g} s; drops over the 2 s after '
          'the last packet (emulator record)')
    print(f'{"pose":<9} {"mode":<9} {"drop [mrad]":>11} {"joint":<46} {"tilt [mrad]":>11} '
          f'{"all torque 0 after [ms]":>24}')
    for name, pose in POSES.items():
        for current in (True, False):
            r = one_case(pose, current, args.watchdog)
            off = 'never' if np.isnan(r['torque_off_ms']) else f'{r["torque_off_ms"]:.0f}'
            print(f'{name:<9} {"current" if current else "position":<9} '
                  f'{r["drop_mrad"]:>11.1f} {r["joint"]:<46} {r["tilt_mrad"]:>11.1f} '
                  f'{off:>24}', flush=True)


if __name__ == '__main__':
    main()
