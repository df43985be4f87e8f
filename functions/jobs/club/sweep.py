"""The club's one sweep loop: find due rows, change each under the lease, send the events, checkpoint.

    flush what an interrupted earlier run saved
    up to max_batches times:
        ids = due(now, batch)                  ids from a sparse index (may be stale: `handle` re-reads)
        outcome = handle(id, now) per id       one fenced change each, counted by its outcome (an enum member);
                                               a row in an unknown state is counted `invalid`, logged, left as it is
        flush the events the batch saved, yield the counts (the runner renews the lease here)
        stop when the page was short or nothing moved (what is left is not due yet, or someone else's):
        that batch is yielded as the `LastBatch`, as is the last allowed

Expiring memberships, expiring photographer requests and sending equipment
reminders are this loop with their own `due`, `handle` and outcome enum.
`OutcomeCounts` is how a club job counts its rows by outcome (the email
intake job counts with it too). `InvalidRows` is how every club job meets a
row whose state is outside its enum (`UnknownRowState`): a poison record, left
as it is in the table, logged once a run by table and key, counted `invalid`
in the run's summary; the job goes on with the other rows of the batch and the
later batches, so no tick fails because of it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Generic, TypeVar

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.scheduled import RunContext
from jobs.club.changes import ChangeLog
from jobs.club.stores.states import RowRead, UnknownRowState

E = TypeVar("E", bound=enum.Enum)
V = TypeVar("V")


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


class InvalidRows:
    """One run's rows in an unknown state (`UnknownRowState`): each logged and counted once, none changed.

    A poison record: the job leaves it as it is in its table for an operator and goes on with the
    others. The warning names the table, the key and the attribute (the bad value only in the bounded
    form `UnknownRowState` keeps); `taken()` is a batch's `invalid` count (rows first met since the last
    call), so the run's summary counts each such row once however many batches read it again.
    """

    def __init__(self, logger: Logger, job: str) -> None:
        self._logger = logger
        self._job = job
        self._met: set[tuple[str, str]] = set()
        self._new = 0

    def met(self, exc: UnknownRowState) -> None:
        """Record a row in an unknown state (the first time in this run: one warning, one count)."""
        if (exc.table, exc.key) in self._met:
            return
        self._met.add((exc.table, exc.key))
        self._new += 1
        self._logger.warning(
            "row in an unknown state left as it is",
            extra={
                "job": self._job,
                "table": exc.table,
                "key": exc.key,
                "attribute": exc.attribute,
                "value": exc.value,
            },
        )

    def views(self, reads: Iterable[RowRead[V]]) -> Iterator[V]:
        """The view of each read whose state is known; each other row is `met` and passed over."""
        for read in reads:
            try:
                view = read.view()
            except UnknownRowState as exc:
                self.met(exc)
                continue
            yield view

    def taken(self) -> int:
        """How many rows were first met since the last call (a batch's `invalid`)."""
        new, self._new = self._new, 0
        return new


def sweep(
    changes: ChangeLog,
    ctx: RunContext,
    invalid: InvalidRows,
    due: Callable[[int, int], Sequence[str]],
    handle: Callable[[str, int], E | None],
    outcomes: type[E],
    progress: Collection[E],
    batch: int,
    max_batches: int,
) -> Iterator[Mapping[str, int]]:
    """Yield one count per outcome (and `events` sent, `invalid` rows) a batch; `progress`: outcomes that moved a row.

    A row `handle` reads in an unknown state is met by `invalid` and moves nothing: a page of only such
    rows (or skipped ones) ends the run, as its next read would return them again.
    """
    sent = changes.flush(ctx)  # events an interrupted earlier run saved but did not send
    for n in range(1, max_batches + 1):
        now = ctx.now_ms()
        ids = due(now, batch)
        counts = OutcomeCounts(outcomes)
        for row_id in ids:
            try:
                outcome = handle(row_id, now)
            except UnknownRowState as exc:  # a poison record: left as it is, the others go on
                invalid.met(exc)
                continue
            if outcome is not None:  # None: nothing happened worth counting
                counts.add(outcome)
        sent += changes.flush(ctx)
        summary = counts.summary(events=sent, invalid=invalid.taken())
        if len(ids) < batch or not counts.any_of(progress) or n == max_batches:
            yield LastBatch(summary)
            return
        yield summary
        sent = 0
