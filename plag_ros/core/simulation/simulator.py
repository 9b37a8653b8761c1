"""Forward dynamics of a :class:`RobotModel`: a stand-in CRANE-X7 for demos and tests.

The simulator integrates the rigid-body dynamics the partial Lagrangian engine inverts,

    M(q) qdd + C(q, qd) qd + g(q) + friction(qd) = tau,

with ``M`` and ``C qd + g`` from :meth:`PartialLagrangian.mass_matrix_and_bias` (one
kinematics pass per step) and the URDF joint damping and Coulomb friction (the Rayleigh
dissipation term of Kusaka and Tanaka 2022 [PL]).

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
  P and D terms and the joint stops act on the *new* velocity. RK4 would cost four engine
  passes per step (the engine takes ~0.7-1 ms per pass in Python, so RK4 cannot run in real
  time) and, being explicit, is unstable here: the CRANE-X7 fingers make the system stiff.
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
from typing import NamedTuple

import numpy as np
import torch

from plag_ros.core.common.options import option
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.dynamics.model_parameters import ModelParameters
from plag_ros.core.dynamics.motors import servo_gains, servo_saturation

__all__ = [
    'Measurement', 'SimState', 'Simulator', 'SimulatorConfig', 'mechanical_energy',
]



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


class _Law(NamedTuple):
    """Per-coordinate velocity law R(w) = dt (d w + f sgn(w) - sat(g - h w, T)) + N_[l,u](w)."""

    d: np.ndarray
    f: np.ndarray
    g: np.ndarray
    h: np.ndarray
    T: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    servo: np.ndarray  # bool

    def take(self, idx) -> _Law:
        return _Law(*(x[idx] for x in self))


def mechanical_energy(engine: PartialLagrangian, q, qd) -> tuple[float, float]:
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
    model = engine.model
    q = np.asarray(q, dtype=float)
    qd = np.asarray(qd, dtype=float)
    with torch.inference_mode():
        M = engine.mass_matrix(q).cpu().double().numpy()
        T_world_link = engine.link_poses(q).cpu().double().numpy()
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
        engine: engine to reuse (built from ``model`` if None); float64 recommended.

    Raises:
        ValueError: bad gains, or a mimic joint following a joint outside the model.
    """

    def __init__(self, model: RobotModel, config: SimulatorConfig | None = None, *,
                 engine: PartialLagrangian | None = None) -> None:
        self.model = model
        self.config = config if config is not None else SimulatorConfig()
        self.engine = engine if engine is not None else PartialLagrangian(model)
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
        self.reset()

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
        self._at_rest = False

    @property
    def position_command(self) -> np.ndarray | None:
        """(m,) position command in force [rad], None in effort mode."""
        return self._position_cmd.copy() if self._mode == 'position' else None

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
        self._effort_cmd = np.zeros(m)
        self._position_cmd = z.copy()
        self._mixed: tuple[np.ndarray, ...] = ()
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
        if self._mode != 'effort' or not np.array_equal(tau, self._effort_cmd):
            self._at_rest = False
        self._effort_cmd = tau
        self._mode = 'effort'

    def set_position_command(self, q_cmd) -> None:
        """Command servo goal positions (m,) [rad]; clipped into the joint limits.

        Raises:
            ValueError: wrong length or non-finite entries (the command is not applied).
        """
        q_cmd = self._check(q_cmd, 'position command')
        q_cmd = np.clip(q_cmd, self._lower, self._upper)
        if self._mode != 'position' or not np.array_equal(q_cmd, self._position_cmd):
            self._at_rest = False
        self._position_cmd = q_cmd
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
        position = np.clip(self._check(position, 'position command'), self._lower, self._upper)
        effort = self._check(effort, 'effort command')
        kp = self._check(kp, 'kp')
        torque_limit = self._check(torque_limit, 'torque limit')
        mask = np.asarray(position_mask, dtype=bool)
        if mask.shape != (self.n_actuated,):
            raise ValueError(f'position_mask must have {self.n_actuated} entries')
        if np.any(kp < 0.0) or np.any(torque_limit < 0.0):
            raise ValueError('kp and torque_limit must be non-negative')
        new = (position, effort, mask, kp, torque_limit)
        if self._mode != 'mixed' or not all(
                np.array_equal(a, b) for a, b in zip(new, self._mixed)):
            self._at_rest = False
        self._mixed = new
        self._position_cmd, self._effort_cmd = position, effort
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
        with torch.inference_mode():
            g = self.engine.gravity_torque(self._G @ z + self._o).cpu().numpy()
        return self._G.T @ g

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
        with torch.inference_mode():
            for _ in range(count):
                self._substep(dt / count)
        return self.state

    def _substep(self, dt: float) -> None:
        cfg, G = self.config, self._G
        if self._at_rest and dt == self._rest_dt:
            self._t += dt           # same inputs as the last step: same (resting) result
            self.steps += 1
            return
        z, v = self._z, self._v
        M_t, bias_t = self.engine.mass_matrix_and_bias(G @ z + self._o, G @ v)
        M, bias = M_t.cpu().numpy(), bias_t.cpu().numpy()
        A = G.T @ M @ G + self._armature
        inf = self._inf
        limit = self._effort_limit if cfg.effort_saturation else inf
        zeros = self._zeros
        tau_const = zeros
        if self._mode == 'effort':
            tau_const = np.minimum(np.maximum(self._effort_cmd, -limit), limit)
            g_s, h_s, servo = zeros, zeros, self._servo_off
        elif self._mode == 'mixed':
            _, _, servo, kp, torque_limit = self._mixed
            limit = np.minimum(limit, torque_limit)
            tau_const = np.where(servo, 0.0, np.minimum(np.maximum(self._effort_cmd, -limit),
                                                        limit))
            g_s = np.where(servo, kp * (self._position_cmd - z), 0.0)
            h_s = np.where(servo, kp * dt + self._kd, 0.0)
        else:
            # tau = sat(Kp (q_cmd - q - dt w) - Kd w) with w the new velocity (implicit).
            g_s = self._kp * (self._position_cmd - z)
            h_s = self._kp * dt + self._kd
            servo = self._servo_on
        if cfg.joint_limits:
            lo, hi = (self._lower - z) / dt, (self._upper - z) / dt
        else:
            lo, hi = -inf, inf
        law = _Law(d=self._damping if cfg.friction else zeros,
                   f=self._coulomb if cfg.friction else zeros,
                   g=g_s, h=h_s, T=limit, lo=lo, hi=hi,
                   servo=servo)
        c = A @ v + dt * (tau_const - G.T @ bias)
        w = self._solve(A, c, law, dt, v)

        if self._mode == 'effort':
            effort = tau_const
        else:
            effort = np.where(servo, np.minimum(np.maximum(g_s - h_s * w, -limit), limit),
                              tau_const)
        # Generalized friction: R(w) = dt (friction - servo torque) + stop reaction.
        servo_torque = np.where(servo, effort, 0.0)
        reaction = (c - A @ w) / dt + servo_torque
        slip = np.abs(w) > 1e-12
        friction = np.where(slip, law.d * w + law.f * np.sign(w),
                            np.minimum(np.maximum(reaction, -law.f), law.f))
        self._a = (w - v) / dt
        self._v = w
        z_new = z + dt * w
        if cfg.joint_limits:
            z_new = np.minimum(np.maximum(z_new, self._lower), self._upper)
        self._z = z_new
        self._effort = effort
        self._friction = friction
        self._t += dt
        self.steps += 1
        self.evaluations += 1
        self._at_rest = cfg.skip_rest and not v.any() and not w.any() and bool(
            np.array_equal(z_new, z))
        self._rest_dt = dt

    # ------------------------------------------------------------------ velocity solve
    @staticmethod
    def _law_value(law: _Law, w: np.ndarray, side: float, dt: float) -> np.ndarray:
        """R(w) with one-sided limits (side -1: left, +1: right, 0: interior point).

        ``w`` is (k,) or (k, K) with the law's (k,) parameters broadcast along rows.
        """
        if w.ndim == 2:
            law = _Law(*(x[:, None] for x in law))
        sgn = np.where(w > 0.0, 1.0, np.where(w < 0.0, -1.0, side))
        servo = np.where(law.servo, np.minimum(np.maximum(law.g - law.h * w, -law.T), law.T),
                         0.0)
        value = dt * (law.d * w + law.f * sgn - servo)
        if side < 0:
            value = np.where(w <= law.lo, -np.inf, value)
        elif side > 0:
            value = np.where(w >= law.hi, np.inf, value)
        return value

    @staticmethod
    def _pieces(law: _Law, w: np.ndarray, dt: float):
        """Linear pieces ``R = alpha w + beta`` and pins identified from a solution ``w``.

        A coordinate exactly on its lower/upper stop or exactly at zero velocity is pinned
        there; otherwise the piece is the one of its velocity sign and servo saturation.
        """
        pinned = (w == law.lo) | (w == law.hi) | (w == 0.0)
        sgn = np.sign(w)
        drive = law.g - law.h * w
        unsat = law.servo & (np.abs(drive) < law.T)
        sat = np.where(drive > 0.0, law.T, -law.T)
        alpha = dt * (law.d + np.where(unsat, law.h, 0.0))
        beta = dt * (law.f * sgn - np.where(law.servo, np.where(unsat, law.g, sat), 0.0))
        return w, pinned, alpha, beta

    def _solve_1d(self, law: _Law, a: np.ndarray, r: np.ndarray, dt: float):
        """Solve ``a w + R(w) ∋ r`` per coordinate (the others held fixed).

        Returns:
            w (k,), pinned (k,) bool (w sits on a breakpoint of R), alpha and beta (k,) of
            the linear piece ``R = alpha w + beta`` holding w otherwise.
        """
        k = a.size
        with np.errstate(divide='ignore', invalid='ignore'):
            kinks = law.servo & np.isfinite(law.T)
            k1 = np.where(kinks, (law.g - law.T) / law.h, np.nan)
            k2 = np.where(kinks, (law.g + law.T) / law.h, np.nan)
        bp = np.stack([np.where(np.isfinite(law.lo), law.lo, np.nan),
                       np.where(np.isfinite(law.hi), law.hi, np.nan),
                       np.zeros(k), k1, k2], axis=1)
        inside = (bp >= law.lo[:, None]) & (bp <= law.hi[:, None])
        bp = np.sort(np.where(inside, bp, np.nan), axis=1)               # nan last
        count = np.isfinite(bp).sum(1)
        cols = bp.shape[1]
        with np.errstate(invalid='ignore'):
            F_left = a[:, None] * bp + self._law_value(law, bp, -1, dt)
            F_right = a[:, None] * bp + self._law_value(law, bp, 1, dt)
            on = (F_left <= r[:, None]) & (r[:, None] <= F_right)     # nan compares False
            below = (F_right < r[:, None]).sum(1)
        pinned = on.any(1)
        rows = np.arange(k)
        w_pin = bp[rows, np.argmax(on, axis=1)]
        left = np.where(below > 0, bp[rows, np.maximum(below - 1, 0)], -np.inf)
        right = np.where(below < count, bp[rows, np.minimum(below, cols - 1)], np.inf)
        both = np.isfinite(left) & np.isfinite(right)
        sample = np.where(both, 0.5 * (np.where(both, left, 0.0) + np.where(both, right, 0.0)),
                          np.where(np.isfinite(left), left + 1.0,
                                   np.where(np.isfinite(right), right - 1.0, 0.0)))
        sample = np.where(pinned, 0.0, sample)
        unsat = law.servo & (np.abs(law.g - law.h * sample) < law.T)
        alpha = dt * (law.d + np.where(unsat, law.h, 0.0))
        beta = self._law_value(law, sample, 0, dt) - alpha * sample
        w = np.where(pinned, w_pin, (r - beta) / (a + alpha))
        return w, pinned, alpha, beta

    @staticmethod
    def _objective(A: np.ndarray, c: np.ndarray, law: _Law, dt: float, w: np.ndarray) -> float:
        """Convex function whose minimiser on the box [lo, hi] solves ``A w + R(w) ∋ c``.

        ``1/2 w.A w - c.w + dt sum(d w^2 / 2 + f |w| + Psi(g - h w) / h)`` with ``Psi`` the
        primitive of the saturation (``u^2 / 2`` inside, ``T |u| - T^2 / 2`` outside).
        """
        with np.errstate(divide='ignore', invalid='ignore'):
            u = law.g - law.h * w
            psi = np.where(np.abs(u) <= law.T, 0.5 * u * u, law.T * np.abs(u) - 0.5 * law.T ** 2)
            servo = np.where(law.servo, psi / np.where(law.servo, law.h, 1.0), 0.0)
        return float(0.5 * w @ A @ w - c @ w
                     + dt * np.sum(0.5 * law.d * w * w + law.f * np.abs(w) + servo))

    @staticmethod
    def _linear(A, c, pinned, alpha, beta, w_pin) -> np.ndarray:
        """Solve the linear system of one guess of pieces (pinned coordinates fixed)."""
        if not pinned.any():     # the common case while moving: one dense solve
            K = A.copy()
            K.flat[::K.shape[0] + 1] += alpha
            return np.linalg.solve(K, c - beta)
        w = np.where(pinned, w_pin, 0.0)
        free = np.flatnonzero(~pinned)
        if free.size:
            fixed = np.flatnonzero(pinned)
            K = A[np.ix_(free, free)]
            K.flat[::free.size + 1] += alpha[free]
            rhs = c[free] - beta[free] - A[np.ix_(free, fixed)] @ w[fixed]
            w[free] = np.linalg.solve(K, rhs)
        return w

    @staticmethod
    def _law_bounds(law: _Law, w: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Left and right limits of R at ``w`` (k,) in one pass (see :meth:`_law_value`)."""
        base = law.d * w
        if law.servo.any():
            base = base - np.where(law.servo,
                                   np.minimum(np.maximum(law.g - law.h * w, -law.T), law.T),
                                   0.0)
        sgn = np.sign(w)
        left = dt * (base + law.f * np.where(w == 0.0, -1.0, sgn))
        right = dt * (base + law.f * np.where(w == 0.0, 1.0, sgn))
        left[w <= law.lo] = -np.inf
        right[w >= law.hi] = np.inf
        return left, right

    def _solve(self, A: np.ndarray, c: np.ndarray, law: _Law, dt: float,
               previous: np.ndarray) -> np.ndarray:
        """Solve ``A w + R(w) ∋ c``: warm-started active set, Gauss-Seidel fallback."""
        a = np.diag(A).copy()
        tol_v = 1e-12 * (1.0 + np.max(np.abs(c / a)))
        tol_f = 1e-12 * (1.0 + np.max(np.abs(c)))

        def solved(w: np.ndarray) -> bool:
            lam = c - A @ w   # must lie in R(w), a vertical segment where w is pinned
            left, right = self._law_bounds(law, w, dt)
            with np.errstate(invalid='ignore'):
                return bool(np.all((law.lo <= w) & (w <= law.hi)
                                   & (left - tol_f <= lam) & (lam <= right + tol_f)))

        # 1. Pieces of the previous step's solution (they rarely change from step to step).
        w_prev, pinned, alpha, beta = self._pieces(law, previous, dt)
        w = self._linear(A, c, pinned, alpha, beta,
                         np.minimum(np.maximum(w_prev, law.lo), law.hi))
        if solved(w):
            return w
        # 2. Globalised semi-smooth Newton: a Gauss-Seidel sweep (exact coordinate descent)
        #    identifies the pieces, a Newton step on them with a backtracking line search on
        #    the convex objective follows. Both steps descend, so guesses cannot cycle.
        pinned, alpha, beta = np.empty(w.size, dtype=bool), np.empty(w.size), np.empty(w.size)
        w = np.clip(w, law.lo, law.hi)
        for _ in range(30):
            self.solver_iterations += 1
            w_start = w.copy()
            for i in range(w.size):
                r_i = c[i] - A[i] @ w + a[i] * w[i]
                wi, p_i, al_i, be_i = self._solve_1d(law.take([i]), a[i:i + 1],
                                                     np.array([r_i]), dt)
                w[i], pinned[i], alpha[i], beta[i] = wi[0], p_i[0], al_i[0], be_i[0]
            if np.max(np.abs(w - w_start)) <= tol_v:
                return w
            w_newton = self._linear(A, c, pinned, alpha, beta, w)
            if solved(w_newton):
                return w_newton
            step = np.clip(w_newton, law.lo, law.hi) - w
            j0, t = self._objective(A, c, law, dt, w), 1.0
            while t > 1e-3:
                if self._objective(A, c, law, dt, w + t * step) < j0:
                    w = w + t * step
                    break
                t *= 0.5
        # 3. Gauss-Seidel: exact coordinate minimisation of a strictly convex function.
        self.solver_fallbacks += 1
        for _ in range(1000):
            change = 0.0
            for i in range(w.size):
                r_i = c[i] - A[i] @ w + a[i] * w[i]
                wi = self._solve_1d(law.take([i]), a[i:i + 1], np.array([r_i]), dt)[0][0]
                change = max(change, abs(wi - w[i]))
                w[i] = wi
            if change <= tol_v:
                break
        return w
