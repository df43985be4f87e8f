"""Store of photographer requests (`club_photo_requests`): open requests expire after a while.

    request_id (key) | title | status | expires_at | expiry_shard | public_status | discord_status
    | channel_id | message_id | expired_at

`expiry_shard` exists only while the request is open, so the sparse
`by_expiry` index (jobfence.expiry) lists the requests that can expire and
nothing else.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import get_row, put_row
from jobfence.expiry import expired, expiry_index, expiry_shard
from jobfence.transaction import Write, update_write
from jobs.club.stores.states import RowRef, state_of


class RequestStatus(str, enum.Enum):
    """Lifecycle of a photographer request."""

    OPEN = "open"  # created by a member
    FILLED = "filled"  # set by staff when a photographer took it; never expires
    EXPIRED = "expired"  # set by expire_photographer_requests once expires_at has passed; terminal


class PublicStatus(str, enum.Enum):
    LISTED = "listed"  # shown on the public request board
    CLOSED = "closed"  # hidden from the public board


class DiscordStatus(str, enum.Enum):
    POSTED = "posted"  # the request message is live in Discord
    MARKED_EXPIRED = "marked_expired"  # the message was edited to say the request expired


class _Request(Model):
    class Meta:
        table_name = "unbound"

    request_id = UnicodeAttribute(hash_key=True)
    title = UnicodeAttribute()
    status = UnicodeAttribute()
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute(null=True)
    public_status = UnicodeAttribute()
    discord_status = UnicodeAttribute()
    channel_id = UnicodeAttribute()
    message_id = UnicodeAttribute()
    expired_at = NumberAttribute(null=True)
    by_expiry = expiry_index()


@dataclass(frozen=True)
class PhotoRequest:
    """One photographer request as read, built by the store from its row."""

    request_id: str
    title: str
    status: RequestStatus
    public_status: PublicStatus
    discord_status: DiscordStatus
    expires_at: int
    channel_id: str
    message_id: str


def _request(row: _Request) -> PhotoRequest:
    where = RowRef("club_photo_requests", row.request_id)
    return PhotoRequest(
        request_id=row.request_id,
        title=row.title,
        status=state_of(RequestStatus, row.status, where, "status"),
        public_status=state_of(PublicStatus, row.public_status, where, "public_status"),
        discord_status=state_of(DiscordStatus, row.discord_status, where, "discord_status"),
        expires_at=int(row.expires_at),
        channel_id=row.channel_id,
        message_id=row.message_id,
    )


class PhotoRequestStore(ModelStore):
    """Find requests that can expire and build the expiry update."""

    _model_class = _Request

    def put(self, request_id: str, title: str, expires_at: int, channel_id: str, message_id: str) -> None:
        put_row(
            self._model(
                request_id,
                title=title,
                status=RequestStatus.OPEN.value,
                expires_at=expires_at,
                expiry_shard=expiry_shard(request_id),
                public_status=PublicStatus.LISTED.value,
                discord_status=DiscordStatus.POSTED.value,
                channel_id=channel_id,
                message_id=message_id,
            ),
            None,
            f"recording photo request {request_id}",
        )

    def get(self, request_id: str) -> PhotoRequest | None:
        row = get_row(self._model, request_id, what="reading a row of photo_requests")
        return None if row is None else _request(row)

    def expirable(self, now_ms: int, limit: int) -> list[str]:
        """Ids of open requests past their expiry (from the sparse index; may be stale)."""
        return [row.request_id for row in expired(self._model, now_ms, limit)]

    def expire_op(self, request_id: str, now_ms: int) -> Write:
        """Expire an open, overdue request and take it off the public board."""
        m = self._model
        actions = [
            m.status.set(RequestStatus.EXPIRED.value),
            m.public_status.set(PublicStatus.CLOSED.value),
            m.discord_status.set(DiscordStatus.MARKED_EXPIRED.value),
            m.expired_at.set(now_ms),
            m.expiry_shard.remove(),
        ]
        condition = (m.status == RequestStatus.OPEN.value) & (m.expires_at <= now_ms)
        return update_write(m(request_id), actions, condition)
