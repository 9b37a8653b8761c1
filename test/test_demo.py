"""The offline demo command: runs without ROS and reports where the torque comes from."""
from __future__ import annotations

import numpy as np
import pytest

from plag_ros.apps import cli
from plag_ros.apps.demo import demo_trajectory


def test_demo_trajectory_derivatives_are_consistent():
    t, q, qd, qdd = demo_trajectory(4.0, rate_hz=1000.0)
    # Central differences of the analytic signals agree with the analytic derivatives:
    # O(h^2) = 1e-5 on smooth stretches, O(h) at the ramp's start where qdd''' jumps (the
    # envelope is C2, not C3): 1e-2 is 0.1 % of the 9.4 rad/s^2 peak, while a wrong or
    # missing term would miss by O(1).
    dt = t[1] - t[0]
    np.testing.assert_allclose(np.gradient(q, dt, axis=0)[2:-2], qd[2:-2], atol=1e-4)
    np.testing.assert_allclose(np.gradient(qd, dt, axis=0)[2:-2], qdd[2:-2], atol=1e-2)


def _pinocchio_figures(model, urdf_xml, duration_s):
    """Independent figures for the demo motion from Pinocchio (test/pin_oracle.py).

    Returns the RMS over time per joint of the joint torque (RNEA), its gravity part
    (RNEA at rest), its velocity part (RNEA without acceleration, minus gravity) and its
    acceleration part (M(q) qdd, CRBA), and the (n, n) RMS of the acceleration paths
    s -> k, M[k, s](q) qdd_s.
    """
    from pin_oracle import PinOracle

    oracle = PinOracle(urdf_xml, model)
    _, q, qd, qdd = demo_trajectory(duration_s, n_joints=model.n_joints)
    q, qd, qdd = (model.fill_mimic(q), model.fill_mimic(qd, derivative=True),
                  model.fill_mimic(qdd, derivative=True))
    zero = np.zeros(model.n_joints)
    torque, gravity, velocity, paths = [], [], [], []
    for qi, qdi, qddi in zip(q, qd, qdd, strict=True):
        tau = oracle.rnea(qi, qdi, qddi)
        g = oracle.rnea(qi, zero, zero)
        torque.append(tau)
        gravity.append(g)
        velocity.append(oracle.rnea(qi, qdi, zero) - g)
        paths.append(oracle.crba(qi) * qddi[None, :])
    rms = {name: np.sqrt(np.mean(np.square(x), axis=0)) for name, x in (
        ('torque', torque), ('gravity', gravity), ('velocity', velocity),
        ('acceleration', np.sum(paths, axis=-1)))}
    return rms, np.sqrt(np.mean(np.square(paths), axis=0))


def test_plag_ros_demo_prints_components_and_paths(capsys, tmp_path):
    """The printed figures equal Pinocchio's for the same motion (to the 5 printed decimals)."""
    from plag_ros.core.dynamics.model import RobotModel, default_urdf_path

    plot = tmp_path / 'demo.png'
    assert cli.main(['demo', '--duration', '2', '--plot', str(plot)]) == 0
    out = capsys.readouterr().out
    # 2 s at 200 Hz; the bundled CRANE-X7 has 7 arm joints and 2 fingers, one body each.
    assert 'crane_x7: 9 joints, 9 bodies, 400 samples at 200 Hz' in out
    model = RobotModel.from_urdf(default_urdf_path())
    rms, paths = _pinocchio_figures(model, default_urdf_path().read_text(), 2.0)

    lines = out.split('RMS torque by component [N*m]')[1].strip().splitlines()
    columns = lines[0].split()[1:]
    assert columns == ['torque', 'friction', 'acceleration', 'velocity', 'gravity']
    short = [name.replace('crane_x7_', '') for name in model.joint_names]
    for k, line in enumerate(lines[1:1 + model.n_joints]):
        name, *values = line.split()
        assert name == short[k]
        printed = dict(zip(columns, map(float, values), strict=True))
        for part in ('torque', 'acceleration', 'velocity', 'gravity'):
            assert abs(printed[part] - rms[part][k]) <= 6e-6, (name, part)

    # The largest path is Pinocchio's largest off-diagonal acceleration path M[k, s] qdd_s.
    off = paths.copy()
    np.fill_diagonal(off, 0.0)
    k, s = np.unravel_index(np.argmax(off), off.shape)
    first = out.split('top 8:')[1].strip().splitlines()[0].split()
    assert first[:4] == ['acceleration', short[s], '->', short[k]]
    assert abs(float(first[4]) - off[k, s]) <= 6e-6
    # ... which is the elbow swing loading the shoulder tilt joint (the demo's story).
    assert (short[s], short[k]) == ('upper_arm_revolute_part_rotate_joint',
                                    'shoulder_revolute_part_tilt_joint')
    assert plot.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    assert plot.stat().st_size > 10_000      # a real figure, not an empty canvas


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit) as err:
        cli.main(['no-such-command'])
    assert err.value.code == 2
    assert 'invalid choice' in capsys.readouterr().err
