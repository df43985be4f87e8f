"""Benchmark: DynamoDB cost of the lease per operation (the cold start is `ops.bench.coldstart`).

Requests are counted with botocore event hooks on the client (what goes on the
wire). Capacity units are computed from the item sizes with DynamoDB's
published on-demand rules, because moto's ConsumedCapacity figures are not
faithful (it reports 0.5 WCU for an UpdateItem, none for a refused one):
a write costs 1 WCU per started KB of the larger of the old and new item, also
when its condition fails; an eventually consistent read 0.5 RCU per started
4 KB; a transactional write 2 WCU per started KB of each item, a ConditionCheck
included.
"""

from __future__ import annotations

import math

import boto3
from moto import mock_aws

from jobfence.testing.sim.markers import marker_write
from ops.bench.capacity import cost_table, item_size

COMMAND = "make bench  (python -m ops.bench ops.bench.lease)"
TTL = 30 * 60_000
HOUR = 3_600_000


class Meter:
    """Requests per operation and the capacity they consume on the leases table."""

    def __init__(self, measured, sizing, table: str) -> None:
        # sizing reads go through a second client, so they are neither counted nor hooked
        self.sizing, self.table = sizing, table
        self.requests: list[str] = []
        self.rcu = 0.0
        self.wcu = 0.0
        measured.meta.events.register("before-parameter-build.dynamodb.*", self._before)

    def _before(self, model, params, **_):
        self.requests.append(model.name)
        current = self.sizing.get_item(TableName=self.table, Key={"job": {"S": "bench"}}).get("Item")
        size = item_size(current)
        if model.name == "GetItem":
            self.rcu += 0.5 * max(1, math.ceil(size / 4096))
        elif model.name == "UpdateItem":
            self.wcu += max(1, math.ceil((size + 64) / 1024))  # +64: the attributes the update adds
        elif model.name == "TransactWriteItems":
            for item in params["TransactItems"]:
                body = item.get("Put", {}).get("Item")
                self.wcu += 2 * max(1, math.ceil((item_size(body) if body else size) / 1024))

    def measure(self, action) -> tuple[int, int, float, float]:
        self.requests.clear()
        self.rcu = self.wcu = 0.0
        action()
        writes = sum(1 for r in self.requests if r in {"UpdateItem", "PutItem", "TransactWriteItems"})
        return len(self.requests), writes, self.rcu, self.wcu


def lease_costs() -> list[tuple[str, tuple[int, int, float, float]]]:
    from jobfence.clock import FrozenClock
    from jobfence.errors import IntervalNotElapsed, Skip
    from jobfence.lease import LeaseStore
    from jobfence_ops.tables import create_catalog_tables

    rows = []
    with mock_aws():
        setup = boto3.client("dynamodb")
        tables = create_catalog_tables(setup, names={"leases", "runs"})
        client = boto3.client("dynamodb")
        clock = FrozenClock()
        store = LeaseStore(client, tables["leases"], clock)
        meter = Meter(client, setup, tables["leases"])

        lease_box = {}

        def acquire():
            lease_box["lease"] = store.acquire("bench", "commerce:req-1", TTL, HOUR)

        rows.append(("acquire (one conditional write, gate folded in)", meter.measure(acquire)))
        clock.advance(minutes=5)
        rows.append(("renew", meter.measure(lambda: lease_box.__setitem__("lease", store.renew(lease_box["lease"])))))
        write = marker_write(tables["runs"], job="bench", run_key="x")

        def fenced_write():
            with store.transaction(lease_box["lease"]) as tx:
                tx.add(write)

        rows.append(("fenced write of one small item", meter.measure(fenced_write)))

        def pre_gate_held():
            assert store.would_skip(store.peek("bench"), clock.now_ms(), HOUR) is Skip.LEASED

        rows.append(("skipped tick, pre-gate: lease held", meter.measure(pre_gate_held)))
        rows.append(("release", meter.measure(lambda: store.release(lease_box["lease"]))))
        clock.advance(minutes=5)

        def pre_gate_interval():
            assert store.would_skip(store.peek("bench"), clock.now_ms(), HOUR) is Skip.INTERVAL

        rows.append(("skipped tick, pre-gate: interval not elapsed", meter.measure(pre_gate_interval)))

        def conditional_skip():
            # the pre-gate read was stale and let the tick through; the conditional write refuses it
            store.peek("bench")
            try:
                store.acquire("bench", "commerce:req-2", TTL, HOUR)
            except IntervalNotElapsed:
                return
            raise AssertionError("the gate should have refused")

        rows.append(("skipped tick, conditional write refused", meter.measure(conditional_skip)))
    return rows


def run() -> str:
    rows = lease_costs()
    lines = [
        "## Lease and scheduled tick",
        "",
        f"Command: `{COMMAND}`",
        "",
        "Requests counted with botocore hooks against moto; capacity from item sizes with DynamoDB's",
        "on-demand rules (see `ops/bench/lease.py`). One lease item is at most about 500 bytes (with its run id and "
        "the replaced term's copy): 1 WCU a write.",
        "",
        *cost_table(rows),
    ]
    lines += [
        "",
        "A skipped tick decided by the pre-gate costs one eventually consistent read and no write; only a",
        "tick that slips past a stale read pays the refused conditional write. A run of n batches costs",
        "acquire + n renewals (the last one finds the job's generator exhausted) + release + two run-row writes",
        "(the `running` put when the lease is taken, and its finish).",
    ]
    return "\n".join(lines)
