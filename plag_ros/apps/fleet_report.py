"""The fleet report of a many-bag ``plag-ros analyze``: one row per bag, and figures that
compare the bags.

Files written into ``OUT``:

* ``fleet.csv`` and ``fleet.parquet``: one row per bag, in the order the bags were given:
  ``bag``, ``source``, ``status`` ('analysed', 'salvaged', 'skipped' keeps the status of the
  run that made the outputs, 'failed'), ``exit_code``, ``error``, then the figures of the
  bag's own ``summary.txt`` unrounded (:func:`plag_ros.apps.bag_analysis.summary_row`): duration,
  rate, samples kept and rejected by reason, the recovered-with-loss flag, the RMS of each
  torque component per joint and the largest propagation paths. Empty for a failed bag.
* ``fleet_rms.png``: per component, a heat map of the per-joint RMS, bags by joints.
* ``fleet_paths.png``: the propagation paths that are among the largest in any bag, their
  RMS in every bag (blank where a path is not among that bag's largest).
"""
from __future__ import annotations

import csv
import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from plag_ros.core.dynamics.model import RobotModel

__all__ = ['COMPONENTS', 'BagOutcome', 'report_rows', 'write_fleet_report']

COMPONENTS = ('torque', 'acceleration', 'velocity', 'gravity', 'friction')
_IDENTITY = ('bag', 'source', 'status', 'exit_code', 'error')


@dataclasses.dataclass
class BagOutcome:
    """What became of one bag.

    Attributes:
        name, bag: output name and input path.
        status: 'analysed', 'salvaged' (cut short, analysed up to the cut), 'skipped' (a
            rerun found its outputs complete and matching) or 'failed'.
        exit_code: this bag's single-run exit status (0, 3 or 2).
        row: the fleet report row (:func:`plag_ros.apps.bag_analysis.summary_row` and the
            columns above); for a failed bag only its identity and the error.
        seconds: wall time of the task on its worker [s].
    """

    name: str
    bag: Path
    status: str
    exit_code: int
    row: dict[str, Any]
    seconds: float = 0.0
    error: str = ''


def report_rows(outcomes: Sequence[BagOutcome]) -> tuple[list[str], list[dict[str, Any]]]:
    """The report's columns (identity first, then the figures in first-seen order) and its
    rows, one per outcome, a missing figure as None."""
    columns = list(_IDENTITY)
    for outcome in outcomes:
        columns += [key for key in outcome.row if key not in columns]
    rows = []
    for outcome in outcomes:
        row = {key: outcome.row.get(key) for key in columns}
        if outcome.status == 'skipped':
            row['status'] = f"skipped ({outcome.row.get('status', '')})"
        rows.append(row)
    return columns, rows


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, 'w', newline='') as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            # repr of a float is the shortest text that reads back to the same double
            writer.writerow(['' if row[c] is None else repr(row[c]) if isinstance(row[c], float)
                             else row[c] for c in columns])


def _write_parquet(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def column(name: str) -> pa.Array:
        values = [row[name] for row in rows]
        kinds = {type(v) for v in values if v is not None}
        if kinds <= {float, int} and float in kinds:
            return pa.array([None if v is None else float(v) for v in values], pa.float64())
        return pa.array(values)

    pq.write_table(pa.table({name: column(name) for name in columns}), path)


def _heat_map(ax, values: np.ndarray, rows: list[str], cols: list[str], title: str,
              fig) -> None:
    image = ax.imshow(np.ma.masked_invalid(values), aspect='auto', cmap='viridis')
    ax.set_title(title, fontsize=9)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_xticks(range(len(cols)), cols, rotation=60, ha='right', fontsize=7)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label='RMS [N m]')


def _plot(out: Path, model: RobotModel, rows: list[dict[str, Any]]) -> list[Path]:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    good = [r for r in rows if r.get('samples') is not None]
    if not good:
        return []
    bags = [str(r['bag']) for r in good]
    short = [name.removeprefix(f'{model.name}_') for name in model.joint_names]
    height = 1.6 + 0.25 * len(bags)                 # inches per heat map
    fig, axes = plt.subplots(len(COMPONENTS), 1, figsize=(10, len(COMPONENTS) * height + 1.5),
                             squeeze=False, constrained_layout=True)
    for ax, component in zip(axes[:, 0], COMPONENTS):
        values = np.array([[math.nan if r.get(f'rms_{component}[{j}]') is None else
                            r[f'rms_{component}[{j}]'] for j in model.joint_names]
                           for r in good], dtype=np.float64)
        _heat_map(ax, values, bags, short, f'RMS of the {component} part per joint', fig)
    fig.savefig(out / 'fleet_rms.png', dpi=100)
    plt.close(fig)

    # every path that is among the largest of some bag, ranked by its largest RMS
    found: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in good:
        i = 1
        while f'path{i}_rms' in r:
            value, part = r[f'path{i}_rms'], r[f'path{i}_part']
            if part and value is not None and not math.isnan(value):
                key = (part, str(r[f'path{i}_source']), str(r[f'path{i}_joint']))
                found.setdefault(key, {})[str(r['bag'])] = float(value)
            i += 1
    ranked = sorted(found, key=lambda k: -max(found[k].values()))[:15]
    values = np.array([[found[k].get(b, math.nan) for k in ranked] for b in bags])
    labels = [f'{p[:3]} {s.removeprefix(model.name + "_")} -> '
              f'{j.removeprefix(model.name + "_")}' for p, s, j in ranked]
    fig, ax = plt.subplots(figsize=(10, height + 3.5), constrained_layout=True)
    _heat_map(ax, values, bags, labels, 'Largest motion propagation paths (source -> joint; '
              "blank: not among that bag's largest)", fig)
    fig.savefig(out / 'fleet_paths.png', dpi=100)
    plt.close(fig)
    return [out / 'fleet_rms.png', out / 'fleet_paths.png']


def write_fleet_report(out: Path, outcomes: Sequence[BagOutcome],
                       model: RobotModel) -> list[Path]:
    """Write ``fleet.csv``, ``fleet.parquet`` and the figures into ``out``; returns them."""
    columns, rows = report_rows(outcomes)
    _write_csv(out / 'fleet.csv', columns, rows)
    _write_parquet(out / 'fleet.parquet', columns, rows)
    return [out / 'fleet.csv', out / 'fleet.parquet', *_plot(out, model, rows)]
