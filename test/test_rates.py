"""The joint_states rate measured from the stamps (logical domain 55).

A real CRANE-X7 without ``latency_timer`` 1 runs at about 100 Hz instead of 200: the
dynamics node must say so on /diagnostics (``stamp_rate_hz``, WARN beyond 20 % off
``filter.rate_hz``, the effective cut-off), measured from the header stamps, not from the
arrival rate: the same 100 Hz arrival with stamps 5 ms apart reads 200 Hz and is OK.
"""
from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from ros_helpers import REPO, RosClient, publish_at_rate, start_node
from sensor_msgs.msg import JointState

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros import messages as msgs

DOMAIN_ID = 55


def _feed(model, count: int, step_ns: int, start_ns: int):
    names = [model.joint_names[j] for j in np.flatnonzero(model.actuated)]
    q = np.array([0.0, 0.5, 0.0, -1.0, 0.0, 0.4, 0.0, 0.2])
    for c in range(count):
        yield msgs.joint_state(names, q + 0.01 * np.sin(0.05 * c), np.zeros(8),
                               t_ns=start_ns + c * step_ns)


def _status(diagnostics, after: int):
    for _, msg in diagnostics[after:]:
        for status in msg.status:
            if status.name.endswith('decomposition'):
                values = {kv.key: kv.value for kv in status.values}
                if values.get('stamp_rate_hz', 'nan') != 'nan' and \
                        float(values.get('input_rate_hz', 0)) > 50:
                    yield status, values


def test_stamp_rate_on_diagnostics(tmp_path):
    model = RobotModel.from_urdf(default_urdf_path())
    client = RosClient(DOMAIN_ID, 'plag_test_rates')
    diagnostics = client.collect(DiagnosticArray, '/diagnostics')
    pub = client.publisher(JointState, 'joint_states')
    node = start_node('dynamics_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                      params_file=REPO / 'config' / 'crane_x7.yaml',
                      params={'robot_description_source': 'file', 'diagnostics_period': 0.5})
    try:
        client.wait_for_subscribers(pub, timeout=60.0)
        for step_ns, expected, level in ((10_000_000, 100.0, b'\x01'),
                                         (5_000_000, 200.0, b'\x00')):
            start = len(diagnostics)
            publish_at_rate(pub, _feed(model, 250, step_ns, time.time_ns()), 100.0)
            client.wait_for(lambda s=start: any(True for _ in _status(diagnostics, s)), 60.0,
                            'diagnostics of a full window')
            # the last full window of this phase
            status, values = list(_status(diagnostics, start))[-1]
            rate = float(values['stamp_rate_hz'])
            assert abs(rate - expected) < 0.5, values
            assert status.level == level, (status.message, values)
            if expected == 100.0:
                assert 'filter.rate_hz' in status.message
                # config/crane_x7.yaml: 10 Hz designed at 200 Hz, run at 100 Hz
                assert abs(float(values['effective_cutoff_hz']) - 5.0) < 0.05, values
        assert 'by their stamps' in node.output()
    finally:
        code = node.stop()
        client.close()
    assert code == 0
