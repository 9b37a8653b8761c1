"""Dynamixel motor table of the CRANE-X7: stall torque, servo stiffness, current-to-effort.

The CRANE-X7 arm has eight Dynamixel X-series servos in position mode (operating mode 3),
one per arm joint plus finger a. Sources (facts only, no code copied):

* joint -> servo ID and model: rt-net/crane_x7_ros ``crane_x7_control/config/
  manipulator_config.yaml`` (joint1 = pan is an XM430, joint2 = tilt the only XM540) and
  ``manipulator_links.csv`` (model numbers XM430-W350 / XM540-W270); summarised with
  sources in ``shared/reference/crane_x7_params.yaml`` (``actuators:``).
* current-to-effort factor: rt-net/crane_x7_description ``urdf/crane_x7.ros2_control.xacro``
  ``current_to_effort`` 2.20 (XM430) and 3.60 (XM540) N*m/A; the driver
  (crane_x7_control ``src/crane_x7_hardware.cpp``) publishes ``effort = current * factor``.
* gains the driver writes: P = 800, I = D = 0 on activation, P = 5 on deactivation and
  shutdown (crane_x7_hardware.cpp ``START_*_GAIN`` / ``STOP_*_GAIN``).
* stall torque and current at 12 V: ROBOTIS e-manual (ROBOTIS-GIT/emanual
  ``_data/dxl_x_info.yml``): XM430-W350 4.1 N*m at 2.3 A, XM540-W270 10.6 N*m at 4.4 A, so
  a torque constant of about 1.78 / 2.41 N*m/A (the 1.783 / 2.409 of manipulator_links.csv).
  The driver's 2.20 / 3.60 are larger (origin not documented): its ``effort`` reads about
  1.24x / 1.49x the motor torque. :func:`effort_to_torque` undoes that.
* position loop: e-manual "Position P Gain" (address 84): ``KPP = P / 128``; the output is
  a PWM value whose full scale is the PWM limit 885 (e-manual "PWM Limit", address 36), and
  a stalled motor at full duty gives its stall torque. Encoder: 4096 pulses per turn.

Hence the servo acts, away from saturation, as a spring of stiffness

    K_s = P / 128 * stall_torque / 885 / (2 pi / 4096)  [N*m/rad]

(18.9 N*m/rad for an XM430-W350 at P = 800, 48.8 for the XM540-W270; 0.12 and 0.30 at
P = 5). This is a first-principles figure, not an identification: voltage, temperature,
friction and the motor's torque-current curve change it. Identify K_s on the arm (README,
"On the real CRANE-X7") and set ``servo_stiffness`` to the result.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ['ARM_JOINTS', 'DRIVER_P_GAIN', 'DRIVER_STOP_P_GAIN', 'GRIPPER_JOINT',
           'JOINT_MOTORS', 'MOTORS', 'PULSE_RAD', 'PWM_FULL_SCALE', 'Motor',
           'current_to_effort', 'effort_to_torque', 'known', 'motor_of', 'servo_stiffness',
           'stall_torque']

PWM_FULL_SCALE = 885.0
"""Dynamixel X-series PWM limit at 100 % duty (e-manual, PWM Limit)."""
PULSE_RAD = 2.0 * math.pi / 4096.0
"""Encoder step [rad]."""
DRIVER_P_GAIN = 800.0
"""Position P gain the ROS 2 driver writes on activation (crane_x7_hardware.cpp)."""
DRIVER_STOP_P_GAIN = 5.0
"""Position P gain the ROS 2 driver writes on deactivation and shutdown."""


class Motor(NamedTuple):
    """One Dynamixel model.

    Attributes:
        model: ROBOTIS model name.
        stall_torque: [N*m] at 12 V (e-manual).
        current_to_effort: [N*m/A], the factor the CRANE-X7 driver multiplies the
            present current by to publish ``effort``.
        torque_constant: [N*m/A], stall torque / stall current of the e-manual.
    """

    model: str
    stall_torque: float
    current_to_effort: float
    torque_constant: float

    def stiffness_per_p_gain(self) -> float:
        """K_s per unit of the Position P Gain register [N*m/rad]."""
        return self.stall_torque / 128.0 / PWM_FULL_SCALE / PULSE_RAD

    def stiffness(self, p_gain: float = DRIVER_P_GAIN) -> float:
        """Position-loop stiffness K_s [N*m/rad] at ``p_gain`` (register units)."""
        return p_gain * self.stiffness_per_p_gain()


MOTORS: dict[str, Motor] = {
    'XM430-W350': Motor('XM430-W350', 4.1, 2.20, 4.1 / 2.3),
    'XM540-W270': Motor('XM540-W270', 10.6, 3.60, 10.6 / 4.4),
}

ARM_JOINTS: tuple[str, ...] = (
    'crane_x7_shoulder_fixed_part_pan_joint',
    'crane_x7_shoulder_revolute_part_tilt_joint',
    'crane_x7_upper_arm_revolute_part_twist_joint',
    'crane_x7_upper_arm_revolute_part_rotate_joint',
    'crane_x7_lower_arm_fixed_part_joint',
    'crane_x7_lower_arm_revolute_part_joint',
    'crane_x7_wrist_joint',
)
"""The 7 arm joints, in the order of ``crane_x7_arm_controller``'s ``joints`` parameter
(crane_x7_ros crane_x7_control/config/crane_x7_controllers.yaml)."""
GRIPPER_JOINT = 'crane_x7_gripper_finger_a_joint'

JOINT_MOTORS: dict[str, str] = {name: 'XM430-W350' for name in (*ARM_JOINTS, GRIPPER_JOINT)}
JOINT_MOTORS['crane_x7_shoulder_revolute_part_tilt_joint'] = 'XM540-W270'


def motor_of(joint: str) -> Motor:
    """The motor driving ``joint``.

    Raises:
        KeyError: a joint that has no servo in the table (finger b is a mimic).
    """
    try:
        return MOTORS[JOINT_MOTORS[joint]]
    except KeyError as err:
        raise KeyError(f'joint {joint!r} has no servo in the CRANE-X7 motor table; known: '
                       f'{sorted(JOINT_MOTORS)}') from err


def known(joints: Sequence[str]) -> bool:
    """Whether every joint in ``joints`` is in the table."""
    return all(j in JOINT_MOTORS for j in joints)


def servo_stiffness(joints: Sequence[str], p_gain: float = DRIVER_P_GAIN) -> np.ndarray:
    """(len(joints),) position-loop stiffness K_s [N*m/rad] at ``p_gain``."""
    return np.array([motor_of(j).stiffness(p_gain) for j in joints])


def stall_torque(joints: Sequence[str]) -> np.ndarray:
    """(len(joints),) stall torque [N*m]: the servo's torque saturation."""
    return np.array([motor_of(j).stall_torque for j in joints])


def current_to_effort(joints: Sequence[str]) -> np.ndarray:
    """(len(joints),) the driver's current-to-effort factor [N*m/A]."""
    return np.array([motor_of(j).current_to_effort for j in joints])


def effort_to_torque(joints: Sequence[str]) -> np.ndarray:
    """(len(joints),) factor from the driver's ``effort`` to motor torque:
    torque_constant / current_to_effort (0.81 for the XM430-W350, 0.67 for the XM540-W270)."""
    return np.array([motor_of(j).torque_constant / motor_of(j).current_to_effort
                     for j in joints])
