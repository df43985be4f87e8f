"""`expire_photographer_requests` (seed 002): expire open requests past their expiry.

Only open requests can expire (filled ones are never listed in the sparse
index); each expiry takes the request off the public board and edits its
Discord message, in one fenced transaction with the edit event.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jobfence.batch import LastBatch
from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import ChangeLog, build_changelog
from jobs.club.events import Event, EventType, nonce_for
from jobs.club.stores.photo_requests import PhotoRequestStore, RequestStatus
from jobs.club.sweep import sweep

BATCH = 25
MAX_BATCHES = 40


def expire_photographer_requests(
    requests: PhotoRequestStore, changes: ChangeLog, ctx: RunContext
) -> Iterator[dict[str, Any] | LastBatch]:
    """Expire overdue open requests and mark their Discord messages as expired."""

    def handle(request_id: str, now: int) -> str:
        row = requests.get(request_id)
        if row is None or row.status != RequestStatus.OPEN.value or int(row.expires_at) > now:
            return "skipped"
        event = Event.build(
            EventType.MESSAGE_EDIT,
            nonce_for(ctx.job, request_id),
            channel_id=row.channel_id,
            message_id=row.message_id,
            content=f"~~{row.title}~~\nThis request has expired.",
        )
        return "expired" if changes.commit(ctx, [requests.expire_op(request_id, now)], [event]) else "skipped"

    return sweep(changes, ctx, requests.expirable, handle, ("expired", "skipped"), ("expired",), BATCH, MAX_BATCHES)


def build_expire_photographer_requests(deps: JobDeps):
    requests = PhotoRequestStore(deps.settings.table("club_photo_requests"), deps.clock)
    changes = build_changelog(deps)
    return lambda ctx: expire_photographer_requests(requests, changes, ctx)
