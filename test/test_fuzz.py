"""10 000 joint states at 1 kHz, one in five damaged: nothing absurd comes out, all is counted.

The dynamics node runs as a process over DDS (logical domain 18). The feed is a smooth
motion inside the CRANE-X7's joint ranges, sampled at 1 kHz, into which seeded damaged
messages are mixed, at most three in a row so the estimator never sees a gap that restarts
it. Each damage has one known reason the node must count it under: NaN, a position of
1e300 rad, a position 0.5 rad beyond a joint limit, a 0.8 rad jump within the range, an
unknown joint name, a length mismatch, a stamp earlier than the last one. Checked: the node
stays up, publishes exactly one output per good sample after the five-sample warm-up,
every output is finite and physically possible, and /diagnostics counts each reason
exactly as often as it was injected.
"""
from __future__ import annotations

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import REPO, RosClient, publish_at_rate, start_node
from sensor_msgs.msg import JointState

from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros import messages as msgs

DOMAIN_ID = 18
NODE = '/plag_dynamics'
RATE_HZ = 1000.0
PERIOD_NS = 1_000_000
COUNT = 10_000
WARM_UP = 4            # the five-point stencil: the first output comes with the fifth sample
KINDS = ('nonfinite', 'absurd', 'beyond_limit', 'jump', 'unknown_name', 'length_mismatch',
         'stamp_back')
REASON = {'nonfinite': 'nonfinite', 'absurd': 'position_out_of_range',
          'beyond_limit': 'position_out_of_range', 'jump': 'position_jump',
          'unknown_name': 'unknown_name', 'length_mismatch': 'length_mismatch',
          'stamp_back': 'stamp_not_increasing'}


def _feed(model: RobotModel, seed: int = 5) -> tuple[list[JointState], dict[str, int], int]:
    """(messages, injected count per reason, good messages)."""
    rng = np.random.default_rng(seed)
    names = [model.joint_names[k] for k in np.flatnonzero(model.actuated)]
    k = model.joint_index(names)
    lower, upper = model.joint_lower[k], model.joint_upper[k]
    middle = 0.5 * (lower + upper)
    amp = rng.uniform(0.05, 0.3, len(names))
    freq = rng.uniform(0.2, 1.0, len(names))
    pan = names.index('crane_x7_shoulder_fixed_part_pan_joint')     # range +-157 deg
    sent, injected, good, run = [], dict.fromkeys(REASON.values(), 0), 0, 0
    t_ns = 10**12
    last_good_t = t_ns
    while len(sent) < COUNT:
        q = middle + amp * np.sin(2 * np.pi * freq * (t_ns - 10**12) * 1e-9)
        # at most two damaged in a row: three consistent jumps would be the arm's real new
        # position, which the gate accepts (test_plausibility covers that)
        if run < 2 and good > 10 and rng.random() < 0.2:
            kind = KINDS[rng.integers(len(KINDS))]
            bad_names, bad_q, stamp = list(names), q.copy(), t_ns
            if kind == 'nonfinite':
                bad_q[rng.integers(len(names))] = np.nan
            elif kind == 'absurd':
                bad_q[rng.integers(len(names))] = 1e300
            elif kind == 'beyond_limit':
                j = rng.integers(len(names))
                bad_q[j] = upper[j] + 0.5
            elif kind == 'jump':
                bad_q[pan] += 0.8
            elif kind == 'unknown_name':
                bad_names[rng.integers(len(names))] = 'crane_x7_elbow_of_doom'
            elif kind == 'length_mismatch':
                bad_q = bad_q[:-1]
            elif kind == 'stamp_back':
                stamp = last_good_t - 3 * PERIOD_NS
            msg = msgs.joint_state(bad_names, np.zeros(len(bad_names)), t_ns=stamp)
            msg.position = msgs.float64_array(bad_q)
            sent.append(msg)
            injected[REASON[kind]] += 1
            run += 1
        else:
            sent.append(msgs.joint_state(names, q, t_ns=t_ns))
            last_good_t = t_ns
            good += 1
            run = 0
        t_ns += PERIOD_NS
    return sent, injected, good


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def test_fuzzed_input_yields_nothing_absurd_and_every_rejection_is_counted(model, tmp_path):
    sent, injected, good = _feed(model)
    assert sum(injected.values()) > 1500 and all(injected.values())
    client = RosClient(DOMAIN_ID, 'plag_fuzz_test')
    deep = QoSProfile(depth=COUNT, reliability=ReliabilityPolicy.RELIABLE)
    outputs = client.collect(JointState, f'{NODE}/joint_states', deep)
    diagnostics = client.collect(DiagnosticArray, '/diagnostics')
    node = start_node('dynamics_node', domain_id=DOMAIN_ID, log_dir=tmp_path,
                      params_file=REPO / 'config' / 'crane_x7.yaml',
                      params={'robot_description_source': 'file', 'filter.rate_hz': RATE_HZ,
                              'filter.cutoff_hz': 50.0, 'diagnostics_period': 0.25,
                              'visualization_rate_hz': 0.0, 'publish_bodies': False,
                              # nothing may be lost on a slow machine: every message is
                              # either published or counted
                              'input_depth': COUNT, 'output_depth': COUNT})
    publisher = client.publisher(JointState, 'joint_states', deep)
    try:
        client.wait_for_subscribers(publisher)
        publish_at_rate(publisher, iter(sent), RATE_HZ)
        client.wait_for(lambda: len(outputs) >= good - WARM_UP, 120.0,
                        f'{good - WARM_UP} outputs (got {len(outputs)})')

        def counts() -> dict[str, int]:
            for _, msg in reversed(diagnostics):
                for status in msg.status:
                    if status.name.startswith(NODE):
                        values = {kv.key: kv.value for kv in status.values}
                        if 'rejected.position_jump' in values:
                            return {key.removeprefix('rejected.'): int(value)
                                    for key, value in values.items()
                                    if key.startswith('rejected.')}
            return {}

        client.wait_for(lambda: all(counts().get(r, -1) == n for r, n in injected.items()),
                        30.0, f'diagnostics counting {injected}, got {counts()}')
        assert node.alive(), node.output()
        got = counts()
        assert {r: got[r] for r in injected} == injected
        others = {r: n for r, n in got.items() if r not in injected and n}
        assert not others, f'rejections nobody injected: {others}'
    finally:
        code = node.stop()
        client.close()
    assert code == 0, node.output()
    assert len(outputs) == good - WARM_UP
    effort = np.array([np.array(msg.effort) for _, msg in outputs])
    position = np.array([np.array(msg.position) for _, msg in outputs])
    assert np.isfinite(effort).all() and np.isfinite(position).all()
    margin = 0.1
    assert (position >= model.joint_lower - margin).all()
    assert (position <= model.joint_upper + margin).all()
    # a slow motion of a 1.8 kg arm: well inside the servos' 10 N*m stall torque
    assert np.abs(effort).max() < 10.0
    stamps = [msgs.stamp_to_ns(msg.header.stamp) for _, msg in outputs]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
