"""The offline analysis of one bag and the files it writes (``plag-ros analyze BAG -o OUT``).

The bag's joint states are read once (:func:`plag_ros.io.bag.read_joint_states`), then
:mod:`plag_ros.core.decomposition.analysis` estimates and decomposes them, and
:func:`write_outputs` writes the
products into ``OUT``:

* ``OUT/bag/``: the output bag that mirrors the live node (:mod:`plag_ros.ros.output_bag`);
* ``OUT/analysis.npz``: every array with its names (compressed, :mod:`plag_ros.io.npz`);
* ``OUT/torques.csv``: joint torques and the per-body torques (non-zero partial torques);
* ``OUT/*.png``: the figures of Gunji, Kusaka and Tanaka 2025 [MPF] (fig. 6-9, 11-14): torque
  with its acceleration / velocity / gravity parts per joint, motion propagation torques by
  source joint, and the partial torque table as a heat map over time;
* ``OUT/summary.txt``: largest propagation paths and RMS per component.

[MPF] H. Gunji, T. Kusaka, T. Tanaka, "A Motion Propagation Force Analysis of Multi-DoF
Systems Using the Partial Lagrangian Method", Robotics 2025, 14(5), 54,
doi:10.3390/robotics14050054.
"""
from __future__ import annotations

import dataclasses
import math
import multiprocessing
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np

from plag_ros.core.decomposition.analysis import (
    ARRAY_NAMES,
    INPUT_REASONS,
    Analysis,
    AnalysisOptions,
    decompose_states,
    estimate_recording,
    own_source_propagation,
    propagation_paths,
    structural_pairs,
)
from plag_ros.core.dynamics.compact import CompactLayout
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.estimation.filters import EstimatorConfig
from plag_ros.core.estimation.friction import FRICTION_STATES, SLIDING, UNRESOLVED
from plag_ros.io.bag import (
    BagError,
    JointStates,
    RecoveryReport,
    StampSource,
    prepare_output,
    read_joint_states,
)
from plag_ros.io.npz import save_npz
from plag_ros.ros.output_bag import write_bag

__all__ = ['BagAnalysis', 'analyze_bag', 'decomposition_table', 'plot_joint_torques',
           'refuse_output_in_bag', 'summary_row', 'summary_text', 'write_outputs']

_MAX_PLOT_POINTS = 2000
_FIGURES_PROCESS_SAMPLES = 50_000
"""From this many samples (about 4 min at 200 Hz) the csv and figures are written by a
child process: below it, starting one costs more than it saves."""


def _save_csv(path: Path, model: RobotModel, t_ns: np.ndarray, torque: np.ndarray,
              partial: np.ndarray) -> None:
    """Joint torques (M, n) and per-body torques (the non-zero entries of partial
    (M, n, B)), one row per stamp of t_ns (M,)."""
    pairs = structural_pairs(model)
    header = ['t_ns', 't_s'] + [f'torque[{j}]' for j in model.joint_names] + \
        [f'partial[{model.joint_names[k]}][{model.body_names[i]}]' for k, i in pairs]
    t0 = int(t_ns[0]) if len(t_ns) else 0
    ks, is_ = (np.array([p[0] for p in pairs], dtype=np.int64),
               np.array([p[1] for p in pairs], dtype=np.int64))
    values = np.concatenate([((t_ns - t0) * 1e-9)[:, None], torque, partial[:, ks, is_]],
                            axis=1)
    row_fmt = '%d,' + ','.join(['%.9g'] * values.shape[1])
    with open(path, 'w') as f:
        f.write(','.join(header) + '\n')
        for a in range(0, len(values), 8192):
            rows = zip(t_ns[a:a + 8192].tolist(), values[a:a + 8192].tolist())
            f.write('\n'.join(row_fmt % (t, *v) for t, v in rows))
            f.write('\n')


def _plot_rows(m: int) -> np.ndarray:
    return np.arange(0, m, max(1, math.ceil(m / _MAX_PLOT_POINTS)))


def _plotted(analysis: Analysis) -> Analysis:
    """The rows the figures draw (at most _MAX_PLOT_POINTS): all a plot needs."""
    rows = _plot_rows(len(analysis.t_ns))
    state = None if analysis.friction_state is None else analysis.friction_state[rows]
    return dataclasses.replace(analysis, friction_state=state,
                               **{name: getattr(analysis, name)[rows]
                                  for name in ('t_ns', 'index', *ARRAY_NAMES)})


def _write_csv_and_plots(out: Path, model: RobotModel, products: frozenset[str],
                         t_ns: np.ndarray, torque: np.ndarray, partial: np.ndarray,
                         plotted: Analysis) -> dict[str, float]:
    """The csv and the figures; returns seconds per product. Runs in a child process on
    long recordings (both are GIL-bound Python), so it takes only the arrays it needs."""
    timings = {}
    if 'csv' in products:
        t0 = time.perf_counter()
        _save_csv(out / 'torques.csv', model, t_ns, torque, partial)
        timings['write_csv'] = time.perf_counter() - t0
    if 'plots' in products:
        t0 = time.perf_counter()
        _save_plots(out, model, plotted)
        timings['write_plots'] = time.perf_counter() - t0
    return timings


def component_series(analysis: Analysis) -> dict[str, np.ndarray]:
    """Joint torque and its parts, each (M, n) [N*m or N], summed over bodies and sources."""
    return {'torque': analysis.torque,
            'acceleration': analysis.acceleration.sum(axis=(-1, -2)),
            'velocity': analysis.velocity.sum(axis=(-1, -2)),
            'gravity': analysis.gravity.sum(axis=-1),
            'friction': analysis.friction}


def plot_joint_torques(path: Path, model: RobotModel, analysis: Analysis, *,
                       title: str = 'Joint torque and its acceleration, velocity and gravity '
                                    'parts') -> Path:
    """One panel per joint: torque with its acceleration, velocity, gravity and friction
    parts over time ([MPF] fig. 6 and 11), decimated to <= 2000 points; returns path."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    rows = _plot_rows(len(analysis.t_ns))
    t = (analysis.t_ns[rows] - (analysis.t_ns[0] if len(rows) else 0)) * 1e-9
    n = model.n_joints
    short = [name.removeprefix(f'{model.name}_') for name in model.joint_names]
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.8 * n), sharex=True, squeeze=False)
    parts = {name: values[rows] for name, values in component_series(analysis).items()}
    styles = {'torque': ('k', '-'), 'acceleration': ('tab:blue', '-'),
              'velocity': ('tab:orange', '-'), 'gravity': ('tab:green', '-'),
              'friction': ('tab:purple', ':')}
    # Friction of a joint at rest with no effort of its own is unknown within +-f: a gap in
    # the line over a shaded band, not a value (plag_ros.core.estimation.friction).
    unresolved = (np.zeros(parts['friction'].shape, dtype=bool)
                  if analysis.friction_state is None
                  else analysis.friction_state[rows] == UNRESOLVED)
    parts['friction'] = np.where(unresolved, np.nan, parts['friction'])
    for k, ax in enumerate(axes[:, 0]):
        for name, values in parts.items():
            colour, style = styles[name]
            ax.plot(t, values[:, k], color=colour, linestyle=style, linewidth=0.8,
                    label=name)
        if unresolved[:, k].any():
            # tint where the value is unknown (within +-f), keeping the lines' scale
            f = float(model.friction[k])
            limits = ax.get_ylim()
            ax.fill_between(t, -f, f, where=unresolved[:, k], color='tab:purple', alpha=0.12,
                            linewidth=0, label='friction at rest, unresolved (|.| <= f)')
            ax.set_ylim(limits)
        ax.set_ylabel(f'j{k + 1} [N m]', fontsize=7)
        ax.set_title(short[k], fontsize=7, loc='left', pad=2)
        ax.grid(alpha=0.3)
    handles: dict[str, object] = {}
    for ax in axes[:, 0]:     # the unresolved band may be absent from the first panel
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    axes[0, 0].legend(handles.values(), handles.keys(), loc='upper right', fontsize=7,
                      ncol=len(handles))
    axes[-1, 0].set_xlabel('time [s]')
    fig.suptitle(title)
    # Fixed margins: tight_layout costs more than drawing the lines.
    fig.subplots_adjust(left=0.13, right=0.98, top=0.95, bottom=0.05, hspace=0.12)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _save_plots(out: Path, model: RobotModel, analysis: Analysis) -> list[Path]:
    """Figures in the style of [MPF] (fig. 6-9, 11-14), decimated to <= 2000 points."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    rows = _plot_rows(len(analysis.t_ns))
    t = (analysis.t_ns[rows] - (analysis.t_ns[0] if len(rows) else 0)) * 1e-9
    n = model.n_joints
    short = [name.removeprefix(f'{model.name}_') for name in model.joint_names]
    bodies = [name.removeprefix(f'{model.name}_') for name in model.body_names]
    paths = []

    # 1. Joint torque and its acceleration / velocity / gravity parts (fig. 6 and 11).
    paths.append(plot_joint_torques(out / 'joint_torques.png', model, analysis))

    # 2. Motion propagation torques by source joint (fig. 8-9, 13-14).
    fig, axes = plt.subplots(n, 2, figsize=(12, 1.8 * n), sharex=True, squeeze=False)
    colours = plt.cm.tab10(np.linspace(0, 1, 10))
    for col, part in enumerate(('acceleration', 'velocity')):
        by_source = getattr(analysis, part)[rows].sum(axis=2)                  # (m, n, n)
        for k in range(n):
            ax = axes[k, col]
            for s in range(n):
                if np.any(by_source[:, k, s]):
                    ax.plot(t, by_source[:, k, s], color=colours[s % 10], linewidth=0.8,
                            label=f'from j{s + 1} {short[s]}')
            ax.set_ylabel(f'j{k + 1} [N m]', fontsize=7)
            ax.grid(alpha=0.3)
        axes[0, col].set_title(f'{part} propagation torque at joint j by source joint')
        axes[-1, col].set_xlabel('time [s]')
    handles, labels = axes[-1, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc='lower center', ncol=min(n, 5), fontsize=7)
    fig.subplots_adjust(left=0.1, right=0.98, top=0.96, bottom=0.09, hspace=0.12,
                        wspace=0.25)
    paths.append(out / 'propagation.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    # 3. Partial torque table over time as a heat map (rows: joint k x body i).
    pairs = structural_pairs(model)
    table = np.stack([analysis.partial[rows, k, i] for k, i in pairs], axis=0) \
        if len(rows) else np.zeros((len(pairs), 1))
    limit = float(np.max(np.abs(table), initial=0.0)) or 1.0
    fig, ax = plt.subplots(figsize=(12, 0.18 * len(pairs) + 2))
    extent = (float(t[0]) if len(t) else 0.0, float(t[-1]) if len(t) else 1.0,
              len(pairs) - 0.5, -0.5)
    image = ax.imshow(table, aspect='auto', cmap='RdBu_r', vmin=-limit, vmax=limit,
                      extent=extent, interpolation='nearest')
    ax.set_yticks(range(len(pairs)))
    ax.set_yticklabels([f'{short[k]} <- {bodies[i]}' for k, i in pairs], fontsize=6)
    ax.set_xlabel('time [s]')
    ax.set_title('Partial torque table partial[k, i]: torque at joint k caused by body i')
    fig.colorbar(image, ax=ax, label='[N m]')
    fig.subplots_adjust(left=0.3, right=0.98, top=0.95, bottom=0.08)
    paths.append(out / 'partial_heatmap.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)

    # 4. tau^p_1j(theta_j): link j's load on the base joint from joint j's own motion
    #    ([MPF] fig. 8-9 and 13-14), for each joint downstream of the base.
    downstream = [j for j in range(1, n) if 0 in model.root_path(j)]
    fig, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for ax, part in zip(axes, ('velocity', 'acceleration'), strict=True):
        own = own_source_propagation(model, getattr(analysis, part)[rows], 0)
        for j in downstream:
            ax.plot(t, own[:, j], color=colours[j % 10], linewidth=0.8,
                    label=f'$\\tau^p_{{1,{j + 1}}}$ ({short[j]})')
        ax.set_ylabel('[N m]')
        ax.set_title(f'{part} propagation into j1 ({short[0]}) by link j from its own joint j',
                     fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(loc='upper right', fontsize=7, ncol=2)
    axes[-1].set_xlabel('time [s]')
    fig.subplots_adjust(left=0.08, right=0.98, top=0.95, bottom=0.08, hspace=0.2)
    paths.append(out / 'own_source_propagation.png')
    fig.savefig(paths[-1], dpi=90)
    plt.close(fig)
    return paths


def _rms(x: np.ndarray) -> np.ndarray:
    return np.sqrt(np.mean(x ** 2, axis=0)) if len(x) else np.zeros(x.shape[1:])


def _rejected_lines(analysis: Analysis, js: JointStates) -> list[str]:
    """Implausible input samples: how many by reason and where the first ones are."""
    rejected = {reason: count for reason, count in analysis.rejected().items() if count}
    if not rejected or analysis.input_codes is None:
        return ['input: every sample within the plausibility limits']
    rows = np.flatnonzero(analysis.input_codes)
    t0 = int(js.t_ns[0])
    first = ', '.join(f'{(int(js.t_ns[r]) - t0) * 1e-9:.3f} s' for r in rows[:5])
    return [f'input: {len(rows)} implausible samples left out of the estimate '
            f'({", ".join(f"{k} {v}" for k, v in rejected.items())}); first at {first}'
            + (' ...' if len(rows) > 5 else '')]


def summary_text(model: RobotModel, analysis: Analysis, js: JointStates, *, mode: str,
                 source: str) -> str:
    """Short human-readable summary: input, RMS per component, largest paths."""
    m = len(analysis.t_ns)
    duration = (js.t_ns[-1] - js.t_ns[0]) * 1e-9 if len(js.t_ns) > 1 else 0.0
    lines = [
        f'plag-ros analyze: {source}',
        f'topic {js.topic}: {len(js.t_ns)} samples over {duration:.3f} s '
        f'({(len(js.t_ns) - 1) / duration if duration else 0.0:.1f} Hz); '
        f'{m} decomposed ({mode})',
        *([] if js.recovery is None else [f'recovered: {js.recovery.summary()}']),
        *_rejected_lines(analysis, js),
        '',
        *decomposition_table(model, analysis),
    ]
    return '\n'.join(lines) + '\n'


def summary_row(model: RobotModel, analysis: Analysis, js: JointStates, *,
                top_paths: int = 10) -> dict[str, object]:
    """The figures of :func:`summary_text` as one flat row (the many-bag fleet report).

    Keys: ``samples``, ``duration_s``, ``rate_hz``, ``decomposed``, ``rejected`` and
    ``rejected_<reason>`` per plausibility reason, ``recovered`` and
    ``recovered_with_loss``, ``rms_<component>[<joint>]`` [N*m or N] for torque,
    acceleration, velocity, gravity and friction, and the largest propagation paths as
    ``path<i>_rms`` [N*m], ``path<i>_part``, ``path<i>_source``, ``path<i>_joint``
    (i = 1 .. ``top_paths``). Unrounded: the summary prints the same values rounded.
    """
    duration = (js.t_ns[-1] - js.t_ns[0]) * 1e-9 if len(js.t_ns) > 1 else 0.0
    rejected = analysis.rejected()
    row: dict[str, object] = {
        'samples': len(js.t_ns), 'duration_s': float(duration),
        'rate_hz': float((len(js.t_ns) - 1) / duration) if duration else 0.0,
        'decomposed': len(analysis.t_ns), 'rejected': sum(rejected.values()),
        **{f'rejected_{reason}': count for reason, count in rejected.items()},
        'recovered': js.recovery is not None,
        'recovered_with_loss': js.recovery is not None and js.recovery.lossy,
    }
    for component, values in component_series(analysis).items():
        for name, value in zip(model.joint_names, _rms(values)):
            row[f'rms_{component}[{name}]'] = float(value)
    paths = propagation_paths(analysis, top=top_paths)
    for i in range(top_paths):
        value, part, k, source = paths[i] if i < len(paths) else (math.nan, '', -1, -1)
        row.update({f'path{i + 1}_rms': value, f'path{i + 1}_part': part,
                    f'path{i + 1}_source': model.joint_names[source] if source >= 0 else '',
                    f'path{i + 1}_joint': model.joint_names[k] if k >= 0 else ''})
    return row


def decomposition_table(model: RobotModel, analysis: Analysis) -> list[str]:
    """RMS of every component per joint, then the largest propagation paths and the
    largest partial torques that other bodies cause (lines of text)."""
    lines = [
        'RMS per component [N m]; at rest: % of samples inside the friction rest band '
        '(stick reaction, or 0 when unresolved):',
        f'  {"joint":<46}{"torque":>10}{"accel":>10}{"velocity":>10}{"gravity":>10}'
        f'{"friction":>10}{"at rest":>9}',
    ]
    rms = {name: _rms(values) for name, values in component_series(analysis).items()}
    state = analysis.friction_state
    for k, name in enumerate(model.joint_names):
        rest = '-' if state is None or not len(state) else \
            f'{100.0 * np.mean(state[:, k] != SLIDING):.0f} %'
        lines.append(f'  {name:<46}' + ''.join(f'{rms[c][k]:>10.4f}' for c in rms)
                     + f'{rest:>9}')
    lines += ['', 'Largest motion propagation paths (source joint -> joint, RMS [N m]):']
    for value, part, k, s in propagation_paths(analysis):
        lines.append(f'  {value:10.4f}  {part:<12} {model.joint_names[s]} -> '
                     f'{model.joint_names[k]}')
    partial_rms = _rms(analysis.partial)
    lines += ['', 'Largest partial torques from other bodies (body -> joint, RMS [N m]):']
    ranked = sorted(((float(partial_rms[k, i]), k, i) for k, i in structural_pairs(model)
                     if int(model.body_joint[i]) != k), reverse=True)[:10]
    for value, k, i in ranked:
        lines.append(f'  {value:10.4f}  {model.body_names[i]} -> {model.joint_names[k]}')
    return lines


def _in_child_process(fn: Callable, *args):
    """``fn(*args)`` in a forked child; returns its result, re-raises its error.

    Forked, not spawned, and started as a plain Process (a process pool would pickle the
    arguments to its worker): the child reads the parent's arrays in place, only the
    small result or the error comes back through a pipe, and the user's ``__main__`` is
    not re-imported, so scripts without a main guard work. The child runs only numpy,
    matplotlib and file writes, none of the parent's thread pools.

    Raises:
        RuntimeError: the child died without an answer (e.g. killed).
    """
    context = multiprocessing.get_context('fork')
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        try:
            send.send((True, fn(*args)))
        except BaseException as err:  # noqa: BLE001 - handed to the parent to re-raise
            send.send((False, err))

    with warnings.catch_warnings():
        # Python 3.12+ warns on fork in a process with threads (the idle numba/torch
        # pools and the writer threads); the child touches none of their locks
        warnings.simplefilter('ignore', DeprecationWarning)
        process = context.Process(target=child, name='plag-ros-figures', daemon=True)
        process.start()
    send.close()
    try:
        ok, value = receive.recv()
    except EOFError:
        process.join()
        raise RuntimeError(f'the csv/plot process ended with exit code {process.exitcode} '
                           'and no result') from None
    finally:
        receive.close()
    process.join()
    if not ok:
        raise value
    return value


def write_outputs(out: Path, model: RobotModel, analysis: Analysis, js: JointStates, *,
                  source: Path | None, options: AnalysisOptions,
                  timings: dict[str, float] | None = None) -> dict[str, Path]:
    """Write the products selected in ``options.products`` into the directory ``out``."""
    timings = {} if timings is None else timings
    mode = 'causal' if options.causal else 'zero-phase'
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}

    def step(name: str, fn: Callable[[], Path | list[Path]]) -> None:
        t0 = time.perf_counter()
        result = fn()
        timings[f'write_{name}'] = time.perf_counter() - t0
        written[name] = result if isinstance(result, Path) else out

    def npz() -> Path:
        arrays = {name: getattr(analysis, name) for name in ARRAY_NAMES}
        if options.npz_layout == 'compact':
            layout = CompactLayout.from_model(model)
            arrays = {**layout.pack(arrays), **layout.index_arrays()}
        arrays.update(t_ns=analysis.t_ns, index=analysis.index,
                      input_t_ns=js.t_ns, input_q=js.q,
                      joint_names=np.array(model.joint_names),
                      body_names=np.array(model.body_names),
                      source_names=np.array(model.joint_names))
        if js.qd is not None:
            arrays['input_qd'] = js.qd
        if js.effort is not None:
            arrays['input_effort'] = js.effort
        if analysis.friction_state is not None:
            arrays['friction_state'] = analysis.friction_state
            arrays['friction_states'] = np.array(FRICTION_STATES)
        if analysis.input_codes is not None:
            arrays['input_rejected'] = analysis.input_codes
            arrays['rejection_reasons'] = np.array(INPUT_REASONS)
        save_npz(out / 'analysis.npz', arrays, options.npz_level)
        return out / 'analysis.npz'

    # The bag and the npz are written in threads (deflate, lz4, the big numpy copies and
    # file writes release the GIL) while the csv and the figures, GIL-bound Python, are
    # written by a child process on long recordings: on two cores the products overlap
    # instead of queueing for one interpreter (bench/bench_bag.py).
    errors: list[BaseException] = []
    workers = []
    for name, fn in (('bag', lambda: write_bag(out / 'bag', model, analysis, js, source,
                                               options, mode=mode)),
                     ('npz', npz)):
        if name in options.products:
            def task(name=name, fn=fn) -> None:
                try:
                    step(name, fn)
                except BaseException as err:  # noqa: BLE001 - re-raised in the caller
                    errors.append(err)
            workers.append(threading.Thread(target=task, name=name, daemon=True))
            workers[-1].start()
    figures = options.products & {'csv', 'plots'}
    child = options.figures_process
    if child is None:
        child = len(analysis.t_ns) >= _FIGURES_PROCESS_SAMPLES
    try:
        arguments = (out, model, figures, analysis.t_ns, analysis.torque, analysis.partial,
                     _plotted(analysis))
        if figures and child:
            timings.update(_in_child_process(_write_csv_and_plots, *arguments))
        elif figures:
            timings.update(_write_csv_and_plots(*arguments))
        written.update({name: out / 'torques.csv' if name == 'csv' else out
                        for name in figures})
        if 'summary' in options.products:
            text = summary_text(model, analysis, js, mode=mode, source=str(source))
            (out / 'summary.txt').write_text(text)
            written['summary'] = out / 'summary.txt'
    finally:
        t0 = time.perf_counter()
        for worker in workers:
            worker.join()
        timings['wait_workers'] = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return written


class BagAnalysis(NamedTuple):
    """What :func:`analyze_bag` made: the analysis, the products written (name -> path) and,
    for a salvaged bag, its recovery report (None for a bag read whole)."""

    analysis: Analysis
    written: dict[str, Path]
    recovery: RecoveryReport | None


def refuse_output_in_bag(out: Path, bag: Path) -> None:
    """Raise BagError when the output directory ``out`` is the bag or lies inside it."""
    if out.resolve() == bag.resolve() or bag.resolve() in out.resolve().parents:
        raise BagError(f'output {out} would overwrite the input bag {bag}')


def analyze_bag(bag: str | Path, out: str | Path, *, model: RobotModel | None = None,
                topic: str | None = None, stamp: StampSource = 'header', force: bool = False,
                options: AnalysisOptions | None = None,
                timings: dict[str, float] | None = None,
                row: dict[str, object] | None = None) -> BagAnalysis:
    """Read, estimate, decompose and write every product of one bag.

    A bag cut short by a crash is salvaged (:func:`plag_ros.io.bag.open_bag`): what was
    recovered and where the cut was are in the result's ``recovery`` and in summary.txt.

    Args:
        bag: input bag (directory or single .mcap/.db3 file).
        out: output directory; must not exist unless ``force``.
        model: the robot (default: the bundled CRANE-X7).
        topic: JointState topic (default ``/joint_states`` or the only one).
        stamp: 'header' or 'receive'.
        force: replace ``out`` if it exists.
        options: analysis options.
        timings: filled with seconds per stage (read, estimate, decompose, write: the
            wall time of all products; write_<product> each, overlapping).
        row: filled with :func:`summary_row` (the many-bag report's row).

    Raises:
        BagError: see :func:`plag_ros.io.bag.read_joint_states`; OutputExistsError when
            ``out`` exists without ``force``.
    """
    options = options or AnalysisOptions()
    timings = {} if timings is None else timings
    out = Path(out)
    bag = Path(bag)
    refuse_output_in_bag(out, bag)
    if out.exists() and not force:
        prepare_output(out, force=False)
    model = model or RobotModel.from_urdf(default_urdf_path())
    t0 = time.perf_counter()
    js = read_joint_states(bag, model, topic=topic, stamp=stamp)
    timings['read'] = time.perf_counter() - t0
    _check_rate(js, options.estimator)
    t0 = time.perf_counter()
    index, q, qd, qdd, codes = estimate_recording(model, js.t_ns, js.q, qd_measured=js.qd,
                                                  options=options)
    timings['estimate'] = time.perf_counter() - t0
    t0 = time.perf_counter()
    analysis = decompose_states(model, js.t_ns, index, q, qd, qdd, chunk=options.chunk,
                                progress=options.progress, input_codes=codes,
                                estimator=options.estimator, effort=js.effort,
                                threads=options.threads)
    timings['decompose'] = time.perf_counter() - t0
    t0 = time.perf_counter()
    prepare_output(out, force=force)
    written = write_outputs(out, model, analysis, js, source=bag, options=options,
                            timings=timings)
    timings['write'] = time.perf_counter() - t0
    if row is not None:
        row.update(summary_row(model, analysis, js))
    return BagAnalysis(analysis, written, js.recovery)


def _check_rate(js: JointStates, config: EstimatorConfig) -> None:
    """Warn when the bag's median rate is far from the rate the filter is designed for."""
    if len(js.t_ns) < 2:
        return
    rate = 1e9 / float(np.median(np.diff(js.t_ns)))
    if abs(rate - config.rate_hz) > 0.1 * config.rate_hz:
        warnings.warn(f'{js.topic} runs at {rate:.1f} Hz but the estimator is designed for '
                      f'{config.rate_hz:g} Hz; pass --rate-hz {rate:.0f}', stacklevel=3)


# --- command line -------------------------------------------------------------------------
