"""SQS event sources on the simulated clock: poll, deliver batches, settle.

Like Lambda's poller, for every enabled event-source mapping it receives up to
`BatchSize` messages per batch and up to `MaximumConcurrency` batches at once,
invokes the function with an SQS event, and then:

- success: deletes the batch, except the `batchItemFailures` the function
  reported (when the mapping has `ReportBatchItemFailures`);
- error, timeout or a dead isolate: deletes nothing.

Messages not deleted stay in flight until the queue's visibility timeout has
passed on the simulated clock; then they are made visible again. Messages are
received with a long real-time visibility so the emulator never re-shows them on
its own; the emulator counts receives and moves a message to the dead-letter
queue on the receive after `maxReceiveCount`, as SQS does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from jobfence.clock import Clock
from jobfence_ops.runtime.topology import MappingInfo, Topology
from jobfence_ops.runtime.worker import DELAY_ATTRIBUTE
from jobfence_ops.runtime.workers import Invocation, WorkerPool

REAL_VISIBILITY_S = 43_200  # SQS maximum: the simulated clock, not the emulator, decides visibility
MAX_ROUNDS = 10_000


@dataclass
class InFlight:
    queue_url: str
    receipt_handle: str
    message_id: str
    visible_at_ms: int


@dataclass
class Delivery:
    """One batch delivered to a function."""

    queue: str
    function: str
    messages: int
    failed: int
    invocation: Invocation


@dataclass
class PumpStats:
    batches: int = 0
    messages: int = 0
    failed: int = 0
    deliveries: list[Delivery] = field(default_factory=list)


class QueuePoller:
    """Delivers every enabled mapping's messages until its queue has nothing visible."""

    def __init__(self, session: Any, topology: Topology, pool: WorkerPool, clock: Clock) -> None:
        self._sqs = session.client("sqs")
        self._lambda = session.client("lambda")
        self._region = session.region_name
        self._topology = topology
        self._pool = pool
        self._clock = clock
        self._lock = threading.Lock()
        self.in_flight: dict[str, InFlight] = {}
        self.faults: dict[str, list[dict[str, Any]]] = {}  # function -> faults armed until a delivery reaches them
        self.on_delivery: Callable[[Delivery], None] | None = None

    # -- visibility on the simulated clock ---------------------------------------------------

    def next_visibility_ms(self) -> int | None:
        """When the next in-flight message becomes visible again."""
        with self._lock:
            return min((m.visible_at_ms for m in self.in_flight.values()), default=None)

    def release_expired(self) -> int:
        """Make visible again every in-flight message whose visibility timeout has passed."""
        now = self._clock.now_ms()
        with self._lock:
            due = [m for m in self.in_flight.values() if m.visible_at_ms <= now]
            for message in due:
                del self.in_flight[message.receipt_handle]
        for message in due:
            self._sqs.change_message_visibility(
                QueueUrl=message.queue_url, ReceiptHandle=message.receipt_handle, VisibilityTimeout=0
            )
        return len(due)

    # -- delivery ------------------------------------------------------------------------------

    def _live_mappings(self) -> list[MappingInfo]:
        """The mappings enabled now: operators pause and resume workers on the live system."""
        states: dict[str, str] = {}
        for page in self._lambda.get_paginator("list_event_source_mappings").paginate():
            states.update({m["UUID"]: m.get("State", "Enabled") for m in page.get("EventSourceMappings", [])})
        return [m for m in self._topology.mappings if m.enabled and states.get(m.uuid, "Enabled") == "Enabled"]

    def pump(self) -> PumpStats:
        """Deliver until no enabled mapping's queue has a visible message."""
        stats = PumpStats()
        mappings = self._live_mappings()
        for _ in range(MAX_ROUNDS):
            self.release_expired()
            delivered = 0
            for mapping in mappings:
                delivered += self._deliver(mapping, stats)
            if not delivered:
                return stats
        raise RuntimeError(f"queues still busy after {MAX_ROUNDS} rounds: a message is re-driven forever")

    def _deliver(self, mapping: MappingInfo, stats: PumpStats) -> int:
        queue = self._topology.queue_by_arn(mapping.queue_arn)
        batches = []
        received = 0
        for _ in range(mapping.max_concurrency or 1):
            messages = self._sqs.receive_message(
                QueueUrl=queue.url,
                MaxNumberOfMessages=min(mapping.batch_size, 10),
                VisibilityTimeout=REAL_VISIBILITY_S,
                WaitTimeSeconds=0,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                break
            received += len(messages)
            now = self._clock.now_ms()
            deliverable = []
            with self._lock:
                for m in messages:
                    delayed_until = _delayed_until(m)
                    if delayed_until is not None and delayed_until > now:
                        # a delayed send, received early: it stays hidden until its simulated delay is over
                        self.in_flight[m["ReceiptHandle"]] = InFlight(
                            queue.url, m["ReceiptHandle"], m["MessageId"], delayed_until
                        )
                        continue
                    self.in_flight[m["ReceiptHandle"]] = InFlight(
                        queue.url, m["ReceiptHandle"], m["MessageId"], now + queue.visibility_timeout_s * 1000
                    )
                    deliverable.append(m)
            if deliverable:
                batches.append(deliverable)
        if not batches:
            return received
        function = self._topology.function_by_arn(mapping.function_arn)
        with ThreadPoolExecutor(max_workers=len(batches)) as executor:
            results = list(executor.map(lambda b: self._invoke(function.name, mapping, b), batches))
        for messages, invocation in zip(batches, results, strict=True):
            failed = self._settle(queue.url, mapping, messages, invocation)
            delivery = Delivery(queue.name, function.name, len(messages), failed, invocation)
            stats.batches += 1
            stats.messages += len(messages)
            stats.failed += failed
            stats.deliveries.append(delivery)
            if self.on_delivery:
                self.on_delivery(delivery)
        return received

    def _invoke(self, function: str, mapping: MappingInfo, messages: list[dict[str, Any]]) -> Invocation:
        """One batch's invocation; the function's armed faults go with it and stay armed until reached.

        Of the batches delivered at once, one takes the plan; if its invocation never made the call a
        fault waits for (the tenant gate deferred its items, it had nothing to claim) the fault is armed
        again for the function's next delivery, unless a newer plan was armed meanwhile. A kill is spent
        only by an invocation that died.
        """
        with self._lock:
            faults = self.faults.pop(function, None)
        invocation = self._pool.invoke(function, sqs_event(messages, mapping.queue_arn, self._region), faults)
        left = invocation.faults_left(faults) if faults else []
        if left:
            with self._lock:
                self.faults.setdefault(function, left)
        return invocation

    def _settle(
        self, queue_url: str, mapping: MappingInfo, messages: list[dict[str, Any]], invocation: Invocation
    ) -> int:
        """Delete what succeeded; leave the rest in flight. Returns how many failed."""
        if not invocation.ok:
            return len(messages)
        failed_ids: set[str] = set()
        if mapping.report_batch_item_failures and isinstance(invocation.payload, dict):
            reported = invocation.payload.get("batchItemFailures") or []
            ids = {m["MessageId"] for m in messages}
            failed_ids = {str(f.get("itemIdentifier")) for f in reported if isinstance(f, dict)}
            if not failed_ids <= ids:
                return len(messages)  # an unknown identifier fails the whole batch, as in Lambda
        done = [m for m in messages if m["MessageId"] not in failed_ids]
        for start in range(0, len(done), 10):
            chunk = done[start : start + 10]
            self._sqs.delete_message_batch(
                QueueUrl=queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
        with self._lock:
            for m in done:
                self.in_flight.pop(m["ReceiptHandle"], None)
        return len(failed_ids)


def _delayed_until(message: dict[str, Any]) -> int | None:
    value = message.get("MessageAttributes", {}).get(DELAY_ATTRIBUTE, {}).get("StringValue")
    return int(value) if value else None


def sqs_event(messages: list[dict[str, Any]], queue_arn: str, region: str) -> dict[str, Any]:
    """The event Lambda's SQS poller hands a function."""
    records = []
    for m in messages:
        attributes = m.get("Attributes", {})
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": attributes.get("ApproximateReceiveCount", "1"),
                    "SentTimestamp": attributes.get("SentTimestamp", "0"),
                    "SenderId": attributes.get("SenderId", "local"),
                    "ApproximateFirstReceiveTimestamp": attributes.get("ApproximateFirstReceiveTimestamp", "0"),
                },
                "messageAttributes": {
                    name: {
                        "stringValue": value.get("StringValue"),
                        "binaryValue": value.get("BinaryValue"),
                        "stringListValues": [],
                        "binaryListValues": [],
                        "dataType": value.get("DataType", "String"),
                    }
                    for name, value in m.get("MessageAttributes", {}).items()
                    if name != DELAY_ATTRIBUTE
                },
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


def queue_depths(session: Any, topology: Topology) -> dict[str, dict[str, int]]:
    """Visible and in-flight counts of every queue (DLQs included)."""
    sqs = session.client("sqs")
    out = {}
    for queue in topology.queues.values():
        attrs = sqs.get_queue_attributes(
            QueueUrl=queue.url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        )["Attributes"]
        out[queue.name] = {
            "visible": int(attrs.get("ApproximateNumberOfMessages", 0)),
            "in_flight": int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0)),
        }
    return out


__all__ = ["QueuePoller", "queue_depths", "sqs_event"]
