"""Store of claimed event nonces (`club_event_nonces`): the Discord worker's replay guard.

    nonce (key) | state | receipt (SQS message id of the claiming delivery) | claimed_at | ttl

Timeline of one event (receipt R = the SQS message id, stable across redeliveries):

    claim(n, R)     put if absent                 -> claimed by R
    claim(n, R)     again (redelivery after crash) -> still R's: re-entrant, goes on
    claim(n, R2)    another message, same nonce   -> refused: a replay, never reaches Discord
    release(n, R)   on 429 / Discord error        -> absent again, so R's retry is not a replay
    complete(n, R)  after Discord accepted        -> done; any later claim is refused

The TTL outlives the verifier's freshness window, so by the time a nonce row
is deleted any message carrying it is already rejected as stale.
"""

from __future__ import annotations

import enum
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DeleteError, PutError, UpdateError
from pynamodb.models import Model

from jobfence.clock import Clock, ttl_seconds
from jobfence.dynamo import bind
from jobfence.errors import StoreError

CONDITION_FAILED = "ConditionalCheckFailedException"
NONCE_TTL_MS = 24 * 3_600_000


class NonceState(str, enum.Enum):
    """State of one event's nonce."""

    CLAIMED = "claimed"  # the Discord worker, before calling Discord; released by it on 429 or error
    DONE = "done"  # the Discord worker, after Discord accepted the change; terminal until the TTL


class _Nonce(Model):
    class Meta:
        table_name = "unbound"

    nonce = UnicodeAttribute(hash_key=True)
    state = UnicodeAttribute()
    receipt = UnicodeAttribute()
    claimed_at = NumberAttribute()
    ttl = NumberAttribute()


class NonceStore:
    """Claim, release and complete nonces with conditional writes."""

    def __init__(self, table_name: str, clock: Clock) -> None:
        self.model: Any = bind(_Nonce, table_name)
        self._clock = clock

    def claim(self, nonce: str, receipt: str) -> bool:
        """True if this delivery may act on the event; False if it is a replay."""
        m = self.model
        now = self._clock.now_ms()
        row = m(nonce, state=NonceState.CLAIMED.value, receipt=receipt, claimed_at=now, ttl=ttl_seconds(now + NONCE_TTL_MS))
        mine = (m.state == NonceState.CLAIMED.value) & (m.receipt == receipt)
        try:
            row.save(condition=m.nonce.does_not_exist() | mine)
        except PutError as exc:
            if exc.cause_response_code == CONDITION_FAILED:
                return False
            raise StoreError(f"claiming an event nonce failed: {exc.cause_response_code}") from exc
        return True

    def release(self, nonce: str, receipt: str) -> None:
        """Give the claim back so this delivery's retry can claim it again."""
        m = self.model
        try:
            m(nonce).delete(condition=(m.state == NonceState.CLAIMED.value) & (m.receipt == receipt))
        except DeleteError as exc:
            if exc.cause_response_code != CONDITION_FAILED:
                raise StoreError(f"releasing an event nonce failed: {exc.cause_response_code}") from exc

    def complete(self, nonce: str, receipt: str) -> None:
        """Mark the event done: from now on every delivery of it is a replay."""
        m = self.model
        try:
            m(nonce).update(actions=[m.state.set(NonceState.DONE.value)],
                            condition=(m.state == NonceState.CLAIMED.value) & (m.receipt == receipt))
        except UpdateError as exc:
            if exc.cause_response_code != CONDITION_FAILED:
                raise StoreError(f"completing an event nonce failed: {exc.cause_response_code}") from exc

    def state(self, nonce: str) -> str | None:
        try:
            return self.model.get(nonce, consistent_read=True).state
        except self.model.DoesNotExist:
            return None
