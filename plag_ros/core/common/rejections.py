"""Rejected inputs: counted by reason, logged at most once per reason every few seconds.

A node that drops bad input (a malformed joint state, a command of the wrong length) must
say so without flooding its log at the input rate: every rejection is counted (the counts
go to ``/diagnostics``), and each reason is logged at most every :data:`LOG_THROTTLE_S`.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

__all__ = ['LOG_THROTTLE_S', 'RejectionLog']

LOG_THROTTLE_S = 2.0
"""Shortest interval [s] between two log lines of the same reason."""


class RejectionLog:
    """Counts rejections by reason; logs the first of each reason per throttle interval.

    Args:
        reasons: the reasons counted from the start (others are added when they occur).
        log: where a line goes (a logger's ``warning``).
        template: the line, with ``{reason}``, ``{count}`` (so far) and ``{detail}``.

    Attributes:
        counts: reason -> rejections since construction.
    """

    def __init__(self, reasons: Iterable[str], log: Callable[[str], object],
                 template: str) -> None:
        self.counts: dict[str, int] = dict.fromkeys(reasons, 0)
        self._log = log
        self._template = template
        self._last_log: dict[str, float] = {}

    def __call__(self, reason: str, detail: str) -> None:
        """Count one rejection of ``reason``; log it unless that reason was logged lately."""
        count = self.counts[reason] = self.counts.get(reason, 0) + 1
        now = time.monotonic()
        if now - self._last_log.get(reason, -math.inf) >= LOG_THROTTLE_S:
            self._last_log[reason] = now
            self._log(self._template.format(reason=reason, count=count, detail=detail))

    @property
    def total(self) -> int:
        """Rejections of every reason."""
        return sum(self.counts.values())
