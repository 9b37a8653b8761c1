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
* no-load speed at 12 V (same file, ``noloadspeed``): 46 rev/min (4.82 rad/s, the URDF's
  velocity limit) for the XM430-W350, 30 rev/min (3.14 rad/s) for the XM540-W270.
* continuous torque: the e-manual publishes none for X-series servos. Its note on the
  performance graphs (``_includes/en/dxl/note_performance_graph.md`` at 2f0e8dfa) calls the
  stall torque "the momentary torque that it can reach" and the graph's maximum lower; the
  Goal Current item warns that a high current held long "might damage the motor"; and the
  default Shutdown (63) = 52 turns the torque off on Overload ("persistent load that
  exceeds maximum output") and Overheating. The package's figure is half the stall torque
  (:data:`CONTINUOUS_FRACTION`: 2.05 N*m for the XM430-W350, 5.3 for the XM540-W270): a
  quarter of the stall current's copper loss, and 1.46x or more of the largest gravity
  torque the CRANE-X7's model asks of each joint (tilt 3.62 N*m, rotate 1.32; over 2000
  random poses within the limits). The 1/5 rule of ROBOTIS' AX pages (the e-manual's
  ``ax-12a.md`` at 486d85b1) would not hold the arm (0.82 N*m on the elbow).
* gear ratio (e-manual ``_data/dxl_x_info.yml`` at 00280385, ``gearratio``): 353.5:1
  (XM430-W350), 272.5:1 (XM540-W270).
* armature, the rotor's inertia reflected through the gear [kg*m^2 at the joint]: no
  source publishes or has identified it for these two servos. The nominal figure is scaled
  from the Dynamixels that Rhoban's BAM identified (Rhoban/bam ``bam/params/<servo>/
  m*.json`` ``armature`` at ea216102: MX-64 0.0117 at 200:1, MX-106 0.0258 at 225:1, XL330
  0.0019 at 288.35:1): their rotor inertia per unit of motor-side stall torque (stall
  torque / gear ratio) is 1.0-1.4e-8 kg*m^2 per mN*m, which gives 0.014-0.020 for the
  XM430-W350 (11.6 mN*m) and 0.028-0.040 for the XM540-W270 (38.9 mN*m). Nominal 0.016 and
  0.035 with a relative uncertainty of +-50 %. The stability analysis and the gain check use
  the low end (:func:`armature` ``bound='low'``): a model heavier than the arm lets through
  gains the arm cannot take. Identify it (``plag-ros identify`` fits armature) before
  raising effort-path gains.
* torque constant, both published figures: the e-manual's stall torque over stall current
  (1.783 / 2.409 N*m/A, also rt_manipulators_cpp ``samples/samples03/config/
  crane-x7_links.csv`` column "torque constant" at faa42591) and crane_x7_description's
  ``current_to_effort`` (2.20 / 3.60, origin not documented). The servo emulator and the
  torque-mode driver's effort-to-current conversion use the first
  (:attr:`Motor.torque_constant`); ``joint_states`` effort keeps the robot driver's
  convention (:attr:`Motor.current_to_effort`). An identified ``effort_scale`` multiplies
  the first in both places.
* position loop: e-manual "Position P Gain" (address 84): ``KPP = P / 128``; the output is
  a PWM value whose full scale is the PWM limit 885 (e-manual "PWM Limit", address 36), and
  a stalled motor at full duty gives its stall torque. Encoder: 4096 pulses per turn.

Hence the servo acts, away from saturation, as a spring of stiffness

    K_s = P / 128 * stall_torque / 885 / (2 pi / 4096)  [N*m/rad]

(18.9 N*m/rad for an XM430-W350 at P = 800, 48.8 for the XM540-W270; 0.12 and 0.30 at
P = 5). This is a first-principles figure, not an identification: voltage, temperature,
friction and the motor's torque-current curve change it. Identify K_s on the arm
(docs/tutorials/identify.md) and set ``servo_stiffness`` to the result.

With D = 0 the loop's damping is the motor's back-EMF under PWM drive: the torque falls
from the stall torque at zero speed to zero at the no-load speed, which the URDF velocity
limit matches (46 rpm = 4.82 rad/s), so ``c_s = stall_torque / velocity_limit`` (0.85
N*m*s/rad for the XM430-W350). The motor's torque saturates at its stall torque.

This module is the one servo model: the controller (:mod:`plag_ros.core.control.impedance`), the
stability analysis (:mod:`plag_ros.core.control.stability`) and the simulator
(:mod:`plag_ros.core.simulation.simulator`) all take K_s, c_s and the saturation from
:func:`servo_gains` and :func:`servo_saturation`. Joints outside the table (other robots)
get the same formulas on their URDF effort limit in place of the stall torque.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from plag_ros.core.dynamics.model import RobotModel

__all__ = ['ARM_JOINTS', 'CONTINUOUS_FRACTION', 'armature', 'DEFAULT_POSITION_RESOLUTION',
           'DEFAULT_VELOCITY_RESOLUTION',
           'DRIVER_P_GAIN', 'DRIVER_STOP_P_GAIN', 'GRIPPER_JOINT',
           'JOINT_MOTORS', 'MOTORS', 'PULSE_RAD', 'PWM_FULL_SCALE', 'Motor',
           'back_emf_damping', 'current_to_effort', 'driver_effort_to_torque',
           'effort_to_torque', 'known', 'motor_of',
           'position_loop_stiffness', 'servo_continuous_torque', 'servo_gains',
           'servo_saturation', 'servo_stiffness',
           'stall_torque']

PWM_FULL_SCALE = 885.0
"""Dynamixel X-series PWM limit at 100 % duty (e-manual, PWM Limit)."""
PULSE_RAD = 2.0 * math.pi / 4096.0
"""Encoder step [rad]."""
DEFAULT_POSITION_RESOLUTION = PULSE_RAD
"""Dynamixel encoder step [rad] (4096 pulses per revolution)."""
DEFAULT_VELOCITY_RESOLUTION = 0.02398
"""Dynamixel velocity step [rad/s] (0.229 rev/min per LSB)."""
DRIVER_P_GAIN = 800.0
"""Position P gain the ROS 2 driver writes on activation (crane_x7_hardware.cpp)."""
DRIVER_STOP_P_GAIN = 5.0
"""Position P gain the ROS 2 driver writes on deactivation and shutdown."""


def position_loop_stiffness(stall_torque: float | np.ndarray, p_gain: float = DRIVER_P_GAIN
                            ) -> float | np.ndarray:
    """Position-loop stiffness K_s [N*m/rad] of a Dynamixel X servo:
    ``p_gain / 128 * stall_torque / PWM_FULL_SCALE / PULSE_RAD`` (module docstring).

    Args:
        stall_torque: [N*m], scalar or per joint.
        p_gain: Position P Gain register value.
    """
    return p_gain / 128.0 * stall_torque / PWM_FULL_SCALE / PULSE_RAD


def back_emf_damping(stall_torque: float | np.ndarray, no_load_speed: float | np.ndarray
                     ) -> float | np.ndarray:
    """Back-EMF damping c_s [N*m*s/rad] of a PWM-driven motor: ``stall_torque /
    no_load_speed`` (torque falls linearly from stall at rest to zero at no-load speed)."""
    return stall_torque / no_load_speed


class Motor(NamedTuple):
    """One Dynamixel model.

    Attributes:
        model: ROBOTIS model name.
        stall_torque: [N*m] at 12 V (e-manual).
        current_to_effort: [N*m/A], the factor the CRANE-X7 driver multiplies the
            present current by to publish ``effort``.
        torque_constant: [N*m/A], stall torque / stall current of the e-manual.
        gear_ratio: output turns per motor turn, inverted (353.5 for 353.5:1).
        armature: [kg*m^2] nominal reflected rotor inertia at the joint.
        armature_uncertainty: relative half-width of the armature's range.
        no_load_speed: [rad/s] at 12 V (e-manual).
    """

    model: str
    stall_torque: float
    current_to_effort: float
    torque_constant: float
    gear_ratio: float = 1.0
    armature: float = 0.0
    armature_uncertainty: float = 0.0
    no_load_speed: float = math.inf

    @property
    def continuous_torque(self) -> float:
        """[N*m] the torque the package lets a servo make for as long as it is asked:
        half the stall torque (module docstring, "continuous torque")."""
        return CONTINUOUS_FRACTION * self.stall_torque

    def stiffness_per_p_gain(self) -> float:
        """K_s per unit of the Position P Gain register [N*m/rad]."""
        return self.stiffness(1.0)

    def stiffness(self, p_gain: float = DRIVER_P_GAIN) -> float:
        """Position-loop stiffness K_s [N*m/rad] at ``p_gain`` (register units)."""
        return float(position_loop_stiffness(self.stall_torque, p_gain))


MOTORS: dict[str, Motor] = {
    'XM430-W350': Motor('XM430-W350', 4.1, 2.20, 4.1 / 2.3, 353.5, 0.016, 0.5,
                        46 * 2 * math.pi / 60),
    'XM540-W270': Motor('XM540-W270', 10.6, 3.60, 10.6 / 4.4, 272.5, 0.035, 0.5,
                        30 * 2 * math.pi / 60),
}
CONTINUOUS_FRACTION = 0.5
"""The continuous torque as a fraction of the stall torque (module docstring)."""

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


def driver_effort_to_torque(model: RobotModel) -> np.ndarray:
    """(n,) factor from a joint's ``joint_states`` effort to its torque [N*m per effort unit].

    The motor table's :func:`effort_to_torque` for CRANE-X7 joints; 1 for others (their
    effort is taken as torque, the JointState convention); times the model's identified
    ``effort_calibration`` where it has one. Every reader of the driver's effort (the
    friction report, the impedance node's monitor, ``plag-ros identify``) and the
    simulator's driver, which writes it, use this one figure.
    """
    scale = np.array([effort_to_torque([j])[0] if known([j]) else 1.0
                      for j in model.joint_names])
    if model.effort_calibration is not None:
        scale = scale * model.effort_calibration
    return scale


def armature(model: RobotModel, bound: str = 'nominal') -> np.ndarray:
    """(m,) armature [kg*m^2] of the model's actuated joints from the motor table (0 for
    joints outside it).

    Args:
        bound: ``'nominal'``, or ``'low'``: nominal times (1 - uncertainty), the end that
            allows the smaller gains (the stability analysis and the gain check).
    """
    if bound not in ('nominal', 'low'):
        raise ValueError(f"bound must be 'nominal' or 'low', got {bound!r}")
    out = []
    for j in np.flatnonzero(model.actuated):
        name = model.joint_names[j]
        if not known([name]):
            out.append(0.0)
            continue
        motor = motor_of(name)
        low = 1.0 - motor.armature_uncertainty if bound == 'low' else 1.0
        out.append(motor.armature * low)
    return np.array(out)


def servo_saturation(model: RobotModel) -> np.ndarray:
    """(m,) motor torque limit [N*m] of the model's actuated joints: the table's stall
    torque for CRANE-X7 joints, else the URDF effort limit."""
    return _table_or_urdf(model, lambda motor: motor.stall_torque)


def servo_continuous_torque(model: RobotModel) -> np.ndarray:
    """(m,) torque [N*m] the model's actuated joints may be asked for as long as a
    controller likes: the table's :attr:`Motor.continuous_torque` (half the stall torque)
    for CRANE-X7 joints, else the URDF effort limit."""
    return _table_or_urdf(model, lambda motor: motor.continuous_torque)


def _table_or_urdf(model: RobotModel, figure: Callable[[Motor], float]) -> np.ndarray:
    """(m,) ``figure`` of each actuated joint's motor where the table has every one, else
    the URDF effort limits [N*m]."""
    act = np.flatnonzero(model.actuated)
    names = [model.joint_names[j] for j in act]
    if known(names):
        return np.array([figure(motor_of(name)) for name in names])
    return model.effort_limit[act].copy()


def servo_gains(model: RobotModel, p_gain: float = DRIVER_P_GAIN
                ) -> tuple[np.ndarray, np.ndarray]:
    """Servo stiffness and damping of the model's actuated joints at a Dynamixel P gain.

    ``Kp`` = :func:`position_loop_stiffness` and ``Kd`` = :func:`back_emf_damping` of the
    :func:`servo_saturation` torque, the URDF velocity limit standing for the no-load speed.
    These are rotary-servo figures; for prismatic joints give the gains yourself.

    Args:
        model: the robot; its actuated joints need finite effort and velocity limits.
        p_gain: Dynamixel Position P Gain register value.

    Returns:
        kp [N*m/rad], kd [N*m*s/rad]: (m,) for the actuated joints in model order.

    Raises:
        ValueError: an actuated joint without finite positive effort or velocity limit.
    """
    act = np.flatnonzero(model.actuated)
    effort, velocity = servo_saturation(model), model.velocity_limit[act]
    bad = [model.joint_names[j] for j, e, v in zip(act, effort, velocity)
           if not (np.isfinite(e) and e > 0.0 and np.isfinite(v) and v > 0.0)]
    if bad:
        raise ValueError(f'joints {bad} lack finite effort/velocity limits: give kp and kd')
    return (np.asarray(position_loop_stiffness(effort, p_gain)),
            np.asarray(back_emf_damping(effort, velocity)))
