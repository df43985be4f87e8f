"""The scheduled-job runner: pre-gate, acquire, bounded batches with renewal, release, record.

A job is a callable `job(ctx) -> Iterator[summary]`: a generator that does one
bounded batch of work between two `yield`s and yields that batch's counts. The
runner, not the job, renews the lease before every batch after the first, so a
job cannot forget its checkpoint; it stops iterating when the lease is lost,
when the trust window closes, or when the Lambda has less time left than one
batch needs. A job that knows a batch is its last yields `LastBatch(counts)`
(`jobfence.batch`): the runner then ends the run there (the generator is
closed), without the renew that would have preceded a next batch.

    tick ─► peek (1 read) ─► skip?  ──yes──► skipped_leased | skipped_interval   (no write)
                 │no
                 ▼
            acquire (1 conditional write) ─► refused ─► skipped_*                (no row)
                 │ took over a term that was never released ─► its row: died
                 ▼
            row: running (fence, holder)
                 │ acquire answered past the request-age budget ─► row: lease_lost ─► release (not run)
                 ▼
            batch 1 ─► [window ok? time ok? renew] ─► batch 2 ─► ... ─► row: ran ─► release
                 │                                   (release refused: the term was over) ─► row: lease_lost
                 │ LeaseLost from renew or a fenced write ─► row: lease_lost (no release: not ours)
                 │ any other error ─► row: failed ─► release ─► re-raise the job's own error

A catch-up (`catch_up` trigger) goes the same way for a past tick, its acquire
also conditioned on no term having started since that tick, so duplicates and
late copies run nothing (`skipped_served`). With the `buffer_one` overlap
policy a scheduled tick that meets a live holder records one pending request on
the lease item (`buffered`, one write), and the holder, whose release reads it
back, runs once more (a `buffered` trigger: an acquire conditioned on that
request) if its Lambda has time left for a batch, else hands over by an async
invoke of its own function. Every acquire consumes the request, so it is
served once, and never while another term runs.

The row is finished before the term is released, so a released term always
has a finished row, and a run that dies with its row `running` leaves its
term unreleased: the next acquire records it `died`. A store error while
finishing or releasing is retried (bounded), then logged; it never replaces
the job's own error. Ids (run ids, and a holder's when there is no Lambda
request id) come from an injectable source, so a seeded simulator can replay
a run exactly.
"""

from __future__ import annotations

import enum
import importlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from jobfence.batch import LastBatch
from jobfence.capacity import current as current_meter
from jobfence.capacity import measure
from jobfence.clock import REQUEST_AGE_BUDGET_MS, SKEW_BUDGET_MS, Clock
from jobfence.config import METRICS_NAMESPACE, ScheduledSettings
from jobfence.dynamo import safe_error
from jobfence.errors import (
    IntervalNotElapsed,
    JobfenceError,
    LeaseHeld,
    LeaseLost,
    LeaseRefused,
    PredecessorUnrecorded,
    RequestServed,
    Skip,
    StoreError,
    TermOvertaken,
)
from jobfence.lease import Lease, LeaseStore, Pending, Term, new_id
from jobfence.registry import CatalogError, JobSpec, Overlap
from jobfence.runs import RunStart, RunState, RunStore, bounded_summary
from jobfence.transaction import FencedTransaction
from jobfence.triggers import Trigger, buffered_event, who_fields

if TYPE_CHECKING:
    import boto3.session

DEFAULT_SAFETY_MARGIN_MS = SKEW_BUDGET_MS  # clocks differ by at most this (the time budget's skew)
SETTLE_ATTEMPTS = 3  # unsettled earlier terms recorded per tick before it yields (each is one crashed runner)


class Outcome(str, enum.Enum):
    """What one tick of a job came to. Every outcome is logged and counted."""

    RAN = "ran"  # took the lease, ran its batches (maybe stopped early), released
    SKIPPED_LEASED = "skipped_leased"  # another holder's term is live; nothing written
    SKIPPED_INTERVAL = "skipped_interval"  # the gate stamp is too recent; nothing written
    LEASE_LOST = (
        "lease_lost"  # the term was taken over or expired mid-run, or its acquire answered too late; the job stopped
    )
    FAILED = "failed"  # the job raised; row written, lease released, error re-raised
    SKIPPED_SERVED = "skipped_served"  # a catch-up or buffered request a run since its tick served; nothing written
    BUFFERED = "buffered"  # buffer_one: met a live holder, one pending request written on the lease item


@dataclass(frozen=True)
class JobDeps:
    """Collaborators a job factory may use, built once at cold start."""

    settings: ScheduledSettings
    spec: JobSpec
    clock: Clock
    session: boto3.session.Session
    dynamodb: Any  # a boto3 DynamoDB client (boto3 ships no types: no real one to name)
    logger: Logger
    metrics_namespace: str = METRICS_NAMESPACE  # the stage's, for a job that emits metrics of its own


class RunContext:
    """What a running job sees: its live term, the clock, and fenced transactions."""

    def __init__(
        self, spec: JobSpec, run_id: str, trigger: Trigger, lease: Lease, leases: LeaseStore, clock: Clock
    ) -> None:
        self.spec = spec
        self.run_id = run_id
        self.trigger = trigger
        self.lease = lease
        self.clock = clock
        self._leases = leases

    @property
    def job(self) -> str:
        """The running job's name (its catalog entry's)."""
        return self.spec.name

    def now_ms(self) -> int:
        """Current time from the runner's clock, epoch milliseconds (never the wall clock in tests)."""
        return self.clock.now_ms()

    def transaction(self) -> FencedTransaction:
        """A pynamodb transaction that commits only while this term is live (its first entry is the lease check).

            with ctx.transaction() as tx:
                tx.add(write)        # a store's prepared `Write`s, or tx.update / tx.save / tx.delete
            # committed here; LeaseLost, ConditionFailed(index, old image) or StoreError on a refusal

        See `jobfence.transaction`.
        """
        return self._leases.transaction(self.lease)


Job = Callable[[RunContext], Iterator[Mapping[str, Any]]]  # a batch's counts, the last maybe a LastBatch


def load_job(spec: JobSpec) -> Callable[[JobDeps], Job]:
    """Import and return the job's factory (`spec.entry`, "module:function")."""
    module_name, _, attr = spec.entry.partition(":")
    try:
        return cast(Callable[[JobDeps], Job], getattr(importlib.import_module(module_name), attr))
    except (ImportError, AttributeError) as exc:
        raise CatalogError(f"job {spec.name!r}: entry {spec.entry!r} cannot be imported: {exc}") from exc


class LambdaContextLike(Protocol):
    """What the runner reads of Lambda's context object: the request id and the time left."""

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
    pending_tick: int | None = None  # a buffer_one request the release found on the item (not returned to callers)

    def as_dict(self) -> dict[str, Any]:
        """What the handler returns: `job`, `outcome` (its value), `run_id`, `duration_ms`, `summary`."""
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
        ids: Callable[[], str] = new_id,
        invoke_self: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        self._leases = leases
        self._runs = runs
        self._clock = clock
        self._logger = logger
        self._metrics = metrics
        self._margin = safety_margin_ms
        self._ids = ids
        self._invoke_self = invoke_self  # an async invoke of this job's own function (a buffer_one hand-over)

    def run(self, spec: JobSpec, job: Job, trigger: Trigger, context: LambdaContextLike | None = None) -> RunResult:
        """One tick: skip with no write, or run the job's batches under a fenced term.

        With `buffer_one`, a pending request the release found is then served:
        here while a batch still fits in the Lambda's time, else handed over.
        The result is this trigger's own run.
        """
        result = self._run_once(spec, job, trigger, context)
        pending = result.pending_tick
        while pending is not None and spec.overlap == Overlap.BUFFER_ONE:
            if not self._time_for_a_batch(spec, context):
                self._hand_over(spec, pending)
                break
            pending = self._run_once(spec, job, Trigger("buffered", pending), context).pending_tick
        return replace(result, pending_tick=None)

    def _run_once(self, spec: JobSpec, job: Job, trigger: Trigger, context: LambdaContextLike | None) -> RunResult:
        """One trigger's run, its DynamoDB units and cost metered for its row (`jobfence.capacity`)."""
        with measure(getattr(context, "memory_limit_in_mb", None)):
            return self._tick(spec, job, trigger, context)

    def _tick(self, spec: JobSpec, job: Job, trigger: Trigger, context: LambdaContextLike | None) -> RunResult:
        started = self._clock.now_ms()
        interval_ms = spec.interval_ms
        since = trigger.scheduled_at if trigger.kind == "catch_up" else None
        pending = trigger.scheduled_at if trigger.kind == "buffered" else None
        buffers = spec.overlap == Overlap.BUFFER_ONE and trigger.kind == "scheduled"

        predicted = self._pre_gate(spec, started, interval_ms, since, pending)
        if predicted is Skip.LEASED and buffers:
            decided = self._buffer(spec, trigger, started, interval_ms, stage="pre_gate")
            if decided is not None:
                return decided
        elif predicted is not None:
            return self._skipped(spec, trigger, predicted, started, stage="pre_gate")

        run_id = self._ids()
        holder = f"{spec.subsystem}:{getattr(context, 'aws_request_id', None) or run_id}"
        try:
            lease = self._acquire(spec, holder, interval_ms, run_id, since, pending)
        except TermOvertaken as exc:
            return self._overtaken(spec, trigger, exc.term)
        except LeaseHeld as exc:
            decided = self._buffer(spec, trigger, started, interval_ms, stage="acquire") if buffers else None
            return decided or self._skipped(spec, trigger, exc.skip, started, stage="acquire")
        except (IntervalNotElapsed, RequestServed) as exc:
            return self._skipped(spec, trigger, exc.skip, started, stage="acquire")
        late = self._clock.now_ms() - lease.acquired_at  # the acquire's stamp is the time it was sent
        # the term this acquire replaced unreleased: its run died; tried again at the end if this fails
        unmarked = lease.predecessor if lease.predecessor and not self._record_died(lease.predecessor) else None

        ctx = RunContext(spec, run_id, trigger, lease, self._leases, self._clock)
        run = RunStart(
            spec.name,
            run_id,
            trigger.kind,
            trigger.scheduled_at,
            lease.acquired_at,
            holder,
            lease.fence,
            **trigger.who(),
        )
        summary: dict[str, Any] = {"batches": 0}
        try:
            opened = self._runs.start(run)
        except StoreError as exc:
            # no row could be written: the job does not run; the store error is this run's own error
            self._close(spec, run, Outcome.FAILED, summary, safe_error(exc), release=ctx.lease, unmarked=unmarked)
            raise
        if not opened:
            # an observer already recorded this term as died: it ended before the run could begin
            error = "the term ended before the run began"
            return self._close(spec, run, Outcome.LEASE_LOST, summary, error, release=None, unmarked=unmarked)
        if late > REQUEST_AGE_BUDGET_MS:
            # answered past the request-age budget: it may have been applied that much after its stamp,
            # so the gate's promise cannot be kept from it. The tick is unknown: recorded and released, not run
            error = f"the acquire was answered {late // 1000} s after it was sent (budget {REQUEST_AGE_BUDGET_MS // 1000} s)"
            return self._close(spec, run, Outcome.LEASE_LOST, summary, error, release=ctx.lease, unmarked=unmarked)
        try:
            self._run_batches(spec, job, ctx, summary, context)
        except LeaseLost as exc:
            return self._close(spec, run, Outcome.LEASE_LOST, summary, safe_error(exc), release=None, unmarked=unmarked)
        except Exception as exc:
            self._close(spec, run, Outcome.FAILED, summary, safe_error(exc), release=ctx.lease, unmarked=unmarked)
            raise  # the job's own error: _close never raises
        return self._close(spec, run, Outcome.RAN, summary, None, release=ctx.lease, unmarked=unmarked)

    def _acquire(
        self, spec: JobSpec, holder: str, interval_ms: int | None, run_id: str, since: int | None, pending: int | None
    ) -> Lease:
        """Acquire, first recording the run of an unsettled earlier term the acquire would forget.

        Each refusal of that kind settles one term (a chain of runners that each
        died right after acquiring); a few in a row mean others are acquiring
        now, so the tick is skipped as leased. A term that cannot be recorded
        (a store error) fails the tick: the next one tries again.
        """
        for _ in range(SETTLE_ATTEMPTS):
            try:
                return self._leases.acquire(
                    spec.name,
                    holder,
                    spec.lease_ttl_ms,
                    interval_ms,
                    run_id=run_id,
                    since_tick=since,
                    pending_tick=pending,
                )
            except LeaseRefused as exc:
                self._raise_if_overtaken(exc.unanswered)
                if not isinstance(exc, PredecessorUnrecorded):
                    raise
                if not self._record_died(exc.term):
                    raise StoreError(
                        f"the run of fence {exc.term.fence} on {spec.name!r} could not be recorded died"
                    ) from exc
        raise LeaseHeld(spec.name)

    def _raise_if_overtaken(self, unanswered: Term | None) -> None:
        """An acquire refused after an earlier try may have been applied: was that try's term taken over?

        The lease item no longer names it (the caller checked), so it was, if
        and only if its run row exists: nothing settles a copy before the row is
        recorded. One consistent read, on this rare path only.
        """
        if unanswered is None:
            return
        row = self._runs.get(unanswered.job, unanswered.acquired_at, unanswered.run_id)
        if row is not None:
            raise TermOvertaken(unanswered.job, replace(unanswered, fence=int(row["fence"])))

    def _pre_gate(
        self, spec: JobSpec, now: int, interval_ms: int | None, since: int | None, pending: int | None
    ) -> Skip | None:
        try:
            state = self._leases.peek(spec.name)
        except StoreError as exc:
            # only an optimisation: the conditional write decides anyway
            self._logger.warning("pre-gate read failed; acquiring", extra={"reason": safe_error(exc)})
            return None
        return self._leases.would_skip(state, now, interval_ms, since_tick=since, pending_tick=pending)

    # -- buffer_one ---------------------------------------------------------------------------

    def _buffer(
        self, spec: JobSpec, trigger: Trigger, started: int, interval_ms: int | None, stage: str
    ) -> RunResult | None:
        """A tick met a live holder: record one pending request. None when the lease turned out free (acquire)."""
        try:
            pending = self._leases.request_pending(spec.name, trigger.scheduled_at, interval_ms)
        except StoreError as exc:
            # not recorded (or not known to be): the tick is a skip, as under `skip`; the next tick runs anyway
            self._logger.warning("recording a pending request failed", extra={"reason": safe_error(exc)})
            return self._skipped(spec, trigger, Skip.LEASED, started, stage=stage)
        if pending is Pending.LEASE_FREE:
            return None if stage == "pre_gate" else self._skipped(spec, trigger, Skip.LEASED, started, stage=stage)
        if pending is Pending.RECORDED:
            duration = self._clock.now_ms() - started
            self._observe(spec, Outcome.BUFFERED, duration, decided_by=stage, tick=trigger.scheduled_at)
            return RunResult(spec.name, Outcome.BUFFERED, None, duration)
        skip = Skip.INTERVAL if pending is Pending.GATED else Skip.LEASED
        return self._skipped(spec, trigger, skip, started, stage=stage)

    def _time_for_a_batch(self, spec: JobSpec, context: LambdaContextLike | None) -> bool:
        return context is None or context.get_remaining_time_in_millis() >= spec.batch_budget_s * 1000

    def _hand_over(self, spec: JobSpec, tick: int) -> None:
        """Too little time left to serve the pending request here: async-invoke our own function with it.

        A lost or failed hand-over loses nothing: the request stays on the lease
        item and the next acquire (the next tick) consumes it.
        """
        if self._invoke_self is None:
            self._logger.warning(
                "pending request left for the next tick: no hand-over configured", extra={"tick": tick}
            )
            return
        try:
            self._invoke_self(buffered_event(tick))
        except Exception as exc:  # noqa: BLE001 - logged; the request stays on the item for the next acquire
            self._logger.warning(
                "hand-over failed; the next tick serves the request", extra={"reason": safe_error(exc)}
            )
            return
        self._logger.info("pending request handed over", extra={"tick": tick})

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
                if isinstance(counts, LastBatch):
                    return  # the job said so: no renew for a batch that will not come
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

    def _skipped(self, spec: JobSpec, trigger: Trigger, skip: Skip, started: int, stage: str) -> RunResult:
        outcome = Outcome(skip.value)
        duration = self._clock.now_ms() - started
        self._observe(spec, outcome, duration, decided_by=stage, **trigger.who())
        return RunResult(spec.name, outcome, None, duration)

    def _overtaken(self, spec: JobSpec, trigger: Trigger, term: Term) -> RunResult:
        """Report an acquire that was applied unanswered and overtaken: its run ran nothing, its term was lost."""
        run = RunStart(
            spec.name,
            term.run_id,
            trigger.kind,
            trigger.scheduled_at,
            term.acquired_at,
            term.holder,
            term.fence,
            **trigger.who(),
        )
        error = f"LeaseLost: the term (fence {term.fence}) was taken over before its acquire was answered"
        return self._close(spec, run, Outcome.LEASE_LOST, {"batches": 0}, error, release=None)

    def _record_died(self, term: Term) -> bool:
        """Record the run of an unreleased replaced term, then settle its copy. False if a write failed (logged)."""
        try:
            if self._runs.mark_died(term, self._clock.now_ms()):
                self._logger.warning("previous run died", extra={"died_run_id": term.run_id, "fence": term.fence})
                self._metrics.add_metric(name=RunState.DIED.value, unit=MetricUnit.Count, value=1)
            self._leases.settle(term)
        except JobfenceError as exc:
            self._logger.warning("recording a died run failed", extra={"reason": safe_error(exc), "fence": term.fence})
            return False
        return True

    def _close(
        self,
        spec: JobSpec,
        run: RunStart,
        outcome: Outcome,
        summary: Mapping[str, Any],
        error: str | None,
        release: Lease | None,
        unmarked: Term | None = None,
    ) -> RunResult:
        """Finish the row, then release the term `release` (None: it is not ours to release). Never raises.

        Finishing first means a released term always has a finished row: a crash
        in between leaves a finished row and a term that simply expires. A row
        that cannot be finished keeps the term: when it expires, the next acquire
        records the run `died`. A release refused because the term was over turns
        `ran` into `lease_lost` (its last batch ran past the term).
        """
        if unmarked is not None:
            self._record_died(unmarked)  # its first try failed; the lease item keeps the copy for the sweep
        finished = self._clock.now_ms()
        recorded = self._finish(run, outcome, finished, summary, error)
        if release is not None and not recorded:
            self._logger.error("run row not finished: the term is left to expire", extra={"run_id": run.run_id})
        pending = None
        if release is not None and recorded:
            try:
                pending = self._leases.release(release)
            except LeaseLost as exc:
                self._logger.warning("release refused: the term was already over", extra={"reason": safe_error(exc)})
                if outcome is Outcome.RAN:
                    outcome, error = Outcome.LEASE_LOST, safe_error(exc)
                    self._finish(run, outcome, finished, summary, error)
            except Exception as exc:  # noqa: BLE001 - logged; the term expires on its own
                self._logger.error("release failed", extra={"reason": safe_error(exc), "run_id": run.run_id})
        duration = finished - run.started_at
        # a manual run's requester and caller ride on its outcome line (passed per line: a logger is shared)
        self._observe(
            spec,
            outcome,
            duration,
            run_id=run.run_id,
            fence=run.fence,
            error=error,
            trigger=run.trigger if run.trigger in _FOR_TICK else None,
            tick=run.scheduled_at if run.trigger in _FOR_TICK else None,
            **who_fields(run.requested_by, run.caller),
        )
        return RunResult(spec.name, outcome, run.run_id, duration, bounded_summary(summary), pending_tick=pending)

    def _finish(
        self, run: RunStart, outcome: Outcome, finished: int, summary: Mapping[str, Any], error: str | None
    ) -> bool:
        meter = current_meter()
        cost = meter.cost(finished - run.started_at) if meter is not None else None  # up to this write
        try:
            self._runs.finish(run, RunState(outcome.value), finished, summary, error, cost)
        except Exception as exc:  # noqa: BLE001 - logged; must not replace the job's own error
            self._logger.error("finishing the run row failed", extra={"reason": safe_error(exc), "run_id": run.run_id})
            self._metrics.add_metric(name="unrecorded", unit=MetricUnit.Count, value=1)
            return False
        return True

    def _observe(self, spec: JobSpec, outcome: Outcome, duration_ms: int, **fields: Any) -> None:
        fields = {k: v for k, v in fields.items() if v is not None}
        log = self._logger.error if outcome is Outcome.FAILED else self._logger.info
        log("scheduled_job", extra={"outcome": outcome.value, "duration_ms": duration_ms, **fields})
        self._metrics.add_metric(name=outcome.value, unit=MetricUnit.Count, value=1)
        self._metrics.add_metric(name="duration", unit=MetricUnit.Milliseconds, value=duration_ms)


_FOR_TICK = ("catch_up", "buffered")  # triggers that stand in for a past tick: their log line names it


def _merge(summary: dict[str, Any], counts: Mapping[str, Any] | None) -> None:
    for key, value in (counts or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            summary[key] = summary.get(key, 0) + value
        else:
            summary[key] = value
