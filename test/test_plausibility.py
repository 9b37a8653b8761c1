"""plag_ros.core.estimation.plausibility: readings the arm cannot produce are rejected, by reason.

Limits come from the bundled CRANE-X7 URDF (0.1 rad margin, twice the 4.817 rad/s velocity
limit) and a generated chain with continuous and prismatic joints; every expected verdict
below follows from those figures, not from running the gate.
"""
from __future__ import annotations

import numpy as np
import pytest
from robots import serial_chain

from plag_ros.core.decomposition.analysis import INPUT_REASONS
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.plausibility import (
    PLAUSIBILITY_REASONS,
    PlausibilityConfig,
    PlausibilityGate,
)

PERIOD_NS = 5_000_000   # 200 Hz


@pytest.fixture(scope='module')
def crane():
    return RobotModel.from_urdf(default_urdf_path())


def _inside(model: RobotModel) -> np.ndarray:
    """A pose inside every limit: mid-range, 0 where a joint is unlimited."""
    lo, hi = model.joint_lower, model.joint_upper
    limited = np.isfinite(lo) & np.isfinite(hi)
    return np.where(limited, 0.5 * (np.where(limited, lo, 0.0) + np.where(limited, hi, 0.0)),
                    0.0)


def test_limits_with_margin(crane):
    gate = PlausibilityGate(crane)
    q = _inside(crane)
    k = crane.joint_names.index('crane_x7_upper_arm_revolute_part_rotate_joint')
    upper = crane.joint_upper[k]                 # radians(0.001) in the URDF
    q[k] = upper + 0.09                          # inside the 0.1 rad margin
    assert gate.reason(q) is None
    q[k] = upper + 0.11
    assert gate.reason(q) == 'position_out_of_range'
    q[k] = 1e300
    assert gate.reason(q) == 'position_out_of_range'


def test_velocity_factor(crane):
    gate = PlausibilityGate(crane)
    q = _inside(crane)
    vmax = crane.velocity_limit                  # 4.81710873 rad/s on every joint
    assert gate.reason(q, 1.99 * vmax) is None
    qd = np.zeros(crane.n_joints)
    qd[3] = -2.01 * vmax[3]
    assert gate.reason(q, qd) == 'velocity_out_of_range'


def test_continuous_bound_and_unlimited_prismatic():
    model = RobotModel.from_urdf(serial_chain(seed=3, n=9))
    types = model.joint_types
    assert 'continuous' in types and 'prismatic' in types
    gate = PlausibilityGate(model, PlausibilityConfig(continuous_bound=50.0))
    q = _inside(model)
    c = types.index('continuous')
    q[c] = 49.0
    assert gate.reason(q) is None
    q[c] = -51.0
    assert gate.reason(q) == 'continuous_out_of_range'


def test_jump_is_rejected_and_a_glitch_costs_one_sample(crane):
    gate = PlausibilityGate(crane)
    q0 = _inside(crane)
    # allowed step in one 5 ms period: 2 * 4.817 * 0.005 + 0.01 = 0.0582 rad
    assert gate.check(0, q0) is None
    assert gate.check(PERIOD_NS, q0 + 0.05) is None
    glitch = q0 + 0.05
    glitch[2] += 0.5
    assert gate.check(2 * PERIOD_NS, glitch) == 'position_jump'
    # the next good sample is compared with the last accepted one, not the glitch
    assert gate.check(3 * PERIOD_NS, q0 + 0.06) is None
    assert gate.rejected['position_jump'] == 1


def test_jump_bound_grows_with_the_time_between_samples(crane):
    gate = PlausibilityGate(crane)
    q0 = _inside(crane)
    gate.check(0, q0)
    # 0.5 rad in 100 ms needs 5 rad/s < 9.63 rad/s: possible after a gap
    assert gate.check(100_000_000, q0 + 0.5) is None


def test_new_position_is_accepted_after_consistent_samples(crane):
    gate = PlausibilityGate(crane, PlausibilityConfig(reanchor_samples=3))
    q0 = _inside(crane)
    gate.check(0, q0)
    moved = q0 + 0.3                     # e.g. the driver restarted with the arm elsewhere
    verdicts = [gate.check((i + 1) * PERIOD_NS, moved) for i in range(4)]
    assert verdicts == ['position_jump', 'position_jump', None, None]


def test_disabled_gate_accepts_everything(crane):
    gate = PlausibilityGate(crane, PlausibilityConfig(enabled=False))
    assert gate.check(0, np.full(crane.n_joints, 1e300)) is None
    assert gate.rejected == dict.fromkeys(PLAUSIBILITY_REASONS, 0)


@pytest.mark.parametrize('field,value', [('position_margin', -1.0),
                                         ('velocity_factor', 0.0),
                                         ('jump_slack', float('nan')),
                                         ('reanchor_samples', -1)])
def test_bad_config_is_refused(field, value):
    with pytest.raises(ValueError, match=field):
        PlausibilityConfig(**{field: value})


def test_batch_equals_sample_by_sample(crane):
    """The vectorised fast path and the sequential rule agree on a recording with faults."""
    rng = np.random.default_rng(11)
    n, N = crane.n_joints, 3000
    t = np.cumsum(rng.integers(4_000_000, 6_000_000, N)).astype(np.int64)
    q = _inside(crane) + 0.4 * np.sin(np.outer(t * 1e-9, rng.uniform(0.2, 1.0, n)))
    qd = rng.normal(0.0, 1.0, (N, n))
    q[500, 1] += 1.0                                # glitch
    q[1200:, 4] += 0.8                              # genuine offset from here on
    q[2000, 0] = 1e6                                # absurd
    qd[2500, 6] = 50.0                              # impossible speed
    batch = PlausibilityGate(crane).check_batch(t, q, qd)
    looped = PlausibilityGate(crane)
    one_by_one = [looped.check(int(t[i]), q[i], qd[i]) for i in range(N)]
    expected = [0 if r is None else 1 + PLAUSIBILITY_REASONS.index(r) for r in one_by_one]
    np.testing.assert_array_equal(batch, expected)
    reasons = {PLAUSIBILITY_REASONS[c - 1] for c in batch[batch > 0]}
    assert reasons == {'position_jump', 'position_out_of_range', 'velocity_out_of_range'}
    # glitch: 1 sample; offset: 2 before re-anchoring; absurd value: itself
    assert int((batch == 1 + PLAUSIBILITY_REASONS.index('position_jump')).sum()) == 3


def test_batch_of_clean_motion_takes_the_fast_path(crane):
    t = np.arange(1000, dtype=np.int64) * PERIOD_NS
    q = _inside(crane) + 0.3 * np.sin(np.outer(t * 1e-9, np.linspace(0.3, 1.0, crane.n_joints)))
    gate = PlausibilityGate(crane)
    assert not gate.check_batch(t, q).any()
    # the anchor carries over to the next call: a jump right after is still caught
    assert gate.check(int(t[-1]) + PERIOD_NS, q[-1] + 1.0) == 'position_jump'


def test_analysis_reports_and_leaves_out_implausible_samples(crane):
    """Offline: the gate's rejections are reported per reason, the rest is decomposed, and
    the estimate next to a glitch equals the estimate of the recording without it."""
    from plag_ros.core.decomposition.analysis import AnalysisOptions, analyze_arrays
    from plag_ros.core.estimation.filters import EstimatorConfig

    N = 1200
    t = np.arange(N, dtype=np.int64) * PERIOD_NS
    q = _inside(crane) + 0.2 * np.sin(np.outer(t * 1e-9, np.linspace(0.5, 1.5, crane.n_joints)))
    bad = q.copy()
    bad[400, 2] = 1e300                       # absurd: position_out_of_range
    bad[700, 5] += 0.5                        # glitch: position_jump
    options = AnalysisOptions(progress=False, estimator=EstimatorConfig(cutoff_hz=10.0))
    out = analyze_arrays(crane, t, bad, options=options)
    assert out.rejected() == {'position_out_of_range': 1, 'continuous_out_of_range': 0,
                              'velocity_out_of_range': 0, 'position_jump': 1,
                              'stamp_spacing': 0}
    assert 400 not in out.index and 700 not in out.index
    assert np.isfinite(out.torque).all() and np.abs(out.q).max() < 10.0
    keep = np.ones(N, dtype=bool)
    keep[[400, 700]] = False
    clean = analyze_arrays(crane, t[keep], q[keep], options=options)
    np.testing.assert_allclose(out.torque, clean.torque, rtol=0, atol=1e-12)


def test_bunched_stamps_are_left_out_and_counted_not_refused(crane):
    """A publisher catching up after a stall stamps two samples 0.5 ms apart (seen from the
    simulator node on a loaded machine): the later one is left out and counted as
    ``stamp_spacing``, as the live estimator rejects it, and the rest equal the analysis
    of the recording without it. The offline estimator alone refuses such a recording."""
    from plag_ros.core.decomposition.analysis import AnalysisOptions, analyze_arrays
    from plag_ros.core.estimation.filters import EstimatorConfig, estimate_offline

    N = 800
    t = np.arange(N, dtype=np.int64) * PERIOD_NS
    q = _inside(crane) + 0.2 * np.sin(np.outer(t * 1e-9, np.linspace(0.5, 1.5, crane.n_joints)))
    bunched = t.copy()
    bunched[301:] += PERIOD_NS // 2            # a late sample ...
    bunched[300] = bunched[301] - 500_000       # ... stamped 0.5 ms before the next
    bunched[302:] = t[302:] + PERIOD_NS
    order = np.argsort(bunched, kind='stable')
    bunched, q_bunched = bunched[order], q[order]
    assert np.diff(bunched).min() == 500_000
    options = AnalysisOptions(progress=False, estimator=EstimatorConfig(cutoff_hz=10.0))
    with pytest.raises(ValueError, match='min_spacing_periods'):
        estimate_offline(bunched, q_bunched, config=options.estimator)
    out = analyze_arrays(crane, bunched, q_bunched, options=options)
    assert out.rejected()['stamp_spacing'] == 1
    assert sum(out.rejected().values()) == 1
    left_out = int(np.flatnonzero(out.input_codes)[0])
    assert bunched[left_out] - bunched[left_out - 1] == 500_000
    keep = np.ones(N, dtype=bool)
    keep[left_out] = False
    clean = analyze_arrays(crane, bunched[keep], q_bunched[keep], options=options)
    np.testing.assert_allclose(out.torque, clean.torque, rtol=0, atol=1e-12)


def test_analyze_bag_summary_and_npz_carry_the_rejections(crane, tmp_path):
    from plag_ros.apps.bag_analysis import analyze_bag
    from plag_ros.core.decomposition.analysis import AnalysisOptions
    from plag_ros.ros.output_bag import write_joint_state_bag

    N = 600
    t = np.arange(N, dtype=np.int64) * PERIOD_NS + 10**9
    q = _inside(crane) + 0.1 * np.sin(np.outer(t * 1e-9, np.linspace(0.5, 1.5, crane.n_joints)))
    q[300, 0] = 1e300
    arm = [name for name in crane.joint_names if 'finger_b' not in name]   # mimic: filled
    cols = [crane.joint_names.index(name) for name in arm]
    write_joint_state_bag(tmp_path / 'in', t, arm, q[:, cols])
    options = AnalysisOptions(progress=False, npz_level=0,
                              products=frozenset({'npz', 'summary'}))
    analysis, written, _ = analyze_bag(tmp_path / 'in', tmp_path / 'out', model=crane,
                                    options=options)
    summary = written['summary'].read_text()
    assert '1 implausible samples left out of the estimate (position_out_of_range 1)' in summary
    assert 'first at 1.500 s' in summary
    with np.load(written['npz']) as npz:
        codes = npz['input_rejected']
        assert codes.shape == (N,) and codes[300] == 1 and codes.sum() == 1
        assert tuple(npz['rejection_reasons']) == INPUT_REASONS


def test_out_of_order_stamps_leave_the_anchor_alone(crane):
    gate = PlausibilityGate(crane)
    q0 = _inside(crane)
    gate.check(10 * PERIOD_NS, q0)
    # an older stamp is passed on (the estimator refuses it as stamp_not_increasing) ...
    assert gate.check(9 * PERIOD_NS, q0 + 0.3) is None
    # ... and the next sample is still judged against the last one in order
    assert gate.check(11 * PERIOD_NS, q0 + 0.3) == 'position_jump'
