"""The SQS adapters: every call the runtime and the jobs make to SQS goes through one of these.

Each implements a port its caller declares:

    SqsWakeups            jobfence.work.wakeups.Wakeups        an item's wake-up, 10 to a SendMessageBatch
    SqsNotificationQueue  jobs.club.notifications.NotificationQueue   one signed Discord event
    SqsVisibility         jobs.club.delivery.Visibility         hide a received message for a while

The fakes of these ports live beside the ports (`MemoryNotificationQueue`) or in
the harness (`ops.harness.MemoryQueue`).
"""

from __future__ import annotations

from typing import Any, Sequence

from jobfence.dynamo import raise_store_error
from jobfence.work.keys import SEND_CHUNK, ItemKey

MAX_DELAY_S = 900  # SQS's DelaySeconds limit


class SqsWakeups:
    """Wake-ups on an SQS queue, 10 to a SendMessageBatch request.

    Each carries its tenant as `MessageGroupId`. On a standard queue that makes
    it a fair queue: when one tenant has a backlog, SQS delivers the other
    tenants' messages ahead of it (ordering and deduplication stay those of a
    standard queue). The per-tenant in-flight cap is `jobfence.work.fairness`.
    """

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        failed: list[ItemKey] = []
        for start in range(0, len(keys), SEND_CHUNK):
            chunk = list(keys[start:start + SEND_CHUNK])
            entries = [
                {"Id": str(i), "MessageBody": key.body(), "MessageGroupId": key.tenant,
                 "DelaySeconds": max(0, min(int(delay_s), MAX_DELAY_S))}
                for i, key in enumerate(chunk)
            ]
            try:
                out = self._client.send_message_batch(QueueUrl=self._url, Entries=entries)
            except Exception:  # noqa: BLE001 - the caller decides; the rows stay the truth
                failed += chunk
                continue
            failed += [chunk[int(f["Id"])] for f in out.get("Failed", [])]
        return failed


class SqsNotificationQueue:
    """The notification SQS queue."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def send(self, body: str) -> None:
        try:
            self._client.send_message(QueueUrl=self._url, MessageBody=body)
        except Exception as exc:
            raise_store_error(exc, "sending to the notification queue")


class SqsVisibility:
    """ChangeMessageVisibility on the notification queue."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def delay(self, receipt_handle: str, seconds: int) -> None:
        try:
            self._client.change_message_visibility(QueueUrl=self._url, ReceiptHandle=receipt_handle,
                                                   VisibilityTimeout=seconds)
        except Exception as exc:
            raise_store_error(exc, "changing message visibility")
