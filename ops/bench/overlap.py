"""Benchmark: what the overlap policies (skip, buffer_one) and a catch-up cost, per operation.

The real `ScheduledRunner` on moto, an hourly job whose run outlasts its hour,
so the next tick meets the live holder. Requests are counted with botocore
hooks on the runner's client, per operation and table; capacity follows
DynamoDB's on-demand rules from the item sizes (1 WCU per started KB of the
larger of the old and new item, refused writes included; an eventually
consistent read 0.5 RCU per started 4 KB, a strongly consistent one 1 RCU).
Every lease item and run row here is under 1 KB (asserted), so a write is 1 WCU.
"""

from __future__ import annotations

import io
import logging
import math
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from moto import mock_aws

from ops.bench.capacity import cost_table, item_size

COMMAND = "python -m ops.bench ops.bench.overlap"
HOUR = 3_600_000
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"}


class Meter:
    """Requests and capacity of one measured phase (the runner's client only)."""

    def __init__(self, client, sizing) -> None:
        self.sizing = sizing
        self.calls: list[tuple[str, dict]] = []
        client.meta.events.register("before-parameter-build.dynamodb.*", self._before)

    def _before(self, model, params, **_):
        self.calls.append((model.name, dict(params)))

    def measure(self, action) -> tuple[int, int, float, float]:
        """The figures of `action`'s calls (a measure nested inside it counts in both)."""
        start = len(self.calls)
        action()
        calls = self.calls[start:]
        rcu = wcu = 0.0
        for name, params in calls:
            if name == "GetItem":
                item = self.sizing.get_item(TableName=params["TableName"], Key=params["Key"]).get("Item")
                units = max(1, math.ceil(item_size(item) / 4096))
                rcu += units * (1.0 if params.get("ConsistentRead") else 0.5)
            elif name in WRITES:
                key = params.get("Key") or {k: v for k, v in params.get("Item", {}).items() if k in ("job", "run_key")}
                item = self.sizing.get_item(TableName=params["TableName"], Key=key).get("Item")
                assert item_size(item) < 1024, "every item here is under 1 KB"
                wcu += 1
        writes = sum(1 for name, _ in calls if name in WRITES)
        return len(calls), writes, rcu, wcu


def overlap_costs() -> list[tuple[str, tuple[int, int, float, float]]]:
    from jobfence.clock import FrozenClock
    from jobfence.lease import LeaseStore
    from jobfence.registry import CatchUp, JobSpec, Overlap
    from jobfence.runs import RunStore
    from jobfence.scheduled import Outcome, ScheduledRunner
    from jobfence.triggers import Trigger
    from jobfence_ops.tables import create_catalog_tables

    rows: list[tuple[str, tuple[int, int, float, float]]] = []
    with mock_aws():
        sizing = boto3.client("dynamodb")
        tables = create_catalog_tables(sizing, names={"leases", "runs"})
        client = boto3.client("dynamodb")
        clock = FrozenClock()
        meter = Meter(client, sizing)
        logger = Logger(service="bench-overlap", logger_handler=logging.StreamHandler(io.StringIO()))
        handed: list = []
        runner = ScheduledRunner(
            LeaseStore(client, tables["leases"], clock),
            RunStore(client, tables["runs"]),
            clock,
            logger,
            Metrics(namespace="bench", service="bench"),
            invoke_self=handed.append,
        )

        def scenario(policy: Overlap, name: str) -> None:
            spec = JobSpec(
                name=name,
                subsystem="bench",
                entry="unused:unused",
                schedule="cron(0 * * * ? *)",
                interval_s=3600,
                lease_ttl_s=3 * 3600,
                overlap=policy,
            )
            label = policy.value
            measured: dict[str, tuple] = {}

            def next_tick():
                tick = Trigger("scheduled", clock.now_ms())
                measured["tick"] = meter.measure(lambda: runner.run(spec, one_batch, tick))
                measured["duplicate"] = meter.measure(lambda: runner.run(spec, one_batch, tick))

            def long_job(ctx):
                if not measured:  # the first run lasts 70 minutes; the buffered one is one quick batch
                    clock.advance(hours=1)
                    next_tick()
                    clock.advance(minutes=10)
                yield {"done": 1}

            first: dict[str, Any] = {}
            whole = meter.measure(
                lambda: first.setdefault("r", runner.run(spec, long_job, Trigger("scheduled", clock.now_ms())))
            )
            assert first["r"].outcome is Outcome.RAN
            rows.append((f"{label}: a tick that meets the live holder", measured["tick"]))
            rows.append((f"{label}: a duplicate delivery of that tick", measured["duplicate"]))
            # the holder's own calls: its run of one batch (and, under buffer_one, the run once more)
            rows.append(
                (
                    f"{label}: the holder: its run of one batch, and under buffer_one the run it owes",
                    _minus(whole, measured["tick"], measured["duplicate"]),
                )
            )
            clock.advance(hours=3)

        def one_batch(ctx):
            yield {"done": 1}

        scenario(Overlap.SKIP, "bench_skip")
        scenario(Overlap.BUFFER_ONE, "bench_buffer")

        # a catch-up for a tick with no run since, then the same event again
        spec = JobSpec(
            name="bench_catch_up",
            subsystem="bench",
            entry="unused:unused",
            schedule="cron(0 * * * ? *)",
            interval_s=3600,
            catch_up=CatchUp.ONCE,
            catch_up_window_s=6 * 3600,
        )
        missed = clock.now_ms() - HOUR
        event = Trigger("catch_up", missed, requested_by="auditor")
        rows.append(
            (
                "catch-up: the run (one batch) for a missed tick",
                meter.measure(lambda: runner.run(spec, one_batch, event)),
            )
        )
        rows.append(
            (
                "catch-up: the same event again (skipped_served)",
                meter.measure(lambda: runner.run(spec, one_batch, event)),
            )
        )
        assert handed == []
    return rows


def _minus(total: tuple, *parts: tuple) -> tuple:
    return tuple(t - sum(p[i] for p in parts) for i, t in enumerate(total))


def run() -> str:
    rows = overlap_costs()
    lines = [
        "## Overlap policies and catch-up",
        "",
        f"Command: `{COMMAND}`",
        "",
        "The real runner on moto; an hourly job (gate 0.9 h) whose run lasts 70 minutes, so the next tick",
        "meets the live holder. Requests counted with botocore hooks, capacity from item sizes (every item",
        "under 1 KB: 1 WCU a write; see `ops/bench/overlap.py`).",
        "",
        *cost_table(rows),
    ]
    lines += [
        "",
        "`skip` keeps a tick that meets a live holder at one eventually consistent read and no write.",
        "`buffer_one` adds exactly one conditional write per such tick (a duplicate delivery writes the same",
        "request again: one more write, no second run), and the holder's release reads the request back",
        "from its own reply (`ALL_OLD`), so serving it costs one more run (acquire, run row, finish, release)",
        "and no extra read. A hand-over instead costs one async Lambda invoke (not counted here: not",
        "DynamoDB). A duplicate catch-up costs one read.",
    ]
    return "\n".join(lines)
