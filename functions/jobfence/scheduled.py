"""The scheduled-job runner: pre-gate, acquire, bounded batches with renewal, release, record.

A job is a callable `job(ctx) -> Iterator[summary]`: a generator that does one
bounded batch of work between two `yield`s and yields that batch's counts. The
runner, not the job, renews the lease before every batch after the first, so a
job cannot forget its checkpoint; it stops iterating when the lease is lost,
when the trust window closes, or when the Lambda has less time left than one
batch needs.

    tick ─► peek (1 read) ─► skip?  ──yes──► skipped_leased | skipped_interval   (no write)
                 │no
                 ▼
            acquire (1 conditional write) ─► refused ─► skipped_*                (no row)
                 │
                 ▼
            batch 1 ─► [window ok? time ok? renew] ─► batch 2 ─► ... ─► release ─► row: ran
                 │ LeaseLost anywhere ─► row: lease_lost (no release: not ours)
                 │ any other error ─► release ─► row: failed ─► re-raise
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Protocol, Sequence

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from jobfence.clock import Clock
from jobfence.config import ScheduledSettings
from jobfence.errors import IntervalNotElapsed, JobfenceError, LeaseHeld, LeaseLost
from jobfence.lease import Lease, LeaseStore
from jobfence.registry import JobSpec
from jobfence.runs import RunRecord, RunStore, bounded_summary, safe_error
from jobfence.triggers import Trigger

DEFAULT_SAFETY_MARGIN_MS = 60_000


class Outcome(str, enum.Enum):
    """What one tick of a job came to. Every outcome is logged and counted."""

    RAN = "ran"  # took the lease, ran its batches (maybe stopped early), released
    SKIPPED_LEASED = "skipped_leased"  # another holder's term is live; nothing written
    SKIPPED_INTERVAL = "skipped_interval"  # the gate stamp is too recent; nothing written
    LEASE_LOST = "lease_lost"  # the term was taken over or expired mid-run; the job stopped
    FAILED = "failed"  # the job raised; lease released, row written, error re-raised


@dataclass(frozen=True)
class JobDeps:
    """Collaborators a job factory may use, built once at cold start."""

    settings: ScheduledSettings
    spec: JobSpec
    clock: Clock
    session: Any  # boto3.Session
    dynamodb: Any  # boto3 DynamoDB client
    logger: Logger


class RunContext:
    """What a running job sees: its live term, the clock, and fenced writes."""

    def __init__(self, spec: JobSpec, run_id: str, trigger: Trigger, lease: Lease, leases: LeaseStore, clock: Clock):
        self.spec = spec
        self.run_id = run_id
        self.trigger = trigger
        self.lease = lease
        self.clock = clock
        self._leases = leases

    @property
    def job(self) -> str:
        return self.spec.name

    def now_ms(self) -> int:
        return self.clock.now_ms()

    def fence_check(self) -> dict[str, Any]:
        """A ConditionCheck item to put first in a caller-built TransactWriteItems."""
        return self._leases.fence_check(self.lease)

    def fenced_write(self, items: Sequence[Mapping[str, Any]]) -> None:
        """Apply TransactWriteItems entries only while this term is live (else `LeaseLost`)."""
        self._leases.fenced_write(self.lease, items)


Job = Callable[[RunContext], Iterator[Mapping[str, Any]]]


class LambdaContextLike(Protocol):
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int: ...


@dataclass(frozen=True)
class RunResult:
    """The handler's return value."""

    job: str
    outcome: Outcome
    run_id: str | None
    duration_ms: int
    summary: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "outcome": self.outcome.value,
            "run_id": self.run_id,
            "duration_ms": self.duration_ms,
            "summary": dict(self.summary),
        }


class ScheduledRunner:
    """Runs one job under its lease and records what happened."""

    def __init__(
        self,
        leases: LeaseStore,
        runs: RunStore,
        clock: Clock,
        logger: Logger,
        metrics: Metrics,
        safety_margin_ms: int = DEFAULT_SAFETY_MARGIN_MS,
    ) -> None:
        self._leases = leases
        self._runs = runs
        self._clock = clock
        self._logger = logger
        self._metrics = metrics
        self._margin = safety_margin_ms

    def run(self, spec: JobSpec, job: Job, trigger: Trigger, context: LambdaContextLike | None = None) -> RunResult:
        """One tick: skip with no write, or run the job's batches under a fenced term."""
        now = started = self._clock.now_ms()
        interval_ms = spec.interval_s * 1000 if spec.interval_s else None

        predicted = self._leases.would_skip(self._leases.peek(spec.name), now, interval_ms)
        if predicted is not None:
            return self._skipped(spec, predicted, started, stage="pre_gate")

        holder = f"{spec.subsystem}:{getattr(context, 'aws_request_id', None) or uuid.uuid4().hex}"
        try:
            lease = self._leases.acquire(spec.name, holder, spec.lease_ttl_s * 1000, interval_ms)
        except (LeaseHeld, IntervalNotElapsed) as exc:
            return self._skipped(spec, type(exc), started, stage="acquire")

        ctx = RunContext(spec, uuid.uuid4().hex, trigger, lease, self._leases, self._clock)
        summary: dict[str, Any] = {"batches": 0}
        outcome = Outcome.RAN
        error: str | None = None
        try:
            self._run_batches(spec, job, ctx, summary, context)
        except LeaseLost as exc:
            outcome, error = Outcome.LEASE_LOST, safe_error(exc)
        except Exception as exc:
            self._fail(spec, ctx, trigger, summary, exc)
            raise
        if outcome is Outcome.RAN:
            try:
                self._leases.release(ctx.lease)
            except LeaseLost as exc:
                outcome, error = Outcome.LEASE_LOST, safe_error(exc)
        return self._finish(spec, ctx, trigger, outcome, summary, error)

    # -- the batch loop ---------------------------------------------------------------------

    def _run_batches(
        self, spec: JobSpec, job: Job, ctx: RunContext, summary: dict[str, Any], context: LambdaContextLike | None
    ) -> None:
        batches = iter(job(ctx))
        try:
            while True:
                if summary["batches"]:
                    stop = self._stop_reason(spec, ctx.lease, context)
                    if stop:
                        summary["stopped"] = stop
                        return
                    ctx.lease = self._leases.renew(ctx.lease)  # checkpoint before every later batch
                try:
                    counts = next(batches)
                except StopIteration:
                    return
                summary["batches"] += 1
                _merge(summary, counts)
        finally:
            close = getattr(batches, "close", None)
            if close:
                close()

    def _stop_reason(self, spec: JobSpec, lease: Lease, context: LambdaContextLike | None) -> str | None:
        if self._clock.now_ms() >= lease.trusted_until(self._margin):
            return "trust_window"
        if context is not None and context.get_remaining_time_in_millis() < spec.batch_budget_s * 1000:
            return "time_budget"
        return None

    # -- outcomes ---------------------------------------------------------------------------

    def _skipped(self, spec: JobSpec, kind: type[Exception], started: int, stage: str) -> RunResult:
        outcome = Outcome.SKIPPED_LEASED if kind is LeaseHeld else Outcome.SKIPPED_INTERVAL
        duration = self._clock.now_ms() - started
        self._observe(spec, outcome, duration, decided_by=stage)
        return RunResult(spec.name, outcome, None, duration)

    def _fail(self, spec: JobSpec, ctx: RunContext, trigger: Trigger, summary: dict[str, Any], exc: Exception) -> None:
        try:
            self._leases.release(ctx.lease)
        except JobfenceError as release_exc:
            self._logger.warning("release after failure refused", extra={"reason": safe_error(release_exc)})
        try:
            self._finish(spec, ctx, trigger, Outcome.FAILED, summary, safe_error(exc))
        except JobfenceError as record_exc:
            self._logger.error("recording the failed run failed", extra={"reason": safe_error(record_exc)})

    def _finish(
        self,
        spec: JobSpec,
        ctx: RunContext,
        trigger: Trigger,
        outcome: Outcome,
        summary: Mapping[str, Any],
        error: str | None,
    ) -> RunResult:
        finished = self._clock.now_ms()
        record = RunRecord(
            job=spec.name,
            run_id=ctx.run_id,
            outcome=outcome.value,
            trigger=trigger.kind,
            scheduled_at=trigger.scheduled_at,
            started_at=ctx.lease.acquired_at,
            finished_at=finished,
            holder=ctx.lease.holder,
            fence=ctx.lease.fence,
            summary=summary,
            error=error,
        )
        self._runs.record(record)
        self._observe(spec, outcome, record.duration_ms, run_id=ctx.run_id, fence=ctx.lease.fence, error=error)
        return RunResult(spec.name, outcome, ctx.run_id, record.duration_ms, bounded_summary(summary))

    def _observe(self, spec: JobSpec, outcome: Outcome, duration_ms: int, **fields: Any) -> None:
        fields = {k: v for k, v in fields.items() if v is not None}
        log = self._logger.error if outcome is Outcome.FAILED else self._logger.info
        log("scheduled_job", extra={"outcome": outcome.value, "duration_ms": duration_ms, **fields})
        self._metrics.add_metric(name=outcome.value, unit=MetricUnit.Count, value=1)
        self._metrics.add_metric(name="duration", unit=MetricUnit.Milliseconds, value=duration_ms)


def _merge(summary: dict[str, Any], counts: Mapping[str, Any] | None) -> None:
    for key, value in (counts or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            summary[key] = summary.get(key, 0) + value
        else:
            summary[key] = value
