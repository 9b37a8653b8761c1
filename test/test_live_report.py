"""plag_ros.tools.live_report: live outputs paired by arrival order, then the demo's report."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plag_ros import topics
from plag_ros.dynamics import PartialLagrangian
from plag_ros.model import RobotModel, default_urdf_path
from plag_ros.tools.live_report import LiveRecording, write_report


@pytest.fixture(scope='module')
def model():
    return RobotModel.from_urdf(default_urdf_path())


def _samples(model, count=50):
    rng = np.random.default_rng(4)
    q = rng.uniform(-0.5, 0.5, (count, model.n_joints))
    qd = rng.normal(0, 0.5, q.shape)
    qdd = rng.normal(0, 2.0, q.shape)
    out = PartialLagrangian(model, dtype=torch.float64).decompose(q, qd, qdd).numpy()
    t = 10**9 + np.arange(count, dtype=np.int64) * 5_000_000
    return t, q, qd, out


def test_pairs_arrays_with_the_state_before_them(model):
    t, q, qd, out = _samples(model)
    rec = LiveRecording(model)
    for i in range(len(t)):
        rec.on_state(int(t[i]), q[i], qd[i], out['torque'][i])
        if i == 7:
            continue                                # a sample whose arrays never arrived
        for name in topics.ARRAY_TOPICS:
            rec.on_array(name, out[name][i].ravel())    # flat, as Float64MultiArray data
    analysis = rec.analysis()
    keep = np.delete(np.arange(len(t)), 7)
    np.testing.assert_array_equal(analysis.t_ns, t[keep])
    for name in ('partial', 'acceleration', 'velocity', 'gravity', 'friction', 'torque'):
        np.testing.assert_array_equal(getattr(analysis, name), out[name][keep], err_msg=name)
    np.testing.assert_array_equal(analysis.q, q[keep])


def test_report_table_and_picture(model, tmp_path):
    t, q, qd, out = _samples(model)
    rec = LiveRecording(model, max_samples=30)
    for i in range(len(t)):
        rec.on_state(int(t[i]), q[i], qd[i], out['torque'][i])
        for name in topics.ARRAY_TOPICS:
            rec.on_array(name, out[name][i].ravel())
    assert len(rec) == 30 and rec.ignored == 20
    png, text = write_report(tmp_path / 'demo', rec, title='plag-ros demo')
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and png.stat().st_size > 10_000
    assert (tmp_path / 'demo' / 'summary.txt').read_text() == text
    assert text.startswith('plag-ros demo: 30 samples over 0.1 s')
    # the gravity RMS of joint 2 in the table is that of the first 30 samples
    row = next(line for line in text.splitlines()
               if line.strip().startswith(model.joint_names[1]))
    gravity = out['gravity'][:30, 1].sum(axis=-1)
    assert float(row.split()[4]) == pytest.approx(np.sqrt(np.mean(gravity ** 2)), abs=1e-4)
