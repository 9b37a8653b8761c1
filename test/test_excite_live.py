"""``plag-ros excite --play`` on a real ROS 2 graph (logical domain 58): the simulator node's
trajectory controller plays it, ``plag-ros record`` records it, and the recording says what
the arm was commanded.

* the recorded JointTrajectory is the one designed (points equal the series at their
  times, the stamp in the future of its sending) and the simulated arm followed it (every
  arm joint's deflection from the command rebuilt from the recording is what the servo
  model predicts);
* ``identify --servo``'s reading of the command from that bag equals the designed series;
* a play whose tracking limit is exceeded stops with exit 3 and the arm holds still;
* with nothing subscribed to the command, nothing is sent (exit 2).
"""
from __future__ import annotations

import signal
import subprocess
import sys

import numpy as np
import pytest
from ros_helpers import REPO, RosClient, ros_env, start_node

from plag_ros.apps.excite import read_excitation
from plag_ros.apps.identify import commanded_positions
from plag_ros.core.decomposition.analysis import estimate_recording
from plag_ros.core.dynamics import motors
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.motors import servo_gains
from plag_ros.core.identification.fit import predict
from plag_ros.io.bag import read_joint_states, read_trajectory_commands

pytestmark = pytest.mark.long   # about a minute: Kilted's suite only (pyproject.toml)
DOMAIN_ID = 58
PHYSICS_RATE_HZ = 500.0
PUBLISH_RATE_HZ = 100.0


def _cli(*args):
    return subprocess.Popen([sys.executable, '-m', 'plag_ros.apps.cli', *map(str, args)],
                            env=ros_env(DOMAIN_ID), cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _between_stalls(t_ns: np.ndarray, longest_step_s: float, after_s: float) -> np.ndarray:
    """(N,) False for the samples from 20 ms before a stamp step longer than
    ``longest_step_s`` to ``after_s`` after it, True elsewhere."""
    t = t_ns * 1e-9
    calm = np.ones(len(t), dtype=bool)
    for stall in t[1:][np.diff(t) > longest_step_s]:
        calm &= ~((t >= stall - 0.02) & (t < stall + after_s))
    return calm


def test_the_stall_mask_leaves_out_the_time_around_late_ticks():
    t_ns = np.round(np.array([0.0, 0.01, 0.02, 0.05, 0.06, 0.07, 0.08, 0.3, 0.31]) * 1e9)
    # late ticks at 0.05 and 0.3: out from 20 ms before each to 100 ms after
    assert _between_stalls(t_ns.astype(np.int64), 0.015, 0.1).tolist() == [
        True, True, True, False, False, False, False, False, False]
    assert _between_stalls(t_ns[:3].astype(np.int64), 0.015, 0.1).all()


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def test_play_record_and_read_back_the_command(tmp_path, model):
    design = _cli('excite', '-o', tmp_path / 'exc', '--period', '4', '--harmonics', '3',
                  '--iterations', '8', '--velocity', '0.8', '--acceleration', '2.0')
    out, _ = design.communicate(timeout=300)
    assert design.returncode == 0, out
    excitation, _ = read_excitation(tmp_path / 'exc' / 'excitation.yaml')
    client = RosClient(DOMAIN_ID)
    # The servo check below holds only while the simulator keeps real time. At its defaults
    # (1 kHz physics, 200 Hz joint_states) a slow 2-core CI machine running this graph drops
    # steps (the arm then runs slow and lags by up to 0.05 rad); at 500 Hz and 100 Hz it
    # kept up, and passed, with two busy loops beside it.
    sim = start_node('sim_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                     params_file=REPO / 'config' / 'sim.yaml',
                     params={'physics_rate_hz': PHYSICS_RATE_HZ,
                             'publish_rate_hz': PUBLISH_RATE_HZ})
    bag = tmp_path / 'excitation_bag'
    recorder = None
    try:
        client.wait_for(lambda: client.node.count_publishers('/joint_states') > 0, 60.0,
                        'the simulator node')
        # nothing subscribed but the simulator's controller: with 2 wanted, nothing is sent
        refused = _cli('excite', '--play', tmp_path / 'exc' / 'excitation.yaml',
                       '--wait-subscribers', '2', '--cycles', '1')
        out, _ = refused.communicate(timeout=120)
        assert refused.returncode == 2 and 'nothing was sent' in out, out
        recorder = _cli('record', bag)
        # The player waits 10 s for its second subscriber, the recorder, which subscribes
        # to a topic once it sees a publisher on it: the recorder is running (it records
        # the simulator's joint states) before the player starts, so that its start-up on a
        # loaded machine is not in those 10 s.
        client.wait_for(lambda: client.node.count_subscribers('/joint_states') > 0, 120.0,
                        'plag-ros record subscribed')
        # Three periods: the servo check below uses only the samples where the simulator kept
        # real time, and beside two other suites one period left fewer than 100 of them
        play = _cli('excite', '--play', tmp_path / 'exc' / 'excitation.yaml',
                    '--wait-subscribers', '2', '--cycles', '3')
        out, _ = play.communicate(timeout=180)
        assert play.returncode == 0, out
        # a stop: a tracking limit no servo meets; the arm is told to hold where it is
        stopped = _cli('excite', '--play', tmp_path / 'exc' / 'excitation.yaml',
                       '--tracking-limit', '0.0001', '--cycles', '1',
                       '--wait-subscribers', '2')
        out, _ = stopped.communicate(timeout=180)
        assert stopped.returncode == 3 and 'stopped' in out, out
    finally:
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)
            recorder.communicate(timeout=60)
        sim.stop()
        client.close()

    messages = read_trajectory_commands(bag)
    assert len(messages) >= 2                     # the excitation, then the stopped one
    played = messages[0]
    assert played.stamp_ns > played.receive_ns    # an explicit start, ahead of the send
    order = [excitation.joints.index(j) for j in played.joint_names]
    approach = played.times[0]
    series = excitation.sample(played.times - approach)
    np.testing.assert_allclose(played.positions, series[0][:, order], atol=1e-12)
    np.testing.assert_allclose(played.velocities[:-1], series[1][:-1, order], atol=1e-12)

    js = read_joint_states(bag, model)
    t = js.t_ns * 1e-9
    names, commanded = commanded_positions(model, bag, t, js.q)
    assert names == list(played.joint_names) == list(motors.ARM_JOINTS)
    during = np.isfinite(commanded).all(axis=1) & (t <= played.start_ns * 1e-9
                                                   + played.times[-1])
    assert during.sum() > 100
    cols = [model.joint_names.index(j) for j in names]
    designed = excitation.sample(t[during] - played.start_ns * 1e-9 - approach)[0][:, order]
    np.testing.assert_allclose(commanded[during], designed, atol=2e-4)
    # the arm followed as a servo does: its deflection is the torque it needs over K_s
    # (plus the back-EMF damping's share), the torque from the model the simulator runs.
    # Judged where the simulator kept its clock: a publish step over 1.5 ticks means the
    # machine stalled the node, its physics dropped steps and its controller's command
    # was held for longer, so the 150 ms after each such step are left out. (A Kilted CI
    # run had 21 of them in 4 s of play; the unexplained deflection was 0.019 rad on the
    # pan with them and 0.004 without, 0.005 in the seconds without a stall.)
    calm = _between_stalls(js.t_ns, 1.5 / PUBLISH_RATE_HZ, 0.15)
    assert (during & calm).sum() > 100, 'the simulator stalled through most of the play'
    index, q, qd, qdd, _ = estimate_recording(model, js.t_ns, js.q)
    rows = (during & calm)[index]
    deflection = commanded[index][rows] - q[rows][:, cols]
    act = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    kp, kd = (g[[act.index(j) for j in names]] for g in servo_gains(model))
    expected = (predict(model, q[rows], qd[rows], qdd[rows])[:, [act.index(j) for j in names]]
                + kd * qd[rows][:, cols]) / kp
    rms = np.sqrt(np.mean(deflection ** 2, axis=0))
    miss = np.sqrt(np.mean((deflection - expected) ** 2, axis=0))
    print('deflection RMS [rad]', rms.round(4), 'unexplained', miss.round(4))
    # (the simulator node moves its controller's command once per 10 ms publish tick: about
    # 10 ms x |qd| of deflection no model of the servo explains)
    assert (miss < 0.3 * rms + 0.008).all()
    assert np.abs(deflection).max() < 0.3          # the player's tracking limit held
    assert np.ptp(js.q[during][:, cols], axis=0).min() > 0.05
    # after the stop the arm holds: its last half second moves less than the sag settles
    last = t > t[-1] - 0.5
    assert np.ptp(js.q[last][:, cols], axis=0).max() < 0.02

