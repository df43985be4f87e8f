"""The timing and limits of one pipeline, as data (no pydantic, no pynamodb).

A catalog declares each pipeline's timing (`jobs/listings/catalog.py`), and a
catalog must import without loading the work store or the wake-up model
(docs/benchmarks.md, cold start), so `Timing` lives on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.clock import TIME_BUDGET_MS


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
        """The longest delay of a retry's wake-up (the one before the last attempt; at most SQS's 900 s)."""
        return min(900, self.retry_delay_s * 2 ** max(self.attempts_cap - 2, 0))

    # The reclaimer's cutoffs (docs/guarantees.md, "The time budget"): a row's `updated_at` is another
    # actor's clock, read when its request was built, so each limit waits the time budget longer. A row
    # is then moved only once its last write is at least the limit old in true time (when that write
    # came within the request-age budget).

    def running_cutoff(self, now_ms: int) -> int:
        """A running item whose `updated_at` is below this (the reader's clock) is stale: its worker stopped."""
        return now_ms - self.item_stale_s * 1000 - TIME_BUDGET_MS

    def pending_cutoff(self, now_ms: int) -> int:
        """A pending item whose `updated_at` is below this has lost its wake-up."""
        return now_ms - self.pending_stale_s * 1000 - TIME_BUDGET_MS

    def batch_cutoff(self, now_ms: int) -> int:
        """An open batch whose heartbeat (`updated_at`, or its newest tally) is below this was abandoned."""
        return now_ms - self.batch_stale_s * 1000 - TIME_BUDGET_MS

    def retry_delay(self, attempts: int) -> int:
        """SQS delay of the wake-up after the `attempts`-th attempt failed (SQS allows at most 900 s)."""
        return min(900, self.retry_delay_s * 2 ** max(attempts - 1, 0), self.max_retry_delay_s)
