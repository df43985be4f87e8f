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

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from jobfence.errors import ConditionFailed
from jobfence.scheduled import JobDeps, RunContext
from jobfence.transaction import Write
from jobs.club.catalog import NOTIFICATIONS_QUEUE, signing_secret

if TYPE_CHECKING:  # `build_changelog` imports them: a job that only uses `commit_plain` never loads the signing
    from jobs.club.events import Event
    from jobs.club.notifications import Publisher
    from jobs.club.stores.outbox import OutboxStore

FLUSH_PAGE = 25


class Publishes(Protocol):
    """Signs and sends one event (`jobs.club.notifications.Publisher`)."""

    def publish(self, event: Event) -> None: ...


class ChangeLog:
    """Commit record changes with their events under the lease; flush the events to the queue."""

    def __init__(self, outbox: OutboxStore, publisher: Publishes) -> None:
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


class PublisherOnFirstSend:
    """The job's publisher, built by `build` when the first event is sent.

    Most ticks of a publishing job send nothing (the outbox is empty: nothing changed), and a tick that sends
    nothing needs neither the publisher's Secrets Manager and SQS clients nor the signing (`cryptography`):
    the first send of the process builds them (about 22 ms of CPU on the bench machine, docs/benchmarks.md,
    "Cold start"), and every later one reuses them.
    """

    def __init__(self, build: Callable[[], Publisher]) -> None:
        self._built = functools.cache(build)  # kept once built; a build that raised is not kept

    def publish(self, event: Event) -> None:
        self._built().publish(event)


def build_changelog(deps: JobDeps) -> ChangeLog:
    """The change log of a club job whose environment grants the outbox, the queue and its own signing key.

    The grants are checked now (a function without them fails at its cold start, a `SettingsError`); the
    publisher is built on the first send (`PublisherOnFirstSend`)."""
    from jobs.club.stores.outbox import OutboxStore

    deps.settings.queue(NOTIFICATIONS_QUEUE)
    deps.settings.secret(signing_secret(deps.spec.name))

    def publisher() -> Publisher:
        from jobs.club.notifications import build_publisher

        return build_publisher(deps.settings, deps.session, deps.clock, NOTIFICATIONS_QUEUE, deps.spec.name)

    return ChangeLog(OutboxStore(deps.settings.table("club_outbox"), deps.clock), PublisherOnFirstSend(publisher))


def commit_plain(ctx: RunContext, operations: Sequence[Write]) -> bool:
    """A fenced transaction of record operations without events; False if a record condition failed."""
    try:
        with ctx.transaction() as tx:
            tx.add(*operations)
    except ConditionFailed:
        # Another run (or an earlier attempt of this one) already made this change.
        return False
    return True
