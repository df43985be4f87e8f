"""The Discord worker's logic: verify, claim the nonce, call Discord, settle the claim.

One SQS record at a time (the handler runs it under the Powertools batch
processor, so each record succeeds or fails on its own):

    body ─► verify (shape, HMAC, freshness) ── rejected ─► failure (to the DLQ after the receive cap; never Discord)
         ─► claim nonce (receipt = SQS message id) ── taken by another message ─► replay: acknowledged, dropped
         ─► Discord REST
               ok        ─► nonce done
               429       ─► release claim, message invisible for retry_after, failure (SQS delivers it again)
               other err ─► release claim, failure (normal visibility timeout)

Releasing the claim is what keeps the retried delivery of a rate-limited
message from being dropped as a replay; re-entrancy for the same message id
covers a worker that died between claim and settle.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import ClientError

from jobfence.errors import StoreError
from jobs.club.events import EventRejected, EventType, SignedEvent, Verifier
from jobs.club.stores.nonces import NonceStore
from providers.discord import Discord, DiscordError, DiscordRateLimited

MAX_VISIBILITY_S = 43_200  # SQS's limit


class Visibility(Protocol):
    """Hides a received message for a while (the SQS visibility timeout)."""

    def delay(self, receipt_handle: str, seconds: int) -> None: ...


class SqsVisibility:
    """ChangeMessageVisibility on the notification queue."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def delay(self, receipt_handle: str, seconds: int) -> None:
        try:
            self._client.change_message_visibility(QueueUrl=self._url, ReceiptHandle=receipt_handle,
                                                   VisibilityTimeout=seconds)
        except ClientError as exc:
            raise StoreError(f"changing message visibility failed: {exc.response['Error'].get('Code')}") from exc


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
        discord.post_message(p.channel_id, p.content)
    elif event.type is EventType.MESSAGE_EDIT:
        discord.edit_message(p.channel_id, p.message_id, p.content)
    elif event.type is EventType.DIRECT_NOTIFICATION:
        discord.send_direct(p.user_id, p.content)
    else:  # pragma: no cover - the verifier only admits the types above
        raise ValueError(f"unhandled event type {event.type}")


class DiscordDelivery:
    """Delivers one notification-queue record to Discord, at most once per nonce."""

    def __init__(self, verifier: Verifier, nonces: NonceStore, discord: Discord, visibility: Visibility,
                 logger: Logger, metrics: Metrics) -> None:
        self._verifier = verifier
        self._nonces = nonces
        self._discord = discord
        self._visibility = visibility
        self._logger = logger
        self._metrics = metrics

    def deliver(self, record: SQSRecord) -> str:
        """Process one record; return "delivered" or "replayed", or raise to report it as a batch failure."""
        try:
            event = self._verifier.verify(record.body)
        except EventRejected as exc:
            self._observe("rejected", reason=exc.reason.value, message_id=record.message_id, detail=str(exc))
            raise
        fields = {"type": event.type.value, "nonce": event.nonce, "message_id": record.message_id}
        if not self._nonces.claim(event.nonce, record.message_id):
            self._observe("replayed", **fields)
            return "replayed"
        try:
            apply(self._discord, event)
        except DiscordRateLimited as exc:
            self._nonces.release(event.nonce, record.message_id)
            seconds = visibility_for(exc.retry_after_s)
            self._visibility.delay(record.receipt_handle, seconds)
            self._observe("rate_limited", retry_after_s=seconds, **fields)
            raise
        except DiscordError as exc:
            self._nonces.release(event.nonce, record.message_id)
            self._observe("failed", error=str(exc), **fields)
            raise
        except Exception:
            self._nonces.release(event.nonce, record.message_id)
            raise
        self._nonces.complete(event.nonce, record.message_id)
        self._observe("delivered", **fields)
        return "delivered"

    def _observe(self, outcome: str, **fields: Any) -> None:
        # Type, nonce and ids only: never the payload (message text, user ids).
        log = self._logger.info if outcome in ("delivered", "replayed") else self._logger.warning
        log("discord_event", extra={"outcome": outcome, **fields})
        self._metrics.add_metric(name=f"discord_{outcome}", unit=MetricUnit.Count, value=1)
