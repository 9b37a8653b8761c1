"""Reused outputs: ``decompose_arrays(..., out=...)``, ``decompose(..., out=...)`` and
``kernel.decompose_into(..., out=...)`` write the same numbers as a fresh call, exactly
(the same compiled arithmetic on the same inputs), and reject unfit buffers before writing.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from robots import two_arm_torso

from plag_ros.core.dynamics import kernel
from plag_ros.core.dynamics.engine import FIELDS, PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path


@pytest.fixture(scope='module', params=['crane_x7', 'two_arm_torso'])
def model(request):
    xml = default_urdf_path().read_text() if request.param == 'crane_x7' else two_arm_torso(5)
    return RobotModel.from_urdf(xml)


def states(model, batch, seed=0):
    rng = np.random.default_rng(seed)
    n = model.n_joints
    qd = rng.uniform(-3, 3, (*batch, n))
    qd[..., 0] = 0.0                                          # sign(0) in the friction
    return rng.uniform(-2, 2, (*batch, n)), qd, rng.uniform(-10, 10, (*batch, n))


def poisoned(arrays):
    for a in arrays.values():
        a.fill(np.nan)
    return arrays


@pytest.mark.parametrize('compiled', [True, False])
@pytest.mark.parametrize('batch', [(), (1,), (7,), (200,), (2, 3)])
def test_decompose_arrays_out_equals_fresh(model, compiled, batch):
    engine = PartialLagrangian(model, compiled=compiled)
    out = poisoned(engine.empty_arrays(batch))
    threads = torch.get_num_threads()
    for seed, workers in ((1, 1), (2, 2)):                   # 200 samples: parallel path
        q, qd, qdd = states(model, batch, seed)
        fresh = engine.decompose_arrays(q, qd, qdd)
        torch.set_num_threads(workers)
        try:
            got = engine.decompose_arrays(q, qd, qdd, out=out)
        finally:
            torch.set_num_threads(threads)
        assert got is out
        assert set(got) == set(FIELDS) == set(fresh)
        for name in FIELDS:
            assert got[name].shape == fresh[name].shape, name
            np.testing.assert_array_equal(got[name], fresh[name], err_msg=name)


@pytest.mark.parametrize('compiled', [True, False])
def test_decompose_out_equals_fresh(model, compiled):
    engine = PartialLagrangian(model, compiled=compiled)
    q, qd, qdd = states(model, (5,), 3)
    out = engine.empty((5,))
    for name in FIELDS:
        getattr(out, name).fill_(float('nan'))
    got = engine.decompose(q, qd, qdd, out=out)
    fresh = engine.decompose(q, qd, qdd)
    assert got is out
    for name in FIELDS:
        assert torch.equal(getattr(got, name), getattr(fresh, name)), name
    # a previous result is a valid out as well
    q2, qd2, qdd2 = states(model, (5,), 4)
    engine.decompose(q2, qd2, qdd2, out=fresh)
    assert torch.equal(fresh.velocity, engine.decompose(q2, qd2, qdd2).velocity)


def test_bad_out_raises_before_writing(model):
    engine = PartialLagrangian(model)
    q, qd, qdd = states(model, (4,), 5)
    good = engine.empty_arrays((4,))
    engine.decompose_arrays(q, qd, qdd, out=good)           # cached as checked
    n = model.n_joints

    def variant(name, value):
        out = {k: np.full_like(v, 7.0) for k, v in good.items()}
        if value is ...:
            del out[name]
        else:
            out[name] = value
        return out, name

    readonly = np.zeros((4, n))
    readonly.flags.writeable = False
    bad = [variant('torque', np.zeros((4, n), dtype=np.float32)),
           variant('torque', np.zeros((3, n))),
           variant('partial', np.zeros((4, model.n_bodies, n)).swapaxes(1, 2)),
           variant('friction', readonly),
           variant('velocity', None),
           variant('gravity', ...)]
    for out, wrong in bad:
        with pytest.raises(ValueError, match=f"out\\['{wrong}'\\]"):
            engine.decompose_arrays(q, qd, qdd, out=out)
        for name, a in out.items():          # nothing was written into the fit buffers
            if name != wrong:
                assert (a == 7.0).all(), name
    with pytest.raises(ValueError, match="out\\['torque'\\]"):
        engine.decompose_arrays(q[0], qd[0], qdd[0], out=good)   # (n,) sample, (4,) buffers
    with pytest.raises(ValueError, match='out.torque'):
        engine.decompose(q, qd, qdd, out=PartialLagrangian(model, dtype=torch.float32)
                         .empty((4,)))


def test_kernel_decompose_into_out_and_packed_constants(model):
    engine = PartialLagrangian(model)
    km = kernel.KernelModel.build(model, np.arange(model.n_bodies), (0.0, 0.0, -9.81))
    # the packed vectors hold exactly the named constants
    # private: the unpacking the compiled loops do; no public reader of the packed vectors
    unpacked = kernel._unpack(km.ints, km.reals)
    names = ('parent', 'axis', 'revolute', 'T_parent_joint', 'body_joint', 'mass', 'com',
             'inertia', 'path', 'path_len', 'gravity', 'damping', 'coulomb')
    for name, value in zip(names, unpacked, strict=True):
        np.testing.assert_array_equal(value, getattr(km, name), err_msg=name)
    q, qd, qdd = states(model, (9,), 6)
    out = poisoned({k: np.empty(s) for k, s in km.output_shapes(9).items()})
    assert kernel.decompose_into(km, q, qd, qdd, out=out) is out
    fresh = engine.decompose_arrays(q, qd, qdd)
    for name in FIELDS:
        np.testing.assert_array_equal(out[name], fresh[name], err_msg=name)
    with pytest.raises(ValueError, match="out\\['acceleration'\\]"):
        kernel.decompose_into(km, q, qd, qdd, out={**out, 'acceleration': out['velocity'][:1]})


@pytest.mark.parametrize('value', [np.nan, np.inf])
def test_non_finite_single_sample_writes_nothing(model, value):
    """The one-sample fast path checks finiteness inside the compiled call: a bad sample
    raises (naming the joint) and leaves a reused buffer as it was."""
    engine = PartialLagrangian(model)
    q, qd, qdd = states(model, (), 7)
    out = engine.empty_arrays()
    engine.decompose_arrays(q, qd, qdd, out=out)
    before = {k: v.copy() for k, v in out.items()}
    bad = qdd.copy()
    bad[-1] = value
    with pytest.raises(ValueError, match=f'qdd is not finite.*{model.joint_names[-1]}'):
        engine.decompose_arrays(q, qd, bad, out=out)
    for name in FIELDS:
        np.testing.assert_array_equal(out[name], before[name], err_msg=name)
