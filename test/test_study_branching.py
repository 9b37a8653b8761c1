"""Kusaka and Tanaka 2025 [PTT]: double pendulum and branched pendulum against MuJoCo, and
the partial torque tensor of the branched pendulum read per branch (Table 3) with its
structural zeros.

[PTT] T. Kusaka, T. Tanaka, "Partial Torque Tensor and Its Building Block Representation
for Dynamics of Branching Structures Using Computational Graph", Robotics 2025, 14(3), 31,
doi:10.3390/robotics14030031.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from plag_ros.core.dynamics.model import RobotModel
from plag_ros.core.studies import branching as study


@pytest.fixture(scope='module')
def summary(tmp_path_factory):
    out = tmp_path_factory.mktemp('branching')
    assert study.main([str(out), '--duration', '2.5']) == 0
    for name in ('fig2_double_pendulum', 'fig6_branched_pendulum', 'fig7_branch_tables',
                 'fig4_building_blocks'):
        assert (out / f'{name}.png').stat().st_size > 10_000, name
    return json.loads((out / 'summary.json').read_text())


def test_double_pendulum_matches_mujoco_at_the_papers_instants(summary):
    dp = summary['double_pendulum']
    assert dp['check_times_s'] == [0.4, 0.7, 1.0]
    # both integrate the same ODE with RK4 at 1 ms: agreement to rounding, not just "close"
    assert dp['max_abs_diff_rad'] < 1e-9
    assert np.abs(np.diff(np.array(dp['ours_rad']), axis=0)).min() > 0.05   # it moved


def test_branched_pendulum_matches_mujoco(summary):
    assert summary['branched_pendulum']['mujoco_max_abs_diff_rad'] < 1e-9


def test_partial_torque_tensor_per_branch(summary):
    b = summary['branched_pendulum']
    # the paper's Fig. 7 has eleven blocks: 5 (J1 row) + 3 + 3 per-branch upper triangles
    assert b['nonzero_entries'] == 11 and b['entries'] == 25
    assert b['structural_zero_max_abs'] == 0.0
    assert b['structural_nonzero_min_rms'] > 1e-3
    # each branch sub-table is the serial arm's table (link 1 + that branch alone)
    assert max(b['branch_table_minus_serial_arm_max_abs'].values()) < 1e-12
    # J1 collects tau_11 once plus both branches' row-1 entries
    assert b['j1_torque_minus_superposition_max_abs'] < 1e-12


def test_structure_is_the_root_paths():
    model = RobotModel.from_urdf(study.tree_urdf(study.BRANCHED))
    mask = study.structure(model)
    j = {name: model.joint_index([f'J{name}'])[0] for name in ('1', '2a', '3a', '2b', '3b')}
    b = {name: model.body_names.index(f'L{name}') for name in ('1', '2a', '3a', '2b', '3b')}
    expected = {('1', body) for body in b} | {('2a', '2a'), ('2a', '3a'), ('3a', '3a'),
                                              ('2b', '2b'), ('2b', '3b'), ('3b', '3b')}
    for jn, k in j.items():
        for bn, i in b.items():
            assert mask[k, i] == ((jn, bn) in expected), (jn, bn)
