"""Benchmark: DynamoDB cost of durable batches (seed 003) per completed item, per reclaim sweep,
and recounts per batch.

Requests are counted with botocore event hooks on every DynamoDB client the
stores use (pynamodb's model and transaction connections), against moto in
process. Capacity is computed from item sizes with DynamoDB's on-demand rules,
because moto's ConsumedCapacity is a constant: a write costs 1 WCU per started
KB of the larger of the old and new image (also when its condition fails), a
transactional write 2 WCU per started KB of each item; a GSI entry costs 1 WCU
when it appears or disappears and 2 when its key changes (delete + put), and
nothing when a KEYS_ONLY entry's keys stay the same; a read costs 1 RCU per
started 4 KB (strongly consistent) or 0.5 (eventually consistent), summed per
page for a Query over every item the page read (a filter's dropped rows
included: `Meter.query_read`), on the full item for a base-table read whatever
the projection, on the index entry for an index query, at least one unit a request.
Old and new images are read through a second, unhooked client.
"""

from __future__ import annotations

import math
import os
import random
import re
import sys
from collections import Counter, defaultdict
from typing import Any

import boto3
from moto import mock_aws

from ops.bench.capacity import item_size

COMMAND = "make bench  (python -m ops.bench; this section: ops.bench.work)"
WRITE_OPS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
LISTING_TABLES = {"listing_batches", "listing_items", "listing_quota"}


class Meter:
    """Requests, item writes and capacity units per table, from botocore hooks."""

    def __init__(self, sizing: Any, schemas: dict[str, dict[str, Any]]) -> None:
        self.sizing = sizing  # unhooked: its reads are neither counted nor charged
        self.schemas = schemas  # physical table -> {"keys": [...], "indexes": [(pk, sk)], "logical": name}
        self.reset()
        self._pending: list[tuple[str, dict, dict | None, bool]] = []

    def reset(self) -> None:
        self.requests: Counter = Counter()
        self.item_writes: Counter = Counter()  # per logical table
        self.wcu: Counter = Counter()
        self.gsi_wcu: Counter = Counter()
        self.rcu: defaultdict[str, float] = defaultdict(float)  # half units for eventually consistent reads

    def attach(self, client: Any) -> None:
        if getattr(client, "_bench_meter", None) is self:
            return
        client._bench_meter = self
        client.meta.events.register("before-parameter-build.dynamodb.*", self._before)
        client.meta.events.register("after-call.dynamodb.*", self._after)

    # -- hooks ----------------------------------------------------------------------------------

    def _key(self, table: str, item: dict) -> dict:
        return {k: item[k] for k in self.schemas[table]["keys"]}

    def _image(self, table: str, key: dict) -> dict | None:
        return self.sizing.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")

    def _writes_of(self, name: str, params: dict) -> list[tuple[str, dict, bool]]:
        if name in ("PutItem",):
            return [(params["TableName"], self._key(params["TableName"], params["Item"]), False)]
        if name in ("UpdateItem", "DeleteItem"):
            return [(params["TableName"], params["Key"], False)]
        if name == "BatchWriteItem":
            out = []
            for table, reqs in params["RequestItems"].items():
                for r in reqs:
                    item = r.get("PutRequest", {}).get("Item") or r.get("DeleteRequest", {}).get("Key")
                    out.append((table, self._key(table, item), False))
            return out
        if name == "TransactWriteItems":
            out = []
            for entry in params["TransactItems"]:
                ((op, body),) = entry.items()
                if op == "ConditionCheck":
                    continue
                key = body.get("Key") or self._key(body["TableName"], body["Item"])
                out.append((body["TableName"], key, True))
            return out
        return []

    def _before(self, model, params, **_):
        self.requests[model.name] += 1
        self._pending = [(t, k, self._image(t, k), tx) for t, k, tx in self._writes_of(model.name, params)]
        self._params = params

    def _after(self, model, parsed, **_):
        name, params = model.name, self._params
        for table, key, old, transactional in self._pending:
            new = self._image(table, key)
            logical = self.schemas[table]["logical"]
            self.item_writes[logical] += 1
            units = max(1, math.ceil(max(item_size(old), item_size(new)) / 1024))
            self.wcu[logical] += 2 * units if transactional else units
            for pk, sk in self.schemas[table]["indexes"]:
                before = _index_key(old, pk, sk)
                after = _index_key(new, pk, sk)
                if before and after:
                    self.gsi_wcu[logical] += 0 if before == after else 2
                elif before or after:
                    self.gsi_wcu[logical] += 1
        self._pending = []
        consistent = 1.0 if params.get("ConsistentRead") else 0.5
        if name == "GetItem" and "Item" in parsed:
            self.rcu[self._logical(params["TableName"])] += consistent * max(
                1, math.ceil(item_size(parsed["Item"]) / 4096)
            )
        elif name == "BatchGetItem":
            for table, items in parsed.get("Responses", {}).items():
                factor = 1.0 if params["RequestItems"][table].get("ConsistentRead") else 0.5
                for item in items:
                    full = self._image(table, self._key(table, item))
                    self.rcu[self._logical(table)] += factor * max(1, math.ceil(item_size(full) / 4096))
        elif name == "Query":
            table = params["TableName"]
            read = self.query_read(params, parsed)
            if params.get("IndexName") or "FilterExpression" in params:
                size = sum(item_size(i) for i in read)  # entries as the index projects them; filtered: unprojected
            else:
                size = sum(item_size(self._image(table, self._key(table, i))) for i in read)
            self.rcu[self._logical(table)] += consistent * max(1, math.ceil(size / 4096))

    def query_read(self, params: dict, parsed: dict) -> list[dict]:
        """The items one Query page read: DynamoDB charges every item it read, before its filter.

        Unfiltered, the items it returned. Filtered, the same page again through the
        unhooked client without the filter and the projection, cut at the page's
        `LastEvaluatedKey` (moto, like DynamoDB, ends a page at 1 MB read or `Limit`
        items read, before filtering).
        """
        if "FilterExpression" not in params:
            return parsed.get("Items", [])
        condition = params["KeyConditionExpression"]
        used = set(re.findall(r"[#:][A-Za-z0-9_]+", condition))
        request = {
            k: params[k]
            for k in ("TableName", "IndexName", "ExclusiveStartKey", "Limit", "ScanIndexForward", "ConsistentRead")
            if k in params
        }
        request["KeyConditionExpression"] = condition
        request["ExpressionAttributeValues"] = {
            k: v for k, v in params.get("ExpressionAttributeValues", {}).items() if k in used
        }
        names = {k: v for k, v in params.get("ExpressionAttributeNames", {}).items() if k in used}
        if names:
            request["ExpressionAttributeNames"] = names
        items = self.sizing.query(**request).get("Items", [])
        last = parsed.get("LastEvaluatedKey")
        if last:
            at = next(i for i, item in enumerate(items) if all(item.get(k) == v for k, v in last.items()))
            items = items[: at + 1]
        return items

    def _logical(self, table: str) -> str:
        return self.schemas[table]["logical"]


def _index_key(item: dict | None, pk: str, sk: str | None):
    if not item or pk not in item or (sk and sk not in item):
        return None
    return (str(item[pk]), str(item.get(sk)) if sk else None)


# -- rig ---------------------------------------------------------------------------------------


def _setup(metered: bool = True, meter_class: type[Meter] | None = None):
    from jobfence.clock import FrozenClock
    from jobfence_ops.tables import create_catalog_tables
    from jobs.catalog import CATALOG
    from ops.harness import build_rig

    client = boto3.client("dynamodb")
    tables = create_catalog_tables(client, names=LISTING_TABLES)
    schemas = {}
    for logical, physical in tables.items():
        spec = CATALOG.tables[logical]
        keys = [spec.partition_key[0]] + ([spec.sort_key[0]] if spec.sort_key else [])
        indexes = [(i.partition_key[0], i.sort_key[0] if i.sort_key else None) for i in spec.indexes]
        schemas[physical] = {
            "keys": keys,
            "indexes": indexes,
            "index_names": [i.name for i in spec.indexes],
            "logical": logical,
        }
    clock = FrozenClock()
    rig = build_rig(client, tables, clock)
    meter = (meter_class or Meter)(boto3.client("dynamodb"), schemas)
    for client in () if not metered else [*rig.store.clients(), *rig.quota.clients()]:
        meter.attach(client)
    return rig, meter, tables, client, clock


def per_item_costs(n_items: int = 1_000, duplicates: float = 0.0, seed: int = 3) -> dict[str, Any]:
    """Produce one batch of `n_items`, then drain it through the worker in SQS batches of 10."""
    with mock_aws():
        rig, meter, *_ = _setup()
        rig.quota.grant("acme", n_items)
        meter.reset()
        rig.submit("acme", "bench", n_items)
        produce = (dict(meter.requests), dict(meter.item_writes), dict(meter.wcu), dict(meter.gsi_wcu))
        meter.reset()
        rnd = random.Random(seed)
        from ops.harness import record

        while rig.queues["generation"].visible():
            taken = rig.queues["generation"].take(10)
            rig.deliver()
            if rnd.random() < duplicates:
                # SQS at-least-once: the same messages come back in a later invocation
                rig.workers["generation"].process([dict(record(m), messageId=m.message_id + "-again") for m in taken])
            rig.clock.advance(seconds=20)  # time passes per SQS batch, so every heartbeat moves its index entry
        from jobfence.work import BatchRef

        batch = rig.store.batches.batch(BatchRef("acme", "bench"))
        assert batch.completed == n_items and batch.status.value == "finalized"
        out = {
            "n": n_items,
            "produce": produce,
            "requests": dict(meter.requests),
            "item_writes": dict(meter.item_writes),
            "wcu": dict(meter.wcu),
            "gsi_wcu": dict(meter.gsi_wcu),
            "rcu": dict(meter.rcu),
            "recounts": batch.recounts,
        }
        # a final batch row keeps its recount, not its roll-ups: they are the tally rows' (read after the counts are taken)
        out["rollups"] = rig.store.rollups.sums(BatchRef("acme", "bench"))[2]
        return out


def recounts_many_batches(batches: int = 20, items: int = 50, seed: int = 5) -> Counter:
    """Recounts per batch when batches interleave on one queue, with duplicates and out-of-order delivery."""
    from jobfence.work import BatchRef

    with mock_aws():
        rig, *_ = _setup(metered=False)
        rig.quota.grant("acme", batches * items)
        for b in range(batches):
            rig.submit("acme", f"b{b}", items)
        rnd = random.Random(seed)
        rnd.shuffle(rig.queues["generation"].messages)
        while rig.queues["generation"].visible():
            rig.deliver(n=rnd.randint(1, 10), twice=rnd.random() < 0.2, newest_first=rnd.random() < 0.5)
        return Counter(rig.store.batches.batch(BatchRef("acme", f"b{b}")).recounts for b in range(batches))


def _fmt(x: float) -> str:
    return f"{x:.3g}" if isinstance(x, float) else str(x)


def run() -> str:
    sys.path.insert(0, ".")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
    single = per_item_costs(500)
    dup = per_item_costs(500, duplicates=0.2)
    many = recounts_many_batches()

    def per_item(r: dict, field: str) -> float:
        return sum(r[field].values()) / r["n"]

    lines = [
        "## Durable batches (seed 003)",
        "",
        f"Command: `{COMMAND}`",
        "",
        "Requests counted with botocore hooks on every DynamoDB client of the stores, against moto;",
        "capacity from item sizes with DynamoDB's on-demand rules, GSI entries included (see",
        "`ops/bench/work.py`). Wake-ups go to an in-memory queue (SQS requests are not DynamoDB cost).",
        "",
        "### Writes per completed item (worker: claim, outcome, quota, roll-up, finalize)",
        "",
        "One generation batch of 500 items drained in SQS batches of 10; producer costs separate.",
        "",
        "| run | base-table item writes / item | write requests / item | "
        "base WCU / item | GSI WCU / item | RCU / item | recounts | roll-ups |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, r in (("every message once", single), ("20% of SQS batches redelivered after completion", dup)):
        write_requests = sum(v for k, v in r["requests"].items() if k in WRITE_OPS) / r["n"]
        lines.append(
            f"| {label} | {per_item(r, 'item_writes'):.3f} | {write_requests:.3f} | {per_item(r, 'wcu'):.3f} | "
            f"{per_item(r, 'gsi_wcu'):.3f} | {per_item(r, 'rcu'):.3f} | {r['recounts']} | {r['rollups']} |"
        )
    lines += [
        "",
        "Item writes by table (every message once), per item: "
        + ", ".join(f"{t} {v / single['n']:.3f}" for t, v in sorted(single["item_writes"].items()))
        + ". Requests: "
        + ", ".join(f"{k} {v}" for k, v in sorted(single["requests"].items()))
        + ".",
        "",
        "Target: at most 2.2 base-table item writes per completed item. Per SQS batch of 10: 10 claims, each",
        "one conditional UpdateItem returning the new row (ALL_NEW: no read, no transaction; a claim transaction",
        "with the quota row only for rows born without their unit, none here: the producer reserved them),",
        "10 completions and 1 roll-up (the worker's own tally row, not the batch row), plus the finalize. No",
        "write is transactional and every row is under 1 KB, so base WCU equals item writes. The items table",
        "has no index: the GSI figure is the batch row's open-index entry alone (it appears at open, moves with a",
        "heartbeat, leaves at finalize), 1 WCU over the batch. The reads are the roll-ups': each reads the batch",
        "row and the 8 tally partitions (consistent), about 0.9 RCU an item at 10 items a roll-up; the finalize",
        "recount reads the batch's item partitions once. A redelivered message's claim is refused by the",
        "completed row, and DynamoDB charges a refused conditional write (1 WCU): that is the redelivered run's",
        "extra writes (before this code the claim transaction's consistent BatchGetItem saw the row completed,",
        "and nothing was written).",
        "",
        "Producer, 500 items: "
        + ", ".join(f"{k} {v}" for k, v in sorted(single["produce"][0].items()))
        + f"; item writes {sum(single['produce'][1].values())}, base WCU {sum(single['produce'][2].values()):g},"
        + f" GSI WCU {sum(single['produce'][3].values()):g} (one row per item, a checkpoint per 100 wake-ups;"
        + " item puts are conditional, 99 to a transaction with the tenant's quota reservation, at 2 WCU each,"
        + " so a paused or re-sent producer never resets a row nor reserves twice).",
        "",
        "### Recounts per batch",
        "",
        "20 batches x 50 items interleaved on one queue, shuffled, random SQS batch sizes, 20% of",
        "deliveries duplicated, half delivered newest first: "
        + ", ".join(f"{n} recount(s): {c} batches" for n, c in sorted(many.items()))
        + f". Single batch above: {single['recounts']} recount(s).",
        "",
        "The reclaim sweep's requests (one tick; 10 stale items among many) are in",
        "[Reclaim sweep](#reclaim-sweep) (`ops.bench.reclaim`).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
