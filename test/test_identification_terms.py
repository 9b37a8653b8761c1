"""The pieces identification needs on a real arm, each against an independent reference.

* the nearest consistent body (:mod:`plag_ros.core.dynamics.consistency`) against the
  closed form of a Euclidean projection onto a half-space, and the loader naming the body;
* the convex fit (:func:`~plag_ros.core.identification.consistent_map.consistent_map`)
  against the closed-form linear solve where no constraint binds, and against scipy's
  SLSQP on one body where one does;
* the optional measurement terms (offset, Stribeck, load-dependent friction) recovered
  from torques made with known values by the partial Lagrangian engine;
* the effort's delay recovered from a known shift;
* the effort filtered exactly as the estimator filters positions;
* the held-out table leaves out a joint that does not move instead of scoring it 0;
* the prior's width and the offsets chosen by cross-validation where the simulated arm
  differs from its URDF or its torque has a bias, and kept where neither; a joint that
  sweeps one way named.
"""
from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
from scipy import signal
from scipy.optimize import minimize
from test_identification import NOISE, RATE_HZ, _measured, _trajectory

from plag_ros.apps.identify_report import held_out_errors
from plag_ros.core.dynamics.consistency import (
    MARGIN,
    inertia_findings,
    nearest_consistent,
    physically_consistent,
    pseudo_inertia,
)
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.regressor import inertial_parameters
from plag_ros.core.estimation.filters import (
    EstimatorConfig,
    design_lowpass,
    estimate_offline,
    lowpass_offline,
)
from plag_ros.core.identification.consistent_map import consistent_map
from plag_ros.core.identification.delay import estimate_delay, shift_effort
from plag_ros.core.identification.fit import (
    IdentificationPrior,
    MeasurementTerms,
    identify,
    parameter_rows,
)
from plag_ros.core.identification.selection import (
    one_way_joints,
    scaled_prior,
    select_by_cross_validation,
)

BAD_LINK = """<link name="{name}">
    <inertial><origin xyz="0 0 0.05" rpy="0 0 0"/><mass value="1.2"/>
      <inertia ixx="0.0146" ixy="0" ixz="0" iyy="0.0048" iyz="0" izz="0.0004"/></inertial>
  </link>"""


@pytest.fixture(scope='module')
def nominal() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


@pytest.fixture(scope='module')
def broken(nominal) -> RobotModel:
    """The CRANE-X7 with its elbow link's inertia replaced by one no body has."""
    link = 'crane_x7_upper_arm_revolute_part_link'
    xml = nominal.urdf_xml
    start = xml.index(f'<link name="{link}"')
    end = xml.index('</link>', start) + len('</link>')
    return RobotModel.from_urdf(xml[:start] + BAD_LINK.format(name=link) + xml[end:])


def test_the_loader_names_the_body_and_the_inequality(nominal, caplog):
    link = 'crane_x7_upper_arm_revolute_part_link'
    xml = nominal.urdf_xml
    start = xml.index(f'<link name="{link}"')
    end = xml.index('</link>', start) + len('</link>')
    with caplog.at_level(logging.WARNING):
        RobotModel.from_urdf(xml[:start] + BAD_LINK.format(name=link) + xml[end:])
    text = caplog.text
    assert link in text and 'ixx <= iyy + izz' in text and '0.0146 > 0.0048 + 0.0004' in text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        RobotModel.from_urdf(default_urdf_path())
    assert 'triangle inequality' not in caplog.text


def test_the_nearest_consistent_body_is_the_projection(broken):
    findings = inertia_findings(broken)
    assert [f.body for f in findings] == ['crane_x7_upper_arm_revolute_part_link']
    repaired_model, again = nearest_consistent(broken)
    assert [f.body for f in again] == [f.body for f in findings]
    assert not inertia_findings(repaired_model)
    assert physically_consistent(inertial_parameters(repaired_model)).all()
    assert not physically_consistent(inertial_parameters(broken)).all()
    b = findings[0].index
    np.testing.assert_array_equal(repaired_model.body_mass, broken.body_mass)
    np.testing.assert_array_equal(repaired_model.body_com, broken.body_com)
    # principal axes kept; moments moved along the broken inequality's normal only
    before, after = np.array(findings[0].moments), np.array(findings[0].repaired)
    axes_before = np.linalg.eigh(broken.body_inertia[b])[1]
    axes_after = np.linalg.eigh(repaired_model.body_inertia[b])[1]
    np.testing.assert_allclose(np.abs(axes_before.T @ axes_after), np.eye(3), atol=1e-9)
    k = int(np.argmax(before))
    normal = -np.ones(3)
    normal[k] = 1.0
    step = after - before
    np.testing.assert_allclose(np.cross(step, normal), 0.0, atol=1e-15)
    assert normal @ after == pytest.approx(-MARGIN * before.sum() / 2.0, rel=1e-12)
    # no consistent moments with the margin are nearer (a brute-force check on a grid)
    rng = np.random.default_rng(3)
    for _ in range(2000):
        trial = after + rng.normal(0.0, 0.002, 3)
        ok = all(trial[i] <= trial[(i + 1) % 3] + trial[(i + 2) % 3]
                 - MARGIN * before.sum() / 2.0 for i in range(3))
        if ok:
            assert np.linalg.norm(trial - before) >= np.linalg.norm(step) - 1e-15


def test_the_fit_is_the_linear_solve_where_no_constraint_binds(nominal):
    """Away from the constraints the MAP is a linear solve: the solver must return it."""
    rng = np.random.default_rng(5)
    pi0 = inertial_parameters(nominal)
    B = nominal.n_bodies
    x0 = np.concatenate([pi0.ravel(), [0.1, 0.2]])
    scale = np.concatenate([np.maximum(np.abs(pi0.ravel()) * 0.01, 1e-6), [0.1, 0.1]])
    truth = x0 + scale * rng.normal(0.0, 0.05, len(x0))
    truth[-2:] = [0.15, 0.25]
    assert physically_consistent(truth[:10 * B].reshape(B, 10)).all()
    Phi = rng.normal(size=(400, len(x0))) / scale
    c = Phi @ truth + rng.normal(0.0, 0.01, 400)
    R, c = Phi, c
    x = consistent_map(R, c, x0, scale, np.zeros(2), B, 0.01)
    H = R.T @ R / 0.01 ** 2 + np.diag(scale ** -2.0)
    closed = np.linalg.solve(H, R.T @ c / 0.01 ** 2 + x0 / scale ** 2)
    assert physically_consistent(closed[:10 * B].reshape(B, 10)).all()
    np.testing.assert_allclose((x - closed) / scale, 0.0, atol=1e-6)


def test_the_fit_matches_a_general_solver_where_the_constraint_binds(nominal):
    """One body pulled by its data towards an impossible inertia: the answer sits on the
    constraint, and SLSQP with the smallest eigenvalue as the constraint finds the same
    minimum (the problem is convex: one minimum)."""
    pi0 = inertial_parameters(nominal)[2]
    target = pi0.copy()
    target[4] = 3.0 * (pi0[6] + pi0[9])          # I_xx far beyond I_yy + I_zz
    assert not physically_consistent(target)
    scale = np.maximum(np.abs(pi0) * 0.5, 1e-5)
    R = np.diag(1.0 / scale)                     # the data: "the parameters are target"
    c = target / scale
    x = consistent_map(R, c, pi0, scale, np.zeros(0), 1, 0.05)

    def objective(v):
        return float(np.sum((R @ v - c) ** 2) / 0.05 ** 2 + np.sum(((v - pi0) / scale) ** 2))

    margin = 1e-6 * np.abs(np.diagonal(pseudo_inertia(pi0))).min()
    reference = minimize(objective, pi0, method='SLSQP', constraints=[{
        'type': 'ineq', 'fun': lambda v: np.linalg.eigvalsh(pseudo_inertia(v))[0] - margin}],
        options={'ftol': 1e-14, 'maxiter': 1000})
    assert physically_consistent(x)
    assert np.linalg.eigvalsh(pseudo_inertia(x))[0] < 1e-3 * np.linalg.eigvalsh(
        pseudo_inertia(x))[-1]                   # on the boundary: the constraint binds
    assert objective(x) <= objective(reference.x) * (1 + 1e-4)


def _true_terms(nominal):
    act = int(nominal.actuated.sum())
    offset = np.linspace(-0.3, 0.4, act)
    stribeck = np.full(act, 0.25)
    load = np.full(act, 0.04)
    return offset, stribeck, load


def test_offset_stribeck_and_load_friction_are_recovered(nominal):
    """Torques of the engine's rigid body plus known terms (the engine, not the regressor
    the fit uses), two-way motion so that offset and Coulomb friction separate."""
    q, qd, qdd = _trajectory(nominal, 30.0, seed=11)
    arm = (nominal, np.full(8, 0.05), np.full(8, 0.1), np.zeros(8))
    torque = _measured(arm, q, qd, qdd, seed=12)
    offset, stribeck, load = _true_terms(nominal)
    terms = MeasurementTerms(offset=True, stribeck_velocity=0.05, load_friction=True)
    rows = parameter_rows(nominal, q, qd, qdd, terms)
    m = 8
    extra = rows[..., -3 * m:]
    torque = torque + extra @ np.concatenate([offset, stribeck, load])
    result = identify(nominal, q, qd, qdd, torque, rest_band=0.01, terms=terms)
    moved = [0, 1, 2, 3, 4, 5]          # the wrist (6) stays still; 7 is the gripper
    np.testing.assert_allclose(result.offset[moved], offset[moved], atol=0.05)
    assert all(result.excited['offset'][moved])
    # load friction and the Stribeck term where the data excite them: the heavily loaded
    # shoulder tilt and elbow must be among those
    for term, truth in (('load_friction', load), ('stribeck', stribeck)):
        excited = np.flatnonzero(result.excited[term])
        print(term, 'excited on', excited, getattr(result, term).round(4))
        assert {1, 3} <= set(excited.tolist()), term
        np.testing.assert_allclose(getattr(result, term)[excited], truth[excited],
                                   atol=0.25 * truth[0])
    assert result.terms.names == ('viscous', 'coulomb', 'armature', 'offset', 'stribeck',
                                  'load_friction')
    # the prediction carries every term
    held_q, held_qd, held_qdd = _trajectory(nominal, 10.0, seed=13)
    truth = _measured(arm, held_q, held_qd, held_qdd, seed=14) + parameter_rows(
        nominal, held_q, held_qd, held_qdd, terms)[..., -3 * m:] @ np.concatenate(
        [offset, stribeck, load])
    error = result.predict(nominal, held_q, held_qd, held_qdd) - truth
    assert np.sqrt(np.mean(error[:, moved] ** 2)) < 3 * NOISE


def test_the_effort_delay_is_recovered(nominal):
    q, qd, qdd = _trajectory(nominal, 20.0, seed=21)
    arm = (nominal, np.full(8, 0.05), np.full(8, 0.1), np.zeros(8))
    torque = _measured(arm, q, qd, qdd, seed=22)
    late = np.full_like(torque, np.nan)
    late[7:] = torque[:-7]                      # the effort 7 samples behind the states
    late[:7] = torque[0]
    found = estimate_delay(nominal, q, qd, qdd, late, RATE_HZ, rest_band=0.01,
                           max_delay_s=0.1)
    assert found.samples == 7 and found.delay_s == pytest.approx(7 / RATE_HZ)
    assert found.bracket_s[0] <= found.delay_s <= found.bracket_s[1] and not found.at_edge
    np.testing.assert_array_equal(shift_effort(late, 7)[:-7], torque[:-7])
    assert np.isnan(shift_effort(late, 7)[-7:]).all()
    # a channel with a gap is left out, not zero-filled into the fit
    late[100, 3] = np.nan
    assert estimate_delay(nominal, q, qd, qdd, late, RATE_HZ, rest_band=0.01,
                          max_delay_s=0.1).samples == 7


def test_the_effort_is_filtered_exactly_as_the_positions():
    """The effort's filter is the positions' (the estimator's q, away from the ends, where
    the estimate also moves q onto the stamps), and it is zero-phase with the Butterworth
    magnitude squared (scipy's response of the designed sections)."""
    t_ns = (np.arange(3000) * 1e6).astype(np.int64)           # 1 kHz
    t = t_ns * 1e-9
    frequencies = (0.5, 2.0, 7.0)
    x = np.stack([np.sin(2 * np.pi * f * t + 0.3) for f in frequencies], 1)
    config = EstimatorConfig(rate_hz=1000.0, cutoff_hz=5.0)
    filtered = lowpass_offline(t_ns, x, config)
    inner = slice(300, -300)
    np.testing.assert_allclose(filtered[inner], estimate_offline(t_ns, x, config).q[inner],
                               rtol=0, atol=1e-6)
    _, response = signal.sosfreqz(design_lowpass(config), worN=list(frequencies), fs=1000.0)
    for k in range(3):
        expected = np.abs(response[k]) ** 2 * np.sin(2 * np.pi * frequencies[k] * t + 0.3)
        np.testing.assert_allclose(filtered[500:-500, k], expected[500:-500], atol=1e-3)
    with_nan = x.copy()
    with_nan[:, 1] = np.nan
    out = lowpass_offline(t_ns, with_nan, config)
    assert np.isnan(out[:, 1]).all()
    np.testing.assert_allclose(out[:, [0, 2]], filtered[:, [0, 2]], rtol=0, atol=1e-12)
    # a missing sample is a gap of its own column: the runs on either side are filtered
    # apart, as two recordings would be; a run too short to filter is NaN
    gaps = x.copy()
    gaps[1000, 0] = np.nan
    gaps[2996:2998, 2] = np.nan
    out = lowpass_offline(t_ns, gaps, config)
    np.testing.assert_array_equal(out[:, 1], filtered[:, 1])
    np.testing.assert_allclose(out[:1000, 0], lowpass_offline(t_ns[:1000], x[:1000, :1],
                                                              config)[:, 0], atol=1e-12)
    np.testing.assert_allclose(out[1001:, 0], lowpass_offline(t_ns[1001:], x[1001:, :1],
                                                              config)[:, 0], atol=1e-12)
    assert np.isnan(out[1000, 0]) and np.isnan(out[2996:, 2]).all()
    assert np.isfinite(out[:2996, 2]).all()


def test_a_joint_that_does_not_move_is_not_scored(nominal):
    one = dataclasses.replace(nominal)
    torque = np.zeros((50, 8))
    moving = np.zeros((50, 8), dtype=bool)
    moving[:, 1] = True
    predictions = {'nominal': torque + 1.0, 'identified': torque + 0.5,
                   'least_squares': torque + 0.25}
    table = held_out_errors(one, predictions, torque, moving)
    assert table['nominal'][1] == pytest.approx(1.0)
    assert all(table['nominal'][k] is None for k in range(8) if k != 1)
    overall = table['over_moving_joints']
    assert overall['joints'] == [nominal.actuated_names[1]]
    assert overall['cut_against_nominal']['identified'] == pytest.approx(0.5)
    assert overall['identified_over_least_squares'] == pytest.approx(2.0)


def _arm_with_com_moved(nominal: RobotModel, shift_m: float):
    """The CRANE-X7 with the COMs of its upper and lower arm bodies (2-4) ``shift_m`` along
    their x axes from the URDF's (0: the URDF itself); the test arm's friction and
    armature."""
    com = nominal.body_com.copy()
    com[[2, 3, 4], 0] += shift_m
    m = int(nominal.actuated.sum())
    return (dataclasses.replace(nominal, body_com=com), np.full(m, 0.05), np.full(m, 0.1),
            np.full(m, 0.004))


def _slow_error(rows: int, seed: int, rms: float) -> np.ndarray:
    """(rows, 8) torque error below 2 Hz of ``rms`` [N*m] per joint: what a model that
    lacks slow effects leaves on a real arm (correlated over many samples, not white)."""
    slow = signal.sosfiltfilt(signal.butter(2, 2.0, fs=RATE_HZ, output='sos'),
                              np.random.default_rng(seed).normal(size=(rows, 8)), axis=0)
    return rms * slow / slow.std(axis=0)


@pytest.mark.parametrize('shift_m, wider', [(0.0, False), (0.15, True)])
def test_cross_validation_widens_the_prior_only_for_a_urdf_that_is_off(nominal, shift_m,
                                                                        wider):
    """COMs 15 cm from the URDF's (7.5 of the prior's 2 cm spreads) under a slow 0.1 N*m
    model error: leaving one of two recordings out at a time picks a wider prior, and that
    fit's error on a third, unseen recording is at most 0.8x the URDF prior's. The URDF
    exact: the URDF's own prior stays."""
    arm = _arm_with_com_moved(nominal, shift_m)
    parts = []
    for seed in (21, 22):
        q, qd, qdd = _trajectory(nominal, 12.0, seed=seed)
        torque = _measured(arm, q, qd, qdd, seed=seed + 10) + _slow_error(len(q), seed + 50,
                                                                           0.1)
        parts.append((q, qd, qdd, torque, np.full(q.shape, 0.01)))
    choice = select_by_cross_validation(nominal, parts, prior=IdentificationPrior(),
                                        terms=MeasurementTerms(), scales=(1.0, 10.0, 100.0),
                                        offsets=(False,))
    print('CV RMS per candidate:', choice.scores)
    assert (choice.folds, choice.fold_kind) == (2, 'recordings')
    assert (choice.prior_scale > 1.0) == wider
    if not wider:
        return
    q, qd, qdd = _trajectory(nominal, 10.0, seed=23)
    truth = _measured(arm, q, qd, qdd, seed=33)
    stacked = [np.concatenate(x) for x in zip(*parts)]

    def unseen_rms(scale: float) -> float:
        fit = identify(nominal, *stacked[:4], rest_band=0.01,
                       prior=scaled_prior(IdentificationPrior(), scale))
        return float(np.sqrt(np.mean((fit.predict(nominal, q, qd, qdd) - truth) ** 2)))

    assert unseen_rms(choice.prior_scale) <= 0.8 * unseen_rms(1.0)


def test_cross_validation_takes_the_offsets_where_the_torque_has_a_bias(nominal):
    """A bias of 0.3-0.5 N*m on the first three joints' torque, two-way motion, one
    recording (its four blocks left out in turn): those three get their offsets (each
    joint's cross-validated error with them at most 1.5x the noise, without them more),
    and a joint whose offset is not taken keeps it at exactly zero in the fit."""
    q, qd, qdd = _trajectory(nominal, 24.0, seed=24)
    m = int(nominal.actuated.sum())
    arm = (nominal, np.full(m, 0.05), np.full(m, 0.1), np.zeros(m))
    bias = np.zeros(m)
    bias[:3] = (0.3, 0.4, 0.5)
    torque = _measured(arm, q, qd, qdd, seed=25) + bias
    band = np.full(q.shape, 0.01)
    choice = select_by_cross_validation(nominal, [(q, qd, qdd, torque, band)],
                                        prior=IdentificationPrior(), terms=MeasurementTerms(),
                                        scales=(1.0,))
    print('offsets on', choice.offset_joints, 'per joint CV RMS', choice.joint_scores)
    assert (choice.folds, choice.fold_kind) == (4, 'blocks')
    assert choice.offset and all(choice.offset_joints[:3])
    without, with_offsets = (np.array(row) for row in choice.joint_scores)
    assert (with_offsets[:3] <= 1.5 * NOISE).all() and (without[:3] > 1.5 * NOISE).all()
    fit = identify(nominal, q, qd, qdd, torque, rest_band=band,
                   terms=MeasurementTerms(**choice.terms_offset))
    np.testing.assert_allclose(fit.offset[:3], bias[:3], atol=0.05)
    # the two-way joints without a bias lose theirs (the wrist never moves)
    assert choice.offset_joints == (True, True, True, False, False, False, False, False)
    assert (fit.offset[3:] == 0.0).all() and not fit.excited['offset'][3:].any()


def test_cross_validation_leaves_a_recording_at_rest_out_of_its_folds(nominal):
    """A moving recording and one of the arm at rest: the one at rest has nothing to fit
    or to score, so the moving one's four blocks are the folds (the fit of the recording
    at rest alone, with the moving one left out, raised 'nothing to fit')."""
    q, qd, qdd = _trajectory(nominal, 12.0, seed=27)
    m = int(nominal.actuated.sum())
    arm = (nominal, np.full(m, 0.05), np.full(m, 0.1), np.zeros(m))
    moving = (q, qd, qdd, _measured(arm, q, qd, qdd, seed=28), np.full(q.shape, 0.01))
    rest_q = np.repeat(q[:1], 400, axis=0)
    zero = np.zeros_like(rest_q)
    at_rest = (rest_q, zero, zero, _measured(arm, rest_q, zero, zero, seed=29),
               np.full(rest_q.shape, 0.01))
    choice = select_by_cross_validation(nominal, [moving, at_rest],
                                        prior=IdentificationPrior(), terms=MeasurementTerms(),
                                        scales=(1.0,), offsets=(False,))
    assert (choice.folds, choice.fold_kind) == (4, 'blocks')
    with pytest.raises(ValueError, match='no recording has a joint that moves'):
        select_by_cross_validation(nominal, [at_rest], prior=IdentificationPrior(),
                                   terms=MeasurementTerms(), scales=(1.0,))


def test_a_joint_that_sweeps_one_way_is_named(nominal):
    """The elbow driven one way only (a ramp), the shoulder both ways: only the elbow is
    named, with its share of rows at qd > 0."""
    q, qd, qdd = _trajectory(nominal, 10.0, seed=26)
    elbow = nominal.joint_index(['crane_x7_upper_arm_revolute_part_rotate_joint'])[0]
    qd[:, elbow] = np.abs(qd[:, elbow]) + 0.05
    torque = np.zeros((len(q), int(nominal.actuated.sum())))
    found = one_way_joints(nominal, qd, torque, 0.01)
    assert [f['joint'] for f in found] == [nominal.joint_names[elbow]]
    assert found[0]['positive_share'] == 1.0
    torque[:, list(nominal.actuated_names).index(nominal.joint_names[elbow])] = np.nan
    assert one_way_joints(nominal, qd, torque, 0.01) == []      # not measured: not fitted
