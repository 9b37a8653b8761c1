"""plag_ros.apps.live_report: a live run rebuilt from its input and checked against the
torques the node published, then the demo's picture and table."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from plag_ros.apps.live_report import (
    MOTION_RAD,
    LiveRecording,
    first_motion_s,
    node_inputs,
    write_report,
)
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
    # 200 inputs recorded, the node's 296 outputs: the rebuild compares the 196 it has
    assert ('largest difference to the torque the node published: 0.00e+00 N*m over 196 of '
            'its 296 samples') in text
    # the table's torque RMS of joint 2 is that of the published torques
    row = next(line for line in text.splitlines()
               if line.strip().startswith(model.joint_names[1]))
    torque = np.array([published[s][1] for s in sorted(published)[:196]])
    assert float(row.split()[1]) == pytest.approx(np.sqrt(np.mean(torque ** 2)), abs=1e-4)


def _node(model, t, q, received):
    """What a node that received only the samples ``received`` (bool mask) publishes."""
    estimator = JointStateEstimator(model.n_joints, EstimatorConfig())
    engine = PartialLagrangian(model, dtype=torch.float64)
    published = {}
    for k in np.flatnonzero(received):
        sample = estimator.update(int(t[k]), q[k])
        if sample is not None:
            published[int(t[k])] = engine.decompose_arrays(sample.q, sample.qd,
                                                           sample.qdd)['torque'].copy()
    return published


def test_rebuild_takes_the_samples_the_node_took(model):
    """The recording holds samples the node never had: before it subscribed, two it lost
    (one alone, one before a 40 ms gap that restarts its estimator). The rebuild leaves
    exactly those out and agrees with every published torque; fed every recorded sample,
    the same estimator would not (the check is not vacuous)."""
    t, q, _ = _run(model, count=400)
    t[300:] += 40_000_000                          # a stall of 8 periods: a restart
    received = np.ones(len(t), bool)
    received[:37] = False                          # the node's subscription came later
    received[[150, 299]] = False                   # lost on the way to the node
    published = _node(model, t, q, received)
    rec = LiveRecording(model)
    for k in range(len(t)):
        rec.on_input(int(t[k]), q[k])
    for stamp, torque in published.items():
        rec.on_output(stamp, torque)

    taken = node_inputs(t, np.array(sorted(published)), EstimatorConfig())
    np.testing.assert_array_equal(taken, received)
    _, difference = rec.analysis()
    assert difference < 1e-9
    everything = _node(model, t, q, np.ones(len(t), bool))
    assert max(np.abs(everything[s] - published[s]).max() for s in published) > 1e-3


def test_the_window_starts_at_the_motion_command(model, tmp_path):
    """The figure and table cover the window only (samples before it still feed the
    estimator), the span is the window's, and the summary says when a joint first moves."""
    t = 10**12 + np.arange(700, dtype=np.int64) * PERIOD_NS
    q = np.zeros((len(t), model.n_joints))
    start = int(t[200])                            # commanded at 1.0 s, moving from 1.25 s
    after = (t - start) * 1e-9 - 0.25
    q[:, 3] = -1.2 - np.where(after > 0, 0.2 * after ** 2, 0.0)   # the elbow bends on
    published = _node(model, t, q, np.ones(len(t), bool))
    rec = LiveRecording(model)
    for k in range(len(t)):
        rec.on_input(int(t[k]), q[k])
    for stamp, torque in published.items():
        rec.on_output(stamp, torque)
    rec.set_window(start, start + 2_000_000_000)
    analysis, difference = rec.analysis()
    assert difference < 1e-9
    assert analysis.t_ns[0] == start and analysis.t_ns[-1] == start + 2_000_000_000
    # 0.2 rad/s^2 * x^2 passes MOTION_RAD at x = 0.224 s: the first sample after that
    expected = 0.25 + np.ceil(np.sqrt(MOTION_RAD / 0.2) / 0.005 + 1e-9) * 0.005
    assert first_motion_s(analysis.t_ns, q[200:601]) == pytest.approx(expected, abs=1e-9)
    _, text = write_report(tmp_path, rec, title='plag-ros sim')
    head = re.match(rf'plag-ros sim: 401 samples over 2.0 s; a joint first moves '
                    rf'{MOTION_RAD:g} rad at (\S+) s\n', text)
    assert head and float(head.group(1)) == pytest.approx(expected, abs=0.0051), text[:200]
    assert 'torque the node published: 0.00e+00 N*m over 696 of its 696 samples' in text
