"""The emulated servo chain without a pty: what each servo answers (the e-manual's rules,
``docs/concepts/servo-bus.md``), the faults for tests, and the firmware on the physics,
checked against closed forms (the profile's trapezoid, a spring's deflection under gravity)
and the simulator's own state."""
from __future__ import annotations

import math

import numpy as np
import pytest

from plag_ros.bus.chain_file import BusConfig
from plag_ros.bus.emulator.arm import BusArm
from plag_ros.bus.emulator.servo import (
    CURRENT_UNIT,
    OVERHEATING,
    OVERLOAD,
    PROFILE_ACCELERATION_UNIT,
    VELOCITY_UNIT,
)
from plag_ros.bus.protocol import ALERT, BROADCAST_ID, ErrorNumber, Instruction, PacketReader
from plag_ros.bus.protocol import encode as enc
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.motors import MOTORS, PULSE_RAD
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

DT = 0.002
IDS = list(range(2, 10))


@pytest.fixture(scope='module')
def model():
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture
def arm(model):
    return BusArm(Simulator(model, SimulatorConfig(dt=DT)), BusConfig.load())


def tx(arm, wire):
    """Send ``wire``; the status packets that come back, parsed."""
    reader = PacketReader()
    return [p for r in arm.receive(wire) for p in reader.feed(r.packet)]


def u(value, size):
    return int(value).to_bytes(size, 'little', signed=value < 0)


def write(arm, servo_id, address, value, size):
    replies = tx(arm, enc(servo_id, Instruction.WRITE, u(address, 2) + u(value, size)))
    return replies[0].error if replies else None


def read(arm, servo_id, address, size, signed=True):
    (p,) = tx(arm, enc(servo_id, Instruction.READ, u(address, 2) + u(size, 2)))
    return p.error, int.from_bytes(p.data, 'little', signed=signed) if p.data else None


def test_ping_and_the_tables_of_both_models(arm):
    replies = tx(arm, enc(BROADCAST_ID, Instruction.PING))
    assert [p.id for p in replies] == IDS
    models = {p.id: p.data[0] | p.data[1] << 8 for p in replies}
    assert models == {i: 1120 if i == 3 else 1020 for i in IDS}   # XM540-W270 on the tilt
    assert read(arm, 2, 38, 2) == (0, 1193) and read(arm, 3, 38, 2) == (0, 2047)
    assert read(arm, 2, 48, 4) == (0, 3834) and read(arm, 5, 52, 4) == (0, 228)
    assert read(arm, 2, 84, 2) == (0, 800) and read(arm, 2, 9, 1) == (0, 0)
    assert tx(arm, enc(1, Instruction.PING)) == []                # nobody has ID 1


@pytest.mark.parametrize('case', [
    # (address, value, size, error): what a write answers
    (0, 5, 2, ErrorNumber.ACCESS),            # Model Number is read only
    (14, 1, 1, ErrorNumber.ACCESS),           # no item at 14
    (116, 2048, 2, ErrorNumber.DATA_LENGTH),  # 2 of Goal Position's 4 bytes
    (116, 3835, 4, ErrorNumber.DATA_RANGE),   # above Max Position Limit (3834) in mode 3
    (102, 1194, 2, ErrorNumber.DATA_RANGE),   # Goal Current above Current Limit
    (102, -1194, 2, ErrorNumber.DATA_RANGE),
    (11, 2, 1, ErrorNumber.DATA_RANGE),       # no Operating Mode 2
    (84, 16384, 2, ErrorNumber.DATA_RANGE),   # Position P Gain 0-16383
    (84, 16383, 2, ErrorNumber.NONE),
    (116, 3834, 4, ErrorNumber.NONE),
])
def test_write_errors(arm, case):
    address, value, size, error = case
    before = read(arm, 2, address, size)[1]
    assert write(arm, 2, address, value, size) == error
    if error != ErrorNumber.NONE and error != ErrorNumber.ACCESS:
        assert read(arm, 2, address, size)[1] == before        # nothing written


def test_eeprom_locked_with_the_torque_on(arm):
    assert write(arm, 2, 38, 600, 2) == 0
    assert write(arm, 2, 64, 1, 1) == 0
    assert write(arm, 2, 38, 700, 2) == ErrorNumber.ACCESS
    assert read(arm, 2, 38, 2) == (0, 600)
    assert write(arm, 2, 64, 0, 1) == 0 and write(arm, 2, 38, 700, 2) == 0


def test_reads_past_the_table_crc_unknown_instruction_and_action(arm):
    (p,) = tx(arm, enc(2, Instruction.READ, u(660, 2) + u(4, 2)))
    assert p.error == ErrorNumber.ACCESS and p.data == b''
    bad = bytearray(enc(4, Instruction.READ, u(132, 2) + u(4, 2)))
    bad[-2] ^= 1
    (p,) = tx(arm, bytes(bad))
    assert p.id == 4 and p.error == ErrorNumber.CRC
    (p,) = tx(arm, enc(2, 0x77))
    assert p.error == ErrorNumber.INSTRUCTION
    (p,) = tx(arm, enc(2, Instruction.ACTION))
    assert p.error == ErrorNumber.INSTRUCTION
    (p,) = tx(arm, enc(2, Instruction.REG_WRITE, u(112, 2) + u(50, 4)))
    assert p.error == 0 and read(arm, 2, 69, 1) == (0, 1) and read(arm, 2, 112, 4) == (0, 0)
    (p,) = tx(arm, enc(2, Instruction.ACTION))
    assert p.error == 0 and read(arm, 2, 112, 4) == (0, 50) and read(arm, 2, 69, 1) == (0, 0)


def test_indirect_addresses_read_and_write_through(arm):
    for k, target in enumerate((132, 133, 134, 135, 126, 127)):
        assert write(arm, 6, 578 + 2 * k, target, 2) == 0
    for k, target in enumerate((116, 117, 118, 119)):
        assert write(arm, 6, 608 + 2 * k, target, 2) == 0
    (p,) = tx(arm, enc(6, Instruction.READ, u(634, 2) + u(6, 2)))
    (position,) = tx(arm, enc(6, Instruction.READ, u(132, 2) + u(4, 2)))
    (current,) = tx(arm, enc(6, Instruction.READ, u(126, 2) + u(2, 2)))
    assert p.data == position.data + current.data
    assert write(arm, 6, 649, 2500, 4) == 0 and read(arm, 6, 116, 4) == (0, 2500)
    # a write that covers only part of the item it reaches is a length error
    assert write(arm, 6, 649, 7, 2) == ErrorNumber.DATA_LENGTH
    assert write(arm, 6, 578, 10, 2) == ErrorNumber.DATA_RANGE     # EEPROM is not reachable


def test_a_mode_change_resets_the_profile_goal_current_and_gains(arm):
    assert write(arm, 2, 112, 100, 4) == 0 and write(arm, 2, 84, 1200, 2) == 0
    assert write(arm, 2, 102, 300, 2) == 0
    assert write(arm, 2, 11, 0, 1) == 0
    assert read(arm, 2, 112, 4) == (0, 0) and read(arm, 2, 84, 2) == (0, 800)
    assert read(arm, 2, 102, 2) == (0, 1193)
    assert write(arm, 2, 116, -1048576, 4) == ErrorNumber.DATA_RANGE  # +-1048575 off mode 3
    assert write(arm, 2, 11, 5, 1) == 0 and write(arm, 2, 116, -5000, 4) == 0


def test_status_return_level_and_broadcast(arm):
    assert write(arm, 2, 68, 1, 1) == 0                  # the reply to this write still comes
    assert tx(arm, enc(2, Instruction.WRITE, u(65, 2) + b'\x01')) == []
    assert read(arm, 2, 65, 1) == (0, 1)
    assert len(tx(arm, enc(2, Instruction.PING))) == 1
    tx(arm, enc(2, Instruction.WRITE, u(68, 2) + b'\x00'))
    assert tx(arm, enc(2, Instruction.READ, u(65, 2) + u(1, 2))) == []
    assert len(tx(arm, enc(2, Instruction.PING))) == 1
    # broadcast WRITE and READ are obeyed, not answered
    assert tx(arm, enc(BROADCAST_ID, Instruction.WRITE, u(65, 2) + b'\x01')) == []
    assert read(arm, 9, 65, 1) == (0, 1)
    assert tx(arm, enc(BROADCAST_ID, Instruction.READ, u(65, 2) + u(1, 2))) == []


def test_sync_and_bulk_reads_answer_in_the_instructions_order(arm):
    replies = tx(arm, enc(BROADCAST_ID, Instruction.SYNC_READ, u(0, 2) + u(2, 2)
                          + bytes((9, 3, 2, 1))))
    assert [p.id for p in replies] == [9, 3, 2]            # ID 1 is not on the bus
    bulk = bytes((5,)) + u(132, 2) + u(4, 2) + bytes((3,)) + u(0, 2) + u(2, 2)
    replies = tx(arm, enc(BROADCAST_ID, Instruction.BULK_READ, bulk))
    assert [(p.id, len(p.data)) for p in replies] == [(5, 4), (3, 2)]
    assert int.from_bytes(replies[1].data, 'little') == 1120
    sync = u(65, 2) + u(1, 2) + bytes((2, 1, 4, 1))
    assert tx(arm, enc(BROADCAST_ID, Instruction.SYNC_WRITE, sync)) == []
    assert read(arm, 2, 65, 1) == (0, 1) and read(arm, 4, 65, 1) == (0, 1)
    bw = bytes((7,)) + u(112, 2) + u(4, 2) + u(77, 4) + bytes((8,)) + u(65, 2) + u(1, 2) + b'\x01'
    assert tx(arm, enc(BROADCAST_ID, Instruction.BULK_WRITE, bw)) == []
    assert read(arm, 7, 112, 4) == (0, 77) and read(arm, 8, 65, 1) == (0, 1)


def test_hardware_error_alert_shutdown_and_reboot(arm):
    servo = arm.chain.servo(4)
    assert write(arm, 4, 64, 1, 1) == 0
    servo.hardware_error(OVERLOAD)
    assert read(arm, 4, 64, 1) == (ALERT, 0)                 # shutdown: the torque is off
    assert read(arm, 4, 70, 1) == (ALERT, OVERLOAD)
    assert write(arm, 4, 64, 1, 1) == ALERT and read(arm, 4, 64, 1)[1] == 0
    (p,) = tx(arm, enc(4, Instruction.PING))
    assert p.error == ALERT
    (p,) = tx(arm, enc(4, Instruction.REBOOT))
    assert p.error == ALERT                                  # answered, then rebooted
    assert read(arm, 4, 70, 1) == (0, 0)
    assert write(arm, 4, 64, 1, 1) == 0 and read(arm, 4, 64, 1) == (0, 1)
    servo.hardware_error(OVERHEATING)
    arm.step(DT)
    assert read(arm, 4, 146, 1)[1] == 81                     # above the Temperature Limit 80
    # Shutdown without the overheating bit: the error is reported, the torque stays
    tx(arm, enc(4, Instruction.REBOOT))
    assert write(arm, 4, 63, OVERLOAD, 1) == 0 and write(arm, 4, 64, 1, 1) == 0
    servo.hardware_error(OVERHEATING)
    assert read(arm, 4, 64, 1) == (ALERT, 1)


def test_bus_watchdog(arm):
    assert write(arm, 2, 98, 5, 1) == 0                      # 100 ms
    for _ in range(40):                                      # torque off: never expires
        arm.step(DT * 5)
    assert read(arm, 2, 98, 1, signed=True) == (0, 5)
    assert write(arm, 2, 64, 1, 1) == 0
    for _ in range(10):                                      # a packet every 40 ms
        for _ in range(20):
            arm.step(DT)
        read(arm, 5, 7, 1)                                   # any packet feeds it
    assert read(arm, 2, 98, 1, signed=True) == (0, 5)
    for _ in range(52):                                      # 104 ms of silence
        arm.step(DT)
    assert read(arm, 2, 98, 1, signed=True) == (0, -1)
    present = read(arm, 2, 132, 4)[1]
    assert read(arm, 2, 116, 4) == (0, present)              # it stopped where it was
    assert write(arm, 2, 116, 2100, 4) == ErrorNumber.DATA_RANGE
    assert write(arm, 2, 102, 10, 2) == ErrorNumber.DATA_RANGE
    assert write(arm, 2, 98, 0, 1) == 0
    assert write(arm, 2, 116, 2100, 4) == 0


def test_reply_faults_and_a_dead_bus(arm):
    ping = enc(3, Instruction.PING)
    arm.chain.fault(3).drop = 2
    assert tx(arm, ping) == [] and tx(arm, ping) == [] and len(tx(arm, ping)) == 1
    arm.chain.fault(3).corrupt = 1
    raw = arm.receive(ping)
    assert len(raw) == 1 and PacketReader().feed(raw[0].packet)[0].reason == 'crc'
    arm.chain.fault(3).late = 0.004
    assert arm.receive(ping)[0].delay == pytest.approx(0.004)
    arm.chain.fault(3).late = 0.0
    arm.chain.fault(3).silent = True
    assert tx(arm, ping) == []
    assert write(arm, 2, 65, 1, 1) == 0
    arm.chain.powered = False
    assert tx(arm, enc(2, Instruction.PING)) == []
    tx(arm, enc(2, Instruction.WRITE, u(65, 2) + b'\x00'))    # not heard
    arm.chain.powered = True
    assert read(arm, 2, 65, 1) == (0, 1)                     # state kept


# ---------------------------------------------------------------------- firmware on physics
BENT = np.array([0.0, 0.6, 0.0, -1.2, 0.0, 0.5, 0.0, 0.0])


def _bent_arm(model):
    sim = Simulator(model, SimulatorConfig(dt=DT))
    sim.reset(BENT)
    return BusArm(sim, BusConfig.load()), sim


def _present(arm):
    return np.array([read(arm, i, 132, 4)[1] for i in IDS])


def test_position_mode_holds_with_the_spring_of_its_p_gain(model):
    arm, sim = _bent_arm(model)
    goal = _present(arm)
    assert np.array_equal(goal, 2048 + np.round(BENT / PULSE_RAD))      # encoder counts
    for i in IDS:
        assert write(arm, i, 64, 1, 1) == 0
    for _ in range(1000):                                                # 2 s
        arm.step(DT)
    q = sim.state.q[:8]
    gravity = sim.gravity_effort()
    stiffness = np.array([s.motor.stall_torque for s in arm.servos]) * 800 / 128 / 885 \
        / PULSE_RAD                                          # e-manual: KPP = P / 128
    goal_q = (goal - 2048) * PULSE_RAD
    # at rest the spring carries gravity, but for what the joint's Coulomb friction holds
    residual = np.abs(stiffness * (goal_q - q) - gravity)
    assert np.all(residual <= sim.coulomb + 1e-3), (residual, sim.coulomb)
    assert np.all(np.abs(sim.state.qd[:8]) < 1e-9)
    assert abs(gravity[1]) > 0.5                             # the tilt carries the arm
    # Present Current reads back that torque through the torque constant
    kt = np.array([s.motor.torque_constant for s in arm.servos])
    current = np.array([read(arm, i, 126, 2)[1] for i in IDS]) * CURRENT_UNIT
    assert np.all(np.abs(current * kt - sim.state.effort) <= kt * CURRENT_UNIT / 2 + 1e-12)
    np.testing.assert_array_equal(_present(arm), 2048 + np.round(q / PULSE_RAD))


def test_current_mode_makes_the_torque_of_goal_current(model):
    arm, sim = _bent_arm(model)
    kt = np.array([s.motor.torque_constant for s in arm.servos])
    gravity = sim.gravity_effort()
    for k, i in enumerate(IDS):
        assert write(arm, i, 11, 0, 1) == 0
        assert write(arm, i, 102, round(gravity[k] / kt[k] / CURRENT_UNIT), 2) == 0
        assert write(arm, i, 64, 1, 1) == 0
    for _ in range(1000):
        arm.step(DT)
    assert np.max(np.abs(sim.state.q[:8] - BENT)) < 0.01      # gravity compensated: holds
    assert np.all(np.abs(sim.state.effort - gravity) <= kt * CURRENT_UNIT / 2 + 1e-12)
    # without the current the tilt falls
    assert write(arm, 3, 102, 0, 2) == 0
    for _ in range(100):
        arm.step(DT)
    assert sim.state.q[1] - BENT[1] > 0.05
    # Current Limit caps it: 100 units on the tilt's XM540
    assert write(arm, 3, 64, 0, 1) == 0 and write(arm, 3, 38, 100, 2) == 0
    assert write(arm, 3, 102, 101, 2) == ErrorNumber.DATA_RANGE


def test_profile_velocity_and_acceleration_make_the_trapezoid(model):
    arm, sim = _bent_arm(model)
    v_units, a_units, distance = 50, 20, 1000                # counts
    assert write(arm, 8, 112, v_units, 4) == 0 and write(arm, 8, 108, a_units, 4) == 0
    assert write(arm, 8, 64, 1, 1) == 0
    start = read(arm, 8, 132, 4)[1]
    assert write(arm, 8, 116, start + distance, 4) == 0
    v = v_units * VELOCITY_UNIT / PULSE_RAD                  # counts/s
    a = a_units * PROFILE_ACCELERATION_UNIT / PULSE_RAD
    duration = distance / v + v / a                          # trapezoid (v^2 / a < distance)
    assert v * v / a < distance
    t0 = sim.t

    def trapezoid(t):                                        # counts moved after t seconds
        t1 = v / a
        if t <= t1:
            return a * t * t / 2
        if t <= duration - t1:
            return v * t1 / 2 + v * (t - t1)
        if t <= duration:
            return distance - a * (duration - t) ** 2 / 2
        return distance

    t = []
    for _ in range(round(1.5 * duration / DT)):
        arm.step(DT)
        t.append((sim.t, read(arm, 8, 140, 4)[1], read(arm, 8, 136, 4)[1]))
    error = [abs(position - start - trapezoid(time - t0)) for time, position, _ in t]
    assert max(error) < v * DT + 1                           # a step's travel, and rounding
    peak = max(velocity for _, _, velocity in t)
    assert peak == v_units                                   # Velocity Trajectory, 0.229 rpm
    assert math.isclose(t[-1][2], 0)
    assert abs(read(arm, 8, 132, 4)[1] - (start + distance)) < 40    # the joint followed


def test_torque_constant_is_the_data_sheets():
    assert MOTORS['XM430-W350'].torque_constant == pytest.approx(4.1 / 2.3)
    assert MOTORS['XM540-W270'].torque_constant == pytest.approx(10.6 / 4.4)
