"""Benchmark: the requests of one reclaim tick (`reclaim_listings`), by what the batches hold.

The job runs as deployed: the real scheduled runner (lease, run row) over the
real Reclaimer of both listings pipelines, built once by its factory as a
warm function is (`jobfence.testing.JobHarness`), against moto in process. A
batch is created by the real producer. Every AWS request of the process is
counted (a wrapper around botocore's `_make_api_call`, counting only); a
request goes to "sweep" when it names a listings table, to "lease and run"
otherwise, and SQS requests (re-sent wake-ups) apart.

The "10 stale among many" sweep is `ops.bench.work.sweep_costs` (its rows are
loaded through an unhooked client, then one `Reclaimer.run_once` is counted).

Goal: in a tick in which nothing is stale, the sweep makes at most
`GOAL_REQUESTS` requests (the demo's ticks: no open batch, or its one batch
open); the runner's lease and run row add their own five; the stale sweep's
requests do not grow with the table.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from moto import mock_aws

from ops.bench.coldstart import GoalMissed

COMMAND = "python -m ops.bench ops.bench.reclaim"
GOAL_REQUESTS = 10
LISTINGS = ("listing_batches", "listing_items", "listing_quota")

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


class GoalMissedReclaim(GoalMissed):
    """A reclaim tick made more requests than the goal."""

    def __init__(self, section: str, missed: list[str]) -> None:
        AssertionError.__init__(self, "reclaim ticks past their goal: " + ", ".join(missed))
        self.section = section


class RequestCount:
    """Every AWS request the process makes, by where it goes (counted, never changed)."""

    def __init__(self) -> None:
        self.by_kind: Counter = Counter()  # "sweep" | "lease and run" | "sqs"
        self.by_operation: Counter = Counter()

    def note(self, service: str, operation: str, params: dict[str, Any]) -> None:
        if service == "sqs":
            self.by_kind["sqs"] += 1
            return
        listings = any(name in table for table in _tables_of(params) for name in LISTINGS)
        self.by_kind["sweep" if listings else "lease and run"] += 1
        if listings:
            self.by_operation[operation] += 1

    @property
    def dynamodb(self) -> int:
        return self.by_kind["sweep"] + self.by_kind["lease and run"]


def _tables_of(params: dict[str, Any]) -> list[str]:
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
    original = BaseClient._make_api_call

    def counted(self, operation_name, api_params):
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
        for _ in range(2):  # a tick that meets the batch first (cold for it), then the steady one measured
            clock.advance(minutes=5)
            # the runner alone (the harness's own read of the run row afterwards is not the tick's)
            with counting() as count, within_grant(harness.tables, harness.spec.tables, harness.spec.name):
                result = harness.runner.run(harness.spec, job, Trigger("scheduled", clock.now_ms()), None)
            assert result.outcome is Outcome.RAN, result
        return count


def run() -> str:
    sys.path.insert(0, ".")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    from ops.bench.work import sweep_costs

    cases = [
        ("no batch", 0),
        ("one 12-item batch open, nothing stale (warm function)", 12),
        ("one 200-item batch open (the demo's), nothing stale (warm function)", 200),
    ]
    ticks = [(label, tick_requests(n)) for label, n in cases]
    sweeps = [sweep_costs(1_000), sweep_costs(int(os.environ.get("BENCH_SWEEP_ITEMS", "100000")))]
    lines = [
        "## The reclaim sweep: requests per tick",
        "",
        f"Command: `{COMMAND}`",
        "",
        "One warm `reclaim_listings` tick (the real runner: lease, run row; the Reclaimer of both pipelines,",
        "built once by its factory), against moto in process, every AWS request counted (see",
        "`ops/bench/reclaim.py`). The batch is made by the real producer and is fresh: nothing is stale.",
        f"Goal: at most {GOAL_REQUESTS} requests of the sweep a tick (the runner's lease and run row add five:",
        "the pre-gate read, the acquire, the run row's put and finish, the release).",
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
        "| tick | DynamoDB requests | of them the sweep's | lease and run row | SQS |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, count in ticks:
        lines.append(
            f"| {label} | {count.dynamodb} | {count.by_kind['sweep']} | {count.by_kind['lease and run']} | "
            f"{count.by_kind['sqs']} |"
        )
    lines += [
        "",
        "A function meeting an open batch for the first time reads its shard count: one BatchGetItem per 100",
        "such batches in that tick, none after.",
        "",
        "### One reclaim sweep: 10 stale items among many",
        "",
        "`ops.bench.work.sweep_costs`: batches of 1,000 items (8 shards each by `shards_for`), 10% of the",
        "items live and fresh (in the sparse index), the rest completed; 10 are running past item-stale;",
        "every batch open and fresh. One `Reclaimer.run_once` of both pipelines is counted (a cold",
        "reclaimer: it reads every open batch's count).",
        "",
        "Before (main at 36644d1):",
        "",
        "| items in table | open batches | requests | by operation |",
        "|---:|---:|---:|---|",
        *BEFORE_SWEEP,
        "",
        "After:",
        "",
        "| items in table | open batches | requests | by operation |",
        "|---:|---:|---:|---|",
    ]
    for r in sweeps:
        ops = ", ".join(f"{v} {k}" for k, v in sorted(r["requests"].items()))
        lines.append(f"| {r['items']:,} | {r['items'] // 1_000:,} | {sum(r['requests'].values())} | {ops} |")
    lines += [
        "",
        "The sweep's reads grow with the open batches' shards, at most the whole ring (64 shards x 2 statuses",
        "of each pipeline with open batches), never with the table: 100 open batches of 8 shards, each from",
        "its own base, cover the ring, so the sweep is back to the ring's queries for that pipeline alone.",
    ]
    section = "\n".join(lines)
    missed = [
        f"{label}: {count.by_kind['sweep']} requests of the sweep"
        for label, count in ticks
        if count.by_kind["sweep"] > GOAL_REQUESTS
    ]
    if missed:
        raise GoalMissedReclaim(section, missed)
    return section


if __name__ == "__main__":
    print(run())
