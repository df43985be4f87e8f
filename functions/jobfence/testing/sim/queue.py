"""Simulated SQS queues and a simulated provider, on the run's true clock.

The real `SqsWakeups` sends through a real boto3 SQS client; the wire answers
SendMessageBatch from here. Receiving is what Lambda's poller does: a receive
hides the messages for the visibility timeout, an acknowledged message is
deleted, a failed one comes back when its visibility ends, and after
`max_receives` receives it goes to the dead-letter queue (the reclaimer's
pending sweep re-drives its item). Delivery faults happen at a receive:

    duplicate   the message stays visible, so another receiver gets it too
    late        an acknowledged message comes back after the stale limits
    forged      a copy naming the other tenant (same batch and item ids) joins the delivery

The provider acts at most once per idempotency key (like PayPal or a
marketplace with idempotency keys) and records every act per item, so a
duplicate side effect (two keys acting for one item) is visible to the checks.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobfence.testing.sim.faults import DELIVERY_FAULTS, FaultKind
from jobfence.testing.sim.kernel import Actor
from jobfence.work.keys import PermanentFailure


@dataclass
class Message:
    """One message on a queue (the suite's in-memory test queue uses it too)."""

    message_id: str
    body: str
    visible_at: int
    receives: int = 0


@dataclass
class SimQueue:
    """One queue: its messages (visible or hidden) and its dead-letter queue."""

    url: str
    messages: list[Message] = field(default_factory=list)
    dead: list[Message] = field(default_factory=list)


class SimQueues:
    """Every queue of a run, by URL."""

    def __init__(self, world: Any, visibility_ms: int, max_receives: int = 5, late_ms: int = 1_200_000) -> None:
        self.world = world
        self.queues: dict[str, SimQueue] = {}
        self.visibility_ms = visibility_ms
        self.max_receives = max_receives
        self.late_ms = late_ms
        self._ids = 0

    def url(self, name: str) -> str:
        url = f"https://sqs.us-east-1.amazonaws.com/123456789012/{name}"
        self.queues.setdefault(url, SimQueue(url))
        return url

    def _next_id(self) -> str:
        self._ids += 1
        return f"m{self._ids}"

    def send(self, url: str, entries: list[dict[str, Any]], actor: Actor | None) -> list[str]:
        queue = self.queues[url]
        now = self.world.kernel.clock.now_ms()
        ids = []
        for entry in entries:
            message = Message(self._next_id(), entry["MessageBody"], now + int(entry.get("DelaySeconds", 0)) * 1000)
            queue.messages.append(message)
            ids.append(message.message_id)
        return ids

    def visible(self, url: str) -> list[Message]:
        now = self.world.kernel.clock.now_ms()
        return [m for m in self.queues[url].messages if m.visible_at <= now]

    def next_visible_at(self, url: str) -> int | None:
        times = [m.visible_at for m in self.queues[url].messages]
        return min(times) if times else None

    def receive(self, url: str, n: int, actor: Actor | None) -> list[dict[str, Any]]:
        """Up to `n` visible messages as Lambda records, hidden for the visibility timeout."""
        world = self.world
        now = world.kernel.clock.now_ms()
        queue = self.queues[url]
        for message in self.visible(url):
            if message.receives >= self.max_receives:  # SQS moves it on its next receive
                queue.messages.remove(message)
                queue.dead.append(message)
        taken = self.visible(url)[:n]
        records = []
        for message in taken:
            message.receives += 1
            fault = (
                world.plan.one_of(world.rng, DELIVERY_FAULTS, world.plan.delivery_rate)
                if actor and actor.faulty
                else None
            )
            if fault is FaultKind.DUPLICATE_DELIVERY:
                world.wire.count(fault, actor, f"{message.message_id} stays visible for another receiver")
            else:
                message.visible_at = now + self.visibility_ms
            records.append(
                {
                    "messageId": message.message_id,
                    "body": message.body,
                    "receiptHandle": message.message_id,
                    "eventSource": "aws:sqs",
                    "attributes": {"ApproximateReceiveCount": str(message.receives)},
                }
            )
            if fault is FaultKind.LATE_DELIVERY:
                late = Message(self._next_id(), message.body, now + self.late_ms + world.rng.randrange(self.late_ms))
                queue.messages.append(late)
                world.wire.count(fault, actor, f"{message.message_id} will come back as {late.message_id}")
            if fault is FaultKind.FORGED_DELIVERY:
                forged = self._forge(message.body)
                if forged is not None:
                    records.append(
                        {
                            "messageId": self._next_id(),
                            "body": forged,
                            "receiptHandle": "forged",
                            "eventSource": "aws:sqs",
                            "attributes": {"ApproximateReceiveCount": "1"},
                        }
                    )
                    world.wire.count(fault, actor, f"a copy of {message.message_id} naming another tenant")
        return records

    def _forge(self, body: str) -> str | None:
        try:
            keys = json.loads(body)
        except ValueError:
            return None
        tenants = self.world.data.get("tenants", [])
        others = [t for t in tenants if t != keys.get("tenant")]
        if not others:
            return None
        keys["tenant"] = others[0]
        return json.dumps(keys, separators=(",", ":"))

    def settle(self, url: str, records: list[dict[str, Any]], result: Any) -> None:
        """Delete acknowledged messages (a failed one comes back when its visibility ends)."""
        queue = self.queues[url]
        by_id = {m.message_id: m for m in queue.messages}
        for record in records:
            message = by_id.get(record["messageId"])
            if message is None:
                continue
            outcome = result.outcomes.get(record["messageId"])
            if outcome is not None and outcome.ok:
                queue.messages.remove(message)
                by_id.pop(message.message_id)


class ProviderDown(Exception):
    """The provider call failed (connection reset, 5xx): the item is retried."""


class SimProvider:
    """Acts at most once per idempotency key; records acts per item for invariant 9."""

    def __init__(
        self, world: Any, reject: set[str] | None = None, rejection: Callable[[str], Exception] | None = None
    ) -> None:
        """`reject`: item ids refused once; `rejection(message)`: the error a refusal raises (the adapter's own
        "refused for good", e.g. an app's provider error; default the runtime's `PermanentFailure`)."""
        self.world = world
        self.rejection = rejection or PermanentFailure
        self.results: dict[str, str] = {}  # idempotency key -> result reference
        self.keys_by_item: dict[tuple[str, str, str], set[str]] = {}
        self.tenant_of: dict[str, str] = {}
        self.calls = 0
        self.reject_once = set(reject or ())
        self.rejected: set[str] = set()

    def perform(self, key: Any, idempotency_key: str, timeout_s: float) -> str:
        from jobfence.testing.sim.world import SimTimeout

        world = self.world
        actor = world.kernel.current()
        self.calls += 1
        fault = world.provider_fault(actor, f"provider call for {key.item_id}")
        if fault is FaultKind.PROVIDER_CRASH_BEFORE:
            raise ProviderDown("connection reset before the provider acted")
        if key.item_id in self.reject_once and idempotency_key not in self.rejected:
            self.rejected.add(idempotency_key)
            raise self.rejection("the provider refused this input")
        if fault is FaultKind.PROVIDER_TIMEOUT and world.rng.random() < 0.5:
            raise SimTimeout()
        result = self._act(key, idempotency_key)
        if fault is FaultKind.PROVIDER_CRASH_AFTER:
            raise ProviderDown("connection reset after the provider acted")
        if fault is FaultKind.PROVIDER_TIMEOUT:
            raise SimTimeout()
        return result

    def _act(self, key: Any, idempotency_key: str) -> str:
        self.keys_by_item.setdefault((key.tenant, key.batch_id, key.item_id), set()).add(idempotency_key)
        self.tenant_of[idempotency_key] = key.tenant
        if idempotency_key not in self.results:
            self.results[idempotency_key] = f"r{len(self.results) + 1}"
        return self.results[idempotency_key]
