"""Why is this batch not done? One answer from its rows and the switches around it.

`why(target, report)` reads what the operator would check one by one, in the
order of the runbook (docs/operations.md, "A batch that stalls"), and says each
finding in one line with what happens next or what to do:

- the batch is finalized: nothing is stalled;
- the pipeline's queue worker is paused (stop everything, or `disable --all`): nothing is delivered;
- the job that reclaims the batches is disabled: stale rows stay as they are;
- items running past the pipeline's item-stale limit: their worker stopped; the reclaimer moves them;
- items pending past the pending-stale limit: their wake-up was lost; the reclaimer re-sends it;
- items that failed for quota, and for other reasons: grant quota and/or retry the failed items;
- messages in the pipeline's dead-letter queue;
- every item settled but the batch still open: its roll-up was lost; the reclaimer finalizes it;
- else the items still moving (pending or running within their limits): it is not stalled, only busy.

Nothing is written: one read of the switches (as every console page's banner)
and the queue's attributes besides the report the caller already holds.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Any

from jobfence.errors import SettingsError
from jobfence.work import BatchReport, ItemStatus
from jobfence_ops.commands import switches
from jobfence_ops.commands.batches import reclaim_jobs, work_settings
from jobfence_ops.render import when
from jobfence_ops.runtime.topology import QueueInfo
from jobfence_ops.targets import OperatorError, Target

QUOTA_ERROR = "quota"  # a failed item's error names the quota when its tenant's quota ran out


class Severity(str, enum.Enum):
    BLOCKED = "blocked"  # nothing moves until someone acts
    RECOVERING = "recovering"  # stuck now; the reclaimer moves it on its own
    NOTE = "note"  # no stall: finished, or still moving


@dataclass(frozen=True)
class Finding:
    """One reason, in one line (no payload), with what happens next or what to do."""

    code: str
    severity: Severity
    says: str


def why(target: Target, report: BatchReport, stopped: switches.Stopped | None = None) -> list[Finding]:
    """Why the batch is not done (blocking reasons first); a finalized batch says so.

    `stopped`: what is switched off, when the caller has read it already (a console page, for its banner).
    """
    batch = report.batch
    if batch.status.value != "open":
        ended = Finding("finalized", Severity.NOTE, f"finalized {batch.status.value}: nothing is left to run")
        return _ordered([ended, *_failures(report)])
    now = target.clock.now_ms()
    pipelines = target.app.batches.pipelines if target.app.batches else {}
    pipeline = pipelines.get(batch.kind)
    found: list[Finding] = []
    queue = _queue_of(target, pipeline)
    stopped = stopped if stopped is not None else switches.stopped(target)
    worker = _worker_of(target, queue)
    if worker is not None and worker in stopped.workers:
        found.append(
            Finding(
                "worker_paused", Severity.BLOCKED, f"its queue worker {worker} is paused: resume it (resume everything)"
            )
        )
    reclaim_off = [job for job in reclaim_jobs(target) if job in stopped.rules]
    later = " once it is enabled" if reclaim_off else ""  # what the reclaimer does, it does only when it runs
    for job in reclaim_off:
        found.append(
            Finding(
                "reclaim_disabled",
                Severity.BLOCKED,
                f"the reclaim job {job} is disabled: stale rows stay as they are",
            )
        )
    live = [i for i in report.items if i.status in (ItemStatus.PENDING, ItemStatus.RUNNING)]
    if pipeline is not None:
        timing = pipeline.timing
        dead = [i for i in live if i.status is ItemStatus.RUNNING and i.updated_at < timing.running_cutoff(now)]
        lost = [i for i in live if i.status is ItemStatus.PENDING and i.updated_at < timing.pending_cutoff(now)]
        if dead:
            found.append(
                Finding(
                    "running_stale",
                    Severity.RECOVERING,
                    f"{len(dead)} item(s) running since {when(min(i.updated_at for i in dead))}, past the item-stale limit "
                    f"({timing.item_stale_s} s): their worker stopped; the reclaimer sets them pending at its next tick{later}",
                )
            )
        if lost:
            found.append(
                Finding(
                    "pending_lost",
                    Severity.RECOVERING,
                    f"{len(lost)} item(s) pending since {when(min(i.updated_at for i in lost))}, past the pending-stale "
                    f"limit ({timing.pending_stale_s} s): their wake-up was lost; the reclaimer re-sends it{later}",
                )
            )
        live = [i for i in live if i not in dead and i not in lost]
    found += _failures(report)
    failed = [i for i in report.items if i.status is ItemStatus.FAILED]
    if queue is not None and queue.dead_letter_arn:
        depth = _visible(target, queue.dead_letter_arn)
        if depth:
            found.append(
                Finding(
                    "dead_letters",
                    Severity.BLOCKED,
                    f"{depth} message(s) in its dead-letter queue: inspect, then redrive",
                )
            )
    if not report.items or any(i.status in (ItemStatus.PENDING, ItemStatus.RUNNING) for i in report.items):
        if live:
            by = Counter(i.status.value for i in live)
            found.append(
                Finding(
                    "moving",
                    Severity.NOTE,
                    "still moving: "
                    + ", ".join(f"{n} {status}" for status, n in sorted(by.items()))
                    + f" within their limits (newest update {when(max(i.updated_at for i in live))})",
                )
            )
    elif not failed:
        found.append(
            Finding(
                "rollup_lost",
                Severity.RECOVERING,
                "every item is done but the batch row is still open: its roll-up was lost; "
                "the reclaimer finalizes it after the batch-stale limit",
            )
        )
    return _ordered(found)


def _failures(report: BatchReport) -> list[Finding]:
    """The failed items: for quota (grant, then retry), and for other reasons (the commonest named)."""
    failed = [i for i in report.items if i.status is ItemStatus.FAILED]
    quota = [i for i in failed if QUOTA_ERROR in (i.error or "")]
    found = []
    if quota:
        found.append(
            Finding(
                "quota_exhausted",
                Severity.BLOCKED,
                f"{len(quota)} item(s) failed: tenant {report.batch.tenant}'s quota ran out; "
                "grant quota, then retry the failed items",
            )
        )
    other = Counter((i.error or "no error recorded").split(":")[0][:60] for i in failed if i not in quota)
    if other:
        top, count = other.most_common(1)[0]
        found.append(
            Finding(
                "items_failed",
                Severity.BLOCKED,
                f"{sum(other.values())} item(s) failed (most: {count} x {top}); "
                "retry the failed items once the cause is fixed",
            )
        )
    return found


def _ordered(found: list[Finding]) -> list[Finding]:
    order = {Severity.BLOCKED: 0, Severity.RECOVERING: 1, Severity.NOTE: 2}
    return sorted(found, key=lambda f: order[f.severity])


def _queue_of(target: Target, pipeline: Any) -> QueueInfo | None:
    """The deployed wake-up queue of the pipeline (None: unknown, or not granted to the work functions)."""
    if pipeline is None:
        return None
    try:
        url = work_settings(target).queue(pipeline.queue)
    except (OperatorError, SettingsError):  # a diagnosis reads what it can; a queue it cannot name is left out
        return None
    return next((q for q in target.topology.queues.values() if q.url == url or q.name == url.rsplit("/", 1)[-1]), None)


def _worker_of(target: Target, queue: QueueInfo | None) -> str | None:
    if queue is None:
        return None
    for mapping in target.topology.mappings:
        if mapping.queue_arn == queue.arn:
            return target.topology.function_by_arn(mapping.function_arn).name
    return None


def _visible(target: Target, queue_arn: str) -> int:
    queue = next((q for q in target.topology.queues.values() if q.arn == queue_arn), None)
    if queue is None:
        return 0
    attrs = target.session.client("sqs").get_queue_attributes(
        QueueUrl=queue.url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attrs.get("ApproximateNumberOfMessages", 0))
