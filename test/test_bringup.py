"""``plag-ros sim`` and ``plag-ros run``: the main-job command of the README, end to end.

``plag-ros sim --duration 5`` (what ``make demo`` runs for 10 s) starts the simulator and the
dynamics node as real processes over DDS (``--domain 14``), drives the arm, prints a
summary once a second and exits 0: the closed loop simulator -> joint_states -> estimator
-> decomposition -> outputs. ``plag-ros run`` joins a graph whose joint states this test
publishes, as a real robot's driver would. Without ``--domain``, ``plag-ros sim`` picks a
private domain on this machine: a subscriber in the default domain 0 sees nothing of it,
one in the printed domain sees its joint states.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from ros_helpers import REPO, RosClient, domain, publish_at_rate, ros_env
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from plag_ros.apps.bringup import Summary
from plag_ros.apps.stop_signals import stop_on_signals
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros import messages as msgs
from plag_ros.ros.nodes import SHUTDOWN_DEADLINE_S

DOMAIN_ID = 14
# (a period with no output, as the last one of a run may be, says 'latency -')
LINE = re.compile(r'^t=\s*(\d+\.\d)s\s+in\s+(\S+) Hz\s+out\s+(\S+) Hz\s+'
                  r'latency (?:p50 (\S+) ms p99 (\S+) ms|-)(?: \(node [^)]*\))?\s+'
                  r'rejected (\d+|-)(?: \(([^)]*)\))?\s+paths: (.*)$')


def _summary_lines(stdout: str) -> list[re.Match]:
    return [m for m in map(LINE.match, stdout.splitlines()) if m]


def test_plag_ros_sim_runs_closed_loop_and_exits_cleanly(tmp_path):
    result = subprocess.run(
        [sys.executable, '-m', 'plag_ros.apps.cli', 'sim', '--duration', '5', '--domain',
         str(domain(DOMAIN_ID)), '--log-dir', str(tmp_path), '--report', str(tmp_path / 'report')],
        cwd=REPO, env=ros_env(DOMAIN_ID), capture_output=True, text=True, timeout=240)
    logs = '\n'.join(p.read_text(errors='replace')[-2000:] for p in tmp_path.glob('*.log'))
    report = f'stdout:\n{result.stdout}\nstderr:\n{result.stderr}\nlogs:\n{logs}'
    assert result.returncode == 0, report
    lines = _summary_lines(result.stdout)
    assert len(lines) >= 4, report                      # one per second for 5 s
    assert float(lines[-1].group(1)) == 5.0, report     # and one for the last period
    # The dynamics node decomposes the simulator's stream and reports it.
    assert any(float(m.group(3)) > 0 for m in lines), report
    assert any(float(m.group(2)) > 0 for m in lines if m.group(2) != '-'), report
    # The simulator's input is clean (the node subscribes to joint_states once it has the
    # simulator's robot_description). The simulator stamps each state with its tick's
    # start (test_sim_node checks that a stall cannot squeeze the stamps), but on an
    # overloaded machine the timer's catch-up tick may start closer to the last one than
    # the estimator accepts: that, and only that, may be rejected.
    for m in lines:
        reasons = dict(r.rsplit(' ', 1) for r in (m.group(7) or '').split(', ') if r)
        assert set(reasons) <= {'stamp_too_close'}, report
    # The demo swing makes joints load each other: propagation paths are listed.
    assert any('<-' in m.group(8) for m in lines), report
    final = re.search(r'(\d+) decompositions received', result.stdout)
    assert final and int(final.group(1)) > 50, report
    # The report (what `make demo` writes) covers the 5 s of stamps from the swing's first
    # trajectory on: the arm moves within its first second, and the torques rebuilt from
    # the samples the node took agree with every one it published that was recorded.
    summary = (tmp_path / 'report' / 'summary.txt').read_text()
    head = re.match(r'plag-ros sim: (\d+) samples over (\S+) s; a joint first moves '
                    r'0.01 rad at (\S+) s\n.*largest difference to the torque the node '
                    r'published: (\S+) N\*m over (\d+) of its (\d+) samples', summary,
                    re.DOTALL)
    assert head, report + summary
    assert 4.9 <= float(head.group(2)) <= 5.0, summary  # by the stamps, not this process's
    assert 0.0 < float(head.group(3)) < 1.0, summary
    assert float(head.group(4)) < 1e-2, summary
    assert int(head.group(5)) >= int(head.group(1)), summary
    assert (tmp_path / 'report' / 'live_torques.png').read_bytes()[:4] == b'\x89PNG'


def _children(pid: int) -> dict[int, str]:
    """The live processes whose parent is ``pid``, with their command lines (Linux /proc)."""
    found = {}
    for stat in Path('/proc').glob('[0-9]*/stat'):
        try:
            fields = stat.read_text().rsplit(')', 1)[1].split()
            cmdline = (stat.parent / 'cmdline').read_bytes().replace(b'\0', b' ').decode()
        except OSError:
            continue                                  # ended meanwhile
        if int(fields[1]) == pid and fields[0] != 'Z':
            found[int(stat.parent.name)] = cmdline
    return found


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie nobody reaped has ended)."""
    try:
        return Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()[0] != 'Z'
    except OSError:
        return False


@pytest.mark.parametrize('bus, started, ready', [
    ([], {'sim_node', 'dynamics_node'}, 't='),
    (['--dynamixel'], {'dynamics_node', 'dynamixel_bus'}, 'Dynamixel bus on')],
    ids=['sim', 'dynamixel'])
def test_the_nodes_end_when_plag_ros_is_killed(tmp_path, bus, started, ready):
    """``plag-ros sim`` killed with SIGKILL (no handler runs, nothing stops its nodes):
    each node, and the emulated servo bus, gets SIGTERM from the kernel (PR_SET_PDEATHSIG)
    and shuts down as on Ctrl-C, with no traceback, instead of running on into the next
    run's graph (an orphaned driver on a lab's graph)."""
    printed = tmp_path / 'stdout.txt'
    logs = tmp_path / 'logs'
    with printed.open('w') as out:
        process = subprocess.Popen(
            [sys.executable, '-m', 'plag_ros.apps.cli', 'sim', *bus, '--duration', '600',
             '--domain', str(domain(DOMAIN_ID + 2)), '--log-dir', str(logs)],
            cwd=REPO, env=ros_env(DOMAIN_ID + 2), stdout=out, stderr=subprocess.STDOUT)
    nodes: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 240.0       # up and running: its line printed
        while ready not in printed.read_text() and process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready in printed.read_text(), printed.read_text()
        nodes = _children(process.pid)
        modules = {m.group(1) for m in map(re.compile(r'plag_ros\.\w+\.(?:nodes\.)?(\w+)').search,
                                           nodes.values()) if m}
        assert modules == started, nodes
        process.kill()
        process.wait(30)
        deadline = time.monotonic() + SHUTDOWN_DEADLINE_S + 60.0
        while any(map(_running, nodes)) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [nodes[pid] for pid in nodes if _running(pid)]
    finally:
        for pid in nodes:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
    assert not left, f'still running after the kill: {left}'
    for log in logs.glob('*.log'):
        text = log.read_text(errors='replace')
        assert 'Traceback' not in text, f'{log.name}:\n{text[-3000:]}'


def test_plag_ros_run_joins_a_robot_graph(tmp_path):
    model = RobotModel.from_urdf(default_urdf_path())
    process = subprocess.Popen(
        [sys.executable, '-m', 'plag_ros.apps.cli', 'run', '--description-source', 'file',
         '--duration', '2', '--log-dir', str(tmp_path)],
        cwd=REPO, env=ros_env(DOMAIN_ID), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)][::-1]
    with RosClient(DOMAIN_ID) as client:
        publisher = client.publisher(JointState, 'joint_states')

        def driver():   # a stand-in joint state broadcaster, wall-clock stamps, 200 Hz
            start = time.monotonic()
            while process.poll() is None and time.monotonic() - start < 120.0:
                t = time.time_ns()
                q = 0.3 * np.sin(2 * np.pi * 0.5 * t * 1e-9 + np.arange(len(names)))
                yield msgs.joint_state(names, q, t_ns=t)

        publish_at_rate(publisher, driver(), 200.0)
    stdout, stderr = process.communicate(timeout=60)
    report = f'stdout:\n{stdout}\nstderr:\n{stderr}'
    assert process.returncode == 0, report
    # at least the last period's line, however fast the stamps ran (a loaded machine's run
    # once ended, by the stamps, before a second of wall time had passed)
    lines = _summary_lines(stdout)
    assert lines and float(lines[-1].group(1)) == 2.0, report
    assert int(re.search(r'(\d+) decompositions received', stdout).group(1)) > 0, report


def test_summary_ranks_cross_joint_propagation():
    """Paths are RMS over the period, self terms (k == s) excluded, largest first."""
    summary = Summary()
    summary.joints = ['crane_x7_a_joint', 'crane_x7_b_joint', 'crane_x7_c_joint']
    velocity = np.zeros((3, 3, 3))
    velocity[0, 1, 2] = 2.0       # joint a <- source c, through body b
    velocity[1, 1, 1] = 9.0       # self term: not a propagation path
    acceleration = np.zeros((3, 3, 3))
    acceleration[2, 2, 0] = 1.0   # joint c <- source a
    for sign in (1.0, -1.0):
        summary.on_array('velocity', sign * velocity)
        summary.on_array('acceleration', sign * acceleration)
    paths = summary.paths()
    assert [(kind, k, s) for _, kind, k, s in paths] == [('velocity', 0, 2),
                                                         ('acceleration', 2, 0)]
    np.testing.assert_allclose([p[0] for p in paths], [2.0, 1.0])
    summary.on_output(stamp_ns=0, received_ns=1_500_000)
    line = summary.line(1.0)
    assert 'vel a <- c 2 N*m' in line and 'acc c <- a 1 N*m' in line and 'p50 1.50 ms' in line


def test_plag_ros_sim_runs_the_simulator_on_its_clock_paced_by_the_dynamics_node():
    """``plag-ros sim``'s overlay is settings the simulator declares and accepts, and its
    pace topic is the dynamics node's output the monitor records."""
    from plag_ros.apps.bringup import DYNAMICS, SIM_CLOCK, sim_specs, with_overlay
    from plag_ros.core.common.options import build
    from plag_ros.core.simulation.settings import SimSettings, sim_options

    overlay = SIM_CLOCK['plag_sim']
    assert set(overlay) <= {o.name for o in sim_options()}
    settings = build(SimSettings, overlay)
    assert settings.clock == 'simulated' and settings.paced
    assert settings.pace_topic == f'{DYNAMICS}/joint_states'
    sim, = [s for s in with_overlay(sim_specs(False), SIM_CLOCK) if s.module == 'sim_node']
    assert {k: sim.params[k] for k in overlay} == overlay


def test_plag_ros_sim_defaults_to_a_private_domain(tmp_path):
    env = ros_env(0)
    for name in ('ROS_DOMAIN_ID', 'ROS_LOCALHOST_ONLY', 'ROS_AUTOMATIC_DISCOVERY_RANGE'):
        env.pop(name, None)                       # a user's shell: nothing set
    process = subprocess.Popen(
        [sys.executable, '-m', 'plag_ros.apps.cli', 'sim', '--duration', '8', '--log-dir',
         str(tmp_path)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    outsider = insider = None
    try:
        line = process.stdout.readline()
        match = re.search(r'private ROS_DOMAIN_ID=(\d+), this machine only', line)
        assert match, line
        domain = int(match.group(1))
        assert domain != 0
        outsider = RosClient(0, 'plag_test_outsider')          # a robot PC's default graph
        seen = {topic: outsider.collect(msg_type, topic) for topic, msg_type in (
            ('/joint_states', JointState), ('/robot_description', String))}
        insider = RosClient(domain, 'plag_test_insider')
        inside = insider.collect(JointState, '/joint_states')
        insider.wait_for(lambda: len(inside) > 200, 60.0, 'joint states in the private domain')
        # The simulator publishes (positive control) for as long as this wait lasts; the
        # outsider must have discovered no plag node and received nothing.
        insider.wait_for(lambda: len(inside) > 600, 30.0, 'three more seconds of joint states')
        names = outsider.node.get_node_names()
        assert not [n for n in names if n.startswith('plag_') and n != 'plag_test_outsider'], \
            names
        assert all(not received for received in seen.values()), \
            {t: len(r) for t, r in seen.items()}
    finally:
        for client in (outsider, insider):
            if client is not None:
                client.close()
        out, _ = process.communicate(timeout=120)
    assert process.returncode == 0, out


def test_plag_ros_sim_serves_the_torques_to_foxglove(tmp_path):
    """``plag-ros sim --foxglove``: a WebSocket client (the ``websockets`` library, speaking
    the Foxglove protocol's subscribe message and binary message frames) gets the joint
    torque channel, advertised as ``sensor_msgs/msg/JointState`` in CDR, and every message
    it decodes equals, by stamp, the one this test receives over DDS."""
    import json
    import struct

    from rclpy.serialization import deserialize_message
    from websockets.sync.client import connect

    process = subprocess.Popen(
        [sys.executable, '-m', 'plag_ros.apps.cli', 'sim', '--duration', '20', '--domain',
         str(domain(DOMAIN_ID)), '--log-dir', str(tmp_path), '--foxglove', '--foxglove-port', '0'],
        cwd=REPO, env=ros_env(DOMAIN_ID), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    topic = '/plag_dynamics/joint_states'
    received: dict[int, np.ndarray] = {}
    try:
        url = None
        for line in process.stdout:                  # printed before the graph is up
            found = re.search(r'Foxglove view on (ws://\S+)', line)
            if found:
                url = found.group(1)
                break
        assert url, process.communicate(timeout=60)
        with RosClient(DOMAIN_ID) as client, \
                connect(url, subprotocols=['foxglove.sdk.v1'], open_timeout=30) as ws:
            dds = client.collect(JointState, topic)
            channels = {}
            while topic not in channels:
                message = json.loads(ws.recv(timeout=30))
                if message['op'] == 'advertise':
                    channels.update({c['topic']: c for c in message['channels']})
            channel = channels[topic]
            assert (channel['encoding'], channel['schemaEncoding'], channel['schemaName']) \
                == ('cdr', 'ros2msg', 'sensor_msgs/msg/JointState')
            assert {f'/plag_dynamics/component/{c}' for c in
                    ('acceleration', 'velocity', 'gravity', 'friction')} <= set(channels)
            # a cold start compiles the simulator's step first (tens of s on a busy machine)
            client.wait_for(lambda: dds, 180.0, f'{topic} over DDS')
            ws.send(json.dumps({'op': 'subscribe',
                                'subscriptions': [{'id': 7, 'channelId': channel['id']}]}))
            # Until 50 stamps came both ways: on a slow machine the view's relay can lag the
            # DDS subscription, so its first frames may predate what DDS has delivered here.
            def over_dds() -> dict[int, np.ndarray]:
                return {msgs.stamp_to_ns(m.header.stamp): np.array(m.effort)
                        for _, m in list(dds)}

            deadline = time.monotonic() + 180.0
            while len(set(received) & set(over_dds())) < 50 and time.monotonic() < deadline:
                frame = ws.recv(timeout=30)
                if isinstance(frame, str):
                    continue                          # more advertisements, status
                assert frame[0] == 1                  # message data
                subscription, _ = struct.unpack_from('<IQ', frame, 1)
                assert subscription == 7
                msg = deserialize_message(frame[13:], JointState)
                received[msgs.stamp_to_ns(msg.header.stamp)] = np.array(msg.effort)
            assert len(received) >= 50, len(received)
            client.wait_for(lambda: max(received) in over_dds(), 10.0, 'DDS copies')
            by_stamp = over_dds()
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, f'{stdout}\n{stderr}'
    both = sorted(set(received) & set(by_stamp))
    assert len(both) >= 50, (len(received), len(by_stamp), len(both))
    for stamp in both:
        np.testing.assert_array_equal(received[stamp], by_stamp[stamp])


def test_a_signal_only_asks_the_monitor_to_stop():
    """The handler raises nothing (a KeyboardInterrupt inside rclpy's native take came out
    as a RuntimeError and exit 1), sets the event, and hands back what it replaced."""
    stop = threading.Event()
    before = signal.getsignal(signal.SIGUSR1)
    previous = stop_on_signals(stop, (signal.SIGUSR1,))
    try:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGUSR1)
        signal.raise_signal(signal.SIGUSR1)           # a second one raises nothing either
        assert stop.is_set()
    finally:
        signal.signal(signal.SIGUSR1, previous[signal.SIGUSR1])
    assert previous == {signal.SIGUSR1: before}
