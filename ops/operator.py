"""What the operator commands do, against the embedded runtime or a real account.

A `Target` is where the system runs: `EmbeddedTarget` (the local runtime, its
simulated clock and worker isolates) or `AwsTarget` (a boto3 session, the wall
clock, Lambda's Invoke API). Either way the deployed topology is read back from
CloudFormation and the services, and every read goes to the tables themselves
(leases, runs, batch and item rows). Each command returns plain data; `ops.cli`
renders it.
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from jobfence.clock import Clock, SystemClock
from jobfence.config import Settings
from jobfence.lease import LeaseStore
from jobfence.runs import MAX_ERROR_CHARS, RunStore, SweepResult, bounded_summary, sweep_dead_runs
from ops.runtime.topology import FunctionInfo, Topology, discover, read_rule
from ops.runtime.workers import Invocation

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"
DEFAULT_STACK = "jobfence"


class OperatorError(RuntimeError):
    """A command that cannot do what was asked; the message says why (exit status 2)."""


class Target(Protocol):
    name: str
    session: Any
    topology: Topology
    clock: Clock

    def invoke(self, function: str, event: Any) -> Invocation: ...

    def environment(self) -> Any:
        """A context in which this process's pynamodb stores reach the target."""
        ...


class EmbeddedTarget:
    """The embedded local runtime."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        self.name = f"embedded ({runtime.emulator.endpoint})"
        self.session = runtime.session
        self.topology = runtime.topology
        self.clock = runtime.clock

    def invoke(self, function: str, event: Any) -> Invocation:
        return self.runtime.invoke(function, event)

    @contextlib.contextmanager
    def environment(self):
        """Point this process's pynamodb stores at the emulator while a command runs."""
        saved = {k: os.environ.get(k) for k in self.runtime.emulator.environment()}
        os.environ.update(self.runtime.emulator.environment())
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


class AwsTarget:
    """A deployed stack in a real account (credentials from the profile or the environment)."""

    def __init__(self, profile: str | None, region: str | None, stack: str = DEFAULT_STACK) -> None:
        import boto3

        if profile:
            os.environ["AWS_PROFILE"] = profile  # pynamodb builds its own clients from the environment
        if region:
            os.environ["AWS_DEFAULT_REGION"] = region
        self.session = boto3.Session(profile_name=profile, region_name=region)
        self.name = f"aws ({profile or 'default credentials'}, {self.session.region_name})"
        self.clock = SystemClock()
        self.topology = discover(self.session, stack)

    def environment(self):
        return contextlib.nullcontext()

    def invoke(self, function: str, event: Any) -> Invocation:
        lam = self.session.client("lambda")
        out = lam.invoke(FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode())
        payload = json.loads(out["Payload"].read() or b"null")
        if out.get("FunctionError"):
            body = payload if isinstance(payload, dict) else {}
            return Invocation(function, "error", error_type=body.get("errorType", out["FunctionError"]), error_message=body.get("errorMessage"))
        return Invocation(function, "ok", payload=payload)


# -- reading ---------------------------------------------------------------------------------


def _client(target: Target) -> Any:
    return target.session.client("dynamodb")


def _core_tables(target: Target) -> tuple[str, str]:
    leases, runs = target.topology.leases_table, target.topology.runs_table
    if not leases or not runs:
        raise OperatorError("no deployed job function names the leases and runs tables")
    return leases, runs


@dataclass
class JobStatus:
    job: str
    rule_state: str | None
    holder: str | None
    expires_at: int | None
    fence: int | None
    last_started_at: int | None
    last_run: dict[str, Any] | None


@dataclass
class StatusReport:
    now_ms: int
    jobs: list[JobStatus]
    stale_items: dict[str, int] | None  # pipeline/status -> stale live items; None without work tables
    queues: dict[str, dict[str, int]]


def status(target: Target) -> StatusReport:
    """Leases (holder, expiry), last run and rule state per job, stale items, queue depths."""
    leases_table, runs_table = _core_tables(target)
    client = _client(target)
    leases = {item["job"]: item for item in LeaseStore(client, leases_table, target.clock).all()}
    runs = RunStore(client, runs_table)
    rules = target.topology.job_rules()
    events = target.session.client("events")
    jobs = []
    for job in sorted(target.topology.job_functions()):
        lease = leases.get(job, {})
        recent = runs.recent(job, limit=1)
        rule = rules.get(job)
        jobs.append(
            JobStatus(
                job=job,
                rule_state=read_rule(events, rule.name).state if rule else None,
                holder=lease.get("holder"),
                expires_at=lease.get("expires_at"),
                fence=lease.get("fence"),
                last_started_at=lease.get("last_started_at"),
                last_run=recent[0] if recent else None,
            )
        )
    from ops.runtime.sqs import queue_depths

    return StatusReport(target.clock.now_ms(), jobs, stale_item_counts(target), queue_depths(target.session, target.topology))


def sweep_runs(target: Target) -> SweepResult:
    """Record `died` every run whose term ended unreleased (what each job's next tick would do).

    An operator's command: it reads every lease item, which no scheduled
    function is granted (each may touch only its own job's items).
    """
    leases_table, runs_table = _core_tables(target)
    client = _client(target)
    return sweep_dead_runs(LeaseStore(client, leases_table, target.clock), RunStore(client, runs_table), target.clock.now_ms())


def runs(target: Target, job: str, limit: int = 20) -> list[dict[str, Any]]:
    """The job's recent runs, newest first (outcome, duration, error)."""
    _, runs_table = _core_tables(target)
    if job not in target.topology.job_functions():
        raise OperatorError(f"no deployed job {job!r}; jobs: {', '.join(sorted(target.topology.job_functions()))}")
    return RunStore(_client(target), runs_table).recent(job, limit=limit)


# -- batches (the durable-batches tables, when deployed) --------------------------------------


def _work_settings(target: Target) -> Settings:
    """The work tables and queues, from the functions that were granted them (workers, reclaim)."""
    try:
        from jobs.listings.pipelines import BATCHES_TABLE, ITEMS_TABLE
    except ImportError:
        raise OperatorError("this checkout has no durable batches") from None
    from jobfence.config import table_env

    merged: dict[str, str] = {}
    for function in target.topology.functions.values():
        env = function.environment
        if table_env(BATCHES_TABLE) in env and table_env(ITEMS_TABLE) in env:
            merged.update({k: v for k, v in env.items() if k.startswith(("TABLE_", "QUEUE_"))})
    if not merged:
        raise OperatorError("no deployed function has the batch and item tables")
    return Settings.from_environ(merged)


def work_store(target: Target) -> Any:
    """The durable-batches store bound to the deployed tables."""
    settings = _work_settings(target)  # first: it says so when this checkout has no batches
    from jobs.listings.pipelines import build_store

    return build_store(settings, target.clock)


def stale_item_counts(target: Target) -> dict[str, int] | None:
    """Live items per pipeline and status whose `updated_at` is older than that pipeline's stale limit."""
    try:
        store = work_store(target)
        from jobfence.work import ItemStatus
        from jobs.listings.pipelines import PIPELINES
    except OperatorError:
        return None
    now = target.clock.now_ms()
    counts = {}
    for kind, pipeline in PIPELINES.items():
        for status, stale_s in ((ItemStatus.RUNNING, pipeline.timing.item_stale_s), (ItemStatus.PENDING, pipeline.timing.pending_stale_s)):
            total, cursor = 0, None
            while True:
                page, cursor = store.stale_items(kind, status, now - stale_s * 1000, 500, cursor)
                total += len(page)
                if cursor is None:
                    break
            counts[f"{kind}/{status.value}"] = total
    return counts


def batch(target: Target, batch_ref: str) -> Any:
    """Rows first: the batch row, then its item rows (status, attempts, error, updated_at)."""
    from jobfence.work import BatchRef

    try:
        ref = BatchRef.parse(batch_ref)
    except ValueError as exc:
        raise OperatorError(str(exc)) from None
    report = batch_operations(target).describe_batch(ref)
    if report is None:
        raise OperatorError(f"no batch {ref}")
    return report


def _work_parts(target: Target) -> tuple[Any, Any, Any]:
    settings = _work_settings(target)
    from aws_lambda_powertools import Logger

    from jobs.listings.pipelines import build_store, build_wakeups

    store = build_store(settings, target.clock)
    return store, build_wakeups(settings, target.session.client("sqs")), Logger(service="operator", level="WARNING")


def producer(target: Target) -> Any:
    """The durable-batches producer (store and wake-up queues) bound to the deployed resources."""
    from jobfence.work import Producer

    return Producer(*_work_parts(target))


def batch_operations(target: Target) -> Any:
    """The operator's view of batches (rows first) and its retry, bound to the deployed resources."""
    from jobfence.work import BatchOperations

    return BatchOperations(*_work_parts(target))


def retry_failed(target: Target, batch_ref: str, requested_by: str) -> Any:
    # returns jobfence.work.RetryResult (imported lazily, like every jobfence import here)
    """Reset the batch's failed items (a fresh attempts budget, quota re-reserved) and wake them."""
    from jobfence.errors import StoreError
    from jobfence.work import BatchRef

    try:
        ref = BatchRef.parse(batch_ref)
    except ValueError as exc:
        raise OperatorError(str(exc)) from None
    try:
        return batch_operations(target).retry_failed(ref, requested_by)
    except StoreError as exc:
        raise OperatorError(str(exc)) from None


# -- acting ----------------------------------------------------------------------------------


@dataclass
class JobResult:
    """One job's manual run, as `run` and `run-all` print it."""

    job: str
    function: str
    status: str  # the invocation: ok | error | died | init_error
    outcome: str | None
    duration_ms: int | None
    summary: dict[str, Any]
    error: str | None

    @property
    def passed(self) -> bool:
        return self.status == "ok" and self.outcome not in (None, "failed", "lease_lost")


def manual_trigger(requested_by: str) -> dict[str, str]:
    """The manual trigger event: the same contract (gate, lease) as a tick."""
    who = re.sub(r"[^A-Za-z0-9@._:/+=-]", "_", requested_by)[:128] or "operator"
    return {"trigger": "manual", "requested_by": who}


def _function_of(target: Target, job: str) -> FunctionInfo:
    try:
        return target.topology.job_functions()[job]
    except KeyError:
        raise OperatorError(f"no deployed job {job!r}; jobs: {', '.join(sorted(target.topology.job_functions()))}") from None


def run(target: Target, job: str, requested_by: str) -> JobResult:
    """Trigger one job now, through its own function (gate and lease apply)."""
    function = _function_of(target, job)
    return _result(job, function.name, target.invoke(function.name, manual_trigger(requested_by)))


def run_all(target: Target, requested_by: str) -> list[JobResult]:
    """Every scheduled job at once, in parallel; one failure never hides another."""
    functions = target.topology.job_functions()
    event = manual_trigger(requested_by)
    with ThreadPoolExecutor(max_workers=max(1, len(functions))) as executor:
        futures = {job: executor.submit(target.invoke, f.name, event) for job, f in sorted(functions.items())}
    results = []
    for job, future in futures.items():
        try:
            invocation = future.result()
        except Exception as exc:  # the invoke itself failed (throttled, denied): still one line per job
            invocation = Invocation(functions[job].name, "error", error_type=type(exc).__name__, error_message=str(exc))
        results.append(_result(job, functions[job].name, invocation))
    return results


def _result(job: str, function: str, invocation: Invocation) -> JobResult:
    payload = invocation.payload if isinstance(invocation.payload, dict) else {}
    error = None
    if invocation.error_type:
        error = f"{invocation.error_type}: {invocation.error_message or ''}"[:MAX_ERROR_CHARS]
    outcome = payload.get("outcome") if invocation.ok else ("failed" if invocation.status == "error" else None)
    return JobResult(
        job=job,
        function=function,
        status=invocation.status,
        outcome=outcome,
        duration_ms=payload.get("duration_ms"),
        summary=bounded_summary(payload.get("summary") or {}),
        error=error,
    )


@dataclass
class RuleChange:
    job: str
    rule: str
    state: str


def set_rules(target: Target, enabled: bool, job: str | None = None) -> list[RuleChange]:
    """Enable or disable every job's rule, or one job's (the incident kill switch)."""
    rules = target.topology.job_rules()
    if job is not None and job not in rules:
        raise OperatorError(f"no rule ticks job {job!r}; jobs with rules: {', '.join(sorted(rules))}")
    events = target.session.client("events")
    changes = []
    for name, rule in sorted(rules.items()):
        if job is not None and name != job:
            continue
        (events.enable_rule if enabled else events.disable_rule)(Name=rule.name)
        changes.append(RuleChange(name, rule.name, read_rule(events, rule.name).state))
    return changes


def load_event_file(event_file: str) -> Any:
    """A sample event by name (`events/<name>.json`) or by path."""
    path = pathlib.Path(event_file)
    if not path.is_file():
        candidate = EVENTS / (event_file if event_file.endswith(".json") else f"{event_file}.json")
        if not candidate.is_file():
            raise OperatorError(f"no event file {event_file!r} (looked for {path} and {candidate})")
        path = candidate
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise OperatorError(f"{path} is not JSON: {exc}") from None


def invoke(target: Target, function: str, event_file: str) -> Invocation:
    """Invoke a function (its name, or a job's name) with a sample event."""
    event = load_event_file(event_file)
    functions = target.topology.functions
    jobs = target.topology.job_functions()
    if function in functions:
        name = function
    elif function in jobs:
        name = jobs[function].name
    else:
        raise OperatorError(f"no deployed function {function!r}; functions: {', '.join(sorted(functions))}")
    return target.invoke(name, event)
