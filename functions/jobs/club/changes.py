"""Saving a club record change together with its Discord events, then sending them.

Every club job goes through `ChangeLog`:

    commit(ctx, [record update], [events])   one fenced transaction (ctx.transaction()):
        ConditionCheck lease (term live)  +  conditional Update of the record  +  Put outbox row per event
        -> True: saved; False: the record's condition failed (another run already did it: nothing saved)
    flush(ctx)                                send the job's outbox rows (signed now), delete each after sending

So a change is saved at most once (its own condition), its events exist iff it
was saved (same transaction), and a paused holder's change is refused by the
lease check (LeaseLost stops the job).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobfence.errors import ConditionFailed
from jobfence.scheduled import JobDeps, RunContext
from jobfence.transaction import Write
from jobs.club.catalog import NOTIFICATIONS_QUEUE

if TYPE_CHECKING:  # `build_changelog` imports them: a job that only uses `commit_plain` never loads the signing
    from jobs.club.events import Event
    from jobs.club.notifications import Publisher
    from jobs.club.stores.outbox import OutboxStore

FLUSH_PAGE = 25


class ChangeLog:
    """Commit record changes with their events under the lease; flush the events to the queue."""

    def __init__(self, outbox: OutboxStore, publisher: Publisher) -> None:
        self._outbox = outbox
        self._publisher = publisher

    def commit(self, ctx: RunContext, operations: Sequence[Write], events: Sequence[Event] = ()) -> bool:
        """Apply the record operations and save their events atomically; False if a record condition failed."""
        # the transaction bounds the size: past it, a ValueError and nothing is sent
        return commit_plain(ctx, [*operations, *(self._outbox.put_op(ctx.job, e) for e in events)])

    def flush(self, ctx: RunContext) -> int:
        """Send every saved event of this job; return how many were sent."""
        sent = 0
        while True:
            page = list(self._outbox.pending(ctx.job, FLUSH_PAGE))
            for nonce, event in page:
                self._publisher.publish(event)
                self._outbox.delete(ctx.job, nonce)
                sent += 1
            if len(page) < FLUSH_PAGE:
                return sent


def build_changelog(deps: JobDeps) -> ChangeLog:
    """The change log of a club job whose environment grants the outbox, the queue and its own signing key."""
    from jobs.club.notifications import build_publisher
    from jobs.club.stores.outbox import OutboxStore

    return ChangeLog(
        OutboxStore(deps.settings.table("club_outbox"), deps.clock),
        build_publisher(deps.settings, deps.session, deps.clock, NOTIFICATIONS_QUEUE, deps.spec.name),
    )


def commit_plain(ctx: RunContext, operations: Sequence[Write]) -> bool:
    """A fenced transaction of record operations without events; False if a record condition failed."""
    try:
        with ctx.transaction() as tx:
            tx.add(*operations)
    except ConditionFailed:
        # Another run (or an earlier attempt of this one) already made this change.
        return False
    return True
