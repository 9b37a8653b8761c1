"""The emulated CRANE-X7 bus in its own process and the torque-mode driver against it
(test/test_bus_driver.py, bench/bench_driver.py).

:class:`EmulatedBus` starts ``python -m plag_ros.apps.dynamixel_bus`` with a link, a fault
FIFO and a record of every physics step (the ground truth: positions, velocities and the
torque each servo made); :func:`loop` runs a :class:`~plag_ros.bus.driver.BusDriver` at a
rate with a callback per good reading, as ``plag_driver``'s bus thread does.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from plag_ros.bus.arm import BusConfig
from plag_ros.bus.driver import BusDriver, DriverSettings, Reading, gravity_in_chain_order
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.motors import ARM_JOINTS

ROOT = Path(__file__).resolve().parents[1]
CONFIG = BusConfig.load()
JOINTS = [s.joint for s in CONFIG.servos]


class EmulatedBus:
    """The bus process; ``record()`` after :meth:`stop` gives its npz."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.link, self.fifo, self.npz = tmp / 'bus', tmp / 'faults', tmp / 'record.npz'
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get(
            'PYTHONPATH', ''))
        # stderr apart: a library's warning there (llvmlite's on Humble's Python) must not
        # be taken for the bus's first line
        self.stderr = tmp / 'bus.stderr'
        with open(self.stderr, 'w') as errors:
            self.process = subprocess.Popen(
                [sys.executable, '-m', 'plag_ros.apps.dynamixel_bus', '--link', str(self.link),
                 '--faults', str(self.fifo), '--record', str(self.npz)],
                stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        line = self.process.stdout.readline()
        if 'Dynamixel bus on' not in line:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f'the bus did not start: {line!r}; stderr: '
                               f'{self.stderr.read_text()[-2000:]}')
        self._fault_fd = os.open(self.fifo, os.O_WRONLY)

    def fault(self, line: str) -> None:
        """A fault line (``drop 3 1``, ``hardware 5 32``...), applied at the next step."""
        os.write(self._fault_fd, (line + '\n').encode())

    def stop(self) -> dict[str, np.ndarray]:
        os.close(self._fault_fd)
        self.process.send_signal(signal.SIGINT)
        out, _ = self.process.communicate(timeout=60)
        self.log = out
        with np.load(self.npz) as record:
            return dict(record)


def new_driver(port: Path, **settings) -> BusDriver:
    model = RobotModel.from_urdf(default_urdf_path())
    driver = BusDriver(CONFIG, DriverSettings(port=str(port), **settings),
                       gravity=gravity_in_chain_order(model, JOINTS), arm_joints=ARM_JOINTS)
    driver.messages = []
    driver.log = driver.messages.append
    return driver


def loop(driver: BusDriver, seconds: float, on_reading: Callable[[Reading], None] | None = None,
         rate_hz: float = 200.0) -> list[float]:
    """Cycle ``driver`` for ``seconds`` at ``rate_hz``; the cycle start times [s]."""
    period, starts = 1.0 / rate_hz, []
    begin = time.monotonic()
    k = 0
    while True:
        now = time.monotonic()
        if now - begin >= seconds:
            return starts
        starts.append(now)
        reading = driver.cycle()
        if reading is not None and on_reading is not None:
            on_reading(reading)
        k += 1
        wait = begin + k * period - time.monotonic()
        if wait > 0:
            time.sleep(wait)


def move_to(driver: BusDriver, pose: np.ndarray, seconds: float = 2.0,
            settle: float = 1.0) -> None:
    """Position mode: a straight line to ``pose`` (7 arm joints) in ``seconds``, then settle."""
    start = driver.reading.position[:7].copy()
    begin = time.monotonic()

    def ramp(_: Reading) -> None:
        s = min(1.0, (time.monotonic() - begin) / seconds)
        driver.command_positions(start + s * (pose - start), ARM_JOINTS)

    loop(driver, seconds + settle, ramp)


def gravity_feed(driver: BusDriver) -> Callable[[Reading], None]:
    """A callback commanding the gravity torque of each reading's pose (current mode)."""
    gravity = driver.gravity_torque

    def feed(reading: Reading) -> None:
        driver.command_effort(gravity(reading.position)[:7], ARM_JOINTS)

    return feed
