"""`expire_photographer_requests` (seed 002): expire open requests past their expiry.

Only open requests can expire (filled ones are never listed in the sparse
index); each expiry takes the request off the public board and edits its
Discord message, in one fenced transaction with the edit event.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from aws_lambda_powertools import Logger

from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import ChangeLog, build_changelog
from jobs.club.events import Event, EventType, nonce_for
from jobs.club.stores.photo_requests import PhotoRequestStore, RequestStatus
from jobs.club.sweep import ExpiryOutcome, InvalidRows, sweep

BATCH = 25
MAX_BATCHES = 40


def expire_photographer_requests(
    requests: PhotoRequestStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Expire overdue open requests and mark their Discord messages as expired."""

    def handle(request_id: str, now: int) -> ExpiryOutcome:
        row = requests.get(request_id)
        if row is None or row.status is not RequestStatus.OPEN or row.expires_at > now:
            return ExpiryOutcome.SKIPPED
        event = Event.build(
            EventType.MESSAGE_EDIT,
            nonce_for(ctx.job, request_id),
            channel_id=row.channel_id,
            message_id=row.message_id,
            content=f"~~{row.title}~~\nThis request has expired.",
        )
        expired = changes.commit(ctx, [requests.expire_op(request_id, now)], [event])
        return ExpiryOutcome.EXPIRED if expired else ExpiryOutcome.SKIPPED

    progress = {ExpiryOutcome.EXPIRED}
    invalid = InvalidRows(logger, ctx.job)
    return sweep(changes, ctx, invalid, requests.expirable, handle, ExpiryOutcome, progress, BATCH, MAX_BATCHES)


def build_expire_photographer_requests(deps: JobDeps):
    requests = PhotoRequestStore(deps.settings.table("club_photo_requests"), deps.clock)
    changes = build_changelog(deps)
    return lambda ctx: expire_photographer_requests(requests, changes, ctx, deps.logger)
