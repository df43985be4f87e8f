"""The Discord worker's logic: verify, claim the nonce for this receive, call Discord, settle the claim.

One SQS record at a time (the handler runs it under the Powertools batch
processor, so each record succeeds or fails on its own):

    body ─► verify (size, shape, signer and key id, Ed25519 signature, freshness, the signer's grant)
               rejected ─► acknowledged, logged with its reason and counted (discord_rejected); never Discord
               key busy ─► an uncached kid the keyring may not re-read yet: not judged; the message is
                           hidden for the refresh interval and fails (discord_deferred), so SQS brings it back
         ─► claim nonce (token = this receive's receipt handle)
               done ─► replay: acknowledged, dropped
               busy ─► another receive holds a live claim: failure, not called (SQS brings it back; by then
                       the other receive has finished and it is a replay, or died and its claim expired)
         ─► Discord REST (a message post carries Discord's own nonce with enforce_nonce)
               ok        ─► nonce done (a failure to record that is logged and counted, never a reason to
                            call Discord again: the record is acknowledged)
               429       ─► release claim, message invisible for retry_after, failure (SQS delivers it again)
               other err ─► release claim, failure (normal visibility timeout)

A rejected message can never become valid (a forged or malformed body stays
so; a stale one only gets older; an unknown key id was re-read first; a
signer's grant is fixed at deploy), so it is acknowledged rather than retried
ten times into the DLQ.

Releasing the claim is what keeps the retried delivery of a rate-limited
message from being dropped as a replay. A store error while releasing or
delaying never masks Discord's error: it is logged and the claim simply
expires. What stays at-least-once (a worker that dies, or a Discord reply that
is lost, after Discord acted) is written down in docs/jobs.md.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from jobfence.dynamo import safe_error
from jobfence.errors import JobfenceError, StoreError
from jobs.club.events import EventRejected, EventType, SignedEvent, Verifier
from jobs.club.signing import REFRESH_MIN_MS, KeyringBusy
from jobs.club.stores.nonces import Claim, NonceStore
from providers.discord import Discord, discord_nonce
from providers.errors import ProviderError, ProviderThrottled

MAX_VISIBILITY_S = 43_200  # SQS's limit
KEYRING_BUSY_S = math.ceil(REFRESH_MIN_MS / 1000)  # a deferred message comes back once the keyring may re-read


class Visibility(Protocol):
    """Hides a received message for a while (the SQS visibility timeout)."""

    def delay(self, receipt_handle: str, seconds: int) -> None: ...


def visibility_for(retry_after_s: float) -> int:
    """Whole seconds to hide a message for a 429's retry_after (at least 1, at most SQS's limit)."""
    return max(1, min(math.ceil(retry_after_s), MAX_VISIBILITY_S))


def apply(discord: Discord, event: SignedEvent) -> None:
    """The one REST call an event stands for."""
    p: Any = event.payload
    if event.type is EventType.ROLE_ADD:
        discord.add_role(p.guild_id, p.user_id, p.role_id)
    elif event.type is EventType.ROLE_REMOVE:
        discord.remove_role(p.guild_id, p.user_id, p.role_id)
    elif event.type is EventType.MESSAGE_POST:
        discord.post_message(p.channel_id, p.content, nonce=discord_nonce(event.nonce))
    elif event.type is EventType.MESSAGE_EDIT:
        discord.edit_message(p.channel_id, p.message_id, p.content)
    elif event.type is EventType.DIRECT_NOTIFICATION:
        discord.send_direct(p.user_id, p.content, nonce=discord_nonce(event.nonce))
    else:  # pragma: no cover - the verifier only admits the types above
        raise ValueError(f"unhandled event type {event.type}")


class DeliveryBusy(JobfenceError):
    """Another receive of this event holds a live claim: Discord is not called; SQS brings the message back."""


def claim_token(receipt_handle: str) -> str:
    """The claim token of one receive: SQS gives every receive of a message its own receipt handle."""
    return hashlib.sha256(receipt_handle.encode()).hexdigest()[:32]


class DiscordDelivery:
    """Delivers one notification-queue record to Discord: at most once per nonce while the worker lives."""

    def __init__(
        self,
        verifier: Verifier,
        nonces: NonceStore,
        discord: Discord,
        visibility: Visibility,
        logger: Logger,
        metrics: Metrics,
    ) -> None:
        self._verifier = verifier
        self._nonces = nonces
        self._discord = discord
        self._visibility = visibility
        self._logger = logger
        self._metrics = metrics

    def deliver(self, record: SQSRecord) -> str:
        """Process one record; return "delivered", "replayed" or "rejected", or raise to report a batch failure."""
        try:
            event = self._verifier.verify(record.body)
        except EventRejected as exc:
            # The detail is bounded by the verifier; the message id is SQS's, not the caller's.
            self._observe("rejected", reason=exc.reason.value, message_id=record.message_id, detail=str(exc))
            return "rejected"
        except KeyringBusy:
            self._delay(record.receipt_handle, KEYRING_BUSY_S, {"message_id": record.message_id})
            self._observe("deferred", message_id=record.message_id, retry_after_s=KEYRING_BUSY_S)
            raise
        fields = {
            "type": event.type.value,
            "signer": event.signer,
            "nonce": event.nonce,
            "message_id": record.message_id,
        }
        token = claim_token(record.receipt_handle)
        claim = self._nonces.claim(event.nonce, token, record.message_id)
        if claim is Claim.DONE:
            self._observe("replayed", **fields)
            return "replayed"
        if claim is Claim.BUSY:
            self._observe("busy", **fields)
            raise DeliveryBusy(f"event {event.nonce} is being delivered by another receive")
        try:
            apply(self._discord, event)
        except ProviderThrottled as exc:
            self._release(event.nonce, token, fields)
            seconds = visibility_for(exc.retry_after_s)
            self._delay(record.receipt_handle, seconds, fields)
            self._observe("rate_limited", retry_after_s=seconds, **fields)
            raise
        except ProviderError as exc:
            self._release(event.nonce, token, fields)
            self._observe("failed", error=str(exc), **fields)
            raise
        except Exception:
            self._release(event.nonce, token, fields)
            raise
        # Discord accepted: from here on nothing may make this record fail, or SQS would bring it back
        # and Discord would be called again.
        try:
            if not self._nonces.complete(event.nonce, token):
                self._observe("claim_overtaken", **fields)  # our claim expired mid-call and another receive took it
        except Exception as exc:  # noqa: BLE001 - after Discord acted, no error may turn into a resend
            self._observe("done_mark_failed", error=safe_error(exc), **fields)
        self._observe("delivered", **fields)
        return "delivered"

    def _delay(self, receipt_handle: str, seconds: int, fields: dict[str, Any]) -> None:
        try:
            self._visibility.delay(receipt_handle, seconds)
        except StoreError as exc:
            # the message comes back after the normal visibility timeout instead: later, never lost
            self._observe("delay_failed", error=str(exc), **fields)

    def _release(self, nonce: str, token: str, fields: dict[str, Any]) -> None:
        """Give the claim back; a store error here must not mask Discord's error (the claim then expires)."""
        try:
            self._nonces.release(nonce, token)
        except StoreError as exc:
            self._observe("release_failed", error=str(exc), **fields)

    def dropped(self, count: int) -> None:
        """Records without a message id or body (a hand-made event): logged and counted as rejected."""
        self._logger.warning(
            "discord_event",
            extra={
                "outcome": "rejected",
                "reason": "malformed",
                "detail": f"{count} record(s) without messageId or body",
            },
        )
        self._metrics.add_metric(name="discord_rejected", unit=MetricUnit.Count, value=count)

    def _observe(self, outcome: str, **fields: Any) -> None:
        # Type, nonce and ids only: never the payload (message text, user ids).
        log = self._logger.info if outcome in ("delivered", "replayed") else self._logger.warning
        log("discord_event", extra={"outcome": outcome, **fields})
        self._metrics.add_metric(name=f"discord_{outcome}", unit=MetricUnit.Count, value=1)
