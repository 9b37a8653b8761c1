"""The partial-impedance controller against the simulator, in one process.

:func:`run` closes the loop the way the nodes do over DDS, without the DDS: every
``1 / rate_hz`` the simulator's servos report the actuated joints
(:meth:`~plag_ros.core.simulation.simulator.Simulator.measure`), the controller computes its
command from that sample, and the command acts on the simulated arm from ``delay_periods`` samples
later on (0: at once, as an ideal driver; 1: the next cycle, as a command sent outside
the driver's controller manager is picked up), held in between. The simulator integrates
at its own 1 kHz step in between.

This is what the stability bench, the controller's acceptance tests and a researcher
trying gains before the arm use: the same classes the nodes run, the same arithmetic.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from plag_ros.core.control.config import ImpedanceConfig
from plag_ros.core.control.impedance import PartialImpedanceController
from plag_ros.core.control.references import Reference
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.simulation.simulator import Simulator, SimulatorConfig

__all__ = ['LoopRun', 'run']


@dataclass(frozen=True)
class LoopRun:
    """One closed-loop run, one row per control cycle.

    Attributes:
        t: (N,) time of each sample since the start [s].
        q: (N, n_act) measured positions of the actuated joints [rad].
        qd: (N, n_act) measured velocities [rad/s].
        torque: (N, n_act) the law's torque of each cycle (zeros while holding) [N*m].
        q_desired: (N, n_act) the set point in force (during the enable ramp on its way
            from the pose of the enable to the reference; the hold set point while
            holding) [rad];
            NaN before the first command.
        state: (N,) controller state after each cycle ('' before the first command).
        reason: (N,) the controller's hold reason ('' when running).
        saturated: (N, n_act) command clipped that cycle.
        joint_names: the actuated joints, the column order.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    torque: np.ndarray
    q_desired: np.ndarray
    state: np.ndarray
    reason: np.ndarray
    saturated: np.ndarray
    joint_names: tuple[str, ...]

    def column(self, joint: str) -> int:
        """Column of ``joint`` in the (N, n_act) arrays."""
        return self.joint_names.index(joint)

    def first_fault(self) -> float | None:
        """Time of the first cycle in state 'fault' [s], None if none."""
        hits = np.flatnonzero(self.state == 'fault')
        return None if hits.size == 0 else float(self.t[hits[0]])


def run(engine: PartialLagrangian, config: ImpedanceConfig, *, q0: ArrayLike,
        seconds: float, reference: Reference | None = None, delay_periods: int = 0,
        sim_config: SimulatorConfig | None = None, push: ArrayLike | None = None,
        controller: PartialImpedanceController | None = None) -> LoopRun:
    """Run ``config`` (or ``controller``) against a simulator started at rest at ``q0``.

    Args:
        engine: the robot's engine, shared by the simulator and the controller.
        config: the controller's configuration (its ``rate_hz`` is the loop rate); the
            controller is enabled at the first sample (``start_enabled`` forced on).
        q0: (n_act,) start position of the actuated joints [rad].
        seconds: simulated duration [s].
        reference: the controller's reference (default: hold the start).
        delay_periods: control cycles between a sample and its command taking effect.
        sim_config: the simulator's options (default :class:`SimulatorConfig`).
        push: (n_act,) external torque on the joints [N*m] (effort: added to the command;
            position: added through the servo, as ``push / K_s`` on the goal).
        controller: an already built controller to run instead of one from ``config``.

    Returns:
        The :class:`LoopRun`.
    """
    sim = Simulator(engine.model, sim_config or SimulatorConfig(), engine=engine)
    q0 = np.asarray(q0, dtype=np.float64)
    sim.reset(q0)
    if controller is None:
        controller = PartialImpedanceController(engine, config.replace(start_enabled=True),
                                                reference)
    # Until the controller's first command (its estimator warms up on five samples) the
    # arm is held at q0 as a driver holds it: the servo's goal above the sag, or the
    # gravity torque.
    if controller.config.command_interface == 'position':
        sim.set_position_command(q0 + sim.gravity_effort() / sim.kp)
    else:
        sim.set_effort_command(sim.gravity_effort())
    rate = controller.config.rate_hz
    n_act = sim.n_actuated
    push = np.zeros(n_act) if push is None else np.asarray(push, dtype=np.float64)
    kp = sim.kp
    period_ns = round(1e9 / rate)
    steps = int(round(seconds * rate))
    pending: deque = deque([None] * int(delay_periods))
    fields = ('t', 'q', 'qd', 'torque', 'q_desired', 'state', 'reason', 'saturated')
    rows: dict[str, list] = {name: [] for name in fields}
    for k in range(steps):
        measured = sim.measure()
        cmd = controller.update(k * period_ns, measured.q, measured.qd)
        pending.append(cmd)
        acting = pending.popleft()
        if acting is not None and acting.effort is not None:
            sim.set_effort_command(acting.effort + push)
        elif acting is not None:
            sim.set_position_command(acting.position + push / kp)
        rows['t'].append(k / rate)
        rows['q'].append(measured.q)
        rows['qd'].append(measured.qd)
        rows['torque'].append(np.zeros(n_act) if cmd is None else cmd.torque)
        rows['q_desired'].append(np.full(n_act, np.nan) if cmd is None else cmd.q_desired)
        rows['state'].append('' if cmd is None else cmd.state)
        rows['reason'].append('' if cmd is None else cmd.reason)
        rows['saturated'].append(np.zeros(n_act, bool) if cmd is None else cmd.saturated)
        sim.step(1.0 / rate)
    return LoopRun(**{name: np.array(rows[name]) for name in fields},
                   joint_names=controller.joint_names)
