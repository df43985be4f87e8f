"""The SQS adapters of the club's ports (every SQS call a club job or worker makes goes through one):

    SqsNotificationQueue  jobs.club.notifications.NotificationQueue   one signed Discord event
    SqsVisibility         jobs.club.delivery.Visibility               hide a received message for a while

The durable batches' wake-ups have their own adapter, in the runtime: `jobfence.work.sqs.SqsWakeups`
(a club function does not load it, nor `jobfence.work`, at init). The
fake of the notification queue lives beside its port (`MemoryNotificationQueue`).
"""

from __future__ import annotations

from typing import Any

from jobfence.dynamo import raise_store_error


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
            self._client.change_message_visibility(
                QueueUrl=self._url, ReceiptHandle=receipt_handle, VisibilityTimeout=seconds
            )
        except Exception as exc:
            raise_store_error(exc, "changing message visibility")
