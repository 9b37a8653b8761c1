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

from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import ModelParameters
from plag_ros.core.estimation.filters import EstimatorConfig

__all__ = ['CONTROL_ESTIMATOR', 'SERVO_STIFFNESS_TOLERANCE', 'CommandInterface', 'ControlState',
           'FaultAction', 'GainCheckMode', 'ImpedanceConfig', 'MotionSource',
           'propagation_mask']

CommandInterface = Literal['effort', 'position']
MotionSource = Literal['desired', 'measured']
FaultAction = Literal['hold', 'zero']
GainCheckMode = Literal['refuse', 'warn', 'off']
ControlState = Literal['waiting', 'disabled', 'ramping', 'enabled', 'fault']
"""``waiting``: no valid state yet (nothing commanded); ``disabled``/``fault``: hold;
``ramping``/``enabled``: impedance law with ``alpha < 1`` / ``alpha == 1``."""

_ARRAY_FIELDS = ('stiffness', 'damping', 'inertia', 'max_position_step')
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


@dataclass(frozen=True, eq=False)
class ImpedanceConfig:
    """Gains, compensation masks and safety limits of the partial-impedance controller.

    Per-joint figures are scalars (same for every joint) or (n_act,) arrays over the
    actuated joints in model order (mimic joints excluded); masks are over the full model
    coordinates. Shapes against a model are checked by :class:`PartialImpedanceController`.

    Attributes:
        stiffness: K [N*m/rad], >= 0.
        damping: D [N*m*s/rad], >= 0.
        inertia: target inertia Md [kg*m^2], >= 0; 0 keeps the natural inertia.
        gravity_compensation: add g(q).
        acceleration_mask: W_acc, (n, n) over (joint k, source s) or (n, B, n) over
            (k, body i, s), weights in [0, 1] (1 = compensate that path). None = zeros.
        velocity_mask: W_vel, same shapes.
        motion_source: ``'desired'`` or ``'measured'`` motion in the decomposition.
        command_interface: ``'effort'`` or ``'position'``.
        servo_stiffness: K_s [N*m/rad] > 0 of the servos' position loop (position only);
            None takes the servo model's (:func:`plag_ros.core.dynamics.motors.servo_gains`: the
            CRANE-X7 motor table, :mod:`plag_ros.core.dynamics.motors`). A value further than
            :data:`SERVO_STIFFNESS_TOLERANCE` from the table is reported in
            :attr:`PartialImpedanceController.warnings`.
        max_position_step: largest position command change per cycle [rad], > 0.
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
        resume_after_fault: re-ramp automatically when a fault clears (else disable).
        start_enabled: enable as soon as the first valid state arrives.
        tracking_error_limit: [rad] largest ``|q_cmd - q|`` of a monitored joint before a
            ``tracking`` fault (position interface, while the law runs); inf = off.
        effort_error_limit: [N*m] largest ``|effort - K_s (q_cmd - q)|`` before an
            ``effort`` fault; inf = off.
        fault_persist_s: [s] how long a limit must be exceeded without a break.
        saturation_travel_limit: [rad] how far a joint may move against its effort while
            that effort is clipped (measured from where the clip began) before a latched
            ``saturation`` fault (effort interface); inf = off.
        monitored: (n_act,) bools, joints the monitor checks (those actually commanded),
            the only ones a resume waits for and judges against the hold; None = all.
        estimator: settings of the joint state estimator run inside the controller
            (default :data:`CONTROL_ESTIMATOR`).
        gain_check: what to do with a commanded joint whose (K, D) have a gain margin below
            :data:`plag_ros.core.control.stability.MIN_GAIN_MARGIN` in the sampled loop
            (:mod:`plag_ros.core.control.stability`): ``'refuse'`` (ValueError naming the joint,
            the gains and the bounds), ``'warn'`` (:attr:`PartialImpedanceController.warnings`) or
            ``'off'``.
        delay_periods: sample-to-command delay the gain check assumes [periods] (1: a
            command sent to the driver's controller manager acts in its next cycle).
        oscillation_reversals: the oscillation monitor's trip count
            (:class:`plag_ros.core.control.oscillation.OscillationMonitor`); 0 turns it off.
        oscillation_window_s: its window [s].
        reference_max_velocity: (n_act,) or scalar > 0 [rad/s]: a point reference
            (``set_reference(q=...)``, the node's ``~/reference``) is approached at most this
            fast, from the set point in force
            (:func:`~plag_ros.core.control.references.slew_step`); None (with
            ``reference_max_acceleration``): the point at once.
        reference_max_acceleration: (n_act,) or scalar > 0 [rad/s^2]: and at most this hard.

    Raises:
        ValueError: a field is out of range; the message names it.
    """

    stiffness: ArrayLike = 0.0
    damping: ArrayLike = 0.0
    inertia: ArrayLike = 0.0
    gravity_compensation: bool = True
    acceleration_mask: ArrayLike | None = None
    velocity_mask: ArrayLike | None = None
    motion_source: MotionSource = 'measured'
    command_interface: CommandInterface = 'effort'
    servo_stiffness: ArrayLike | None = None
    max_position_step: ArrayLike = 0.02
    armature: ArrayLike | None = None
    effort_scale: float = 1.0
    rate_hz: float = 200.0
    stale_periods: float = 3.0
    ramp_s: float = 1.0
    fault_action: FaultAction = 'zero'
    resume_after_fault: bool = True
    start_enabled: bool = False
    tracking_error_limit: float = math.inf
    effort_error_limit: float = math.inf
    fault_persist_s: float = 0.1
    saturation_travel_limit: float = 0.05
    monitored: ArrayLike | None = None
    estimator: EstimatorConfig = CONTROL_ESTIMATOR
    gain_check: GainCheckMode = 'refuse'
    delay_periods: float = 1.0
    oscillation_reversals: int = 8
    oscillation_window_s: float = 0.8
    reference_max_velocity: ArrayLike | None = 1.0
    reference_max_acceleration: ArrayLike | None = 4.0

    def __post_init__(self) -> None:
        if (self.reference_max_velocity is None) != (self.reference_max_acceleration is None):
            raise ValueError('ImpedanceConfig.reference_max_velocity and '
                             'reference_max_acceleration: both set, or both None (no slew)')
        fields = _ARRAY_FIELDS + tuple(name for name in (
            'servo_stiffness', 'armature', 'reference_max_velocity',
            'reference_max_acceleration') if getattr(self, name) is not None)
        for name in fields:
            a = _frozen(getattr(self, name), name, (0, 1))
            object.__setattr__(self, name, a)
            if (a < 0.0).any():
                raise ValueError(f'ImpedanceConfig.{name} must be >= 0, got {a.tolist()}')
        for name in fields:
            if name in ('servo_stiffness', 'max_position_step', 'reference_max_velocity',
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
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
                    or not (lo < value <= hi) or not math.isfinite(value):
                raise ValueError(f'ImpedanceConfig.{name} must be in ({lo:g}, {hi:g}], '
                                 f'got {value!r}')
        choices = {'motion_source': ('desired', 'measured'),
                   'command_interface': ('effort', 'position'),
                   'fault_action': ('hold', 'zero')}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f'ImpedanceConfig.{name} must be one of {allowed}, '
                                 f'got {getattr(self, name)!r}')
        for name in ('gravity_compensation', 'resume_after_fault', 'start_enabled'):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f'ImpedanceConfig.{name} must be a bool')
        for name in ('tracking_error_limit', 'effort_error_limit', 'fault_persist_s',
                     'saturation_travel_limit'):
            value = getattr(self, name)
            if not isinstance(value, (int, float, np.number)) or math.isnan(value) \
                    or value < 0.0:
                raise ValueError(f'ImpedanceConfig.{name} must be >= 0, got {value!r}')
        if self.monitored is not None:
            object.__setattr__(self, 'monitored', np.array(self.monitored, dtype=bool))
        if not isinstance(self.estimator, EstimatorConfig):
            raise TypeError('ImpedanceConfig.estimator must be an EstimatorConfig')
        if self.gain_check not in ('refuse', 'warn', 'off'):
            raise ValueError("ImpedanceConfig.gain_check must be one of 'refuse', 'warn', "
                             f"'off', got {self.gain_check!r}")
        if not (isinstance(self.delay_periods, (int, float, np.number))
                and 0.0 <= self.delay_periods < 100.0):
            raise ValueError(f'ImpedanceConfig.delay_periods must be in [0, 100), got '
                             f'{self.delay_periods!r}')
        if isinstance(self.oscillation_reversals, bool) or \
                not isinstance(self.oscillation_reversals, (int, np.integer)) or \
                self.oscillation_reversals == 1 or self.oscillation_reversals < 0:
            raise ValueError('ImpedanceConfig.oscillation_reversals must be 0 (off) or an '
                             f'integer >= 2, got {self.oscillation_reversals!r}')
        if not (isinstance(self.oscillation_window_s, (int, float, np.number))
                and 0.0 < self.oscillation_window_s < math.inf):
            raise ValueError('ImpedanceConfig.oscillation_window_s must be > 0, got '
                             f'{self.oscillation_window_s!r}')

    def replace(self, **changes) -> ImpedanceConfig:
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

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
        configured = np.broadcast_to(np.asarray(
            self.servo_stiffness if self.servo_stiffness is not None
            else motors.servo_stiffness(act), dtype=np.float64), (len(act),))
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
