"""The offline demo command: runs without ROS and reports where the torque comes from."""
from __future__ import annotations

import numpy as np
import pytest

from plag_ros.tools import cli
from plag_ros.tools.demo import demo_trajectory


def test_demo_trajectory_derivatives_are_consistent():
    t, q, qd, qdd = demo_trajectory(4.0, rate_hz=1000.0)
    # Central differences of the analytic signals agree with the analytic derivatives:
    # O(h^2) = 1e-5 on smooth stretches, O(h) at the ramp's start where qdd''' jumps (the
    # envelope is C2, not C3): 1e-2 is 0.1 % of the 9.4 rad/s^2 peak, while a wrong or
    # missing term would miss by O(1).
    dt = t[1] - t[0]
    np.testing.assert_allclose(np.gradient(q, dt, axis=0)[2:-2], qd[2:-2], atol=1e-4)
    np.testing.assert_allclose(np.gradient(qd, dt, axis=0)[2:-2], qdd[2:-2], atol=1e-2)


def test_plag_ros_demo_prints_components_and_paths(capsys, tmp_path):
    plot = tmp_path / 'demo.png'
    assert cli.main(['demo', '--duration', '2', '--plot', str(plot)]) == 0
    out = capsys.readouterr().out
    assert 'crane_x7: 9 joints, 9 bodies, 400 samples at 200 Hz' in out
    assert 'RMS torque by component' in out
    # the elbow swing is the strongest acceleration path into the shoulder tilt joint
    first_path = out.split('top 8:')[1].strip().splitlines()[0].split()
    assert first_path[:4] == ['acceleration', 'upper_arm_revolute_part_rotate_joint', '->',
                              'shoulder_revolute_part_tilt_joint']
    assert plot.stat().st_size > 10_000


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as err:
        cli.main(['no-such-command'])
    assert err.value.code == 2
    assert 'invalid choice' in capsys.readouterr().err
