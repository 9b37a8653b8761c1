"""Torque mode: plag_ros.bus.host.driver through ROBOTIS' dynamixel-sdk against the emulated
CRANE-X7 bus in its own process (a pty), judged on the emulator's record of every physics
step (2 ms), not on what the driver reads.

The tests of the driver's own logic run the bus in lockstep (one 5 ms period of physics per
sync read, the driver on that simulated clock: test/torque_rig.py), so how busy the machine
is does not enter their result. The two about the Bus Watchdog, which needs wall time to
pass without traffic, run in real time with a watchdog of 0.3 s: a stall of this machine
shorter than that cannot expire it before the moment the test chooses.
"""
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
    ELBOW,
    POSES,
    RATE_HZ,
    ROOT,
    TILT,
    bent_in_current_mode,
    bus_in_test,
    gravity_feed,
    lockstep_driver,
    loop,
    move_to,
    new_driver,
    patient_replies,
    run_scenario,
    scenario_controllers,
    window,
)

from plag_ros.bus.host.driver import DriverSettings, hardware_error_text
from plag_ros.core.dynamics.motors import ARM_JOINTS

sdk = pytest.importorskip('dynamixel_sdk')   # requirements/test-tools.txt installs it
REAL_TIME_WATCHDOG_S = 0.3
"""The Bus Watchdog of the real-time tests: above a stall of this machine, below the
test's own silence."""


@pytest.fixture(autouse=True)
def patient_sdk():
    """The SDK's wait for a reply, long enough for a loaded machine (torque_rig)."""
    yield from patient_replies()


@pytest.fixture
def bus(tmp_path):
    """The bus in real time (the watchdog tests)."""
    yield from bus_in_test(tmp_path, None)


@pytest.fixture
def lockstep_bus(tmp_path):
    """The bus in lockstep at 200 Hz: drive it with :func:`lockstep_driver`."""
    yield from bus_in_test(tmp_path, RATE_HZ)


def test_settings_are_checked():
    with pytest.raises(ValueError, match='watchdog_s'):
        DriverSettings(watchdog_s=0.03)
    with pytest.raises(ValueError, match='two cycles'):
        DriverSettings(watchdog_s=0.02, rate_hz=50.0)
    assert hardware_error_text(0x20 | 0x04) == 'overheating, overload'


@pytest.mark.long
def test_gravity_compensation_holds_three_poses_for_10_s(lockstep_bus):
    """Current mode with the gravity torque of each reading: no joint moves more than
    10 mrad in 10 s (of simulated time, in lockstep), from three poses."""
    driver = lockstep_driver(lockstep_bus)
    windows = []
    for name, pose in POSES.items():
        move_to(driver, np.array(pose))
        assert driver.request_mode('current')[0]
        begin = time.monotonic()
        loop(driver, 10.0, gravity_feed(driver))
        windows.append((name, begin, time.monotonic()))
        assert driver.modes[:7] == ['current'] * 7 and not driver.fault, driver.fault
        driver.request_mode('position')
        loop(driver, 0.1)
    driver.close()
    record = lockstep_bus.stop()
    for name, begin, end in windows:
        inside = window(record, begin, end, skip_s=0.05)
        q, t = record['q'][inside], record['t'][inside]
        drift = np.abs(q - q[0]).max(axis=0)
        print(f'{name}: largest drift {drift.max() * 1e3:.3f} mrad over {t[-1] - t[0]:.2f} s')
        assert t[-1] - t[0] > 9.5
        assert drift.max() < 0.010, (name, drift)


def test_the_scenarios_laws_are_the_shipped_files_with_a_gain_check_that_refuses():
    """The scenario's laws come from the shipped parameter files through the node's own
    settings; each is built under ``gain_check: refuse`` at the delay its file assumes
    (measured through DDS: a reading's command is written at the next cycle, at p99 the
    one after; 3.0 periods on the position path, 4.0 on the torque path for its worst
    windows), so building them is the gain check accepting their gains."""
    laws = scenario_controllers()
    for name, controller in laws.items():
        config = controller.config
        assert config.gain_check == 'refuse', name
        assert config.motion_source == 'measured', name
        assert config.command_interface == ('position' if name == 'position path'
                                            else 'effort'), name
        assert (config.acceleration_mask is None) == (name == 'plain'), name
    assert laws['compensated'].config.delay_periods == 4.0
    assert laws['position path'].config.delay_periods == 3.0
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
    (in real time on this 2-core machine the cut was 92.8-93.1 % in the runs of
    ``bench/bench_driver.py --rates --scenario 3`` that no torque-step fault ended)."""
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


def test_enable_and_disable_move_no_joint_more_than_2_mrad(lockstep_bus):
    """Position -> current (gravity torque of the pose) -> position at a bent pose: the
    physics' positions stay within 2 mrad from before the switch in to after the switch
    out, and the torque is off for less than one cycle: no physics step of the run sees
    the loaded joints without torque. (In lockstep a switch takes no simulated time; how
    long its writes take on the wall clock depends on the machine and is printed.)"""
    bus = lockstep_bus
    driver = lockstep_driver(bus)
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
    # Current Limit from the torque limits (the continuous torque, half the stall torque,
    # over the datasheet constant: 2.05 / (4.1 / 2.3) / 2.69 mA, 5.3 / (10.6 / 4.4) / 2.69 mA)
    assert [driver._read(i, 38, 2) for i in driver.ids] == driver.current_limit.tolist()
    assert driver.current_limit.tolist() == [427, 817] + [427] * 6
    off_s = driver.torque_off_s
    driver.close()
    record = bus.stop()
    inside = window(record, before, after)
    q = record['q'][inside]
    moved = np.abs(q - q[0]).max(axis=0)
    print(f'largest move {moved.max() * 1e3:.3f} mrad; torque off {off_s * 1e3:.2f} ms of '
          'wall time')
    assert moved.max() < 0.002, moved
    limp = np.all(record['effort'][inside][:, [TILT, ELBOW]] == 0.0, axis=1)
    assert not limp.any(), f'{limp.sum()} steps without torque on the tilt and the elbow'



def test_command_delay_is_the_source_readings_age_when_its_current_is_written(lockstep_bus):
    """The delay the gain check assumes, as the driver measures it: from the reading an
    effort command was computed from to its first write. On the lockstep clock (where a
    read and a write take no time) a command computed at once from each reading is
    written one period (5 ms) later; one computed from the reading two cycles back, three
    periods (15 ms)."""
    driver = lockstep_driver(lockstep_bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
    assert driver.command_delay() == {}          # position mode: no effort written
    assert driver.request_mode('current')[0]
    loop(driver, 0.5, gravity_feed(driver))
    delay = driver.command_delay()
    assert delay['count'] >= 95, delay
    assert delay['p50_ms'] == pytest.approx(5.0, abs=1e-6), delay
    assert delay['max_ms'] == pytest.approx(5.0, abs=1e-6), delay
    readings: list = []

    def late_feed(reading) -> None:
        readings.append(reading)
        source = readings[-3] if len(readings) >= 3 else reading
        driver.command_effort(driver.gravity_torque(source.position)[:7], ARM_JOINTS,
                              source.t)

    loop(driver, 0.5, late_feed)
    assert not driver.fault, driver.fault
    delay = driver.command_delay()
    assert delay['p99_ms'] == pytest.approx(15.0, abs=1e-6), delay
    assert delay['max_ms'] == pytest.approx(15.0, abs=1e-6), delay
    # four cycles without a newer command: the last (sent after the last cycle) is written
    # at the first and again at the three others, counted apart; its growing age is no
    # delay of a command that came
    assert driver.counts['repeated_commands'] == 0
    loop(driver, 0.02)
    assert not driver.fault, driver.fault
    assert driver.counts['repeated_commands'] == 3
    after = driver.command_delay()
    assert after['count'] == delay['count'] + 1 and after['max_ms'] == delay['max_ms'], after
    assert after['repeated_share'] == 0.0
    # a command every other cycle: each written again once, a missed command each; the
    # run of three before (a stall's) is not one
    cycle = [0]

    def every_other(reading) -> None:
        cycle[0] += 1
        if cycle[0] % 2:
            driver.command_effort(driver.gravity_torque(reading.position)[:7], ARM_JOINTS)

    loop(driver, 0.2, every_other)
    assert not driver.fault, driver.fault
    final = driver.command_delay()
    commands = final['count']                  # each command once; 19 written again
    assert final['repeated_share'] == pytest.approx(19 / (commands + 19), abs=1e-4), final
    driver.close()


def test_a_switch_reaches_the_servos_whole_however_late_its_thread_runs(bus, monkeypatch):
    """In real time, with the driver's thread held up 30 ms after each sync write it makes
    (an operating system that runs something else between two writes): the switches into
    current mode and back still reach the servos as one burst, and no physics step sees the
    tilt or the elbow without torque. Written one by one, the writes left them limp for the
    30 ms after Torque Enable 0 (a loaded machine's test run saw the elbow fall 3.8 mrad in
    such a window). The Bus Watchdog is the real-time tests' 0.3 s: a burst held back for
    its five writes' 150 ms must not expire it."""
    driver = new_driver(bus.link, watchdog_s=REAL_TIME_WATCHDOG_S)
    driver.open()
    move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
    written = driver._group_write

    def held_up(*args) -> None:
        written(*args)
        time.sleep(0.03)

    monkeypatch.setattr(driver, '_group_write', held_up)
    begin = time.monotonic()
    assert driver.request_mode('current')[0]
    loop(driver, 0.5, gravity_feed(driver))
    assert driver.modes[:7] == ['current'] * 7, driver.fault
    driver.request_mode('position')
    loop(driver, 0.3)
    end = time.monotonic()
    assert driver.modes == ['position'] * 8 and driver.counts['mode_switches'] == 2
    driver.close()
    record = bus.stop()
    inside = window(record, begin, end)
    limp = np.all(record['effort'][inside][:, [TILT, ELBOW]] == 0.0, axis=1)
    assert not limp.any(), f'{limp.sum()} steps without torque on the tilt and the elbow'


def test_sigkill_in_current_mode_stops_the_servos_within_the_watchdog(bus, tmp_path):
    """A driver killed in current mode: the Bus Watchdog (0.3 s here) stops every servo (no
    torque) within its period plus 20 ms of the last packet, by the emulator's record of
    simulated time."""
    script = tmp_path / 'driver.py'
    script.write_text(
        'import sys, time\n'
        'from torque_rig import new_driver, loop, gravity_feed, move_to, patient_sdk\n'
        'import numpy as np\n'
        'patient_sdk()\n'
        f'd = new_driver({str(bus.link)!r}, watchdog_s={REAL_TIME_WATCHDOG_S})\n'
        'd.open()\n'
        # the set-up runs in real time: a stall of the machine can fault it (the driver
        # then holds in position mode); it is set up again
        'for attempt in range(5):\n'
        f'    move_to(d, np.array({POSES["bent"]}), 1.0, 0.3)\n'
        '    d.request_mode("current")\n'
        '    loop(d, 0.5, gravity_feed(d))\n'
        '    if not d.fault and d.modes[:7] == ["current"] * 7:\n'
        '        break\n'
        '    print("set-up faulted:", d.clear_fault(), file=sys.stderr, flush=True)\n'
        'print("current", flush=True)\n'
        'loop(d, 60.0, gravity_feed(d))\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / 'test')]))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               text=True, env=env, cwd=ROOT)
    try:
        assert process.stdout.readline().strip() == 'current'
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    # The record is read once the bus stops, and its physics cannot be watched meanwhile
    # (any packet would feed the watchdog): five seconds of wall time give it the
    # watchdog's 0.3 s after the last packet even when a loaded machine lets the emulator
    # keep up with a tenth of real time (a late step catches up two steps at most).
    time.sleep(5.0)
    record = bus.stop()
    t, effort = record['t'], record['effort'][:, :7]
    served = record['served']
    last_packet = t[served[:, 0].max()]
    stop = np.flatnonzero((t > last_packet) & np.all(effort == 0.0, axis=1))
    assert stop.size, 'the servos never stopped'
    delay = t[stop[0]] - last_packet
    print(f'servos stopped {delay * 1e3:.1f} ms after the last packet '
          f'(watchdog {REAL_TIME_WATCHDOG_S * 1e3:.0f} ms)')
    assert delay <= REAL_TIME_WATCHDOG_S + 0.02
    # before the kill the servos made torque (current mode, not a limp arm by accident)
    assert np.abs(effort[t < last_packet - 0.05]).max() > 0.3


@pytest.mark.parametrize('fault, failed', [('drop', 1), ('corrupt', 1), ('drop', 3),
                                           ('corrupt', 3)])
def test_failed_reads_are_counted_and_never_written_from(lockstep_bus, fault, failed):
    """Replies of the tilt's servo dropped or corrupted: each failed read is counted, no
    write follows it; three in a row latch a fault and the arm holds in position mode."""
    bus = lockstep_bus
    driver = lockstep_driver(bus, failed_reads=3)
    feed = bent_in_current_mode(driver)
    writes, failures, cycles = (driver.counts[k] for k in ('writes', 'failed_reads',
                                                             'cycles'))
    bus.fault(f'{fault} 3 {failed}')
    good: list = []
    loop(driver, 0.3, lambda reading: (good.append(reading), feed(reading)))
    assert driver.counts['cycles'] - cycles == 60
    assert driver.counts['failed_reads'] - failures == failed
    assert driver.counts['writes'] - writes == len(good) == 60 - failed
    if failed >= driver.settings.failed_reads:
        assert driver.fault.startswith('3 consecutive failed reads')
        assert driver.modes == ['position'] * 8
        assert not driver.request_mode('current')[0]
    else:
        assert not driver.fault and driver.modes[:7] == ['current'] * 7
    driver.close()
    bus.stop()


def test_a_stalled_host_is_caught_by_the_watchdog_and_held(bus):
    """The driver's loop stalls for 1 s in current mode (in real time: the Bus Watchdog,
    here 0.3 s, needs wall time without traffic): the servos' Bus Watchdog stops them (no
    torque); the next cycle sees it, latches the fault, clears the watchdog and catches the
    arm in position mode."""
    driver = new_driver(bus.link, watchdog_s=REAL_TIME_WATCHDOG_S)
    driver.open()
    for attempt in range(5):
        # the set-up runs in real time too: a stall of this machine longer than the
        # watchdog, or replies too late three times in a row, fault it before the stall
        # under test; it is then set up again
        try:
            bent_in_current_mode(driver)
            break
        except AssertionError:
            print(f'set-up {attempt + 1} faulted: {driver.clear_fault()!r}; again')
            loop(driver, 0.2)
    else:
        pytest.fail('the set-up faulted five times')
    time.sleep(1.0)
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
def test_a_bad_effort_command_ends_in_a_position_hold(lockstep_bus, bad):
    """NaN, an effort beyond the torque limit, or no command for stale_s (of simulated
    time): the fault is latched, the arm holds its pose in position mode (2 mrad), nothing
    is commanded from the bad value."""
    bus = lockstep_bus
    driver = lockstep_driver(bus)
    bent_in_current_mode(driver)
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
