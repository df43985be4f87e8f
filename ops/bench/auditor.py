"""Benchmark: what the missed-run auditor costs per audit and per day.

Three hours of the whole catalog are ticked on moto under a frozen clock with
the real runner (each job's ticks from its schedule, a one-batch job each),
with the auditor (`jobfence.auditor`, the catalog's `audit_missed_runs`) run
every 15 minutes. The last audit is measured: requests counted with botocore
hooks, read capacity from the sizes of the items each read returned (DynamoDB's
on-demand rules: 4 KB per read unit, halved for an eventually consistent read;
a Query is sized on the sum of its items), one write unit per write request
(every lease item and run row written here is under 1 KB).
"""

from __future__ import annotations

import math
from typing import Any

import boto3
from moto import mock_aws

from jobfence.auditor import audit_missed_runs
from jobfence.clock import FrozenClock
from jobfence.lease import LeaseStore
from jobfence.lease_toggles import RuleToggles
from jobfence.prices import PRICES, PRICES_AS_OF
from jobfence.runs import RunStore
from jobfence.schedule import Schedule
from jobfence.scheduled import ScheduledRunner
from jobfence.testing.sim.world import LOGGER, NullMetrics
from jobfence.triggers import Trigger
from jobfence_ops.tables import create_catalog_tables
from ops.bench.capacity import item_size

COMMAND = "python -m ops.bench ops.bench.auditor"
START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
HOURS = 3
# Published on-demand prices, us-east-1 (`jobfence.prices`, dated PRICES_AS_OF)
DYNAMODB_WRITE_PER_MILLION = PRICES.write_request_unit * 1e6
DYNAMODB_READ_PER_MILLION = PRICES.read_request_unit * 1e6
LAMBDA_REQUEST_PER_MILLION = PRICES.lambda_request * 1e6
LAMBDA_GB_SECOND = PRICES.lambda_gb_s_x86_64
CLOUDWATCH_METRIC_MONTH = PRICES.cloudwatch_metric_month
CLOUDWATCH_ALARM_MONTH = PRICES.cloudwatch_alarm_month
ASSUMED_AUDIT_S = 1.0  # Lambda duration charged per audit (an upper bound: a few dozen requests of ~10 ms)


class Meter:
    """Requests and capacity of every DynamoDB call made through one client."""

    def __init__(self, client: Any) -> None:
        self.requests: list[str] = []
        self.rcu = self.wcu = 0.0
        client.meta.events.register("provide-client-params.dynamodb.*", self._params)
        client.meta.events.register("after-call.dynamodb.*", self._after)
        self._consistent = False

    def _params(self, params: dict, **_: Any) -> None:
        self._consistent = bool(params.get("ConsistentRead"))

    def _after(self, model: Any, parsed: dict, **_: Any) -> None:
        self.requests.append(model.name)
        factor = 1.0 if self._consistent else 0.5
        if model.name == "GetItem":
            self.rcu += factor * max(1, math.ceil(item_size(parsed.get("Item")) / 4096))
        elif model.name == "Query":
            self.rcu += factor * max(1, math.ceil(sum(item_size(i) for i in parsed.get("Items", [])) / 4096))
        elif model.name in ("PutItem", "UpdateItem", "DeleteItem"):
            self.wcu += 1

    def reset(self) -> None:
        self.requests.clear()
        self.rcu = self.wcu = 0.0


def measure() -> tuple[list[str], float, float, int, int]:
    """(requests, RCU, WCU, jobs audited, runs written) of one steady-state audit."""
    from jobs.catalog import AUDITOR, CATALOG

    with mock_aws():
        tables = create_catalog_tables(boto3.client("dynamodb"), names={"leases", "runs"})
        client = boto3.client("dynamodb")
        clock = FrozenClock(START_MS)
        runs = RunStore(client, tables["runs"])
        runner = ScheduledRunner(LeaseStore(client, tables["leases"], clock), runs, clock, LOGGER, NullMetrics())  # type: ignore[arg-type]  # add_metric is all it calls
        audited = [CATALOG.job(name) for name in AUDITOR.audits]
        toggles = RuleToggles(client, tables["leases"])
        emitted: list[int] = []
        asked: list[str] = []
        auditor = lambda ctx: audit_missed_runs(  # noqa: E731
            audited, runs, toggles, lambda _s, n: emitted.append(n), lambda s, _e: asked.append(s.name), LOGGER, ctx
        )
        end = START_MS + HOURS * 3_600_000
        events = [(t, AUDITOR) for t in Schedule(AUDITOR.schedule, START_MS).fires_between(START_MS, end)]
        for spec in audited:
            events += [(t, spec) for t in Schedule(spec.schedule, START_MS).fires_between(START_MS - 1, end)]
        meter = Meter(client)
        ran = 0
        for t, spec in sorted(
            events, key=lambda e: (e[0], e[1] is AUDITOR)
        ):  # the audit after the ticks it shares a time with
            clock.set(max(clock.now_ms(), t))
            meter.reset()
            job = auditor if spec is AUDITOR else _one_batch
            runner.run(spec, job, Trigger("scheduled", t))
            ran += 1
        assert emitted[-len(audited) :] == [0] * len(audited), (
            "every tick was run: the last audit must count none missed"
        )
        assert not asked, "every tick was run: no catch-up is due"
        return list(meter.requests), meter.rcu, meter.wcu, len(audited), ran


def _one_batch(ctx: Any):
    yield {"done": 1}


def run() -> str:
    requests, rcu, wcu, jobs, ran = measure()
    per_day = 96  # rate(15 minutes)
    dynamodb = per_day * (rcu * DYNAMODB_READ_PER_MILLION + wcu * DYNAMODB_WRITE_PER_MILLION) / 1e6
    lam = per_day * (LAMBDA_REQUEST_PER_MILLION / 1e6 + ASSUMED_AUDIT_S * 0.25 * LAMBDA_GB_SECOND)
    metrics = jobs * CLOUDWATCH_METRIC_MONTH * 12 / 365
    alarms = jobs * CLOUDWATCH_ALARM_MONTH * 12 / 365
    counts = {name: requests.count(name) for name in sorted(set(requests))}
    lines = [
        "## Missed-run auditor",
        "",
        f"Command: `{COMMAND}`",
        "",
        f"The catalog ticked for {HOURS} hours on moto ({ran} runs, the auditor's included); the last audit measured",
        f"(`ops/bench/auditor.py`). It audits {jobs} jobs: per job one range query of its run rows (reaching",
        "back over the catch-up window for a `catch_up = once` job) and one strongly consistent read of its",
        "lease item (rule toggles); plus one query of its own latest runs and the run's own lease and run-row",
        "writes. A due catch-up adds one Lambda `Invoke` (none is due here: every tick ran).",
        "",
        "| per audit | requests | RCU | WCU |",
        "|---|---:|---:|---:|",
        f"| {', '.join(f'{n} {c}' for n, c in counts.items())} | {len(requests)} | {rcu:g} | {wcu:g} |",
        "",
        f"Cost per day at 96 audits (`rate(15 minutes)`), on-demand prices in us-east-1 as published on {PRICES_AS_OF}:",
        "",
        "| item | price | per day |",
        "|---|---|---:|",
        f"| DynamoDB reads and writes | ${DYNAMODB_READ_PER_MILLION} per million RRU, ${DYNAMODB_WRITE_PER_MILLION} "
        f"per million WRU | ${dynamodb:.5f} |",
        f"| Lambda: 96 requests, {ASSUMED_AUDIT_S:g} s at 256 MB each (an upper bound) | ${LAMBDA_REQUEST_PER_MILLION} "
        f"per million, ${LAMBDA_GB_SECOND:.10f} per GB-s | ${lam:.5f} |",
        f"| CloudWatch: {jobs} custom metrics (`missed` per job) | ${CLOUDWATCH_METRIC_MONTH} per metric-month | "
        f"${metrics:.3f} |",
        f"| CloudWatch: {jobs} alarms (`<job>-missed`) | ${CLOUDWATCH_ALARM_MONTH} per alarm-month | ${alarms:.3f} |",
        f"| **total** | | **${dynamodb + lam + metrics + alarms:.3f}** |",
        "",
        "The metrics and alarms are nearly all of it; the reads are a few hundredths of a cent a day. EventBridge",
        "scheduled rules are not charged. No skipped tick is ever written for the ledger: the auditor infers",
        "skips from the runs that caused them.",
    ]
    return "\n".join(lines)
