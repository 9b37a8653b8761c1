"""``plag-ros analyze BAG... -o OUT`` over many bags: one task per bag on Dask.

A lab records one bag per trial, subject or payload. This module finds the bags (paths,
directories holding bags, globs), analyses each exactly as a single-bag run does
(:func:`plag_ros.apps.bag_analysis.analyze_bag`) into ``OUT/<bag name>/``, and writes the fleet
report (:mod:`plag_ros.apps.fleet_report`) into ``OUT``.

The work runs on ``dask.distributed``: a ``LocalCluster`` of worker processes by default,
or an existing cluster through ``--scheduler ADDRESS`` or Dask's own
``DASK_SCHEDULER_ADDRESS`` convention. Each task is one bag; a worker runs one at a time.

Cores: worker processes x engine threads never exceed the cores a host has. A local
cluster of ``W`` workers on ``C`` cores gives each bag's engine ``max(1, C // W)`` threads
(the default ``W = C`` gives one each); on a cluster each worker's share is its host's
cores divided by the worker threads on that host. A worker with two cores or more also
writes a bag's csv and figures in a child process while the rest is written, as a
single-bag run does (the local cluster's workers are started non-daemonic for that; a
daemonic worker writes them itself). The output writers overlap for a moment in threads
of their own: deflate and file writes, not the engine.

Outputs and reruns: ``OUT/<bag name>/fleet.json`` is written last, with the SHA-256 of
the bag's files, the settings that shape the outputs, the bag's report row and the size
of every file the run wrote. A rerun skips a bag whose record matches its input and
settings and whose files are all there with those sizes;
``--force`` redoes every bag. A bag that failed leaves no record and is tried again.

Exit status of the run: 0 when every bag was analysed whole, 3
(:data:`plag_ros.io.bag.EXIT_RECOVERED_WITH_LOSS`) when at least one was cut short and
salvaged up to the cut (and none failed), 2 when at least one bag could not be analysed
(its error is in the report and on stderr; the others still finish).
"""
from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from plag_ros.apps.bag_analysis import analyze_bag, refuse_output_in_bag
from plag_ros.apps.fleet_report import BagOutcome, write_fleet_report
from plag_ros.core.decomposition.analysis import AnalysisOptions
from plag_ros.core.dynamics.model import RobotModel, default_urdf_path
from plag_ros.core.dynamics.model_parameters import model_with_parameters
from plag_ros.io.bag import EXIT_RECOVERED_WITH_LOSS, BagError, StampSource

__all__ = ['EXIT_FAILED', 'BagJob', 'BagOutcome', 'analyze_bags', 'bag_name', 'exit_status',
           'find_bags', 'fingerprint', 'is_bag', 'names_many', 'run_bag',
           'threads_per_worker']

EXIT_FAILED = 2
"""Exit status when a bag could not be analysed (the single-bag run's error status)."""
RECORD = 'fleet.json'
"""The record written last into each bag's output directory."""
BAG_SUFFIXES = ('.mcap', '.db3')


def is_bag(path: Path) -> bool:
    """A single storage file, or a bag directory: one with metadata.yaml, or (a recording
    cut short before writing it) one whose storage files are named after the directory as
    rosbag2 names them (``<dir>.mcap``, ``<dir>_0.mcap``, ...). A directory of storage
    files named otherwise holds single-file bags."""
    if path.is_file():
        return path.suffix in BAG_SUFFIXES
    if not path.is_dir():
        return False
    if (path / 'metadata.yaml').is_file():
        return True
    storage = [c.stem for c in path.iterdir() if c.is_file() and c.suffix in BAG_SUFFIXES]
    return bool(storage) and all(stem == path.name or stem.startswith(path.name + '_')
                                 for stem in storage)


def names_many(path: str | Path) -> bool:
    """Whether one command-line path stands for many bags: a glob pattern that names no
    existing file, or a directory that is not a bag but holds bags. (Anything else is the
    single-bag run's, with its own errors.)"""
    text = str(path)
    if glob.has_magic(text) and not Path(text).exists():
        return True
    path = Path(path)
    return path.is_dir() and not is_bag(path) and any(is_bag(c) for c in path.iterdir())


def find_bags(inputs: Iterable[str | Path]) -> list[Path]:
    """The bags named by ``inputs``: bag paths, directories holding bags (one level) and
    glob patterns, in the order given (each directory's bags sorted by name), each once.

    Raises:
        BagError: an input that is none of these, a pattern or directory with no bag.
    """
    found: list[Path] = []
    for item in inputs:
        text = str(item)
        matches = [Path(m) for m in sorted(glob.glob(text))] if glob.has_magic(text) \
            and not Path(text).exists() else [Path(text)]
        if not matches:
            raise BagError(f'no file or directory matches {text}')
        for path in matches:
            if is_bag(path):
                found.append(path)
            elif path.is_dir():
                bags = sorted(child for child in path.iterdir() if is_bag(child))
                if not bags:
                    raise BagError(f'{path} is neither a bag nor a directory holding bags')
                found += bags
            else:
                raise BagError(f'{path}: not a bag (a directory, .mcap or .db3 file)')
    return list(dict.fromkeys(found))


def bag_name(bag: Path) -> str:
    """The output directory name of a bag: its directory name, or its file name without
    the storage suffix."""
    return bag.stem if bag.is_file() else bag.name


def _names(bags: Sequence[Path]) -> list[str]:
    """Output names, unique: where two bags share a name, their paths relative to the
    common parent, joined with '__'."""
    names = [bag_name(b) for b in bags]
    if len(set(names)) == len(names):
        return names
    root = Path(os.path.commonpath([str(b.resolve().parent) for b in bags]))
    names = ['__'.join((*b.resolve().relative_to(root).parts[:-1], n)) if names.count(n) > 1
             else n for b, n in zip(bags, names)]
    twins = sorted({n for n in names if names.count(n) > 1})
    if twins:
        raise BagError(f'bags that would share an output directory: {twins} (a .mcap and a '
                       '.db3 of the same name side by side?); rename one or pass them apart')
    return names


def fingerprint(bag: Path, chunk: int = 1 << 20) -> str:
    """SHA-256 over the bag's files: relative name, size and bytes, in name order."""
    digest = hashlib.sha256()
    files = [bag] if bag.is_file() else sorted(p for p in bag.rglob('*') if p.is_file())
    for path in files:
        relative = path.name if bag.is_file() else path.relative_to(bag).as_posix()
        digest.update(f'{relative}\0{path.stat().st_size}\0'.encode())
        with open(path, 'rb') as f:
            while block := f.read(chunk):
                digest.update(block)
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class BagJob:
    """One bag's task: what to read, where to write, how (picklable for the workers)."""

    bag: Path
    out: Path
    name: str
    options: AnalysisOptions
    urdf: Path | None = None
    topic: str | None = None
    stamp: StampSource = 'header'
    force: bool = False
    threads: dict[str, int] = dataclasses.field(default_factory=dict)
    """Engine threads per worker address (a worker not listed: the options' threads)."""
    parameters: Path | None = None
    """identified.yaml applied to the model (``--model``)."""

    def settings(self) -> str:
        """What shapes the outputs besides the input: the options (less threads and the
        progress bar, which change no number) and the model and topic choices."""
        options = dataclasses.asdict(dataclasses.replace(
            self.options, threads=None, progress=None, figures_process=None))
        # (sets as sorted lists: a set's order changes with each process's string hashing)
        figures = (hashlib.sha256(self.parameters.read_bytes()).hexdigest()
                   if self.parameters else '')
        return json.dumps({'options': options, 'urdf': str(self.urdf or ''),
                           'model_parameters': figures,
                           'topic': self.topic or '', 'stamp': self.stamp}, sort_keys=True,
                          default=lambda v: sorted(v) if isinstance(v, (set, frozenset))
                          else str(v))


@lru_cache(maxsize=4)
def _model(urdf: Path | None, parameters: Path | None = None) -> RobotModel:
    """One model per worker process, URDF and identified figures (loading takes ~50 ms)."""
    return model_with_parameters(RobotModel.from_urdf(urdf or default_urdf_path()),
                                 parameters)[0]


def _worker_threads(job: BagJob) -> int | None:
    if not job.threads:
        return job.options.threads
    try:
        from distributed import get_worker
        address = get_worker().address
    except (ImportError, ValueError):
        return job.options.threads
    return job.threads.get(address, job.options.threads)


def _files(out: Path) -> dict[str, int]:
    """Every file a run wrote into ``out`` (relative path -> bytes), the record aside."""
    return {p.relative_to(out).as_posix(): p.stat().st_size for p in sorted(out.rglob('*'))
            if p.is_file() and not p.name.startswith(RECORD)}


def _complete(job: BagJob, digest: str) -> dict[str, Any] | None:
    """The record of a finished earlier run of this job, when its input and settings still
    match and every file it wrote is there with its size; None otherwise."""
    try:
        record = json.loads((job.out / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if record.get('input_sha256') != digest or record.get('settings') != job.settings():
        return None
    files = record.get('files') or {}
    present = _files(job.out) if files else {}
    if not files or any(present.get(name) != size for name, size in files.items()):
        return None
    return record


def _failed(job: BagJob, message: str, seconds: float = 0.0) -> BagOutcome:
    """The outcome of a bag that could not be analysed: its identity and the error."""
    return BagOutcome(job.name, job.bag, 'failed', EXIT_FAILED,
                      {'bag': job.name, 'source': str(job.bag), 'status': 'failed',
                       'exit_code': EXIT_FAILED, 'error': message}, seconds, message)


def run_bag(job: BagJob) -> BagOutcome:
    """Analyse one bag into ``job.out`` (the worker's task). Never raises: a bag that
    cannot be analysed comes back as a 'failed' outcome with the error."""
    t0 = time.perf_counter()
    try:
        digest = fingerprint(job.bag)
        record = None if job.force else _complete(job, digest)
        if record is not None:
            return BagOutcome(job.name, job.bag, 'skipped', int(record['exit_code']),
                              record['row'], time.perf_counter() - t0)
        threads = _worker_threads(job)
        # The csv and figures go to a child process, as in a single-bag run, only where
        # this worker has a core for it and may start one (a daemonic worker may not).
        child = None if (threads or usable_cores()) >= 2 and \
            not multiprocessing.current_process().daemon else False
        options = dataclasses.replace(job.options, threads=threads, figures_process=child,
                                      progress=False)
        model = _model(job.urdf, job.parameters)
        figures: dict[str, object] = {}
        result = analyze_bag(job.bag, job.out, model=model, topic=job.topic, stamp=job.stamp,
                             force=True, options=options, row=figures)
        recovery = result.recovery
        status = 'salvaged' if recovery is not None else 'analysed'
        code = EXIT_RECOVERED_WITH_LOSS if recovery is not None and recovery.lossy else 0
        row = {'bag': job.name, 'source': str(job.bag), 'status': status, 'exit_code': code,
               'error': '', **figures}
        record = {'input_sha256': digest, 'settings': job.settings(), 'exit_code': code,
                  'status': status, 'row': row, 'files': _files(job.out)}
        partial = job.out / (RECORD + '.part')
        partial.write_text(json.dumps(record, indent=1))
        partial.replace(job.out / RECORD)
        return BagOutcome(job.name, job.bag, status, code, row, time.perf_counter() - t0)
    except (BagError, ValueError, OSError) as err:
        message = f'{type(err).__name__}: {err}'
    except Exception as err:  # noqa: BLE001 - one bag's bug must not end the others
        message = f'{type(err).__name__}: {err}\n{traceback.format_exc(limit=4)}'
    return _failed(job, message, time.perf_counter() - t0)


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, else the machine's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:     # not on Linux
        return os.cpu_count() or 1


def threads_per_worker(workers: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Engine threads per worker address: the host's cores divided by the worker threads
    on that host, at least 1 (the rule of the module docstring).

    Args:
        workers: per worker ``{'address', 'host', 'nthreads', 'cores'}``.
    """
    per_host: dict[str, int] = {}
    for w in workers:
        per_host[w['host']] = per_host.get(w['host'], 0) + int(w['nthreads'])
    return {w['address']: max(1, int(w['cores']) // per_host[w['host']]) for w in workers}


def _workers_of(client) -> list[dict[str, Any]]:
    cores = client.run(usable_cores)                      # address -> cores on its host
    info = client.scheduler_info()['workers']
    return [{'address': a, 'host': w['host'], 'nthreads': w['nthreads'], 'cores': cores[a]}
            for a, w in info.items() if a in cores]


class _Cluster:
    """A Dask client on an existing scheduler, or on a LocalCluster started (and closed)
    here."""

    def __init__(self, scheduler: str | None, workers: int | None) -> None:
        import dask
        from distributed import Client, LocalCluster

        address = scheduler or dask.config.get('scheduler-address', None)
        self.cluster = None
        if address:
            self.client = Client(address, timeout='30s')
            self.where = f'scheduler {address}'
            if workers:
                self.client.wait_for_workers(workers, timeout=60)
        else:
            n = workers or usable_cores()
            # processes, one bag at a time each: the engine's loop and the writers hold the
            # GIL for long stretches; no dashboard (it needs bokeh, and nobody watches it)
            # non-daemonic workers: a worker with two cores writes a bag's csv and figures
            # in a child process while its engine finishes, as a single-bag run does
            with dask.config.set({'distributed.worker.daemon': False}):
                self.cluster = LocalCluster(n_workers=n, threads_per_worker=1,
                                            processes=True, dashboard_address=None,
                                            silence_logs=40)
            self.client = Client(self.cluster)
            self.where = f'a local cluster of {n} worker process{"es" if n > 1 else ""}'

    def close(self) -> None:
        self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def analyze_bags(bags: Sequence[Path], out: Path, options: AnalysisOptions, *,
                 urdf: Path | None = None, topic: str | None = None,
                 stamp: StampSource = 'header', force: bool = False,
                 scheduler: str | None = None, workers: int | None = None,
                 progress: bool = True, parameters: Path | None = None
                 ) -> list[BagOutcome]:
    """Analyse ``bags`` into ``out/<name>/`` on Dask and write the fleet report into ``out``.

    Returns the outcomes in the order of ``bags``.
    """

    for bag in bags:
        refuse_output_in_bag(out, bag)
    out.mkdir(parents=True, exist_ok=True)
    names = _names(bags)
    cluster = _Cluster(scheduler, workers)
    try:
        threads = threads_per_worker(_workers_of(cluster.client))
        jobs = [BagJob(bag.resolve(), (out / name).resolve(), name, options, urdf, topic,
                       stamp, force, threads,
                       parameters.resolve() if parameters else None)
                for bag, name in zip(bags, names)]
        print(f'plag-ros analyze: {len(jobs)} bags on {cluster.where} (engine threads per '
              f'worker: {sorted(set(threads.values())) or "-"})', file=sys.stderr)
        futures = cluster.client.map(run_bag, jobs, key=[f'plag-ros-{j.name}-{i}' for i, j
                                                         in enumerate(jobs)], pure=False)
        order = {f.key: i for i, f in enumerate(futures)}
        outcomes: list[BagOutcome | None] = [None] * len(jobs)
        from distributed import as_completed
        from tqdm import tqdm
        bar = tqdm(total=len(jobs), unit='bag', desc='analyze', disable=not progress)
        for future in as_completed(futures):
            i = order[future.key]
            try:
                outcome = future.result()
            except Exception as err:  # noqa: BLE001 - a worker died under this bag
                outcome = _failed(jobs[i], f'{type(err).__name__}: {err}')
            outcomes[i] = outcome
            bar.update(1)
            if outcome.status == 'failed':
                bar.write(f'plag-ros analyze: {outcome.name}: {outcome.error.splitlines()[0]}',
                          file=sys.stderr)
        bar.close()
    finally:
        cluster.close()
    done = [o for o in outcomes if o is not None]
    write_fleet_report(out, done, _model(urdf, parameters))
    return done


def exit_status(outcomes: Sequence[BagOutcome]) -> int:
    """The run's exit status from its bags' (the module docstring's rule)."""
    codes = {o.exit_code for o in outcomes}
    if EXIT_FAILED in codes:
        return EXIT_FAILED
    return EXIT_RECOVERED_WITH_LOSS if EXIT_RECOVERED_WITH_LOSS in codes else 0
