"""Membership jobs of seed 002: `expire_memberships` and `reconcile_membership_roles`.

Both write a membership only over the `roles_version` they read, in the same
fenced transaction as the role events that change implies, so two runs (or
the two jobs racing each other) never apply or announce a change twice.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import ChangeLog, build_changelog
from jobs.club.events import Event, EventType, nonce_for
from jobs.club.stores.memberships import Membership, MembershipStatus, MembershipStore
from jobs.club.stores.receipts import ReceiptStore
from jobs.club.sweep import ExpiryOutcome, InvalidRows, sweep

BATCH = 25
MAX_BATCHES = 40


@dataclass(frozen=True)
class ReconcileCounts:
    """One page of `reconcile_membership_roles` (every field in the run row)."""

    members: int  # memberships read (those in an unknown state included)
    changed: int  # roles recorded and their events saved, in one transaction
    matched: int  # already what the receipts grant
    conflicts: int  # changed by someone else since the read: the next run looks again
    events: int  # events sent by this page's flush (and, on the first, an interrupted run's)
    invalid: int  # in an unknown state (`InvalidRows`): logged, left as they are

    def summary(self) -> dict[str, int]:
        return asdict(self)


def _role_event(ctx: RunContext, row: Membership, type_: EventType, role_id: str) -> Event:
    # One change of one member's roles: (job, member, version read, op, role) names it exactly once.
    nonce = nonce_for(ctx.job, row.member_id, row.roles_version, type_.value, role_id)
    return Event.build(type_, nonce, guild_id=row.guild_id, user_id=row.discord_user_id, role_id=role_id)


def expire_memberships(
    memberships: MembershipStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Expire memberships that have ended: access off, roles removed (events), out of the active index."""

    def handle(member_id: str, now: int) -> ExpiryOutcome:
        row = memberships.get(member_id)
        if row is None or row.status is not MembershipStatus.ACTIVE or row.ends_at > now:
            return ExpiryOutcome.SKIPPED  # a stale index entry, or renewed since
        events = [_role_event(ctx, row, EventType.ROLE_REMOVE, role) for role in row.roles]
        expired = changes.commit(ctx, [memberships.expire_op(row, now)], events)
        return ExpiryOutcome.EXPIRED if expired else ExpiryOutcome.SKIPPED

    progress = {ExpiryOutcome.EXPIRED}
    invalid = InvalidRows(logger, ctx.job)
    return sweep(changes, ctx, invalid, memberships.ended, handle, ExpiryOutcome, progress, BATCH, MAX_BATCHES)


def reconcile_membership_roles(
    memberships: MembershipStore, receipts: ReceiptStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Make each member's applied roles equal the roles their valid receipts grant; only differences emit events."""
    invalid = InvalidRows(logger, ctx.job)
    sent = changes.flush(ctx)
    cursor = None
    for n in range(1, MAX_BATCHES + 1):
        rows, cursor = memberships.page(cursor, BATCH)
        now = ctx.now_ms()
        changed = matched = conflicts = 0
        for row in invalid.views(rows):  # a membership in an unknown state is passed over, the page goes on
            active = row.status is MembershipStatus.ACTIVE
            desired = receipts.granted_roles(row.member_id, now) if active else set()
            applied = set(row.roles)
            if desired == applied:
                matched += 1
                continue
            events = [_role_event(ctx, row, EventType.ROLE_ADD, r) for r in sorted(desired - applied)]
            events += [_role_event(ctx, row, EventType.ROLE_REMOVE, r) for r in sorted(applied - desired)]
            if changes.commit(ctx, [memberships.set_roles_op(row, desired)], events):
                changed += 1
            else:
                conflicts += 1  # changed by someone else since we read it; the next run looks again
        sent += changes.flush(ctx)
        counts = ReconcileCounts(len(rows), changed, matched, conflicts, sent, invalid.taken()).summary()
        if cursor is None or n == MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts
        sent = 0


def build_expire_memberships(deps: JobDeps):
    memberships = MembershipStore(deps.settings.table("club_memberships"), deps.clock)
    changes = build_changelog(deps)
    return lambda ctx: expire_memberships(memberships, changes, ctx, deps.logger)


def build_reconcile_membership_roles(deps: JobDeps):
    memberships = MembershipStore(deps.settings.table("club_memberships"), deps.clock)
    receipts = ReceiptStore(deps.settings.table("club_receipts"), deps.clock)
    changes = build_changelog(deps)
    return lambda ctx: reconcile_membership_roles(memberships, receipts, changes, ctx, deps.logger)
