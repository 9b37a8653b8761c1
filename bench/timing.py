"""Timing helper shared by the benchmarks (imported as ``timing``: each bench runs as a
script, with bench/ first on sys.path)."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time_s(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls of ``fn`` [s]."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
