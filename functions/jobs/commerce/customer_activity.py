"""Store of customer activity: one row per event, expiring 30 days after it happened.

    account_id (key) | activity_id (sort: zero-padded at + "#" + id) | kind | at | expires_at | expiry_shard | ttl

Only activity rows live here; orders and payment records are other tables and
are never touched by activity expiry. Readers apply live expiry.
"""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import aws_call, each_row, put_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live

ACTIVITY_RETENTION_MS = 30 * 24 * 3_600_000


class _Activity(Model):
    class Meta:
        table_name = "unbound"

    account_id = UnicodeAttribute(hash_key=True)
    activity_id = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute()
    at = NumberAttribute()
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute()
    ttl = NumberAttribute()
    by_expiry = expiry_index()


class CustomerActivityStore(ModelStore):
    """Record activity, read the live part, delete what is older than 30 days."""

    _model_class = _Activity

    def record(self, account_id: str, event_id: str, kind: str, at: int) -> None:
        expires_at = at + ACTIVITY_RETENTION_MS
        put_row(
            self._model(
                account_id,
                f"{at:015d}#{event_id}",
                kind=kind,
                at=at,
                expires_at=expires_at,
                expiry_shard=expiry_shard(f"{account_id}#{event_id}"),
                ttl=ttl_seconds(expires_at),
            ),
            None,
            f"recording activity of account {account_id}",
        )

    def recent(self, account_id: str, limit: int = 100) -> list[Any]:
        """The account's live activity, newest first."""
        now = self._clock.now_ms()
        rows = self._model.query(account_id, scan_index_forward=False, limit=limit)
        return [row for row in each_row(rows, f"reading the activity of account {account_id}") if is_live(row, now)]

    def delete_expired(self, limit: int) -> int:
        """Delete up to `limit` rows older than 30 days (BatchWriteItem: activity is append-only, never extended)."""
        rows = list(expired(self._model, self._clock.now_ms(), limit))
        with aws_call("deleting expired activity"), self._model.batch_write() as batch:
            for row in rows:
                batch.delete(self._model(row.account_id, row.activity_id))
        return len(rows)
