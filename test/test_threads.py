"""Thread choice of the compiled loop: same numbers on every path, the cap obeyed, and the
measured choice following whichever option is faster
(plag_ros.core.dynamics.kernel.ThreadChoice)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from plag_ros.core.dynamics import kernel
from plag_ros.core.dynamics.engine import PartialLagrangian
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path


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
        parallel = choice.pick(key, 1.0)
        went_parallel += parallel
        choice.record(key, parallel, parallel_s if parallel else serial_s)
    return went_parallel


def test_choice_follows_the_faster_option_and_retries_rarely():
    """Parallel twice as fast (an idle machine): after measuring both (serial first), it
    stays parallel, trying serial again in bursts of 2 after 4, 8, ... 512 calls (8 bursts
    in 600 calls). Then a busy core makes parallel 3.6x slower (measured on this machine):
    at the next call it runs serial (the mean of 4), trying parallel as rarely."""
    choice = kernel.ThreadChoice()
    parallel = _drive(choice, 600, serial_s=1.0, parallel_s=0.5)
    serial = 600 - parallel
    assert 2 <= serial <= 20, serial
    assert choice.parallel_share((10, True)) == pytest.approx(0.5)
    # The load arrives: parallel now costs 3.6.
    first = [_drive(choice, 1, serial_s=1.0, parallel_s=3.6) for _ in range(300)]
    # One parallel call at 3.6 lifts the mean of its last 4 from 0.5 to 1.15, above
    # serial's 1.0, so the choice turns serial and then tries parallel rarely.
    switched = first.index(0) if 0 in first else len(first)   # first serial call
    assert switched <= 3, f'still parallel for {switched} calls after the load arrived'
    assert sum(first[switched:]) <= 14, (switched, sum(first))   # 7 bursts of 2
    # Calls of another size are measured on their own.
    assert choice.parallel_share((20, True)) is None


def test_automatic_choice_measures_both_options_on_real_calls(model, monkeypatch):
    """The engine's default (threads=None) fills the process-wide choice: after a few
    batch calls both options have a measured figure for that size (with no minimum call
    time: a 256-sample call takes about 1.5 ms here)."""
    monkeypatch.setattr(kernel.ThreadChoice, 'MIN_PARALLEL_S', 0.0)
    q, qd, qdd = _states(model, 256)
    engine = PartialLagrangian(model)
    for _ in range(4):
        engine.decompose_arrays(q, qd, qdd)
    work = kernel.KernelModel.build(model, np.arange(model.n_bodies), model.gravity).work
    key = (int(np.log2(256 * work)), True)
    share = kernel.thread_choice.parallel_share(key)
    assert share is not None and share > 0


def test_a_small_win_does_not_go_parallel_and_stalls_count():
    """Parallel 5 % faster is not worth it (MARGIN 10 %); 40 % faster is. Parallel that is
    fast in 3 calls of 4 and stalls 10x in the fourth (a busy core's scheduler slice)
    costs 2.95x on average: the choice stays serial, though the median looks fast."""
    choice = kernel.ThreadChoice()
    assert _drive(choice, 100, serial_s=1.0, parallel_s=0.95) <= 12
    choice = kernel.ThreadChoice()
    assert _drive(choice, 100, serial_s=1.0, parallel_s=0.6) >= 85
    choice = kernel.ThreadChoice()
    went, cost = 0, 0.0
    for call in range(400):
        parallel = choice.pick((10, True), 1.0)
        seconds = (10.0 if call % 4 == 3 else 0.6) if parallel else 1.0
        choice.record((10, True), parallel, seconds)
        went, cost = went + parallel, cost + seconds
    assert went <= 30, went
    assert cost / 400 < 1.2, cost / 400        # within 20 % of one thread throughout


def test_first_large_batch_measures_both_on_slices(model, monkeypatch):
    """A class's first batch of 16 x 64 samples or more runs serial on one slice and
    parallel on the next before the rest: one call fills both figures, with the same bits
    as one thread."""
    fresh = kernel.ThreadChoice()
    monkeypatch.setattr(kernel, 'thread_choice', fresh)
    monkeypatch.setattr(kernel.ThreadChoice, 'MIN_PARALLEL_S', 0.0)
    q, qd, qdd = _states(model, 2048)
    automatic = PartialLagrangian(model, threads=None).decompose_arrays(q, qd, qdd)
    work = kernel.KernelModel.build(model, np.arange(model.n_bodies), model.gravity).work
    assert fresh.parallel_share((int(np.log2(2048 * work)), True)) is not None
    for name, value in PartialLagrangian(model, threads=1).decompose_arrays(
            q, qd, qdd).items():
        assert np.array_equal(automatic[name], value), name
    # a small batch of a new class is measured over calls, serial first
    small = PartialLagrangian(model, threads=None)
    small.decompose_arrays(q[:100], qd[:100], qdd[:100])
    key = (int(np.log2(100 * work)), True)
    assert fresh.unmeasured(key) and fresh._classes[key].serial and \
        not fresh._classes[key].parallel


def test_calls_under_the_minimum_time_stay_on_one_thread(model, monkeypatch):
    """A call expected to take under 5 ms on one thread never goes parallel, however fast
    parallel was measured: a scheduler slice lost to a busy core costs more than it can
    gain. Longer calls of the same figures do."""
    choice = kernel.ThreadChoice()
    key = (10, True)
    for units, expected in ((10.0, 0), (1000.0, 1)):
        parallel = [choice.pick(key, units) for _ in range(1)]
        choice.record(key, parallel[0], 1e-4 if not parallel[0] else 5e-5)
        went = 0
        for _ in range(50):
            p = choice.pick(key, units)
            went += p
            choice.record(key, p, 5e-5 if p else 1e-4)   # parallel twice as fast
        assert (went > 40) == bool(expected), (units, went)
    # the engine, with a minimum of 1 s: a first large batch (probed on slices) and the
    # calls after it stay on one thread
    fresh = kernel.ThreadChoice()
    monkeypatch.setattr(kernel, 'thread_choice', fresh)
    monkeypatch.setattr(kernel.ThreadChoice, 'MIN_PARALLEL_S', 1.0)
    monkeypatch.setattr(kernel, '_batch_parallel_call', None)     # would raise if called
    q, qd, qdd = _states(model, 1024)
    engine = PartialLagrangian(model, threads=None)
    for _ in range(3):
        engine.decompose_arrays(q, qd, qdd)
    figures = next(iter(fresh._classes.values()))
    assert figures.serial and not figures.parallel
