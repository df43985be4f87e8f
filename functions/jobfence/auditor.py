"""The missed-run auditor: a scheduled job that makes a missed tick loud.

Each run reads, for every job its catalog entry `audits`, the job's run rows
over a window (one range query on its partition, never a scan) and its rule
toggles (one read of its lease item), builds the job's ledger over the window
(`jobfence.ledger`), and emits one `missed` metric per job with the job's own
dimensions (`registry.metric_dimensions`: the alarms of `infra/jobfence_cdk/monitoring.py`
match them exactly), zero included so a graph is never empty.

The window is (since, until] with `until` = the audit's tick minus
`AUDIT_SETTLE_MS` (a tick's run may start up to the ledger's delivery
tolerance late, and must have been written before the tick is judged), and
`since` = the `until` of the last audit that ended `ran` (read from the
auditor's own run rows), so each tick is judged once and an audit that failed
or never ran is made up by the next one, at most `MAX_AUDIT_SPAN_MS` back. The
first audit looks back one of its own intervals. Counting is at least once: an
audit that emitted its metrics and then failed to record its run is counted
again by the next.

The auditor writes nothing of the jobs': a rule found disabled without a
recorded toggle (a deploy with schedules disabled) shows as `missed` here, as it
does in `jobfence ledger` until `jobfence status` has looked at the rule.

Catch-up (`JobSpec.catch_up = once`): for such a job the ledger reaches back
over its catch-up window too (the same one query), and when `catchup.due`
names a tick the auditor invokes the job's function asynchronously with a
catch-up event for it. Every audit asks again until a run has made up for the
tick, so a lost invoke is repeated; a duplicate one runs nothing (the runner's
acquire refuses a catch-up once a term has started since its tick). A failed
invoke is logged and counted, never fails the audit.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from jobfence import catchup
from jobfence.batch import LastBatch
from jobfence.dynamo import classify
from jobfence.lease_toggles import RuleToggles
from jobfence.ledger import DELIVERY_TOLERANCE_MS, RunRecord, TickLabel, ledger_of
from jobfence.registry import CatchUp, JobSpec, metric_dimensions
from jobfence.runs import RunState, RunStore
from jobfence.schedule import healthy_gap_ms
from jobfence.scheduled import RunContext
from jobfence.triggers import catch_up_event

MISSED_METRIC = "missed"
AUDIT_SETTLE_MS = DELIVERY_TOLERANCE_MS + 60_000
MAX_AUDIT_SPAN_MS = 24 * 3_600_000
OWN_RUNS = 20  # the auditor's latest runs read to find its last complete audit
MAX_LOGGED_TICKS = 10


@dataclass(frozen=True)
class AuditWindow:
    """The ticks an audit judges: those in (since, until]."""

    since_ms: int
    until_ms: int


@dataclass(frozen=True)
class JobAudit:
    """One audited job over the window: how many ticks were expected, the ones missed, the tick to catch up."""

    job: str
    ticks: int
    missed: tuple[int, ...]  # the missed ticks' times, epoch ms
    catch_up: int | None = None  # `catchup.due` for a catch_up=once job: the tick to run once for now


Emit = Callable[[JobSpec, int], None]
Invoke = Callable[[JobSpec, dict[str, Any]], None]  # an async invoke of a job's function with an event


def audit_window(tick_at: int, own_runs: Sequence[RunRecord], run_id: str, interval_ms: int) -> AuditWindow:
    """The window of the audit for `tick_at`, after the last audit among `own_runs` that ended `ran`."""
    until = tick_at - AUDIT_SETTLE_MS
    others = [r for r in own_runs if r.run_id != run_id]
    done = [r.tick_at for r in others if r.outcome is RunState.RAN]
    if done:  # the last complete audit's `until`
        since = max(done) - AUDIT_SETTLE_MS
    elif others:  # every audit so far failed or died: from the window the earliest of them would have had
        since = min(r.tick_at for r in others) - AUDIT_SETTLE_MS - interval_ms
    else:  # the first audit
        since = until - interval_ms
    since = max(since, until - MAX_AUDIT_SPAN_MS)
    return AuditWindow(min(since, until), until)


def audit_jobs(
    specs: Sequence[JobSpec], runs: RunStore, toggles: RuleToggles, window: AuditWindow, now_ms: int
) -> list[JobAudit]:
    """Each job's ledger over the window (and its catch-up window), reduced to missed ticks and a catch-up."""
    out = []
    histories = toggles.histories([spec.name for spec in specs])  # one consistent read for every audited job
    for spec in specs:
        history = histories[spec.name]
        recorded = history.toggles
        since = window.since_ms
        if spec.catch_up == CatchUp.ONCE and spec.catch_up_window_s:
            since = min(since, now_ms - spec.catch_up_window_s * 1000)
        # no tick from before the rule existed is judged (nor caught up): a new deployment has missed nothing
        since = min(history.clip(since), window.until_ms)
        ledger = ledger_of(spec, runs, recorded, since, window.until_ms)
        judged = [e for e in ledger.entries if e.tick_at > history.clip(window.since_ms)]
        missed = tuple(e.tick_at for e in judged if e.label is TickLabel.MISSED)
        out.append(JobAudit(spec.name, len(judged), missed, catchup.due(spec, ledger.entries, now_ms, recorded)))
    return out


def cloudwatch_emitter(namespace: str) -> Emit:
    """Emit `missed` for one job as its own EMF record, with that job's dimensions (not the auditor's)."""

    def emit(spec: JobSpec, missed: int) -> None:
        with single_metric(
            name=MISSED_METRIC,
            unit=MetricUnit.Count,
            value=missed,
            namespace=namespace,
            default_dimensions=metric_dimensions(spec),
        ):
            pass

    return emit


def audit_missed_runs(
    specs: Sequence[JobSpec],
    runs: RunStore,
    toggles: RuleToggles,
    emit: Emit,
    invoke: Invoke,
    logger: Logger,
    ctx: RunContext,
) -> Iterator[LastBatch]:
    """One bounded batch: the window, every audited job's ledger over it, one metric per job, due catch-ups."""
    own = [RunRecord.of(row) for row in runs.recent(ctx.job, OWN_RUNS)]
    window = audit_window(ctx.trigger.scheduled_at, own, ctx.run_id, interval_ms(ctx.spec))
    audits = audit_jobs(specs, runs, toggles, window, ctx.now_ms())
    by_name = {spec.name: spec for spec in specs}
    asked = failed = 0
    for result in audits:
        emit(by_name[result.job], len(result.missed))
        if result.missed:
            logger.warning(
                "missed ticks",
                extra={
                    "audited_job": result.job,
                    "missed": len(result.missed),
                    "missed_at": list(result.missed[:MAX_LOGGED_TICKS]),
                },
            )
        if result.catch_up is not None:
            try:
                invoke(by_name[result.job], catch_up_event(result.catch_up, requested_by=ctx.job))
                asked += 1
                logger.info("catch-up requested", extra={"audited_job": result.job, "tick": result.catch_up})
            except Exception as exc:  # noqa: BLE001 - the next audit asks again; the audit itself stands
                failed += 1
                logger.warning(
                    "catch-up request failed",
                    extra={
                        "audited_job": result.job,
                        "tick": result.catch_up,
                        "error": type(exc).__name__,
                        "error_kind": classify(exc).value,
                    },
                )
    yield LastBatch(
        {
            "jobs_audited": len(audits),
            "ticks": sum(a.ticks for a in audits),
            "missed": sum(len(a.missed) for a in audits),
            "catch_ups": asked,
            "catch_ups_failed": failed,
            "window_ms": window.until_ms - window.since_ms,
        }
    )


def lambda_invoker(client: Any, functions: Mapping[str, str]) -> Invoke:
    """An async invoke (Lambda's Event type) of an audited job's function, by the name its environment gives."""

    def invoke(spec: JobSpec, event: dict[str, Any]) -> None:
        client.invoke(FunctionName=functions[spec.name], InvocationType="Event", Payload=json.dumps(event).encode())

    return invoke


def interval_ms(spec: JobSpec) -> int:
    """The auditor's own interval: the longer of its gate and its schedule's longest gap (as its alarms')."""
    return healthy_gap_ms(spec.schedule, spec.interval_s)
