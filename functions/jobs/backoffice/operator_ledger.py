"""Store of the backoffice operator-access ledger: who used operator access, when, until when.

    entry_id (key) | operator_id | action | session_digest | at | expires_at | expiry_shard | ttl

The ledger records a SHA-256 digest of the operator session, never the session
itself, and no method returns a digest, so nothing read from this table can
expose an operator session. Readers apply live expiry.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import aws_call, get_row, put_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live


class _Entry(Model):
    class Meta:
        table_name = "unbound"

    entry_id = UnicodeAttribute(hash_key=True)
    operator_id = UnicodeAttribute()
    action = UnicodeAttribute()
    session_digest = UnicodeAttribute()
    at = NumberAttribute()
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute()
    ttl = NumberAttribute()
    by_expiry = expiry_index()


class OperatorLedgerStore(ModelStore):
    """Record operator access, read live entries (without digests), delete expired ones."""

    _model_class = _Entry

    def record(self, entry_id: str, operator_id: str, action: str, session: str, expires_at: int) -> None:
        row = self._model(
            entry_id,
            operator_id=operator_id,
            action=action,
            session_digest=hashlib.sha256(session.encode()).hexdigest(),
            at=self._clock.now_ms(),
            expires_at=expires_at,
            expiry_shard=expiry_shard(entry_id),
            ttl=ttl_seconds(expires_at),
        )
        put_row(row, None, "recording an operator access")

    def get(self, entry_id: str) -> dict[str, Any] | None:
        """A live entry's operator, action and time; never the session digest."""
        row = get_row(self._model, entry_id, what="reading a row of operator_ledger")
        if row is None:
            return None
        if not is_live(row, self._clock.now_ms()):
            return None
        return {"entry_id": row.entry_id, "operator_id": row.operator_id, "action": row.action, "at": int(row.at)}

    def delete_expired(self, limit: int) -> int:
        """Delete up to `limit` expired entries (BatchWriteItem: entries are append-only, never extended)."""
        rows = list(expired(self._model, self._clock.now_ms(), limit))
        with aws_call("deleting expired operator accesses"), self._model.batch_write() as batch:
            for row in rows:
                batch.delete(self._model(row.entry_id))
        return len(rows)
