"""Compact layout (plag_ros.core.dynamics.compact) against the dense one: bytes, time, npz size.

For the CRANE-X7 (10 000 random samples) and a 30-joint serial chain (2 000), float64:

* bytes per sample, dense and compact, and their ratio;
* pack and unpack time per sample, median of repeats, against ``decompose`` of the same
  batch in the same process (the peer: what producing the tables costs);
* ``analysis.npz``-style files of the decomposition in both layouts, stored (level 0) and
  deflated (level 1, ISA-L), with their write time.

Usage: ``PYTHONPATH=$PWD python bench/bench_compact.py [--samples 10000] [--repeat 5]``.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / 'test'))

from robots import serial_chain  # noqa: E402
from timing import median_time_s  # noqa: E402

from plag_ros.core.dynamics.compact import CompactLayout  # noqa: E402
from plag_ros.core.dynamics.engine import PartialLagrangian  # noqa: E402
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path  # noqa: E402
from plag_ros.io.npz import save_npz  # noqa: E402


def run(name: str, model: RobotModel, samples: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.uniform(-1.0, 1.0, (samples, model.n_joints)) for _ in range(3))
    engine = PartialLagrangian(model, dtype=torch.float64)
    out = engine.empty_arrays((samples,))
    engine.decompose_arrays(q, qd, qdd, out=out)
    layout = CompactLayout.from_model(model)
    packed = layout.pack(out)
    t_dec = median_time_s(lambda: engine.decompose_arrays(q, qd, qdd, out=out), repeat)
    t_pack = median_time_s(lambda: layout.pack(out), repeat)
    t_unpack = median_time_s(lambda: layout.unpack(packed), repeat)
    dense_b, compact_b = layout.nbytes()
    us = 1e6 / samples
    print(f'{name}: n = {model.n_joints}, B = {model.n_bodies}, {layout.n_pairs} pairs, '
          f'{layout.n_triples} triples')
    print(f'  bytes per sample      dense {dense_b:8d}   compact {compact_b:8d}   '
          f'ratio {compact_b / dense_b:.3f}')
    print(f'  us per sample         decompose {t_dec * us:7.2f}   pack {t_pack * us:6.2f} '
          f'({t_pack / t_dec:.2f}x)   unpack {t_unpack * us:6.2f} ({t_unpack / t_dec:.2f}x)')
    with tempfile.TemporaryDirectory() as tmp:
        for level in (0, 1):
            sizes, writes = {}, {}
            for kind, arrays in (('dense', out), ('compact', {**packed,
                                                                **layout.index_arrays()})):
                path = Path(tmp) / f'{kind}{level}.npz'
                writes[kind] = median_time_s(lambda a=arrays, p=path, v=level: save_npz(p, a, v),
                                         max(1, repeat // 2))
                sizes[kind] = path.stat().st_size
            print(f'  npz level {level}           dense {sizes["dense"] / 1e6:8.2f} MB '
                  f'{writes["dense"]:6.3f} s   compact {sizes["compact"] / 1e6:8.2f} MB '
                  f'{writes["compact"]:6.3f} s   size ratio '
                  f'{sizes["compact"] / sizes["dense"]:.3f}')


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--samples', type=int, default=10_000)
    parser.add_argument('--repeat', type=int, default=5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    run('CRANE-X7', RobotModel.from_urdf(default_urdf_path()), args.samples, args.repeat)
    # A fifth of the samples: 10 000 dense 30-joint tables are 4.5 GB.
    run('30-joint chain', RobotModel.from_urdf(serial_chain(seed=3, n=30)),
        max(1, args.samples // 5), args.repeat)
    return 0


if __name__ == '__main__':
    sys.exit(main())
