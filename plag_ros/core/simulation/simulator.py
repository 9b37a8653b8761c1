"""Forward dynamics of a :class:`RobotModel`: a stand-in CRANE-X7 for demos and tests.

The simulator integrates the rigid-body dynamics the partial Lagrangian engine inverts,

    M(q) qdd + C(q, qd) qd + g(q) + friction(qd) = tau,

with ``M`` and ``C qd + g`` from the engine's compiled loop (the code of
:meth:`ArrayLagrangian.mass_matrix_and_bias`, one kinematics pass per step) and the URDF
joint damping and Coulomb friction (the Rayleigh dissipation term of Kusaka and Tanaka 2022
[PL]). A step is two compiled calls, the dynamics and :mod:`plag_ros.core.simulation.stepping`
(~20 us for the CRANE-X7, ``bench/bench_sim_step.py``); this class holds the state and the
commands.

Choices (and why):

* **Mimic joints are eliminated, not penalised.** With ``q = G z + o`` (``z`` the independent
  coordinates = the actuated joints, ``G`` holding 1 for each independent joint and the mimic
  multiplier for each mimic joint) the reduced dynamics are ``G^T M G zdd + G^T b = G^T tau``:
  the mimic joint's friction, damping and any torque on it are part of the generalized force
  of the joint it follows, and ``q_b == multiplier * q_a + offset`` holds exactly at every
  step (no constraint drift, no stiff penalty spring).
* **Semi-implicit Euler at 1 kHz, velocity level, one dynamics evaluation per step**
  (Moreau-Jean time stepping): velocity first, then ``q += dt * qd_new``. ``M`` and
  ``C qd + g`` are evaluated at the start of the step; damping, Coulomb friction, the servo's
  P and D terms and the joint stops act on the *new* velocity. RK4 would cost four dynamics
  evaluations per step and, being explicit, is unstable here: the CRANE-X7 fingers make the
  system stiff.
  Their reduced inertia (both fingers through the mimic) is ~3.6e-5 kg*m^2, so the servo's
  back-EMF damping (~0.83 N*m*s/rad) gives ``Kd / I * dt ~ 23`` at dt = 1 ms (explicit
  methods need < 2-2.8), the stick-slip friction ``f / I * dt ~ 44 rad/s`` of velocity change
  per step, and the servo spring ``sqrt(Kp / I) * dt ~ 0.7``. Treating those terms implicitly
  (backward Euler, L-stable) makes the step unconditionally stable for them; the finger
  approaches a goal overdamped, without overshoot or chatter (test_simulation.py). The
  conservative part is first order: a 1 s free fall of the CRANE-X7 keeps the energy within
  ~2.4 % of the energy exchanged (0.75 % for a double pendulum), the error shrinking with dt.
* **Coulomb friction is exact stick-slip, not regularised.** The friction torque is set-valued
  (``[-f, f]`` at zero velocity); each step solves for the new velocity with it, so a joint
  whose holding torque is below ``f`` stays exactly still and a sliding joint stops without
  chatter. (A tanh law would need a velocity scale of ~1e-3 rad/s to stick convincingly, and
  the finger's ``f / I * dt ~ 22 rad/s`` per step would overshoot it and chatter.)
* **Joint limits are hard, inelastic stops.** The new velocity is bounded so that the new
  position lands on the limit, never beyond; the stop's reaction is whatever keeps it there
  (no penetration, no bounce, no stiff spring to tune).
* **Effort saturation** clips every motor torque at the URDF effort limit, effort commands as
  well as the servo's output.
* **Exact rest is free.** A step that leaves every velocity exactly zero (stuck by friction or
  a stop) with the command unchanged has the same inputs as the next one, so the next is
  skipped (``SimulatorConfig.skip_rest``): an idle simulated arm costs no engine passes.

Per step the velocity ``w`` solves the monotone inclusion ``A w + R(w) ∋ c`` with
``A = G^T M G`` (SPD), ``c = A v + dt (tau_const - G^T b)`` and ``R`` a separable, piecewise
linear maximal monotone law per coordinate (damping, friction, servo, stops). It is solved by
an active-set (semi-smooth Newton) iteration: guess each coordinate's linear piece, solve the
linear system, re-identify the pieces coordinate-wise, repeat (one or two iterations when warm
started); Gauss-Seidel sweeps are the guaranteed fallback (the problem is the minimisation of a
strictly convex function with separable non-smooth terms).

Servo emulation (position mode): ``tau = clip(Kp (q_cmd - q) - Kd qd, saturation)``, with
the servo model of :mod:`plag_ros.core.dynamics.motors` (the one the controller and the stability
analysis use): ``Kp`` the position-loop stiffness at the driver's P gain, ``Kd`` the
back-EMF damping, the saturation the stall torque
(:func:`plag_ros.core.dynamics.motors.servo_gains`,
:func:`plag_ros.core.dynamics.motors.servo_saturation`). :meth:`Simulator.set_p_gain` changes P
live (the driver's P = 5 on deactivation). These are plausible, not identified, figures; both gains
are configurable.

Size (over ~600 lines): one simulator. The servo model, the joint stops, stick-slip
friction and the integrator act together in every step and are tested together.

[PL] T. Kusaka, T. Tanaka, "Partial Lagrangian for Efficient Extension and Reconstruction
of Multi-DoF Systems and Efficient Analysis Using Automatic Differentiation", Robotics 2022,
11(6), 149, doi:10.3390/robotics11060149.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from plag_ros.core.common.options import option
from plag_ros.core.dynamics import kernel, motors
from plag_ros.core.dynamics.arrays import ArrayLagrangian, arrays_of
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import ModelParameters
from plag_ros.core.dynamics.motors import servo_gains, servo_saturation

if TYPE_CHECKING:
    from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.simulation import stepping

__all__ = [
    'Measurement', 'SimState', 'Simulator', 'SimulatorConfig', 'mechanical_energy',
]

_MODES = {'effort': stepping.EFFORT, 'position': stepping.POSITION, 'mixed': stepping.MIXED}
_EFFORT, _POSITION, _SERVO, _KP, _TORQUE_LIMIT = range(len(stepping.COMMAND_ROWS))


@dataclass(frozen=True)
class SimulatorConfig:
    """Options of the simulator (a node fills it from ROS parameters).

    Attributes:
        dt: physics step [s]; :meth:`Simulator.step` splits longer intervals into substeps.
        friction: apply the URDF joint damping and Coulomb friction.
        joint_limits: stop the joints at the URDF position limits.
        effort_saturation: clip motor torques at :func:`servo_saturation` (stall torque of
            the motor table, else the URDF effort limit).
        kp: servo stiffness [N*m/rad], scalar or one per actuated joint; None derives it
            from ``p_gain`` (:func:`servo_gains`).
        kd: servo damping [N*m*s/rad], scalar or per actuated joint; None = back-EMF figure.
        armature: reflected rotor inertia [kg*m^2] added to each actuated joint's own
            inertia (the diagonal of the reduced mass matrix), scalar or per actuated joint.
            The default 0 keeps the simulator the engine's rigid bodies (every identity the
            tests check against the engine and Pinocchio); the emulated servo bus and the
            torque-mode scenarios pass the motor table's figure
            (:func:`plag_ros.core.dynamics.motors.armature`).
        p_gain: Dynamixel position P gain used when ``kp`` is None.
        quantize_position: round measured positions to ``position_resolution``.
        quantize_velocity: round measured velocities to ``velocity_resolution``.
        position_resolution: [rad]. velocity_resolution: [rad/s].
        skip_rest: when a step leaves the robot exactly at rest (every velocity exactly 0,
            stuck by friction or stops) and the command does not change, the next step has
            the same inputs and so the same result: skip its computation (exact, it only
            saves the CPU of an idle robot).
    """

    dt: float = 1e-3
    # The simulator node's parameters of the same names (read only: its set-up is fixed).
    friction: bool = option(True, 'apply the URDF joint damping and Coulomb friction',
                            read_only=True)
    joint_limits: bool = option(True, 'stop the joints at the URDF position limits',
                                read_only=True)
    effort_saturation: bool = option(True, 'clip motor torques at the URDF effort limits',
                                     read_only=True)
    kp: float | Sequence[float] | None = None
    kd: float | Sequence[float] | None = None
    armature: float | Sequence[float] = 0.0
    p_gain: float = motors.DRIVER_P_GAIN
    quantize_position: bool = option(False, 'publish positions in encoder steps (2 pi / 4096)',
                                     read_only=True)
    quantize_velocity: bool = option(False, 'publish velocities in Dynamixel steps (0.02398 '
                                     'rad/s)', read_only=True)
    position_resolution: float = motors.DEFAULT_POSITION_RESOLUTION
    velocity_resolution: float = motors.DEFAULT_VELOCITY_RESOLUTION
    skip_rest: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.dt) and self.dt > 0.0):
            raise ValueError(f'dt must be positive and finite, got {self.dt}')
        for name in ('position_resolution', 'velocity_resolution', 'p_gain'):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0.0):
                raise ValueError(f'{name} must be positive and finite, got {value}')

    def with_model_parameters(self, parameters: ModelParameters, model: RobotModel
                              ) -> SimulatorConfig:
        """This configuration with the armature and servo stiffness of ``parameters``: a
        simulated arm with those figures (the configured or derived ``kp`` where the file
        has none)."""
        act = model.actuated_names
        armature = parameters.per_joint('armature', act, np.zeros(len(act)))
        kp = self.kp
        if parameters.servo_stiffness:
            default = (servo_gains(model, self.p_gain)[0] if self.kp is None else
                       np.broadcast_to(np.asarray(self.kp, dtype=np.float64), (len(act),)))
            kp = tuple(parameters.per_joint('servo_stiffness', act, default).tolist())
        return dataclasses.replace(self, armature=tuple(armature.tolist()), kp=kp)


@dataclass(frozen=True)
class SimState:
    """Simulator state after a step (all float64 copies).

    Attributes:
        t: simulated time since reset [s].
        q, qd, qdd: (n,) every joint in model order, mimic joints included [rad, rad/s,
            rad/s^2]; qdd is the mean acceleration over the last step.
        effort: (m,) motor torque applied to each actuated joint over the last step
            (after saturation) [N*m].
        friction: (m,) generalized friction + damping torque on each actuated joint over
            the last step, mimic joints' friction included [N*m]; at rest it is the stick
            reaction.
        mode: ``'effort'`` or ``'position'``, the command kind in force.
    """

    t: float
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    effort: np.ndarray
    friction: np.ndarray
    mode: str


class Measurement(NamedTuple):
    """What the servos report for the actuated joints, (m,) each, quantised if configured."""

    q: np.ndarray
    qd: np.ndarray
    effort: np.ndarray


def mechanical_energy(engine: ArrayLagrangian | PartialLagrangian, q,
                      qd) -> tuple[float, float]:
    """Kinetic and potential energy of one configuration.

    ``K = 1/2 qd . M(q) qd`` with the engine's mass matrix and ``P = -sum_i m_i g . c_i``
    over the bodies' world COMs (the sum of the partial potentials ``P_i`` of [PL];
    zero at the root origin height). Equal to ``sum_i (L_i + P_i)`` and ``sum_i P_i`` of
    :meth:`PartialLagrangian.lagrangians`, an order of magnitude cheaper.

    Args:
        engine: engine of the model.
        q, qd: (n,) full joint positions [rad] and velocities [rad/s].

    Returns:
        (kinetic, potential) [J].
    """
    arrays = arrays_of(engine)
    model = arrays.model
    q = np.asarray(q, dtype=float)
    qd = np.asarray(qd, dtype=float)
    M, T_world_link = arrays.mass_matrix(q), arrays.link_poses(q)
    child = [model.link_names.index(model.body_names[j]) for j in range(model.n_joints)]
    T = T_world_link[child][model.body_joint]                                   # (B, 4, 4)
    com = T[:, :3, 3] + np.einsum('bij,bj->bi', T[:, :3, :3], model.body_com)
    potential = -float(np.sum(model.body_mass * (com @ np.asarray(model.gravity))))
    return 0.5 * float(qd @ M @ qd), potential


class Simulator:
    """Fixed-step forward dynamics of a robot with servo emulation (see module docstring).

    Coordinates: the simulator integrates the ``m`` actuated joints (every joint that is not
    a mimic joint, in model order, :attr:`actuated_names`); mimic joints follow them exactly.
    Commands are (m,) arrays in that order; the last command given, effort or position,
    is the one in force.

    Args:
        model: the robot.
        config: options; defaults to a 1 kHz CRANE-X7-like servo.
        engine: engine to reuse (built from ``model`` if None) for :meth:`energy` and
            :meth:`gravity_effort`: an :class:`ArrayLagrangian`, or a ``PartialLagrangian``
            whose ``arrays`` are used (float64 whatever its dtype). The step takes ``M`` and
            the bias of its model from the compiled float64 loop.

    Attributes:
        engine: the numpy engine (:class:`ArrayLagrangian`; results are numpy arrays).

    Raises:
        ValueError: bad gains, or a mimic joint following a joint outside the model.
    """

    def __init__(self, model: RobotModel, config: SimulatorConfig | None = None, *,
                 engine: ArrayLagrangian | PartialLagrangian | None = None) -> None:
        self.model = model
        self.config = config if config is not None else SimulatorConfig()
        self.engine = arrays_of(engine) if engine is not None else ArrayLagrangian(model)
        n = model.n_joints
        self._independent = np.flatnonzero(model.actuated)
        m = self._independent.size
        column = {int(j): k for k, j in enumerate(self._independent)}
        # q = G z + o: resolve mimic chains down to an independent joint.
        G = np.zeros((n, m))
        o = np.zeros(n)
        for j in range(n):
            mult, off, k = 1.0, 0.0, j
            for _ in range(n + 1):
                src = int(model.mimic_source[k])
                if src < 0:
                    break
                off += mult * model.mimic_offset[k]
                mult *= model.mimic_multiplier[k]
                k = src
            else:
                raise ValueError(f'joint {model.joint_names[j]!r}: mimic cycle')
            G[j, column[k]] = mult
            o[j] = off
        self._G, self._o = G, o
        self.actuated_names = tuple(model.joint_names[j] for j in self._independent)

        # Independent-coordinate bounds: intersection of every joint mapped onto it.
        lo, hi = np.full(m, -np.inf), np.full(m, np.inf)
        for j in range(n):
            cols = np.flatnonzero(G[j])
            if cols.size == 0:
                continue  # a mimic with multiplier 0 sits at its offset: it bounds nothing
            k = int(cols[0])
            a, b = (model.joint_lower[j] - o[j]) / G[j, k], (model.joint_upper[j] - o[j]) / G[j, k]
            lo[k], hi[k] = max(lo[k], min(a, b)), min(hi[k], max(a, b))
        self._lower, self._upper = lo, hi
        # Generalized damping and Coulomb friction: G^T diag(x) G is diagonal (one column
        # per joint), Coulomb: |G_jk| f_j because sign(G_jk w) = sign(G_jk) sign(w).
        self._damping = (G ** 2).T @ model.damping
        self._coulomb = np.abs(G).T @ model.friction
        self._effort_limit = servo_saturation(model)
        self._zeros, self._inf = np.zeros(m), np.full(m, np.inf)
        self._servo_on, self._servo_off = np.ones(m, dtype=bool), np.zeros(m, dtype=bool)

        cfg = self.config
        if cfg.kp is None or cfg.kd is None:
            kp0, kd0 = servo_gains(model, cfg.p_gain)
        self._kp = self._gain(cfg.kp if cfg.kp is not None else kp0, 'kp')
        self._kd = self._gain(cfg.kd if cfg.kd is not None else kd0, 'kd')
        self._armature = np.diag(self._gain(cfg.armature, 'armature'))
        self._p_gain = float(cfg.p_gain)
        # What the compiled step takes: the engine model's constants (for M and the bias;
        # the engine's own, built once), the per-coordinate constants (stepping.COORD_ROWS)
        # and the option bits.
        self._kernel = self.engine.kernel
        self._options = ((stepping.FRICTION if cfg.friction else 0)
                         | (stepping.JOINT_LIMITS if cfg.joint_limits else 0)
                         | (stepping.SATURATION if cfg.effort_saturation else 0))
        self._coords = np.empty((len(stepping.COORD_ROWS), m))
        self._pack_coords()
        self.reset()

    def _pack_coords(self) -> None:
        self._coords[:] = (self._lower, self._upper, self._damping, self._coulomb,
                           self._effort_limit, self._kp, self._kd, np.diag(self._armature))

    def set_p_gain(self, p_gain: float) -> None:
        """Change the servos' position P gain live: stiffness scales with it (the driver
        writes P = 5 on deactivation, and the arm goes nearly limp).

        Raises:
            ValueError: a non-positive or non-finite gain.
        """
        if not (math.isfinite(p_gain) and p_gain > 0.0):
            raise ValueError(f'p_gain must be positive and finite, got {p_gain}')
        self._kp = self._kp * (float(p_gain) / self._p_gain)
        self._p_gain = float(p_gain)
        self._pack_coords()
        self._at_rest = False

    @property
    def position_command(self) -> np.ndarray | None:
        """(m,) position command in force [rad], None in effort mode."""
        return self._command[_POSITION].copy() if self._mode == 'position' else None

    @property
    def p_gain(self) -> float:
        """Position P gain in force (register units)."""
        return self._p_gain

    @property
    def effort_limit(self) -> np.ndarray:
        """(m,) motor torque saturation [N*m]."""
        return self._effort_limit.copy()

    def _gain(self, value, name: str) -> np.ndarray:
        m = self._independent.size
        arr = np.broadcast_to(np.asarray(value, dtype=float), (m,)).copy() \
            if np.ndim(value) == 0 else np.asarray(value, dtype=float)
        if arr.shape != (m,) or not np.all(np.isfinite(arr)) or np.any(arr < 0.0):
            raise ValueError(f'{name} must be a non-negative scalar or {m} values for '
                             f'{list(self.actuated_names)}, got {value!r}')
        return arr

    # ------------------------------------------------------------------ commands and state
    @property
    def n_actuated(self) -> int:
        """Number m of actuated (independent) joints."""
        return self._independent.size

    @property
    def coordinate_map(self) -> tuple[np.ndarray, np.ndarray]:
        """(G (n, m), o (n,)) with full joint positions ``q = G z + o`` from actuated ``z``."""
        return self._G.copy(), self._o.copy()

    @property
    def coulomb(self) -> np.ndarray:
        """(m,) generalized Coulomb friction level per actuated joint [N*m] (mimics added)."""
        return self._coulomb.copy()

    @property
    def kp(self) -> np.ndarray:
        """(m,) servo stiffness [N*m/rad]."""
        return self._kp.copy()

    @property
    def kd(self) -> np.ndarray:
        """(m,) servo damping [N*m*s/rad]."""
        return self._kd.copy()

    def _check(self, x, what: str) -> np.ndarray:
        m = self.n_actuated
        try:
            arr = np.asarray(x, dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError(f'{what}: not numeric: {x!r}') from err
        if arr.shape != (m,):
            raise ValueError(f'{what} must have {m} entries (actuated joints '
                             f'{list(self.actuated_names)}), got shape {arr.shape}')
        bad = [self.actuated_names[k] for k in np.flatnonzero(~np.isfinite(arr))]
        if bad:
            raise ValueError(f'{what} is not finite for joints {bad}')
        return arr.copy()

    def reset(self, q0=None, qd0=None) -> None:
        """Restart at ``q0`` with velocity ``qd0``, zero effort command, time 0.

        Args:
            q0: (m,) actuated or (n,) full joint positions [rad]; None = zeros clipped
                into the limits. Mimic entries of a full vector must satisfy the mimic law.
            qd0: (m,) actuated joint velocities [rad/s]; None = at rest.

        Raises:
            ValueError: wrong length, NaN, mimic entries off their law, outside the limits.
        """
        m, n = self.n_actuated, self.model.n_joints
        if q0 is None:
            z = np.clip(np.zeros(m), self._lower, self._upper)
        else:
            arr = np.asarray(q0, dtype=float)
            if arr.shape == (n,) and n != m:
                z = self._check(arr[self._independent], 'q0')
                full = self._G @ z + self._o
                off = np.flatnonzero(np.abs(full - arr) > 1e-9)
                if off.size:
                    raise ValueError('q0 violates the mimic law for joints '
                                     f'{[self.model.joint_names[j] for j in off]}')
            else:
                z = self._check(arr, 'q0')
            if self.config.joint_limits:
                out = np.flatnonzero((z < self._lower - 1e-12) | (z > self._upper + 1e-12))
                if out.size:
                    raise ValueError('q0 outside the joint limits for ' + ', '.join(
                        f'{self.actuated_names[k]!r} ({z[k]:.4f} not in [{self._lower[k]:.4f},'
                        f' {self._upper[k]:.4f}])' for k in out))
                z = np.clip(z, self._lower, self._upper)
        self._z = z
        self._v = np.zeros(m) if qd0 is None else self._check(qd0, 'qd0')
        self._a = np.zeros(m)
        self._t = 0.0
        self._mode = 'effort'
        # the command in force, rows stepping.COMMAND_ROWS (effort, position, then the
        # servo mask, stiffness and torque limit of set_joint_commands)
        self._command = np.zeros((len(stepping.COMMAND_ROWS), m))
        self._command[_POSITION] = z
        self._effort = np.zeros(m)
        self._friction = np.zeros(m)
        self.steps = 0
        self.evaluations = 0      # steps computed (engine passes); steps - evaluations skipped
        self._at_rest = False
        self._rest_dt = math.nan  # dt of the step that found the rest (read only when at rest)
        self.solver_iterations = 0
        self.solver_fallbacks = 0

    def set_effort_command(self, tau) -> None:
        """Command motor torques (m,) [N*m]; clipped at the effort limits when stepping.

        Raises:
            ValueError: wrong length or non-finite entries (the command is not applied).
        """
        tau = self._check(tau, 'effort command')
        if self._mode != 'effort' or not np.array_equal(tau, self._command[_EFFORT]):
            self._at_rest = False
        self._command[_EFFORT] = tau
        self._mode = 'effort'

    def set_position_command(self, q_cmd) -> None:
        """Command servo goal positions (m,) [rad]; clipped into the joint limits.

        Raises:
            ValueError: wrong length or non-finite entries (the command is not applied).
        """
        q_cmd = self._check(q_cmd, 'position command')
        q_cmd = np.clip(q_cmd, self._lower, self._upper)
        if self._mode != 'position' or not np.array_equal(q_cmd, self._command[_POSITION]):
            self._at_rest = False
        self._command[_POSITION] = q_cmd
        self._mode = 'position'

    def set_joint_commands(self, position, effort, position_mask, kp, torque_limit) -> None:
        """Command each actuated joint on its own: a position servo where ``position_mask``
        is true (stiffness ``kp``, the back-EMF damping :attr:`kd`), a motor torque
        elsewhere; both saturate at ``torque_limit`` (and the stall torque). This is how
        servos that each have their own operating mode and gains drive the arm
        (:mod:`plag_ros.bus`); a servo with its torque off is a joint with zero torque.

        Args:
            position: (m,) goal positions [rad], used where ``position_mask``.
            effort: (m,) motor torques [N*m], used elsewhere.
            position_mask: (m,) bool.
            kp: (m,) position-loop stiffness [N*m/rad], >= 0.
            torque_limit: (m,) torque saturation [N*m], >= 0.

        Raises:
            ValueError: a wrong length, a non-finite entry, a negative gain or limit.
        """
        m = self.n_actuated
        try:               # the common case (every physics step of the bus) in one pass
            values = np.array((position, effort, kp, torque_limit), dtype=float)
            valid = values.shape == (4, m) and bool(np.isfinite(values).all())
        except (TypeError, ValueError):
            valid = False
        if not valid:      # the checks one by one, to say which input is wrong
            values = np.array([self._check(x, what) for x, what in (
                (position, 'position command'), (effort, 'effort command'), (kp, 'kp'),
                (torque_limit, 'torque limit'))])
        mask = np.asarray(position_mask, dtype=bool)
        if mask.shape != (m,):
            raise ValueError(f'position_mask must have {m} entries')
        if np.any(values[2:] < 0.0):
            raise ValueError('kp and torque_limit must be non-negative')
        command = np.empty((len(stepping.COMMAND_ROWS), m))
        command[_EFFORT], command[_KP], command[_TORQUE_LIMIT] = values[1:]
        command[_POSITION] = np.clip(values[0], self._lower, self._upper)
        command[_SERVO] = mask
        if self._mode != 'mixed' or not np.array_equal(command, self._command):
            self._at_rest = False
        self._command = command
        self._mode = 'mixed'

    @property
    def mode(self) -> str:
        """Command kind in force: ``'effort'``, ``'position'`` or ``'mixed'``
        (:meth:`set_joint_commands`)."""
        return self._mode

    @property
    def t(self) -> float:
        """Simulated time since reset [s]."""
        return self._t

    @property
    def state(self) -> SimState:
        """Current state (copies), full joint vectors with mimic joints filled in."""
        return SimState(t=self._t, q=self._G @ self._z + self._o, qd=self._G @ self._v,
                        qdd=self._G @ self._a, effort=self._effort.copy(),
                        friction=self._friction.copy(), mode=self._mode)

    def measure(self) -> Measurement:
        """Actuated-joint position, velocity and motor torque as the servos report them."""
        cfg = self.config
        q, qd = self._z.copy(), self._v.copy()
        if cfg.quantize_position:
            q = np.round(q / cfg.position_resolution) * cfg.position_resolution
        if cfg.quantize_velocity:
            qd = np.round(qd / cfg.velocity_resolution) * cfg.velocity_resolution
        return Measurement(q, qd, self._effort.copy())

    def gravity_effort(self, q=None) -> np.ndarray:
        """Actuator torques (m,) that hold the robot still at ``q`` (default: current).

        The generalized gravity ``G^T g(G z + o)``: a mimic joint's gravity load is carried
        by the joint it follows.
        """
        z = self._z if q is None else self._check(q, 'q')
        return self._G.T @ self.engine.gravity_torque(self._G @ z + self._o)

    def energy(self) -> tuple[float, float]:
        """(kinetic, potential) energy of the current state [J]."""
        s = self.state
        return mechanical_energy(self.engine, s.q, s.qd)

    # ------------------------------------------------------------------ integration
    def step(self, dt: float | None = None, effort=None, position_command=None) -> SimState:
        """Advance by ``dt`` seconds in substeps of at most ``config.dt``.

        Args:
            dt: interval [s]; None = one physics step ``config.dt``.
            effort: optional new effort command (m,) [N*m] (switches to effort mode).
            position_command: optional new position command (m,) [rad] (position mode).

        Returns:
            The state at the end of the interval.

        Raises:
            ValueError: non-positive or non-finite ``dt``, both commands at once, or a bad
                command (nothing is integrated then).
        """
        h = self.config.dt
        dt = h if dt is None else float(dt)
        if not (math.isfinite(dt) and dt > 0.0):
            raise ValueError(f'dt must be positive and finite, got {dt}')
        if effort is not None and position_command is not None:
            raise ValueError('give either an effort or a position command, not both')
        if effort is not None:
            self.set_effort_command(effort)
        if position_command is not None:
            self.set_position_command(position_command)
        count = max(1, math.ceil(dt / h - 1e-9))
        for _ in range(count):
            self._substep(dt / count)
        return self.state

    def _substep(self, dt: float) -> None:
        if self._at_rest and dt == self._rest_dt:
            self._t += dt           # same inputs as the last step: same (resting) result
            self.steps += 1
            return
        G = self._G
        M, bias = kernel.mass_matrix_and_bias_into(self._kernel, (G @ self._z + self._o)[None],
                                                   (G @ self._v)[None])
        out, iterations, fallback, still = stepping.step(
            M[0], bias[0], G, self._coords, self._command, _MODES[self._mode], self._options,
            dt, self._z, self._v)
        if iterations < 0:
            bad = np.flatnonzero(~(np.isfinite(self._z) & np.isfinite(self._v)))
            raise ValueError('the state is not finite for joints '
                             f'{[self.actuated_names[k] for k in bad]}')
        # rows of one new array, never written in place
        self._z, self._v, self._a, self._effort, self._friction = out
        self._t += dt
        self.steps += 1
        self.evaluations += 1
        self.solver_iterations += iterations
        self.solver_fallbacks += int(fallback)
        self._at_rest = self.config.skip_rest and still
        self._rest_dt = dt
