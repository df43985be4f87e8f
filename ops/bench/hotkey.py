"""Benchmark: the hottest partition key of durable batches at 10,000 items/s through one batch.

A worker fleet drains one generation batch against moto in process: `WORKERS`
workers (each its own `Worker`, as each Lambda container is) take SQS batches
of 10 in turn, and a simulated clock advances by the time one SQS batch takes
at the fleet's rate (1 ms per batch of 10 at 10,000 items/s), so every
heartbeat, roll-up and index move happens at the times it would in the fleet.
Every DynamoDB request of the stores is seen by botocore hooks (as in
`ops.bench.work`); each item write is charged to the partition key of the row
it writes and, for each index, to the index partition its entry leaves and the
one it enters (a key change is a delete and a put; an entry whose keys stay
the same costs nothing), and each item read to its partition key (a filtered
Query's rows read, not only those it returned). A key's rate
is its count divided by the simulated seconds the drain took, at least one: a
drain shorter than a second puts all its writes in one second (DynamoDB's
partition limits are per second). The producer is measured apart, as if it put
the batch at the fleet's rate.

A batch spreads its keys over as many shards as its size needs
(`jobfence.work.shards_for`, recorded on its row), so the run is made twice:
a 1,000-item slice of a 10,000-item batch (64 shards): its row records
10,000 items, the producer puts and wakes its first 1,000 and the fleet works
them (0.1 simulated seconds of the one-second drain at 10,000 items/s, so a
key's rate is the slice's count over those 0.1 s, as every tenth of that
second puts the same load; the producer's likewise), and a 12-item
batch (one shard, every item on one key), worked whole (its writes all in one
second).

The run fails (`GoalMissed`) when any key of any table or index takes more than
`GOAL_WRITES_PER_S` writes per second.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

from moto import mock_aws

from ops.bench.coldstart import GoalMissed
from ops.bench.work import Meter, _index_key, _setup

COMMAND = "python -m ops.bench ops.bench.hotkey"
GOAL_WRITES_PER_S = 500
RATE_ITEMS_PER_S = 10_000
SQS_BATCH = 10
WORKERS = 50
SMALL_BATCH = 12  # one shard: every item of the batch on one partition key
BIG_BATCH = 10_000  # 64 shards
SLICE = 1_000  # the items of the big batch the fleet works (its first wake-ups)


# Measured with this module on main at d16d7b8 (before the roll-up tallies, the item and reclaim shards and
# the reservation at put), 500 items: every key of one batch on one partition key.
BEFORE = [
    "Before (this module run against main at d16d7b8, 500 items): each SQS batch made one consistent read and one",
    "roll-up write of the batch row (moving its open-index entry), one quota update on the tenant's row, and",
    "every item row of the batch shared one partition key.",
    "",
    "| table | base or index | hottest partition key | writes/s | reads/s |",
    "|---|---|---|---:|---:|",
    "| listing_items | base | `acme#hot` | 20,000 | 20,000 |",
    "| listing_items | by_reclaim | `generation#running#0` | 5,000 | 0 |",
    "| listing_batches | by_open | `generation` | 1,940 | 0 |",
    "| listing_quota | base | `acme` | 1,000 | 0 |",
    "| listing_batches | base | `acme` | 1,000 | 1,020 |",
]


class HotKeyGoalMissed(GoalMissed):
    """A partition key takes more writes per second than the goal."""

    def __init__(self, section: str, missed: list[str]) -> None:
        AssertionError.__init__(self, "hottest key past its goal: " + ", ".join(missed))
        self.section = section


class KeyMeter(Meter):
    """`Meter` that also charges each item write and read to its partition key (base table and indexes)."""

    def reset(self) -> None:
        super().reset()
        self.key_writes: Counter = Counter()  # (logical table, index or "base", partition key) -> item writes
        self.key_reads: Counter = Counter()

    def _pk(self, table: str) -> str:
        return self.schemas[table]["keys"][0]

    def _after(self, model, parsed, **kwargs):
        pending, params = list(self._pending), self._params
        for table, key, old, _ in pending:
            logical = self.schemas[table]["logical"]
            self.key_writes[(logical, "base", _value(key[self._pk(table)]))] += 1
            new = self._image(table, key)
            for name, (pk, sk) in zip(self.schemas[table]["index_names"], self.schemas[table]["indexes"], strict=True):
                before, after = _index_key(old, pk, sk), _index_key(new, pk, sk)
                if before == after:
                    continue
                for entry, image in ((before, old), (after, new)):
                    if entry and image is not None:  # an index key is read from its image
                        self.key_writes[(logical, name, _value(image[pk]))] += 1
        self._read_keys(model.name, params, parsed)
        super()._after(model, parsed, **kwargs)

    def _read_keys(self, name: str, params: dict, parsed: dict) -> None:
        if name == "GetItem":
            table = params["TableName"]
            self.key_reads[(self._logical(table), "base", _value(params["Key"][self._pk(table)]))] += 1
        elif name == "BatchGetItem":
            for table, items in parsed.get("Responses", {}).items():
                for item in items:
                    self.key_reads[(self._logical(table), "base", _value(item[self._pk(table)]))] += 1
        elif name == "Query":
            table = params["TableName"]
            where = params.get("IndexName") or "base"
            # pynamodb names the partition key's value first (:0)
            partition = _value(params.get("ExpressionAttributeValues", {}).get(":0", {"S": "?"}))
            self.key_reads[(self._logical(table), where, partition)] += max(1, len(self.query_read(params, parsed)))


def _value(attribute: dict) -> str:
    ((_, raw),) = attribute.items()
    return str(raw)


@dataclass(frozen=True)
class HotKey:
    """The hottest partition key of one table or index, per simulated second."""

    table: str
    where: str  # "base" or the index name
    key: str
    writes_per_s: float
    reads_per_s: float


def drain(
    n_items: int, work: int | None = None, workers: int = WORKERS, rate: int = RATE_ITEMS_PER_S
) -> tuple[list[HotKey], list[HotKey], float, dict]:
    """Produce one batch of `n_items`, then work `work` of them (default all) through `workers` workers at `rate`
    items/s.

    Returns the fleet's hottest keys (a slice's counts over its own simulated seconds: a stretch of a longer
    drain; a whole drain's over at least one second), the producer's (its writes per key as if it put the batch
    at `rate` items/s), the simulated seconds worked and the fleet's requests.
    """
    work = n_items if work is None else work
    from jobfence.work import BatchRef, Worker
    from jobs.listings.catalog import PIPELINES
    from ops.harness import record

    with mock_aws():
        rig, meter, *_ = _setup(meter_class=KeyMeter)
        rig.quota.grant("acme", n_items)
        meter.reset()
        if work == n_items:
            rig.submit("acme", "hot", n_items)
        else:
            _produce_slice(rig, n_items, work)
        # as if the producer put the batch (or its slice) at the fleet's rate
        produced = _hottest(meter, work / rate, whole=work == n_items)
        fleet = [
            Worker(
                rig.store,
                "generation",
                PIPELINES["generation"].timing,
                rig.performs["generation"],
                rig.queues["generation"],
                rig.logger,
            )
            for _ in range(workers)
        ]
        meter.reset()
        started = rig.clock.now_ms()
        step_ms = 1000 * SQS_BATCH / rate
        turn = 0
        queue = rig.queues["generation"]
        elapsed = 0.0
        done = 0
        while queue.visible() and done < work:
            taken = queue.take(min(SQS_BATCH, work - done))
            done += len(taken)
            result = fleet[turn % workers].process([record(m) for m in taken])
            queue.settle(taken, result)
            turn += 1
            elapsed += step_ms
            rig.clock.advance(ms=int(elapsed) - (rig.clock.now_ms() - started))
        seconds = max(elapsed, step_ms) / 1000
        keys = _hottest(meter, seconds, whole=work == n_items)
        requests = dict(meter.requests)
        batch = rig.store.batches.batch(BatchRef("acme", "hot"))
        assert batch is not None and batch.completed == work, batch
        assert batch.status.value == ("finalized" if work == n_items else "open"), batch
        return keys, produced, seconds, requests


def _produce_slice(rig: Any, n_items: int, work: int) -> None:
    """The producer's first `work` items of a batch of `n_items`, as `Producer.submit` puts them.

    The batch row records `n_items` (so its shard count); its first `work` rows are put and woken, with
    the `enqueued` checkpoint every `CHECKPOINT_EVERY`. (The whole batch through moto costs hours: moto
    copies the whole table for each item of a transaction.)
    """
    from jobfence.work import BatchRef, ItemInput
    from jobfence.work.producer import CHECKPOINT_EVERY

    ref = BatchRef("acme", "hot")
    batch, _ = rig.store.batches.open_batch(ref, "generation", n_items, "bench")
    items = [(i, ItemInput(f"i{i:05d}", {"title": f"thing {i}"})) for i in range(work)]
    rig.store.items.put_items(ref, "generation", items, batch.shards)
    for start in range(0, work, SQS_BATCH):
        rig.queues["generation"].send([batch.item_key(item.item_id) for _, item in items[start : start + SQS_BATCH]])
        done = start + SQS_BATCH
        if done % CHECKPOINT_EVERY == 0 or done >= work:
            rig.store.batches.checkpoint_enqueued(ref, min(done, work))


def _hottest(meter: KeyMeter, seconds: float, whole: bool = True) -> list[HotKey]:
    """The hottest key of each table and index, its writes and reads divided by `seconds`.

    `whole`: the counts are all the work there is, so at least one second (writes within one second all
    count in that second); else they are a slice of a longer stretch of work, divided by its own seconds.
    """
    seconds = max(seconds, 1.0) if whole else seconds
    hottest: dict[tuple[str, str], HotKey] = {}
    for (table, where, key), writes in meter.key_writes.items():
        reads = meter.key_reads.get((table, where, key), 0)
        cand = HotKey(table, where, key, writes / seconds, reads / seconds)
        best = hottest.get((table, where))
        if best is None or cand.writes_per_s > best.writes_per_s:
            hottest[(table, where)] = cand
    for (table, where, key), reads in meter.key_reads.items():
        if (table, where) not in hottest:
            hottest[(table, where)] = HotKey(table, where, key, 0.0, reads / seconds)
    return sorted(hottest.values(), key=lambda h: -h.writes_per_s)


def _rows(keys: list[HotKey]) -> list[str]:
    return [f"| {h.table} | {h.where} | `{h.key}` | {h.writes_per_s:,.0f} | {h.reads_per_s:,.0f} |" for h in keys]


def _case(n_items: int, work: int | None = None) -> tuple[list[str], list[HotKey]]:
    """One batch of `n_items` produced and `work` of its items drained: its section lines and every hottest key."""
    from jobfence.work import shards_for

    keys, produced, seconds, requests = drain(n_items, work)
    worked = (
        f"its first {work:,} items put and worked ({seconds:g} simulated seconds of its drain)"
        if work is not None and work < n_items
        else f"worked whole ({seconds:g} simulated seconds)"
    )
    lines = [
        f"### {n_items:,} items ({shards_for(n_items)} shard(s) by `shards_for`), {worked}",
        "",
        "| table | base or index | hottest partition key | writes/s | reads/s |",
        "|---|---|---|---:|---:|",
        *_rows(keys),
        "",
        "Requests: " + ", ".join(f"{k} {v}" for k, v in sorted(requests.items())) + ".",
        "",
        f"The producer, putting the batch (or the slice) at {RATE_ITEMS_PER_S:,} items/s (99 rows and one quota",
        "update to a transaction, an `enqueued` checkpoint on the batch row per 100 wake-ups):",
        "",
        "| table | base or index | hottest partition key | writes/s | reads/s |",
        "|---|---|---|---:|---:|",
        *_rows(produced),
    ]
    return lines, keys + produced


def run() -> str:
    sys.path.insert(0, ".")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    big, big_keys = _case(BIG_BATCH, SLICE)
    small, small_keys = _case(SMALL_BATCH)
    lines = [
        "## The hottest key (durable batches at 10,000 items/s)",
        "",
        f"Command: `{COMMAND}`",
        "",
        f"A generation batch drained by {WORKERS} workers in SQS batches of {SQS_BATCH}, on a simulated clock at",
        f"{RATE_ITEMS_PER_S:,} items/s, against moto; every item write charged to the partition key it writes and",
        "to each index partition its entry leaves or enters, every item read to its partition key (see",
        "`ops/bench/hotkey.py`). The producer is measured apart, as if it put the batch (or the slice) at",
        f"{RATE_ITEMS_PER_S:,} items/s. Two batches: a {SLICE:,}-item slice of a {BIG_BATCH:,}-item batch (the",
        f"largest: 64 shards, recorded on its row; the producer puts and wakes its first {SLICE:,} items and the",
        "fleet works them; a key's rate is the slice's count over the slice's simulated seconds, a tenth of the",
        "one-second drain; the whole batch would take hours in moto, which copies the table per transaction",
        f"item), and {SMALL_BATCH} items (one shard: every item on one key), worked whole (a drain shorter than a",
        "second puts all its writes in one second).",
        f"Goal: at most {GOAL_WRITES_PER_S} writes/s on any key of any table or index, in both. Reads/s",
        "count item rows read (a Query's rows, each); the roll-up tallies are read by a consistent Query of",
        "each of their 8 partitions per roll-up (about 1 RCU each at this fleet size)",
        "(DynamoDB serves 3,000 RCU/s a partition; the tally partitions take one RCU per roll-up each).",
        "",
        "Not measured: the per-tenant in-flight cap (`jobfence.work.fairness`): the fleet runs without it.",
        "With the catalog's cap one tenant cannot reach 10,000 items/s; with a cap high enough to, its holds",
        "row (`T#in_flight#KIND`, quota table) takes an admit and a release per SQS batch, 2,000 writes/s.",
        "",
        *BEFORE,
        "",
        "After (this code):",
        "",
        *big,
        "",
        *small,
    ]
    section = "\n".join(lines)
    missed = [
        f"{h.table} {h.where} `{h.key}` {h.writes_per_s:,.0f} writes/s"
        for h in big_keys + small_keys
        if h.writes_per_s > GOAL_WRITES_PER_S
    ]
    if missed:
        raise HotKeyGoalMissed(section, missed)
    return section


if __name__ == "__main__":
    print(run())
