"""Store of conversations: rows with an expiry, hidden from readers once expired."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import aws_call, caller_reads, delete_row, get_row, put_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live


class _Conversation(Model):
    class Meta:
        table_name = "unbound"

    conversation_id = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute()
    ttl = NumberAttribute()
    by_expiry = expiry_index()


class ConversationStore(ModelStore):
    """Open, read (live only) and delete expired conversations."""

    _model_class = _Conversation

    def open(self, conversation_id: str, account_id: str, expires_at: int) -> None:
        """Create or extend a conversation."""
        put_row(self._row(conversation_id, account_id, expires_at), None, f"opening conversation {conversation_id}")

    def load(self, conversations: Iterable[tuple[str, str, int]]) -> int:
        """Bulk-load (conversation_id, account_id, expires_at) rows (seeding a demo or a simulation); how many."""
        count = 0
        with aws_call("bulk-loading conversations"), self._model.batch_write() as batch:
            for conversation_id, account_id, expires_at in conversations:
                batch.save(self._row(conversation_id, account_id, expires_at))
                count += 1
        return count

    def _row(self, conversation_id: str, account_id: str, expires_at: int) -> Any:
        return self._model(
            conversation_id,
            account_id=account_id,
            expires_at=expires_at,
            expiry_shard=expiry_shard(conversation_id),
            ttl=ttl_seconds(expires_at),
        )

    def get(self, conversation_id: str) -> Any | None:
        """The conversation if it exists and has not expired (live expiry)."""
        row = get_row(self._model, conversation_id, what="reading a row of conversations")
        if row is None:
            return None
        return row if is_live(row, self._clock.now_ms()) else None

    def delete_expired(self, limit: int) -> int:
        """One bounded deletion of at most `limit` expired conversations.

        Each delete is conditioned on the row still being expired, so a
        conversation extended after the index read is never removed.
        """
        now = self._clock.now_ms()
        deleted = 0
        for row in list(expired(self._model, now, limit)):
            deleted += delete_row(
                self._model(row.conversation_id),
                self._model.expires_at <= now,
                "deleting a conversation",
                ours=caller_reads,  # refused: extended since, or already gone (not counted)
            ).applied
        return deleted
