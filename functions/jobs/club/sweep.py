"""The club's one sweep loop: find due rows, change each under the lease, send the events, checkpoint.

    flush what an interrupted earlier run saved
    up to max_batches times:
        ids = due(now, batch)                  ids from a sparse index (may be stale: `handle` re-reads)
        outcome = handle(id, now) per id       one fenced change each, counted by its outcome (an enum member)
        flush the events the batch saved, yield the counts (the runner renews the lease here)
        stop when the page was short or nothing moved (what is left is not due yet, or someone else's):
        that batch is yielded as the `LastBatch`, as is the last allowed

Expiring memberships, expiring photographer requests and sending equipment
reminders are this loop with their own `due`, `handle` and outcome enum.
`OutcomeCounts` is how a club job counts its rows by outcome (the email
intake job counts with it too).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from jobfence.batch import LastBatch
from jobfence.scheduled import RunContext
from jobs.club.changes import ChangeLog

E = TypeVar("E", bound=enum.Enum)


class ExpiryOutcome(enum.Enum):
    """What a sweep that expires due rows (memberships, photographer requests) did to one of them."""

    EXPIRED = "expired"  # expired by this run, its events saved in the same transaction
    SKIPPED = "skipped"  # a stale index entry, renewed or changed since, or expired by someone else first


class OutcomeCounts(Generic[E]):
    """How many rows of one batch came to each member of a job's outcome enum (zeros included).

    In the run row as `<outcome value>: count` per member, plus whatever the job adds (`summary(events=n)`).
    """

    def __init__(self, outcomes: type[E]) -> None:
        self._counts: dict[E, int] = dict.fromkeys(outcomes, 0)

    def add(self, outcome: E) -> None:
        self._counts[outcome] += 1

    def __getitem__(self, outcome: E) -> int:
        return self._counts[outcome]

    def any_of(self, outcomes: Collection[E]) -> bool:
        """Whether any row came to one of `outcomes`."""
        return any(self._counts[outcome] for outcome in outcomes)

    def summary(self, **extra: int) -> dict[str, int]:
        """The counts as a run row's batch summary (outcome value -> count), with `extra` counts."""
        return {str(outcome.value): n for outcome, n in self._counts.items()} | extra


def sweep(
    changes: ChangeLog,
    ctx: RunContext,
    due: Callable[[int, int], Sequence[str]],
    handle: Callable[[str, int], E | None],
    outcomes: type[E],
    progress: Collection[E],
    batch: int,
    max_batches: int,
) -> Iterator[Mapping[str, int]]:
    """Yield one count per outcome (and `events` sent) a batch; `progress` names the outcomes that moved a row."""
    sent = changes.flush(ctx)  # events an interrupted earlier run saved but did not send
    for n in range(1, max_batches + 1):
        now = ctx.now_ms()
        ids = due(now, batch)
        counts = OutcomeCounts(outcomes)
        for row_id in ids:
            outcome = handle(row_id, now)
            if outcome is not None:  # None: nothing happened worth counting
                counts.add(outcome)
        sent += changes.flush(ctx)
        if len(ids) < batch or not counts.any_of(progress) or n == max_batches:
            yield LastBatch(counts.summary(events=sent))
            return
        yield counts.summary(events=sent)
        sent = 0
