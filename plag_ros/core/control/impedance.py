"""Partial-impedance control: joint impedance plus selected motion propagation torques.

Gunji, Kusaka and Tanaka 2025 [MPF] (section 4, the partial impedance after eq. 17) propose
impedance control on *partial* torques: rather than one impedance for the whole arm, pick
which motion propagation paths to cancel (the torque a fast wrist motion propagates into
the shoulder, say) and leave the others compliant. With the partial Lagrangian decomposition of
:mod:`plag_ros.core.dynamics.engine` ([MPF] eq. 1 and 10),

    acceleration[k, i, s] = M_i[k, s] qdd_s
    velocity[k, i, s]     = 1/2 d partial[k, i] / d qd_s * qd_s

the law per actuated joint ``a`` (full coordinates ``k``; ``G`` maps actuated to full
coordinates through the mimic joints, ``tau_a = (G^T tau)_a``) is

    tau = G^T [ g(q)                                            (if gravity_compensation)
               + alpha * sum_{i, s} W_acc[k, i, s] acceleration[k, i, s]
               + alpha * sum_{i, s} W_vel[k, i, s] velocity[k, i, s] ]
        + K (q_r - q) + D (alpha qd_d - qd) + alpha * inertia term,
    q_r = q_0 + alpha (q_d - q_0)      (a slewed point reference: q_r, qd_r its slew's)

so the command adds exactly the propagation torques selected by the masks ``W`` and nothing
else. ``alpha`` in [0, 1] is the enable ramp: it moves the set point ``q_r`` from ``q_0``,
the measured pose where the ramp began, to the reference (a point reference with slew
limits leaves ``q_0`` through its slew instead, within its limits; with those limits the
ramp lasts at least until the velocity limit covers the distance), and scales the
compensation and the inertia term. Gravity compensation is never ramped (it is what keeps
the arm up), nor are the spring and the damper: a load the model lacks meets the whole
stiffness from the first cycle, not a spring growing from zero under it. With the arm at rest
at ``q_0`` the first command is gravity alone (on the position path, the hold's set point).
The decomposition is evaluated at the measured configuration ``q``
with either the estimated motion (``motion_source='measured'``, the default: feedback of
the filtered ``qd, qdd``, right whatever the source joint actually does) or the desired
motion (``'desired'``: feedforward, no estimator lag, but wrong by the source joint's
tracking error, e.g. under the back-EMF damping of a position servo).
With every mask zero the law is a plain joint impedance (plus gravity compensation).

Target inertia ``Md_a > 0`` (0 keeps the natural inertia) uses the acceleration estimate:
``m_aa qdd_d + (m_aa - Md_a)(qdd - qdd_d)``, which turns the decoupled joint equation
``m_aa qdd = tau + tau_ext`` into ``Md_a e'' + D e' + K e = tau_ext`` (``e = q - q_d``).
It is only as good as the estimate's lag allows; leave it at 0 unless you need it.

Two command interfaces:

* ``'effort'``: the torque above, clipped to ``effort_scale`` times the smaller of the URDF
  effort limit and the servo's continuous torque (the motor table's, half the stall torque:
  what the servo gives for as long as it is asked; ``plag_driver``'s default
  ``torque_limit``, beyond which it faults), marked ``saturated`` where clipped
  (``std_msgs/Float64MultiArray`` for ``forward_command_controller``, a
  ``sensor_msgs/JointState`` for ``plag_driver``). On the position interface the clip is
  ``effort_scale`` times the URDF limit.
* ``'position'``: the real CRANE-X7 driver (crane_x7_control, Dynamixel XM servos) accepts
  positions only. Each servo runs a position loop that, over the band the controller
  uses, acts as a spring ``tau = K_s (q_cmd - q)`` with ``K_s`` = ``servo_stiffness``
  [N*m/rad] (default from :mod:`plag_ros.core.dynamics.motors`). Commanding ``q_cmd = q + tau /
  K_s`` (the *measured* q, not the reference) therefore makes the servo produce the impedance
  torque ``tau``. The driver writes D = 0 (rt-net/crane_x7_ros crane_x7_control/src/
  crane_x7_hardware.cpp), so all damping is ``D`` here plus the motor's back-EMF. Identify ``K_s``
  per joint by hanging known torques on the held servo (a weight on the link, or gravity at
  several poses with :meth:`~plag_ros.core.dynamics.engine.PartialLagrangian.gravity_torque`)
  and fitting ``tau = K_s (q_cmd - q)`` to the steady-state deflection. Positions are then
  clipped to the joint limits and to ``max_position_step`` per cycle (from the previous
  command, so enabling does not jump). The official driver has no effort interface: the
  effort interface needs current mode (operating mode 0), a changed hardware plugin and
  software limits; here it serves the simulator.

Safety, as a pure state machine (no ROS here; :mod:`plag_ros.ros.nodes.impedance_node` wraps
it): nothing is commanded before the first valid state; a watchdog holds when joint states
are stale for more than ``stale_periods`` periods, contain NaN/inf, or the estimator is
warming up (after a stamp gap); a sample stamped longer ago than that (a backlog read late),
or as far ahead of the clock, is not used, as if it had not come; disable holds; enable
ramps ``alpha`` from 0 to 1 over
``ramp_s``. With the position interface a monitor compares the command in force with the
measurement: ``|q_cmd - q|`` above ``fault.tracking_error`` or the measured effort further
than ``fault.effort_error`` from the servo's ``K_s (q_cmd - q)`` (both for ``fault.persist_s``)
is a latched fault (``tracking`` / ``effort``): a servo that lost its gain (the driver
writes P = 5 on deactivation) or a blocked joint; only disable clears it. On both
interfaces a joint that keeps reversing (:mod:`plag_ros.core.control.oscillation`) latches an
``oscillation`` fault the same way: the loop has gone unstable. On the effort interface a
joint that moves ``fault.saturation_travel`` against its effort while it is clipped latches
``saturation``: the arm carries more than the servos give for as long as they are asked,
and sags.
Gains are checked against the sampled loop's stable region when set (``gain_check``,
:mod:`plag_ros.core.control.stability`).
*Hold* for the position interface is the last commanded set point, or
``q + G^T g(q) / K_s`` before any command: never the measured, sagged pose (a P-only
servo sags by ``g / K_s``); for the
effort interface it is zero effort (``fault_action='zero'``) or the open-loop gravity
torque at the latched position (``'hold'``): the state is not trusted, so no feedback.

Size (over ~600 lines): the law, its limits, the hold, the watchdog and the gain-loss
monitor update one state per cycle and are tested as one state machine.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from plag_ros.core.control import stability
from plag_ros.core.control.config import SERVO_STIFFNESS_TOLERANCE, ControlState, ImpedanceConfig
from plag_ros.core.control.oscillation import OscillationMonitor
from plag_ros.core.control.references import (
    HoldReference,
    PointReference,
    Reference,
    reference_bounds,
    slew_step,
)
from plag_ros.core.dynamics.arrays import ArrayLagrangian, arrays_of
from plag_ros.core.dynamics.model import actuation_matrix
from plag_ros.core.dynamics.motors import servo_continuous_torque, servo_gains
from plag_ros.core.estimation.filters import JointStateEstimator

if TYPE_CHECKING:
    from plag_ros.core.dynamics.engine import PartialLagrangian

__all__ = ['Command', 'PartialImpedanceController']

_MONITOR_WINDOW_S = 0.05
"""[s] commands sent this long before a measurement count as possibly in force for it."""
_HELD_STILL_RAD = 0.05
"""[rad] How far from where the servos' position hold leaves it a joint may read when a
fault clears (servo tracking and encoder steps stay well inside); farther is a latched
``position_jump``."""
_HOLD_SETTLE_S = 1.0
"""[s] After a fault's cause is gone, how long a joint beyond :data:`_HELD_STILL_RAD` may
take to come to the position hold before it is a ``position_jump``: an arm stopped
mid-swing overshoots the hold's set point for a moment (a CI run read the elbow 0.055 rad
past it at the first fresh sample). Meanwhile the fault stays and the servos hold."""
_HELD_STILL_RAD_S = 0.5
"""[rad/s] A resume also waits for every joint's estimated speed to fall below this: an
arm swinging about the hold passes through the 0.05 rad band at speed, and a resume
there would anchor the ramp mid-swing (an encoder at rest reads well below it)."""
_SLEW_MAX_STEP_PERIODS = 4.0
"""A point reference's set point moves by at most this many control periods per cycle: a
cycle late after a stall does not jump it by the stall's worth."""
_MONITOR_HISTORY_S = 0.5
"""[s] commands kept for the monitor: a measurement read this late (a backlog of
joint_states behind a stalled node; its subscription queues 50) is still judged against
the commands in force when it was taken."""
_EFFORT_CHECK_QD = 0.3
"""[rad/s] joints faster than this are left out of the effort check."""



class Command(NamedTuple):
    """One controller output.

    Attributes:
        t_ns: time it was computed for [ns] (controller clock).
        state: :data:`ControlState` after this cycle.
        reason: why the controller holds ('' when running): 'disabled', 'stale', 'nan',
            'implausible: <the gate's reason>'
            (:meth:`PartialImpedanceController.hold_on_invalid`), 'warming_up', or a
            latched fault starting 'tracking', 'effort', 'oscillation' or 'position_jump'.
        effort: (n_act,) [N*m] for the effort interface, else None.
        position: (n_act,) [rad] for the position interface, else None.
        torque: (n_act,) [N*m] impedance torque after clipping (zeros when holding).
        compensation: (n_act,) [N*m] selected propagation torque (alpha included).
        q_desired: (n_act,) [rad] set point in force (during the ramp on its way from the
            pose where the ramp began, an enable's or a resume's; the hold position when
            holding).
        alpha: enable ramp factor in [0, 1].
        saturated: (n_act,) bool, effort or position clipped this cycle.
    """

    t_ns: int
    state: str
    reason: str
    effort: np.ndarray | None
    position: np.ndarray | None
    torque: np.ndarray
    compensation: np.ndarray
    q_desired: np.ndarray
    alpha: float
    saturated: np.ndarray


class _CommandHistory:
    """The last ``capacity`` position commands with their send times, oldest first.

    A ring stored twice over (entry i also at i + capacity), so the kept commands are always
    one contiguous slice: one append per control cycle, no allocation, no copy to search."""

    def __init__(self, capacity: int, n: int) -> None:
        self._cap = capacity
        self._t = np.zeros(2 * capacity, dtype=np.int64)  # (2 capacity,) send time [ns]
        self._q = np.zeros((2 * capacity, n))              # (2 capacity, n) commands [rad]
        self._start = 0
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def clear(self) -> None:
        self._start = self._len = 0

    def append(self, t_ns: int, position: np.ndarray) -> None:
        i = (self._start + self._len) % self._cap
        self._t[i] = self._t[i + self._cap] = t_ns
        self._q[i] = self._q[i + self._cap] = position
        if self._len < self._cap:
            self._len += 1
        else:
            self._start = (self._start + 1) % self._cap

    def in_force(self, taken_ns: int, window_ns: int) -> np.ndarray | None:
        """(k, n) the commands that may have acted on a measurement taken at ``taken_ns``
        [ns]: those sent in ``[taken_ns - window_ns, taken_ns]`` and the one in force at the
        window's start; None when every kept command was sent after ``taken_ns``."""
        t = self._t[self._start:self._start + self._len]
        last = int(t.searchsorted(taken_ns, side='right'))          # sent at or before
        if last == 0:
            return None
        first = max(0, int(t.searchsorted(taken_ns - window_ns, side='left')) - 1)
        return self._q[self._start + first:self._start + last]


class PartialImpedanceController:
    """Partial-impedance law with an estimator, limits, watchdog and enable ramp.

    Feed every ``joint_states`` sample to :meth:`update` (it returns the command for that
    sample) and call :meth:`tick` from a timer at about the control rate (it returns a hold
    command when the input went stale). Both return None while nothing may be commanded.

    Args:
        engine: partial Lagrangian engine of the robot (its model gives joints and limits).
        config: gains, masks and limits; shapes are checked against the model here.
        reference: desired trajectory (default: hold the position at enable).

    Raises:
        ValueError: a per-joint array or mask has the wrong shape for the model, or an
            acceleration mask diagonal is combined with a target inertia or with
            ``motion_source='measured'`` (positive acceleration feedback).
    """

    def __init__(self, engine: ArrayLagrangian | PartialLagrangian, config: ImpedanceConfig,
                 reference: Reference | None = None) -> None:
        engine = arrays_of(engine)         # numpy in, numpy out: no torch in the loop
        model = engine.model
        self.engine = engine
        self.model = model
        self.config = config
        self.reference: Reference = HoldReference() if reference is None else reference
        self._act = np.flatnonzero(model.actuated)
        self.joint_names = tuple(model.joint_names[j] for j in self._act)
        """Actuated joints, the order of every (n_act,) array and command."""
        self._G, self._offset = actuation_matrix(model)
        self._apply(config)
        self._estimator = JointStateEstimator(self._act.size, config.estimator)
        self.references = {'rejected': 0, 'clipped': 0}
        """Point references refused (not finite, or beyond the joint limits) and cycles
        whose sampled reference was clipped into :func:`reference_bounds`."""
        self.reset()
        # One sample's tables, rewritten by every cycle (read within the cycle only).
        self._tables = engine.empty_arrays()
        zero = np.zeros(model.n_joints)  # first calls are slow: pay it here, not in the loop
        engine.decompose_arrays(zero, zero, zero, out=self._tables)
        engine.gravity_torque(zero)

    def reconfigure(self, config: ImpedanceConfig) -> None:
        """Swap gains, masks and limits in place, keeping the state (enable, estimator).
        While enabled, gains outside the stable region are refused whatever
        ``config.gain_check`` says ('warn' and 'off' act on a disabled controller; torque
        mode takes only 'refuse': :class:`~plag_ros.core.control.settings.ImpedanceSettings`).

        Raises:
            ValueError: as the constructor; or a different estimator config (build a new
                controller for that). Nothing changes on error.
        """
        if config.estimator != self.config.estimator:
            raise ValueError('the estimator settings cannot change on a running controller')
        self._apply(config, refuse_unstable=self._enabled)
        self._hold_effort: np.ndarray | None = None

    def _apply(self, config: ImpedanceConfig, refuse_unstable: bool = False) -> None:
        model = self.model
        n, B = model.n_joints, model.n_bodies
        na = self._act.size

        def per_joint(name: str) -> np.ndarray:
            a = getattr(config, name)
            if a.ndim == 0:
                return np.full(na, float(a))
            if a.shape != (na,):
                raise ValueError(f'ImpedanceConfig.{name} needs {na} entries, one per actuated '
                                 f'joint {list(self.joint_names)}, got {a.shape[0]}')
            return a.copy()

        K, D, Md = (per_joint(x) for x in ('stiffness', 'damping', 'inertia'))
        table_Ks = servo_gains(model)[0]
        configured_Ks = per_joint('servo_stiffness')           # 0: the table's
        Ks = np.where(configured_Ks > 0.0, configured_Ks, table_Ks)
        max_step = per_joint('max_position_step')
        slew = None if config.reference_max_velocity is None else (
            per_joint('reference_max_velocity'), per_joint('reference_max_acceleration'))

        def weights(name: str) -> np.ndarray | None:
            a = getattr(config, name)
            if a is None or not a.any():
                return None
            if a.shape == (n, n):
                a = np.broadcast_to(a[:, None, :], (n, B, n))
            elif a.shape != (n, B, n):
                raise ValueError(f'ImpedanceConfig.{name} must have shape ({n}, {n}) over '
                                 f'(joint, source) or ({n}, {B}, {n}) over (joint, body, '
                                 f'source) for {model.name}, got {a.shape}')
            return np.array(a, dtype=np.float64).reshape(n, B * n)   # (k, i*s), dense

        W_acc, W_vel = weights('acceleration_mask'), weights('velocity_mask')
        if W_acc is not None:
            diag = np.diagonal(W_acc.reshape(n, B, n).sum(1)) > 0
            diag_act = (self._G.T @ diag.astype(float)) > 0
            if config.motion_source == 'measured' and diag.any():
                raise ValueError(
                    'acceleration_mask diagonal (a joint compensating its own acceleration) '
                    "with motion_source='measured' is positive acceleration feedback; use "
                    "'desired' or a target inertia")
            clash = diag_act & (Md > 0)
            if clash.any():
                raise ValueError('acceleration_mask diagonal and a target inertia both set '
                                 f'for {[self.joint_names[a] for a in np.flatnonzero(clash)]}')
        mon = None if config.monitored is None else np.asarray(config.monitored, dtype=bool)
        if mon is not None and mon.shape != (na,):
            raise ValueError(f'ImpedanceConfig.monitored needs {na} entries, got {mon.shape}')
        monitored = np.ones(na, dtype=bool) if mon is None else mon.copy()
        # The checks come before any state changes: a refused reconfigure changes nothing.
        warnings = self._servo_warnings(config, Ks, table_Ks, monitored) + \
            self._check_gains(config, K, D, Ks, monitored,
                              'refuse' if refuse_unstable else config.gain_check)
        self.config = config
        self._K, self._D, self._Md, self._Ks, self._max_step = K, D, Md, Ks, max_step
        self._W_acc, self._W_vel = W_acc, W_vel
        # the effort path's torque goes to the servos as it is: what they give for as long
        # as they are asked (the torque-mode driver refuses more). The position path's
        # servos make their torque themselves, bounded by their own Current Limit.
        urdf = model.effort_limit[self._act]
        self._effort_max = config.effort_scale * (
            np.minimum(urdf, servo_continuous_torque(model))
            if config.command_interface == 'effort' else urdf)
        self._lower, self._upper = model.joint_lower[self._act], model.joint_upper[self._act]
        self._ref_lower, self._ref_upper = reference_bounds(self._lower, self._upper)
        self._slew_limits = slew        # (max velocity, max acceleration) (n_act,) or None
        self._stale_ns = int(config.stale_periods * 1e9 / config.rate_hz)
        self._monitored = monitored
        self.warnings: list[str] = warnings
        """What the configuration's checks found and let pass (a K_s off the motor table,
        gains below the margin with ``gain_check='warn'``): a node logs them at start."""
        self._oscillation: OscillationMonitor | None = None
        if config.oscillation.reversals:
            limit = model.velocity_limit[self._act]
            speed = np.where(np.isfinite(limit) & (limit > 0), 0.1 * limit, 0.5)
            self._oscillation = OscillationMonitor(self.joint_names, speed,
                                                   config.oscillation.window_s,
                                                   config.oscillation.reversals)

    def _servo_warnings(self, config: ImpedanceConfig, Ks: np.ndarray, table: np.ndarray,
                        monitored: np.ndarray) -> list[str]:
        """A configured K_s off the servo model's by more than the tolerance (position
        interface, commanded joints)."""
        if config.command_interface != 'position':
            return []
        configured = np.broadcast_to(np.asarray(config.servo_stiffness), Ks.shape) > 0.0
        off = configured & (np.abs(Ks / table - 1.0) > SERVO_STIFFNESS_TOLERANCE)
        return [f'{self.joint_names[a]}: servo_stiffness {Ks[a]:g} N*m/rad is '
                f"{Ks[a] / table[a]:.2f} x the motor table's {table[a]:.3g} (P gain 800): "
                "the law's torque is scaled by the ratio, and its stability margin with it "
                '(right for an arm whose K_s plag-ros identify --servo measured; otherwise '
                'leave it 0)'
                for a in np.flatnonzero(off & monitored)]

    def _loops(self, config: ImpedanceConfig, Ks: np.ndarray, delay_periods: float
               ) -> list[stability.JointLoop]:
        """The gain check's sampled loop of each actuated joint under ``config``."""
        return stability.joint_loops(
            self.model, config.command_interface, config.rate_hz, servo_stiffness=Ks,
            delay_periods=delay_periods, engine=self.engine,
            armature=config.armature if config.command_interface == 'effort' else None)

    def gain_margins(self, delay_periods: float) -> dict[str, float]:
        """The gain margin of the gains in force on each commanded joint, by joint name,
        with each command acting ``delay_periods`` periods after its reading (the gain
        check's model, :mod:`plag_ros.core.control.stability`); below 1 the loop is
        unstable."""
        config = self.config
        loops = self._loops(config, self._Ks, delay_periods)
        on = self._monitored & ((self._K > 0) | (self._D > 0))
        return {self.joint_names[a]: stability.gain_margin(loops[a], self._K[a], self._D[a],
                                                           config.estimator)
                for a in np.flatnonzero(on)}

    def smallest_margin(self, delay_periods: float) -> float:
        """The smallest of :meth:`gain_margins` (inf with no commanded joint)."""
        return min(self.gain_margins(delay_periods).values(), default=math.inf)

    def _check_gains(self, config: ImpedanceConfig, K: np.ndarray, D: np.ndarray,
                     Ks: np.ndarray, monitored: np.ndarray, mode: str) -> list[str]:
        """The gain check in ``mode`` ('refuse', 'warn', 'off'; see
        :mod:`plag_ros.core.control.stability`).

        Raises:
            ValueError: ``'refuse'`` and a commanded joint below the required margin.
        """
        if mode == 'off':
            return []
        loops = self._loops(config, Ks, config.delay_periods)
        failing = stability.check_gains(loops, self.joint_names, K, D, config.estimator,
                                        only=monitored & ((K > 0) | (D > 0)))
        if not failing:
            return []
        est = config.estimator
        where = (f'({config.command_interface} interface at {config.rate_hz:g} Hz, '
                 f'{config.delay_periods:g} period delay; estimator order {est.order}, '
                 f'{est.cutoff_hz:g} Hz, {est.velocity_source} velocity)')
        messages = [f'{check.message(stability.MIN_GAIN_MARGIN)} {where}'
                    for check in failing]
        if mode == 'refuse':
            why = "gain_check 'refuse'; 'warn', set at start, to run them anyway" \
                if config.gain_check == 'refuse' else 'refused while enabled: disable first'
            raise ValueError(f'gains outside the verified stable region ({why}): '
                             + '; '.join(messages))
        return messages

    # ------------------------------------------------------------------ state machine
    def reset(self) -> None:
        """Back to 'waiting': forget the state, estimator, hold position and enable."""
        self._estimator.reset()
        self._enabled = False
        self._fault = ''
        self._last_valid_ns: int | None = None
        self._stale_after_ns: int | None = None   # the last valid sample before a gap
        self._q: np.ndarray | None = None        # last valid raw position (n_act,)
        self._q_hold: np.ndarray | None = None
        self._hold_pose: np.ndarray | None = None   # where the position hold leaves the arm
        self._settling_since_ns: int | None = None  # a clear waiting for the arm to settle
        self._hold_effort = None
        self._last_position: np.ndarray | None = None
        self._last_command: np.ndarray | None = None  # last position sent, any state
        self._over_since: dict[str, int] = {}
        # per joint, where its effort became clipped (NaN: not clipped), and to which side
        self._clipped_at = np.full(self._act.size, np.nan)
        self._clipped_to = np.zeros(self._act.size)
        self._recent = _CommandHistory(
            max(2, round(_MONITOR_HISTORY_S * self.config.rate_hz)), self._act.size)
        self.monitor_unjudged = 0
        """Measurements the servo monitor could not judge: taken before every command it
        keeps (a backlog longer than its history, or stamps on a clock far behind)."""
        self.stale_samples = 0
        """Samples stamped more than the stale limit before or after the controller's
        clock, not used (see :meth:`update`)."""
        self.used_stamp_ns = 0
        """Stamp [ns] of the newest sample the estimator took: what commands come from."""
        self._latched = False
        self._ramp_start_ns = 0
        self._t0_ns = 0
        self._anchor: np.ndarray | None = None
        # The measured pose [rad] (n_act,) where the ramp began: its set point leaves from it.
        self._ramp_from: np.ndarray | None = None
        self._ramp_s = self.config.ramp_s      # [s] this ramp's length (_ramp_length_s)
        # An enable no cycle of the law has followed yet (it came during a fault): the
        # fault's clear anchors the reference again, at the pose the arm is then at.
        self._enable_pending = False
        self._now_ns = 0
        # The set point last commanded, (stamp [ns], q_r, its speed): a point reference's
        # slew goes on from it (None: from the anchor at rest).
        self._desired: tuple[int, np.ndarray, np.ndarray] | None = None

    @property
    def state(self) -> ControlState:
        """Current :data:`ControlState`."""
        if self._q is None:
            return 'waiting'
        if self._fault:
            return 'fault'
        if not self._enabled:
            return 'disabled'
        return 'ramping' if self._alpha(None) < 1.0 else 'enabled'

    @property
    def fault(self) -> str:
        """Active fault reason ('' when none)."""
        return self._fault

    @property
    def latched(self) -> bool:
        """Whether the fault is a latched monitor fault (only disable clears it)."""
        return self._latched

    def relatch_hold(self) -> None:
        """While disabled and someone else commands the servos, re-estimate the set point
        in force as ``q + G^T g(q) / K_s`` from the latest state, so that enabling starts
        from what the servos were holding (position interface; no-op otherwise)."""
        if self._q is None or self._enabled or self._fault or \
                self.config.command_interface != 'position':
            return
        self._last_command = None
        self._last_command = self._latch_hold().copy()

    def hold(self, now_ns: int) -> Command | None:
        """The hold command now (None before the first valid state)."""
        self._now_ns = now_ns
        return None if self._q is None else self._hold(now_ns)

    @property
    def enabled(self) -> bool:
        """Whether enable was requested (the law runs when also no fault)."""
        return self._enabled

    @property
    def estimator(self) -> JointStateEstimator:
        """The controller's joint state estimator (for its counters)."""
        return self._estimator

    @property
    def servo_stiffness(self) -> np.ndarray:
        """(n_act,) the servo stiffness K_s in use [N*m/rad] (the configured one, else the
        motor table's)."""
        return self._Ks.copy()

    @property
    def measured_q(self) -> np.ndarray | None:
        """Last valid measured position (n_act,) [rad], None before the first."""
        return None if self._q is None else self._q.copy()

    def set_enabled(self, enable: bool, now_ns: int) -> tuple[bool, str]:
        """Request enable (ramp from alpha = 0) or disable (hold). Returns (success, message)."""
        self._settling_since_ns = None      # a wait to resume judges a new request afresh
        if not enable:
            if self._enabled:
                self._enabled = False
                if not self._fault:
                    self._latch_hold()
            if self._latched:        # a monitor fault ends with disable (already holding)
                self._latched = False
                self._fault = ''
            return True, 'disabled'
        if self._q is None:
            return False, 'no valid joint state yet'
        if self._latched:          # enabled and holding on it: an enable cannot clear it
            return False, f'fault latched ({self._fault}): disable first'
        if self._enabled:
            return True, 'already enabled'
        if self._fault and not self.config.resume_after_fault:
            # its clear would end the enable at once (a fault ends one without a resume):
            # said now, not answered with a success that nothing follows
            return False, (f'fault in force ({self._fault}); enable once it clears '
                           '(resume_after_fault is off)')
        self._enabled = True
        if not self._fault:
            # the enable takes the present pose: no hold to judge by. During a fault the
            # servos keep holding their set point: its clear is judged like a resume's
            self._hold_pose = None
        if self.config.command_interface != 'position':
            # the hold's gravity torque at the pose of this enable, not at the pose of the
            # last disable: someone else may have moved the arm in between
            self._latch_hold()
        self._start(now_ns, new_reference=True)
        if self._fault:
            return True, f'enabled; waiting for fault to clear ({self._fault})'
        return True, f'enabled; ramping over {self._ramp_s:g} s'

    def latch_fault(self, reason: str) -> None:
        """While enabled, hold and keep holding until a disable, whatever the next samples:
        for input judged wrong that no later sample can prove right (a position jump that
        persisted: a false reading, or an arm that moved while its readings were refused).
        Resuming would pull the arm towards a reference anchored in the old readings."""
        if self._enabled and not self._latched:
            self._set_fault(reason)
            self._latched = True

    def hold_on_invalid(self, now_ns: int, reason: str) -> Command | None:
        """A sample the caller found unusable at ``now_ns`` (``reason``: 'nan', or
        'implausible: ...' for a reading the plausibility gate refused): nothing is computed
        from it; the controller holds, its fault ``reason`` until a valid sample clears it
        (the watchdog's stale limit runs on). None before the first valid state."""
        self._now_ns = now_ns
        if self._q is None:
            return None
        self._set_fault(reason)
        return self._hold(now_ns)

    def set_reference(self, reference: Reference | None = None, *, q: ArrayLike | None = None,
                      qd: ArrayLike | None = None, qdd: ArrayLike | None = None) -> None:
        """Replace the desired trajectory, or set a constant point (q, qd, qdd) (n_act,).

        Raises:
            ValueError: a point that is not finite, of the wrong size, or with a position
                beyond the joint limits (counted in ``references['rejected']``; the
                reference in force stays). One inside the limits but beyond
                :func:`reference_bounds` is taken and held at the bounds.
        """
        if reference is None:
            na = self._act.size

            def vec(x, name):
                a = np.zeros(na) if x is None else np.asarray(x, dtype=np.float64)
                if a.shape != (na,) or not np.isfinite(a).all():
                    self.references['rejected'] += 1
                    raise ValueError(f'reference {name} must be {na} finite values')
                return a

            point = vec(q, 'q')
            # within the limits, a point is held inside their margin; beyond them it is no
            # pose of this arm (degrees for radians, another joint order): refused whole
            beyond = np.flatnonzero((point < self._lower) | (point > self._upper))
            if beyond.size:
                self.references['rejected'] += 1
                k = beyond[0]
                raise ValueError(f'reference q of {self.joint_names[k]} = {point[k]:.4g} is '
                                 f'beyond its limits [{self._lower[k]:.4g}, '
                                 f'{self._upper[k]:.4g}]')
            reference = PointReference(point, vec(qd, 'qd'), vec(qdd, 'qdd'))
        self.reference = reference

    def _start(self, now_ns: int, *, new_reference: bool) -> None:
        self._ramp_start_ns = now_ns
        self._ramp_from = self._valid_q().copy()
        self._recent.clear()          # the hold set point is in force, not older commands
        self._clipped_at[:] = np.nan
        if self._oscillation is not None:
            self._oscillation.reset()
        if new_reference:
            self._t0_ns = now_ns
            self._anchor = self._ramp_from.copy()
            self._last_position = None
            self._enable_pending = True
        # a point reference is approached afresh, at rest, from where the arm is (a resume
        # too: the arm may have left the set point the fault stopped), within the slew
        self._desired = (now_ns, self._ramp_from.copy(), np.zeros_like(self._ramp_from))
        self._ramp_s = self._ramp_length_s(now_ns)

    def _alpha(self, now_ns: int | None) -> float:
        if self._ramp_s <= 0.0:
            return 1.0
        now = self._now_ns if now_ns is None else now_ns
        return min(1.0, max(0.0, (now - self._ramp_start_ns) * 1e-9 / self._ramp_s))

    def _ramp_length_s(self, now_ns: int) -> float:
        """[s] a ramp starting now: ``ramp_s``, or as long as the blend needs to bring the
        set point from where the arm is to the reference's present sample within the
        reference's velocity limit (a resume far from the anchor: an arm that fell in a
        hold with the torque off came back at that distance over ramp_s)."""
        ramp = self.config.ramp_s
        if self._slew_limits is None or self._anchor is None or self._ramp_from is None:
            return ramp
        sample = self.reference.sample((now_ns - self._t0_ns) * 1e-9, self._anchor)[0]
        distance = np.abs(np.asarray(sample, dtype=np.float64) - self._ramp_from)
        return max(ramp, float(np.max(distance / self._slew_limits[0])))

    def _valid_q(self) -> np.ndarray:
        """The last valid measured position; callers run only after the first one."""
        if self._q is None:
            raise RuntimeError('ImpedanceController: no valid joint state yet')
        return self._q

    def _latch_hold(self) -> np.ndarray:
        """Latch the hold set point: the last position command in force (position
        interface), else ``q + G^T g(q) / K_s`` (what the sagging servo needs to stay at q),
        else the measured q (effort interface). Returns the new set point (n_act,)."""
        self._hold_pose = None
        if self.config.command_interface == 'position':
            q = self._valid_q()
            q_full = self._G @ q + self._offset
            sag = (self._G.T @ self.engine.gravity_torque(q_full)) / self._Ks
            q_hold = self._last_command.copy() if self._last_command is not None else \
                np.clip(q + sag, self._lower, self._upper)
            self._hold_pose = q_hold - sag   # where the servo's position loop leaves the arm
        else:
            q_hold = self._valid_q().copy()
        self._q_hold = q_hold
        self._hold_effort = None
        self._last_position = None
        return q_hold

    def _set_fault(self, reason: str) -> None:
        if self._latched:
            return              # the latched reason stays until the disable that ends it
        if not self._fault and self._enabled:
            self._latch_hold()  # disabled: already latched at disable or first state
        self._fault = reason

    def _clear_fault(self, now_ns: int, qd: np.ndarray) -> None:
        """End the fault whose cause is gone, given the sample's estimated (n_act,) ``qd``
        [rad/s]: resume (``resume_after_fault``) or disable. On the position path, a
        resume waits, the fault in force and the servos holding, until the arm has
        settled at the hold (:meth:`_moved_while_held`, and every joint the node commands
        slower than :data:`_HELD_STILL_RAD_S`); a joint still beyond the band
        :data:`_HOLD_SETTLE_S`
        after the first such sample (gaps and new fault reports do not restart that time)
        is a latched ``position_jump``."""
        if not self._fault or self._latched:
            return
        resuming = self._enabled and self.config.resume_after_fault
        moved = self._moved_while_held() if resuming else ''
        if moved:
            # A held arm comes to rest at the hold: a reading still this far from it once
            # the arm had time to settle is false or the arm was moved, and a resume would
            # pull it towards a set point from before (a jump after a stamp gap passes the
            # plausibility gate).
            if self._settling_since_ns is None:
                self._settling_since_ns = now_ns
            if now_ns - self._settling_since_ns >= _HOLD_SETTLE_S * 1e9:
                self._fault, self._latched = moved, True
                self._settling_since_ns = None
            return
        if resuming and self._hold_pose is not None and \
                float(np.max(np.abs(qd[self._monitored]), initial=0.0)) > _HELD_STILL_RAD_S:
            return      # in the band but still swinging through it
        self._settling_since_ns = None
        self._fault = ''
        if resuming:
            # an enable given during the fault starts now, from where the arm is (its pose
            # then was the stale one, or the arm was moved since)
            self._start(now_ns, new_reference=self._enable_pending)
        elif self._enabled:
            self._enabled = False

    def _moved_while_held(self) -> str:
        """'position_jump: ...' when the servos' position loops held the arm (position
        interface) and a joint reads more than :data:`_HELD_STILL_RAD` from where that
        hold leaves it (its set point less the sag); else ''. The effort path's holds do
        not keep the arm still (open-loop gravity drifts and lets a moving joint coast;
        'zero' lets it fall): there a resume is judged by nothing but its ramp. A joint
        the node does not command (``monitored`` off: the gripper, on its own controller)
        is not held by it, and may move."""
        if self._hold_pose is None or self._q is None:
            return ''
        moved = np.where(self._monitored, np.abs(self._q - self._hold_pose), 0.0)
        k = int(np.argmax(moved))
        if moved[k] <= _HELD_STILL_RAD:
            return ''
        return (f'position_jump: {self.joint_names[k]} read {moved[k]:.3g} rad from where it '
                'was held')

    # ------------------------------------------------------------------ cycle
    def update(self, now_ns: int, q: ArrayLike, qd: ArrayLike | None = None, *,
               stamp_ns: int | None = None, effort: ArrayLike | None = None
               ) -> Command | None:
        """Take one joint state sample and return the command for it.

        Args:
            now_ns: controller clock [ns] (receive time; the watchdog runs on it).
            q: (n_act,) measured positions of the actuated joints [rad].
            qd: (n_act,) measured velocities (used with the estimator's
                ``velocity_source='measured'``).
            stamp_ns: sample stamp for the estimator [ns] (default ``now_ns``), on the
                clock of ``now_ns``. A sample stamped more than the stale limit
                (``stale_periods``) before ``now_ns``, or as far after it (clocks that
                disagree: its age cannot be judged, and one stamp far ahead would blind
                the stamp checks after it), is not used: it is counted in
                :attr:`stale_samples` and the call is :meth:`tick`'s.
            effort: (n_act,) measured effort [N*m] for the effort monitor (None: off).

        Returns:
            The command, or None before the first valid state and for a sample not used
            while the command in force is still fresh.
        """
        self._now_ns = now_ns
        na = self._act.size
        q = np.asarray(q, dtype=np.float64)
        if q.shape != (na,):
            raise ValueError(f'q must have {na} entries ({list(self.joint_names)}), '
                             f'got shape {q.shape}')
        if not np.isfinite(q).all() or (qd is not None and not np.isfinite(qd).all()):
            return self.hold_on_invalid(now_ns, 'nan')
        if stamp_ns is not None and abs(now_ns - int(stamp_ns)) > self._stale_ns:
            # Freshness by stamp, not by arrival: a backlog of queued samples read late, or
            # a publisher that stalled, says nothing of where the arm is now.
            self.stale_samples += 1
            return self.tick(now_ns)
        rejected = sum(self._estimator.rejected.values())
        sample = self._estimator.update(now_ns if stamp_ns is None else int(stamp_ns), q, qd)
        if sum(self._estimator.rejected.values()) > rejected:
            return None  # a rejected sample is skipped; the watchdog sees if they persist
        self._last_valid_ns = now_ns  # fresh input, even while the estimator warms up
        self.used_stamp_ns = now_ns if stamp_ns is None else int(stamp_ns)
        if sample is None:
            if self._q is None:
                return None
            self._q = q.copy()
            self._set_fault('warming_up')
            return self._hold(now_ns)
        first = self._q is None
        self._q = q.copy()
        if first:
            self._latch_hold()
            if self.config.start_enabled:
                self.set_enabled(True, now_ns)
        self._clear_fault(now_ns, sample.qd)
        if not self._enabled or self._fault:
            return self._hold(now_ns)
        taken_ns = now_ns if stamp_ns is None else min(int(stamp_ns), now_ns)
        if self._monitor(now_ns, taken_ns, q, effort, sample.qd):
            return self._hold(now_ns)
        command = self._law(now_ns, q, sample.qd, sample.qdd)
        reason = '' if self._oscillation is None else self._oscillation.update(
            now_ns, sample.qd, command.torque, command.saturated)
        reason = reason or self._losing(q, sample.qdd, command)
        if reason:
            # Latched like the servo monitor's faults: an unstable loop, or a load the
            # effort cannot carry, must not re-ramp by itself into the same fault.
            self._set_fault(reason)
            self._latched = True
            return self._hold(now_ns)
        return command

    def _losing(self, q: np.ndarray, qdd: np.ndarray, command: Command) -> str:
        """On the effort interface, a ``saturation`` fault when a joint has moved more than
        ``fault.saturation_travel`` against its effort since the effort became clipped, and
        that effort is not slowing it down: the arm carries more than the servos give for
        as long as they are asked (a payload, a motor weaker than its table,
        ``effort_scale`` too low) and sags, marked only ``saturated``; the driver's position
        hold, with the servos' full torque, must take it. Travel from where the clip began,
        not a speed over a time: a slow creep and a sag that settles still count, an
        encoder's jitter at rest does not add up. A joint the clipped effort decelerates
        (qdd along it: a fast move braking at the clip) is winning, however far it goes.
        (n_act,) ``q`` [rad], ``qdd`` [rad/s^2]. '' otherwise."""
        # (a joint the node does not command is not ours to judge, as in _monitor)
        clipped = command.saturated & self._monitored if \
            self.config.command_interface == 'effort' else np.zeros_like(command.saturated)
        start, direction = self._clipped_at, np.sign(command.torque)
        start[~clipped] = np.nan
        # a clip that changed sides begins again (a joint overshooting its set point)
        begins = clipped & (np.isnan(start) | (self._clipped_to != direction))
        start[begins], self._clipped_to[begins] = q[begins], direction[begins]
        lost = np.where(clipped & (qdd * direction <= 0.0), (start - q) * direction, 0.0)
        j = int(np.argmax(lost))
        if not lost[j] > self.config.fault.limit('saturation_travel'):
            return ''
        return (f'saturation: {self.joint_names[j]} moved {lost[j]:.3g} rad against its '
                f'effort clipped at {command.torque[j]:+.3g} N*m (more load than the servo '
                'gives for as long as it is asked: a payload, effort_scale too low, another '
                'joint swinging it)')

    def _monitor(self, now_ns: int, taken_ns: int, q: np.ndarray, effort: ArrayLike | None,
                 qd: np.ndarray) -> bool:
        """Check the commands in force when ``q`` was taken (``taken_ns``) against it; True
        on a new fault.

        The effort check skips joints moving faster than ``_EFFORT_CHECK_QD``: the motor's
        back-EMF damping (unknown here) then adds to the servo torque."""
        cfg = self.config
        if cfg.command_interface != 'position' or not len(self._recent):
            self._over_since.clear()
            return False
        # The servo acted on a command sent before the measurement was taken, after DDS hops
        # and the driver's cycle: a joint passes when any command sent in the
        # _MONITOR_WINDOW_S before ``taken_ns`` (or the one in force at its start) explains
        # it. A servo without gain is explained by none. Judging by the sample's time, not
        # by the newest commands, keeps a backlog of joint_states (a stalled node reads
        # them late, after its reference moved on) from looking like a lost servo.
        recent = self._recent.in_force(taken_ns, int(_MONITOR_WINDOW_S * 1e9))  # (k, n_act)
        if recent is None:
            self.monitor_unjudged += 1
            return False
        errors = recent - q
        error = np.where(self._monitored, np.abs(errors).min(0), 0.0)
        checks = {'tracking': (error, cfg.fault.limit('tracking_error'), 'rad')}
        if effort is not None and math.isfinite(cfg.fault.limit('effort_error')):
            effort = np.asarray(effort, dtype=np.float64)
            predicted = np.clip(self._Ks * errors, -self._effort_max, self._effort_max)
            slow = np.abs(qd) < _EFFORT_CHECK_QD
            mismatch = np.where(self._monitored & slow,
                                np.abs(effort - predicted).min(0), 0.0)
            if np.isfinite(mismatch).all():
                checks['effort'] = (mismatch, cfg.fault.limit('effort_error'), 'N*m')
        persist_ns = int(cfg.fault.persist_s * 1e9)
        for kind, (value, limit, unit) in checks.items():
            worst = int(np.argmax(value))
            if value[worst] <= limit:
                self._over_since.pop(kind, None)
                continue
            since = self._over_since.setdefault(kind, now_ns)
            if now_ns - since >= persist_ns:
                what = ('|q_cmd - q|' if kind == 'tracking' else
                        '|effort - K_s (q_cmd - q)|')
                self._set_fault(f'{kind}: {self.joint_names[worst]} {what} = '
                                f'{value[worst]:.3g} {unit} > {limit:g} for '
                                f'{cfg.fault.persist_s:g} s (servo gain lost, e.g. the driver '
                                'deactivated and wrote P=5, or a blocked joint)')
                self._latched = True
                self._over_since.clear()
                self._recent.clear()
                return True
        return False

    def tick(self, now_ns: int) -> Command | None:
        """Watchdog: a hold command when the last valid state is too old, else None."""
        self._now_ns = now_ns
        if self._q is None or self._last_valid_ns is None:
            return None
        if now_ns - self._last_valid_ns > self._stale_ns:
            if self._stale_after_ns != self._last_valid_ns:    # once per gap
                self._stale_after_ns = self._last_valid_ns
                self._set_fault('stale')
                self._estimator.reset()  # no derivative across the gap
            return self._hold(now_ns)
        return None

    def _hold(self, now_ns: int) -> Command:
        na = self._act.size
        q_hold = self._q_hold
        if q_hold is None:
            raise RuntimeError('ImpedanceController: hold requested before a set point latched')
        zero = np.zeros(na)
        effort: np.ndarray | None = None
        position: np.ndarray | None = None
        if self.config.command_interface == 'position':
            position = q_hold.copy()
            self._last_command = position.copy()
        elif self.config.fault_action == 'hold':
            if self._hold_effort is None:
                q_full = self._G @ q_hold + self._offset
                g = self.engine.gravity_torque(q_full)
                self._hold_effort = np.clip(self._G.T @ g, -self._effort_max, self._effort_max)
            effort = self._hold_effort.copy()
        else:
            effort = zero.copy()
        reason = self._fault or 'disabled'
        return Command(now_ns, self.state, reason, effort, position,
                       zero if effort is None else effort.copy(), zero.copy(), q_hold.copy(),
                       0.0, np.zeros(na, dtype=bool))

    def _slewed(self, now_ns: int, target: tuple[np.ndarray, np.ndarray, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The point reference ``target`` (q, qd, qdd) (n_act,) as the set point reaches it
        at this cycle, within the slew limits (:func:`slew_step`)."""
        anchor = self._anchor if self._anchor is not None else self._valid_q()
        t_ns, q, qd = self._desired or (now_ns, anchor, np.zeros_like(anchor))
        # a late cycle moves the set point at most a few periods' worth
        dt = min(max((now_ns - t_ns) * 1e-9, 0.0), _SLEW_MAX_STEP_PERIODS / self.config.rate_hz)
        if self._slew_limits is None:
            raise RuntimeError('ImpedanceController: slew without its limits')
        # a set point taken over moving faster than the limit (a blend, a fast trajectory)
        # goes on at the limit: slowed only at the acceleration limit, it ran on, far past
        # its target and the joint's limits after a short ramp
        max_velocity = self._slew_limits[0]
        return slew_step(q, np.clip(qd, -max_velocity, max_velocity), target, dt,
                         *self._slew_limits)

    def _law(self, now_ns: int, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray) -> Command:
        cfg, G = self.config, self._G
        alpha = self._alpha(now_ns)
        if self._anchor is None:
            raise RuntimeError('ImpedanceController: control law before the first enable')
        self._enable_pending = False
        q_d, qd_d, qdd_d = (np.asarray(x, dtype=np.float64) for x in
                            self.reference.sample((now_ns - self._t0_ns) * 1e-9, self._anchor))
        # A trajectory (a sine's swing) is held inside the bounds, at rest where it is
        # clipped; the pose of the enable stays allowed, so holding it never moves the arm
        # (the CRANE-X7's upright elbow rests on its upper limit).
        lower = np.minimum(self._ref_lower, self._anchor)
        upper = np.maximum(self._ref_upper, self._anchor)
        clipped = (q_d < lower) | (q_d > upper)
        if clipped.any():
            self.references['clipped'] += 1
            q_d = np.clip(q_d, lower, upper)
            qd_d, qdd_d = np.where(clipped, 0.0, qd_d), np.where(clipped, 0.0, qdd_d)
        slewed = self._slew_limits is not None and isinstance(self.reference, PointReference)
        if slewed:
            start = self._desired[1] if self._desired is not None else self._anchor
            q_d, qd_d, qdd_d = self._slewed(now_ns, (q_d, qd_d, qdd_d))
            # Inside the bounds widened to where this step began: a slew that begins beyond
            # a bound (a resume where the arm came to rest there) leaves through its limits,
            # never in one step; one that overruns onto a bound (taken over too fast to
            # brake) stops there, at rest: moving on outward, it kept the damper pushing
            # towards the stop.
            low, high = np.minimum(lower, start), np.maximum(upper, start)
            q_d = np.clip(q_d, low, high)
            out = ((q_d <= low) & (qd_d < 0.0)) | ((q_d >= high) & (qd_d > 0.0))
            qd_d, qdd_d = np.where(out, 0.0, qd_d), np.where(out, 0.0, qdd_d)
        qd_ref, qdd_ref = qd_d, qdd_d          # the reference's motion, for the feed-forward
        moving = qd_d
        if alpha < 1.0 and not slewed and self._ramp_from is not None:
            # The ramp moves the set point from the pose where it began (a slewed point
            # reference leaves from there already, within its limits), under the whole
            # spring: a load the model lacks meets its full stiffness from the first cycle
            # (scaling the gains from zero with gravity whole let it sag the length of the
            # ramp, unseen). The damper takes alpha qd_d, not the blend's own speed, which
            # would step at both ends of the ramp.
            moving = alpha * qd_d + (q_d - self._ramp_from) / self._ramp_s
            q_d = self._ramp_from + alpha * (q_d - self._ramp_from)
            qd_d = alpha * qd_d
        # the set point in force and its speed: a point reference taken from here on (a
        # first ~/reference mid-ramp) slews on from them, without a step
        self._desired = (now_ns, q_d, moving)
        # 1. One decomposition at the measured configuration with the chosen motion.
        q_full = G @ q + self._offset
        if cfg.motion_source == 'desired':
            qd_full, qdd_full = G @ qd_ref, G @ qdd_ref
        else:
            qd_full, qdd_full = G @ qd, G @ qdd
        out = self.engine.decompose_arrays(q_full, qd_full, qdd_full, out=self._tables)
        n = q_full.size
        comp_full = np.zeros(n)
        if self._W_acc is not None:
            comp_full += np.einsum('kj,kj->k', out['acceleration'].reshape(n, -1), self._W_acc)
        if self._W_vel is not None:
            comp_full += np.einsum('kj,kj->k', out['velocity'].reshape(n, -1), self._W_vel)
        g_full = out['gravity'].sum(-1) if cfg.gravity_compensation else None
        # 2. Impedance in actuated coordinates; gravity is not ramped.
        compensation = alpha * (G.T @ comp_full)
        tau = self._K * (q_d - q) + self._D * (qd_d - qd) + compensation
        if (self._Md > 0).any():
            M = G.T @ self.engine.mass_matrix(q_full) @ G
            m = np.diag(M)
            on = self._Md > 0
            tau += alpha * on * (m * qdd_ref + (m - self._Md) * (qdd - qdd_ref))
        if g_full is not None:
            tau += G.T @ g_full
        # 3. Limits.
        clipped = np.clip(tau, -self._effort_max, self._effort_max)
        saturated = clipped != tau
        effort = position = None
        if cfg.command_interface == 'effort':
            effort = clipped
        else:
            target = np.clip(q + clipped / self._Ks, self._lower, self._upper)
            # Step limit from the command in force (the hold set point after enable), not
            # from the sagged measurement.
            previous = self._last_position if self._last_position is not None else (
                self._last_command if self._last_command is not None else q)
            position = np.clip(target, previous - self._max_step, previous + self._max_step)
            saturated |= position != q + clipped / self._Ks
            self._last_position = position
            self._last_command = position.copy()
            self._recent.append(now_ns, position)
        return Command(now_ns, self.state, '', effort, position, clipped, compensation, q_d,
                       alpha, saturated)
