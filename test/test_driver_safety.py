"""Torque mode's failures on the emulated CRANE-X7 bus (plag_ros.bus.host.driver through
dynamixel-sdk, the bus in its own process, in lockstep: test/torque_rig.py): what the
servos do when a write of a mode switch fails or is lost, when cycle writes fail, when a
servo's torque goes off, when the arm leaves the envelope of current mode, and when the
driver closes on servos another driver left soft. Judged on the emulator's record of every
physics step (the ground truth), and on the servos' own registers read back."""
from __future__ import annotations

import itertools
import os
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from torque_rig import (
    ELBOW,
    PATIENT_LATENCY_MS,
    POSES,
    RATE_HZ,
    TILT,
    LockstepClock,
    bent_in_current_mode,
    bus_in_test,
    gravity_feed,
    lockstep_driver,
    loop,
    move_to,
    new_driver,
    patient_replies,
    window,
)

import plag_ros.bus.host.driver as driver_module
from plag_ros.bus.host.driver import BusError
from plag_ros.core.dynamics.motors import ARM_JOINTS

sdk = pytest.importorskip('dynamixel_sdk')   # requirements/test-tools.txt installs it
WRIST = 6
TILT_ID = 3
HELD_RAD = 0.010
"""How far a held arm may move [rad] (issue: "held within 10 mrad")."""
SWITCH_WRITES = {'current': ('torque off', 'mode', 'first goal', 'torque on'),
                 'position': ('torque off', 'mode', 'first goal', 'gains', 'torque on')}
"""The sync writes of a switch to each mode, in the order the driver sends them."""


@pytest.fixture(autouse=True)
def patient_sdk():
    """The SDK's wait for a reply, long enough for a loaded machine (torque_rig)."""
    yield from patient_replies()


def test_a_test_that_undoes_its_faults_keeps_the_sdk_patient(monkeypatch):
    """Twelve tests here inject faults with ``monkeypatch`` and undo them before reading the
    arm's state back: the undo must leave the SDK's patience in place (it once put the
    34 ms deadline back, and a reply the loaded CI machine delayed failed a bare read)."""
    monkeypatch.setattr(sdk.port_handler, 'LATENCY_TIMER', 1)
    monkeypatch.undo()
    assert sdk.port_handler.LATENCY_TIMER == PATIENT_LATENCY_MS


@pytest.fixture
def bus(tmp_path):
    """The bus in lockstep at 200 Hz."""
    yield from bus_in_test(tmp_path, RATE_HZ)


@pytest.fixture
def realtime_bus(tmp_path):
    """The bus in real time (its Bus Watchdogs count the wall clock)."""
    yield from bus_in_test(tmp_path, None)


def torque_enabled(driver) -> list[int]:
    """Torque Enable (64) of every servo, read back one by one."""
    return [driver._read(i, 64, 1) for i in driver.ids]


def raises_at_call(monkeypatch, method: str, at: int, error: BaseException) -> None:
    """ROBOTIS' ``PortHandler.<method>`` raises ``error`` at its call number ``at`` from
    now (0: the next), once; every other call goes through."""
    real, calls = getattr(sdk.PortHandler, method), itertools.count()

    def raising_once(port, *args):
        if next(calls) == at:
            raise error
        return real(port, *args)

    monkeypatch.setattr(sdk.PortHandler, method, raising_once)


def largest_move(record: dict, begin: float, end: float) -> float:
    """[rad] the largest distance of any joint from where it was at ``begin``, over the
    physics steps between the wall times ``begin`` and ``end``."""
    q = record['q'][window(record, begin, end)]
    return float(np.abs(q - q[0]).max())


def bare_reads(bus, seconds: float, *items: tuple[int, int]
               ) -> tuple[list[list[int]], float, float]:
    """``seconds`` of physics with no driver on the lockstep ``bus``, driven by a bare
    sync read of the first of ``items`` (address, size) per period; then each item read
    once: their values (servos 2-9), and the wall times the physics began and ended."""
    port, packets = sdk.PortHandler(str(bus.link)), sdk.PacketHandler(2.0)
    assert port.setBaudRate(3_000_000) and port.openPort()
    try:
        readers = []
        for address, size in items:
            readers.append(sdk.GroupSyncRead(port, packets, address, size))
            for servo_id in range(2, 10):
                readers[-1].addParam(servo_id)
        begin = time.monotonic()
        for _ in range(round(seconds * RATE_HZ)):
            assert readers[0].txRxPacket() == sdk.COMM_SUCCESS
        end = time.monotonic()
        for reader in readers:
            assert reader.txRxPacket() == sdk.COMM_SUCCESS
        return ([[reader.getData(i, address, size) for i in range(2, 10)]
                 for reader, (address, size) in zip(readers, items)], begin, end)
    finally:
        port.closePort()


def break_the_kth_sync_write(driver, monkeypatch, k: int) -> None:
    """The ``k``-th sync write from now raises (nothing sent), as a port failing once."""
    real, calls = driver._group_write, itertools.count(1)

    def write(address: int, size: int, values: dict[int, int]) -> None:
        if next(calls) == k:
            raise BusError(f'sync write at {address}: injected port failure')
        real(address, size, values)

    monkeypatch.setattr(driver, '_group_write', write)


def bent_before_a_switch_to(bus, mode: str):
    """A lockstep driver on ``bus`` at the bent pose, in the other mode than ``mode``; and
    the feed of its cycles after the switch (the gravity torque for current mode, None for
    position mode)."""
    driver = lockstep_driver(bus)
    if mode == 'current':
        move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
        return driver, gravity_feed(driver)
    bent_in_current_mode(driver)
    return driver, None


@pytest.mark.parametrize('kind', ['port', 'lost'])
@pytest.mark.parametrize('mode, k', [(m, k) for m, writes in SWITCH_WRITES.items()
                                     for k in range(1, len(writes) + 1)],
                         ids=[f'{m}-{w.replace(" ", "_")}' for m, writes in SWITCH_WRITES.items()
                              for w in writes])
def test_a_switch_that_fails_at_any_write_leaves_every_servo_held(bus, monkeypatch, mode, k,
                                                                  kind):
    """A switch of the bent arm to ``mode`` whose ``k``-th write fails: raised by the port
    (nothing sent), or lost on the wire to the tilt's servo (a sync write has no answer:
    the driver finds out by reading back). Every servo ends with its torque on, the arm
    held within 10 mrad of the pose before the switch; a failure the driver can see is a
    latched fault with every joint in position mode."""
    driver, feed = bent_before_a_switch_to(bus, mode)
    begin = time.monotonic()
    if kind == 'port':
        break_the_kth_sync_write(driver, monkeypatch, k)
    else:
        bus.fault(f'lose {TILT_ID} {k}')
    assert driver.request_mode(mode)[0]
    loop(driver, 1.0, feed)
    end = time.monotonic()
    assert torque_enabled(driver) == [1] * 8
    what = SWITCH_WRITES[mode][k - 1]
    # A lost first goal or gain is written again at once (the cycle's own write, then the
    # mode's reset gain): nothing to see, nothing wrong.
    unseen = kind == 'lost' and what in ('first goal', 'gains')
    if unseen:
        assert not driver.fault, driver.fault
        assert driver.modes[:7] == [mode] * 7
    else:
        assert driver.fault, f'a failed {what} write went unnoticed'
        assert driver.modes == ['position'] * 8, driver.modes
        assert not driver.request_mode('current')[0]
    driver.close()
    record = bus.stop()
    moved = largest_move(record, begin, end)
    print(f'{mode}, {what} {kind}: fault {driver.fault!r}; largest move {moved * 1e3:.2f} mrad')
    assert moved < HELD_RAD


@pytest.mark.parametrize('mode', ['current', 'position'])
def test_a_switch_whose_burst_the_port_refuses_leaves_every_servo_held(bus, monkeypatch, mode):
    """The port raises (pyserial's SerialException is an OSError) as a switch's burst of
    sync writes goes out, once: nothing reached the servos. The driver latches a fault;
    every servo ends in position mode with its torque on, the arm within 10 mrad."""
    driver, feed = bent_before_a_switch_to(bus, mode)
    switch, write = driver._switch, type(driver._port).writePort
    in_switch = [False]

    def switching(*args):
        in_switch[0] = True
        try:
            return switch(*args)
        finally:
            in_switch[0] = False

    def refusing(port, packet):
        # inside a switch the one write that reaches the class is the burst's
        if in_switch[0]:
            in_switch[0] = False
            raise OSError(5, 'Input/output error')
        return write(port, packet)

    monkeypatch.setattr(driver, '_switch', switching)
    monkeypatch.setattr(type(driver._port), 'writePort', refusing)
    begin = time.monotonic()
    assert driver.request_mode(mode)[0]
    loop(driver, 1.0, feed)
    end = time.monotonic()
    assert 'Input/output error' in driver.fault, driver.fault
    assert driver.modes == ['position'] * 8, driver.modes
    assert torque_enabled(driver) == [1] * 8
    driver.close()
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


def test_a_failed_switch_holds_the_arm_where_it_is_not_at_an_old_command(bus, monkeypatch):
    """The elbow pushed away from the position command it had before current mode; then
    the switch back to position mode fails at its mode write: the arm is held where it is,
    and never driven back to that old command."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    gravity = driver.gravity_torque
    push = np.zeros(7)
    push[ELBOW] = 0.5
    loop(driver, 0.2, lambda r: driver.command_effort(gravity(r.position)[:7] + push,
                                                      ARM_JOINTS))
    loop(driver, 0.5, feed)
    old = POSES['bent'][ELBOW]
    moved_away = abs(driver.reading.position[ELBOW] - old)
    assert moved_away > 0.03, moved_away          # the premise: an old command to go back to
    begin = time.monotonic()
    break_the_kth_sync_write(driver, monkeypatch, 2)
    assert driver.request_mode('position')[0]
    loop(driver, 1.0)
    end = time.monotonic()
    assert driver.fault.startswith('mode switch to position failed')
    assert driver.modes == ['position'] * 8 and torque_enabled(driver) == [1] * 8
    assert not driver.command_positions(POSES['bent'], ARM_JOINTS)   # refused while latched
    driver.close()
    record = bus.stop()
    moved = largest_move(record, begin, end)
    print(f'elbow {moved_away * 1e3:.0f} mrad from the old command; moved {moved * 1e3:.2f} '
          'mrad after the failed switch')
    assert moved < HELD_RAD


def test_a_cycle_that_raises_ends_in_the_hold(bus, monkeypatch):
    """Whatever raises out of a cycle (here the effort check, the gravity model with it):
    the bus loop's answer (plag_driver's) latches the fault and holds, the holding goal
    falling back to the present counts; the arm holds within 10 mrad."""
    driver = lockstep_driver(bus)
    bent_in_current_mode(driver)
    effort = driver.gravity_torque(driver.reading.position)[:7]

    def feed(_) -> None:           # the controller goes on commanding
        driver.command_effort(effort, ARM_JOINTS)

    def broken(*_):
        raise RuntimeError('injected')

    monkeypatch.setattr(driver, '_checked_effort', broken)
    monkeypatch.setattr(driver, '_gravity', broken)
    held_after_a_cycle_raised(bus, driver, feed, "RuntimeError('injected')")


def held_after_a_cycle_raised(bus, driver, feed, error: str) -> None:
    """Run ``driver`` 1 s as plag_driver's loop does (an exception out of a cycle answered
    by :meth:`fail_safe`), ``feed`` after each good reading; then check the fault names
    ``error``, every servo is in position mode with its torque on and the arm moved less
    than 10 mrad."""
    begin = time.monotonic()
    clock = driver.clock
    for _ in range(round(1.0 * RATE_HZ)):       # plag_driver's loop, in lockstep
        clock.t += clock.period
        try:
            reading = driver.cycle()
        except Exception as err:  # noqa: BLE001 - as the node's loop does
            driver.fail_safe(f'bus cycle failed: {err!r}')
        else:
            if reading is not None:
                feed(reading)
    end = time.monotonic()
    assert driver.fault == f'bus cycle failed: {error}'
    assert driver.modes == ['position'] * 8 and torque_enabled(driver) == [1] * 8
    driver.close()
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


def test_a_port_that_raises_in_a_cycle_ends_in_the_hold(bus, monkeypatch):
    """The port raises once (pyserial's SerialException is an OSError) as a cycle in current
    mode sends its sync read. The SDK then leaves the port marked in use, so every later
    packet, the hold's too, would be refused as 'port busy' and the Bus Watchdog would stop
    the servos (no torque); the bus loop's answer frees it, latches the fault and holds."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    raises_at_call(monkeypatch, 'writePort', 10, OSError(5, 'Input/output error'))
    held_after_a_cycle_raised(bus, driver, feed, "OSError(5, 'Input/output error')")


def test_current_mode_is_refused_where_it_would_fault_at_once(bus, monkeypatch, tmp_path):
    """On a USB adapter whose latency timer is 16 ms, and at a pose from which the elbow
    could not stop inside its limit (3 mrad from its upper limit, inside the 0.06 rad
    margin): current mode is refused with the reason, the arm stays in position mode."""

    devices = tmp_path / 'devices'
    pty = Path(os.path.realpath(bus.link)).name
    (devices / pty).mkdir(parents=True)
    (devices / pty / 'latency_timer').write_text('16\n')
    monkeypatch.setattr(driver_module, 'USB_SERIAL_DEVICES', devices)
    driver = lockstep_driver(bus)
    assert driver.latency_timer_ms == 16
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    ok, why = driver.request_mode('current')
    assert not ok and 'waits 16 ms' in why and 'latency_timer' in why, why
    driver.latency_timer_ms = 1
    near = np.array(POSES['bent'])
    near[ELBOW] = -0.003
    move_to(driver, near, 1.0, 0.5)
    ok, why = driver.request_mode('current')
    assert not ok and why.startswith('not from this pose: position limit ahead: '
                                     'crane_x7_upper_arm_revolute_part_rotate_joint'), why
    loop(driver, 0.1)
    assert driver.modes == ['position'] * 8 and not driver.fault
    driver.close()
    bus.stop()


def unanswered_mode_reads(driver, monkeypatch) -> list[bool]:
    """The servos do not answer the driver's reads of Operating Mode while the returned
    flag is True (a link that fails for those packets only)."""
    silent = [True]
    read = driver._read_modes
    monkeypatch.setattr(driver, '_read_modes',
                        lambda ids, tries=1: {} if silent[0] else read(ids, tries))
    return silent


def test_a_servo_of_unknown_mode_gets_its_gravity_torque_until_its_mode_is_read(
        bus, monkeypatch):
    """A servo whose mode the driver no longer knows (it stopped answering during a
    recovery) may still be in current mode: while its Operating Mode goes unanswered, each
    cycle writes it its pose's gravity torque, so the elbow, left in current mode, holds
    within 10 mrad instead of falling. Once the read answers, a servo found in current mode
    is a fault whose hold switches it to position mode, torque on, the arm still held."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    silent = unanswered_mode_reads(driver, monkeypatch)
    driver.modes[ELBOW] = 'unknown'              # as _hold_servos leaves it
    begin = time.monotonic()
    loop(driver, 0.5, feed)
    assert driver._read(driver.ids[ELBOW], 11, 1) == 0     # really still in current mode
    assert driver.modes[ELBOW] == 'unknown' and not driver.fault, driver.fault
    silent[0] = False
    loop(driver, 0.5, feed)
    end = time.monotonic()
    assert driver.fault == f'IDs [{driver.ids[ELBOW]}] found in current mode after a failed ' \
                           'hold', driver.fault
    assert driver.modes == ['position'] * 8
    assert driver._read(driver.ids[ELBOW], 11, 1) == 3 and torque_enabled(driver) == [1] * 8
    driver.close()
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


def test_a_servo_of_unknown_mode_is_watched_for_speed(bus, monkeypatch):
    """The elbow of unknown mode, still in current mode, its mode reads unanswered, pushed
    by a gravity torque 0.3 N*m off (the model's error on a real arm) with a velocity bound
    of 0.3 rad/s: the bound faults it, the fault's burst switches it to position mode with
    the others, and it stops (by the emulator's record)."""
    driver = lockstep_driver(bus, velocity_limit=[0.3])
    feed = bent_in_current_mode(driver)
    silent = unanswered_mode_reads(driver, monkeypatch)
    driver.modes[ELBOW] = 'unknown'
    gravity = driver._gravity_or_last

    def off_while_unknown(position):
        g = gravity(position)
        if driver.modes[ELBOW] == 'unknown':
            g = g.copy()
            g[ELBOW] += 0.3
        return g

    monkeypatch.setattr(driver, '_gravity_or_last', off_while_unknown)
    begin = time.monotonic()
    for _ in range(60):                              # up to 3 s, until the fault
        loop(driver, 0.05, None if driver.fault else feed)
        if driver.fault:
            break
    assert driver.fault.startswith('velocity beyond the envelope: crane_x7_upper_arm_'
                                   'revolute_part_rotate_joint'), driver.fault
    # the fault's burst to position mode takes every arm servo not known to be there
    assert driver.modes == ['position'] * 8 and torque_enabled(driver) == [1] * 8
    silent[0] = False
    loop(driver, 1.0)
    end = time.monotonic()
    assert driver.modes == ['position'] * 8
    driver.close()
    record = bus.stop()
    inside = window(record, begin, end)
    elbow, speed = record['q'][inside][:, ELBOW], record['qd'][inside][:, ELBOW]
    print(f'elbow moved {elbow.max() - elbow[0]:.3f} rad, at most {np.abs(speed).max():.2f} '
          'rad/s')
    assert np.abs(speed).max() < 0.3 + 0.1             # one cycle past the bound at most
    assert abs(elbow[-1] - elbow[-40]) < 1e-3          # stopped, held


def test_a_position_mode_servo_of_unknown_mode_near_its_limit_is_no_fault(bus, monkeypatch):
    """A position-mode joint may rest inside the stopping margin of its limit; its mode
    unknown, it is no fault (only its speed is watched), a forward command to the others
    is followed throughout, and once its mode is read it holds where it is."""
    driver = lockstep_driver(bus)
    near = np.array(POSES['bent'])
    near[ELBOW] = driver.envelope.upper[ELBOW] - 0.5 * driver.settings.limit_margin
    move_to(driver, near, 1.0, 0.5)
    silent = unanswered_mode_reads(driver, monkeypatch)
    driver.modes[ELBOW] = 'unknown'
    rest = driver.reading.position[ELBOW]
    target = driver.reading.position[:7].copy()
    target[WRIST] += 0.2
    assert driver.command_positions(target, ARM_JOINTS)
    loop(driver, 0.5)
    assert not driver.fault and driver.modes[ELBOW] == 'unknown', driver.fault
    silent[0] = False
    loop(driver, 0.5)
    assert not driver.fault and driver.modes == ['position'] * 8, driver.fault
    assert abs(driver.reading.position[WRIST] - target[WRIST]) < 0.01
    assert abs(driver.reading.position[ELBOW] - rest) < 0.005
    driver.close()
    bus.stop()


def test_a_disarmed_bus_watchdog_is_armed_again_and_current_mode_waits_for_it(bus):
    """A servo whose Bus Watchdog reads 0 (a hold cut short after its watchdog-off write)
    would keep its last current if the host died: the next cycle arms it again, current
    mode is refused until a read shows it armed, and a servo of unknown mode found in
    position mode is taken as holding only then."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
    elbow_id = driver.ids[ELBOW]
    driver._write(elbow_id, 98, 1, 0)
    driver.modes[ELBOW] = 'unknown'
    loop(driver, 1.0 / RATE_HZ)                  # reads 0, arms it again
    assert driver.modes[ELBOW] == 'unknown'
    ok, why = driver.request_mode('current')
    assert not ok and why == f'IDs [{elbow_id}] have no Bus Watchdog armed', why
    loop(driver, 1.0 / RATE_HZ)                  # reads it armed: holding in position mode
    assert driver._read(elbow_id, 98, 1) == round(driver.settings.watchdog_s / 0.02)
    assert driver.modes == ['position'] * 8 and not driver.fault, driver.fault
    assert driver.request_mode('current')[0]
    loop(driver, 0.1, gravity_feed(driver))
    assert driver.modes[:7] == ['current'] * 7, driver.fault
    driver.request_mode('position')
    loop(driver, 0.1)
    driver.close()
    bus.stop()


def test_a_servo_of_unknown_mode_in_another_mode_is_brought_back_to_the_hold(bus):
    """A servo found in an Operating Mode the driver never sets (5, current-based position)
    is a fault, and the hold puts it back in position mode with its torque on."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
    elbow_id = driver.ids[ELBOW]
    for address, value in ((64, 0), (11, 5), (64, 1)):
        driver._write(elbow_id, address, 1, value)
    driver.modes[ELBOW] = 'unknown'
    begin = time.monotonic()
    loop(driver, 0.5)
    end = time.monotonic()
    assert driver.fault == f'IDs [{elbow_id}] found in another Operating Mode after a ' \
                           'failed hold', driver.fault
    assert driver.modes == ['position'] * 8
    assert driver._read(elbow_id, 11, 1) == 3 and torque_enabled(driver) == [1] * 8
    driver.close()
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


@pytest.mark.parametrize('error', [termios.error(5, 'Input/output error'),
                                   RuntimeError('injected SDK failure')],
                         ids=['termios.error', 'RuntimeError'])
def test_an_sdk_open_that_raises_lets_the_port_go_and_the_next_open_holds(
        bus, monkeypatch, error):
    """The SDK's own open of the port raises (its tcflush on an adapter that dropped out
    mid-open is a termios.error, no OSError; or anything else): the port and its lock
    (claim_port) are let go, so the next open, plag_driver's bus loop's a second later,
    holds the arm. Before, the lock stayed with the driver, which then refused every later
    open of its own as another process's."""
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)
    raises_at_call(monkeypatch, 'setBaudRate', 0, error)
    with pytest.raises((BusError, RuntimeError), match='Input/output error|injected'):
        driver.open()
    assert not driver.is_open and driver._claim is None
    driver.open()
    loop(driver, 0.2)
    assert not driver.fault and driver.modes == ['position'] * 8
    driver.close()


@pytest.mark.parametrize('error', [OSError(5, 'Input/output error'),
                                   RuntimeError('injected SDK failure')],
                         ids=['OSError', 'RuntimeError'])
def test_a_port_that_raises_while_opening_is_a_bus_error_and_the_next_open_holds(
        bus, monkeypatch, error):
    """The port raises (pyserial's SerialException is an OSError; or anything else) as
    the driver reads the servos' settings at open: the open raises a BusError naming it,
    which plag_driver's bus loop answers by trying again a second later (before, the
    OSError ended the bus thread, and with it the driver, without a word), having written
    nothing (its burst had not begun); the next open holds the arm."""
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)
    raises_at_call(monkeypatch, 'readPort', 5, error)
    sent = sync_writes(driver, monkeypatch)
    with pytest.raises(BusError, match=str(error.args[-1])):
        driver.open()
    assert sent == [] and not driver.is_open
    driver.open()
    loop(driver, 0.2)
    assert not driver.fault and driver.modes == ['position'] * 8
    assert torque_enabled(driver) == [1] * 8
    driver.close()


@pytest.mark.parametrize('error', [OSError(5, 'Input/output error'),
                                   RuntimeError('injected SDK failure')],
                         ids=['OSError', 'RuntimeError'])
def test_an_open_that_raises_after_its_burst_leaves_the_arm_held_without_the_watchdog(
        realtime_bus, monkeypatch, error):
    """The port raises (an OSError, or anything else) at the first read after the open's
    burst, which armed the Bus Watchdog: the open raises a BusError naming it, and before
    it does, turns the watchdog off, so the servos go on holding the bent arm with the
    gravity offset (before, an OSError left the watchdog armed, and any other exception
    also escaped as itself and ended plag_driver's bus thread). In real time: in lockstep
    a Bus Watchdog counts simulated time, which stops with the client. Its watchdog is
    1 s: a stall of this process between the burst and the open's end (a loaded machine)
    must not expire it first."""
    bus, loaded = realtime_bus, {'watchdog_s': 1.0, 'failed_reads': 100}
    first = new_driver(bus.link, **loaded)
    first.open()
    move_to(first, np.array(POSES['bent']), 1.0, 0.5)
    first.close()
    driver = new_driver(bus.link, **loaded)
    burst, read, sent = driver._configuration_burst, sdk.PortHandler.readPort, []

    def sending(*args) -> None:
        burst(*args)
        sent.append(True)

    def raising_after_the_burst(port, length):
        if sent == [True]:
            sent.append(False)                  # once
            raise error
        return read(port, length)

    monkeypatch.setattr(driver, '_configuration_burst', sending)
    monkeypatch.setattr(sdk.PortHandler, 'readPort', raising_after_the_burst)
    with pytest.raises(BusError, match=str(error.args[-1])):
        driver.open()
    begin = time.monotonic()
    assert sent == [True, False] and not driver.is_open
    time.sleep(2.0)                        # twice the Bus Watchdog: nobody reads
    (watchdogs, torque), _, end = bare_reads(bus, 0.0, (98, 1), (64, 1))
    moved = largest_move(bus.stop(), begin, end)
    print(f'after the failed open: Bus Watchdog {watchdogs}, largest move '
          f'{moved * 1e3:.2f} mrad in 2 s')
    assert watchdogs == [0] * 8 and torque == [1] * 8
    assert moved < HELD_RAD


def sync_write_packets(data: list[int]) -> list[list[int]]:
    """The Protocol 2.0 packets of a burst, in order (each header, ID, length and CRC)."""
    packets, at = [], 0
    while at < len(data):
        end = at + 7 + data[at + 5] + 256 * data[at + 6]
        packets.append(data[at:end])
        at = end
    return packets


def held_for_a_second(bus, what: str) -> None:
    """A second of physics on the lockstep ``bus`` with no driver: every servo holds in
    position mode with its torque on, the arm within 10 mrad."""
    (torque, modes), begin, end = bare_reads(bus, 1.0, (64, 1), (11, 1))
    moved = largest_move(bus.stop(), begin, end)
    print(f'{what}: torque {torque}, modes {modes}, largest move {moved * 1e3:.2f} mrad '
          'in 1 s')
    assert torque == [1] * 8 and modes == [3] * 8
    assert moved < HELD_RAD


def test_an_open_whose_port_fails_in_its_burst_and_hold_ends_with_every_servo_held(
        bus, monkeypatch):
    """The port fails as a driver opens on an arm another driver left held with another
    Return Delay Time (so the burst turns the torque off): it takes the burst only up to
    that torque off (pyserial may pass on part of a buffer before it raises), refuses the
    hold's burst and raises at the first read of the hold's one-by-one tries. The open
    raises a BusError; every servo is held in position mode with its torque on, and the
    bent arm moves less than 10 mrad in the next second (before, that OSError escaped the
    hold: the servos stayed limp and the arm fell)."""
    first = lockstep_driver(bus, return_delay=1)
    move_to(first, np.array(POSES['bent']), 1.0, 0.5)
    first.close()
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)
    write, failures = sdk.PortHandler.writePort, []

    def failing(port, packet):
        if len(packet) > 100 and not failures:         # the open's burst
            failures.append('burst')
            taken = sync_write_packets(list(packet))[:2]   # Bus Watchdog 0, torque off
            write(port, [byte for part in taken for byte in part])
            raise OSError(5, 'Input/output error')
        if failures in (['burst'], ['burst', 'hold burst']):
            failures.append('hold burst' if len(failures) == 1 else 'hold read')
            raise OSError(5, 'Input/output error')
        return write(port, packet)

    monkeypatch.setattr(sdk.PortHandler, 'writePort', failing)
    with pytest.raises(BusError, match='Input/output error'):
        driver.open()
    monkeypatch.undo()
    assert failures == ['burst', 'hold burst', 'hold read'] and not driver.is_open
    held_for_a_second(bus, 'after the failed open')


def port_raising_once(driver, monkeypatch) -> list[bool]:
    """The driver's port raises (an OSError, as pyserial's SerialException) at its next
    packet, once; the list returned holds True once it has."""
    write, raised = type(driver._port).writePort, []

    def raising_once(port, packet):
        if not raised:
            raised.append(True)
            raise OSError(5, 'Input/output error')
        return write(port, packet)

    monkeypatch.setattr(type(driver._port), 'writePort', raising_once)
    return raised


def test_a_close_in_current_mode_whose_first_read_the_port_refuses_ends_held(
        bus, monkeypatch):
    """The port raises at close()'s first read while the arm is in current mode: close()
    holds all the same (from the pose it then reads on its own), every servo in position
    mode with its torque on, and the bent arm moves less than 10 mrad in the next second
    (before, the OSError cut close() short: the servos stayed in current mode with nobody
    commanding, and the Bus Watchdog took their current away)."""
    driver = lockstep_driver(bus)
    loop(driver, 0.2, bent_in_current_mode(driver))
    raised = port_raising_once(driver, monkeypatch)
    driver.close()
    monkeypatch.undo()
    assert raised and any('closing: the first read' in m for m in driver.messages)
    held_for_a_second(bus, 'after the close')


def test_a_close_whose_first_read_fails_holds_the_arm_where_it_is_now(bus, monkeypatch):
    """In current mode the elbow's last command is 0.6 N*m short of its gravity torque
    when the driver's loop stalls (no cycle, the servos still hearing packets); the elbow
    sinks for 0.1 s. Then close()'s first read raises. close() reads Present Position on
    its own and holds the arm where it is then: it settles within a third of the stall's
    sinking of where it was when close() began (14 of 66 mrad: the elbow, still sinking,
    goes on for the physics steps of the failed read and the direct one; before, it held
    the pose of its last reading, 0.1 s old, and settled 64 mrad away, back up there)."""
    driver = lockstep_driver(bus)
    bent_in_current_mode(driver)

    def short(reading) -> None:
        effort = driver.gravity_torque(reading.position)[:7]
        effort[ELBOW] -= 0.6
        driver.command_effort(effort, ARM_JOINTS)

    loop(driver, 0.02, short)
    (before,), _, _ = bare_reads(bus, 0.1, (132, 4))     # the stalled loop
    raised = port_raising_once(driver, monkeypatch)
    begin = time.monotonic()
    driver.close()
    monkeypatch.undo()
    _, _, end = bare_reads(bus, 1.0, (132, 4))
    record = bus.stop()
    sunk = (before[ELBOW] - driver.reading.counts[ELBOW]) * driver_module.PULSE_RAD
    q = record['q'][window(record, begin, end)]
    settled = float(np.abs(q[-1] - q[0]).max())
    print(f'the elbow moved {sunk * 1e3:.1f} mrad while the loop stalled; after the close '
          f'the arm settled {settled * 1e3:.2f} mrad from where it was')
    assert raised and abs(sunk) > 3 * HELD_RAD
    assert settled < abs(sunk) / 3


def test_a_close_whose_watchdog_off_is_lost_on_the_wire_leaves_the_watchdog_off(
        bus, monkeypatch):
    """close()'s sync write of Bus Watchdog 0 is lost on the wire (a sync write has no
    answer): close() reads it back and writes it again, one by one. After a second of
    physics every servo reads Bus Watchdog 0, and the bent arm moved less than 10 mrad
    (before, 5: armed for 0.1 s, with nobody reading after close. The bare reads that
    drive the physics here keep it from expiring; in real time it expires and the servos
    stop without the hold's gravity offset, as the test of an open that raises after its
    burst measures)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    write, lost = type(driver._port).writePort, []
    watchdog_off = [0x83, 98, 0, 1, 0]         # SYNC WRITE of 1 byte at 98 ...

    def losing(port, packet):
        data = list(packet)
        if not lost and data[7:12] == watchdog_off and not any(data[13:-2:2]):
            lost.append(True)                   # ... of 0 to every servo: lost once
            return len(data)
        return write(port, packet)

    monkeypatch.setattr(type(driver._port), 'writePort', losing)
    driver.close()
    monkeypatch.undo()
    assert lost == [True]
    (watchdogs,), begin, end = bare_reads(bus, 1.0, (98, 1))
    moved = largest_move(bus.stop(), begin, end)
    print(f'after the close: Bus Watchdog {watchdogs}, largest move {moved * 1e3:.2f} mrad '
          'in 1 s')
    assert watchdogs == [0] * 8
    assert moved < HELD_RAD


def test_a_close_whose_port_fails_in_current_mode_never_leaves_a_current_unwatched(
        bus, monkeypatch):
    """close() in current mode on a port that raises at every packet but one kind: the
    sync writes of Bus Watchdog 0. The switch and every hold fail, so the servos stay in
    current mode; none may then lose its Bus Watchdog, or it would run its last current
    on with nobody commanding it (before, close() went on to turn every watchdog off)."""
    driver = lockstep_driver(bus)
    loop(driver, 0.2, bent_in_current_mode(driver))
    write = type(driver._port).writePort
    watchdog_off = [0x83, 98, 0, 1, 0]

    def failing(port, packet):
        data = list(packet)
        if data[7:12] == watchdog_off and not any(data[13:-2:2]):
            return write(port, packet)
        raise OSError(5, 'Input/output error')

    monkeypatch.setattr(type(driver._port), 'writePort', failing)
    with pytest.raises(BusError):
        driver.close()
    monkeypatch.undo()
    (modes, watchdogs), _, _ = bare_reads(bus, 0.0, (11, 1), (98, 1))
    bus.stop()
    print(f'after the close: modes {modes}, Bus Watchdog {watchdogs}')
    assert all(mode == 3 or watchdog != 0 for mode, watchdog in zip(modes, watchdogs))


def cut_off(driver, monkeypatch, servo_id: int, lost: Callable[[int], bool]) -> None:
    """Packets to ``servo_id`` lost on the wire: its part of each sync write for which
    ``lost(address)`` is true, and every acknowledged write to it (the SDK's wait for the
    status packet times out). Its replies to reads still come."""
    group_write, write = driver._group_write, driver._write

    def losing(address: int, size: int, values: dict[int, int]) -> None:
        if lost(address):
            values = {i: v for i, v in values.items() if i != servo_id}
        if values:
            group_write(address, size, values)

    def refusing(i: int, address: int, size: int, value: int) -> None:
        if i == servo_id:
            raise BusError(f'ID {i}: write of {value} at {address}: injected: no status')
        write(i, address, size, value)

    monkeypatch.setattr(driver, '_group_write', losing)
    monkeypatch.setattr(driver, '_write', refusing)


def no_current_unwatched(bus, what: str) -> None:
    """No servo of the ``bus`` runs in current mode (Operating Mode 0) with its torque on and
    its Bus Watchdog off: with nobody commanding it, it would make its last current for
    good. Read bare (no driver); the bus is stopped."""
    (modes, torque, watchdogs), _, _ = bare_reads(bus, 0.0, (11, 1), (64, 1), (98, 1))
    bus.stop()
    print(f'{what}: modes {modes}, torque {torque}, Bus Watchdog {watchdogs}')
    assert all(m != 0 or not t or w != 0 for m, t, w in zip(modes, torque, watchdogs))


def died(driver) -> None:
    """``driver``'s process died: the kernel closed its descriptors, the port's and its
    lock's (claim_port), and nothing else happened."""
    driver._port.closePort()
    driver._unclaim()


def died_in_current_mode(bus):
    """The bent arm left in current mode by a driver whose process died (its port closed,
    nothing put back); a new lockstep driver, not opened."""
    first = lockstep_driver(bus)
    loop(first, 0.2, bent_in_current_mode(first))
    died(first)
    return new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)


def test_a_close_whose_first_hold_pass_the_port_refuses_leaves_no_watchdog_armed(
        bus, monkeypatch):
    """The port raises at every packet of close()'s first pass over the servos (its read of
    who holds, and each one-by-one hold), then works again: its second pass finds every
    servo holding and turns their Bus Watchdog off all the same (before, a servo found
    holding only by the second pass kept it armed: with nobody reading after close, it
    expires and the servo stops where it is, without the hold's gravity offset)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    write, closing_hold, passes = type(driver._port).writePort, driver._closing_hold, []

    def failing(port, packet):
        if len(passes) == 1:
            raise OSError(5, 'Input/output error')
        return write(port, packet)

    def counted(reading):
        passes.append('begun')
        try:
            return closing_hold(reading)
        finally:
            passes.append('ended')

    monkeypatch.setattr(type(driver._port), 'writePort', failing)
    monkeypatch.setattr(driver, '_closing_hold', counted)
    driver.close()
    monkeypatch.undo()
    assert passes == ['begun', 'ended'] * 2
    (watchdogs,), begin, end = bare_reads(bus, 1.0, (98, 1))
    moved = largest_move(bus.stop(), begin, end)
    print(f'after the close: Bus Watchdog {watchdogs}, largest move {moved * 1e3:.2f} mrad')
    assert watchdogs == [0] * 8
    assert moved < HELD_RAD


def test_an_open_that_cannot_take_a_servo_out_of_current_mode_leaves_its_watchdog_on(
        bus, monkeypatch):
    """A driver opens on an arm left in current mode, and every packet of its bursts and
    holds to the tilt's servo is lost: the open raises (not configured and holding), and
    the Bus Watchdog it turns off for the servos that hold is left alone on the tilt's, so
    that its current stops when it expires (before, it was turned off there too: the tilt
    ran its last current with nobody commanding it)."""
    driver = died_in_current_mode(bus)
    inside = []
    for name in ('_configuration_burst', '_restore'):
        real = getattr(driver, name)

        def flagged(*args, real=real, **kwargs):
            inside.append(True)
            try:
                return real(*args, **kwargs)
            finally:
                inside.pop()

        monkeypatch.setattr(driver, name, flagged)
    cut_off(driver, monkeypatch, TILT_ID, lambda address: bool(inside))
    with pytest.raises(BusError, match=rf'IDs \[{TILT_ID}\] are not configured'):
        driver.open()
    monkeypatch.undo()
    no_current_unwatched(bus, 'after the failed open')


def test_a_failed_open_whose_restore_loses_a_mode_packet_leaves_that_watchdog_on(
        bus, monkeypatch):
    """A driver opens on an arm left in current mode; the port refuses its burst, and the
    restore that follows (with the Bus Watchdog off, nobody will read) loses the tilt's
    Operating Mode packet, its one-by-one hold too: the tilt's torque comes back on in
    current mode. It must end that burst with its watchdog on (before, off: it ran its last
    current unwatched)."""
    driver = died_in_current_mode(bus)

    def refused(*args) -> None:
        raise BusError('burst of 120 bytes: injected port failure')

    monkeypatch.setattr(driver, '_configuration_burst', refused)
    cut_off(driver, monkeypatch, TILT_ID, lambda address: address == 11)
    with pytest.raises(BusError, match='injected port failure'):
        driver.open()
    monkeypatch.undo()
    no_current_unwatched(bus, 'after the failed open')


@pytest.mark.parametrize(('cut_after', 'torque_off_lost'), [(98, False), (11, True)],
                         ids=['cut-after-the-watchdog-off', 'torque-off-lost-cut-after-the-mode'])
def test_a_switch_back_whose_check_restores_a_servo_left_in_current_mode_never_unwatches_it(
        bus, monkeypatch, cut_after, torque_off_lost):
    """The switch back to position mode loses the tilt's Operating Mode packet (it stays in
    current mode); the check after it restores, the tilt's own acknowledged writes
    unanswered, and the port cuts that burst short:

    * just after its Bus Watchdog off. The restore takes the modes read back, so the
      tilt's torque went off first (before, the restore took the mode the switch intended,
      position, and sent no torque off: the tilt ran its current with the watchdog off);
    * after its Operating Mode, the tilt's torque-off packet lost as well (so the mode is
      refused, the torque on). The tilt's watchdog is armed again right after the burst's
      watchdog off (before, only at the burst's end, which never came).

    Either way no servo runs in current mode with its watchdog off."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    restore, write, cut = driver._restore, type(driver._port).writePort, []

    def restoring(*args, **kwargs):
        cut.append('restore')
        return restore(*args, **kwargs)

    def cutting(port, packet):
        data = list(packet)
        if cut == ['restore'] and len(sync_write_packets(data)) > 1:
            cut.append('cut')
            parts = sync_write_packets(data)
            upto = next(k for k, part in enumerate(parts) if part[8] == cut_after)
            write(port, [byte for part in parts[:upto + 1] for byte in part])
            raise OSError(5, 'Input/output error')
        return write(port, packet)

    cut_off(driver, monkeypatch, TILT_ID, lambda address: (address == 11 and not cut) or (
        torque_off_lost and address == 64 and cut == ['restore']))
    monkeypatch.setattr(driver, '_restore', restoring)
    monkeypatch.setattr(type(driver._port), 'writePort', cutting)
    assert driver.request_mode('position')[0]
    for _ in range(10):          # cycle by cycle: judged right after the restore
        loop(driver, 0.005, feed)
        if 'cut' in cut:
            break
    monkeypatch.undo()
    assert cut[:2] == ['restore', 'cut'] and driver.fault
    no_current_unwatched(bus, 'after the failed switch back')


def test_a_close_whose_first_watchdog_off_a_servo_misses_turns_it_off_at_the_end(
        bus, monkeypatch):
    """close()'s first Bus Watchdog off misses the tilt (its part of the sync write lost,
    its acknowledged write unanswered); the port then works again. close() turns the
    watchdog off again on every servo that holds after its put-back, so it ends without
    an error and with every watchdog off (before, only the servos its second pass newly
    found holding: the tilt's stayed armed, and close() raised)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    watchdog_off, calls = driver._watchdog_off, []

    def missing_the_tilt_once(ids):
        calls.append(list(ids))
        if len(calls) > 1:
            return watchdog_off(ids)
        with monkeypatch.context() as patch:
            cut_off(driver, patch, TILT_ID, lambda address: address == 98)
            return watchdog_off(ids)

    monkeypatch.setattr(driver, '_watchdog_off', missing_the_tilt_once)
    driver.close()
    monkeypatch.undo()
    assert len(calls) == 2
    (watchdogs,), _, _ = bare_reads(bus, 0.0, (98, 1))
    bus.stop()
    print(f'after the close: Bus Watchdog {watchdogs}')
    assert watchdogs == [0] * 8


def switch_whose_mode_read_raises(driver, monkeypatch, mode: str,
                                  fail_safe: bool = True) -> bool:
    """A switch of ``driver`` to ``mode`` whose check's sync read of Operating Mode raises
    (the port); the cycle raises, and the bus loop answers with fail_safe, as plag_driver's
    does (unless not ``fail_safe``: a script calling cycle() itself, dead of the error).
    Every patch undone; True once the read has raised."""
    write, raised = type(driver._port).writePort, []

    def raising_at_the_mode_read(port, packet):
        data = list(packet)          # SYNC READ (0x82) of 1 byte at address 11
        if not raised and data[7] == 0x82 and data[8:12] == [11, 0, 1, 0]:
            raised.append(True)
            raise OSError(5, 'Input/output error')
        return write(port, packet)

    monkeypatch.setattr(type(driver._port), 'writePort', raising_at_the_mode_read)
    assert driver.request_mode(mode)[0]
    driver.clock.t += driver.clock.period
    with pytest.raises(BusError, match='Input/output error'):
        driver.cycle()
    if fail_safe:
        driver.fail_safe('bus cycle failed')
    monkeypatch.undo()
    return bool(raised)


@pytest.mark.parametrize('fail_safe', [True, False], ids=['bus loop', 'script'])
def test_a_switch_to_current_whose_check_the_port_refuses_ends_in_the_hold_at_once(
        bus, monkeypatch, fail_safe):
    """The port raises at the check's read of the modes after a switch to current mode:
    every servo is back in the position hold at once, before the error leaves cycle(), so
    the same holds whether the bus loop answers with fail_safe or the script that called
    cycle() dies of the error (99bbb2a left them of unknown mode, which fail_safe did not
    switch: they stayed in current mode on their start torque until a later cycle's read,
    with none once the watchdog expired if the reads kept failing; until this change a
    script that died of the error left them in current mode, for the watchdog to drop)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    assert switch_whose_mode_read_raises(driver, monkeypatch, 'current', fail_safe)
    (modes,), _, _ = bare_reads(bus, 0.0, (11, 1))
    bus.stop()
    print(f'after the error: modes {modes}, driver {driver.modes}, fault {driver.fault!r}')
    assert modes == [3] * 8 and driver.modes == ['position'] * 8


def test_a_switch_back_whose_check_the_port_refuses_still_finds_a_servo_in_current_mode(
        bus, monkeypatch):
    """The switch back to position mode loses the tilt's Operating Mode packet (it stays
    in current mode), and the port raises at the check's read of the modes: the cycle
    raises, and the bus loop answers with fail_safe (as plag_driver's does). The switched
    servos' modes are then unknown, so the next cycles give the tilt its gravity current,
    read its mode, find it in current mode and hold it: every servo ends in position mode
    and the bent arm moves less than 10 mrad (before, the driver took the tilt for a
    position-mode servo and wrote it Goal Current 0 every cycle: it fell, unnoticed)."""
    driver = lockstep_driver(bus)
    bent_in_current_mode(driver)
    group_write, lost = driver._group_write, []

    def losing_once(address: int, size: int, values: dict[int, int]) -> None:
        if address == 11 and not lost:
            lost.append(True)
            values = {i: v for i, v in values.items() if i != TILT_ID}
        group_write(address, size, values)

    monkeypatch.setattr(driver, '_group_write', losing_once)
    begin = time.monotonic()
    assert switch_whose_mode_read_raises(driver, monkeypatch, 'position') and lost
    loop(driver, 1.0)
    end = time.monotonic()
    (modes,), _, _ = bare_reads(bus, 0.0, (11, 1))
    moved = largest_move(bus.stop(), begin, end)
    print(f'after the switch back: modes {modes}, driver {driver.modes}, fault '
          f'{driver.fault!r}, largest move {moved * 1e3:.2f} mrad')
    assert modes == [3] * 8 and driver.modes == ['position'] * 8
    assert moved < HELD_RAD


@pytest.mark.parametrize('mode', ['position', 'current'])
def test_a_servo_that_reboots_is_mapped_again_and_held_where_it_is(bus, mode):
    """The tilt's servo reboots (a power dip; here the SDK's REBOOT instruction) while the
    arm is held bent, in ``mode``: its torque goes off and its indirect addresses (RAM)
    fall back to their defaults, so the cycle's read finds all zeros in its row. The driver
    reads its Present Position directly, maps it again, latches a fault naming the reboot
    and holds it where it is: the arm moves less than 10 mrad in a second (before, the
    hold's goal came from the row's count 0, clipped into the tilt's limits: the arm was
    slammed over, the tilt 2182 mrad in position mode)."""
    driver = lockstep_driver(bus)
    feed = None
    if mode == 'current':
        feed = bent_in_current_mode(driver)
    else:
        move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    begin = time.monotonic()
    assert driver._packets.reboot(driver._port, TILT_ID)[0] == sdk.COMM_SUCCESS
    loop(driver, 1.0, feed)
    end = time.monotonic()
    assert 'indirect addresses reset' in driver.fault and f'[{TILT_ID}]' in driver.fault
    assert torque_enabled(driver) == [1] * 8 and driver.modes == ['position'] * 8
    driver.close()
    moved = largest_move(bus.stop(), begin, end)
    print(f'{mode}: fault {driver.fault!r}; largest move {moved * 1e3:.2f} mrad')
    assert moved < HELD_RAD


def goal_writes_to(driver, servo_id: int) -> int:
    """How many of the cycle's sync writes of goals (at the indirect data they go through)
    in one cycle of ``driver`` carry a part for ``servo_id`` (packets read on the wire)."""
    write, seen = type(driver._port).writePort, []

    def recording(port, packet):
        data = list(packet)
        if data[7] == 0x83 and data[8] | data[9] << 8 == driver_module.WRITE_AT:
            size = data[10] | data[11] << 8
            seen.extend(data[12:-2][::1 + size])             # each part's ID
        return write(port, packet)

    type(driver._port).writePort = recording
    try:
        loop(driver, driver.clock.period)
    finally:
        type(driver._port).writePort = write
    return seen.count(servo_id)


@pytest.mark.parametrize('cuts, then', [(1, 'restart'), (2, 'restart'), (2, 'reboot')],
                         ids=['first burst', 'both bursts, a restart',
                              'both bursts, a second reboot'])
def test_a_rebooted_servo_whose_mapping_is_cut_short_is_held_from_its_own_items(
        bus, monkeypatch, cuts, then):
    """The tilt's servo reboots while the arm is held bent, and the burst that maps it
    again loses every packet but the one that maps Present Temperature (a port cutting the
    burst short), ``cuts`` times: its row then reads a temperature and zeros elsewhere,
    count 0 and Torque Enable 0 among them. The driver reads the mapping back and sends it
    again once; a servo it still did not take is read from its own items each cycle and
    gets no goal through its half-mapped write slots (with its torque on after the hold, a
    real servo may refuse indirect addresses), its fault coming back after clear_fault,
    until the driver is opened again or the servo reboots once more (``then``: its torque
    is off again, and it is mapped then, though its last try was under a second ago: the
    hold had its torque on in between). Either way the arm moves less than 10 mrad
    through the reboot, a clear_fault, the restart or the second reboot, and the tilt's
    indirect addresses end as the pan's (before, the half-mapped row was taken for a
    reading: its torque-off flag brought the tilt back to a hold at count 0, clipped into
    its limits: the tilt swung 2182 mrad)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    temperature_slot = driver_module.INDIRECT_ADDRESS_1 + 2 * (driver_module.READ_LENGTH - 1)
    group_write, lost = driver._group_write, []

    def cut_short(address: int, size: int, values: dict[int, int]) -> None:
        if (address in driver_module.INDIRECT_ADDRESSES and address != temperature_slot
                and lost.count(address) < cuts):          # the first bursts' packets only
            lost.append(address)
            values = {i: v for i, v in values.items() if i != TILT_ID}
        if values:
            group_write(address, size, values)

    monkeypatch.setattr(driver, '_group_write', cut_short)
    begin = time.monotonic()
    assert driver._packets.reboot(driver._port, TILT_ID)[0] == sdk.COMM_SUCCESS
    loop(driver, 0.25)
    assert len(lost) == cuts * (driver_module.SLOTS - 1)
    first = driver.fault
    assert 'indirect addresses reset' in first and f'[{TILT_ID}]' in first
    assert ('could not be mapped' in first) == (cuts == 2)
    assert torque_enabled(driver) == [1] * 8 and driver.modes == ['position'] * 8
    assert goal_writes_to(driver, TILT_ID) == (cuts == 1)
    driver.clear_fault()
    loop(driver, 0.25)    # (a second reboot then comes within MAP_AGAIN_EVERY_S of the try)
    assert bool(driver.fault) == (cuts == 2), driver.fault
    if then == 'restart':
        driver.close()
        monkeypatch.undo()
        driver.open()              # (a fault stays latched through it: cleared here)
    else:
        assert driver._packets.reboot(driver._port, TILT_ID)[0] == sdk.COMM_SUCCESS
        loop(driver, 0.5)
    driver.clear_fault()
    loop(driver, 0.5)
    end = time.monotonic()
    assert not driver.fault, driver.fault
    assert goal_writes_to(driver, TILT_ID) == 1
    addresses = sorted(driver_module.INDIRECT_ADDRESSES)
    mapped, _, _ = bare_reads(bus, 0.0, *((a, 2) for a in addresses))
    driver.close()
    pan, tilt = ([values[k] for values in mapped] for k in (0, TILT_ID - 2))
    moved = largest_move(bus.stop(), begin, end)
    print(f'first fault {first!r}; largest move {moved * 1e3:.2f} mrad; tilt indirect '
          f"addresses {tilt}, the pan's {pan}")
    assert tilt == pan
    assert moved < HELD_RAD


def test_a_rebooted_servo_that_takes_no_write_is_mapped_again_once_a_second(bus, monkeypatch):
    """The tilt's servo reboots while every write to it is lost (its replies to reads
    still come): its mapping never takes and its torque stays off, the fault says so. The
    driver tries to map it again once a second, not at every cycle: each try is two bursts
    and two read-backs on the cycle's time, and its log line (before: 600 tries and as many
    log lines in 3 s, the bus loop's every cycle)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    tries, logged = [], []
    map_ids = driver._map

    def counted(ids):
        tries.append(driver.clock())
        return map_ids(ids)

    monkeypatch.setattr(driver, '_map', counted)
    monkeypatch.setattr(driver, 'log', logged.append)
    cut_off(driver, monkeypatch, TILT_ID, lambda address: True)
    assert driver._packets.reboot(driver._port, TILT_ID)[0] == sdk.COMM_SUCCESS
    begin = driver.clock()
    loop(driver, 3.0)
    reboots = [m for m in logged if 'indirect addresses reset: ' in m]
    print(f'{len(tries)} tries at mapping in 3 s, at {np.round(np.subtract(tries, begin), 3)} '
          f's; {len(reboots)} log lines of the reboot; fault {driver.fault!r}')
    assert 'indirect addresses reset' in driver.fault and f'[{TILT_ID}]' in driver.fault
    assert 'could not be mapped again' in driver.fault
    assert 3 <= len(tries) <= 4 and len(reboots) == len(tries)
    assert np.diff(tries).min() >= driver_module.MAP_AGAIN_EVERY_S
    monkeypatch.undo()
    driver.close()


def test_commands_before_open_are_refused_and_none_is_carried_out(tmp_path):
    """A trajectory, a forward command and an effort command that reach the driver before
    open() has found the pose (the node subscribes first) are refused and counted; after
    open the arm holds where it was (the hold's first goal once was count 0: the base swung
    towards its limit)."""
    bus = next(bus_in_test(tmp_path, RATE_HZ))
    try:
        driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)
        assert not driver.command_trajectory([0.5], [[0.0] * 7], ARM_JOINTS)
        assert not driver.command_positions([0.0] * 7, ARM_JOINTS)
        assert not driver.command_effort([0.0] * 7, ARM_JOINTS)
        assert driver.counts['rejected_commands'] == 3
        driver.open()
        begin = time.monotonic()
        loop(driver, 1.0)
        end = time.monotonic()
        assert not driver.fault, driver.fault
        driver.close()
        assert largest_move(bus.stop(), begin, end) < HELD_RAD
    finally:
        if bus.process.poll() is None:
            bus.process.kill()


REQUESTS = {
    'request_mode': lambda d: d.request_mode('current'),
    'clear_fault': lambda d: d.clear_fault(),
    'command_effort': lambda d: d.command_effort(d.gravity_torque(d.reading.position)[:7],
                                                 ARM_JOINTS),
    'command_positions': lambda d: d.command_positions(d.reading.position[:7], ARM_JOINTS),
    'command_trajectory': lambda d: d.command_trajectory([0.1], [d.reading.position[:7]],
                                                         ARM_JOINTS),
}
"""What the ROS executor's thread asks of the driver while the bus loop cycles."""


@pytest.mark.parametrize('request_name', REQUESTS)
def test_a_request_from_another_thread_waits_for_the_cycle(bus, monkeypatch, request_name):
    """The bus loop's cycle and the ROS executor's requests never interleave: a request
    made while a cycle is inside its read returns only after it (a mode request is then
    carried out at the next cycle, never lost between the cycle's read of it and its
    reset)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
    inside, release = threading.Event(), threading.Event()
    read = driver._sync_read

    def slow_read():
        inside.set()
        release.wait(10.0)
        return read()

    monkeypatch.setattr(driver, '_sync_read', slow_read)
    cycling = threading.Thread(target=driver.cycle)
    cycling.start()
    assert inside.wait(10.0)
    answered = threading.Event()

    def request() -> None:
        REQUESTS[request_name](driver)
        answered.set()

    threading.Thread(target=request).start()
    assert not answered.wait(0.3), f'{request_name} went through in the middle of a cycle'
    release.set()
    cycling.join(10.0)
    assert answered.wait(10.0)
    monkeypatch.setattr(driver, '_sync_read', read)
    if request_name == 'request_mode':
        assert driver._pending == 'current'
        loop(driver, 0.1, gravity_feed(driver))
        assert driver.modes[:7] == ['current'] * 7, driver.fault
        driver.request_mode('position')
        loop(driver, 0.1)
    assert not driver.fault, driver.fault
    driver.close()
    bus.stop()


@pytest.mark.parametrize('failures', [2, 3])
def test_three_failed_cycle_writes_in_a_row_are_a_fault(bus, monkeypatch, failures):
    """Cycle writes that fail (the port refuses them) are counted; the third in a row is a
    fault and the arm holds in position mode."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    group, left = driver._write_group, [failures]
    real = group.txPacket

    def tx() -> int:
        if left[0] > 0:
            left[0] -= 1
            return sdk.COMM_TX_FAIL
        return real()

    monkeypatch.setattr(group, 'txPacket', tx)
    before = driver.counts['failed_writes']
    begin = time.monotonic()
    loop(driver, 0.5, feed)
    end = time.monotonic()
    assert driver.counts['failed_writes'] - before == failures
    if failures >= driver.settings.failed_writes:
        assert driver.fault == '3 consecutive failed writes'
        assert driver.modes == ['position'] * 8
    else:
        assert not driver.fault and driver.modes[:7] == ['current'] * 7
    driver.close()
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


def test_a_servo_whose_torque_went_off_is_brought_back_to_a_hold(bus):
    """The tilt's torque turned off behind the driver's back, in position mode: the next
    cycle latches the fault and brings it back (torque on, held within 10 mrad)."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.3)
    begin = time.monotonic()
    driver._write(TILT_ID, 64, 1, 0)
    loop(driver, 1.0)
    end = time.monotonic()
    assert driver.fault == f'torque off on IDs [{TILT_ID}]'
    assert torque_enabled(driver) == [1] * 8 and driver.modes == ['position'] * 8
    driver.close()
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


def test_an_overload_shutdown_latches_a_fault_holds_the_rest_and_names_the_servo_off(bus):
    """An overload shutdown turns the elbow's torque off; only a reboot can turn it on
    again (e-manual "Shutdown"). The driver latches the fault, holds the other servos in
    position mode, says the elbow's servo is off, refuses current mode, and tries the
    servo again (once) when the fault is cleared: the fault comes back."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    elbow_id = driver.ids[ELBOW]
    bus.fault(f'hardware {elbow_id} 32')
    loop(driver, 0.2, feed)
    assert driver.fault == f'hardware error: ID {elbow_id}: overload'
    assert driver.counts['faults'] == 1
    assert driver.modes[ELBOW] == 'off'
    assert [m for k, m in enumerate(driver.modes) if k != ELBOW] == ['position'] * 7
    enabled = torque_enabled(driver)
    assert enabled[ELBOW] == 0 and enabled[:ELBOW] + enabled[ELBOW + 1:] == [1] * 7
    assert not driver.request_mode('current')[0]        # refused while latched
    holds = driver.counts['holds']
    loop(driver, 0.1)
    assert driver.counts['holds'] == holds          # not tried every cycle
    assert driver.clear_fault() == f'hardware error: ID {elbow_id}: overload'
    loop(driver, 0.1)
    assert driver.counts['holds'] == holds + 1
    assert driver.modes[ELBOW] == 'off' and driver.fault.startswith('hardware error')
    assert any('could not be' in m for m in driver.messages), driver.messages
    with pytest.raises(BusError, match=rf'closing: IDs \[{elbow_id}\] are not holding'):
        driver.close()                          # said, not hidden
    assert not driver.is_open
    bus.stop()


def sync_writes(driver, monkeypatch) -> list[tuple[int, dict[int, int]]]:
    """(address, {ID: value}) of each sync write the driver sends from now on."""
    real, sent = driver._group_write, []

    def write(address: int, size: int, values: dict[int, int]) -> None:
        sent.append((address, dict(values)))
        real(address, size, values)

    monkeypatch.setattr(driver, '_group_write', write)
    return sent


@pytest.mark.parametrize('first_ends', ['closed', 'killed'])
def test_a_driver_that_opens_on_a_held_arm_keeps_it_held(bus, monkeypatch, first_ends):
    """plag_driver started again on the arm a first one held at the bent pose, after that
    one closed (it put back the indirect addresses, which are RAM: written again with the
    torque on) or was killed (nothing to change). The new one writes no Torque Enable 0
    at all (before, every servo lost its torque from its first write to its first reads:
    three physics steps on the tilt and the elbow), and no joint moves 2 mrad."""
    first = lockstep_driver(bus)
    move_to(first, np.array(POSES['bent']), 1.0, 0.3)
    if first_ends == 'closed':
        first.close()
    else:
        died(first)                                 # killed: no close()
    begin = time.monotonic()
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)
    sent = sync_writes(driver, monkeypatch)
    driver.open()
    loop(driver, 0.5)
    end = time.monotonic()
    assert [values for address, values in sent if address == 64 and 0 in values.values()
            ] == []
    assert not driver.fault and driver.modes == ['position'] * 8
    assert torque_enabled(driver) == [1] * 8
    driver.close()
    record = bus.stop()
    inside = window(record, begin, end)
    limp = np.all(record['effort'][inside][:, [TILT, ELBOW]] == 0.0, axis=1)
    assert not limp.any(), f'{limp.sum()} steps without torque on the tilt and the elbow'
    assert largest_move(record, begin, end) < 0.002


def test_a_second_driver_on_the_port_is_refused_before_it_touches_the_line(bus, monkeypatch):
    """A second plag_driver opened on the bus a first one holds (a second launch left on
    the same ``port:=``, here at another baud rate): its open is a BusError that says the
    port is another process's, before it sends anything (every packet the SDK would write
    is counted) and before it sets the line (the first's termios, speeds included, as
    they were: pyserial's open sets them and flushes); the first goes on holding the bent
    pose, every servo's torque on, within 2 mrad. Once the first has closed, the port
    opens again. Before, the second driver configured the servos under the first one's
    hold, and then, locking after its open, still set the line."""
    first = lockstep_driver(bus)
    move_to(first, np.array(POSES['bent']), 1.0, 0.3)
    line = termios.tcgetattr(first._port.ser.fileno())
    second = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100,
                        baud_rate=1_000_000)
    sent: list[bytes] = []
    real_write = sdk.PortHandler.writePort

    def write(port, packet):
        if port is second._port:
            sent.append(bytes(packet))
        return real_write(port, packet)

    monkeypatch.setattr(sdk.PortHandler, 'writePort', write)
    begin = time.monotonic()
    with pytest.raises(BusError, match='is not ours: another process holds it'):
        second.open()
    assert sent == [] and second._port is None
    assert termios.tcgetattr(first._port.ser.fileno()) == line
    loop(first, 0.5)
    end = time.monotonic()
    assert not first.fault and first.modes == ['position'] * 8
    assert torque_enabled(first) == [1] * 8
    first.close()
    second.open()
    second.close()
    assert largest_move(bus.stop(), begin, end) < 0.002


def test_open_refuses_a_joint_far_beyond_its_limit_and_writes_nothing(bus, monkeypatch):
    """The pan found 0.2 rad beyond its upper limit (a limit set tighter than the pose):
    the hold clipped into the limit would swing it back at the servo's full speed, so open
    raises a BusError naming the joint before any write; every servo keeps its torque off.
    With the limit back, the next open holds."""
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)
    upper = int(driver.limits[0, 1])
    found = driver_module.HOME_COUNT        # the emulated arm powers up at home
    driver.limits[0, 1] = found - round(0.2 / driver_module.PULSE_RAD)
    sent = sync_writes(driver, monkeypatch)
    with pytest.raises(BusError, match=f'{ARM_JOINTS[0]} at .* rad .*nothing written'):
        driver.open()
    assert sent == [] and not driver.is_open
    driver.limits[0, 1] = upper
    driver.open()
    assert torque_enabled(driver) == [1] * 8 and driver.modes == ['position'] * 8
    driver.close()


AGAIN, ONE_BY_ONE = 'did not take the configuration burst', 'not holding after open'


@pytest.mark.parametrize(('item', 'address', 'value', 'settings', 'logged'), [
    ('Current Limit (EEPROM)', 38, None, {}, AGAIN),
    ('Position P Gain (RAM)', 84, None, {'p_gain': 900}, AGAIN),
    ('the first indirect address', driver_module.INDIRECT_ADDRESS_1, None, {}, AGAIN),
    ('Torque Enable 1', 64, 1, {}, ONE_BY_ONE)])
def test_a_servo_that_misses_a_packet_of_the_open_burst_is_configured_again(
        bus, monkeypatch, item, address, value, settings, logged):
    """A sync write has no answer: the tilt servo misses one packet of the open's burst
    (the first at ``address``, or the first writing it ``value``) and keeps what it had (a
    Current Limit that current mode would clip against, a P gain the hold was not computed
    for, an indirect address that would make the cycle read another item, its torque
    off). open reads everything back, finds it, and sends that servo its burst again (or,
    for the torque, brings it to the hold on its own): the item reads back as the
    driver's, and every servo holds."""
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100, **settings)
    real, dropped = driver._group_write, []

    def losing_the_tilts_first(at: int, size: int, values: dict[int, int]) -> None:
        if at == address and not dropped and value in (None, values.get(TILT_ID)):
            dropped.append(values.pop(TILT_ID))
        real(at, size, values)

    monkeypatch.setattr(driver, '_group_write', losing_the_tilts_first)
    driver.open()
    assert dropped, f'{item} was not written'
    assert driver._read(TILT_ID, address, 1 if address < 12 else 2) == dropped[0]
    assert any(f'IDs [{TILT_ID}]' in m and logged in m for m in driver.messages)
    assert torque_enabled(driver) == [1] * 8 and driver.modes == ['position'] * 8
    driver.close()


def test_a_port_that_refuses_the_open_burst_leaves_every_servo_held(bus, monkeypatch):
    """The port refuses the open's burst (nothing of it sent) on servos that powered up
    with their torque off: open raises a BusError, and before it does, the servos are
    brought to a position hold, so the arm is not left limp until the next try."""
    driver = new_driver(bus.link, LockstepClock(RATE_HZ), failed_reads=100)

    def refused(*args, **kwargs) -> None:
        raise BusError('burst of 1200 bytes: injected port failure')

    monkeypatch.setattr(driver, '_configuration_burst', refused)
    with pytest.raises(BusError, match='injected port failure'):
        driver.open()
    port, packets = sdk.PortHandler(str(bus.link)), sdk.PacketHandler(2.0)
    assert port.setBaudRate(3_000_000) and port.openPort()
    try:
        assert [packets.read1ByteTxRx(port, i, 64)[0] for i in driver.ids] == [1] * 8
        assert [packets.read1ByteTxRx(port, i, 11)[0] for i in driver.ids] == [3] * 8
    finally:
        port.closePort()


def test_close_leaves_the_p_gain_the_hold_needs(bus):
    """Servos found with Position P Gain 5 (crane_x7_control's value at its deactivation):
    close() leaves 800, not 5, and the bent arm moves less than 10 mrad in the 3 s after."""
    port = sdk.PortHandler(str(bus.link))
    packets = sdk.PacketHandler(2.0)
    assert port.setBaudRate(3_000_000) and port.openPort()
    for servo_id in range(2, 10):
        assert packets.write2ByteTxRx(port, servo_id, 84, 5)[0] == sdk.COMM_SUCCESS
    port.closePort()
    driver = lockstep_driver(bus)
    assert {driver._saved[i][84] for i in driver.ids} == {5}
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    driver.close()
    (gains,), begin, end = bare_reads(bus, 3.0, (84, 2))
    record = bus.stop()
    moved = largest_move(record, begin, end)
    print(f'after close: P gains {gains}, largest move {moved * 1e3:.2f} mrad in 3 s')
    assert gains == [800] * 8
    assert moved < HELD_RAD


def test_close_puts_back_the_gains_profile_and_indirect_addresses_open_found(bus):
    """Servos found with their own Position D and I Gains, profile and first Indirect
    Address (another program's settings): after open, a while in the driver's hands and
    close, each reads back as found (open saves them from its first read-back)."""
    found = {80: (2, 120), 82: (2, 15), 108: (4, 20), 112: (4, 60),
             driver_module.INDIRECT_ADDRESS_1: (2, 146)}
    port, packets = sdk.PortHandler(str(bus.link)), sdk.PacketHandler(2.0)
    assert port.setBaudRate(3_000_000) and port.openPort()
    writes = {2: packets.write2ByteTxRx, 4: packets.write4ByteTxRx}
    for servo_id in range(2, 10):
        for address, (size, value) in found.items():
            assert writes[size](port, servo_id, address, value)[0] == sdk.COMM_SUCCESS
    port.closePort()
    driver = lockstep_driver(bus)
    loop(driver, 0.2)
    driver.close()
    back, _, _ = bare_reads(bus, 0.0, *[(address, size) for address, (size, _) in found.items()])
    assert back == [[value] * 8 for size, value in found.values()]


def test_close_reads_every_servo_back_and_holds_one_found_limp(bus):
    """The tilt's torque off behind the driver's back just before close(): close() finds it
    in its read-back and brings it back; the arm stays within 10 mrad over the 3 s after,
    with the torque on everywhere."""
    driver = lockstep_driver(bus)
    move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
    begin = time.monotonic()
    driver._write(TILT_ID, 64, 1, 0)
    driver.close()
    port = sdk.PortHandler(str(bus.link))
    packets = sdk.PacketHandler(2.0)
    assert port.setBaudRate(3_000_000) and port.openPort()
    reader = sdk.GroupSyncRead(port, packets, 64, 1)
    for servo_id in range(2, 10):
        reader.addParam(servo_id)
    for _ in range(round(3.0 * RATE_HZ)):       # three seconds of physics
        assert reader.txRxPacket() == sdk.COMM_SUCCESS
    end = time.monotonic()
    enabled = [reader.getData(i, 64, 1) for i in range(2, 10)]
    port.closePort()
    assert enabled == [1] * 8
    assert any('brought back' in m for m in driver.messages), driver.messages
    assert largest_move(bus.stop(), begin, end) < HELD_RAD


def push_from_bent(driver, joint: int, torque: float, seconds: float) -> tuple[float, float]:
    """Current mode at the bent pose, then the gravity torque plus ``torque`` [N*m] on
    ``joint`` for ``seconds``; the wall times it began and ended."""
    bent_in_current_mode(driver)
    gravity = driver.gravity_torque
    push = np.zeros(7)
    push[joint] = torque
    begin = time.monotonic()
    loop(driver, seconds, lambda r: driver.command_effort(gravity(r.position)[:7] + push,
                                                          ARM_JOINTS))
    return begin, time.monotonic()


def test_a_joint_driven_at_its_limit_is_stopped_inside_it(bus):
    """Gravity plus 0.3 N*m on the elbow drives it from -1.2 rad towards its upper limit
    (0 rad): the envelope's stopping distance faults it well before, and the hold stops it
    inside the limit (by the emulator's record)."""
    driver = lockstep_driver(bus)
    begin, end = push_from_bent(driver, ELBOW, 0.3, 3.0)
    assert driver.fault.startswith('position limit ahead: crane_x7_upper_arm_revolute_part_'
                                   'rotate_joint'), driver.fault
    assert driver.modes == ['position'] * 8
    driver.close()
    record = bus.stop()
    elbow = record['q'][window(record, begin, end)][:, ELBOW]
    upper = driver.envelope.upper[ELBOW]
    print(f'elbow from {elbow[0]:.3f} to at most {elbow.max():.3f} rad (limit {upper:.3f})')
    assert elbow.max() < upper - driver.settings.limit_margin
    assert abs(elbow[-1] - elbow[-40]) < 1e-3          # stopped, held


def test_a_joint_faster_than_its_bound_is_stopped(bus):
    """Gravity plus 0.4 N*m on the wrist (the finding: it ran to 8.4 rad/s and into its
    limit), with a velocity bound of 2 rad/s: the bound faults it and the hold stops it
    far from its limit. (At the default bound, the no-load speed, the emulated supply
    stops driving the wrist first, near 4.4 rad/s, and the stopping distance faults it,
    as it does the elbow above.)"""
    driver = lockstep_driver(bus, velocity_limit=[2.0])
    begin, end = push_from_bent(driver, WRIST, 0.4, 2.0)
    assert driver.fault.startswith('velocity beyond the envelope: crane_x7_wrist_joint'), \
        driver.fault
    driver.close()
    record = bus.stop()
    inside = window(record, begin, end)
    wrist, speed = record['q'][inside][:, WRIST], record['qd'][inside][:, WRIST]
    print(f'wrist at most {wrist.max():.3f} rad, {np.abs(speed).max():.2f} rad/s')
    assert np.abs(speed).max() < 2.0 + 0.2             # one cycle past the bound at most
    assert wrist.max() < driver.envelope.upper[WRIST] - 2.0


def test_a_torque_step_beyond_the_envelope_is_not_written(bus):
    """A command that jumps 1.2 N*m in one cycle (the bound: 1.0) is a fault; it never
    reaches the servos and the arm holds within 2 mrad."""
    driver = lockstep_driver(bus)
    bent_in_current_mode(driver)
    begin = time.monotonic()
    jump = np.zeros(7)
    jump[ELBOW] = 1.2
    driver.command_effort(driver.gravity_torque(driver.reading.position)[:7] + jump,
                          ARM_JOINTS)
    loop(driver, 0.5)
    end = time.monotonic()
    assert driver.fault.startswith('torque step beyond the envelope: crane_x7_upper_arm_'
                                   'revolute_part_rotate_joint +1.2'), driver.fault
    driver.close()
    record = bus.stop()
    inside = window(record, begin, end)
    assert np.abs(record['effort'][inside][:, ELBOW]).max() < 1.0   # gravity ~0.5, not +1.7
    assert largest_move(record, begin, end) < 0.002


def test_a_hot_servo_is_a_fault_before_its_own_shutdown(bus):
    """The elbow's servo at 75 degC (its Temperature Limit: 80): the driver faults at 70
    and holds; the servo itself has not shut down (torque on, no hardware error)."""
    driver = lockstep_driver(bus)
    feed = bent_in_current_mode(driver)
    elbow_id = driver.ids[ELBOW]
    np.testing.assert_array_equal(driver.envelope.temperature, 70.0)   # 80 read, less 10
    bus.fault(f'temperature {elbow_id} 75')
    loop(driver, 0.2, feed)
    assert driver.fault == ('temperature: crane_x7_upper_arm_revolute_part_rotate_joint +75 '
                            '(bound 70 degC)'), driver.fault
    assert driver.modes == ['position'] * 8
    assert torque_enabled(driver) == [1] * 8 and driver._read(elbow_id, 70, 1) == 0
    driver.close()
    bus.stop()


def test_effort_commands_that_cannot_be_placed_are_rejected_and_counted(bus):
    """Unknown names, a name twice, an arm joint left out, values that do not match the
    names, a source reading older than stale_s or from the future: rejected, counted, and
    the last good command kept."""
    driver = lockstep_driver(bus)
    good = driver.gravity_torque(driver.reading.position)[:7]
    now = driver.clock()
    assert driver.command_effort(good, ARM_JOINTS, source_t=now - 0.05)
    kept = driver._effort
    assert kept.at == now - 0.05               # the command is as old as its reading
    stale = driver.settings.stale_s
    for effort, joints, source_t in (
            ([0.1], ['no_such_joint'], None), (good[:6], ARM_JOINTS, None),
            ([0.1, 0.2], [ARM_JOINTS[0]] * 2, None), ([], [], None),
            (good[:6], ARM_JOINTS[:6], None),
            (good, ARM_JOINTS, now - stale - 0.001), (good, ARM_JOINTS, now + 0.001)):
        assert not driver.command_effort(effort, joints, source_t), joints
    assert driver.counts['rejected_commands'] == 7 and driver._effort is kept
    driver.close()
    bus.stop()


PLANTS = {'heavy, weak': (1.2, 0.8), 'light, strong': (0.8, 1.2)}
"""Arms unlike the model (mass factor, torque constant factor; armature x2 in both)."""


def shipped_torque_law(model, **values):
    """config/torque_mode.yaml's plag_impedance law holding the pose where it is enabled,
    with ``values`` over the file's, enabled at its first state (the node's settings refuse
    that; here the test enables it)."""
    from parameter_files import node_parameters

    from plag_ros.core.control.impedance import PartialImpedanceController
    from plag_ros.core.control.settings import ImpedanceSettings
    from plag_ros.core.dynamics.engine import PartialLagrangian

    settings = ImpedanceSettings.from_values({
        **node_parameters('torque_mode.yaml', 'plag_impedance'), 'reference.mode': 'hold',
        **values})
    return settings, PartialImpedanceController(
        PartialLagrangian(model), settings.controller_config(model).replace(
            start_enabled=True), settings.reference_trajectory(8))


def law_step(driver, law) -> Callable:
    """A :func:`loop` callback: ``law``'s effort for each reading (the driver's gravity
    torque while the law has none: its estimator warming up)."""
    def step(reading) -> None:
        command = law.update(round(driver.clock() * 1e9), reading.position, reading.velocity)
        effort = driver.gravity_torque(reading.position) if command is None \
            else command.effort
        driver.command_effort(effort[:7], ARM_JOINTS)

    return step


@pytest.mark.parametrize('plant', PLANTS)
def test_switches_and_the_hold_on_an_arm_unlike_the_model(tmp_path, plant):
    """The emulated arm 20 % heavier or lighter than the model, its servos' torque constant
    20 % off the other way, its armature twice the table's: the driver computes with the
    model. At the bent pose, in lockstep:

    * current mode under the shipped law (config/torque_mode.yaml's gains, holding the pose
      at enable) settles where the physics says: the law's torque, made by servos whose
      constant is ``s`` times the model's, balances gravity ``m`` times the model's
      within the joints' Coulomb friction;
    * the switch back to position mode moves the arm less than 10 mrad (the hold's goal
      carries the model's gravity deflection, (m - 1) g / K_s off: 7 mrad on the elbow);
    * the hold then drifts less than 1 mrad in 2 s; no fault at any point."""
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    mass, kt = PLANTS[plant]
    bus = next(bus_in_test(tmp_path, RATE_HZ,
                           f'mass={mass},torque_constant={kt},armature=2'))
    try:
        model = RobotModel.from_urdf(default_urdf_path())
        settings, law = shipped_torque_law(model, ramp_s=0.0)
        driver = lockstep_driver(bus)
        move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
        pose = driver.reading.position.copy()
        assert driver.request_mode('current')[0]
        loop(driver, 4.0, law_step(driver, law))
        settled = driver.reading.position.copy()
        # The static balance, the joints' coupling included: the servos make
        # s (g(q) + K (q_d - q)) where the arm needs m g(q); the URDF's Coulomb friction
        # (0.2 N*m a joint, in the emulated arm too) holds any pose whose imbalance is
        # inside it. At the pose of enable the imbalance (s - m) g is outside it on the tilt
        # and the elbow: the arm must have moved to where the balance holds.
        stiffness = np.asarray(settings.control.stiffness, dtype=float)[:7]
        friction = model.friction[model.joint_index(ARM_JOINTS)]

        def imbalance(q: np.ndarray) -> np.ndarray:
            g = driver.gravity_torque(q)[:7]
            return kt * (g + stiffness * (pose[:7] - q[:7])) - mass * g

        before, after = imbalance(pose), imbalance(settled)
        print(f'{plant}: moved {(settled[:7] - pose[:7]) * 1e3} mrad; imbalance '
              f'{before.round(3)} -> {after.round(3)} N*m (friction {friction[0]:g})')
        assert np.all(np.abs(before[[TILT, ELBOW]]) > friction[[TILT, ELBOW]])
        # one encoder count (1.5 mrad) of the reading times the tilt's K (10 N*m/rad) is
        # 0.015 N*m: the tolerance is two of them
        assert np.all(np.abs(after) <= friction + 0.03), after
        driver.request_mode('position')
        begin = time.monotonic()
        loop(driver, 1.0)
        middle = time.monotonic()
        loop(driver, 2.0)
        end = time.monotonic()
        assert not driver.fault and driver.modes == ['position'] * 8, driver.fault
        driver.close()
        record = bus.stop()
        switch_out, drift = largest_move(record, begin, middle), largest_move(record, middle,
                                                                              end)
        print(f'{plant}: switch out {switch_out * 1e3:.2f} mrad, hold drift '
              f'{drift * 1e3:.3f} mrad in 2 s')
        assert switch_out < HELD_RAD
        assert drift < 0.001
    finally:
        if bus.process.poll() is None:
            bus.process.kill()
            bus.process.wait()


def test_the_enable_ramp_meets_a_load_the_model_lacks_with_the_whole_spring(tmp_path):
    """The emulated arm 40 % heavier than the model (a payload it does not know of): the
    shipped law holds the bent pose in current mode, enabled over its 2 s ramp, then
    enabled at once, from the same pose on the same bus. Over the ramp and a second after
    it the arm moves no further than enabled at once (within 10 % and 5 mrad), and neither
    faults (before, the ramp scaled the spring from zero under the model's gravity: the
    arm sagged the length of the ramp, unseen, and the growing spring pulled it back)."""
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    bus = next(bus_in_test(tmp_path, RATE_HZ, 'mass=1.4'))
    try:
        model = RobotModel.from_urdf(default_urdf_path())
        driver = lockstep_driver(bus)
        windows = {}
        for ramp_s in (2.0, 0.0):
            move_to(driver, np.array(POSES['bent']), 1.0, 0.5)
            _, law = shipped_torque_law(model, ramp_s=ramp_s)
            assert law.config.ramp_s == ramp_s
            assert driver.request_mode('current')[0]
            begin = time.monotonic()
            loop(driver, ramp_s + 1.0, law_step(driver, law))
            windows[ramp_s] = begin, time.monotonic()
            assert not law.fault and not driver.fault, (law.fault, driver.fault)
            assert driver.request_mode('position')[0]
        driver.close()
        record = bus.stop()
        ramped, at_once = (largest_move(record, *windows[s]) for s in (2.0, 0.0))
        print(f'a load the model lacks: largest move {ramped * 1e3:.1f} mrad over the ramp, '
              f'{at_once * 1e3:.1f} mrad enabled at once')
        assert ramped <= 1.1 * at_once + 0.005
    finally:
        if bus.process.poll() is None:
            bus.process.kill()
            bus.process.wait()
