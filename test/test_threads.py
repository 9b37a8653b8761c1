"""Thread choice of the compiled loop: same numbers on every path, the cap obeyed, and the
measured choice following whichever option is faster (plag_ros.core.kernel.ThreadChoice)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plag_ros.core import kernel
from plag_ros.core.dynamics import PartialLagrangian
from plag_ros.core.model import RobotModel, default_urdf_path


@pytest.fixture(scope='module')
def model() -> RobotModel:
    return RobotModel.from_urdf(default_urdf_path())


def _states(model: RobotModel, N: int):
    rng = np.random.default_rng(31)
    return tuple(rng.uniform(-1.0, 1.0, (N, model.n_joints)) for _ in range(3))


def test_serial_parallel_and_automatic_give_the_same_bits(model):
    """Each sample is computed by the same loop whichever thread runs it: equal bit for bit,
    on the tables and on M and the bias."""
    q, qd, qdd = _states(model, 300)
    results = {t: PartialLagrangian(model, threads=t).decompose_arrays(q, qd, qdd)
               for t in (1, 2, None)}
    for t in (2, None):
        for name, value in results[1].items():
            assert np.array_equal(results[t][name], value), (t, name)
    for t in (2, None):
        M, bias = PartialLagrangian(model, threads=t).mass_matrix_and_bias(q, qd)
        M1, bias1 = PartialLagrangian(model, threads=1).mass_matrix_and_bias(q, qd)
        assert torch.equal(M, M1) and torch.equal(bias, bias1)


def test_one_thread_never_enters_the_parallel_loop(model, monkeypatch):
    def refuse(*args):
        raise AssertionError('parallel loop entered')

    # private: whether the parallel loop runs is seen only by replacing its entry point
    monkeypatch.setattr(kernel, '_batch_parallel_call', refuse)
    q, qd, qdd = _states(model, 1000)
    PartialLagrangian(model, threads=1).decompose_arrays(q, qd, qdd)
    PartialLagrangian(model, threads=None).decompose_arrays(q[:10], qd[:10], qdd[:10])
    with pytest.raises(AssertionError, match='parallel loop entered'):
        PartialLagrangian(model, threads=2).decompose_arrays(q, qd, qdd)


@pytest.mark.parametrize('bad', [0, -1, 1.5, True, '2'])
def test_bad_thread_settings_are_refused(model, bad):
    with pytest.raises(ValueError, match='threads must be None'):
        PartialLagrangian(model, threads=bad)


def _drive(choice: kernel.ThreadChoice, calls: int, serial_s: float, parallel_s: float,
           key=(10, True)) -> int:
    """Run ``calls`` picks with fixed timings; returns how many went parallel."""
    went_parallel = 0
    for _ in range(calls):
        parallel = choice.pick(key)
        went_parallel += parallel
        choice.record(key, parallel, parallel_s if parallel else serial_s)
    return went_parallel


def test_choice_follows_the_faster_option_and_retries_rarely():
    """Parallel twice as fast (an idle machine): after measuring both, it stays parallel,
    trying serial again after 2, 4, ... 256 calls (9 retries in 600 calls). Then a busy
    core makes parallel 3.6x slower (measured on this machine): within a few calls it
    runs serial, trying parallel as rarely."""
    choice = kernel.ThreadChoice()
    parallel = _drive(choice, 600, serial_s=1.0, parallel_s=0.5)
    serial = 600 - parallel
    assert 2 <= serial <= 12, serial
    assert choice.parallel_share((10, True)) == pytest.approx(0.5)
    # The load arrives: parallel now costs 3.6.
    first = [_drive(choice, 1, serial_s=1.0, parallel_s=3.6) for _ in range(300)]
    # One parallel call at 3.6 lifts its average (gain 0.3) from 0.5 to 1.43, above serial's
    # 1.0, so the choice turns serial within a few calls and then tries parallel rarely.
    switched = first.index(0) if 0 in first else len(first)   # first serial call
    assert switched <= 3, f'still parallel for {switched} calls after the load arrived'
    assert sum(first[switched:]) <= 10, (switched, sum(first))
    # Calls of another size are measured on their own.
    assert choice.parallel_share((20, True)) is None


def test_automatic_choice_measures_both_options_on_real_calls(model):
    """The engine's default (threads=None) fills the process-wide choice: after a few
    batch calls both options have a measured figure for that size."""
    q, qd, qdd = _states(model, 256)
    engine = PartialLagrangian(model)
    for _ in range(4):
        engine.decompose_arrays(q, qd, qdd)
    work = kernel.KernelModel.build(model, np.arange(model.n_bodies), model.gravity).work
    key = (int(np.log2(256 * work)), True)
    share = kernel.thread_choice.parallel_share(key)
    assert share is not None and share > 0
