"""``plag-ros excite``: design an excitation trajectory, play it on the arm or the simulator.

Three uses, one file between them::

    plag-ros excite -o OUT                      # design: OUT/excitation.yaml, .png
    plag-ros excite --play OUT/excitation.yaml  # play it through crane_x7_arm_controller
    plag-ros excite --play OUT/excitation.yaml --simulate BAG [--model TRUE.yaml]

The design (:func:`plag_ros.core.identification.excitation.design_excitation`) is a finite Fourier
series per arm joint, chosen for a well-conditioned identification regressor inside the joint,
velocity and acceleration limits, the servos' torque and a minimum link height; the file holds the
coefficients, the limits, the condition number and what the dense check found.

``--play`` joins the ROS graph and sends the trajectory to the driver's trajectory
controller, watched (:mod:`plag_ros.ros.excitation_player`); record it with ``plag-ros
record`` beside it (which records the command too). ``--simulate BAG`` plays it on the
simulator without ROS, faster than real time, and writes what ``plag-ros record`` would
have recorded on the real arm: ``/joint_states`` as the driver publishes them (its order,
encoder steps, effort in its units) and the trajectory message. ``--model`` gives the
simulated arm figures of its own (an identified.yaml: bodies, friction, armature, K_s),
so an identification can be tried on an arm whose truth is known.

Exit codes: 0; 2 on bad input or a trajectory outside the limits (nothing moves); 3 when a
play was stopped (tracking error, stale joint states, Ctrl-C; the arm holds).
"""
from __future__ import annotations

import argparse
import datetime
import sys
import threading
from pathlib import Path

import numpy as np
import yaml

from plag_ros.core.control.settings import TRAJECTORY_COMMAND_TOPIC
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.core.identification.excitation import (
    ExcitationLimits,
    FourierExcitation,
    check_excitation,
    design_excitation,
    excitation_points,
)
from plag_ros.core.simulation.driver import DriverEmulation
from plag_ros.core.simulation.joint_trajectory import TrajectoryCommand
from plag_ros.core.simulation.settings import SimSettings
from plag_ros.core.simulation.simulator import Simulator

__all__ = ['configure', 'run', 'simulate_play']

TOPIC = TRAJECTORY_COMMAND_TOPIC
"""The driver's trajectory controller's command topic."""


def _limits(args: argparse.Namespace) -> ExcitationLimits:
    return ExcitationLimits(position_margin=args.margin, velocity=args.velocity,
                            acceleration=args.acceleration,
                            effort_fraction=args.effort_fraction, min_height=args.min_height)


def read_excitation(path: Path) -> tuple[FourierExcitation, ExcitationLimits]:
    """The trajectory and limits of an excitation.yaml.

    Raises:
        ValueError: not such a file; OSError: unreadable.
    """
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict) or 'trajectory' not in data:
        raise ValueError(f'{path}: not an excitation.yaml of plag-ros excite')
    return (FourierExcitation.from_dict(data['trajectory']),
            ExcitationLimits(**(data.get('limits') or {})))


def design(args: argparse.Namespace, model: RobotModel) -> int:
    """``plag-ros excite -o OUT``."""
    limits = _limits(args)
    excitation, condition = design_excitation(
        model, [j for j in motors.ARM_JOINTS if j in model.joint_names], period=args.period,
        harmonics=args.harmonics, limits=limits, seed=args.seed,
        max_iterations=args.iterations)
    found = check_excitation(model, excitation, limits)
    args.output.mkdir(parents=True, exist_ok=True)
    content = {
        'provenance': {'date': datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec='seconds'), 'model': model.name, 'model_parameters':
            str(args.model or ''), 'seed': args.seed},
        'condition_number': condition,
        'check': {'position_margin': found.position_margin, 'velocity': found.velocity,
                  'acceleration': found.acceleration,
                  'torque_over_saturation': found.effort_fraction,
                  'min_link_height': found.min_height},
        'limits': {k: getattr(limits, k) for k in ('position_margin', 'velocity',
                                                    'acceleration', 'effort_fraction',
                                                    'min_height')},
        'trajectory': excitation.to_dict()}
    (args.output / 'excitation.yaml').write_text(yaml.safe_dump(content, sort_keys=False))
    _figure(model, excitation, args.output / 'excitation.png')
    print(f'plag-ros excite: {len(excitation.joints)} joints, {excitation.period:g} s period, '
          f'{excitation.harmonics} harmonics; regressor condition number {condition:.3g}; '
          f'peak |qd| {found.velocity:.2f} rad/s, |qdd| {found.acceleration:.2f} rad/s^2, '
          f'torque {found.effort_fraction:.0%} of saturation, lowest link '
          f'{found.min_height:.3f} m; wrote {args.output}/excitation.yaml, excitation.png')
    return 0


def _figure(model: RobotModel, excitation: FourierExcitation, path: Path) -> None:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    t = np.linspace(0.0, excitation.period, 1000)
    q, qd, _ = excitation.sample(t)
    fig, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    for k, name in enumerate(excitation.joints):
        label = name.removeprefix(model.name + '_')
        axes[0].plot(t, q[:, k], lw=1, label=label)
        axes[1].plot(t, qd[:, k], lw=1)
    axes[0].set_ylabel('q [rad]')
    axes[1].set_ylabel('qd [rad/s]')
    axes[1].set_xlabel('t [s] (one period)')
    axes[0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def simulate_play(model: RobotModel, excitation: FourierExcitation, bag: Path, *,
                  cycles: int, parameters: Path | None = None, rate_hz: float = 50.0,
                  start: np.ndarray | None = None) -> Path:
    """Play ``excitation`` on the simulator offline and record it as the arm would be.

    The simulated arm is ``model`` with the figures of ``parameters`` (bodies, friction,
    armature, servo K_s); it starts at ``start`` (default: every joint at 0), settles for a
    second, then follows the trajectory message from the trajectory controller's
    interpolation (:class:`~plag_ros.core.simulation.joint_trajectory.TrajectoryCommand`), its
    command updated every physics step. Joint states are recorded at the simulator node's rate,
    order, encoder steps and effort units.

    Returns:
        The bag written.
    """
    from builtin_interfaces.msg import Duration
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from plag_ros.ros.messages import ns_to_stamp
    from plag_ros.ros.output_bag import write_joint_state_bag

    settings = SimSettings()
    arm, params = model_with_parameters(model, parameters)
    config = settings.simulator_config()
    if params is not None:
        config = config.with_model_parameters(params, arm)
    sim = Simulator(arm, config)
    # what the driver publishes (its joint order, effort in its units): the simulator
    # node's driver side, stepped here by simulated time instead of the wall clock
    driver = DriverEmulation(sim, settings, log=lambda _: None, now_s=lambda: 0.0)
    names = list(sim.actuated_names)
    command_joints = [j for j in settings.arm_joints if j in names]
    arm_cols = [names.index(j) for j in command_joints]
    q0 = np.zeros(len(names)) if start is None else np.asarray(start, dtype=float)
    sim.reset(q0)
    sim.set_position_command(q0)
    dt = 1.0 / settings.physics_rate_hz
    every = int(round(settings.physics_rate_hz / settings.publish_rate_hz))
    t0_ns = 1_800_000_000_000_000_000
    settle = 1.0
    times, positions, velocities = excitation_points(
        excitation, command_joints, q0[arm_cols], cycles=cycles, rate_hz=rate_hz)
    command = TrajectoryCommand(settle, q0[arm_cols], times, positions, velocities)
    steps = int(round((command.end_s + 1.0) / dt))
    t_ns, q, effort = [], [], []
    target = q0.copy()
    for k in range(1, steps + 1):
        t = k * dt
        if t >= settle:
            target[arm_cols] = command.position(t - dt)     # the command of this step
        sim.step(dt, position_command=target)
        if k % every == 0:
            _, q_published, _, effort_published = driver.joint_state()
            t_ns.append(t0_ns + int(round(t * 1e9)))
            q.append(q_published)
            effort.append(effort_published)
    msg = JointTrajectory(joint_names=command_joints)
    msg.header.stamp = ns_to_stamp(t0_ns + int(round(settle * 1e9)))
    msg.points = [JointTrajectoryPoint(
        positions=p.tolist(), velocities=v.tolist(),
        time_from_start=Duration(sec=int(s), nanosec=int(round((s - int(s)) * 1e9))))
        for s, p, v in zip(times, positions, velocities)]
    sent_ns = t0_ns + int(round((settle - 0.2) * 1e9))
    return write_joint_state_bag(
        bag, np.array(t_ns, dtype=np.int64), list(driver.state_names), np.array(q),
        effort=np.array(effort),
        messages=[(TOPIC, 'trajectory_msgs/msg/JointTrajectory', sent_ns, msg)])


def play(args: argparse.Namespace, model: RobotModel) -> int:
    """``plag-ros excite --play FILE`` on the ROS graph."""
    import rclpy

    from plag_ros.apps.replay import _with_ros
    from plag_ros.ros.excitation_player import PlayError, play_excitation

    excitation, limits = read_excitation(args.play)

    def work(stop: threading.Event) -> int:
        node = rclpy.create_node('plag_excite')
        try:
            start, end = play_excitation(
                node, model, excitation, command_joints=list(motors.ARM_JOINTS),
                topic=TOPIC, cycles=args.cycles, limits=limits, rate_hz=args.rate,
                approach_speed=args.approach_speed, tracking_limit=args.tracking_limit,
                wait_subscribers=args.wait_subscribers, stop=stop)
        except PlayError as err:
            print(f'plag-ros excite: {err}', file=sys.stderr)
            return 3 if str(err).startswith('stopped') else 2
        finally:
            node.destroy_node()
        print(f'plag-ros excite: played from {start:.3f} to {end:.3f} s (node clock)')
        return 0

    return _with_ros(work)


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros excite``."""
    parser.add_argument('-o', '--output', type=Path, help='design: write OUT/excitation.yaml')
    parser.add_argument('--play', type=Path, metavar='YAML',
                        help='play this excitation.yaml (on the ROS graph, or --simulate)')
    parser.add_argument('--simulate', type=Path, metavar='BAG',
                        help='with --play: play on the simulator offline into this bag')
    parser.add_argument('--model', type=Path, metavar='YAML',
                        help='identified.yaml: the figures to design with, or with '
                             "--simulate the simulated arm's own")
    parser.add_argument('--urdf', type=Path, help='URDF (default: the bundled CRANE-X7)')
    parser.add_argument('--period', type=float, default=10.0, help='[s] (default 10)')
    parser.add_argument('--harmonics', type=int, default=5, help='(default 5)')
    parser.add_argument('--velocity', type=float, default=ExcitationLimits.velocity,
                        help='|qd| bound [rad/s]')
    parser.add_argument('--acceleration', type=float, default=ExcitationLimits.acceleration,
                        help='|qdd| bound [rad/s^2]')
    parser.add_argument('--margin', type=float, default=ExcitationLimits.position_margin,
                        help='distance from the joint limits [rad]')
    parser.add_argument('--effort-fraction', type=float,
                        default=ExcitationLimits.effort_fraction,
                        help='model torque bound as a share of servo saturation')
    parser.add_argument('--min-height', type=float, default=ExcitationLimits.min_height,
                        help='lowest link frame height above the base [m]')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--iterations', type=int, default=60, help='SLSQP iterations')
    parser.add_argument('--cycles', type=int, default=3, help='periods to play (default 3)')
    parser.add_argument('--rate', type=float, default=50.0,
                        help='trajectory points per second (default 50)')
    parser.add_argument('--approach-speed', type=float, default=0.3,
                        help='speed of the move to the start pose [rad/s]')
    parser.add_argument('--wait-subscribers', type=int, default=1, metavar='N',
                        help='send only once N nodes subscribe to the command (1: the '
                             'controller; 2 with plag-ros record beside it)')
    parser.add_argument('--tracking-limit', type=float, default=0.3,
                        help='stop when a joint is further than this from its command [rad]')


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros excite``; see the module doc for exit codes."""
    if (args.output is None) == (args.play is None) or (args.simulate and not args.play):
        print('plag-ros excite: give -o OUT to design, or --play YAML [--simulate BAG]',
              file=sys.stderr)
        return 2
    try:
        model = RobotModel.from_urdf(args.urdf or default_urdf_path())
        if args.output is not None:
            model, _ = model_with_parameters(model, args.model)
            return design(args, model)
        if args.simulate is not None:
            excitation, limits = read_excitation(args.play)
            found = check_excitation(model, excitation, limits)
            if found.problems:
                raise ValueError('the trajectory breaks the limits: '
                                 + '; '.join(found.problems))
            simulate_play(model, excitation, args.simulate, cycles=args.cycles,
                          parameters=args.model, rate_hz=args.rate)
            print(f'plag-ros excite: simulated {args.cycles} x {excitation.period:g} s into '
                  f'{args.simulate}')
            return 0
        model, _ = model_with_parameters(model, args.model)
        return play(args, model)
    except (ValueError, OSError) as err:
        print(f'plag-ros excite: {err}', file=sys.stderr)
        return 2
