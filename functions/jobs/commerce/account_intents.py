"""Store of account intents: unconfirmed requests (sign-up, email confirmation) with an expiry.

    intent_id (key) | account_id | kind | status | expires_at | expiry_shard | ttl

An unconfirmed intent sits in the sparse `by_expiry` index (it carries
`expiry_shard`); confirming or expiring it removes `expiry_shard`, so the index
holds only intents that may still need expiring. Readers apply live expiry: an
unconfirmed intent past `expires_at` reads as expired even before recovery
marks it, also for rows restored from a backup.
"""

from __future__ import annotations

import enum

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import ttl_seconds
from jobfence.dynamo import get_row, put_row, update_row
from jobfence.expiry import expired, expiry_index, expiry_shard, is_live

KEEP_EXPIRED_MS = 30 * 24 * 3_600_000  # DynamoDB TTL removes the row this long after it expired


class IntentStatus(str, enum.Enum):
    """Lifecycle of an account intent."""

    UNCONFIRMED = "unconfirmed"  # created by the API; the customer's confirmation link moves it on
    CONFIRMED = "confirmed"  # terminal: the customer confirmed before expires_at
    EXPIRED = "expired"  # terminal: recover_financial_operations marked it after expires_at


class _Intent(Model):
    class Meta:
        table_name = "unbound"

    intent_id = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    kind = UnicodeAttribute()
    status = UnicodeAttribute()
    expires_at = NumberAttribute()
    expiry_shard = UnicodeAttribute(null=True)
    ttl = NumberAttribute()
    by_expiry = expiry_index()


class AccountIntentStore(ModelStore):
    """Create, read (live), confirm and expire account intents."""

    _model_class = _Intent

    def create(self, intent_id: str, account_id: str, kind: str, expires_at: int) -> None:
        put_row(
            self._model(
                intent_id,
                account_id=account_id,
                kind=kind,
                status=IntentStatus.UNCONFIRMED.value,
                expires_at=expires_at,
                expiry_shard=expiry_shard(intent_id),
                ttl=ttl_seconds(expires_at + KEEP_EXPIRED_MS),
            ),
            None,
            f"creating intent {intent_id}",
        )

    def status(self, intent_id: str) -> IntentStatus | None:
        """The intent's effective status (live expiry applied), or None if unknown."""
        row = get_row(self._model, intent_id, what="reading a row of account_intents")
        if row is None:
            return None
        status = IntentStatus(row.status)
        if status is IntentStatus.UNCONFIRMED and not is_live(row, self._clock.now_ms()):
            return IntentStatus.EXPIRED
        return status

    def confirm(self, intent_id: str) -> bool:
        """The customer confirms: only an unconfirmed intent that has not expired."""
        model = self._model
        return update_row(
            model(intent_id),
            [model.status.set(IntentStatus.CONFIRMED.value), model.expiry_shard.remove()],
            (model.status == IntentStatus.UNCONFIRMED.value) & (model.expires_at > self._clock.now_ms()),
            f"confirming intent {intent_id}",
        ).applied

    def expire_due(self, limit: int) -> tuple[int, int]:
        """Mark up to `limit` expired unconfirmed intents expired; return (expired, scanned).

        Each update is conditioned on the intent still being unconfirmed and
        expired, so a second run (or a confirmation that won) changes nothing.
        """
        model = self._model
        now = self._clock.now_ms()
        rows = list(expired(model, now, limit))
        changed = 0
        for row in rows:
            changed += update_row(
                model(row.intent_id),
                [model.status.set(IntentStatus.EXPIRED.value), model.expiry_shard.remove()],
                (model.status == IntentStatus.UNCONFIRMED.value) & (model.expires_at <= now),
                f"expiring intent {row.intent_id}",
            ).applied
        return changed, len(rows)
