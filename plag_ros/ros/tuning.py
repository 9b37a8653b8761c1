"""Process-wide tuning for a low-latency ``joint_states`` input, in one opt-in place.

A node that declares ``low_latency: true`` (read only, default false) gets three measures,
each of which reaches beyond the node into the whole Python process or into its threads,
which is why none of them is on by default. All three use public APIs only:

1. ``joint_states`` is served by :class:`~plag_ros.ros.input_thread.InputThread`, a thread
   of its own spinning a public ``SingleThreadedExecutor`` over a helper node that holds
   only that subscription, instead of the node's executor, whose per-wake-up bookkeeping
   cost about as much CPU as the decomposition. (InputThread's other way, a private wait
   set of rclpy's C extension, is a separate opt-in of its own, ``private_wait_set``.)
2. :func:`lower_switch_interval`: the interpreter's GIL switch interval drops from 5 ms to
   0.2 ms, so an executor callback (parameters, diagnostics) cannot hold the input thread
   off for a whole 200 Hz period.
3. :func:`freeze_startup_objects`: ``gc.freeze()`` after start-up moves everything built so
   far (torch, numba, rclpy, the model) out of the cyclic collector's reach, so a full
   collection does not scan it in the middle of a callback.

The effect on latency is measured by ``bench/bench_nodes.py`` (``--param low_latency:=...``);
the figures are in ``bench/RESULTS.md``.
"""
from __future__ import annotations

import gc
import sys

__all__ = ['SWITCH_INTERVAL_S', 'freeze_startup_objects',
           'lower_switch_interval']

SWITCH_INTERVAL_S = 2e-4
"""GIL switch interval [s] with ``low_latency``; CPython's default is 5e-3."""


def lower_switch_interval(interval_s: float = SWITCH_INTERVAL_S) -> float:
    """Lower the GIL switch interval to at most ``interval_s``; returns the previous value."""
    previous = sys.getswitchinterval()
    if previous > interval_s:
        sys.setswitchinterval(interval_s)
    return previous


def freeze_startup_objects() -> int:
    """Collect, then freeze every live object out of the cyclic GC; returns how many."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
