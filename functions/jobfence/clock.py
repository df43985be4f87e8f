"""The one place that reads time.

Everything that needs "now" takes a `Clock`. Production code gets `SystemClock`;
tests and the local runtime get `FrozenClock` and advance it by hand, so no test
ever sleeps. Times are epoch milliseconds (int); TTL attributes are epoch seconds.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol

# The time budget (docs/guarantees.md, "The time budget"): two actors' clocks differ by at most
# SKEW_BUDGET_MS (the runner's safety margin), and a request is applied at most
# REQUEST_AGE_BUDGET_MS after it read the time it carries. A comparison of two client-computed
# times is off by at most their sum, so a promise kept in true time waits TIME_BUDGET_MS longer.
SKEW_BUDGET_MS = 60_000
REQUEST_AGE_BUDGET_MS = 10_000
TIME_BUDGET_MS = SKEW_BUDGET_MS + REQUEST_AGE_BUDGET_MS


class Clock(Protocol):
    """A source of wall-clock time in epoch milliseconds."""

    def now_ms(self) -> int:
        """Current time, epoch milliseconds."""
        ...


class SystemClock:
    """The real wall clock."""

    def now_ms(self) -> int:
        """Current time, epoch milliseconds (the system clock)."""
        return time.time_ns() // 1_000_000


class FrozenClock:
    """A clock that only moves when told to. Thread-safe, so racing threads share it."""

    def __init__(self, start_ms: int = 1_767_225_600_000) -> None:  # 2026-01-01T00:00:00Z
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        """The frozen time, epoch milliseconds: it moves only by `advance` or `set`."""
        with self._lock:
            return self._now

    def advance(self, *, ms: int = 0, seconds: float = 0, minutes: float = 0, hours: float = 0) -> int:
        """Move time forward and return the new now. Time never goes backwards."""
        delta = int(ms + seconds * 1000 + minutes * 60_000 + hours * 3_600_000)
        if delta < 0:
            raise ValueError("a clock never goes backwards")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, now_ms: int) -> None:
        """Jump to an absolute time (never backwards)."""
        with self._lock:
            if now_ms < self._now:
                raise ValueError("a clock never goes backwards")
            self._now = int(now_ms)


def ttl_seconds(epoch_ms: int) -> int:
    """DynamoDB TTL attribute value (epoch seconds) for an epoch-millisecond instant."""
    return epoch_ms // 1000
