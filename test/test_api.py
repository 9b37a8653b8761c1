"""The researcher's API (plag_ros.api): the docs' ten-line example and the names it offers.

* The example of ``docs/tutorials/notebook.md`` is read from the page and run as written on
  a bag this test records; its curve and every array behind it equal what ``plag-ros
  analyze`` writes to ``analysis.npz`` for the same bag, bit for bit.
* Named access is checked against physics identities (the parts add up to the torque) and
  against Pinocchio's RNEA for states given as they are (float64, tolerances stated).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from pin_oracle import PinOracle

import plag_ros as plag
from plag_ros.core.dynamics.compact import load_analysis
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.ros.output_bag import write_joint_state_bag

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(REPO, 'docs', 'tutorials', 'notebook.md')
RATE_HZ = 200.0
COUNT = 600          # 3 s


def example_code() -> str:
    """The first python block under '## The ten lines' of the tutorial page."""
    text = open(PAGE).read()
    section = text.split('## The ten lines', 1)[1]
    block = re.search(r'```python\n(.*?)```', section, re.S)
    assert block, 'the tutorial lost its example'
    return block.group(1)


@pytest.fixture(scope='module')
def robot() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def bag(robot, tmp_path_factory):
    """A 3 s, 200 Hz recording of every actuated joint swinging about mid-range, stamps
    jittered by +-0.2 ms, joints in a driver's order (not the URDF's)."""
    root = tmp_path_factory.mktemp('api')
    rng = np.random.default_rng(7)
    names = [robot.joint_names[k] for k in np.flatnonzero(robot.actuated)][::-1]
    k = robot.joint_index(names)
    t = 10**12 + np.arange(COUNT, dtype=np.int64) * int(1e9 / RATE_HZ)
    t += rng.integers(-200_000, 200_000, COUNT)
    s = (t - t[0])[:, None] * 1e-9
    middle = 0.5 * (robot.joint_lower[k] + robot.joint_upper[k])
    q = middle + rng.uniform(0.1, 0.5, len(names)) * np.sin(
        2 * np.pi * rng.uniform(0.3, 1.2, len(names)) * s + rng.uniform(0, 6, len(names)))
    write_joint_state_bag(root / 'demo_bag', t, names, q, storage='mcap', distro='kilted')
    return root


def test_the_ten_line_example_equals_analyze_to_the_bit(bag, robot):
    code = example_code()
    assert len([line for line in code.splitlines() if line.strip()]) <= 12, code
    here = os.getcwd()
    os.chdir(bag)
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        plt.close('all')
        scope: dict = {}
        exec(compile(code, PAGE, 'exec'), scope)           # noqa: S102 - the docs' own code
        curve = plt.gca().lines[0].get_ydata()
        times = plt.gca().lines[0].get_xdata()
    finally:
        os.chdir(here)
    assert (bag / 'elbow_to_tilt.png').stat().st_size > 10_000
    done = subprocess.run(
        [sys.executable, '-m', 'plag_ros.apps.cli', 'analyze', str(bag / 'demo_bag'), '-o',
         str(bag / 'out'), '--skip', 'plots', '--skip', 'bag', '--no-progress'],
        env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    npz = load_analysis(bag / 'out' / 'analysis.npz')
    result = scope['result']
    for name in ('t_ns', 'q', 'qd', 'qdd', 'torque', 'partial', 'acceleration', 'velocity',
                 'gravity', 'friction'):
        assert np.array_equal(getattr(result.analysis, name), npz[name]), name
    k = robot.joint_names.index('crane_x7_shoulder_revolute_part_tilt_joint')
    s = robot.joint_names.index('crane_x7_lower_arm_revolute_part_joint')
    from_npz = npz['acceleration'][:, k, :, s].sum(axis=1) + \
        npz['velocity'][:, k, :, s].sum(axis=1)
    assert np.array_equal(curve, from_npz)
    assert np.array_equal(times, (npz['t_ns'] - npz['t_ns'][0]) * 1e-9)
    assert np.abs(curve).max() > 1e-3       # the elbow's motion does load the tilt


def test_the_parts_add_up_and_names_address_them(bag, robot):
    result = plag.decompose(robot, plag.read_bag(bag / 'demo_bag', robot))
    torque = result.torque()
    parts = sum(result.component(name) for name in ('acceleration', 'velocity', 'gravity'))
    np.testing.assert_allclose(parts, torque, atol=1e-9)
    bodies = sum(result.partial('crane_x7_shoulder_revolute_part_tilt_joint', b)
                 for b in robot.body_names)
    np.testing.assert_allclose(bodies, result.torque('crane_x7_shoulder_revolute_part_tilt_joint'),
                               atol=1e-9)
    joint = 'crane_x7_upper_arm_revolute_part_rotate_joint'
    sources = sum(result.propagation(joint, s) for s in robot.joint_names)
    np.testing.assert_allclose(sources + result.component('gravity', joint),
                               result.torque(joint), atol=1e-9)
    np.testing.assert_allclose(
        result.propagation(joint, 0, part='acceleration') +
        result.propagation(joint, 0, part='velocity'), result.propagation(joint, 0), atol=0)
    with pytest.raises(KeyError, match='no joint .elbow.; the joints are'):
        result.torque('elbow')
    with pytest.raises(ValueError, match="part 'both'"):
        result.propagation(joint, 0, part='both')   # type: ignore[arg-type]
    top = result.paths(top=3)
    assert len(top) == 3 and top[0][0] >= top[1][0] >= top[2][0] and top[0][2] != top[0][3]


def test_pandas_tables_hold_the_same_numbers(bag, robot):
    result = plag.decompose(robot, plag.read_bag(bag / 'demo_bag', robot))
    joints = result.to_pandas()
    assert joints.shape == (len(result.t), 8 * robot.n_joints)
    assert np.array_equal(joints[('torque', robot.joint_names[1])].to_numpy(),
                          result.torque(1))
    assert np.array_equal(joints.index.to_numpy(), result.t)
    paths = result.to_pandas('propagation')
    column = ('velocity', robot.joint_names[1], robot.joint_names[3])
    assert np.array_equal(paths[column].to_numpy(),
                          result.propagation(1, 3, part='velocity'))
    # every pair that can carry propagation has its column, and only those: the two
    # fingers sit on sibling branches, so neither finger's motion loads the other
    a, b = 'crane_x7_gripper_finger_a_joint', 'crane_x7_gripper_finger_b_joint'
    assert ('acceleration', a, robot.joint_names[0]) in paths.columns
    assert ('acceleration', robot.joint_names[0], a) in paths.columns
    assert ('acceleration', a, b) not in paths.columns
    assert ('velocity', b, a) not in paths.columns
    assert paths.shape[1] == 2 * (7 * 7 + 2 * 8 + 2 * 7)


def test_states_as_given_are_pinocchio(robot):
    rng = np.random.default_rng(3)
    n = robot.n_joints
    q = rng.uniform(robot.joint_lower, robot.joint_upper, (20, n))
    qd, qdd = rng.normal(0, 1, (20, n)), rng.normal(0, 2, (20, n))
    result = plag.decompose(robot, q=q, qd=qd, qdd=qdd)
    np.testing.assert_allclose(result.t, np.arange(20.0), atol=1e-12)   # ns -> s rounding
    oracle = PinOracle(robot.urdf_xml, robot)
    expected = np.stack([oracle.rnea(*x) for x in zip(q, qd, qdd)])
    np.testing.assert_allclose(result.torque(), expected, atol=1e-9, rtol=1e-9)
    with pytest.raises(ValueError, match=r'qd must be \(N, 9\)'):
        plag.decompose(robot, q=q, qd=qd[:, :3], qdd=qdd)
    with pytest.raises(ValueError, match='needs a recording'):
        plag.decompose(robot, q=q)


def test_estimate_follows_a_sine_and_load_robot_takes_text(robot):
    t = np.arange(400) / 200.0
    q = np.stack([0.3 * np.sin(2 * np.pi * 0.5 * t)] * 2, axis=1)
    est = plag.estimate(t, q, cutoff_hz=10.0)
    inner = slice(20, -20)
    np.testing.assert_allclose(est.qd[inner, 0], 0.3 * np.pi * np.cos(np.pi * t[inner]),
                               atol=2e-3)
    np.testing.assert_allclose(est.qdd[inner, 1], -0.3 * np.pi ** 2 * np.sin(np.pi * t[inner]),
                               atol=2e-2)
    with pytest.raises(TypeError):
        plag.estimate(t, q, cutof_hz=10.0)
    again = plag.load_robot(robot.urdf_xml)
    assert again.joint_names == robot.joint_names
    assert 'decompose' in dir(plag)
    with pytest.raises(AttributeError):
        plag.no_such_name  # noqa: B018
