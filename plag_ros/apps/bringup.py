"""``plag-ros sim`` and ``plag-ros run``: bring-up without ``ros2 launch``, with a live summary.

``plag-ros sim`` starts the simulated CRANE-X7 (``sim_node``, config/sim.yaml) and the
dynamics node (config/crane_x7.yaml, model from the simulator's ``robot_description``),
optionally the impedance node (``--control``), drives the arm through a slow swing
(trajectories to its arm controller, timed by the joint states' stamps; ``--duration`` and
``--report`` count from the swing's start on that clock too), and prints once a second
what the dynamics node reports: input and
output rates, latency from the joint state stamp to the decomposition's arrival, rejected
input, and the strongest motion propagation paths (joint k <- source joint s) of the last
second. ``plag-ros run`` starts the dynamics node alone, to join a real robot's graph
(the official ``ros2 launch crane_x7_examples demo.launch.py``: ``/joint_states`` from the
driver's joint state broadcaster and ``robot_description`` from MoveIt's
robot_state_publisher; ``crane_x7_control.launch.py`` alone publishes no
``robot_description``, use ``--description-source file`` then; ``crane_x7_bringup`` is a
ROS 1 package, rt-net/crane_x7_ros master).

Each node runs in its own subprocess, as ``launch/sim.launch.py`` and
``launch/crane_x7.launch.py`` start it: both read what to run (executables, node names,
parameter files, overrides) from :mod:`plag_ros.ros.node_setups`; ``plag-ros sim
--control`` adds its demo settings on top (:data:`SIM_CONTROL_DEMO`), and ``plag-ros sim``
runs the simulator on its own clock, paced by the dynamics node (:data:`SIM_CLOCK`): the
joint states come one period apart whatever the load, at real speed where the machine
keeps up. The
simulator steps at 1 kHz and the dynamics node decomposes at 200 Hz, and in separate
interpreters they do not share a GIL, so neither's timing depends on the other's Python
work. A node that exits is reported; in torque mode (``run --driver``) the others stay up,
and the driver holds the arm in position mode until Ctrl-C, while elsewhere the run ends.
This process only hosts the small ``plag_monitor`` node that prints the summary.

``plag-ros sim --dynamixel`` runs the emulated servo bus (:mod:`plag_ros.apps.dynamixel_bus`)
in place of the simulator node: the arm is then reached as the real one is, through its
servos, and a driver on the bus publishes the joint states.

``plag-ros run --driver PORT`` is torque mode on the real arm (docs/concepts/torque-mode.md):
our bus driver on PORT in place of the robot's, the dynamics node on the bundled URDF and,
with ``--control``, the impedance node on the effort path, as ``launch/torque.launch.py``
starts them (``torque_setup()``).

Size (over ~600 lines): the two commands and their three set-ups share one bring-up, one
monitor and one argument set; split, each part would import the others.
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from plag_ros.apps.stop_signals import stop_on_signals
from plag_ros.core.common.shipped import shipped_file
from plag_ros.ros.domains import isolate
from plag_ros.ros.node_setups import (
    NodeSetup,
    check_params_file,
    own_params_file,
    robot_setup,
    running,
    sim_setup,
    torque_setup,
)
from plag_ros.ros.nodes import EXIT_WITH_PARENT

if TYPE_CHECKING:
    from trajectory_msgs.msg import JointTrajectory

__all__ = ['SIM_CLOCK', 'SIM_CONTROL_DEMO', 'NodeProcess', 'NodeSpec', 'Summary', 'config_path',
           'configure', 'configure_run', 'robot_specs', 'run', 'run_dynamics_only', 'run_sim',
           'sim_specs', 'torque_specs', 'with_overlay']

DYNAMICS = '/plag_dynamics'


def config_path(name: str) -> Path:
    """Path of ``config/<name>``: the checkout's, else an install's (:func:`shipped_file`)."""
    return shipped_file('config', name)


@dataclass
class NodeSpec:
    """One node subprocess: ``python -m plag_ros.ros.nodes.<module> --ros-args ...``.

    ``params_file`` is a name under ``config/`` or an absolute path; ``params`` are
    ``-p name:=value`` overrides (YAML scalars or lists), ``remaps`` ``-r from:=to``;
    ``name`` (``-r __node:=name``) replaces the node's own default name. ``own_params_file``
    (``--params-file``) comes between the bundled file and the overrides, in the launch
    files' order (:func:`plag_ros.ros.node_setups.parameter_layers`); ``fixed`` names what
    it may not set (the setup's).
    """

    module: str
    params_file: str | Path | None = None
    params: dict[str, object] = field(default_factory=dict)
    remaps: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    own_params_file: str | None = None
    fixed: tuple[str, ...] = ()

    @classmethod
    def from_setup(cls, setup: NodeSetup) -> NodeSpec:
        """The subprocess of one node of a shared setup (:mod:`plag_ros.ros.node_setups`)."""
        return cls(setup.executable, setup.params_file, dict(setup.overrides),
                   dict(setup.remappings), setup.name, fixed=tuple(setup.fixed))

    def command(self) -> list[str]:
        args = [sys.executable, '-m', f'plag_ros.ros.nodes.{self.module}', '--ros-args']
        if self.name:
            args += ['-r', f'__node:={self.name}']
        if self.params_file:
            path = Path(self.params_file)
            args += ['--params-file',
                     str(path if path.is_absolute() else config_path(str(self.params_file)))]
        if self.own_params_file:
            args += ['--params-file', self.own_params_file]
        for name, value in self.params.items():
            text = ('true' if value else 'false') if isinstance(value, bool) else str(value)
            args += ['-p', f'{name}:={text}']
        for source, target in self.remaps.items():
            args += ['-r', f'{source}:={target}']
        return args


class NodeProcess:
    """A node in a subprocess, its output in a log file; stopped through its SIGINT path.

    Used by the bring-up and by the tests that talk to real nodes. With
    ``exit_with_parent`` the node (one that spins through ``spin_node``, or the emulated
    bus) shuts down on its own when this process dies, however it died
    (:data:`plag_ros.ros.nodes.EXIT_WITH_PARENT`; made from the main thread, whose end
    the kernel watches).
    """

    def __init__(self, args: list[str], log_path: Path, *, label: str = '',
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 essential: bool = True, exit_with_parent: bool = False) -> None:
        self.args, self.log_path, self.label = args, log_path, label
        self.essential = essential
        """Whether the bring-up ends when this node exits (torque mode: only the driver,
        which holds the arm whatever the others do)."""
        if exit_with_parent:    # SIGTERM to the node when this thread's process dies
            env = {**(os.environ if env is None else env), EXIT_WITH_PARENT: str(os.getpid())}
        self._log = open(log_path, 'wb')  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(args, env=env, cwd=cwd, stdout=self._log,
                                        stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def output(self) -> str:
        """Everything the node printed so far (also after :meth:`stop`)."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors='replace')

    def tail(self, lines: int = 20) -> str:
        """The last ``lines`` of output, each prefixed with the node's label."""
        text = self.output().splitlines()
        return '\n'.join(f'  [{self.label}] {line}' for line in text[-lines:])

    def stop(self, timeout: float = 10.0, signum: int = signal.SIGINT) -> int:
        """``signum`` (SIGINT: Ctrl-C, or launch's SIGTERM), then SIGKILL after ``timeout``;
        the exit code."""
        if self.alive():
            self.process.send_signal(signum)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def __enter__(self) -> NodeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _short(name: str) -> str:
    """'crane_x7_upper_arm_revolute_part_twist_joint' -> 'upper_arm_revolute_part_twist'."""
    for prefix in ('crane_x7_',):
        name = name.removeprefix(prefix)
    return name.removesuffix('_joint')


class Summary:
    """Rolling figures of the dynamics node's outputs over one print period.

    Fed with what the monitor receives; :meth:`line` renders and resets the period.
    """

    def __init__(self) -> None:
        self.joints: list[str] = []
        self.total_outputs = 0
        self.diagnostics: dict[str, str] = {}
        self._reset()

    def _reset(self) -> None:
        self.start = time.monotonic()
        self.outputs = 0
        self.latency_ms: list[float] = []
        self.sq = {'velocity': None, 'acceleration': None}
        self.count = {'velocity': 0, 'acceleration': 0}

    def on_output(self, stamp_ns: int, received_ns: int) -> None:
        self.outputs += 1
        self.total_outputs += 1
        self.latency_ms.append((received_ns - stamp_ns) * 1e-6)

    def on_array(self, kind: str, values: np.ndarray) -> None:
        """``values`` (n, B, n) velocity or acceleration parts: accumulate (k, s) squares."""
        by_source = values.sum(axis=1)
        sq = by_source * by_source
        self.sq[kind] = sq if self.sq[kind] is None else self.sq[kind] + sq
        self.count[kind] += 1

    def paths(self, top: int = 3) -> list[tuple[float, str, int, int]]:
        """Largest RMS propagation torques ``(rms [N*m], kind, k, s)`` with k != s."""
        found: list[tuple[float, str, int, int]] = []
        for kind, sq in self.sq.items():
            if sq is None or not self.count[kind]:
                continue
            rms = np.sqrt(sq / self.count[kind])
            np.fill_diagonal(rms, 0.0)
            for k, s in zip(*np.unravel_index(np.argsort(rms, axis=None)[::-1][:top],
                                               rms.shape), strict=True):
                if rms[k, s] > 0.0:
                    found.append((float(rms[k, s]), kind, int(k), int(s)))
        return sorted(found, reverse=True)[:top]

    def line(self, elapsed_s: float) -> str:
        """One summary line for the period since the last call (and reset it)."""
        period = max(time.monotonic() - self.start, 1e-9)
        lat = np.array(self.latency_ms)
        if lat.size:
            latency = (f'latency p50 {np.percentile(lat, 50):.2f} ms '
                       f'p99 {np.percentile(lat, 99):.2f} ms')
        else:
            latency = 'latency -'
        d = self.diagnostics
        if d.get('latency_p99_ms', 'nan') != 'nan':
            latency += f" (node p99 {_num(d['latency_p99_ms']).strip()} ms)"  # before DDS out
        rate_in = d.get('input_rate_hz', '-')
        rejected = d.get('rejected', '-')
        reasons = [f"{key.removeprefix('rejected.')} {value}" for key, value in d.items()
                   if key.startswith('rejected.') and value not in ('0', '')]
        if reasons:
            rejected += f" ({', '.join(reasons)})"
        names = self.joints

        def label(k: int) -> str:
            return _short(names[k]) if k < len(names) else str(k)

        paths = ', '.join(f'{kind[:3]} {label(k)} <- {label(s)} {rms:.3g} N*m'
                          for rms, kind, k, s in self.paths())
        text = (f't={elapsed_s:5.1f}s  in {_num(rate_in)} Hz  out {self.outputs / period:6.1f} '
                f'Hz  {latency}  rejected {rejected}  paths: {paths or "-"}')
        self._reset()
        return text


def _num(text: str) -> str:
    try:
        return f'{float(text):6.1f}'
    except ValueError:
        return f'{text:>6}'


SWING = ((3, 0.6, 0.4), (1, 0.3, 0.25), (6, 0.5, 0.3))
"""The demo swing: (model joint index, amplitude [rad], frequency [Hz]) of each moving joint."""
SWING_EASE_S = 2.0
"""The swing eases in over this long [s]."""
TRAJECTORY_HORIZON_S = 2.0
"""Each trajectory message of the swing reaches this far [s] past its start stamp."""
TRAJECTORY_RESEND_S = 0.1
"""A new trajectory message every this many seconds of the simulator's stamps."""
TRAJECTORY_SPACING_S = 0.02
"""Spacing [s] of a message's points (cubic segments, positions and velocities)."""
RECORD_QUEUE_S = 10.0
"""The stall of this process [s] that the queues of the recorded streams (the joint states
and the node's torques) bridge at 200 Hz."""


def _swing(t: np.ndarray, q0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Slow demo motion: positions [rad] and velocities [rad/s], (P, n) in model order, at
    times ``t`` (P,) [s] from its start.

    The elbow swings 0.6 rad at 0.4 Hz, the shoulder tilt 0.3 rad at 0.25 Hz and the
    wrist 0.5 rad at 0.3 Hz, each eased in over the first two seconds: the same spirit as
    the CRANE-X7 experiment of Gunji, Kusaka and Tanaka 2025 (Robotics 14(5), 54,
    doi:10.3390/robotics14050054): one joint moves, the others feel it.
    """
    t = np.asarray(t, dtype=np.float64)
    x = np.clip(t / SWING_EASE_S, 0.0, 1.0)
    ease = 0.5 - 0.5 * np.cos(np.pi * x)
    dease = np.where(t < SWING_EASE_S, 0.5 * np.pi / SWING_EASE_S * np.sin(np.pi * x), 0.0)
    q = np.repeat(q0[None].astype(np.float64), t.size, axis=0)
    qd = np.zeros_like(q)
    for k, amp, freq in SWING:
        if k < q0.size:
            w = 2 * np.pi * freq
            q[:, k] += ease * amp * np.sin(w * t)
            qd[:, k] = dease * amp * np.sin(w * t) + ease * amp * w * np.cos(w * t)
    return q, qd


def _swing_trajectory(start_ns: int, origin_ns: int, q0: np.ndarray, joints: np.ndarray,
                      names: list[str]) -> JointTrajectory:
    """The swing from ``start_ns`` on as a JointTrajectory stamped ``start_ns``.

    The arm's trajectory controller plays it on the simulator's clock, the one that stamps
    the joint states, so the motion keeps its timing when this process stalls (a stream of
    position commands would hold, then jump); each message reaches
    :data:`TRAJECTORY_HORIZON_S` ahead, the next replaces it from its own start.

    Args:
        start_ns: the message's start stamp [ns]; origin_ns: the swing's t = 0 [ns].
        q0: (n,) rest positions [rad] in model order; joints: (J,) model indices of
            ``names``, the arm controller's joints.
    """
    from plag_ros.ros import messages as msgs

    tau = np.arange(0.0, TRAJECTORY_HORIZON_S + 1e-9, TRAJECTORY_SPACING_S)
    q, qd = _swing((start_ns - origin_ns) * 1e-9 + tau, q0)
    msg = msgs.joint_trajectory(names, tau, q[:, joints], qd[:, joints])
    msg.header.stamp = msgs.ns_to_stamp(start_ns)
    return msg


def _monitor(children: list[NodeProcess], stop: threading.Event, *, duration: float | None,
             startup_timeout: float, motion: bool, out, report: Path | None = None,
             foxglove: tuple[str, int, bool] | None = None) -> int:
    """Host ``plag_monitor``: once the dynamics node publishes and the joint states reach
    this process, start the swing (``motion``), print the summary once a second until the
    node's output reaches ``duration`` seconds of stamp time past that start, or until
    ``stop`` (a signal; exit status 0); with ``report``, then write the run's picture and
    table over that stretch there (:mod:`.live_report`); with ``foxglove`` (host, port,
    control), serve the view topics to Foxglove meanwhile (:mod:`plag_ros.ros.foxglove_view`).

    The run's clock is the stamps, not this process's: the simulator's (or the robot's)
    clock, on which the arm's trajectory controller also plays the swing. A stall of this
    process then neither stretches the record nor holds the command and jumps it on.
    Without output for ``startup_timeout`` seconds the run fails, as at start-up.
    """
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray, String
    from trajectory_msgs.msg import JointTrajectory

    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
    from plag_ros.core.dynamics.motors import ARM_JOINTS
    from plag_ros.core.simulation.settings import JTC
    from plag_ros.ros import messages as msgs

    summary = Summary()
    recording = None
    model = RobotModel.from_urdf(default_urdf_path())
    reader = msgs.JointStateReader(model)
    if report is not None:
        from plag_ros.apps.live_report import LiveRecording

        recording = LiveRecording(model)
    # Newest stamps [ns] of the simulator's joint states and of the node's output.
    clock = {'input': 0, 'output': 0}
    context = rclpy.Context()
    # No rclpy signal handlers here: this process's Ctrl-C is ``stop``, which the loops
    # below read between spins, and the finally blocks stop the node subprocesses.
    rclpy.init(context=context, signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
    node = rclpy.create_node('plag_monitor', context=context)
    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    # Every sample of the record counts (a lost input or output sets the rebuild apart from
    # the node): its two streams queue seconds, not the half second of the others.
    recorded = QoSProfile(depth=round(RECORD_QUEUE_S * 200),
                          reliability=ReliabilityPolicy.RELIABLE)
    latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL)

    def on_state(msg: JointState) -> None:
        t_ns = msgs.stamp_to_ns(msg.header.stamp)
        summary.on_output(t_ns, time.time_ns())
        clock['output'] = max(clock['output'], t_ns)
        if recording is not None:
            recording.on_output(t_ns, np.array(msg.effort))

    def on_input(msg: JointState) -> None:
        try:
            t_ns, q, _, _ = reader.read(msg)
        except msgs.JointStateError:
            return                     # the node rejects it too
        clock['input'] = max(clock['input'], t_ns)
        if recording is not None:
            recording.on_input(t_ns, q, reader.optional_effort(msg))

    def on_names(msg: String) -> None:
        summary.joints = msgs.parse_names(msg)['joints']

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.startswith(DYNAMICS):
                summary.diagnostics = {kv.key: kv.value for kv in status.values}

    node.create_subscription(JointState, f'{DYNAMICS}/joint_states', on_state, recorded)
    node.create_subscription(String, f'{DYNAMICS}/names', on_names, latched)
    node.create_subscription(DiagnosticArray, '/diagnostics', on_diagnostics, reliable)
    if recording is not None or motion:
        node.create_subscription(JointState, 'joint_states', on_input, recorded)

    def on_array(kind: str) -> Callable[[Float64MultiArray], None]:
        return lambda msg: summary.on_array(kind, msgs.multi_array_to_numpy(msg)[0])

    for kind in ('velocity', 'acceleration'):
        node.create_subscription(Float64MultiArray, f'{DYNAMICS}/{kind}', on_array(kind),
                                 reliable)
    trajectory_pub = None
    if motion:
        arm = list(ARM_JOINTS)
        arm_index = np.array([model.joint_names.index(name) for name in arm])
        q0 = np.zeros(model.n_joints)
        trajectory_pub = node.create_publisher(
            JointTrajectory, f'{JTC}/joint_trajectory',
            QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    view = None
    if foxglove is not None:
        from plag_ros.ros.foxglove_view import FoxgloveView, view_topics

        host, port, control = foxglove
        try:
            view = FoxgloveView(node, view_topics(control=control), host=host, port=port)
        except RuntimeError as err:
            print(f'plag-ros: {err}', file=sys.stderr)
            node.destroy_node()
            context.try_shutdown()
            return 2
        print(f'plag-ros: Foxglove view on ws://{host}:{view.port} (Foxglove: Open '
              f'connection; layout {config_path("plag_ros.foxglove.json")})', file=out,
              flush=True)
    executor = rclpy.executors.SingleThreadedExecutor(context=context)
    executor.add_node(node)
    reported: set[NodeProcess] = set()     # nodes whose exit was reported
    status = 0
    start_ns = end_ns = None
    # The graph is up once the node's output and, where the run records or moves the arm,
    # the joint states both reach this process: discovery matches each subscription on its
    # own, and a loaded machine has matched the input seconds after the output, which left
    # the record's first seconds without input and the swing's start late.
    needs_input = recording is not None or motion
    try:
        begin = time.monotonic()
        while (summary.total_outputs == 0 or (needs_input and clock['input'] == 0)) \
                and not stop.is_set():
            executor.spin_once(timeout_sec=0.1)
            if _report_exits(children, reported):
                return 1
            if not reported and time.monotonic() - begin > startup_timeout:
                missing = f'output from {DYNAMICS}' if summary.total_outputs == 0 \
                    else 'joint_states'
                print(f'plag-ros: no {missing} within {startup_timeout:g} s', file=sys.stderr)
                for child in children:
                    print(child.tail(), file=sys.stderr)
                return 1
        if not stop.is_set():
            print(f'plag-ros: graph up after {time.monotonic() - begin:.1f} s', file=out,
                  flush=True)
        # The run starts now on the stamps' clock: the newest joint state's stamp, where the
        # swing's first trajectory starts (the controller plays it from its stamp on).
        start_ns = max(clock['input'], clock['output'])
        if recording is not None:
            recording.set_window(start_ns)
        sent_ns = None
        summary._reset()
        last_output, last_output_at = clock['output'], time.monotonic()
        next_print = time.monotonic() + 1.0
        while not stop.is_set():
            if trajectory_pub is not None and clock['input'] >= start_ns and (
                    sent_ns is None or clock['input'] - sent_ns >= TRAJECTORY_RESEND_S * 1e9):
                sent_ns = clock['input'] if sent_ns is not None else start_ns
                trajectory_pub.publish(_swing_trajectory(sent_ns, start_ns, q0, arm_index,
                                                          arm))
            elapsed = max(clock['output'] - start_ns, 0) * 1e-9
            if duration is not None and elapsed >= duration:
                end_ns = start_ns + round(duration * 1e9)
                break
            executor.spin_once(timeout_sec=0.01)
            now = time.monotonic()
            if clock['output'] != last_output:
                last_output, last_output_at = clock['output'], now
            elif not reported and now - last_output_at > startup_timeout:
                print(f'plag-ros: no output from {DYNAMICS} for {startup_timeout:g} s',
                      file=sys.stderr)
                status = 1
                break
            if now >= next_print:
                next_print += 1.0
                print(summary.line(elapsed), file=out, flush=True)
            if _report_exits(children, reported):
                status = 1
                break
        if end_ns is not None and start_ns is not None:
            # the last period, cut short by --duration: by the stamps a loaded machine's
            # run can end before a second of wall time has passed since the last line
            print(summary.line((end_ns - start_ns) * 1e-9), file=out, flush=True)
    except rclpy.executors.ExternalShutdownException:
        pass
    finally:
        if view is not None:
            view.close()
        executor.shutdown()
        node.destroy_node()
        context.try_shutdown()
    status = status or int(bool(reported))
    d = summary.diagnostics
    print(f'plag-ros: {summary.total_outputs} decompositions received; node reports '
          f"received {d.get('received', '-')}, published {d.get('published', '-')}, "
          f"rejected {d.get('rejected', '-')}", file=out, flush=True)
    if recording is not None and report is not None and status == 0 and len(recording):
        from plag_ros.apps.live_report import write_report

        recording.set_window(start_ns, end_ns)
        png, text = write_report(report, recording, title='plag-ros sim')
        print(f'\n{text}plag-ros: wrote {png} and {report / "summary.txt"}', file=out,
              flush=True)
    return status


def _report_exits(children: list[NodeProcess], reported: set[NodeProcess]) -> bool:
    """Report each node that exited since the last call; whether one of them was
    essential (the bring-up then ends). A node that was not is reported with what goes on:
    in torque mode the driver holds the arm in position mode (its effort commands go
    stale) until Ctrl-C."""
    ended = False
    for child in children:
        if child.alive() or child in reported:
            continue
        reported.add(child)
        print(f'plag-ros: {child.label} exited with {child.process.returncode}',
              file=sys.stderr)
        print(child.tail(), file=sys.stderr)
        if child.essential:
            ended = True
        else:
            running = ', '.join(c.label for c in children if c.alive())
            print(f'plag-ros: still running: {running}; the driver holds the arm in position '
                  'mode. Ctrl-C ends the run.', file=sys.stderr, flush=True)
    return ended


def with_params_file(specs: list, path: str | None) -> list:
    """``specs`` with the user's parameter file ``path`` (``--params-file``) after each
    node's bundled one, checked as the launch files check ``params_file:=``: a file that
    is not a parameter file, or that sets what this command sets or the setup fixes, is a
    ValueError that says which (it would be dropped, or retune torque mode, without a
    word). The bus process takes no parameters."""
    if not path:
        return specs
    own = own_params_file(path)
    if own is None:
        return specs
    own = str(Path(own).expanduser().resolve())
    out = []
    for spec in specs:
        if isinstance(spec, NodeSpec):
            setup = NodeSetup(spec.module, spec.name or spec.module, str(spec.params_file),
                              fixed=spec.fixed)
            check_params_file(own, setup, spec.params)
            spec = replace(spec, own_params_file=own)
        out.append(spec)
    return out


def _bring_up(specs: list[NodeSpec], args: argparse.Namespace, *, motion: bool) -> int:
    try:
        specs = with_params_file(specs, getattr(args, 'params_file', None))
    except ValueError as err:
        print(f'plag-ros: {err}', file=sys.stderr)
        return 2
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix='plag_ros_'))
    log_dir.mkdir(parents=True, exist_ok=True)
    print(f'plag-ros: starting {", ".join(s.module for s in specs)} '
          f"(ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}, logs in {log_dir})",
          flush=True)
    # Ctrl-C, `kill` and a closed terminal all stop the nodes cleanly. An explicit SIGINT
    # handler also undoes the SIG_IGN a non-interactive shell gives background jobs, which
    # the node subprocesses would otherwise inherit (and then ignore Ctrl-C).
    stop = threading.Event()
    previous = stop_on_signals(stop, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    children: list[NodeProcess] = []
    status = 1
    try:
        nodes = [spec for spec in specs if spec.module != 'dynamixel_bus']
        # with the bus driver, only its exit ends the run: it holds the arm when the others
        # stop, and a run that took it down with them would leave the arm to its watchdog
        driver = any(spec.module == 'driver_node' for spec in nodes)
        children.extend(NodeProcess(spec.command(), log_dir / f'{spec.module}.log',
                                     label=spec.module, exit_with_parent=True,
                                     essential=not driver or spec.module == 'driver_node')
                        for spec in nodes)
        bus_spec = next((spec for spec in specs if spec.module == 'dynamixel_bus'), None)
        if bus_spec is not None:
            # The bus answers in real time: start it once the nodes have started up (a
            # node's imports and compiles take both cores for seconds; a driver on the bus
            # meanwhile could miss a reply, which crane_x7_control takes as a dead bus).
            dynamics = next(c for c in children if c.label == 'dynamics_node')
            _wait_for_line(dynamics, "model '", stop, timeout=180.0)
            bus = NodeProcess(bus_spec.command(), log_dir / 'dynamixel_bus.log',
                              label='dynamixel_bus', exit_with_parent=True)
            children.append(bus)
            line = _wait_for_line(bus, 'Dynamixel bus on', stop, timeout=120.0)
            if line is None:
                print('plag-ros: the Dynamixel bus did not start', file=sys.stderr)
                print(bus.tail(), file=sys.stderr)
                return 1
            print(f'plag-ros: {line.split(": ", 1)[-1]}', flush=True)
        foxglove = None
        if args.foxglove:
            foxglove = (args.foxglove_host, args.foxglove_port,
                        bool(getattr(args, 'control', False)))
        timeout = 60.0 if args.startup_timeout is None else args.startup_timeout
        status = _monitor(children, stop, duration=args.duration, startup_timeout=timeout,
                          motion=motion, out=sys.stdout,
                          report=getattr(args, 'report', None), foxglove=foxglove)
    finally:
        for child in reversed(children):
            code = child.stop()
            if code not in (0, -signal.SIGINT):
                print(f'plag-ros: {child.label} exited with {code}', file=sys.stderr)
                print(child.tail(), file=sys.stderr)
                status = status or 1
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def _wait_for_line(child: NodeProcess, text: str, stop: threading.Event, timeout: float
                   ) -> str | None:
    """The first line of ``child``'s output holding ``text`` (None if it exits, ``stop`` is
    set or ``timeout`` passes first)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and child.alive() and not stop.is_set():
        for line in child.output().splitlines():
            if text in line:
                return line
        time.sleep(0.05)
    return None


def sim_specs(control: bool) -> list[NodeSpec]:
    """The simulator setup's nodes, as ``sim.launch.py control:=<control>`` starts them."""
    return [NodeSpec.from_setup(s) for s in running(sim_setup(), control)]


def robot_specs(description_source: str, control: bool = False, controller_file: str = ''
                ) -> list[NodeSpec]:
    """The robot setup's nodes, as ``crane_x7.launch.py`` starts them (it passes the
    ``controller_file`` it spawns our controller with)."""
    return [NodeSpec.from_setup(s) for s in
            running(robot_setup(description_source, controller_file), control)]


SIM_CONTROL_DEMO: dict[str, dict[str, object]] = {
    # Overlay of ``plag-ros sim --control`` on the shared simulator setup, by node name
    # (sim.launch.py has none): in the simulator the controller may drive at once, enabled,
    # the elbow swinging 0.4 rad at 0.5 Hz while the shoulder tilt holds with its elbow path
    # cancelled (on the real arm start_enabled stays false until ~/enable is called).
    'plag_impedance': {'start_enabled': True, 'reference.mode': 'sine',
                       'reference.amplitude': [0.0, 0.0, 0.0, 0.4, 0.0, 0.0, 0.0, 0.0],
                       'reference.frequency_hz': [0.5]},
}


SIM_CLOCK: dict[str, dict[str, object]] = {
    # Overlay of every ``plag-ros sim`` on the simulator node: its own clock, each joint state
    # one period after the last however late its timer ticks (a loaded machine thinned them
    # to 39-135 Hz with 283 ms gaps on wall time, and each gap restarted the dynamics node's
    # estimator), held while 0.1 s ahead of the dynamics node's output so a starved node is
    # not outrun. A machine that keeps up never holds it: 200 Hz, the arm at real speed.
    'plag_sim': {'clock': 'simulated', 'pace_topic': f'{DYNAMICS}/joint_states',
                 'pace_lead': 0.1},
}


def with_overlay(specs: list[NodeSpec],
                 overlay: dict[str, dict[str, object]]) -> list[NodeSpec]:
    """``specs`` with ``overlay[name]`` set on top of the parameters of node ``name``."""
    return [replace(spec, params={**spec.params, **overlay.get(spec.name or '', {})})
            for spec in specs]


def run_sim(args: argparse.Namespace) -> int:
    """``plag-ros sim``: simulator + dynamics node (+ impedance node), summary each second."""
    try:
        isolate(args.domain)
    except (ValueError, RuntimeError) as err:
        print(f'plag-ros: {err}', file=sys.stderr)
        return 2
    if args.control and importlib.util.find_spec('plag_ros.ros.nodes.impedance_node') is None:
        print('plag-ros: --control needs plag_ros.ros.nodes.impedance_node, which is not '
              'installed', file=sys.stderr)
        return 2
    if args.dynamixel:
        return _run_dynamixel(args)
    if args.dynamixel_link or args.dynamixel_record:
        print('plag-ros: --dynamixel-link and --dynamixel-record need --dynamixel',
              file=sys.stderr)
        return 2
    specs = with_overlay(with_overlay(sim_specs(args.control), SIM_CONTROL_DEMO), SIM_CLOCK)
    specs = with_model(specs, args.model, args.sim_model)
    return _bring_up(specs, args, motion=not args.control and args.motion == 'swing')


@dataclass
class BusSpec:
    """The emulated servo bus's process (:mod:`plag_ros.apps.dynamixel_bus`), started
    like a node."""

    link: str | None = None
    record: Path | None = None
    module: str = 'dynamixel_bus'

    def command(self) -> list[str]:
        args = [sys.executable, '-m', 'plag_ros.apps.dynamixel_bus']
        if self.link:
            args += ['--link', self.link]
        if self.record:
            args += ['--record', str(Path(self.record).resolve())]
        return args


def _run_dynamixel(args: argparse.Namespace) -> int:
    """``plag-ros sim --dynamixel``: the bus in place of the simulator node, the dynamics node
    on the bundled URDF (nothing publishes ``robot_description`` until a driver's launch
    does), no demo motion (commands go through whatever driver is on the bus)."""
    if args.control or args.sim_model:
        print('plag-ros: --dynamixel serves the bus only: the controller needs a driver on '
              'it, and the simulated arm is the bundled model (--control and --sim-model '
              'do not apply)', file=sys.stderr)
        return 2
    specs: list = [BusSpec(args.dynamixel_link, args.dynamixel_record),
                   *with_model(robot_specs('file'), args.model)]
    if args.startup_timeout is None:
        args.startup_timeout = math.inf      # the dynamics node waits for a driver
    return _bring_up(specs, args, motion=False)


def torque_specs(port: str, control: bool = False, description_source: str = 'file'
                 ) -> list[NodeSpec]:
    """The torque-mode nodes, as ``torque.launch.py port:=<port> control:=<control>
    robot_description_source:=<description_source>`` starts them."""
    return [NodeSpec.from_setup(s)
            for s in running(torque_setup(port, description_source), control)]


def run_dynamics_only(args: argparse.Namespace) -> int:
    """``plag-ros run``: the dynamics node joining a running robot's graph; with
    ``--driver PORT``, the torque-mode nodes on the robot's bus."""
    if args.driver:
        specs = torque_specs(args.driver, args.control, args.description_source or 'file')
        return _bring_up(with_model(specs, args.model), args, motion=False)
    if args.control:
        print('plag-ros: run --control needs --driver PORT (torque mode); the position path '
              "on the robot's own driver is `ros2 launch plag_ros crane_x7.launch.py "
              'control:=true`', file=sys.stderr)
        return 2
    return _bring_up(with_model(robot_specs(args.description_source or 'topic'), args.model),
                     args, motion=False)


def with_model(specs: list[NodeSpec], model: Path | None, sim_model: Path | None = None
               ) -> list[NodeSpec]:
    """``specs`` with ``model.parameters`` set: ``model`` for every node, ``sim_model``
    (if given) for the simulator instead (a simulated arm that differs from the model the
    other nodes use, as a real arm differs from its URDF)."""
    out = []
    for spec in specs:
        path = sim_model if spec.module == 'sim_node' and sim_model else model
        out.append(replace(spec, params={**spec.params, 'model.parameters':
                                         str(Path(path).resolve())}) if path else spec)
    return out


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--duration', type=float, default=None, metavar='S',
                        help="stop after S seconds of the dynamics node's output, by its "
                             "stamps (the simulator's or the robot's clock; default: until "
                             'Ctrl-C)')
    parser.add_argument('--startup-timeout', type=float, default=None, metavar='S',
                        help='give up if the dynamics node has not published within S '
                             'seconds (default 60; with --dynamixel it waits for a driver '
                             'however long)')
    parser.add_argument('--log-dir', default=None,
                        help="folder for the nodes' logs (default: a new temporary folder)")
    parser.add_argument('--foxglove', action='store_true',
                        help='serve the joint states, torques, components, markers and heat '
                             'map to Foxglove over its WebSocket protocol (no ROS desktop '
                             'needed; layout config/plag_ros.foxglove.json)')
    parser.add_argument('--foxglove-port', type=int, default=8765, metavar='PORT',
                        help='port of the Foxglove view (default 8765; 0: any free port)')
    parser.add_argument('--foxglove-host', default='127.0.0.1', metavar='ADDR',
                        help='address of the Foxglove view (default 127.0.0.1, this machine '
                             'only; 0.0.0.0 serves the network, unauthenticated)')
    parser.add_argument('--model', type=Path, default=None, metavar='YAML',
                        help='identified.yaml of plag-ros identify for every node '
                             '(model.parameters)')
    parser.add_argument('--params-file', default=None, metavar='YAML',
                        help="a ROS 2 parameter file for the nodes, after their bundled "
                             "config (as the launch files' params_file:=; key a node's "
                             'section /**/plag_driver, or /** for all)')


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros sim`` or, for a parser named ``plag-ros run``, of ``run``.

    :mod:`plag_ros.apps.cli` gives one ``configure`` per module and names the parser after the
    command, so the two commands of this module are told apart by ``parser.prog``.
    """
    if parser.prog.split()[-1] == 'run':
        configure_run(parser)
        return
    _common(parser)
    parser.add_argument('--report', type=Path, default=None, metavar='DIR',
                        help='at the end, write DIR/live_torques.png (the joint torques and '
                             'their parts over the run) and DIR/summary.txt')
    parser.add_argument('--control', action='store_true',
                        help='also start impedance_node (config/impedance.yaml); the demo '
                             'motion is then left to the controller')
    parser.add_argument('--domain', type=int, default=None, metavar='N',
                        help='join ROS_DOMAIN_ID N on purpose (default: a free private '
                             'domain, traffic on this machine only)')
    parser.add_argument('--sim-model', type=Path, default=None, metavar='YAML',
                        help="the simulated arm's own figures (an identified.yaml), instead "
                             'of --model, for the simulator only')
    parser.add_argument('--motion', choices=('swing', 'none'), default='swing',
                        help="trajectories sent to the simulator's arm controller "
                             '(default: a slow elbow/shoulder/wrist swing)')
    parser.add_argument('--dynamixel', action='store_true',
                        help="serve the simulated arm as the CRANE-X7's servo bus (eight "
                             'Dynamixel servos, Protocol 2.0) on a pseudo-terminal, printed '
                             'first, instead of publishing its joint states: a driver on the '
                             'bus (crane_x7_control, dynamixel-sdk) publishes them')
    parser.add_argument('--dynamixel-link', default=None, metavar='PATH',
                        help='with --dynamixel, also reach the bus at PATH (a symlink; keep '
                             'it short, as /tmp/dxl0)')
    parser.add_argument('--dynamixel-record', type=Path, default=None, metavar='NPZ',
                        help="with --dynamixel, write the physics' state of every step to "
                             "NPZ at the end (ground truth for the driver's joint states)")


def configure_run(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros run``."""
    _common(parser)
    parser.add_argument('--description-source', choices=('topic', 'file'),
                        default=None, help='where the nodes take the model from (default: '
                        "the robot's robot_description topic; with --driver, the bundled "
                        'URDF)')
    parser.add_argument('--driver', default=None, metavar='PORT',
                        help="torque mode: our bus driver plag_driver on the servo bus PORT "
                             "(/dev/ttyUSB0) in place of the robot's driver "
                             '(docs/concepts/torque-mode.md)')
    parser.add_argument('--control', action='store_true',
                        help='with --driver, also start impedance_node on the effort path '
                             '(config/torque_mode.yaml; ~/enable puts the arm in current '
                             'mode)')


def run(args: argparse.Namespace) -> int:
    """Entry point of ``plag-ros sim`` / ``plag-ros run`` (see :mod:`plag_ros.apps.cli`)."""
    if args.command == 'run':
        return run_dynamics_only(args)
    return run_sim(args)
