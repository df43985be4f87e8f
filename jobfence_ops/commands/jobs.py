"""Scheduled jobs: their state (rule, lease, last runs), their runs, and running them by hand.

Reads go to the leases and runs tables and to EventBridge; a manual run goes
through the job's own function with the manual trigger, so the gate and the
lease apply exactly as to a tick. A catch-up (`enable JOB --catch-up`) sends the
job's function a catch-up trigger for the tick `jobfence.catchup.due` names, so
it runs at most once for that tick, whoever else asks.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from typing import Any

from jobfence.capacity import Cost
from jobfence.catchup import due
from jobfence.errors import StoreError
from jobfence.lease import LeaseStore
from jobfence.lease_toggles import RuleToggles
from jobfence.ledger import Ledger, ledger_of
from jobfence.registry import CatchUp
from jobfence.runs import MAX_ERROR_CHARS, RunStore, bounded_summary
from jobfence.schedule import Schedule, ScheduleError
from jobfence.sweep import SweepResult, sweep_dead_runs
from jobfence.trigger_requests import REQUESTED_BY_MAX, REQUESTED_BY_PATTERN
from jobfence.triggers import catch_up_event
from jobfence_ops.audit import Operator
from jobfence_ops.commands import switches
from jobfence_ops.commands.batches import stale_item_counts
from jobfence_ops.runtime.sqs import queue_depths
from jobfence_ops.runtime.topology import FunctionInfo
from jobfence_ops.runtime.workers import Invocation
from jobfence_ops.targets import OperatorError, Target

DAY_MS = 86_400_000
READERS = 8
LEDGER_ROWS = 200  # runs read for the last day's counts (a 5-minute job runs 288 times a day: a floor, said so)
# outcomes a job can end with that mean it did not do its work
FAILED_OUTCOMES = frozenset({"failed", "lease_lost", "died"})


@dataclass(frozen=True)
class RunView:
    """One row of the runs table as the operator sees it."""

    job: str
    run_id: str | None
    outcome: str | None
    trigger: str | None
    started_at: int | None
    finished_at: int | None
    duration_ms: int | None
    holder: str | None
    fence: int | None
    summary: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    requested_by: str | None = None  # a manual run: the operator's name as given
    caller: str | None = None  # a manual run: the IAM principal that asked for it
    cost: Cost | None = None  # its DynamoDB units, requests and estimate (`jobfence.capacity`); None before costs

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunView:
        return cls(
            job=row["job"],
            run_id=row.get("run_id"),
            outcome=row.get("outcome"),
            trigger=row.get("trigger"),
            started_at=row.get("started_at"),
            finished_at=row.get("finished_at"),
            duration_ms=row.get("duration_ms"),
            holder=row.get("holder"),
            fence=row.get("fence"),
            summary=dict(row.get("summary") or {}),
            error=row.get("error"),
            requested_by=row.get("requested_by"),
            caller=row.get("caller"),
            cost=Cost.of_fields(row),
        )


@dataclass(frozen=True)
class JobStatus:
    job: str
    rule: str | None
    rule_state: str | None
    schedule: str | None
    next_tick_at: int | None
    holder: str | None
    expires_at: int | None
    fence: int | None
    last_started_at: int | None
    last_run: RunView | None
    missed_last_day: int | None = None  # expected ticks of the last 24 h that no invocation reached (the ledger)
    ticks_last_day: tuple[str, ...] = ()  # what became of each expected tick of the last 24 h, oldest first


@dataclass(frozen=True)
class QueueDepth:
    queue: str
    visible: int
    in_flight: int


@dataclass(frozen=True)
class WorkerState:
    """A queue worker's event source mapping: `Enabled` delivers; `Disabled` (paused) leaves messages waiting."""

    function: str
    mapping: str  # the mapping's UUID
    state: str  # as Lambda reports it: Enabled, Disabled, Enabling, Disabling, Updating, ...
    paused: bool


@dataclass(frozen=True)
class StatusReport:
    now_ms: int
    jobs: list[JobStatus]
    stale_items: dict[str, int] | None  # pipeline/status -> stale live items; None without work tables
    queues: list[QueueDepth]
    workers: list[WorkerState]

    @property
    def stopped(self) -> switches.Stopped:
        """What is switched off now: disabled rules and paused workers (the console's banner)."""
        return switches.Stopped(
            rules=tuple(j.job for j in self.jobs if j.rule_state and j.rule_state != "ENABLED"),
            workers=tuple(w.function for w in self.workers if w.paused),
        )


def core_tables(target: Target) -> tuple[str, str]:
    leases, runs = target.topology.leases_table, target.topology.runs_table
    if not leases or not runs:
        raise OperatorError("no deployed job function names the leases and runs tables")
    return leases, runs


def _next_tick(schedule: str | None, now_ms: int) -> int | None:
    if not schedule:
        return None
    try:
        # rate() counts from the rule's creation, which the API does not return: from now is close enough
        return Schedule(schedule, now_ms).next_after(now_ms)
    except ScheduleError:
        return None


def status(target: Target) -> StatusReport:
    """Rule, lease (holder, expiry) and last run per job, stale items, queue depths."""
    leases_table, runs_table = core_tables(target)
    client = target.session.client("dynamodb")
    now = target.clock.now_ms()
    leases = {item["job"]: item for item in LeaseStore(client, leases_table, target.clock).all()}
    runs = RunStore(client, runs_table)
    rules = target.topology.job_rules()
    events = target.session.client("events")
    toggles = RuleToggles(client, leases_table)

    def one(job: str) -> JobStatus:
        lease = leases.get(job, {})
        recent = runs.recent(job, limit=1)
        rule = events.describe_rule(Name=rules[job].name) if job in rules else {}
        state, schedule = rule.get("State"), rule.get("ScheduleExpression")
        _note_rule_state(target, toggles, job, state, now)
        day = job_ledger(target, job, now - DAY_MS, now) if job in target.app.catalog.jobs else None
        return JobStatus(
            job=job,
            rule=rule.get("Name"),
            rule_state=state,
            schedule=schedule,
            next_tick_at=_next_tick(schedule, now) if state == "ENABLED" else None,
            holder=lease.get("holder"),
            expires_at=lease.get("expires_at"),
            fence=lease.get("fence"),
            last_started_at=lease.get("last_started_at"),
            last_run=RunView.of(recent[0]) if recent else None,
            missed_last_day=day.missed if day else None,
            ticks_last_day=tuple(e.label.value for e in day.entries) if day else (),
        )

    # a few dozen small reads: in parallel (boto3 clients are thread-safe), so a status takes one round trip's time
    with ThreadPoolExecutor(max_workers=READERS) as executor:
        jobs = list(executor.map(one, sorted(target.topology.job_functions())))
        stale = executor.submit(stale_item_counts, target)
        mappings = executor.submit(switches.worker_states, target)
        depths = queue_depths(target.session, target.topology)
        queues = [QueueDepth(name, d["visible"], d["in_flight"]) for name, d in sorted(depths.items())]
        workers = [WorkerState(m.name, m.resource, m.state, not switches.running(m)) for m in mappings.result()]
        return StatusReport(now, jobs, stale.result(), queues, workers)


def check_job(target: Target, job: str) -> FunctionInfo:
    """The deployed function of `job`, or an error naming the jobs there are."""
    functions = target.topology.job_functions()
    if job not in functions:
        raise OperatorError(f"no deployed job {job!r}; jobs: {', '.join(sorted(functions))}")
    return functions[job]


def runs(target: Target, job: str, limit: int = 20) -> list[RunView]:
    """The job's recent runs, newest first (outcome, duration, error)."""
    _, runs_table = core_tables(target)
    check_job(target, job)
    return [RunView.of(r) for r in RunStore(target.session.client("dynamodb"), runs_table).recent(job, limit=limit)]


def _note_rule_state(target: Target, toggles: RuleToggles, job: str, state: str | None, now: int) -> None:
    """Record a rule found in a state its toggle record disagrees with (a deploy or the AWS console changed it)."""
    if state not in ("ENABLED", "DISABLED") or target.read_only:
        return
    with contextlib.suppress(StoreError):  # a read-only profile cannot record it; what it asked to read is still shown
        toggles.seen(job, state == "ENABLED", now)  # counts from now: when it was first seen so


def job_ledger(target: Target, job: str, since_ms: int, until_ms: int | None = None, *, look: bool = False) -> Ledger:
    """Every expected tick of `job` in (since, until] (default: now) and what became of it (`jobfence.ledger`).

    `look`: read the rule's live state first and record it if its toggle record disagrees (as `status` does).
    """
    leases_table, runs_table = core_tables(target)
    check_job(target, job)
    spec = target.app.catalog.job(job)
    client = target.session.client("dynamodb")
    rule = target.topology.job_rules().get(job)
    if look and rule is not None:
        state = target.session.client("events").describe_rule(Name=rule.name).get("State")
        _note_rule_state(target, RuleToggles(client, leases_table), job, state, target.clock.now_ms())
    until = target.clock.now_ms() if until_ms is None else until_ms
    history = RuleToggles(client, leases_table).history(job)  # no tick from before the rule existed is expected
    return ledger_of(spec, RunStore(client, runs_table), history.toggles, min(history.clip(since_ms), until), until)


def sweep_runs(target: Target) -> SweepResult:
    """Record `died` every run whose term ended unreleased (what each job's next tick would do).

    An operator's command: it reads every lease item, which no scheduled
    function is granted (each may touch only its own job's items).
    """
    leases_table, runs_table = core_tables(target)
    client = target.session.client("dynamodb")
    return sweep_dead_runs(
        LeaseStore(client, leases_table, target.clock), RunStore(client, runs_table), target.clock.now_ms()
    )


def find_run(target: Target, job: str, run_id: str) -> RunView:
    """One run of a job by its id (among its latest runs)."""
    for run in runs(target, job, LEDGER_ROWS):
        if run.run_id == run_id:
            return run
    raise OperatorError(f"no run {run_id!r} among the latest {LEDGER_ROWS} runs of {job!r}")


def last_day(target: Target, job: str) -> dict[str, int]:
    """The job's runs of the last 24 hours counted by outcome (the latest LEDGER_ROWS at most)."""
    since = target.clock.now_ms() - DAY_MS
    return dict(Counter(r.outcome or "-" for r in runs(target, job, LEDGER_ROWS) if (r.started_at or 0) >= since))


def log_query(run: RunView) -> str:
    """The CloudWatch Logs Insights query of one run's log lines (the job's own log group)."""
    return (
        "fields @timestamp, level, message, outcome, duration_ms, fence, error, requested_by, caller\n"
        f'| filter stage = "{run.job}" and run_id = "{run.run_id}"\n'
        "| sort @timestamp asc"
    )


# -- running ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobResult:
    """One job's manual run, as `run` and `run-all` report it."""

    job: str
    function: str
    status: str  # the invocation: ok | error | died | timeout | init_error
    outcome: str | None
    wall_ms: int  # how long the operator waited for it (real time, also on the local runtime)
    summary: dict[str, Any]
    error: str | None
    run_id: str | None = None  # the run it started (None: none took the lease)

    @property
    def passed(self) -> bool:
        return self.status == "ok" and self.outcome is not None and self.outcome not in FAILED_OUTCOMES


def operator_name(text: str) -> str:
    """The operator's name exactly as given ("Jane Doe"), or OperatorError saying why it cannot be recorded."""
    if not re.fullmatch(REQUESTED_BY_PATTERN, text) or len(text) > REQUESTED_BY_MAX:
        raise OperatorError(
            f"a name to record is 1..{REQUESTED_BY_MAX} printable characters, not only spaces; "
            f"got {text[:REQUESTED_BY_MAX]!r}"
        )
    return text


def manual_trigger(operator: Operator) -> dict[str, str]:
    """The manual trigger event: the same contract (gate, lease) as a tick. The name is never rewritten."""
    return {"trigger": "manual", "requested_by": operator_name(operator.requested_by), "caller": operator.caller}


def run(target: Target, job: str, operator: Operator) -> JobResult:
    """Trigger one job now, through its own function (gate and lease apply)."""
    function = check_job(target, job)
    return _timed(target, job, function.name, manual_trigger(operator))


def run_all(target: Target, operator: Operator) -> Iterator[JobResult]:
    """Every scheduled job at once; each result as soon as it is in. One failure never hides another."""
    functions = target.topology.job_functions()
    event = manual_trigger(operator)
    with ThreadPoolExecutor(max_workers=max(1, len(functions))) as executor:
        futures = [executor.submit(_timed, target, job, f.name, event) for job, f in sorted(functions.items())]
        for future in as_completed(futures):
            yield future.result()


ON_DEMAND_WINDOW_S = 24 * 3600  # `enable --catch-up` of a job whose policy is "none": the last day


@dataclass(frozen=True)
class CatchUpResult:
    """One job's on-demand catch-up: the tick it ran for (None: nothing was due) and that run."""

    job: str
    tick: int | None
    window_s: int
    run: JobResult | None

    @property
    def passed(self) -> bool:
        return self.run is None or self.run.passed


def catch_up(target: Target, job: str, operator: Operator) -> CatchUpResult:
    """Run `job` once for its last missed or disabled tick inside its window, if one is due (`jobfence.catchup`).

    The job's own window when its policy is `once`; the last day otherwise (an
    operator asking is the policy). The function decides again in its acquire:
    a run started since the tick makes it `skipped_served`.
    """
    function = check_job(target, job)
    spec = target.app.catalog.job(job)
    if spec.catch_up != CatchUp.ONCE:
        spec = replace(spec, catch_up=CatchUp.ONCE, catch_up_window_s=ON_DEMAND_WINDOW_S)
    window_s = int(spec.catch_up_window_s or ON_DEMAND_WINDOW_S)
    now = target.clock.now_ms()
    book = job_ledger(target, job, now - window_s * 1000, now)
    leases_table, _ = core_tables(target)
    toggles = RuleToggles(target.session.client("dynamodb"), leases_table).read(job)
    tick = due(spec, book.entries, now, toggles=toggles)
    if tick is None:
        return CatchUpResult(job, None, window_s, None)
    event = catch_up_event(tick, operator_name(operator.requested_by), operator.caller)
    return CatchUpResult(job, tick, window_s, _timed(target, job, function.name, event))


def _timed(target: Target, job: str, function: str, event: Any) -> JobResult:
    started = time.monotonic()
    try:
        invocation = target.invoke(function, event)
    except Exception as exc:  # the invoke itself failed (throttled, denied, unreachable): still one result
        invocation = Invocation(function, "error", error_type=type(exc).__name__, error_message=str(exc))
    wall_ms = int((time.monotonic() - started) * 1000)
    payload = invocation.payload if isinstance(invocation.payload, dict) else {}
    error = (
        f"{invocation.error_type}: {invocation.error_message or ''}"[:MAX_ERROR_CHARS]
        if invocation.error_type
        else None
    )
    outcome = (
        payload.get("outcome") if invocation.ok else ("failed" if invocation.status == "error" else invocation.status)
    )
    run_id = payload.get("run_id")
    return JobResult(
        job,
        function,
        invocation.status,
        outcome,
        wall_ms,
        bounded_summary(payload.get("summary") or {}),
        error,
        run_id if isinstance(run_id, str) else None,
    )
