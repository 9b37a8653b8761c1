"""Play an excitation trajectory through the driver's trajectory controller, watched.

The arm is moved the way the official bring-up moves it: one ``JointTrajectory`` to
``crane_x7_arm_controller`` (the JointTrajectoryController the CRANE-X7 driver starts),
positions and velocities at every point, so the controller interpolates cubic segments.
The message carries an explicit start stamp (a moment after sending) so a recording of it
says exactly when each point was commanded: ``plag-ros identify --servo`` reads it back.

Before anything moves: every controller joint must be in ``/joint_states``, inside its
limits; the trajectory must pass :func:`~plag_ros.core.identification.excitation.check_excitation`
for the model; something must subscribe to the command topic (the controller is active). While it
plays, a joint further than ``tracking_limit`` from its command, or joint states older than
``stale_s``, stops it: the arm is sent a one-point trajectory to where it is, as is done on Ctrl-C.

Every message is waited for until each matched subscriber has acknowledged it (up to
``ACK_TIMEOUT_S``) before the play returns or raises: the caller destroys the node next, and
a writer destroyed before a reader has acknowledged takes the sample with it. A reader can
be counted by the writer before it has matched the writer itself (discovery is per side);
its first samples then arrive only through the writer's repair, which needs the writer
alive. Without the wait, a play stopped at once lost its hold command for the recorder (seen
in CI: ``plag-ros record`` had the first play's trajectory but neither message of the next).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import rclpy
from rclpy.duration import Duration as RclpyDuration
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.identification.excitation import (
    ExcitationLimits,
    FourierExcitation,
    check_excitation,
    excitation_points,
)
from plag_ros.core.simulation.joint_trajectory import TrajectoryCommand
from plag_ros.ros import messages as msgs
from plag_ros.ros.messages import ns_to_stamp

__all__ = ['START_LEAD_NS', 'PlayError', 'play_excitation']

ACK_TIMEOUT_S = 2.0
"""How long a sent command is waited for to be acknowledged by every matched subscriber [s]."""

START_LEAD_NS = 500_000_000
"""How far ahead of the send the trajectory's start stamp lies [ns]: past DDS delivery and
the controller's next cycle on a loaded robot PC (200 ms was once overtaken on a busy
2-core machine), and short beside the approach that follows."""


class PlayError(RuntimeError):
    """The trajectory was not started, or was stopped (the message says why)."""


def play_excitation(node: Node, model: RobotModel, excitation: FourierExcitation, *,
                    command_joints: list[str], topic: str, cycles: int,
                    limits: ExcitationLimits | None = None, rate_hz: float = 50.0,
                    approach_speed: float = 0.3, tracking_limit: float = 0.3,
                    stale_s: float = 0.5, wait_s: float = 10.0, wait_subscribers: int = 1,
                    stop: threading.Event | None = None,
                    log: Callable[[str], object] = print) -> tuple[float, float]:
    """Send the trajectory and watch it to the end (spins ``node`` itself).

    Args:
        wait_subscribers: subscribers the command topic needs before anything is sent: 1
            is the controller; 2 when ``plag-ros record`` records the command too.

    Returns:
        (start, end) of the played points on the node's clock [s].

    Raises:
        PlayError: a check failed before sending (nothing moved), or the play was stopped
            (tracking, stale states, ``stop`` set); the arm then holds where it is.
    """
    limits = limits or ExcitationLimits()
    found = check_excitation(model, excitation, limits)
    if found.problems:
        raise PlayError('the trajectory breaks the limits: ' + '; '.join(found.problems))
    latest: dict[str, Any] = {}

    def on_state(msg: JointState) -> None:
        position = dict(zip(msg.name, msg.position))
        if all(j in position for j in command_joints):
            latest['q'] = np.array([position[j] for j in command_joints])
            latest['t'] = time.monotonic()

    node.create_subscription(JointState, 'joint_states', on_state, 50)
    publisher = node.create_publisher(
        JointTrajectory, topic, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    deadline = time.monotonic() + wait_s
    wanted = max(1, wait_subscribers)
    while time.monotonic() < deadline and (
            'q' not in latest or publisher.get_subscription_count() < wanted):
        rclpy.spin_once(node, timeout_sec=0.05)
    if 'q' not in latest:
        raise PlayError(f'no /joint_states with every joint of {command_joints} in {wait_s} s')
    if publisher.get_subscription_count() < wanted:
        raise PlayError(f'{publisher.get_subscription_count()} of {wanted} subscribers on '
                        f'{topic} after {wait_s} s (is the trajectory controller active? is '
                        'the recorder running?); nothing was sent')
    q_now = np.asarray(latest['q'])
    cols = [model.joint_names.index(j) for j in command_joints]
    lo, hi = model.joint_lower[cols], model.joint_upper[cols]
    if np.any(q_now < lo) or np.any(q_now > hi):
        raise PlayError(f'the arm is outside its joint limits at {q_now.round(3).tolist()}')
    times, positions, velocities = excitation_points(
        excitation, command_joints, q_now, cycles=cycles, rate_hz=rate_hz,
        approach_speed=approach_speed)
    msg = msgs.joint_trajectory(command_joints, times, positions, velocities)
    # Stamped once the points are built (thousands of them take a while in Python), so the
    # lead is all the message's own: it must reach the controller before its start.
    start_ns = node.get_clock().now().nanoseconds + START_LEAD_NS
    msg.header.stamp = ns_to_stamp(start_ns)
    command = TrajectoryCommand(start_ns * 1e-9, q_now, times, positions, velocities)

    def delivered() -> str:
        """Wait for every matched subscriber's acknowledgement; '' or what is missing."""
        if publisher.wait_for_all_acked(RclpyDuration(seconds=ACK_TIMEOUT_S)):
            return ''
        return (f' (not acknowledged by every subscriber of {topic} within '
                f'{ACK_TIMEOUT_S:g} s)')

    def hold(why: str) -> PlayError:
        q = np.asarray(latest['q'])
        publisher.publish(msgs.joint_trajectory(command_joints, [0.5], [q], [np.zeros(len(q))]))
        return PlayError(f'stopped, the arm holds where it is: {why}{delivered()}')

    publisher.publish(msg)
    log(f'playing {cycles} x {excitation.period:g} s after a {times[0]:.1f} s approach '
        f'({len(times)} points to {topic})')
    while True:
        rclpy.spin_once(node, timeout_sec=0.02)
        now_s = node.get_clock().now().nanoseconds * 1e-9
        if stop is not None and stop.is_set():
            raise hold('interrupted')
        if time.monotonic() - float(latest['t']) > stale_s:
            raise hold(f'no joint states for {stale_s} s')
        error = np.abs(np.asarray(latest['q']) - command.position(now_s))
        if error.max() > tracking_limit:
            k = int(np.argmax(error))
            raise hold(f'{command_joints[k]} is {error[k]:.3f} rad from its command '
                       f'(limit {tracking_limit})')
        if now_s > command.end_s + 0.5:
            missing = delivered()
            if missing:
                log(f'the trajectory was played{missing}')
            return command.first_point_s, command.end_s
