"""Store of claimed event nonces (`club_event_nonces`): the Discord worker's replay guard.

    nonce (key) | state | token (claim token of one receive) | message_id | claimed_at | claim_expires_at | ttl

A claim belongs to one *receive* of a message, not to the message: SQS may hand
the same message to two consumers at once (at-least-once delivery), and both
see the same message id, but each receive has its own receipt handle, from
which the worker derives its claim token. Timeline of one event:

    claim(n, T1)    put if absent                          -> claimed by T1 until claim_expires_at
    claim(n, T1)    again (botocore re-sent a lost put)    -> still T1's: goes on
    claim(n, T2)    concurrent receive, or another message
                    with the same nonce, while T1's claim lives -> BUSY: not called, retried later
    claim(n, T2)    after T1's claim expired (T1 died)     -> T2 takes it over
    release(n, T1)  on 429 / Discord error                 -> absent again, so the retry is not a replay
    complete(n, T1) after Discord accepted                 -> done; any later claim is DONE (a replay)

A claim lives `CLAIM_TTL_MS`: longer than the worker's timeout plus the clock
margin (a live holder is never overtaken, even by a worker whose clock runs
ahead) and shorter than the queue's visibility timeout (the redelivery of a
message whose worker died finds the claim expired). The row's
TTL outlives the verifier's freshness window, so by the time a nonce row is
deleted any message carrying it is already rejected as stale.
"""

from __future__ import annotations

import enum

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.clock import Clock, ttl_seconds
from jobfence.dynamo import caller_reads, delete_row, get_row, put_row, update_row

NONCE_TTL_MS = 24 * 3_600_000
CLAIM_TTL_MS = 120_000  # > the worker's 30 s timeout + the 60 s clock margin; < the queue's 180 s visibility


class NonceState(str, enum.Enum):
    """State of one event's nonce."""

    CLAIMED = "claimed"  # the Discord worker, before calling Discord; released by it on 429 or error, or expires
    DONE = "done"  # the Discord worker, after Discord accepted the change; terminal until the TTL


class Claim(enum.Enum):
    """What a claim attempt found."""

    CLAIMED = "claimed"  # this receive may call Discord
    DONE = "done"  # the event was already delivered: a replay, acknowledge and drop
    BUSY = "busy"  # another receive holds a live claim: do not call Discord, let SQS bring it back later


class _Nonce(Model):
    class Meta:
        table_name = "unbound"

    nonce = UnicodeAttribute(hash_key=True)
    state = UnicodeAttribute()
    token = UnicodeAttribute()
    message_id = UnicodeAttribute(null=True)
    claimed_at = NumberAttribute()
    claim_expires_at = NumberAttribute()
    ttl = NumberAttribute()


class NonceStore(ModelStore):
    """Claim, release and complete nonces with conditional writes."""

    _model_class = _Nonce

    def __init__(self, table_name: str, clock: Clock, claim_ttl_ms: int = CLAIM_TTL_MS) -> None:
        super().__init__(table_name, clock)
        self._claim_ttl_ms = claim_ttl_ms

    def claim(self, nonce: str, token: str, message_id: str | None = None) -> Claim:
        """Claim the event for this receive; DONE for a replay, BUSY while another receive holds it."""
        m = self._model
        now = self._clock.now_ms()
        row = m(
            nonce,
            state=NonceState.CLAIMED.value,
            token=token,
            message_id=message_id,
            claimed_at=now,
            claim_expires_at=now + self._claim_ttl_ms,
            ttl=ttl_seconds(now + NONCE_TTL_MS),
        )
        claimed = m.state == NonceState.CLAIMED.value
        mine_or_expired = (m.token == token) | (m.claim_expires_at < now)
        # a copy re-sent after a lost reply re-applies (mine): a refusal is another receive's live claim, or done
        outcome = put_row(
            row, m.nonce.does_not_exist() | (claimed & mine_or_expired), "claiming an event nonce", ours=caller_reads
        )
        if outcome.applied:
            return Claim.CLAIMED
        return Claim.DONE if outcome.item.get("state") == NonceState.DONE.value else Claim.BUSY

    def release(self, nonce: str, token: str) -> None:
        """Give the claim back so this delivery's retry can claim it again (no-op if it is not ours)."""
        m = self._model
        mine = (m.state == NonceState.CLAIMED.value) & (m.token == token)
        delete_row(m(nonce), mine, "releasing an event nonce", ours=caller_reads)  # refused: not ours (any more)

    def complete(self, nonce: str, token: str) -> bool:
        """Mark the event done; False if the claim was not ours any more (it expired and was taken over).

        A retry whose first try was applied is refused by state = done, and is the same success.
        """
        m = self._model
        return update_row(
            m(nonce),
            [m.state.set(NonceState.DONE.value)],
            (m.state == NonceState.CLAIMED.value) & (m.token == token),
            "completing an event nonce",
            ours=lambda seen: seen.get("state") == NonceState.DONE.value,
        ).applied

    def state(self, nonce: str) -> str | None:
        """The nonce's state (strongly consistent), None if it has none; a read error is a `StoreError`."""
        row = get_row(self._model, nonce, what="reading an event nonce")
        return None if row is None else row.state
