"""The partial-impedance controller's configuration: gains, masks, interfaces, limits.

:class:`ImpedanceConfig` is everything :class:`~plag_ros.core.control.impedance.
PartialImpedanceController` is told (the law itself, with its equations, is documented
there); :func:`propagation_mask` turns named propagation paths (``'target<-source'``) into
the masks ``W`` of that law ([MPF] eq. 1). Validation happens here, once, so a controller
never runs on a configuration it would have to second-guess.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from plag_ros.core.common.options import group, option
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import ModelParameters
from plag_ros.core.estimation.filters import EstimatorConfig

__all__ = ['CONTROL_ESTIMATOR', 'REFERENCE_MAX_ACCELERATION', 'REFERENCE_MAX_VELOCITY',
           'SERVO_STIFFNESS_TOLERANCE', 'CommandInterface', 'ControlState',
           'FaultAction', 'FaultLimits', 'GainCheckMode', 'ImpedanceConfig', 'MotionSource',
           'OscillationLimits', 'propagation_mask']

CommandInterface = Literal['effort', 'position']
MotionSource = Literal['desired', 'measured']
FaultAction = Literal['hold', 'zero']
GainCheckMode = Literal['refuse', 'warn', 'off']
ControlState = Literal['waiting', 'disabled', 'ramping', 'enabled', 'fault']
"""``waiting``: no valid state yet (nothing commanded); ``disabled``/``fault``: hold;
``ramping``/``enabled``: impedance law with ``alpha < 1`` / ``alpha == 1``."""

_ARRAY_FIELDS = ('stiffness', 'damping', 'inertia', 'max_position_step')
REFERENCE_MAX_VELOCITY = 1.0
"""[rad/s] the default speed limit of a point reference's approach (the node's
``reference.max_velocity``)."""
REFERENCE_MAX_ACCELERATION = 4.0
"""[rad/s^2] and its default acceleration limit (``reference.max_acceleration``)."""
SERVO_STIFFNESS_TOLERANCE = 0.2
"""A configured K_s further than this fraction from the motor table's is reported."""

CONTROL_ESTIMATOR = EstimatorConfig(cutoff_hz=10.0, order=2)
"""The controller's default estimator. Order 2 at 10 Hz, not the display's order 3: the
damping term sees the velocity through the filter, and every bit of its lag is phase the
sampled loop loses. With the shipped gains on the CRANE-X7's position path this keeps a
gain margin of 2 or more at 200 and 100 Hz (``bench/bench_stability.py``); order 3 at
15 Hz (shipped before) leaves 1.7 and 1.45."""

def _frozen_optional(x: ArrayLike | None, name: str,
                     ndim: Sequence[int]) -> np.ndarray | None:
    return None if x is None else _frozen(x, name, ndim)


def _frozen(x: ArrayLike | None, name: str, ndim: Sequence[int]) -> np.ndarray:
    if x is None:
        raise ValueError(f'ImpedanceConfig.{name} must be numeric, got None')
    try:
        a = np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f'ImpedanceConfig.{name} must be numeric, got {x!r}') from err
    if a.ndim not in ndim:
        raise ValueError(f'ImpedanceConfig.{name} must have {" or ".join(map(str, ndim))} '
                         f'dimensions, got shape {a.shape}')
    if not np.isfinite(a).all():
        raise ValueError(f'ImpedanceConfig.{name} must be finite, got {a.tolist()}')
    a.setflags(write=False)
    return a


_PER_JOINT = (' (one value for every joint, or one per actuated joint in model order; on the '
              'CRANE-X7 the 7 arm joints, then finger a)')


def _off_if_not_positive(value: float) -> float:
    return value if value > 0.0 else math.inf


def _number(value: object) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, bool)


@dataclass(frozen=True)
class FaultLimits:
    """``fault.*``: the latched faults of the servo loop's monitor (0 or less turns a check
    off). :meth:`limit` gives a check's threshold, infinite when off.

    Raises:
        ValueError: a NaN or a negative persistence.
    """

    tracking_error: float = option(
        0.3, 'latched fault when |q_cmd - q| of a commanded joint exceeds this [rad] for '
        'fault.persist_s (position interface, while the law runs); 0 or less: off',
        low=-1.0, high=10.0)
    effort_error: float = option(
        1.5, 'latched fault when |effort - K_s (q_cmd - q)| exceeds this [N*m] for '
        'fault.persist_s (servo gain lost, e.g. P=5); 0 or less: off', low=-1.0, high=100.0)
    persist_s: float = option(0.1, 'how long a fault limit must be exceeded without a break '
                              '[s]', low=0.0, high=10.0)
    saturation_travel: float = option(
        0.05, 'latched fault when a joint on the effort path moves this far [rad] against its '
        'effort while the effort is clipped (a load the servo cannot carry: the arm sags), '
        'measured from where the clip began; 0 or less: off', low=-1.0, high=10.0)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not _number(value) or math.isnan(value):
                raise ValueError(f'fault.{f.name} must be a number, got {value!r}')
        if self.persist_s < 0.0 or math.isinf(self.persist_s):
            raise ValueError(f'fault.persist_s must be finite and >= 0, got {self.persist_s!r}')

    def limit(self, name: Literal['tracking_error', 'effort_error', 'saturation_travel']
              ) -> float:
        """The threshold of check ``name`` [rad or N*m]; inf where it is off."""
        return _off_if_not_positive(float(getattr(self, name)))


@dataclass(frozen=True)
class OscillationLimits:
    """``oscillation.*``: the oscillation monitor
    (:class:`plag_ros.core.control.oscillation.OscillationMonitor`).

    Raises:
        ValueError: a count of 1 or below 0, or a window that is not positive.
    """

    reversals: int = option(
        8, 'latched fault when a joint reverses this many times within oscillation.window_s '
        '(plag_ros/core/control/oscillation.py); 0: off', low=0, high=1000)
    window_s: float = option(0.8, 'the oscillation monitor window [s]', low=0.05, high=60.0)

    def __post_init__(self) -> None:
        if isinstance(self.reversals, bool) or not isinstance(self.reversals, (int, np.integer)) \
                or self.reversals == 1 or self.reversals < 0:
            raise ValueError('oscillation.reversals must be 0 (off) or an integer >= 2, got '
                             f'{self.reversals!r}')
        if not (_number(self.window_s) and 0.0 < self.window_s < math.inf):
            raise ValueError(f'oscillation.window_s must be > 0, got {self.window_s!r}')


@dataclass(frozen=True, eq=False)
class ImpedanceConfig:
    """Gains, compensation masks and safety limits of the partial-impedance controller.

    Every setting a user tunes is declared here once, with :func:`~plag_ros.core.common.
    options.option` (its default, description with the unit and range): the node
    ``plag_impedance`` takes these as its parameters under the same names
    (:class:`~plag_ros.core.control.settings.ImpedanceSettings` embeds this class and adds
    only what is the node's own), so a library user and the node start from the same
    defaults. The fields without an option (masks, monitored joints, armature, estimator,
    slew limits) are derived by the caller: the node from its named paths, joints, filter
    and reference settings.

    Per-joint figures are scalars (same for every joint) or (n_act,) arrays over the
    actuated joints in model order (mimic joints excluded); a one-element list counts as a
    scalar. Masks are over the full model coordinates. Shapes against a model are checked
    by :class:`PartialImpedanceController`.

    Attributes:
        stiffness: K [N*m/rad], >= 0.
        damping: D [N*m*s/rad], >= 0.
        inertia: target inertia Md [kg*m^2], >= 0; 0 keeps the natural inertia.
        servo_stiffness: K_s [N*m/rad] >= 0 of the servos' position loop (position only);
            a joint's 0 (the default; None is the same) takes the servo model's
            (:func:`plag_ros.core.dynamics.motors.servo_gains`: the CRANE-X7 motor table,
            :mod:`plag_ros.core.dynamics.motors`, at the P gain 800 the driver writes). A
            value further than :data:`SERVO_STIFFNESS_TOLERANCE` from the table is reported
            in :attr:`PartialImpedanceController.warnings`.
        max_position_step: largest position command change per cycle [rad], > 0.
        gravity_compensation: add g(q).
        acceleration_mask: W_acc, (n, n) over (joint k, source s) or (n, B, n) over
            (k, body i, s), weights in [0, 1] (1 = compensate that path). None = zeros.
        velocity_mask: W_vel, same shapes.
        motion_source: ``'desired'`` or ``'measured'`` motion in the decomposition.
        command_interface: ``'position'`` (the CRANE-X7's driver) or ``'effort'``.
        armature: (n_act,) reflected rotor inertia [kg*m^2] >= 0 the gain check puts on each
            joint's loop on the effort path; None takes the low end of the motor table's
            range (:func:`plag_ros.core.dynamics.motors.armature`); an identified.yaml's
            figures come in through :meth:`with_model_parameters`.
        effort_scale: fraction of the effort limits allowed, in (0, 1]: on the effort
            interface of the smaller of the URDF limit and the servo's continuous torque
            (motor table), on the position interface of the URDF limit.
        rate_hz: nominal joint_states / control rate [Hz].
        stale_periods: hold when no valid state for this many periods, > 1.
        ramp_s: enable ramp duration [s], >= 0, after an enable or a resume: the set point
            moves from the pose where the ramp began to the reference (a point reference
            with slew limits through its slew), the compensation rises from zero, under
            the whole spring and damper; longer where the set point would move faster
            than ``reference_max_velocity`` (a resume far from the reference).
        fault_action: effort interface hold: ``'zero'`` effort or open-loop gravity
            ``'hold'``.
        resume_after_fault: re-ramp automatically when a fault clears (else, the default,
            disable: nothing takes the arm on its own); a driver outage (the node's
            ``input_loss_s``) never re-ramps.
        start_enabled: enable as soon as the first valid state arrives.
        fault: the servo monitor's latched-fault limits (:class:`FaultLimits`).
        monitored: (n_act,) bools, joints the monitor checks (those actually commanded),
            the only ones a resume waits for and judges against the hold; None = all.
        estimator: settings of the joint state estimator run inside the controller
            (default :data:`CONTROL_ESTIMATOR`).
        gain_check: what to do with a commanded joint whose (K, D) have a gain margin below
            :data:`plag_ros.core.control.stability.MIN_GAIN_MARGIN` in the sampled loop
            (:mod:`plag_ros.core.control.stability`): ``'refuse'`` (ValueError naming the joint,
            the gains and the bounds), ``'warn'`` (:attr:`PartialImpedanceController.warnings`) or
            ``'off'``.
        delay_periods: sample-to-command delay the gain check assumes [periods] (3.0: a
            reading's command is written at the driver's next cycle, at the 99th percentile
            the one after: p99 2.0-2.6, the worst 5 s window 2.84, once 3.57, measured through DDS
            with the driver in its own process, ``bench/bench_command_delay.py``;
            config/torque_mode.yaml assumes 4.0, beyond its worst window).
        oscillation: the oscillation monitor's settings (:class:`OscillationLimits`).
        reference_max_velocity: (n_act,) or scalar > 0 [rad/s]: a point reference
            (``set_reference(q=...)``, the node's ``~/reference``) is approached at most this
            fast, from the set point in force
            (:func:`~plag_ros.core.control.references.slew_step`); None (with
            ``reference_max_acceleration``): the point at once.
        reference_max_acceleration: (n_act,) or scalar > 0 [rad/s^2]: and at most this hard.

    Raises:
        ValueError: a field is out of range; the message names it.
    """

    command_interface: CommandInterface = option(
        'position', "'position' (the real CRANE-X7 driver: it has no effort interface) or "
        "'effort' (simulator, or plag_driver's current mode)", read_only=True)
    rate_hz: float = option(200.0, 'nominal joint_states rate and watchdog rate [Hz]',
                            low=1.0, high=10000.0, read_only=True)
    stale_periods: float = option(5.0, 'hold when no valid joint state for this many '
                                  'periods', low=1.01, high=1000.0)
    ramp_s: float = option(2.0, 'set point and compensation ramp after enable or a cleared '
                           'fault [s]', low=0.0, high=60.0)
    start_enabled: bool = option(False, 'enable at the first valid joint state (the node, '
                                 'with a switch: tried every 0.1 s for switch.timeout_s)',
                                 read_only=True)
    fault_action: FaultAction = option(
        'zero', "effort interface while holding: 'zero' effort or open-loop gravity 'hold' "
        '(the position interface always holds the last valid position)')
    resume_after_fault: bool = option(False, 're-ramp when a fault clears (else disable and '
                                      'hand the arm back until ~/enable), never after a '
                                      'driver outage; refused in torque mode (switch.method '
                                      'driver)')
    gravity_compensation: bool = option(True, 'add the gravity torque g(q)')
    stiffness: ArrayLike = option([0.0], 'joint stiffness K [N*m/rad] >= 0' + _PER_JOINT,
                                  kind='floats')
    damping: ArrayLike = option([0.0], 'joint damping D [N*m*s/rad] >= 0' + _PER_JOINT,
                                kind='floats')
    inertia: ArrayLike = option([0.0], 'target inertia [kg*m^2]; 0 keeps the natural '
                                'inertia' + _PER_JOINT, kind='floats')
    servo_stiffness: ArrayLike | None = option(
        [0.0], "servo position-loop stiffness K_s [N*m/rad] (position interface); a joint's "
        "0: the motor table's (plag_ros/core/dynamics/motors.py, at the P gain 800 the "
        'driver writes)' + _PER_JOINT, kind='floats')
    max_position_step: ArrayLike = option(
        [0.02], 'largest position command change per cycle [rad] > 0' + _PER_JOINT,
        kind='floats')
    effort_scale: float = option(
        1.0, "fraction of the effort limits allowed: on the effort interface the smaller of "
        "the URDF limit and the servo's continuous torque (motor table), on the position "
        'interface the URDF limit', low=0.01, high=1.0)
    motion_source: MotionSource = option(
        'measured', "motion in the propagation torques: 'measured' (estimated qd, qdd) or "
        "'desired' (reference feedforward)")
    fault: FaultLimits = group(FaultLimits)
    gain_check: GainCheckMode = option(
        'refuse', 'a commanded joint whose (K, D) have a gain margin below 2 in the sampled '
        "loop (plag_ros/core/control/stability.py): 'refuse' (the parameters are not taken, "
        "the node does not start), 'warn' (logged) or 'off'; set at start only (a live "
        "'off' let the next change bring any gains)", read_only=True)
    delay_periods: float = option(3.0, 'sample-to-command delay the gain check assumes '
                                  '[periods]', low=0.0, high=99.0)
    oscillation: OscillationLimits = group(OscillationLimits)
    acceleration_mask: ArrayLike | None = None
    velocity_mask: ArrayLike | None = None
    armature: ArrayLike | None = None
    monitored: ArrayLike | None = None
    estimator: EstimatorConfig = CONTROL_ESTIMATOR
    reference_max_velocity: ArrayLike | None = REFERENCE_MAX_VELOCITY
    reference_max_acceleration: ArrayLike | None = REFERENCE_MAX_ACCELERATION

    def __post_init__(self) -> None:
        if (self.reference_max_velocity is None) != (self.reference_max_acceleration is None):
            raise ValueError('ImpedanceConfig.reference_max_velocity and '
                             'reference_max_acceleration: both set, or both None (no slew)')
        if self.servo_stiffness is None:
            object.__setattr__(self, 'servo_stiffness', 0.0)   # the motor table's
        fields = _ARRAY_FIELDS + ('servo_stiffness',) + tuple(name for name in (
            'armature', 'reference_max_velocity',
            'reference_max_acceleration') if getattr(self, name) is not None)
        for name in fields:
            a = _frozen(getattr(self, name), name, (0, 1))
            if a.size == 0:
                raise ValueError(f'ImpedanceConfig.{name}: empty per-joint list')
            if a.shape == (1,):
                a = _frozen(a[0], name, (0,))   # one value for every joint
            object.__setattr__(self, name, a)
            if (a < 0.0).any():
                raise ValueError(f'ImpedanceConfig.{name} must be >= 0, got {a.tolist()}')
        for name in fields:
            if name in ('max_position_step', 'reference_max_velocity',
                        'reference_max_acceleration') and \
                    (getattr(self, name) <= 0.0).any():
                raise ValueError(f'ImpedanceConfig.{name} must be > 0, '
                                 f'got {getattr(self, name).tolist()}')
        for name in ('acceleration_mask', 'velocity_mask'):
            w = _frozen_optional(getattr(self, name), name, (2, 3))
            object.__setattr__(self, name, w)
            if w is not None and ((w < 0.0) | (w > 1.0)).any():
                raise ValueError(f'ImpedanceConfig.{name} weights must be in [0, 1]')
        for name, lo, hi in (('effort_scale', 0.0, 1.0), ('rate_hz', 0.0, math.inf),
                             ('stale_periods', 1.0, math.inf), ('ramp_s', -1e-300, math.inf)):
            value = getattr(self, name)
            if not _number(value) or not (lo < value <= hi) or not math.isfinite(value):
                raise ValueError(f'ImpedanceConfig.{name} must be in ({lo:g}, {hi:g}], '
                                 f'got {value!r}')
        choices = {'motion_source': ('desired', 'measured'),
                   'command_interface': ('effort', 'position'),
                   'fault_action': ('hold', 'zero'),
                   'gain_check': ('refuse', 'warn', 'off')}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f'ImpedanceConfig.{name} must be one of {allowed}, '
                                 f'got {getattr(self, name)!r}')
        for name in ('gravity_compensation', 'resume_after_fault', 'start_enabled'):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f'ImpedanceConfig.{name} must be a bool')
        for name, kind in (('fault', FaultLimits), ('oscillation', OscillationLimits),
                           ('estimator', EstimatorConfig)):
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f'ImpedanceConfig.{name} must be a {kind.__name__}')
        if self.monitored is not None:
            object.__setattr__(self, 'monitored', np.array(self.monitored, dtype=bool))
        if not (_number(self.delay_periods) and 0.0 <= self.delay_periods < 100.0):
            raise ValueError(f'ImpedanceConfig.delay_periods must be in [0, 100), got '
                             f'{self.delay_periods!r}')

    def __eq__(self, other: object) -> bool:
        """Field by field, arrays by value (the dataclass's own ``==`` cannot compare
        arrays)."""
        if type(other) is not type(self):
            return NotImplemented
        for f in dataclasses.fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
                if a is None or b is None or not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None   # type: ignore[assignment]  # equal by value, and mutable arrays inside

    def replace(self, **changes) -> ImpedanceConfig:
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    def servo_stiffness_of(self, joints: Sequence[str]) -> np.ndarray:
        """(len(joints),) K_s [N*m/rad] of the actuated ``joints`` (all of them, in model
        order): the configured figure, the motor table's where it is 0.

        Raises:
            ValueError: a per-joint list of another length.
        """
        joints = list(joints)
        try:
            configured = np.broadcast_to(np.asarray(self.servo_stiffness, dtype=np.float64),
                                         (len(joints),))
        except ValueError as err:
            raise ValueError(f'ImpedanceConfig.servo_stiffness needs {len(joints)} entries, '
                             f'one per actuated joint {joints}, got '
                             f'{np.size(np.asarray(self.servo_stiffness))}') from err
        if (configured > 0.0).all():
            return configured.copy()
        return np.where(configured > 0.0, configured, motors.servo_stiffness(joints))

    def with_model_parameters(self, parameters: ModelParameters, model: RobotModel
                              ) -> ImpedanceConfig:
        """This configuration with the identified ``K_s`` and armature of ``parameters``
        (where the file has them) over the configured ones: the position path's compensation
        ``tau / K_s`` needs the arm's own servo stiffness, and the effort path's gain check
        its own rotor inertia."""
        act = model.actuated_names
        config = self
        if parameters.armature:
            default = (motors.armature(model, 'low') if self.armature is None else
                       np.broadcast_to(np.asarray(self.armature, dtype=np.float64), (len(act),)))
            config = dataclasses.replace(config, armature=parameters.per_joint(
                'armature', act, default))
        if not parameters.servo_stiffness:
            return config
        configured = self.servo_stiffness_of(act)
        return dataclasses.replace(config, servo_stiffness=parameters.per_joint(
            'servo_stiffness', act, configured))

def propagation_mask(model: RobotModel, paths: Iterable[str | tuple[str, str]], *,
                     bodies: Iterable[str] | None = None) -> np.ndarray:
    """Compensation mask from named propagation paths.

    Args:
        model: the robot.
        paths: ``'target<-source'`` strings or ``(target, source)`` pairs of joint names;
            ``'*'`` matches every joint on that side. The path from source joint s into
            joint k is the torque at k caused by the motion of s ([MPF] eq. 1).
        bodies: restrict to these bodies (names from ``model.body_names``); None = all.

    Returns:
        (n, n) mask over (k, s), or (n, B, n) over (k, i, s) when ``bodies`` is given.

    Raises:
        ValueError: a malformed path or an unknown joint or body name.
    """
    n = model.n_joints
    mask = np.zeros((n, n))
    for path in paths:
        if isinstance(path, str):
            parts = [p.strip() for p in path.split('<-')]
            if len(parts) != 2 or not all(parts):
                raise ValueError(f"propagation path {path!r} is not 'target<-source'")
        else:
            parts = list(path)
            if len(parts) != 2:
                raise ValueError(f'propagation path {path!r} is not a (target, source) pair')
        idx = [slice(None) if p == '*' else int(model.joint_index([p])[0]) for p in parts]
        mask[idx[0], idx[1]] = 1.0
    if bodies is None:
        return mask
    names = list(bodies)
    unknown = [b for b in names if b not in model.body_names]
    if unknown:
        raise ValueError(f'unknown bodies {unknown}; known: {list(model.body_names)}')
    select = np.array([b in names for b in model.body_names], dtype=np.float64)
    return mask[:, None, :] * select[None, :, None]
