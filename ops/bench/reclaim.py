"""Benchmark: the requests of one reclaim tick (`reclaim_listings`), by what the batches hold.

The job runs as deployed: the real scheduled runner (lease, run row) over the
real Reclaimer of both listings pipelines, built once by its factory as a
warm function is (`jobfence.testing.JobHarness`), against moto in process. A
batch is created by the real producer. Every AWS request of the process is
counted (a wrapper around botocore's `_make_api_call`, counting only); a
request goes to "sweep" when it names a listings table, to "lease and run"
otherwise, and SQS requests (re-sent wake-ups) apart.

The "10 stale among many" sweep (`sweep_requests`) seeds its rows straight
into moto's in-process backend (no request, nothing counted: the item rows are
built with the store's key function `ItemKey.of`, the batch rows by
`BatchStore.open_batch`); then only one `Reclaimer.run_once` is counted, with
the same wrapper, and metered (`ops.bench.work.Meter`: read units from the rows'
sizes, every row a filtered Query reads).

Goals, on the sweep's requests (the listings tables'), not the runner's lease
and run row (five in every tick of every scheduled job, whatever it does):
in a tick in which nothing is stale, at most `GOAL_REQUESTS` (the demo's
ticks: no open batch, or its one batch open); a sweep makes at most
`sweep_bound` requests: one open-index Query per pipeline, one BatchGetItem per
100 open batches it has not seen, one Query per item partition of each open
batch (more pages only past 1 MB a partition), one write per stale item. The
run fails (`GoalMissed`, exit 1) past either.
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
STALE = 10
# rows open -> rows a batch (`shards_for`: 1,000 rows on 8 partitions, 10,000 on 64)
SWEEPS = ((1_000, 1_000), (10_000, 1_000), (100_000, 10_000))
PIPELINES = 2  # the listings pipelines: one open-index Query each
TICKS_PER_DAY = 24 * 60 // 5  # reclaim_listings runs rate(5 minutes)

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
# Measured with this module on main at d3ed0df (the `by_reclaim` index over a ring of 64 shards; the sweep
# queried the ring shards of the open batches for both live statuses), the figures of this page then.
BEFORE_INDEX = [
    "| no batch | 7 | 2 | 5 | 0 | 2 Query |",
    "| one 12-item batch open, nothing stale (warm function) | 9 | 4 | 5 | 0 | 4 Query |",
    "| one 200-item batch open (the demo's), nothing stale (warm function) | 11 | 6 | 5 | 0 | 6 Query |",
]
BEFORE_INDEX_SWEEP = [
    "| 1,000 | 1 | 29 | 141 | 1 BatchGetItem, 18 Query, 10 UpdateItem |",
    "| 100,000 | 100 | 141 | 141 | 1 BatchGetItem, 130 Query, 10 UpdateItem |",
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
        if not getattr(self, "_bench_sizing", False):  # the meter's own reads of item sizes are not the sweep's
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
    from jobs.listings.stores import build_store, build_wakeups

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
    """One counted and metered reclaim sweep over a seeded table."""

    rows_open: int
    open_batches: int
    partitions: int  # item partitions of the open batches
    requeued: int
    count: RequestCount
    rru: float  # read units of the sweep (items and batches tables)
    item_rru: float  # of them the item partitions'
    row_bytes: float  # mean size of an item row read
    seed_s: float  # seeding the rows (not counted)
    sweep_s: float

    @property
    def bound(self) -> int:
        return sweep_bound(self.open_batches, self.partitions, self.requeued)

    def dollars(self, prices: Any) -> float:
        return self.rru * prices.read_request_unit + self.requeued * prices.write_request_unit


def sweep_bound(unseen_batches: int, partitions: int, stale: int, pipelines: int = PIPELINES) -> int:
    """The most requests a sweep makes, its partitions under 1 MB each.

    One open-index Query per pipeline, one BatchGetItem per 100 open batches
    the reclaimer has not seen (a cold function: all of them), one Query per
    item partition of each open batch, one write per stale item.
    """
    return pipelines + math.ceil(unseen_batches / 100) + partitions + stale


def sweep_requests(rows_open: int, rows_a_batch: int, stale: int = STALE, live_fraction: float = 0.1) -> SweepCost:
    """One reclaim sweep over `rows_open` item rows of open batches, of which `stale` are running past item-stale.

    Batches of `rows_a_batch` items, every one open and fresh (created by
    `BatchStore.open_batch`, so each records `shards_for(rows_a_batch)`);
    `live_fraction` of the items pending or running and fresh, the rest
    completed; the stale ones spread evenly over the rows. The item rows are put
    straight into moto's in-process backend.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    from jobfence.work import BatchRef, ItemKey, ItemStatus
    from ops.bench.capacity import item_size
    from ops.bench.work import _setup

    with mock_aws():
        rig, meter, tables, _, clock = _setup(metered=True)
        meter.sizing._bench_sizing = True
        now = clock.now_ms()
        stale_at = now - 10 * 60_000  # past item-stale (6 min) and the time budget (70 s)
        n_batches = max(1, rows_open // rows_a_batch)
        every = max(1, (n_batches * rows_a_batch) // stale)
        items_table = dynamodb_backends[DEFAULT_ACCOUNT_ID]["us-east-1"].get_table(tables["listing_items"])
        started = time.perf_counter()
        partitions, sizes = 0, 0
        for b in range(n_batches):
            ref = BatchRef("acme", f"b{b:04d}")
            batch, _created = rig.store.batches.open_batch(ref, "generation", rows_a_batch, "bench")
            partitions += batch.shards
            for i in range(rows_a_batch):
                key = ItemKey.of(ref, f"i{i:05d}", batch.shards)
                if (b * rows_a_batch + i) % every == 0:
                    status, updated = ItemStatus.RUNNING, stale_at
                elif i % int(1 / live_fraction) == 1:
                    status, updated = (ItemStatus.PENDING if i % 2 else ItemStatus.RUNNING), now - 60_000
                else:
                    status, updated = ItemStatus.COMPLETED, now - 60_000
                row = _item_row(key, i, status, updated, now)
                sizes += item_size(row)
                items_table.put_item(row)
        seed_s = time.perf_counter() - started
        _partition_queries(items_table)
        meter.reset()
        started = time.perf_counter()
        with counting() as count:  # a cold reclaimer: it reads every open batch's shard count
            counts = rig.reclaimer.run_once()
        sweep_s = time.perf_counter() - started
        assert counts.requeued == stale, counts
        assert "Scan" not in count.by_operation, count.by_operation
        return SweepCost(
            rows_open=n_batches * rows_a_batch,
            open_batches=n_batches,
            partitions=partitions,
            requeued=counts.requeued,
            count=count,
            rru=sum(meter.rcu.values()),
            item_rru=meter.rcu["listing_items"],
            row_bytes=sizes / (n_batches * rows_a_batch),
            seed_s=seed_s,
            sweep_s=sweep_s,
        )


def _partition_queries(table: Any) -> None:
    """Make moto's base-table Query look at its partition only (it walks the whole table for each request).

    What it returns is the same: moto keeps a range-key table's rows by partition key, and its
    query keeps only the rows of the partition asked for, in sort-key order, from there on.
    """
    full, original = table.all_items, table.query

    def query(hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is None and hash_key is not None:
            table.all_items = lambda: list(table.items.get(hash_key, {}).values())
        try:
            return original(hash_key, *args, **kwargs)
        finally:
            table.all_items = full

    table.query = query


def _item_row(key: Any, seq: int, status: Any, updated: int, now: int) -> dict[str, Any]:
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
    elif status is ItemStatus.RUNNING:
        row["claim_token"] = {"S": "t"}
    return row


def run() -> str:
    sys.path.insert(0, ".")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    from jobfence.prices import PRICES, PRICES_AS_OF
    from jobfence.work import shards_for

    cases = [
        ("no batch", 0),
        ("one 12-item batch open, nothing stale (warm function)", 12),
        ("one 200-item batch open (the demo's), nothing stale (warm function)", 200),
    ]
    ticks = [(label, tick_requests(n)) for label, n in cases]
    sweeps = [sweep_requests(rows, per_batch) for rows, per_batch in SWEEPS]
    lines = [
        "## Reclaim sweep",
        "",
        f"Command: `{COMMAND}` (measured 2026-12-04 on main at b85ebd8: no item index; the sweep reads the item",
        "partitions of open batches)",
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
        "Then (main at d3ed0df: a batch records its shard count; the sweep read the open index once per",
        "pipeline and queried only the `by_reclaim` ring shards of the open batches, for both live statuses):",
        "",
        "| tick | DynamoDB requests | of them the sweep's | lease and run row | SQS | the sweep's by operation |",
        "|---|---:|---:|---:|---:|---|",
        *BEFORE_INDEX,
        "",
        "After (this code: the items table has no index; the sweep reads the open index once per pipeline, the",
        "open batches' shard counts once per warm function, and each open batch's item partitions, one Query",
        "each, filtered to its stale live rows of both statuses):",
        "",
        "| tick | DynamoDB requests | of them the sweep's | lease and run row | SQS | the sweep's by operation |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for label, count in ticks:
        lines.append(
            f"| {label} | {count.dynamodb} | {count.sweep} | {count.by_kind['lease and run']} | "
            f"{count.by_kind['sqs']} | {count.operations() or '-'} |"
        )
    demo = dict(ticks)[cases[-1][0]]
    lines += [
        "",
        f"The demo's tick: {demo.sweep} requests of the sweep (goal: at most {GOAL_REQUESTS}): the open index of "
        "each pipeline",
        f"and the {shards_for(200)} item partitions of its 200-item batch. The sweep yields a page (and the runner "
        "renews its lease)",
        "for every page of stale items and after every 100 open batches read, so a tick that finds nothing stale "
        "among fewer",
        "than 100 open batches renews nothing. A function meeting an open batch for the first time reads its shard "
        "count: one BatchGetItem",
        "per 100 such batches in that tick, none after.",
        "",
        f"### One reclaim sweep: {STALE} stale items among the rows of open batches",
        "",
        "`sweep_requests`: open batches of 1,000 items (8 partitions each by `shards_for`) or 10,000 (64), 10%",
        f"of the items live and fresh, the rest completed; {STALE} are running past item-stale, spread over the",
        "rows; every batch open and fresh. The rows are seeded straight into moto's in-process backend (not",
        "counted); one `Reclaimer.run_once` of both pipelines is counted and metered (a cold reclaimer: it reads",
        "every open batch's shard count). Read units from the rows' sizes (`ops/bench/work.py`): a Query is",
        "charged every row it reads, 0.5 RRU per 4 KB a page (eventually consistent), whatever its filter",
        "returns; each stale item's write is 1 WRU. Goal: at most "
        f"{PIPELINES} open-index Queries + one BatchGetItem per 100",
        "unseen open batches + one Query per item partition of each open batch + one write per stale item.",
        "",
        "Before (main at 36644d1):",
        "",
        "| items in table | open batches | requests | by operation |",
        "|---:|---:|---:|---|",
        *BEFORE_SWEEP,
        "",
        "Then (main at d3ed0df, the reclaim-index ring; its bound was 2 + one BatchGetItem per 100 open batches",
        "+ 2 statuses x 64 shards + one write per stale item; the index entries read were the stale rows',",
        "the rows' own writes paid for them: 4 WRU an item, `## Cost per million items`):",
        "",
        "| items in table | open batches | requests | the ring's bound | by operation |",
        "|---:|---:|---:|---:|---|",
        *BEFORE_INDEX_SWEEP,
        "",
        f"After (this code; dollars at the on-demand prices of `jobfence.prices`, as of {PRICES_AS_OF}, reads and the",
        f"stale items' writes; a day at one sweep every 5 minutes, {TICKS_PER_DAY} sweeps, the same rows open):",
        "",
        "| rows open | open batches | item partitions | requests | bound | by operation | RRU | of them the items' "
        "| bytes a row | $ a sweep | $ a day | seeding s | sweep s |",
        "|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sweeps:
        lines.append(
            f"| {r.rows_open:,} | {r.open_batches:,} | {r.partitions:,} | {r.count.sweep} | {r.bound} | "
            f"{r.count.operations()} | {r.rru:,.1f} | {r.item_rru:,.1f} | {r.row_bytes:.0f} | "
            f"${r.dollars(PRICES):.6f} | ${r.dollars(PRICES) * TICKS_PER_DAY:.4f} | {r.seed_s:.0f} | {r.sweep_s:.0f} |"
        )
    biggest = sweeps[-1]
    lines += [
        "",
        "The sweep's requests grow with the open batches' partitions, its read units with their rows (every",
        f"row of every open batch, once a sweep: {biggest.item_rru / biggest.rows_open * 1000:.1f} RRU per "
        f"1,000 rows of {biggest.row_bytes:.0f} bytes), never with",
        "the table's finished batches: a final batch is not in the open index, so none of its rows is read. A",
        "row read costs 0.125 RRU a sweep per KB of its size, so a batch of larger inputs costs more to sweep",
        "in proportion. What that costs per item is in `## Cost per million items` (a batch seen open by one or",
        "two sweeps; each further sweep per million items). Seconds are wall time of moto in process, for the",
        "reader's patience, not a figure of the sweep.",
    ]
    section = "\n".join(lines)
    missed = [f"{label}: {count.sweep} requests of the sweep" for label, count in ticks if count.sweep > GOAL_REQUESTS]
    missed += [
        f"{r.rows_open:,} rows open: {r.count.sweep} requests of the sweep, past its bound {r.bound}"
        for r in sweeps
        if r.count.sweep > r.bound
    ]
    if missed:
        raise GoalMissed(section, missed, "reclaim sweep")
    return section


if __name__ == "__main__":
    print(run())
