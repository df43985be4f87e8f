"""The durable-batch rig: the real producer, a worker per pipeline and the reclaimer on moto tables,
with an in-memory wake-up queue on a frozen clock and the fake item providers.

The tests and the work bench build it with `build_rig`; a test passes its grant guard
(`guard=jobfence.testing.grants.within_grant`) so every worker and reclaimer call is checked
against its catalog entry's table grant.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any

from aws_lambda_powertools import Logger

from jobfence.clock import FrozenClock
from jobfence.quota import QuotaStore
from jobfence.reclaim import Reclaimer, ReclaimPipeline
from jobfence.testing.sim.queue import Message
from jobfence.work import (
    BatchOperations,
    BatchRef,
    ItemInput,
    ItemKey,
    Producer,
    RoundResult,
    TenantGate,
    Worker,
    WorkStore,
)
from jobs.catalog import CATALOG
from jobs.listings.pipelines import GENERATION, PIPELINES, PUBLISH, endpoint_of, perform_with
from providers.items_fake import FakeItemProvider


class MemoryQueue:
    """Wake-ups on the frozen clock: delays honoured, delivery order chosen by the test."""

    _ids = itertools.count(1)

    def __init__(self, clock: FrozenClock) -> None:
        self._clock = clock
        self.messages: list[Message] = []
        self.sent = 0

    def send(self, keys, delay_s: int = 0) -> list[ItemKey]:
        for key in keys:
            self.messages.append(Message(f"m{next(self._ids)}", key.body(), self._clock.now_ms() + delay_s * 1000))
            self.sent += 1
        return []

    def visible(self) -> list[Message]:
        now = self._clock.now_ms()
        return [m for m in self.messages if m.visible_at <= now]

    def take(self, n: int = 10, newest_first: bool = False) -> list[Message]:
        ready = self.visible()
        if newest_first:
            ready = list(reversed(ready))
        return ready[:n]

    def settle(self, taken: list[Message], result: RoundResult) -> None:
        """Delete acknowledged messages; a failed one stays (visible again after the visibility timeout)."""
        for m in taken:
            m.receives += 1
            if result.outcomes.get(m.message_id) and result.outcomes[m.message_id].ok:
                self.messages.remove(m)
            else:
                m.visible_at = self._clock.now_ms() + 1_800_000


def record(m: Message) -> dict[str, Any]:
    return {"messageId": m.message_id, "body": m.body, "receiptHandle": m.message_id, "eventSource": "aws:sqs"}


@dataclass
class Rig:
    clock: FrozenClock
    store: WorkStore
    quota: QuotaStore
    queues: dict[str, MemoryQueue]
    generator: FakeItemProvider
    marketplace: FakeItemProvider
    producer: Producer
    workers: dict[str, Worker]
    performs: dict[str, Callable[..., Any]]  # each pipeline's provider step, as its worker runs it
    reclaimer: Reclaimer
    ops: BatchOperations
    logger: Logger = field(default_factory=lambda: Logger(service="test"))

    def submit(self, tenant: str, batch: str, n: int, kind: str = GENERATION, start: int = 0):
        items = [ItemInput(f"i{i:05d}", {"title": f"thing {i}"}) for i in range(start, start + n)]
        return self.producer.submit(BatchRef(tenant, batch), kind, items, "tester")

    def deliver(
        self,
        kind: str = GENERATION,
        n: int = 10,
        twice: bool = False,
        newest_first: bool = False,
        remaining_ms: int | None = None,
    ) -> RoundResult:
        taken = self.queues[kind].take(n, newest_first=newest_first)
        records = [record(m) for m in taken]
        if twice:
            records = records + [dict(r, messageId=r["messageId"] + "-dup") for r in records]
        result = self.workers[kind].process(records, remaining_ms)
        self.queues[kind].settle(taken, result)
        return result

    def release(self) -> None:
        """Let every hung provider call return (a test's teardown)."""
        self.generator.calls.release()
        self.marketplace.calls.release()

    def drain(self, kind: str = GENERATION, rounds: int = 10_000) -> int:
        for done in range(rounds):
            if not self.queues[kind].visible():
                return done
            self.deliver(kind)
        raise AssertionError("queue did not drain")


Guard = Callable[[Mapping[str, str], Any, str], AbstractContextManager[Any]]
"""A grant guard: `guard(tables, declared grants, who)` is a context in which every AWS call is checked."""


class _Granted:
    """A worker or the reclaimer whose every call must stay inside its catalog entry's table grant."""

    def __init__(self, inner: Any, guard: Guard, tables: dict[str, str], declared: Any, who: str) -> None:
        self._inner, self._guard, self._tables, self._declared, self._who = inner, guard, tables, declared, who

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def checked(*args: Any, **kwargs: Any) -> Any:
            with self._guard(self._tables, self._declared, self._who):
                return attr(*args, **kwargs)

        return checked


def build_rig(
    dynamodb,
    tables: dict[str, str],
    clock: FrozenClock,
    per_item_timeout_s: float | None = None,
    in_flight_cap: int | None = None,
    guard: Guard | None = None,
) -> Rig:
    """The rig; `in_flight_cap` gives each worker a per-tenant in-flight cap (None: the workers have none);
    `guard` checks every worker and reclaimer call against its catalog grant (None: unchecked, as in the bench)."""

    def granted(inner: Any, declared: Any, who: str) -> Any:
        return inner if guard is None else _Granted(inner, guard, tables, declared, who)

    logger = Logger(service="test")
    quota = QuotaStore(tables["listing_quota"], clock)
    store = WorkStore(tables["listing_batches"], tables["listing_items"], quota, clock)
    queues = {GENERATION: MemoryQueue(clock), PUBLISH: MemoryQueue(clock)}
    generator, marketplace = (
        FakeItemProvider(endpoint_of(PIPELINES[GENERATION])),
        FakeItemProvider(endpoint_of(PIPELINES[PUBLISH])),
    )
    performs = {GENERATION: perform_with(generator), PUBLISH: perform_with(marketplace)}
    workers = {}
    for kind, pipeline in PIPELINES.items():
        timing = pipeline.timing
        if per_item_timeout_s is not None:
            # a test may time an item out in under a second; deployed timings are whole seconds
            timing = replace(timing, per_item_timeout_s=per_item_timeout_s)  # type: ignore[arg-type]
        gate = (
            None
            if in_flight_cap is None
            else TenantGate(tables["listing_quota"], clock, kind, in_flight_cap, timing.item_stale_s * 1000)
        )
        worker = Worker(
            store, kind, timing, performs[kind], queues[kind], logger, gate=gate, defer_delay_s=pipeline.defer_delay_s
        )
        workers[kind] = granted(worker, CATALOG.queues[pipeline.queue].tables, f"{pipeline.queue} worker")
    reclaimer = granted(
        Reclaimer(
            store,
            {k: ReclaimPipeline(k, p.timing, queues[k]) for k, p in PIPELINES.items()},
            clock,
            logger,
            page_size=25,
        ),
        CATALOG.job("reclaim_listings").tables,
        "reclaim_listings",
    )
    return Rig(
        clock,
        store,
        quota,
        queues,
        generator,
        marketplace,
        Producer(store, queues, logger),
        workers,
        performs,
        reclaimer,
        BatchOperations(store, queues, logger),
    )
