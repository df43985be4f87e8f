"""The notification queue port: where signed Discord events go, and the one way to send one.

Jobs send through `NotificationQueue` (never boto3 directly). `providers.sqs.SqsNotificationQueue`
is the real one; `MemoryNotificationQueue` is the offline fake for unit tests.
`send_manual_change` is the operators' path: the same contract as the jobs, with
a fresh random nonce.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any, Protocol

from jobfence.clock import Clock
from jobfence.config import Settings
from jobs.club.catalog import signing_secret
from jobs.club.events import Event, EventType, Signer
from jobs.club.signing import SigningKeys
from providers.secrets import SecretsManagerValues
from providers.sqs import SqsNotificationQueue


class NotificationQueue(Protocol):
    """Accepts signed event bodies."""

    def send(self, body: str) -> None:
        """Enqueue one signed event body."""
        ...


class MemoryNotificationQueue:
    """Offline fake: keeps the bodies in order. Thread-safe for concurrency tests."""

    def __init__(self) -> None:
        self.bodies: list[str] = []
        self._lock = threading.Lock()

    def send(self, body: str) -> None:
        with self._lock:
            self.bodies.append(body)


class Publisher:
    """Signs events and puts them on the notification queue."""

    def __init__(self, signer: Signer, queue: NotificationQueue) -> None:
        self._signer = signer
        self._queue = queue

    def publish(self, event: Event) -> None:
        self._queue.send(self._signer.sign(event))


def send_manual_change(publisher: Publisher, type: EventType | str, **payload: Any) -> str:
    """Build, sign and send one manual Discord change (same contract as the jobs); return its nonce."""
    event = Event.build(EventType(type), secrets.token_hex(16), **payload)
    publisher.publish(event)
    return event.nonce


def build_publisher(settings: Settings, session: Any, clock: Clock, queue_name: str, job: str) -> Publisher:
    """The real publisher of the job `job`, whose environment grants the queue and its own signing key; its events
    name `job` as their signer.

    The key is read on each send through one long-lived `SecretsManagerValues` (cached `max_age_s`),
    so a rotated key reaches a warm job.
    """
    secrets = SecretsManagerValues(session.client("secretsmanager"))
    queue = SqsNotificationQueue(session.client("sqs"), settings.queue(queue_name))
    return Publisher(Signer(SigningKeys(secrets, settings.secret(signing_secret(job)), job), clock), queue)
