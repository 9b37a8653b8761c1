"""The CRANE-X7 driver's side of the simulator, without ROS: commands, controllers, timing.

:class:`DriverEmulation` stands between a :class:`~plag_ros.core.simulation.simulator.Simulator`
and the topics of the simulator node (:mod:`plag_ros.ros.nodes.sim_node`): it validates
commands, emulates the controller manager's two arm controllers (the JTC, stepwise linear
from the measured position, and the forward position controller), replaces a stale effort
command by zero effort, runs the physics of each publish tick (against wall time in
:meth:`DriverEmulation.tick`, one publish period on the simulated clock in
:meth:`DriverEmulation.advance`) and computes the period's report. Times are seconds.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from plag_ros.core.common.rejections import LOG_THROTTLE_S, RejectionLog
from plag_ros.core.dynamics import motors
from plag_ros.core.simulation.joint_trajectory import TrajectoryCommand
from plag_ros.core.simulation.settings import FORWARD, JTC, SimSettings
from plag_ros.core.simulation.simulator import Simulator

__all__ = ['REJECTION_REASONS', 'DriverEmulation']

REJECTION_REASONS = ('length', 'nonfinite', 'joints', 'inactive')
"""Keys of the rejected-command counters (``rejected.<reason>`` in ``/diagnostics``)."""

TICK_BUDGET = 0.8
"""Share of a publish tick the physics steps may take; the rest is dropped."""


class DriverEmulation:
    """Commands in, measurements out, for one simulator.

    Args:
        sim: the simulator (its actuated joints are the command interfaces).
        settings: the node's settings (arm joints, active controller, timing).
        log: where warnings go; now_s: the node clock [s] (trajectory start times).

    Raises:
        ValueError: ``arm_joints`` are not distinct actuated joints.
    """

    def __init__(self, sim: Simulator, settings: SimSettings, log: Callable[[str], object],
                 now_s: Callable[[], float]) -> None:
        self.sim = sim
        self.command_names = sim.actuated_names
        # The driver publishes current * current_to_effort, not the torque: for CRANE-X7
        # joints the motor table converts (effort = torque / torque_constant * 2.20 or 3.60),
        # and a simulated arm with an effort calibration of its own publishes through it.
        self.effort_scale = 1.0 / motors.driver_effort_to_torque(sim.model)[sim.model.actuated]
        # The joint state broadcaster's order is its own (alphabetical here), not the URDF's.
        self.state_names = tuple(sorted(self.command_names))
        self._state_order = np.array([self.command_names.index(n) for n in self.state_names])
        arm = list(settings.arm_joints)
        if [j for j in arm if j not in self.command_names] or len(set(arm)) != len(arm) \
                or not arm:
            raise ValueError(f'arm_joints {arm} must be distinct actuated joints of '
                             f'{list(self.command_names)}')
        self.arm_joints = tuple(arm)
        self._arm = np.array([self.command_names.index(j) for j in arm])
        self.active: str = settings.active_arm_controller
        self.effort_timeout = settings.effort_timeout
        self._dt = 1.0 / settings.physics_rate_hz
        self._max_steps = settings.max_steps_per_tick
        self.simulated = settings.clock == 'simulated'
        # A publish period on the simulated clock is whole physics steps, so that stamps
        # and the simulator's time never part.
        self.steps_per_period = max(1, round(settings.physics_rate_hz /
                                             settings.publish_rate_hz))
        self.period_ns = round(self.steps_per_period * 1e9 / settings.physics_rate_hz)
        # the most periods one tick may advance to catch up (2, 2x real time, at defaults)
        self.max_periods = max(1, self._max_steps // self.steps_per_period)
        self._pace_lead_ns = round(settings.pace_lead * 1e9)
        self.clock_ns: int | None = None   # the simulated clock [ns], from the first tick
        self.pace_ns: int | None = None    # the newest stamp of the paced consumer [ns]
        self._budget = TICK_BUDGET / settings.publish_rate_hz   # physics time per tick [s]
        self._log = log
        self._now_s = now_s
        self.reject = RejectionLog(REJECTION_REASONS, log,
                                   'rejected command ({reason}): {detail} [{count} so far]')
        self.counters = {'effort_commands': 0, 'position_commands': 0, 'stale_effort': 0,
                         'overrun_steps': 0, 'late_ticks': 0, 'published': 0,
                         'trajectory_commands': 0, 'forward_commands': 0,
                         'ignored_inactive': 0, 'switches': 0, 'paced_ticks': 0}
        self.largest_lag_s = 0.0     # the most a tick's state was behind wall time [s]
        self.clock_lag_s = 0.0       # simulated clock behind wall time after the last tick
        self._late_logged = -float('inf')
        # (time.monotonic(), simulated time) [s] of the effort command in force
        self._effort_stamp: tuple[float, float] | None = None
        self._trajectory: TrajectoryCommand | None = None
        self._steps_due_from: float | None = None  # wall time the step schedule counts from
        self._scheduled = 0                         # physics steps taken on this schedule
        self._start = time.monotonic()
        self._window = (self._start, time.process_time(), sim.steps, 0, sim.evaluations)

    # ------------------------------------------------------------------ commands
    def _validated(self, values: Sequence[float], kind: str) -> np.ndarray | None:
        data = np.asarray(values, dtype=float)
        m = self.sim.n_actuated
        if data.shape != (m,):
            self.reject('length', f'{kind} command has {data.size} values, needs {m} '
                        f'({", ".join(self.command_names)})')
            return None
        if not np.all(np.isfinite(data)):
            bad = [self.command_names[k] for k in np.flatnonzero(~np.isfinite(data))]
            self.reject('nonfinite', f'{kind} command is not finite for {bad}')
            return None
        return data

    def effort_command(self, values: Sequence[float]) -> None:
        """Torques [N*m] of every actuated joint (URDF order)."""
        tau = self._validated(values, 'effort')
        if tau is not None:
            self.sim.set_effort_command(tau)
            self._effort_stamp = (time.monotonic(), self.sim.state.t)
            self.counters['effort_commands'] += 1

    def position_command(self, values: Sequence[float]) -> None:
        """Goal positions [rad] of every actuated joint (URDF order)."""
        q = self._validated(values, 'position')
        if q is not None:
            self.sim.set_position_command(q)
            self._effort_stamp = None
            self.counters['position_commands'] += 1

    def _arm_command(self, q_arm: np.ndarray) -> None:
        cmd = self.sim.position_command   # the measured position if in effort mode
        q = (self.sim.measure().q[:self.sim.n_actuated] if cmd is None else cmd).copy()
        q[self._arm] = q_arm
        self.sim.set_position_command(q)
        self._effort_stamp = None

    def _inactive(self, controller: str) -> bool:
        if self.active == controller:
            return False
        self.counters['ignored_inactive'] += 1
        self.reject('inactive', f'{controller} is not active (active: {self.active})')
        return True

    def switch(self, controller: str) -> bool:
        """Make ``controller`` the active arm controller; whether it changed. Activation
        leaves the position command interface at its last value (the JTC holds it)."""
        if controller == self.active:
            return False
        self.active = controller
        self._trajectory = None
        self.counters['switches'] += 1
        return True

    def forward_command(self, values: Sequence[float]) -> None:
        """The forward controller's goal positions [rad] of the arm joints."""
        if self._inactive(FORWARD):
            return
        data = np.asarray(values, dtype=float)
        if data.shape != self._arm.shape:
            self.reject('length', f'{FORWARD} command has {data.size} values, needs '
                        f'{self._arm.size} ({", ".join(self.arm_joints)})')
            return
        if not np.all(np.isfinite(data)):
            self.reject('nonfinite', f'{FORWARD} command is not finite')
            return
        self._arm_command(data)
        self.counters['forward_commands'] += 1

    def trajectory(self, names: Sequence[str], points: Sequence[tuple[float, Sequence[float]]],
                   stamp_s: float, velocities: Sequence[Sequence[float]] | None = None
                   ) -> None:
        """A JTC trajectory: ``points`` of (time_from_start [s], positions in ``names``
        order), starting at ``stamp_s`` (0: now), following ros2_controllers' rules: from
        the measured position, linear between points, cubic where every point carries
        ``velocities`` (:class:`~plag_ros.core.simulation.joint_trajectory.TrajectoryCommand`)."""
        if self._inactive(JTC):
            return
        names = list(names)
        if sorted(names) != sorted(self.arm_joints) or not points:
            self.reject('joints', f'{JTC}: trajectory for {names} with {len(points)} '
                        f'points; needs all of {list(self.arm_joints)} and >= 1 point')
            return
        order = [names.index(j) for j in self.arm_joints]
        times = np.array([t for t, _ in points], dtype=float)
        positions = [np.asarray(q, dtype=float) for _, q in points]
        if any(q.shape != (len(names),) for q in positions) or (
                velocities is not None and np.shape(velocities) != (len(points), len(names))):
            self.reject('joints', f'{JTC}: points need {len(names)} positions (and '
                        'velocities) each')
            return
        now = self._now_s()
        start = now if stamp_s == 0.0 else stamp_s
        if stamp_s != 0.0 and start + times[-1] < now:
            self.reject('joints', f'{JTC}: trajectory with non-zero start time ends in the past')
            return
        try:
            # Start from the measured arm position (closed loop, as open_loop_control false).
            self._trajectory = TrajectoryCommand(
                start, self.sim.measure().q[self._arm], times, np.array(positions)[:, order],
                None if velocities is None else np.asarray(velocities, dtype=float)[:, order])
        except ValueError as exc:
            self.reject('joints', f'{JTC}: {exc}')
            return
        self.counters['trajectory_commands'] += 1
        self._follow_trajectory()

    def _follow_trajectory(self) -> None:
        if self._trajectory is None or self.active != JTC:
            return
        now = self._now_s()
        self._arm_command(self._trajectory.position(now))
        if now >= self._trajectory.end_s:
            self._trajectory = None        # played out: the last point is held

    # ------------------------------------------------------------------ physics
    def tick(self, now: float | None = None) -> None:
        """One publish tick: stale effort, the trajectory, then the physics steps due.

        The catch-up is bounded: a tick runs at most ``max_steps_per_tick`` steps, and
        none after 80 % of its period (:data:`TICK_BUDGET`); so a late tick runs faster
        than real time up to that bound, and beyond it skips the rest: simulated time falls
        behind wall time for good (the robot runs slow). Such a tick is counted
        (``late_ticks``, the steps it skipped in ``overrun_steps``, its lag in
        :attr:`largest_lag_s`) and logged with its lag, at most once every
        :data:`~plag_ros.core.common.rejections.LOG_THROTTLE_S` seconds.

        Args:
            now: ``time.monotonic()`` of the tick's start [s] (None: read it here). The
                steps bring the simulated state up to this instant.
        """
        now = time.monotonic() if now is None else now
        if self._effort_stamp is not None:
            self._expire_effort(now - self._effort_stamp[0])
        self._follow_trajectory()
        if self._steps_due_from is None:   # first tick: the schedule starts now
            self._steps_due_from = now - self._dt
        due = int((now - self._steps_due_from) / self._dt) - self._scheduled
        # Step until caught up, but within the tick's budget so joint_states keep their
        # rate; what a busy machine cannot do is dropped and the robot runs slow.
        done = 0
        for _ in range(min(due, self._max_steps)):
            self.sim.step(self._dt)
            done += 1
            if time.monotonic() - now > self._budget:
                break
        if due > done:
            self._late(now, due, done)
        self._scheduled += max(due, 0)

    def paced_by(self, stamp_ns: int) -> None:
        """A stamp [ns] of the paced consumer's output (``pace_topic``)."""
        self.pace_ns = stamp_ns if self.pace_ns is None else max(self.pace_ns, stamp_ns)

    def periods_due(self, wall_ns: int) -> tuple[int, bool]:
        """How many publish periods the simulated clock advances at a tick at ``wall_ns``,
        and whether pacing holds it.

        Whole periods while the clock is behind wall time, at most :attr:`max_periods`,
        none past ``pace_lead`` ahead of the consumer's newest stamp. The clock starts 1.5
        periods before the first tick, so on-time ticks find it half a period behind and
        timer jitter up to half a period changes nothing.
        """
        period = self.period_ns
        if self.clock_ns is None:
            self.clock_ns = wall_ns - period - period // 2
        t_ns, due = self.clock_ns, 0
        while due < self.max_periods and t_ns + period <= wall_ns:
            if self.pace_ns is not None and t_ns - self.pace_ns > self._pace_lead_ns:
                return due, True            # the consumer is behind: hold the clock
            t_ns += period
            due += 1
        return due, False

    def advance(self) -> int:
        """One publish period on the simulated clock: stale effort, the trajectory, then
        exactly :attr:`steps_per_period` physics steps, however long they take; returns
        the clock at the period's end [ns], the stamp of the state it leaves.

        Nothing is dropped and no wall-clock budget applies: the caller's clock (the
        ``now_s`` the driver was built with) is the simulated one, at the period's start,
        and an effort command's age is simulated time. A busy machine makes the simulated
        clock lag wall time instead (:meth:`clock_tick`).
        """
        if self._effort_stamp is not None:
            self._expire_effort(self.sim.state.t - self._effort_stamp[1])
        self._follow_trajectory()
        for _ in range(self.steps_per_period):
            self.sim.step(self._dt)
        assert self.clock_ns is not None, 'periods_due() starts the clock'
        self.clock_ns += self.period_ns
        return self.clock_ns

    def _expire_effort(self, age: float) -> None:
        """Zero effort in place of an effort command ``age`` seconds old, if stale."""
        if self.sim.mode == 'effort' and 0.0 < self.effort_timeout < age:
            self.sim.set_effort_command(np.zeros(self.sim.n_actuated))
            self._effort_stamp = None
            self.counters['stale_effort'] += 1
            self._log(f'effort command older than {self.effort_timeout:g} s: zero effort')

    def clock_tick(self, now: float, lag: float, *, held: bool) -> None:
        """Record where the simulated clock stands after a tick of :meth:`advance` calls.

        The lag is kept in :attr:`clock_lag_s`. A tick that leaves the clock a publish
        period or more behind wall time, or that pacing ``held``, is counted in
        ``late_ticks`` (and ``paced_ticks``), its lag in :attr:`largest_lag_s`, and logged
        at most once every :data:`~plag_ros.core.common.rejections.LOG_THROTTLE_S` seconds.

        Args:
            now: ``time.monotonic()`` of the tick [s] (the log's throttle).
            lag: wall time less the simulated clock after the tick [s].
            held: pacing stopped the clock (else only the per-tick bound did, if anything).
        """
        self.clock_lag_s = lag
        if not held and lag < self.period_ns * 1e-9:
            return
        counters = self.counters
        counters['late_ticks'] += 1
        counters['paced_ticks'] += held
        self.largest_lag_s = max(self.largest_lag_s, lag)
        if now - self._late_logged >= LOG_THROTTLE_S:
            self._late_logged = now
            why = ('held: the paced consumer is behind' if held else
                   f'catching up at most {self.max_periods} periods a tick')
            self._log(f'simulated clock {lag * 1e3:.0f} ms behind wall time ({why}); '
                      f'{counters["late_ticks"]} late ticks, {counters["paced_ticks"]} of '
                      'them held so far')

    def _late(self, now: float, due: int, done: int) -> None:
        """Count a tick that owed ``due`` steps and ran ``done``; log it unless a late
        tick was logged lately."""
        counters = self.counters
        counters['overrun_steps'] += due - done
        counters['late_ticks'] += 1
        lag = due * self._dt         # how far the state was behind the tick's start [s]
        self.largest_lag_s = max(self.largest_lag_s, lag)
        if now - self._late_logged >= LOG_THROTTLE_S:
            self._late_logged = now
            self._log(f'physics {lag * 1e3:.0f} ms behind wall time at a tick: ran '
                      f'{done} steps, skipped {due - done} ({(due - done) * self._dt * 1e3:.0f} '
                      f'ms of simulated time); {counters["late_ticks"]} late ticks, '
                      f'{counters["overrun_steps"]} steps skipped so far')

    def joint_state(self) -> tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray]:
        """(names, q, qd, effort) as the driver publishes them (its order, its effort)."""
        meas = self.sim.measure()
        order = self._state_order
        return (self.state_names, meas.q[order], meas.qd[order],
                (meas.effort * self.effort_scale)[order])

    def report(self) -> tuple[bool, str, dict[str, float | str | int], str]:
        """(ok, status message, values, log line) of the period since the last report."""
        now, cpu = time.monotonic(), time.process_time()
        t0, cpu0, steps0, published0, evaluations0 = self._window
        elapsed = max(now - t0, 1e-9)
        physics_hz = (self.sim.steps - steps0) / elapsed
        computed_hz = (self.sim.evaluations - evaluations0) / elapsed
        publish_hz = (self.counters['published'] - published0) / elapsed
        cpu_percent = 100.0 * (cpu - cpu0) / elapsed
        self._window = (now, cpu, self.sim.steps, self.counters['published'],
                        self.sim.evaluations)
        values: dict[str, float | str | int] = {
            'physics_rate_hz': physics_hz, 'computed_steps_hz': computed_hz,
            'publish_rate_hz': publish_hz, 'cpu_percent': cpu_percent,
            'sim_time_s': self.sim.state.t, 'wall_time_s': now - self._start,
            'mode': self.sim.mode, 'solver_fallbacks': self.sim.solver_fallbacks,
            'largest_lag_s': self.largest_lag_s, 'clock_lag_s': self.clock_lag_s}
        values.update(self.counters)
        values.update({f'rejected.{k}': v for k, v in self.reject.counts.items()})
        target = 1.0 / self._dt
        late = (f'simulated clock {self.clock_lag_s * 1e3:.0f} ms behind wall time '
                f'(largest {self.largest_lag_s * 1e3:.0f}), {self.counters["late_ticks"]} '
                f'late ticks, {self.counters["paced_ticks"]} held' if self.simulated else
                f'{self.counters["overrun_steps"]} steps dropped in '
                f'{self.counters["late_ticks"]} late ticks')
        line = (f'physics {physics_hz:.0f} Hz (target {target:g}; {computed_hz:.0f} Hz '
                f'computed, the rest at exact rest), joint_states {publish_hz:.0f} Hz, CPU '
                f'{cpu_percent:.0f} %, {late}, rejected {self.reject.total}')
        return (physics_hz > 0.9 * target, f'physics {physics_hz:.0f} Hz of {target:g}',
                values, line)
