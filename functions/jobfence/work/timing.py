"""The timing and limits of one pipeline, as data (no pydantic, no pynamodb).

A catalog declares each pipeline's timing (`jobs/listings/catalog.py`), and a
catalog must import without loading the work store or the wake-up model
(docs/benchmarks.md, cold start), so `Timing` lives on its own.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Timing and limits of one pipeline (docs/architecture.md, "Durable batches")."""

    per_item_timeout_s: int = 240
    item_stale_s: int = 360
    pending_stale_s: int = 900
    batch_stale_s: int = 900
    attempts_cap: int = 5
    retry_delay_s: int = 30  # first retry's delay; doubles per attempt, capped below pending_stale

    def __post_init__(self) -> None:
        if not 0 < self.per_item_timeout_s < self.item_stale_s <= self.batch_stale_s:
            raise ValueError("need per-item timeout < item stale <= batch stale: a live item must never look stale")
        if self.attempts_cap < 1:
            raise ValueError("the attempts cap is at least 1")
        if self.max_retry_delay_s >= self.pending_stale_s:
            raise ValueError("a delayed retry must arrive before its pending item looks lost")

    @property
    def max_retry_delay_s(self) -> int:
        return min(900, self.retry_delay_s * 2 ** max(self.attempts_cap - 2, 0))

    def retry_delay(self, attempts: int) -> int:
        """SQS delay of the wake-up after the `attempts`-th attempt failed (SQS allows at most 900 s)."""
        return min(900, self.retry_delay_s * 2 ** max(attempts - 1, 0), self.max_retry_delay_s)
