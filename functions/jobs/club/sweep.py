"""The club's one sweep loop: find due rows, change each under the lease, send the events, checkpoint.

    flush what an interrupted earlier run saved
    up to max_batches times:
        rows = due(now, batch)                 ids from a sparse index (may be stale: `handle` re-reads)
        outcome = handle(row, now) per row     one fenced change each, counted by its outcome
        flush the events the batch saved, yield the counts (the runner renews the lease here)
        stop when the page was short or nothing moved (what is left is not due yet, or someone else's):
        that batch is yielded as the `LastBatch`, as is the last allowed

Expiring memberships, expiring photographer requests and sending equipment
reminders are this loop with their own `due` and `handle`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from jobfence.batch import LastBatch
from jobfence.scheduled import RunContext
from jobs.club.changes import ChangeLog


def sweep(
    changes: ChangeLog,
    ctx: RunContext,
    due: Callable[[int, int], Sequence[Any]],
    handle: Callable[[Any, int], str | None],
    outcomes: Sequence[str],
    progress: Sequence[str],
    batch: int,
    max_batches: int,
) -> Iterator[dict[str, Any] | LastBatch]:
    """Yield one count per outcome (and `events` sent) a batch; `progress` names the outcomes that moved a row."""
    sent = changes.flush(ctx)  # events an interrupted earlier run saved but did not send
    for n in range(1, max_batches + 1):
        now = ctx.now_ms()
        rows = due(now, batch)
        counts = dict.fromkeys(outcomes, 0)
        for row in rows:
            outcome = handle(row, now)
            if outcome is not None:  # None: nothing happened worth counting
                counts[outcome] += 1
        sent += changes.flush(ctx)
        if len(rows) < batch or not any(counts[name] for name in progress) or n == max_batches:
            yield LastBatch({**counts, "events": sent})
            return
        yield {**counts, "events": sent}
        sent = 0
