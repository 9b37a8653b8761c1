"""Torque mode: plag_ros.bus.driver through ROBOTIS' dynamixel-sdk against the emulated
CRANE-X7 bus in its own process (a pty), judged on the emulator's record of every physics
step (2 ms), not on what the driver reads."""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from torque_rig import (
    BENT,
    ELBOW,
    ROOT,
    EmulatedBus,
    gravity_feed,
    loop,
    move_to,
    new_driver,
    run_scenario,
    scenario_controllers,
)

from plag_ros.bus.driver import DriverSettings, hardware_error_text
from plag_ros.core.dynamics.motors import ARM_JOINTS

pytest.importorskip('dynamixel_sdk')   # requirements/test-tools.txt installs it
POSES = {'bent': BENT.tolist(),
         'reaching': [0.4, 1.0, -0.3, -0.6, 0.3, -0.4, 0.2],
         'folded': [-0.5, 0.3, 0.5, -2.0, -0.4, 0.8, -0.3]}


@pytest.fixture
def bus(tmp_path):
    emulated = EmulatedBus(tmp_path)
    yield emulated
    if emulated.process.poll() is None:
        emulated.process.kill()
        emulated.process.wait()


def wall_times(record: dict, closed_at: float | None = None) -> np.ndarray:
    """Each recorded step's ``time.monotonic()`` (the machine's clock, the same in every
    process)."""
    return record['wall']


def bent_in_current_mode(bus):
    """A driver on ``bus`` holding the bent pose in current mode for 0.3 s with the gravity
    torque of each reading; (driver, that gravity feed)."""
    driver = new_driver(bus.link)
    driver.open()
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    assert driver.request_mode('current')[0]
    feed = gravity_feed(driver)
    loop(driver, 0.3, feed)
    return driver, feed


def test_settings_are_checked():
    with pytest.raises(ValueError, match='watchdog_s'):
        DriverSettings(watchdog_s=0.03)
    with pytest.raises(ValueError, match='two cycles'):
        DriverSettings(watchdog_s=0.02, rate_hz=50.0)
    assert hardware_error_text(0x20 | 0x04) == 'overheating, overload'


@pytest.mark.long
def test_gravity_compensation_holds_three_poses_for_10_s(bus):
    """Current mode with the gravity torque of each reading: no joint moves more than
    10 mrad in 10 s, from three poses."""
    driver = new_driver(bus.link)
    driver.open()
    windows = []
    for name, pose in POSES.items():
        move_to(driver, np.array(pose))
        assert driver.request_mode('current')[0]
        begin = time.monotonic()
        loop(driver, 10.0, gravity_feed(driver))
        windows.append((name, begin + 0.05, time.monotonic()))
        assert driver.modes[:7] == ['current'] * 7 and not driver.fault, driver.fault
        driver.request_mode('position')
        loop(driver, 0.1)
    driver.close()
    stopped = time.monotonic()
    record = bus.stop()
    t = wall_times(record, stopped)
    for name, start, end in windows:
        inside = (t >= start) & (t <= end)
        q = record['q'][inside]
        drift = np.abs(q - q[0]).max(axis=0)
        print(f'{name}: largest drift {drift.max() * 1e3:.3f} mrad over '
              f'{t[inside][-1] - t[inside][0]:.2f} s')
        assert t[inside][-1] - t[inside][0] > 9.5
        assert drift.max() < 0.010, (name, drift)


def test_the_scenarios_laws_are_the_shipped_files_with_a_gain_check_that_refuses():
    """The scenario's laws come from the shipped parameter files through the node's own
    settings; each is built under ``gain_check: refuse`` at the delay the driver has (1.5
    periods for the effort path: a reading's command is written at the next cycle and acts
    until the one after), so building them is the gain check accepting their gains."""
    laws = scenario_controllers()
    for name, controller in laws.items():
        config = controller.config
        assert config.gain_check == 'refuse', name
        assert config.motion_source == 'measured', name
        assert config.command_interface == ('position' if name == 'position path'
                                            else 'effort'), name
        assert (config.acceleration_mask is None) == (name == 'plain'), name
    assert laws['compensated'].config.delay_periods == 1.5
    np.testing.assert_array_equal(laws['plain'].config.stiffness,
                                  laws['compensated'].config.stiffness)


@pytest.mark.long
def test_partial_impedance_scenario_cuts_the_tilt_deviation_by_80_percent(tmp_path):
    """The elbow swings 0.5 rad at 1 Hz about the bent pose; on the effort path (current
    mode) compensating elbow -> tilt cuts the tilt's deviation (RMS of q - q_d from 1 s on)
    by at least 80 % against the same gains uncompensated; the position path runs the same
    scenario in the same bus for comparison.

    The bus runs in lockstep (the physics advances one 5 ms period per sync read, the
    driver runs on that simulated clock): the SDK, the pty, the servos' firmware and the
    physics are the same as in real time, the machine's scheduling is not in the result
    (in real time on this 2-core machine the cut was 88.5-89.4 % in two runs of
    ``bench/bench_driver.py --rates --scenario 2``)."""
    runs = run_scenario(tmp_path, lockstep_hz=200.0)
    for name, run in runs.items():
        print(f'{name}: tilt rms {run.tilt_rms * 1e3:.2f} mrad, elbow {run.elbow_swing:.2f} '
              'rad peak to peak')
        assert run.fault == '' and run.states == {'enabled'}, (name, run)
        assert run.elbow_swing > 0.5, name              # the elbow really swings
    cut = 1.0 - runs['compensated'].tilt_rms / runs['plain'].tilt_rms
    print(f'current mode cut {cut:.1%}')
    assert cut >= 0.80
    assert runs['position path'].tilt_rms < runs['plain'].tilt_rms


def test_enable_and_disable_move_no_joint_more_than_2_mrad(bus):
    """Position -> current (gravity torque of the pose) -> position at a bent pose: the
    physics' positions stay within 2 mrad from before the switch in to after the switch
    out, and the torque is off for less than one cycle."""
    driver = new_driver(bus.link)
    driver.open()
    move_to(driver, np.array(POSES['bent']))
    before = time.monotonic()
    loop(driver, 0.2)
    assert driver.request_mode('current')[0]
    loop(driver, 1.0, gravity_feed(driver))
    assert driver.modes[:7] == ['current'] * 7
    driver.request_mode('position')
    loop(driver, 0.5)
    after = time.monotonic()
    assert driver.modes == ['position'] * 8 and not driver.fault
    assert driver.counts['mode_switches'] == 2
    # Current Limit from the torque limits (stall torque over the datasheet constant)
    assert [driver._read(i, 38, 2) for i in driver.ids] == driver.current_limit.tolist()
    assert driver.current_limit.tolist() == [855, 1635] + [855] * 6
    window = driver.torque_off_s
    driver.close()
    stopped = time.monotonic()
    record = bus.stop()
    t = wall_times(record, stopped)
    inside = (t >= before) & (t <= after)
    q = record['q'][inside]
    moved = np.abs(q - q[0]).max(axis=0)
    print(f'largest move {moved.max() * 1e3:.3f} mrad; torque off {window * 1e3:.2f} ms')
    assert moved.max() < 0.002, moved
    assert window < 1.0 / driver.settings.rate_hz


def test_sigkill_in_current_mode_stops_the_servos_within_the_watchdog(bus, tmp_path):
    """A driver killed in current mode: the Bus Watchdog (0.1 s) stops every servo (no
    torque) within its period plus 20 ms of the last packet, by the emulator's record."""
    script = tmp_path / 'driver.py'
    script.write_text(
        'import sys, time\n'
        'from torque_rig import new_driver, loop, gravity_feed, move_to\n'
        'import numpy as np\n'
        f'd = new_driver({str(bus.link)!r})\n'
        'd.open()\n'
        f'move_to(d, np.array({POSES["bent"]}), 1.0, 0.3)\n'
        'd.request_mode("current")\n'
        'loop(d, 0.5, gravity_feed(d))\n'
        'print("current", flush=True)\n'
        'loop(d, 60.0, gravity_feed(d))\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / 'test')]))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               text=True, env=env, cwd=ROOT)
    try:
        assert process.stdout.readline().strip() == 'current'
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        process.kill()
    time.sleep(0.5)
    record = bus.stop()
    t, effort = record['t'], record['effort'][:, :7]
    served = record['served']
    last_packet = t[served[:, 0].max()]
    stop = np.flatnonzero((t > last_packet) & np.all(effort == 0.0, axis=1))
    assert stop.size, 'the servos never stopped'
    delay = t[stop[0]] - last_packet
    print(f'servos stopped {delay * 1e3:.1f} ms after the last packet (watchdog 100 ms)')
    assert delay <= 0.1 + 0.02
    # before the kill the servos made torque (current mode, not a limp arm by accident)
    assert np.abs(effort[t < last_packet - 0.05]).max() > 0.3


@pytest.mark.parametrize('fault, failed', [('drop', 1), ('corrupt', 1), ('drop', 3),
                                           ('corrupt', 3)])
def test_failed_reads_are_counted_and_never_written_from(bus, fault, failed):
    """Replies of the tilt's servo dropped or corrupted: each failed read is counted, no
    write follows it; three in a row latch a fault and the arm holds in position mode."""
    driver, feed = bent_in_current_mode(bus)
    writes, failures = driver.counts['writes'], driver.counts['failed_reads']
    bus.fault(f'{fault} 3 {failed}')
    results = []
    for _ in range(60):
        reading = driver.cycle()
        results.append(reading is not None)
        if reading is not None:
            feed(reading)
        time.sleep(0.005)
    assert driver.counts['failed_reads'] - failures == failed
    assert driver.counts['writes'] - writes == results.count(True)
    if failed >= driver.settings.failed_reads:
        assert driver.fault.startswith('3 consecutive failed reads')
        assert driver.modes == ['position'] * 8
        assert not driver.request_mode('current')[0]
    else:
        assert not driver.fault and driver.modes[:7] == ['current'] * 7
    driver.close()
    bus.stop()


def test_an_overload_alert_latches_a_fault_and_holds(bus):
    driver, feed = bent_in_current_mode(bus)
    bus.fault('hardware 5 32')
    loop(driver, 0.2, feed)
    assert driver.fault == 'hardware error: ID 5: overload'
    assert driver.modes == ['position'] * 8
    assert driver.counts['faults'] == 1
    assert not driver.request_mode('current')[0]        # refused while latched
    assert driver.clear_fault() == 'hardware error: ID 5: overload'
    loop(driver, 0.05)       # the servo still reports it: latched again
    assert driver.fault.startswith('hardware error')
    driver.close()
    bus.stop()


def test_a_stalled_host_is_caught_by_the_watchdog_and_held(bus):
    """The driver's loop stalls for 0.3 s in current mode: the servos' Bus Watchdog stops
    them (no torque); the next cycle sees it, latches the fault, clears the watchdog and
    catches the arm in position mode."""
    driver, feed = bent_in_current_mode(bus)
    time.sleep(0.3)
    driver.cycle()
    assert driver.fault.startswith('Bus Watchdog expired on IDs [2, 3, 4, 5, 6, 7, 8, 9]')
    assert driver.modes == ['position'] * 8
    loop(driver, 1.0)
    held = driver.reading.position.copy()
    loop(driver, 0.5)
    assert np.abs(driver.reading.position - held).max() <= 2 * math.pi / 4096
    assert driver.counts['failed_writes'] == 0
    driver.close()
    bus.stop()


@pytest.mark.parametrize('bad', ['nan', 'beyond_limit', 'stale'])
def test_a_bad_effort_command_ends_in_a_position_hold(bus, bad):
    """NaN, an effort beyond the torque limit, or no command for stale_s: the fault is
    latched, the arm holds its pose in position mode (2 mrad), nothing is commanded from
    the bad value."""
    driver, feed = bent_in_current_mode(bus)
    before = driver.reading.position.copy()
    effort = driver.gravity_torque(driver.reading.position)[:7]
    if bad == 'nan':
        effort[ELBOW] = math.nan
        driver.command_effort(effort, ARM_JOINTS)
    elif bad == 'beyond_limit':
        effort[ELBOW] = 4.5
        driver.command_effort(effort, ARM_JOINTS)
    loop(driver, 0.5)   # no more commands
    expected = {'nan': 'effort command out of range or not finite',
                'beyond_limit': 'effort command out of range or not finite',
                'stale': 'stale effort command'}[bad]
    assert driver.fault.startswith(expected), driver.fault
    assert driver.modes == ['position'] * 8
    assert np.abs(driver.reading.position - before).max() <= 2 * 2 * math.pi / 4096
    driver.close()
    bus.stop()
