"""Benchmark: a quiet tenant's dwell time while a noisy one has a 10,000-item backlog.

The real `Producer`, `Worker` and `TenantGate` against moto's DynamoDB, on a
clock this bench advances. The queue and the fleet are modelled:

- **The fleet**: the catalog's worker concurrency (3) taking SQS batches of 10.
  A round that runs items lasts `ITEM_S` (the provider's time, all ten at once);
  a round that only defers lasts `DEFER_ROUND_S`. A round's holds are taken at
  its start and given back at its end (the bench delays the gate's release to
  that moment), so rounds in flight at the same time compete for a tenant's cap
  as they do in Lambda.
- **The queue**: *standard* delivers the oldest visible messages first (what a
  standard queue's backlog looks like to a newcomer); *fair* delivers first the
  messages of the tenants (MessageGroupId) with the fewest messages in flight,
  which is what SQS fair queues document ("other tenants' messages are
  prioritized while one tenant has a backlog").

The noisy tenant submits 10,000 items at time 0, the quiet one 10 items 50 s
later, while every worker is in a round; the run ends when the quiet tenant's
items are all done. Dwell is from the quiet submit to the end of the round that
completed the item.
"""

from __future__ import annotations

import copy
import heapq
import io
import itertools
import json
import logging
import statistics
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import boto3
from aws_lambda_powertools import Logger
from moto import mock_aws

from ops.bench.coldstart import GoalMissed

COMMAND = "python -m ops.bench ops.bench.fairness"
NOISY_ITEMS = 10_000
QUIET_ITEMS = 10
QUIET_AT_S = 50  # mid-round: the fleet is busy when the quiet tenant arrives
ITEM_S = 20.0  # one round of provider calls (a generation takes seconds to tens of seconds)
DEFER_ROUND_S = 0.2  # a round that only reads and writes the holds row and re-sends wake-ups
WORKERS = 3  # the catalog's max_concurrency of a listings queue
GOAL_S = 120  # the quiet tenant's slowest item, with the catalog's cap on a fair queue


@dataclass
class _Message:
    seq: int
    body: str
    group: str
    visible_at: int


@dataclass
class BenchQueue:
    """The wake-up queue (`Wakeups`): standard or fair delivery, on the bench's clock."""

    clock: Any
    fair: bool
    messages: dict[int, _Message] = field(default_factory=dict)
    in_flight: dict[int, _Message] = field(default_factory=dict)
    requests: int = 0  # SendMessageBatch, ReceiveMessage and DeleteMessageBatch calls
    _seq: Any = field(default_factory=itertools.count)

    def send(self, keys: Sequence[Any], delay_s: int = 0) -> list[Any]:
        self.requests += -(-len(keys) // 10)
        for key in keys:
            seq = next(self._seq)
            self.messages[seq] = _Message(seq, key.body(), key.tenant, self.clock.now_ms() + delay_s * 1000)
        return []

    def receive(self, n: int = 10) -> list[_Message]:
        self.requests += 1
        now = self.clock.now_ms()
        visible = [m for m in self.messages.values() if m.visible_at <= now]
        if self.fair:
            busy: dict[str, int] = {}
            for m in self.in_flight.values():
                busy[m.group] = busy.get(m.group, 0) + 1
            visible.sort(key=lambda m: (busy.get(m.group, 0), m.visible_at, m.seq))
        else:
            visible.sort(key=lambda m: (m.visible_at, m.seq))
        taken = visible[:n]
        for m in taken:
            self.in_flight[m.seq] = self.messages.pop(m.seq)
        return taken

    def settle(self, taken: list[_Message]) -> None:
        self.requests += 1  # one DeleteMessageBatch (every message of these rounds is acknowledged)
        for m in taken:
            self.in_flight.pop(m.seq, None)

    def next_visible_at(self) -> int | None:
        return min((m.visible_at for m in self.messages.values()), default=None)


class _ReleasedLater:
    """The real gate, whose release waits for the end of the round (the bench runs it then)."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate
        self.pending: list[tuple[list, str]] = []

    def admit(self, keys, owner):
        return self.gate.admit(keys, owner)

    def release(self, keys, owner) -> None:
        self.pending.append((list(keys), owner))


@contextmanager
def _no_table_backups() -> Iterator[list[BaseException]]:
    """moto backs up each table a transaction touches with a deep copy before applying it (seconds per
    transaction at 10,000 rows). A bench transaction is never cancelled (no duplicate delivery, quota to
    spare; the list this yields collects any that is, and the bench refuses its figures then), so the
    backup is never restored: skip copying the tables, every other deep copy stays."""
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    real_copy, real_transact = copy.deepcopy, DynamoDBBackend.transact_write_items
    cancelled: list[BaseException] = []

    def table_as_is(value: Any, memo: Any = None) -> Any:
        return value if isinstance(value, Table) else real_copy(value, memo)

    def transact(self: Any, transact_items: Any) -> None:
        with mock.patch("moto.dynamodb.models.copy.deepcopy", table_as_is):
            try:
                return real_transact(self, transact_items)
            except Exception as exc:
                cancelled.append(exc)
                raise

    with mock.patch.object(DynamoDBBackend, "transact_write_items", transact):
        yield cancelled


@dataclass(frozen=True)
class Result:
    queue: str
    cap: int | None
    dwell_s: list[float]
    noisy_done: int
    sqs_requests: int
    rounds: int
    deferred: int


def scenario(fair: bool, cap: int | None, noisy: int = NOISY_ITEMS) -> Result:
    from jobfence.clock import FrozenClock
    from jobfence.quota import QuotaStore
    from jobfence.work import BatchRef, ItemInput, Producer, Tally, TenantGate, Worker, WorkStore
    from jobfence_ops.tables import create_catalog_tables
    from jobs.listings.catalog import GENERATION, PIPELINES

    pipeline = PIPELINES[GENERATION]
    with mock_aws(), _no_table_backups() as cancelled:
        client = boto3.client("dynamodb")
        tables = create_catalog_tables(client, names={"listing_batches", "listing_items", "listing_quota"})
        clock = FrozenClock()
        logger = Logger(service="bench-fairness", logger_handler=logging.StreamHandler(io.StringIO()))
        quota = QuotaStore(tables["listing_quota"], clock)
        store = WorkStore(tables["listing_batches"], tables["listing_items"], quota, clock)
        for tenant in ("noisy", "quiet"):
            quota.grant(tenant, noisy + QUIET_ITEMS)
        queue = BenchQueue(clock, fair)
        producer = Producer(store, {GENERATION: queue}, logger)
        gate = (
            None
            if cap is None
            else _ReleasedLater(
                TenantGate(tables["listing_quota"], clock, GENERATION, cap, pipeline.timing.item_stale_s * 1000)
            )
        )
        worker = Worker(
            store,
            GENERATION,
            pipeline.timing,
            lambda request, timeout_s: "ref",
            queue,
            logger,
            gate=gate,
            defer_delay_s=pipeline.defer_delay_s,
        )
        producer.submit(
            BatchRef("noisy", "backlog"), GENERATION, [ItemInput(f"n{i:05d}", {"t": i}) for i in range(noisy)], "bench"
        )
        # workers (by the time they are free) and round ends (holds released, messages settled)
        t0 = clock.now_ms()
        quiet_at = t0 + QUIET_AT_S * 1000
        free = [(t0, w) for w in range(WORKERS)]
        ends: list[tuple[int, int, list, list]] = []
        tick = itertools.count()
        quiet_submitted = False
        dwell: list[float] = []
        noisy_done = rounds = deferred = 0
        while len(dwell) < QUIET_ITEMS:
            at = min(free[0][0], ends[0][0] if ends else free[0][0])
            if not quiet_submitted and quiet_at <= at:
                at = quiet_at
            clock.advance(ms=max(0, at - clock.now_ms()))
            if not quiet_submitted and clock.now_ms() >= quiet_at:
                producer.submit(
                    BatchRef("quiet", "small"),
                    GENERATION,
                    [ItemInput(f"q{i}", {"t": i}) for i in range(QUIET_ITEMS)],
                    "bench",
                )
                quiet_submitted = True
            if ends and ends[0][0] <= clock.now_ms():
                _, _, taken, holds = heapq.heappop(ends)
                for keys, owner in holds:
                    assert gate is not None  # only a gate hands out holds
                    gate.gate.release(keys, owner)
                queue.settle(taken)
                continue
            if free[0][0] > clock.now_ms():
                continue
            _, w = heapq.heappop(free)
            taken = queue.receive(10)
            if not taken:
                later = queue.next_visible_at()
                wake = max(clock.now_ms() + 1_000, later or 0)
                heapq.heappush(free, (wake, w))
                continue
            rounds += 1
            records = [{"messageId": str(m.seq), "body": m.body} for m in taken]
            result = worker.process(records)
            deferred += result.counts.get(Tally.DEFERRED, 0)
            ran = result.counts.get(Tally.COMPLETED, 0)
            end = clock.now_ms() + int((ITEM_S if ran else DEFER_ROUND_S) * 1000)
            for m in taken:
                outcome = result.outcomes[str(m.seq)]
                if outcome.reason == "completed":
                    if m.group == "quiet":
                        dwell.append((end - quiet_at) / 1000)
                    else:
                        noisy_done += 1
            holds = gate.pending if gate is not None else []
            if gate is not None:
                gate.pending = []
            heapq.heappush(ends, (end, next(tick), taken, holds))
            heapq.heappush(free, (end, w))
            if rounds > 20 * (noisy + QUIET_ITEMS):
                raise AssertionError("the quiet tenant never finished")
        if cancelled:
            raise AssertionError(f"a transaction was cancelled ({cancelled[0]}): moto's table backup was needed")
    return Result("fair" if fair else "standard", cap, sorted(dwell), noisy_done, queue.requests, rounds, deferred)


def run() -> str:
    from jobs.listings.catalog import GENERATION, PIPELINES

    cap = PIPELINES[GENERATION].tenant_in_flight_cap
    results = [scenario(False, None), scenario(False, cap), scenario(True, None), scenario(True, cap)]
    lines = [
        "## Tenant fairness",
        "",
        f"Command: `{COMMAND}`",
        "",
        __doc__.split("\n\n", 1)[1].strip(),
        "",
        f"Provider time per round {ITEM_S:g} s, a deferring round {DEFER_ROUND_S:g} s, {WORKERS} workers, "
        f"the catalog's cap {cap} and deferral delay {PIPELINES[GENERATION].defer_delay_s} s. Goal: the quiet "
        f"tenant's slowest item within {GOAL_S} s with the catalog's cap on a fair queue.",
        "",
        "| queue | per-tenant cap | quiet dwell median s | quiet dwell max s | noisy items done meanwhile | rounds "
        "| deferred wake-ups | SQS requests |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.queue} | {r.cap if r.cap is not None else 'none'} | {statistics.median(r.dwell_s):.0f} "
            f"| {max(r.dwell_s):.0f} | {r.noisy_done:,} | {r.rounds:,} | {r.deferred:,} "
            f"| {r.sqs_requests:,} |"
        )
    lines += [
        "",
        "Without a cap on a standard queue the quiet tenant waits for the whole backlog ahead of it. The cap "
        "alone bounds the wait to the time it takes the fleet to defer the backlog ahead (the noisy tenant's "
        "deferred wake-ups come back behind the quiet ones), at the price of those deferrals (SQS requests and "
        "one holds-row read and write per round). A fair queue alone orders the quiet tenant first, but while "
        "every worker is busy with a 20 s round of the noisy tenant the quiet one still waits for a worker to "
        "free; with the cap a whole SQS batch's worth of the fleet always stays free of the noisy tenant. SQS "
        "requests count the producer's 1,000 SendMessageBatch calls for the backlog, every receive and delete, "
        "and the deferrals' re-sends.",
    ]
    section = "\n".join(lines)
    production = results[-1]
    if max(production.dwell_s) > GOAL_S:
        raise GoalMissed(
            section, [f"quiet tenant dwell {max(production.dwell_s):.0f} s > {GOAL_S} s"], what="tenant fairness"
        )
    return section


if __name__ == "__main__":
    print(json.dumps([r.__dict__ for r in (scenario(True, 20, noisy=500),)], indent=1))
