"""What rviz2 needs from the launch files: the real robot_state_publisher on a replay, and a
clear word from crane_x7.launch.py when the robot's bring-up gives rviz2 nothing to draw.

rviz2's RobotModel and Effort displays place every link through TF, so a replay needs
``/robot_description`` and ``/tf`` as the robot's bring-up gives them live. Under the real
launch stack with the real C++ robot_state_publisher (a ROS 2 install's)
this test replays a bag and checks, while it plays:

* ``/robot_description`` is the bag's own when the bag holds one, else the bundled URDF;
* ``/tf_static`` and ``/tf`` together place every URDF link, and each moving joint's
  transform is its URDF origin turned by the bag's joint position at the message's stamp
  (parsed here with urdf_parser_py, not with the package's model);
* the dynamics node still gets every sample (the player waits for both subscribers).

``crane_x7.launch.py rviz:=true`` in an empty graph says, five seconds in, that nothing
publishes ``/tf`` or ``/robot_description``; with ``robot_state_publisher:=true`` it starts
one (the dynamics node then gets its model from it) and says nothing. rviz2 itself needs a
display these machines lack: an ament prefix holding a stand-in ``rviz2`` executable (it
waits for its signal) lets the launch run around it.

ROS domain 47. Marked ``ros2_control`` (it needs robot_state_publisher, which no package
registry has); skips like test_ros2_control_live.py where it is absent (CI), fails with
``PLAG_REQUIRE_ROS2_CONTROL=1``. Without it, what the replay says at start is checked in
every suite (test_launch_arguments.py).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from ros2_control_rig import ENABLE, require_real_stack
from ros_helpers import LATCHED, RosClient

pytestmark = pytest.mark.ros2_control
require_real_stack()

from diagnostic_msgs.msg import DiagnosticArray  # noqa: E402
from launch_runs import START_TIMEOUT_S, LaunchRun, child_env, installed_share  # noqa: E402
from scipy.spatial.transform import Rotation  # noqa: E402
from sensor_msgs.msg import JointState  # noqa: E402
from std_msgs.msg import String  # noqa: E402
from tf2_msgs.msg import TFMessage  # noqa: E402
from urdf_parser_py import urdf as urdf_parser  # noqa: E402

from plag_ros.io.bag import JOINT_STATE_TYPE, qos_profile  # noqa: E402
from plag_ros.io.bag_writer import BagWriter  # noqa: E402
from plag_ros.io.cdr import cdr_encode  # noqa: E402
from plag_ros.ros import messages as msgs  # noqa: E402

DOMAIN = 47
COUNT, PERIOD_NS, T0 = 1200, 5_000_000, 1_700_000_000_000_000_000


def _write_bag(path, robot, description: str | None):
    """A 6 s bag of every non-mimic moving joint swinging inside its limits (200 Hz), with
    ``description`` on a latched ``/robot_description`` when given."""
    moving = [j for j in robot.joints if j.type != 'fixed' and j.mimic is None]
    names = [j.name for j in moving]
    middle = np.array([0.5 * (j.limit.lower + j.limit.upper) for j in moving])
    t_ns = T0 + PERIOD_NS * np.arange(COUNT, dtype=np.int64)
    phase = 2 * np.pi * 0.5 * (t_ns - T0)[:, None] * 1e-9 + np.arange(len(names))
    q = middle + 0.3 * np.sin(phase)
    with BagWriter(path) as writer:
        if description is not None:
            latched = writer.add_topic('/robot_description', 'std_msgs/msg/String',
                                       qos=qos_profile(depth=1, transient_local=True))
            writer.write(latched, int(t_ns[0]) - 1, cdr_encode(String(data=description)))
        states = writer.add_topic('/joint_states', JOINT_STATE_TYPE, qos=qos_profile(depth=50))
        for k in range(COUNT):
            writer.write(states, int(t_ns[k]), cdr_encode(msgs.joint_state(
                names, q[k], t_ns=int(t_ns[k]))))
    return {int(t): dict(zip(names, row)) for t, row in zip(t_ns, q)}


def _stamp(header) -> int:
    return header.stamp.sec * 1_000_000_000 + header.stamp.nanosec


def _check_transforms(robot, tf_messages, tf_static, positions) -> None:
    """Every link placed; each moving joint's transform = origin * rotation(axis, q)."""
    joints = {j.child: j for j in robot.joints}
    placed = {t.child_frame_id for _, m in tf_static for t in m.transforms}
    placed |= {t.child_frame_id for _, m in tf_messages for t in m.transforms}
    assert placed | {robot.get_root()} == {link.name for link in robot.links}
    checked = 0
    for _, message in tf_messages:
        for t in message.transforms:
            joint = joints[t.child_frame_id]
            assert t.header.frame_id == joint.parent
            stamp = _stamp(t.header)
            assert stamp in positions, stamp           # stamped with the replayed sample's
            sample = positions[stamp]
            if joint.mimic is not None:
                q = joint.mimic.multiplier * sample[joint.mimic.joint] + joint.mimic.offset
            else:
                q = sample[joint.name]
            origin = joint.origin
            r = t.transform.rotation
            turn = Rotation.from_euler('xyz', origin.rpy).inv() * Rotation.from_quat(
                [r.x, r.y, r.z, r.w])
            np.testing.assert_allclose(turn.as_rotvec(), q * np.array(joint.axis),
                                       atol=1e-6, err_msg=joint.name)
            v = t.transform.translation
            np.testing.assert_allclose([v.x, v.y, v.z], origin.xyz, atol=1e-9)
            checked += 1
    assert checked > 100, checked


@pytest.mark.parametrize('in_bag', [False, True], ids=['bundled_urdf', 'bag_description'])
def test_replay_launch_publishes_description_and_tf_of_every_link(tmp_path, in_bag):
    share = installed_share(ENABLE)
    bundled = (share / 'urdf' / 'crane_x7.urdf').read_text()
    # The bag's description: the same robot, told apart by a comment.
    description = bundled.replace('<robot ', '<!-- recorded with the bag -->\n<robot ', 1) \
        if in_bag else None
    robot = urdf_parser.URDF.from_xml_string(bundled)
    positions = _write_bag(tmp_path / 'bag', robot, description)
    client = RosClient(DOMAIN, 'plag_test_replay_view')
    tf_messages = client.collect(TFMessage, '/tf')
    tf_static = client.collect(TFMessage, '/tf_static', LATCHED)
    outputs = client.collect(JointState, '/plag_dynamics/joint_states')
    run = LaunchRun(share / 'launch' / 'replay.launch.py', [f'bag:={tmp_path / "bag"}'],
                    DOMAIN, tmp_path / 'launch.log')
    try:
        origin = "the bag's /robot_description" if in_bag else 'the bundled URDF'
        run.wait_for_output(f'robot_state_publisher: description from {origin}',
                            START_TIMEOUT_S)
        run.wait_for_output(r'^\[INFO\] \[bag_player-\d+\]: process has finished cleanly',
                            START_TIMEOUT_S)
        last = max(positions)
        client.wait_for(lambda: outputs and _stamp(outputs[-1][1].header) == last, 60.0,
                        "the dynamics node's output of the last sample")
        # robot_state_publisher sends /tf at most publish_frequency (20 Hz) of the node's
        # clock, here the bag's: the last sample may be skipped, the last 0.2 s not
        client.wait_for(lambda: any(_stamp(t.header) >= last - 200_000_000
                                    for _, m in tf_messages for t in m.transforms), 60.0,
                        f'/tf of the last 0.2 s (got {len(tf_messages)} messages)')
        latest = client.collect(String, '/robot_description', LATCHED)
        client.wait_for(lambda: latest, 30.0, 'the latched /robot_description')
        assert latest[-1][1].data == (description if in_bag else bundled)
        _check_transforms(robot, tf_messages, tf_static, positions)
        run.end_cleanly()
    finally:
        run.kill()
        client.close()


def _stand_in_rviz2(root: Path) -> str:
    """An ament prefix with an executable ``rviz2/rviz2`` that waits for SIGINT or SIGTERM
    and exits 0; returns the prefix."""
    prefix = root / 'rviz2_stand_in'
    index = prefix / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    (index / 'rviz2').write_text('')
    exe = prefix / 'lib' / 'rviz2' / 'rviz2'
    exe.parent.mkdir(parents=True)
    exe.write_text(f'#!{sys.executable}\nimport signal\n'
                   'signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})\n'
                   'signal.sigwait({signal.SIGINT, signal.SIGTERM})\n')
    exe.chmod(0o755)
    return str(prefix)


def _model_source(diagnostics) -> str:
    """The dynamics node's latest ``model_source`` in /diagnostics ('' before any)."""
    for _, message in reversed(diagnostics):
        for status in message.status:
            for kv in status.values:
                if kv.key == 'model_source':
                    return kv.value
    return ''


@pytest.mark.parametrize('state_publisher', [False, True], ids=['bare_graph', 'with_rsp'])
def test_crane_x7_launch_rviz_says_when_tf_is_missing(tmp_path, state_publisher):
    share = installed_share(ENABLE)
    prefix = _stand_in_rviz2(tmp_path)
    env = child_env(DOMAIN, {'AMENT_PREFIX_PATH': os.pathsep.join(
        [prefix, os.environ.get('AMENT_PREFIX_PATH', '')])})
    client = RosClient(DOMAIN, 'plag_test_rviz_inputs')
    diagnostics = client.collect(DiagnosticArray, '/diagnostics')
    run = LaunchRun(share / 'launch' / 'crane_x7.launch.py',
                    ['rviz:=true', f'robot_state_publisher:={str(state_publisher).lower()}'],
                    DOMAIN, tmp_path / 'launch.log', env=env)
    warning = 'rviz2 will show no arm and no Effort arrows: nothing publishes /tf or ' \
              '/robot_description'
    try:
        run.wait_for_output(r'^\[INFO\] \[rviz2-\d+\]: process started', START_TIMEOUT_S)
        if state_publisher:
            # its description reaches the dynamics node (else it takes the file after 5 s)
            client.wait_for(lambda: _model_source(diagnostics) == 'topic', START_TIMEOUT_S,
                            "the dynamics node's model from the topic")
            run.wait_for_output('rviz2 inputs: /tf and /robot_description are published',
                                60.0)
            assert warning not in run.output()
        else:
            run.wait_for_output(warning, 60.0)
        run.end_cleanly()
    finally:
        run.kill()
        client.close()
