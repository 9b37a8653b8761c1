"""The compact layout (plag_ros.core.dynamics.compact): the tree's structural zeros, exact round
trips, the sizes derived by hand, and the compact analysis.npz read back as the dense one."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from robots import serial_chain, two_arm_torso

from plag_ros.core.dynamics.compact import PAIR_FIELDS, TRIPLE_FIELDS, CompactLayout, load_analysis
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path


def _models() -> dict[str, RobotModel]:
    return {'crane_x7': RobotModel.from_urdf(default_urdf_path()),
            'chain30': RobotModel.from_urdf(serial_chain(seed=3, n=30)),
            'two_arm_torso': RobotModel.from_urdf(two_arm_torso())}


MODELS = _models()


def _samples(model: RobotModel, count: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    q, qd, qdd = (rng.uniform(-1.0, 1.0, (count, model.n_joints)) for _ in range(3))
    return PartialLagrangian(model, dtype=torch.float64).decompose_arrays(q, qd, qdd)


def _mask(layout: CompactLayout, field: str) -> np.ndarray:
    n, B = layout.n_joints, layout.n_bodies
    if field in PAIR_FIELDS:
        mask = np.zeros((n, B), dtype=bool)
        mask[layout.pair_joint, layout.pair_body] = True
    else:
        mask = np.zeros((n, B, n), dtype=bool)
        mask[layout.triple_joint, layout.triple_body, layout.triple_source] = True
    return mask


@pytest.mark.parametrize('name', list(MODELS))
def test_round_trip_is_exact_and_drops_only_zeros(name):
    """Float64, seeded: every entry outside the tree's mask is exactly 0 in the engine's
    output, and pack -> unpack gives the dense arrays back bit for bit."""
    model = MODELS[name]
    layout = CompactLayout.from_model(model)
    dense = _samples(model, 64, seed=17)
    for field in PAIR_FIELDS + TRIPLE_FIELDS:
        assert not dense[field][:, ~_mask(layout, field)].any(), field
    packed = layout.pack(dense)
    assert packed['partial'].shape == (64, layout.n_pairs)
    assert packed['velocity'].shape == (64, layout.n_triples)
    back = layout.unpack(packed)
    for field, value in dense.items():
        assert back[field].dtype == value.dtype and np.array_equal(back[field], value), field
    # One sample without a batch axis, and a 2-D batch.
    one = {k: v[0] for k, v in dense.items()}
    assert all(np.array_equal(layout.unpack(layout.pack(one))[k], one[k]) for k in one)
    grid = {k: v.reshape(8, 8, *v.shape[1:]) for k, v in dense.items()}
    assert all(np.array_equal(layout.unpack(layout.pack(grid))[k], grid[k]) for k in grid)


@pytest.mark.parametrize('name', ['chain30', 'two_arm_torso'])
def test_the_mask_is_no_larger_than_the_tree_needs(name):
    """Random axes and inertias: each kept entry of partial, acceleration and velocity is
    non-zero in some sample, so nothing kept is structurally zero."""
    model = MODELS[name]
    layout = CompactLayout.from_model(model)
    packed = layout.pack(_samples(model, 8, seed=18))
    for field in ('partial', 'acceleration', 'velocity'):
        assert (np.abs(packed[field]) > 0).any(axis=0).all(), field


def test_sizes_match_the_counts_derived_by_hand():
    """A serial chain of n joints, body j on joint j: pairs are k <= j, n(n+1)/2 of them;
    triples k, s <= j, sum (j+1)^2 = n(n+1)(2n+1)/6. Two arms of m joints on a torso joint:
    each arm body j has a path of j + 2 joints."""
    chain = MODELS['chain30']
    n = 30
    assert chain.n_joints == n and chain.n_bodies == n
    assert list(chain.body_joint) == list(range(n))
    layout = CompactLayout.from_model(chain)
    assert layout.n_pairs == n * (n + 1) // 2 == 465
    assert layout.n_triples == n * (n + 1) * (2 * n + 1) // 6 == 9455
    dense, compact = layout.nbytes()
    assert dense == 8 * (2 * n + 2 * n * n + 2 * n ** 3) == 446_880
    assert compact == 8 * (2 * n + 2 * 465 + 2 * 9455) == 159_200
    torso = CompactLayout.from_model(MODELS['two_arm_torso'])
    m = 4
    assert torso.n_pairs == 1 + 2 * sum(j + 2 for j in range(m))
    assert torso.n_triples == 1 + 2 * sum((j + 2) ** 2 for j in range(m))


def test_crane_x7_sizes():
    """CRANE-X7 (9 joints with the gripper fingers, the mimic one included): the counts
    from its tree, walked here by hand from the parent of each joint."""
    model = MODELS['crane_x7']
    depth = {}
    for j in range(model.n_joints):
        parent = int(model.joint_parent[j])
        depth[j] = 1 + (depth[parent] if parent >= 0 else 0)
    paths = [depth[int(model.body_joint[i])] for i in range(model.n_bodies)]
    layout = CompactLayout.from_model(model)
    assert layout.n_pairs == sum(paths)
    assert layout.n_triples == sum(p * p for p in paths)
    dense, compact = layout.nbytes()
    print(f'\nCRANE-X7: {dense} -> {compact} bytes per sample ({compact / dense:.2f})')
    assert compact < 0.75 * dense


def test_errors_name_the_field():
    layout = CompactLayout.from_model(MODELS['crane_x7'])
    other = CompactLayout.from_model(MODELS['chain30'])
    dense = _samples(MODELS['chain30'], 2, seed=1)
    with pytest.raises(ValueError, match='partial: trailing shape'):
        layout.pack(dense)
    with pytest.raises(ValueError, match='velocity: trailing shape'):
        layout.unpack({'velocity': np.zeros(other.n_triples)})
    with pytest.raises(ValueError, match='trailing shape'):
        layout.unpack({'partial': np.zeros(())})


def test_index_arrays_rebuild_the_layout_and_load_analysis_reads_both(tmp_path):
    model = MODELS['crane_x7']
    layout = CompactLayout.from_model(model)
    again = CompactLayout.from_index_arrays(layout.index_arrays())
    for key in ('pair_joint', 'pair_body', 'triple_joint', 'triple_body', 'triple_source'):
        assert np.array_equal(getattr(again, key), getattr(layout, key))
    dense = _samples(model, 5, seed=2)
    np.savez(tmp_path / 'dense.npz', **dense)
    np.savez(tmp_path / 'compact.npz', **layout.pack(dense), **layout.index_arrays())
    for path in ('dense.npz', 'compact.npz'):
        loaded = load_analysis(tmp_path / path)
        assert set(loaded) == set(dense)
        assert all(np.array_equal(loaded[k], dense[k]) for k in dense), path
