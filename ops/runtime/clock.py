"""A simulated clock that every worker process reads: one int64 in shared memory.

The driver moves it; worker processes read it through `jobfence.clock.SystemClock`
(patched in the worker at cold start, the one substitution the local runtime
makes to function code), so a lease's `expires_at` or a tick's `time` means the
same instant in the driver and in every function.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

DEFAULT_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, like jobfence.clock.FrozenClock


class SimulatedClock:
    """A `jobfence.clock.Clock` whose value lives in shared memory. Never goes backwards."""

    def __init__(self, start_ms: int = DEFAULT_START_MS, context: Any = None) -> None:
        ctx = context or multiprocessing.get_context("spawn")
        self.shared = ctx.Value("q", int(start_ms))  # with its own lock: readers never see a torn value

    def now_ms(self) -> int:
        return int(self.shared.value)

    def set(self, now_ms: int) -> None:
        """Jump to an absolute instant (never backwards)."""
        with self.shared.get_lock():
            if now_ms < self.shared.value:
                raise ValueError("a clock never goes backwards")
            self.shared.value = int(now_ms)

    def advance(self, *, ms: int = 0, seconds: float = 0, minutes: float = 0, hours: float = 0) -> int:
        """Move forward and return the new now."""
        delta = int(ms + seconds * 1000 + minutes * 60_000 + hours * 3_600_000)
        if delta < 0:
            raise ValueError("a clock never goes backwards")
        with self.shared.get_lock():
            self.shared.value += delta
            return int(self.shared.value)
