"""plag_ros.apps.live_report: a live run rebuilt from its input and checked against the
torques the node published, then the demo's picture and table."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plag_ros.apps.live_report import LiveRecording, write_report
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig, JointStateEstimator

PERIOD_NS = 5_000_000


@pytest.fixture(scope='module')
def model():
    return RobotModel.from_urdf(default_urdf_path())


def _run(model, count=300):
    """Input positions and what the node computes per sample (its estimator and engine)."""
    t = 10**12 + np.arange(count, dtype=np.int64) * PERIOD_NS
    middle = 0.5 * (model.joint_lower + model.joint_upper)
    middle = np.where(np.isfinite(middle), middle, 0.0)
    q = middle + 0.3 * np.sin(np.outer((t - t[0]) * 1e-9, np.linspace(0.5, 1.5, model.n_joints)))
    estimator = JointStateEstimator(model.n_joints, EstimatorConfig())
    engine = PartialLagrangian(model, dtype=torch.float64)
    published = {}
    for k in range(count):
        sample = estimator.update(int(t[k]), q[k])
        if sample is not None:
            published[int(t[k])] = engine.decompose_arrays(sample.q, sample.qd,
                                                           sample.qdd)['torque'].copy()
    return t, q, published


def test_rebuild_equals_what_the_node_published(model):
    t, q, published = _run(model)
    rec = LiveRecording(model)
    for k in range(len(t)):
        rec.on_input(int(t[k]), q[k])
    for stamp, torque in published.items():
        rec.on_output(stamp, torque)
    analysis, difference = rec.analysis()
    assert len(analysis.t_ns) == len(t) - 4 == len(published)
    assert difference < 1e-9
    # a node that published something else is caught
    stamp = sorted(published)[250]                   # past the first second
    rec.on_output(stamp, published[stamp] + np.r_[0.01, np.zeros(model.n_joints - 1)])
    assert rec.analysis()[1] == pytest.approx(0.01, abs=1e-9)


def test_report_table_and_picture(model, tmp_path):
    t, q, published = _run(model)
    rec = LiveRecording(model, max_samples=200)
    for k in range(len(t)):
        rec.on_input(int(t[k]), q[k])
    for stamp, torque in published.items():
        rec.on_output(stamp, torque)
    assert len(rec) == 200 and rec.ignored == 100
    png, text = write_report(tmp_path / 'demo', rec, title='plag-ros demo')
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and png.stat().st_size > 10_000
    assert (tmp_path / 'demo' / 'summary.txt').read_text() == text
    assert text.startswith('plag-ros demo: 196 samples over 1.0 s')
    assert 'largest difference to the torque the node published (after 1 s): ' in text
    # the table's torque RMS of joint 2 is that of the published torques
    row = next(line for line in text.splitlines()
               if line.strip().startswith(model.joint_names[1]))
    torque = np.array([published[s][1] for s in sorted(published)[:196]])
    assert float(row.split()[1]) == pytest.approx(np.sqrt(np.mean(torque ** 2)), abs=1e-4)
