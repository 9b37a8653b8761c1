"""The numpy engine (ArrayLagrangian) against the torch engine's two forms.

ArrayLagrangian is what the nodes and the controller call without torch. Its results must be
the compiled PartialLagrangian's bit for bit (the same loop, no tensor in between), the torch
form's and autograd's to ``RTOL`` = 1e-10 relative to the table's largest magnitude (the
engine tests' tolerance: rounding), and the torch form's friction law to 1e-14 N*m (numpy's
and torch's tanh differ by an ulp or so). Every input the torch engine refuses, it refuses
with the same message.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from test_dynamics import ROBOTS, assert_close, random_states

from plag_ros.core.dynamics.arrays import FIELDS, ArrayLagrangian, arrays_of
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel


@pytest.fixture(scope='module', params=list(ROBOTS))    # the engine tests' robots
def engines(request):
    model = RobotModel.from_urdf(ROBOTS[request.param]())
    return model, ArrayLagrangian(model), PartialLagrangian(model)


def _equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b) == set(FIELDS)
    for name in FIELDS:
        assert type(a[name]) is np.ndarray and a[name].dtype == np.float64, name
        assert a[name].shape == b[name].shape, name
        assert np.array_equal(a[name], b[name]), name


@pytest.mark.parametrize('threads', [1, 2])
def test_decomposition_is_the_compiled_engines_bit_for_bit(engines, threads):
    model, _, _ = engines
    arrays, torch_engine = (ArrayLagrangian(model, threads=threads),
                            PartialLagrangian(model, threads=threads))
    q, qd, qdd = random_states(model, 200, seed=4)
    _equal(arrays.decompose_arrays(q, qd, qdd),
           torch_engine.decompose(q, qd, qdd).numpy())
    _equal(arrays.decompose_arrays(q[3], qd[3], qdd[3]),
           torch_engine.decompose(q[3], qd[3], qdd[3]).numpy())
    shaped = (q[:5, None], qd[:5, None], qdd[:5, None])           # batch (5, 1)
    got = arrays.decompose_arrays(*shaped)
    assert got['acceleration'].shape == (5, 1, model.n_joints, model.n_bodies, model.n_joints)
    _equal(got, torch_engine.decompose(*shaped).numpy())
    out = arrays.empty_arrays((200,))
    assert arrays.decompose_arrays(q, qd, qdd, out=out) is out
    _equal(out, torch_engine.decompose(q, qd, qdd).numpy())


def test_decomposition_matches_the_torch_form_and_autograd(engines):
    model, arrays, _ = engines
    reference = PartialLagrangian(model, compiled=False)
    q, qd, qdd = random_states(model, 6, seed=8)
    got = arrays.decompose_arrays(q, qd, qdd)
    for name, value in reference.decompose(q, qd, qdd).numpy().items():
        assert_close(got[name], value, what=f'torch form {name}')
    auto = reference.decompose_autograd(torch.as_tensor(q), torch.as_tensor(qd),
                                        torch.as_tensor(qdd)).numpy()
    for name in ('partial', 'acceleration', 'velocity', 'gravity'):
        assert_close(got[name], auto[name], what=f'autograd {name}')


def test_helpers_match_the_torch_form(engines):
    model, arrays, _ = engines
    reference = PartialLagrangian(model, compiled=False)
    q, qd, qdd = random_states(model, 7, seed=12)
    M, bias = arrays.mass_matrix_and_bias(q, qd)
    M_ref, bias_ref = reference.mass_matrix_and_bias(q, qd)
    assert_close(M, M_ref, what='mass matrix')
    assert_close(bias, bias_ref, what='bias')
    assert_close(arrays.mass_matrix(q[0]), reference.mass_matrix(q[0]), what='M single')
    assert_close(arrays.bias(q, qd), bias_ref, what='bias alone')
    assert_close(arrays.gravity_torque(q), reference.gravity_torque(q), what='gravity')
    assert_close(arrays.inverse_dynamics(q, qd, qdd), reference.inverse_dynamics(q, qd, qdd),
                 what='inverse dynamics')
    assert_close(arrays.link_poses(q), reference.link_poses(q), what='link poses')
    for smoothing in (0.0, 0.1):
        got = arrays.friction_torque(qd, smoothing=smoothing)
        expected = reference.friction_torque(qd, smoothing=smoothing).numpy()
        assert got.shape == expected.shape and got.dtype == np.float64
        assert np.abs(got - expected).max() <= 1e-14, smoothing
    at_rest = arrays.friction_torque(np.zeros(model.n_joints))
    assert np.array_equal(at_rest, np.zeros(model.n_joints))    # sign(0) = 0: no drag at rest


def test_columns_are_the_torch_engines(engines):
    model, arrays, torch_engine = engines
    q, qd, qdd = random_states(model, 3, seed=2)
    bodies = np.array([model.n_bodies - 1, 0], dtype=np.int64)
    flat, batch = arrays.columns_arrays(q, qd, qdd, bodies)
    assert batch == (3,)
    expected = torch_engine.columns(q, qd, qdd, bodies).numpy()
    for name in FIELDS:
        assert np.array_equal(flat[name], expected[name]), name
    assert flat['partial'].shape == (3, model.n_joints, 2)


def test_inputs_it_refuses_with_the_torch_engines_words(engines):
    model, arrays, torch_engine = engines
    n = model.n_joints
    q = np.zeros(n)
    bad = q.copy()
    bad[n - 1] = np.nan
    cases = [((q, q, bad), re.escape(f'qdd is not finite for joints {[model.joint_names[-1]]}')),
             ((q[:-1], q, q), re.escape(f'q must have shape (..., {n}), got ({n - 1},)')),
             ((np.zeros((2, n)), np.zeros((3, n)), q), 'input shapes do not broadcast')]
    for inputs, message in cases:
        for engine in (arrays, torch_engine):
            with pytest.raises(ValueError, match=message):
                engine.decompose_arrays(*inputs)
    with pytest.raises(ValueError, match=re.escape(f'q is not finite for joints '
                                                   f'{[model.joint_names[-1]]}')):
        arrays.gravity_torque(bad)
    wrong = arrays.empty_arrays()
    wrong['torque'] = np.empty(n + 1)
    with pytest.raises(ValueError, match=r"out\['torque'\] must be"):
        arrays.decompose_arrays(q, q, q, out=wrong)


def test_it_takes_lists_and_tensors_and_answers_arrays(engines):
    model, arrays, _ = engines
    q, qd, qdd = random_states(model, 1, seed=6)
    expected = arrays.decompose_arrays(q[0], qd[0], qdd[0])
    for form in (list, torch.as_tensor, lambda x: np.stack([x, x], axis=1)[:, 0]):  # strided
        got = arrays.decompose_arrays(form(q[0]), form(qd[0]), form(qdd[0]))
        _equal(got, expected)
    assert type(arrays.gravity_torque(torch.as_tensor(q[0]))) is np.ndarray


def test_a_torch_engines_arrays_are_its_own(engines):
    model, arrays, torch_engine = engines
    assert arrays_of(torch_engine) is torch_engine.arrays
    assert arrays_of(arrays) is arrays
    assert torch_engine.arrays.kernel is not None and torch_engine.threads == \
        torch_engine.arrays.threads
    float32 = PartialLagrangian(model, dtype=torch.float32)
    assert not float32.compiled and arrays_of(float32).model is model   # float64 arrays
