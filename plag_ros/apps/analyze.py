"""``plag-ros analyze BAG... -o OUT``: the command line of the offline analysis.

One bag goes to :func:`plag_ros.apps.bag_analysis.analyze_bag` (the products it writes are
listed there); several bags, a folder of bags or a glob go to
:func:`plag_ros.apps.fleet.analyze_bags`, one output folder per bag and a fleet report.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from plag_ros.apps import fleet
from plag_ros.apps.bag_analysis import analyze_bag
from plag_ros.core.decomposition.analysis import AnalysisOptions
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.core.estimation.filters import EstimatorConfig
from plag_ros.io.bag import EXIT_RECOVERED_WITH_LOSS, BagError
from plag_ros.io.bag_writer import add_bag_for_argument

__all__ = ['configure', 'run']


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``plag-ros analyze``."""
    parser.add_argument('bag', type=Path, nargs='+',
                        help='rosbag2 bag directory, .mcap or .db3 file; several, a directory '
                             'holding bags or a glob: each bag into OUT/<bag name>/ on Dask, '
                             'with the fleet report in OUT (plag_ros.apps.fleet)')
    parser.add_argument('-o', '--output', type=Path, required=True,
                        help='output directory (bag/, analysis.npz, torques.csv, *.png, '
                             'summary.txt; with many bags: one such directory per bag, '
                             'fleet.csv, fleet.parquet, fleet_*.png)')
    parser.add_argument('--force', action='store_true',
                        help='overwrite the output directory (many bags: redo the bags whose '
                             'outputs are complete and match their input)')
    parser.add_argument('--workers', type=int, default=None,
                        help='many bags: worker processes of the local Dask cluster (default: '
                             'one per core), or the workers to wait for on --scheduler')
    parser.add_argument('--scheduler', default=None,
                        help='many bags: address of a running Dask scheduler, e.g. '
                             'tcp://host:8786 (default: $DASK_SCHEDULER_ADDRESS, else a local '
                             'cluster)')
    parser.add_argument('--topic', help='JointState topic (default /joint_states or the only '
                                        'one)')
    parser.add_argument('--stamp', choices=('header', 'receive'), default='header',
                        help='sample time: message header stamp or bag receive time')
    parser.add_argument('--urdf', type=Path, help='robot URDF (default: bundled CRANE-X7)')
    parser.add_argument('--model', type=Path, help="identified.yaml of plag-ros identify: "
                        "the arm's identified figures over the URDF's")
    parser.add_argument('--causal', action='store_true',
                        help="use the live node's causal estimator (same output as the "
                             'node) instead of zero-phase filtering')
    estimator = EstimatorConfig()     # the one source of the estimator defaults
    parser.add_argument('--cutoff-hz', type=float, default=estimator.cutoff_hz,
                        help='low-pass cut-off [Hz] (default %(default)s)')
    parser.add_argument('--order', type=int, default=estimator.order,
                        help='Butterworth order (default %(default)s)')
    parser.add_argument('--rate-hz', type=float, default=estimator.rate_hz,
                        help='nominal joint_states rate the filter is designed for [Hz] '
                             '(default %(default)s)')
    parser.add_argument('--velocity-source', choices=('position', 'measured'),
                        default=estimator.velocity_source)
    parser.add_argument('--stencil-nodes', choices=('grid', 'stamps'),
                        default=estimator.stencil_nodes,
                        help='velocity stencil on the sample grid (stamp jitter taken as '
                             'noise) or on the stamps (default %(default)s)')
    parser.add_argument('--chunk', type=int, default=4096, help='samples per batch')
    parser.add_argument('--output-rate-hz', type=float, default=0.0,
                        help="decompose at most this often, as the node's output_rate_hz "
                             '(0: every sample)')
    parser.add_argument('--visualization-rate-hz', type=float, default=20.0,
                        help='rate of markers and image in the output bag (0: none)')
    parser.add_argument('--storage', choices=('mcap', 'sqlite3'), default='mcap',
                        help='output bag storage')
    parser.add_argument('--compression', choices=('lz4', 'zstd', 'none'), default='lz4',
                        help='chunk compression of the output mcap bag')
    add_bag_for_argument(parser)
    parser.add_argument('--npz-level', type=int, default=1, choices=range(10),
                        metavar='0-9', help='deflate level of analysis.npz (1-3: fast ISA-L, '
                        '4-9: zlib, smaller and slower; 0: uncompressed)')
    parser.add_argument('--npz-layout', choices=('dense', 'compact'), default='dense',
                        help='analysis.npz with the dense tables, or only their structurally '
                             'non-zero entries and index maps '
                             '(plag_ros.core.dynamics.compact.load_analysis reads both)')
    parser.add_argument('--skip', action='append', default=[],
                        choices=('bag', 'npz', 'csv', 'plots', 'summary'),
                        help='product not to write (repeatable)')
    parser.add_argument('--no-progress', action='store_true', help='no progress bar')


def run(args: argparse.Namespace) -> int:
    """Run ``plag-ros analyze``; returns the exit status: 0, 2 on a bag or output error, 3
    (``EXIT_RECOVERED_WITH_LOSS``) when the bag was cut short and salvaged up to the cut.
    With many bags: 2 when any bag failed, else 3 when any was salvaged with loss, else 0."""
    try:
        single = len(args.bag) == 1 and not fleet.names_many(args.bag[0])
        bags = [args.bag[0]] if single else fleet.find_bags(args.bag)
        model, _ = model_with_parameters(RobotModel.from_urdf(args.urdf or default_urdf_path()),
                                         args.model)
        estimator = EstimatorConfig(cutoff_hz=args.cutoff_hz, order=args.order,
                                    rate_hz=args.rate_hz,
                                    velocity_source=args.velocity_source,
                                    stencil_nodes=args.stencil_nodes)
        options = AnalysisOptions(
            causal=args.causal, estimator=estimator, chunk=args.chunk,
            visualization_rate_hz=args.visualization_rate_hz, storage=args.storage,
            output_rate_hz=args.output_rate_hz,
            npz_level=args.npz_level, npz_layout=args.npz_layout,
            compression=args.compression, bag_for=args.bag_for,
            products=frozenset({'bag', 'npz', 'csv', 'plots', 'summary'} - set(args.skip)),
            progress=False if args.no_progress else None)
        if not single:
            outcomes = fleet.analyze_bags(bags, args.output, options, urdf=args.urdf,
                                          parameters=args.model,
                                          topic=args.topic, stamp=args.stamp, force=args.force,
                                          scheduler=args.scheduler, workers=args.workers,
                                          progress=not args.no_progress)
            counts = {s: sum(o.status == s for o in outcomes)
                      for s in ('analysed', 'salvaged', 'skipped', 'failed')}
            print(f'{len(outcomes)} bags: ' + ', '.join(f'{v} {k}' for k, v in counts.items())
                  + f'; report in {args.output / "fleet.csv"}')
            return fleet.exit_status(outcomes)
        timings: dict[str, float] = {}
        _, written, recovery = analyze_bag(bags[0], args.output, model=model,
                                           topic=args.topic, stamp=args.stamp,
                                           force=args.force, options=options, timings=timings)
    except (BagError, ValueError, FileNotFoundError) as err:
        print(f'plag-ros analyze: error: {err}', file=sys.stderr)
        return 2
    if 'summary' in written:
        print(written['summary'].read_text(), end='')
    print('wrote ' + ', '.join(str(p) for p in sorted(set(written.values()))))
    print('seconds: ' + ', '.join(f'{k} {v:.2f}' for k, v in timings.items()))
    if recovery is not None:
        print(f'plag-ros analyze: {recovery.summary()}', file=sys.stderr)
        if recovery.lossy:
            return EXIT_RECOVERED_WITH_LOSS
    return 0
