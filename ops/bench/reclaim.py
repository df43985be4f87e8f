"""Benchmark: the requests of one reclaim tick (`reclaim_listings`), by what the batches hold.

The job runs as deployed: the real scheduled runner (lease, run row) over the
real Reclaimer of both listings pipelines, built once by its factory as a
warm function is (`jobfence.testing.JobHarness`), against moto in process. A
batch is created by the real producer. Every AWS request of the process is
counted (a wrapper around botocore's `_make_api_call`, counting only); a
request goes to "sweep" when it names a listings table, to "lease and run"
otherwise, and SQS requests (re-sent wake-ups) apart.

The "10 stale among many" sweep (`sweep_requests`) seeds its rows straight
into moto's in-process backend (no request, nothing counted: the rows are
built with the store's key functions, `ItemKey.of` and `reclaim_key`, and the
batch rows by `BatchStore.open_batch`); then only one `Reclaimer.run_once` is
counted, with the same wrapper.

Goals, on the sweep's requests (the listings tables'), not the runner's lease
and run row (five in every tick of every scheduled job, whatever it does):
in a tick in which nothing is stale, at most `GOAL_REQUESTS` (the demo's
ticks: no open batch, or its one batch open); the stale sweep stays flat: at
most the ring's bound (`ring_bound`), whatever the table holds. The run
fails (`GoalMissed`, exit 1) past either.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from moto import mock_aws

from ops.bench.coldstart import GoalMissed

COMMAND = "python -m ops.bench ops.bench.reclaim"
GOAL_REQUESTS = 10
LISTINGS = ("listing_batches", "listing_items", "listing_quota")
ROWS_PER_BATCH = 1_000  # the stale sweep's batches (8 shards each by `shards_for`)
STALE = 10

# Measured with this module on main at 36644d1 (every batch on 64 item shards and 64 index shards, the sweep
# querying all of them for both statuses of both pipelines), in a copy of that tree.
BEFORE = [
    "| no batch | 263 | 258 | 5 | 0 |",
    "| one 12-item batch open, nothing stale (warm function) | 263 | 258 | 5 | 0 |",
    "| one 200-item batch open (the demo's), nothing stale (warm function) | 263 | 258 | 5 | 0 |",
]
BEFORE_SWEEP = [
    "| 1,000 | 1 | 268 | 258 queries, 10 updates |",
    "| 100,000 | 100 | 268 | 258 queries, 10 updates |",
]


class RequestCount:
    """Every AWS request the process makes, by where it goes (counted, never changed)."""

    def __init__(self) -> None:
        self.by_kind: Counter[str] = Counter()  # "sweep" | "lease and run" | "sqs"
        self.by_operation: Counter[str] = Counter()  # the sweep's, by operation

    def note(self, service: str, operation: str, params: Mapping[str, Any]) -> None:
        if service == "sqs":
            self.by_kind["sqs"] += 1
            return
        listings = any(name in table for table in _tables_of(params) for name in LISTINGS)
        self.by_kind["sweep" if listings else "lease and run"] += 1
        if listings:
            self.by_operation[operation] += 1

    @property
    def sweep(self) -> int:
        return self.by_kind["sweep"]

    @property
    def dynamodb(self) -> int:
        return self.by_kind["sweep"] + self.by_kind["lease and run"]

    def operations(self) -> str:
        return ", ".join(f"{n} {op}" for op, n in sorted(self.by_operation.items()))


def _tables_of(params: Mapping[str, Any]) -> list[str]:
    if "TableName" in params:
        return [params["TableName"]]
    if "RequestItems" in params:
        return list(params["RequestItems"])
    if "TransactItems" in params:
        return [body["TableName"] for entry in params["TransactItems"] for body in entry.values()]
    return []


@contextmanager
def counting() -> Iterator[RequestCount]:
    """Count every botocore API call made inside the block."""
    from botocore.client import BaseClient

    count = RequestCount()
    original: Callable[..., Any] = BaseClient._make_api_call

    def counted(self: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        count.note(self.meta.service_model.service_name, operation_name, api_params)
        return original(self, operation_name, api_params)

    BaseClient._make_api_call = counted
    try:
        yield count
    finally:
        BaseClient._make_api_call = original


def tick_requests(batch_items: int) -> RequestCount:
    """Requests of one warm reclaim tick, with one fresh open batch of `batch_items` (0: no batch)."""
    import boto3
    from aws_lambda_powertools import Logger

    from jobfence.clock import FrozenClock
    from jobfence.scheduled import Outcome
    from jobfence.testing.grants import within_grant
    from jobfence.testing.harness import JobHarness
    from jobfence.triggers import Trigger
    from jobfence.work import BatchRef, ItemInput, Producer
    from jobs.catalog import CATALOG
    from jobs.listings.pipelines import build_store, build_wakeups

    with mock_aws():
        clock = FrozenClock()
        harness = JobHarness(
            boto3.Session(region_name="us-east-1"),
            CATALOG,
            "reclaim_listings",
            clock,
            logger=Logger(service="bench", level="ERROR"),
        )
        job = harness.build()
        harness.tick(job)  # the function's first tick (cold): what it learns it keeps
        if batch_items:
            deps = harness.deps()
            store = build_store(deps.settings, clock)
            store.quota.grant("acme", batch_items)
            producer = Producer(
                store,
                build_wakeups(deps.settings, harness.session.client("sqs")),
                Logger(service="bench", level="ERROR"),
            )
            producer.submit(
                BatchRef("acme", "b1"),
                "generation",
                [ItemInput(f"i{i:04d}", {"title": "x"}) for i in range(batch_items)],
                "bench",
            )
        clock.advance(minutes=5)
        harness.tick(job)  # a tick that meets the batch first (cold for it), then the steady one measured
        clock.advance(minutes=5)
        # the runner alone (the harness's own read of the run row afterwards is not the tick's)
        with counting() as count, within_grant(harness.tables, harness.spec.tables, harness.spec.name):
            result = harness.runner.run(harness.spec, job, Trigger("scheduled", clock.now_ms()), None)
        assert result.outcome is Outcome.RAN, result
        return count


@dataclass(frozen=True)
class SweepCost:
    """One counted reclaim sweep over a seeded table."""

    items: int
    open_batches: int
    requeued: int
    count: RequestCount
    seed_s: float  # seeding the rows (not counted)
    sweep_s: float

    @property
    def bound(self) -> int:
        return ring_bound(self.open_batches, self.requeued)


def ring_bound(open_batches: int, stale: int) -> int:
    """The most requests a sweep of one pipeline's open batches makes, whatever the table holds.

    Both pipelines' open-index queries, one BatchGetItem per 100 open batches a
    cold reclaimer has not seen, the whole reclaim-index ring for both live
    statuses (one query a shard while no shard has a page of stale rows), one
    write per stale item.
    """
    from jobfence.work import RECLAIM_SHARDS

    return 2 + math.ceil(open_batches / 100) + 2 * RECLAIM_SHARDS + stale


def sweep_requests(total_items: int, stale: int = STALE, live_fraction: float = 0.1) -> SweepCost:
    """One reclaim sweep over `total_items` item rows of which `stale` are running past item-stale.

    Batches of `ROWS_PER_BATCH` items, every one open and fresh (created by
    `BatchStore.open_batch`, so each records `shards_for(ROWS_PER_BATCH)`);
    `live_fraction` of the items pending or running and fresh (in the sparse
    index), the rest completed (not in it); the stale ones spread evenly over
    the table. The item rows are put straight into moto's in-process backend.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    from jobfence.work import BatchRef, ItemKey, ItemStatus, reclaim_key
    from ops.bench.work import _setup

    with mock_aws():
        rig, _, tables, _, clock = _setup(metered=False)
        now = clock.now_ms()
        stale_at = now - 7 * 60_000
        n_batches = max(1, total_items // ROWS_PER_BATCH)
        every = max(1, (n_batches * ROWS_PER_BATCH) // stale)
        items_table = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(tables["listing_items"])
        started = time.perf_counter()
        for b in range(n_batches):
            ref = BatchRef("acme", f"b{b:04d}")
            batch, _created = rig.store.batches.open_batch(ref, "generation", ROWS_PER_BATCH, "bench")
            for i in range(ROWS_PER_BATCH):
                key = ItemKey.of(ref, f"i{i:05d}", batch.shards)
                if (b * ROWS_PER_BATCH + i) % every == 0:
                    status, updated = ItemStatus.RUNNING, stale_at
                elif i % int(1 / live_fraction) == 1:
                    status, updated = (ItemStatus.PENDING if i % 2 else ItemStatus.RUNNING), now - 60_000
                else:
                    status, updated = ItemStatus.COMPLETED, now - 60_000
                items_table.put_item(_item_row(key, i, status, updated, now, reclaim_key("generation", status, key)))
        seed_s = time.perf_counter() - started
        # moto's Query sorts the whole table (`Table.all_items`) on every request: minutes a sweep at 100,000
        # rows. What an index query returns moto sorts again by the index's and the table's keys (a total
        # order), so an unsorted list gives every Query the same answer; the sweep makes no Scan (asserted).
        items_table.all_items = lambda: [  # type: ignore[method-assign]
            item for rows in items_table.items.values() for item in rows.values()
        ]
        started = time.perf_counter()
        with counting() as count:  # a cold reclaimer: it reads every open batch's shard count
            counts = rig.reclaimer.run_once()
        sweep_s = time.perf_counter() - started
        assert counts.requeued == stale, counts
        assert "Scan" not in count.by_operation, count.by_operation
        return SweepCost(n_batches * ROWS_PER_BATCH, n_batches, counts.requeued, count, seed_s, sweep_s)


def _item_row(key: Any, seq: int, status: Any, updated: int, now: int, index_key: str) -> dict[str, Any]:
    """The item row as the store writes it (schema: `jobfence.work.items`), in DynamoDB's JSON."""
    from jobfence.work import ItemStatus

    row: dict[str, Any] = {
        "batch_key": {"S": key.partition},
        "item_id": {"S": key.item_id},
        "tenant": {"S": key.tenant},
        "batch_id": {"S": key.batch_id},
        "kind": {"S": "generation"},
        "seq": {"N": str(seq)},
        "status": {"S": status.value},
        "attempts": {"N": "1"},
        "payload": {"S": '{"title":"a thing to sell"}'},
        "quota": {"S": "reserved"},
        "quota_reservations": {"N": "1"},
        "quota_refunds": {"N": "0"},
        "created_at": {"N": str(now - 3_600_000)},
        "updated_at": {"N": str(updated)},
    }
    if status is ItemStatus.COMPLETED:
        row["result_ref"] = {"S": "gen_0123456789abcdef"}
    else:
        row["reclaim_key"] = {"S": index_key}
        if status is ItemStatus.RUNNING:
            row["claim_token"] = {"S": "t"}
    return row


def run() -> str:
    sys.path.insert(0, ".")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    from jobfence.work import RECLAIM_SHARDS, shards_for

    cases = [
        ("no batch", 0),
        ("one 12-item batch open, nothing stale (warm function)", 12),
        ("one 200-item batch open (the demo's), nothing stale (warm function)", 200),
    ]
    ticks = [(label, tick_requests(n)) for label, n in cases]
    sweeps = [sweep_requests(1_000), sweep_requests(int(os.environ.get("BENCH_SWEEP_ITEMS", "100000")))]
    lines = [
        "## Reclaim sweep",
        "",
        f"Command: `{COMMAND}`",
        "",
        "One warm `reclaim_listings` tick (the real runner: lease, run row; the Reclaimer of both pipelines,",
        "built once by its factory), against moto in process, every AWS request counted (see",
        "`ops/bench/reclaim.py`). The batch is made by the real producer and is fresh: nothing is stale.",
        f"Goal (issue 27): at most {GOAL_REQUESTS} requests a reclaim tick of the demo, counted on the sweep's",
        "requests (those naming a listings table). The runner's lease and run row add five to every tick of",
        "every scheduled job whatever it does (the pre-gate read, the acquire, the run row's put and finish,",
        "the release): they are shown apart and are not what the goal bounds.",
        "",
        "Before (main at 36644d1: every batch on 64 item shards and 64 index shards; the sweep queried all 64",
        "for both statuses of both pipelines, plus the open index of each, whatever the batches held):",
        "",
        "| tick | DynamoDB requests | of them the sweep's | lease and run row | SQS |",
        "|---|---:|---:|---:|---:|",
        *BEFORE,
        "",
        "After (this code: a batch records its shard count, `shards_for` its size; the sweep reads the open",
        "index once per pipeline, the open batches' counts once per warm function, and queries only their",
        "reclaim-index shards):",
        "",
        "| tick | DynamoDB requests | of them the sweep's | lease and run row | SQS | the sweep's by operation |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, count in ticks:
        lines.append(
            f"| {label} | {count.dynamodb} | {count.sweep} | {count.by_kind['lease and run']} | "
            f"{count.by_kind['sqs']} | {count.operations() or '-'} |"
        )
    lines += [
        "",
        "A function meeting an open batch for the first time reads its shard count: one BatchGetItem per 100",
        "such batches in that tick, none after.",
        "",
        f"### One reclaim sweep: {STALE} stale items among many",
        "",
        f"`sweep_requests`: batches of {ROWS_PER_BATCH:,} items ({shards_for(ROWS_PER_BATCH)} shards each by",
        "`shards_for`), 10% of the items live and fresh (in the sparse index), the rest completed; "
        f"{STALE} are running",
        "past item-stale; every batch open and fresh. The rows are seeded straight into moto's in-process",
        "backend (not counted); one `Reclaimer.run_once` of both pipelines is counted (a cold reclaimer: it",
        "reads every open batch's count). Goal: flat, at most the ring's bound whatever the table holds:",
        f"2 open-index queries + one BatchGetItem per 100 open batches + 2 statuses x {RECLAIM_SHARDS} shards",
        "+ one write per stale item.",
        "",
        "Before (main at 36644d1):",
        "",
        "| items in table | open batches | requests | by operation |",
        "|---:|---:|---:|---|",
        *BEFORE_SWEEP,
        "",
        "After:",
        "",
        "| items in table | open batches | requests | the ring's bound | by operation | seeding s | sweep s |",
        "|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in sweeps:
        lines.append(
            f"| {r.items:,} | {r.open_batches:,} | {r.count.sweep} | {r.bound} | {r.count.operations()} | "
            f"{r.seed_s:.0f} | {r.sweep_s:.0f} |"
        )
    lines += [
        "",
        "The sweep's reads grow with the open batches' shards, at most the whole ring (64 shards x 2 statuses",
        "of each pipeline with open batches), never with the table: 100 open batches of 8 shards, each from",
        "its own base, cover the ring, so the sweep is back to the ring's queries for that pipeline alone",
        "(the other pipeline, with no open batch, costs its one open-index query). Seconds are wall time of",
        "moto in process, for the reader's patience, not a figure of the sweep.",
    ]
    section = "\n".join(lines)
    missed = [f"{label}: {count.sweep} requests of the sweep" for label, count in ticks if count.sweep > GOAL_REQUESTS]
    missed += [
        f"{r.items:,} items: {r.count.sweep} requests of the sweep, past the ring's {r.bound}"
        for r in sweeps
        if r.count.sweep > r.bound
    ]
    if missed:
        raise GoalMissed(section, missed, "reclaim sweep")
    return section


if __name__ == "__main__":
    print(run())
