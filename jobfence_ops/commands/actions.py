"""The operator actions, each recorded in the audit table: the one way the console and the CLI act.

Each function does one action through `jobfence_ops.commands` and records it
(`jobfence_ops.audit.audited`): who (`Operator`), what (the action's name),
on what (`subject`, and the run id of a run now that ran), when, and the
result in words, or the error. The value comes back with what the audit write
did (`Audited`): a failed write is said beside the result, never instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from jobfence.quota_balance import QuotaBalance
from jobfence.work import BatchRef, CancelResult, ItemInput, RetryResult, SubmitResult
from jobfence_ops.audit import (
    EVERYTHING,
    WORKERS,
    Audited,
    Operator,
    audited,
    batch_subject,
    job_subject,
    tenant_subject,
)
from jobfence_ops.commands import batches, jobs, switches
from jobfence_ops.render import when
from jobfence_ops.targets import Target

SKIPPED_WHY = {
    "skipped_interval": "its last run is more recent than its interval",
    "skipped_leased": "another run holds its lease",
    "skipped_served": "a run started since the tick it would run for",
}


def run_result(result: jobs.JobResult) -> str:
    """What a run now did, in words that cannot read as a run when none happened ("not run: skipped_... (why)")."""
    outcome = result.outcome or result.status
    if outcome.startswith("skipped"):
        return f"not run: {outcome} ({SKIPPED_WHY.get(outcome, outcome)})"
    return f"ran: {outcome}" + (f" ({result.error})" if result.error else "")


def _switched(changes: list[switches.Switch]) -> str:
    rules = [c for c in changes if c.kind == "rule"]
    mappings = [c for c in changes if c.kind == "mapping"]
    parts = [f"{len(rules)} rule(s) {', '.join(sorted({c.state for c in rules}))}"] if rules else []
    if mappings:
        parts.append(f"{len(mappings)} queue worker(s) {', '.join(sorted({c.state for c in mappings}))}")
    return "; ".join(parts) or "nothing to switch"


def run_now(target: Target, operator: Operator, job: str, source: str = "cli") -> Audited[jobs.JobResult]:
    """Trigger one job now (gate and lease apply); a run the gate skipped is recorded as not run, and why."""
    return audited(
        target,
        operator,
        "run now",
        job_subject(job),
        lambda: jobs.run(target, job, operator),
        run_result,
        run_id=lambda r: r.run_id,
        source=source,
    )


def run_all(target: Target, operator: Operator, source: str = "cli") -> Iterator[Audited[jobs.JobResult]]:
    """Every scheduled job at once, one audit entry per job (its result as it is in)."""
    for result in jobs.run_all(target, operator):
        yield audited(
            target,
            operator,
            "run now",
            job_subject(result.job),
            _given(result),
            run_result,
            run_id=lambda r: r.run_id,
            source=source,
        )


def _given(result: jobs.JobResult) -> Callable[[], jobs.JobResult]:
    return lambda: result


def set_rule(
    target: Target, operator: Operator, job: str, enabled: bool, source: str = "cli"
) -> Audited[list[switches.Switch]]:
    """Enable or disable one job's rule."""
    return audited(
        target,
        operator,
        "enable" if enabled else "disable",
        job_subject(job),
        lambda: switches.set_rules(target, enabled, job),
        _switched,
        source=source,
    )


def set_everything(
    target: Target, operator: Operator, enabled: bool, source: str = "cli"
) -> Audited[list[switches.Switch]]:
    """Every rule and every queue worker: stop everything (the incident switch) or resume everything."""
    return audited(
        target,
        operator,
        "resume everything" if enabled else "stop everything",
        EVERYTHING,
        lambda: switches.set_everything(target, enabled),
        _switched,
        source=source,
    )


def set_workers(
    target: Target, operator: Operator, enabled: bool, source: str = "cli"
) -> Audited[list[switches.Switch]]:
    """Resume or pause every queue worker."""
    return audited(
        target,
        operator,
        "resume workers" if enabled else "pause workers",
        WORKERS,
        lambda: switches.set_workers(target, enabled),
        _switched,
        source=source,
    )


def catch_up(target: Target, operator: Operator, job: str, source: str = "cli") -> Audited[jobs.CatchUpResult]:
    """Run a re-enabled job once for its last missed or disabled tick, if one is due."""

    def describe(r: jobs.CatchUpResult) -> str:
        if r.tick is None or r.run is None:
            return f"nothing due in the last {r.window_s // 3600}h"
        return f"for the tick of {when(r.tick)}: {run_result(r.run)}"

    return audited(
        target,
        operator,
        "catch up",
        job_subject(job),
        lambda: jobs.catch_up(target, job, operator),
        describe,
        run_id=lambda r: r.run.run_id if r.run else None,
        source=source,
    )


def retry_failed(target: Target, operator: Operator, ref: BatchRef, source: str = "cli") -> Audited[RetryResult]:
    """Reset a batch's failed items and wake them."""
    return audited(
        target,
        operator,
        "retry failed",
        batch_subject(ref),
        lambda: batches.retry_failed(target, ref, operator.requested_by),
        lambda c: f"retried {c.retried} item(s); {c.skipped_quota} left failed (quota); {c.unsent} wake-up(s) not sent",
        source=source,
    )


def cancel(target: Target, operator: Operator, ref: BatchRef, source: str = "cli") -> Audited[CancelResult]:
    """Cancel a batch: its pending items end cancelled (quota refunded once), running ones finish."""
    return audited(
        target,
        operator,
        "cancel",
        batch_subject(ref),
        lambda: batches.cancel(target, ref, operator.requested_by),
        batches.cancel_summary,
        source=source,
    )


def submit(
    target: Target, operator: Operator, ref: BatchRef, kind: str, items: list[ItemInput], source: str = "cli"
) -> Audited[SubmitResult]:
    """Create a batch (or resume one) and wake a worker per item."""
    return audited(
        target,
        operator,
        "submit",
        batch_subject(ref),
        lambda: batches.submit(target, ref, kind, items, operator.requested_by),
        lambda r: (
            f"{'created' if r.created else 'resumed'} ({kind}): {r.rows_written} item row(s) written, "
            f"{r.enqueued} wake-up(s) sent"
        ),
        source=source,
    )


def grant_quota(
    target: Target, operator: Operator, tenant: str, units: int, source: str = "cli"
) -> Audited[QuotaBalance]:
    """Give a tenant more actions."""
    return audited(
        target,
        operator,
        "grant quota",
        tenant_subject(tenant),
        lambda: batches.grant_quota(target, tenant, units),
        lambda b: f"granted {units}: limit {b.limit}, available {b.available}",
        source=source,
    )
