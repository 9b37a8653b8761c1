"""plag_driver over DDS (ROS_DOMAIN_ID 77) on the emulated bus: joint_states like the
robot's driver, the active_arm_controller switch to current mode and back, and SIGTERM
ending in a position hold with exit code 0 (judged on the emulator's record)."""
from __future__ import annotations

import json
import math
import signal
import time

import numpy as np
import pytest
from ros_helpers import LATCHED, RosClient, start_node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, String
from torque_rig import JOINTS, EmulatedBus

pytest.importorskip('dynamixel_sdk')
DOMAIN_ID = 77


def test_driver_node_publishes_switches_and_holds_on_sigterm(tmp_path):
    bus = EmulatedBus(tmp_path)
    node = None
    try:
        with RosClient(DOMAIN_ID, 'plag_test_driver') as client:
            states = client.collect(JointState, 'joint_states')
            reports = client.collect(String, '/plag_driver/state', LATCHED)
            node = start_node('driver_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                              params={'port': str(bus.link)})
            client.wait_for(lambda: len(states) > 50, 60.0, 'joint_states')
            msg = states[-1][1]
            assert list(msg.name) == JOINTS
            assert len(msg.position) == len(msg.velocity) == len(msg.effort) == 8
            stamps = [s.header.stamp.sec + s.header.stamp.nanosec * 1e-9 for _, s in states[-41:]]
            rate = 40 / (stamps[-1] - stamps[0])
            assert 150.0 < rate < 250.0, rate
            # a forward position command is refused while the trajectory controller is active
            forward = client.publisher(Float64MultiArray,
                                       '/plag_arm_position_controller/commands')
            client.set_parameters('/plag_driver',
                                  {'active_arm_controller': 'plag_arm_position_controller'})
            client.wait_for_subscribers(forward)
            target = [0.0, 0.5, 0.0, -1.0, 0.0, 0.4, 0.0]
            for _ in range(300):
                forward.publish(Float64MultiArray(data=target))
                time.sleep(0.01)
            client.wait_for(lambda: abs(states[-1][1].position[3] + 1.0) < 0.05, 10.0, 'the move')
            client.set_parameters('/plag_driver',
                                  {'active_arm_controller': 'plag_arm_effort_controller'})
            client.wait_for(lambda: reports and json.loads(reports[-1][1].data)['modes'][
                JOINTS[1]] == 'current', 5.0, 'current mode')
            effort = client.publisher(Float64MultiArray, '/plag_arm_effort_controller/commands')
            client.wait_for_subscribers(effort)
            # nothing commanded: the stale check latches a fault and holds in position mode
            client.wait_for(lambda: json.loads(reports[-1][1].data)['fault'].startswith(
                'stale effort command'), 5.0, 'the stale fault')
            assert json.loads(reports[-1][1].data)['modes'][JOINTS[1]] == 'position'
            pose = np.array(states[-1][1].position)
            node.process.send_signal(signal.SIGTERM)
            node.process.wait(20)
            assert node.process.returncode == 0, node.tail()
            assert 'bus closed' in node.output()
            stopped = time.monotonic()
        time.sleep(1.0)
        record = bus.stop()
        after = record['wall'] > stopped
        assert after.sum() > 200          # the arm watched for a second after the exit
        moved = np.abs(record['q'][after] - record['q'][after][0]).max()
        assert moved < 0.002, moved       # holding, not limp
        assert np.abs(record['q'][after][0] - pose).max() < 3 * 2 * math.pi / 4096
    finally:
        if node is not None and node.alive():
            node.stop()
        if bus.process.poll() is None:
            bus.process.kill()
