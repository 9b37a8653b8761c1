"""The emulated CRANE-X7 bus in its own process and the torque-mode driver against it
(test/test_bus_driver.py, bench/bench_driver.py).

:class:`EmulatedBus` starts ``python -m plag_ros.apps.dynamixel_bus`` with a link, a fault
FIFO and a record of every physics step (the ground truth: positions, velocities and the
torque each servo made); :func:`loop` runs a :class:`~plag_ros.bus.host.driver.BusDriver` at a
rate with a callback per good reading, as ``plag_driver``'s bus loop does.

A bus started with ``lockstep_hz`` steps its physics one period per sync read
(:class:`plag_ros.bus.emulator.server.PtyBus`); a driver made with
``clock=LockstepClock(...)`` then runs on simulated time, and :func:`loop` cycles it back to
back, advancing the clock one period per cycle: the run no longer depends on how busy the
machine is.

One wall-clock deadline is left in either mode: dynamixel-sdk's wait for a reply.
:func:`patient_sdk` makes it long enough for a loaded machine.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.host.driver import BusDriver, DriverSettings, Reading, gravity_in_chain_order
from plag_ros.core.control.impedance import PartialImpedanceController
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.motors import ARM_JOINTS

ROOT = Path(__file__).resolve().parents[1]
CONFIG = BusConfig.load()
JOINTS = [s.joint for s in CONFIG.servos]
PATIENT_LATENCY_MS = 1000
"""dynamixel-sdk waits 2 x ``LATENCY_TIMER`` + 2 ms for a reply (16 ms: a USB adapter's
latency timer; 34 ms in all), then counts it as lost. The emulator is a process of its own,
which a loaded 2-core machine deschedules for longer at times: a reply that comes late then
reads as a failed one, and the next reads may take its stale bytes. :func:`patient_sdk`
makes it 1 s (a dropped reply then costs 2 s of wall time, and in lockstep no simulated
time)."""


def patient_sdk() -> int:
    """Give dynamixel-sdk :data:`PATIENT_LATENCY_MS` for each reply in this process; the
    value it had (a test puts it back: ``monkeypatch.setattr`` does)."""
    from dynamixel_sdk import port_handler

    old, port_handler.LATENCY_TIMER = port_handler.LATENCY_TIMER, PATIENT_LATENCY_MS
    return old


def patient_replies() -> Iterator[None]:
    """The body of an autouse fixture: :func:`patient_sdk` for one test, put back after it.
    Kept apart from the test's own ``monkeypatch``: a test that undoes its injected faults
    with ``monkeypatch.undo()`` keeps the patience for the reads after them (sharing it, the
    undo put the SDK's 34 ms back, and a reply a loaded machine delayed failed the test)."""
    from dynamixel_sdk import port_handler

    old = patient_sdk()
    try:
        yield
    finally:
        port_handler.LATENCY_TIMER = old


class LockstepClock:
    """Simulated time [s] for a driver on a lockstep bus: :func:`loop` advances it."""

    def __init__(self, rate_hz: float = 200.0) -> None:
        self.period, self.t = 1.0 / rate_hz, 0.0

    def __call__(self) -> float:
        return self.t


class EmulatedBus:
    """The bus process; :meth:`stop` gives its npz.

    Args:
        tmp: a folder for the link, the fault FIFO, the record and stderr.
        lockstep_hz: None (the physics follows the wall clock) or the rate whose period each
            sync read advances the physics by.
        plant: how the emulated arm differs from the model (``--plant``), '' for not.
    """

    def __init__(self, tmp: Path, lockstep_hz: float | None = None, plant: str = '') -> None:
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
                 '--faults', str(self.fifo), '--record', str(self.npz)]
                + ([] if lockstep_hz is None else ['--lockstep', str(lockstep_hz)])
                + (['--plant', plant] if plant else []),
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


def bus_in_test(tmp: Path, lockstep_hz: float | None, plant: str = ''
                ) -> Iterator[EmulatedBus]:
    """A test fixture's body: the bus, killed after the test if it still runs."""
    emulated = EmulatedBus(tmp, lockstep_hz, plant)
    yield emulated
    if emulated.process.poll() is None:
        emulated.process.kill()
        emulated.process.wait()


def new_driver(port: Path, clock: Callable[[], float] = time.monotonic,
               **settings) -> BusDriver:
    model = RobotModel.from_urdf(default_urdf_path())
    driver = BusDriver(CONFIG, DriverSettings(port=str(port), **settings),
                       gravity=gravity_in_chain_order(model, JOINTS), arm_joints=ARM_JOINTS,
                       clock=clock)
    driver.messages = []
    driver.log = driver.messages.append
    return driver


def loop(driver: BusDriver, seconds: float, on_reading: Callable[[Reading], None] | None = None,
         rate_hz: float = 200.0) -> list[float]:
    """Cycle ``driver`` for ``seconds`` at ``rate_hz``; the cycle start times [s]. On a
    :class:`LockstepClock` the cycles run back to back, each one period later in simulated
    time (``rate_hz`` is then the clock's)."""
    clock = driver.clock
    if isinstance(clock, LockstepClock):
        starts = []
        for _ in range(round(seconds / clock.period)):
            clock.t += clock.period        # the bus advances one period at the read
            starts.append(clock.t)
            reading = driver.cycle()
            if reading is not None and on_reading is not None:
                on_reading(reading)
        return starts
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
    begin = driver.clock()

    def ramp(_: Reading) -> None:
        s = min(1.0, (driver.clock() - begin) / seconds)
        driver.command_positions(start + s * (pose - start), ARM_JOINTS)

    loop(driver, seconds + settle, ramp)


def gravity_feed(driver: BusDriver) -> Callable[[Reading], None]:
    """A callback commanding the gravity torque of each reading's pose (current mode)."""
    gravity = driver.gravity_torque

    def feed(reading: Reading) -> None:
        driver.command_effort(gravity(reading.position)[:7], ARM_JOINTS)

    return feed


def lockstep_driver(bus: EmulatedBus, **settings) -> BusDriver:
    """A driver on the simulated clock of ``bus`` (in lockstep), opened. Unless a test says
    otherwise, a fault takes 100 failed reads in a row, not 3: a read fails only when a
    reply misses the SDK's wall-clock deadline, which the lockstep cannot stretch."""
    settings.setdefault('failed_reads', 100)
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), **settings)
    driver.open()
    return driver


def window(record: dict, begin: float, end: float, skip_s: float = 0.0) -> np.ndarray:
    """(steps,) True for the physics steps computed between the wall times ``begin`` and
    ``end`` (``time.monotonic()``, the same clock in every process: in lockstep a step is
    computed at the sync read that asks for it), less the first ``skip_s`` of their
    simulated time."""
    inside = (record['wall'] >= begin) & (record['wall'] <= end)
    t = record['t']
    return inside & (t >= t[inside][0] + skip_s)


def bent_in_current_mode(driver: BusDriver) -> Callable[[Reading], None]:
    """``driver`` holding the bent pose in current mode for 0.3 s with the gravity torque of
    each reading; the gravity feed."""
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    assert driver.request_mode('current')[0]
    feed = gravity_feed(driver)
    loop(driver, 0.3, feed)
    assert not driver.fault, driver.fault
    return feed


# ---------------------------------------------------------------- the elbow-swing scenario
ELBOW, TILT = 3, 1
"""Indices of the elbow (the swinging joint) and the tilt (the joint it loads) in the chain."""
BENT = np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0])
"""The pose the elbow swings about [rad], the 7 arm joints."""
POSES = {'bent': BENT.tolist(),
         'reaching': [0.4, 1.0, -0.3, -0.6, 0.3, -0.4, 0.2],
         'folded': [-0.5, 0.3, 0.5, -2.0, -0.4, 0.8, -0.3]}
"""Three poses of the arm joints [rad] the driver tests hold."""
RATE_HZ = 200.0
"""The driver tests' cycle rate [Hz]."""
SCENARIO_DRIVER = {'torque_limit': [4.1, 10.6] + [4.1] * 6, 'velocity_limit': [6.0]}
"""The scenario's changes to the driver's defaults. The swing takes the elbow to the edge
of its hardware (with the shipped gains it swings 1.2-1.3 rad peak to peak for the 1.0 of
its reference, near the elbow's resonance): the law asks for more than the continuous
torque, which the controller's clip holds it to (its effort saturated), and up to
5.2 rad/s, past the XM430-W350's no-load speed, where the emulated supply no longer drives
it but gravity and the tilt still swing it on. The torque limit stays the stall torque, as
before the controller clipped at the continuous one. The rest of the envelope is the
default (position limits, torque step, temperature)."""


@dataclass(frozen=True)
class ScenarioRun:
    """One law's run: the tilt's RMS deviation ``tilt_rms`` (q - q_d from 1 s on) [rad], the
    elbow's swing (peak to peak) [rad], the controller's states and the driver's fault."""

    tilt_rms: float
    elbow_swing: float
    states: frozenset[str]
    fault: str


def scenario_controllers(motion_source: str | None = None
                         ) -> dict[str, PartialImpedanceController]:
    """The three laws of the scenario, each configured as the impedance node configures itself
    from a shipped parameter file (``ImpedanceSettings.from_values``, then
    ``controller_config``), with the scenario's changes: enabled at once, no ramp, the elbow
    swinging 0.5 rad at 1 Hz about the pose at enable.

    * ``plain`` and ``compensated``: config/torque_mode.yaml (effort path, current-mode gains,
      ``gain_check: refuse`` at ``delay_periods: 3.0``: a controller is only built if the gain
      check accepts its gains), with no compensation or with its elbow -> tilt paths.
    * ``position path``: config/impedance.yaml, its elbow -> tilt paths compensated.

    ``motion_source``: None keeps the files' (the measured motion), or ``'desired'``.
    """
    from parameter_files import node_parameters

    from plag_ros.core.control.settings import ImpedanceSettings
    from plag_ros.core.dynamics.engine import PartialLagrangian

    model = RobotModel.from_urdf(default_urdf_path())
    engine = PartialLagrangian(model)
    n = len(model.actuated_names)
    amplitude = [0.0] * n
    amplitude[ELBOW] = 0.5
    # enabled at once: in the law's own config (the node's torque-mode settings refuse
    # start_enabled, which would take the arm without an operator)
    scenario = {'ramp_s': 0.0, 'reference.mode': 'sine',
                'reference.amplitude': amplitude, 'reference.frequency_hz': [1.0]}
    if motion_source is not None:
        scenario['motion_source'] = motion_source
    plain = {'compensate.acceleration': ['none'], 'compensate.velocity': ['none']}
    laws = {'plain': ('torque_mode.yaml', plain), 'compensated': ('torque_mode.yaml', {}),
            'position path': ('impedance.yaml', {})}
    controllers = {}
    for name, (file, change) in laws.items():
        settings = ImpedanceSettings.from_values(
            {**node_parameters(file, 'plag_impedance'), **scenario, **change})
        controllers[name] = PartialImpedanceController(
            engine, settings.controller_config(model).replace(start_enabled=True),
            settings.reference_trajectory(n))
    warm = controllers['plain']
    bent = np.append(BENT, 0.0)
    for k in range(8):      # the kernels compile here: the Bus Watchdog allows no stall
        warm.update(k * 5_000_000, bent, np.zeros(n))
    warm.reset()
    return controllers


def tilt_deviation(driver: BusDriver, controller: PartialImpedanceController,
                   seconds: float = 6.0) -> ScenarioRun:
    """Run ``controller`` on ``driver`` for ``seconds``, each reading's command written at the
    next cycle as in plag_driver, then back to position mode."""
    errors, elbow, states = [], [], set()
    begin = driver.clock()
    effort_path = controller.config.command_interface == 'effort'

    def step(reading: Reading) -> None:
        now = driver.clock()
        command = controller.update(round(now * 1e9), reading.position, reading.velocity)
        if command is None:          # the estimator's first samples
            if effort_path:
                driver.command_effort(driver.gravity_torque(reading.position)[:7],
                                      ARM_JOINTS)
            return
        states.add(command.state)
        if effort_path:
            driver.command_effort(command.effort[:7], ARM_JOINTS)
        else:
            driver.command_positions(command.position[:7], ARM_JOINTS)
        if now - begin >= 1.0:
            errors.append(reading.position[TILT] - command.q_desired[TILT])
            elbow.append(reading.position[ELBOW])

    if effort_path:
        driver.request_mode('current')
    loop(driver, seconds, step)
    driver.request_mode('position')
    loop(driver, 0.2)
    return ScenarioRun(float(np.sqrt(np.mean(np.square(errors)))), float(np.ptp(elbow)),
                       frozenset(states), driver.fault)


def run_scenario(tmp: Path, lockstep_hz: float | None = None,
                 motion_source: str | None = None) -> dict[str, ScenarioRun]:
    """The three laws of :func:`scenario_controllers` one after the other on one fresh bus,
    each from the bent pose; in real time, or in lockstep at ``lockstep_hz``."""
    controllers = scenario_controllers(motion_source)
    results = {}
    bus = EmulatedBus(tmp, lockstep_hz)
    try:
        clock = time.monotonic if lockstep_hz is None else LockstepClock(lockstep_hz)
        driver = new_driver(bus.link, clock, **SCENARIO_DRIVER)
        driver.open()
        for name, controller in controllers.items():
            move_to(driver, BENT, 1.5, 0.5)
            results[name] = tilt_deviation(driver, controller)
            driver.clear_fault()
        driver.close()
    finally:
        bus.stop()
    return results
