"""`LocalRuntime`: the deployed template running on moto, driven by a simulated clock.

    runtime = LocalRuntime.start()       # emulator, synth (cached), deploy, discover, stubs, secrets
    runtime.advance_to(t)                # fire due EventBridge ticks, deliver SQS batches, up to t
    runtime.invoke("jobfence-x", event)  # one invocation in a warm isolate (Lambda Invoke)
    runtime.stop()

Ticks and deliveries happen at simulated instants in order: the driver jumps
the clock to the next rule fire or visibility expiry, fires the rules that are
ENABLED at that moment (their state is read from EventBridge, so `disable`
stops ticks and `enable` resumes them), then pumps every queue until nothing is
visible. The rules of one instant are invoked in parallel, like EventBridge's
asynchronous invokes.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import shutil
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from jobfence import triggers
from jobfence.clock import FrozenClock
from jobfence.lease_toggles import RuleToggles
from jobfence.schedule import Schedule
from jobfence_ops.app import App, default_app
from jobfence_ops.emulator import Emulator
from jobfence_ops.runtime.providers import LocalProviders, complete_environments
from jobfence_ops.runtime.sqs import PumpStats, QueuePoller
from jobfence_ops.runtime.template import CloudAssembly, DeployError, cached_synthesis, deploy
from jobfence_ops.runtime.topology import RuleInfo, Topology, discover
from jobfence_ops.runtime.workers import Invocation, WorkerPool


@dataclass
class Tick:
    """One rule firing (or not, when the rule was disabled at that instant)."""

    rule: str
    job: str | None
    at_ms: int
    fired: bool
    invocation: Invocation | None = None
    event_id: str | None = None
    duplicate: bool = False  # a second delivery of the same event (EventBridge is at-least-once)
    dropped: bool = False  # the rule was enabled but the driver had this tick never delivered


@dataclass
class Timeline:
    ticks: list[Tick] = field(default_factory=list)
    pumped: PumpStats = field(default_factory=PumpStats)
    invoked: list[Invocation] = field(default_factory=list)  # asynchronous invokes (Lambda's Event type) run


def scheduled_event(rule: RuleInfo, at_ms: int) -> dict[str, Any]:
    """The event EventBridge sends a scheduled rule's target: its account and region are the rule's own."""
    return triggers.scheduled_event(rule.arn, at_ms)


class LocalRuntime:
    """The embedded runtime, fully built by `LocalRuntime.start()`. Tests share one per session."""

    def __init__(
        self,
        *,
        emulator: Emulator,
        assembly: CloudAssembly,
        topology: Topology,
        pool: WorkerPool,
        poller: QueuePoller,
        providers: LocalProviders,
        clock: FrozenClock,
        account: str,
        workdir: pathlib.Path,
        own_workdir: bool,
    ) -> None:
        self.app = providers.app
        self.emulator = emulator
        self.assembly = assembly
        self.topology = topology
        self.pool = pool
        self.poller = poller
        self.providers = providers
        self.clock = clock
        self.account = account
        self.workdir = workdir
        self._own_workdir = own_workdir
        self.start_ms = clock.now_ms()
        self.timeline = Timeline()
        self.on_tick: Callable[[Tick], None] | None = None
        self._schedules = {
            name: Schedule(rule.schedule, self.start_ms) for name, rule in topology.rules.items() if rule.schedule
        }
        # driver-injected conditions for the next tick of a rule: deliver it twice at once, never deliver
        # it (EventBridge dropped it: the ledger's `missed`), or arm faults
        self.duplicate_next: set[str] = set()
        self.drop_next: set[str] = set()
        self.faults_next: dict[str, list[dict[str, Any]]] = {}
        self._scheduled_until = self.start_ms
        # Lambda Invokes a function makes (the auditor's catch-ups, a buffered run's self-invoke) reach the isolates
        self._async_lock = threading.Lock()
        self._async: list[tuple[str, Any]] = []
        emulator.route_invokes(self._lambda_invoke)

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def start(
        cls,
        *,
        start_ms: int | None = None,
        workdir: pathlib.Path | None = None,
        context: dict[str, Any] | None = None,
        app: App | None = None,
        assembly: CloudAssembly | None = None,
    ) -> LocalRuntime:
        """Start moto, deploy the app's (cached) synthesized template, read it back, prepare the isolates.

        `app`: the app to run (default: the one found from the working directory, `jobfence_ops.app`).
        """
        app = app or default_app()
        folder = workdir or pathlib.Path(tempfile.mkdtemp(prefix="jobfence-local-"))
        emulator = Emulator().start()
        providers = LocalProviders(app)
        try:
            session = emulator.session()
            assembly = assembly or cached_synthesis(context or {}, app.root)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # moto warns about resource types it does not model
                deploy(session, assembly)
            account = session.client("sts").get_caller_identity()["Account"]
            topology = discover(session, assembly.stack_name, assembly.template)
            emulator.detach_sqs_event_sources(account)  # this runtime's poller delivers, on the simulated clock
            code_dirs = {}
            for name, info in topology.functions.items():
                code = assembly.code_directory(info.code_key or "")
                if code is None:
                    raise DeployError(f"function {name}: its code asset {info.code_key} is not in the assembly")
                code_dirs[name] = code
            clock = (
                FrozenClock() if start_ms is None else FrozenClock(start_ms)
            )  # simulated time: only the driver moves it
            record_rule_creation(session, topology, clock.now_ms())
            extra = complete_environments(
                session, {n: f.environment for n, f in topology.functions.items()}, clock, providers
            )
            log_dir = folder / "logs"
            log_dir.mkdir(parents=True, exist_ok=True)
            pool = WorkerPool(topology.functions, code_dirs, clock, emulator.environment(), extra, log_dir)
            poller = QueuePoller(session, topology, pool, clock)
        except BaseException:
            providers.stop()
            emulator.stop()
            if workdir is None:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        return cls(
            emulator=emulator,
            assembly=assembly,
            topology=topology,
            pool=pool,
            poller=poller,
            providers=providers,
            clock=clock,
            account=account,
            workdir=folder,
            own_workdir=workdir is None,
        )

    def stop(self) -> None:
        """Stop every isolate, stub and the emulator; remove a temporary work folder."""
        if self.pool is not None:
            self.pool.stop()
        self.providers.stop()
        self.emulator.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def session(self):
        return self.emulator.session()

    @property
    def log_dir(self) -> pathlib.Path:
        return self.workdir / "logs"

    # -- invoking ------------------------------------------------------------------------------

    def invoke(self, function: str, event: Any, faults: list[dict[str, Any]] | None = None) -> Invocation:
        """Invoke a function synchronously in one of its isolates (Lambda's RequestResponse)."""
        return self.pool.invoke(function, event, faults)

    def _lambda_invoke(
        self, function: str, invocation_type: str, body: bytes
    ) -> tuple[str, list[tuple[str, str]], bytes]:
        """Lambda's Invoke API, answered from the isolates (called by the emulator's server threads)."""
        json_type = [("Content-Type", "application/json")]
        if function not in self.topology.functions:
            error = {"Type": "User", "message": f"Function not found: {function}"}
            return (
                "404 Not Found",
                [*json_type, ("x-amzn-ErrorType", "ResourceNotFoundException")],
                json.dumps(error).encode(),
            )
        event = json.loads(body or b"null")
        if invocation_type == "DryRun":
            return "204 No Content", [], b""
        if invocation_type == "Event":  # queued: the driver runs it at the current simulated instant
            with self._async_lock:
                self._async.append((function, event))
            return "202 Accepted", json_type, b""
        result = self.invoke(function, event)
        headers = [*json_type, ("X-Amz-Executed-Version", "$LATEST")]
        if result.ok:
            return "200 OK", headers, json.dumps(result.payload).encode()
        failure = {"errorType": result.error_type, "errorMessage": result.error_message}
        return "200 OK", [*headers, ("X-Amz-Function-Error", "Unhandled")], json.dumps(failure).encode()

    def _run_async(self, timeline: Timeline | None) -> int:
        """Run the queued asynchronous invokes (in parallel, as Lambda would); a failed one goes to its destination."""
        with self._async_lock:
            queued, self._async = self._async, []
        if not queued:
            return 0
        with ThreadPoolExecutor(max_workers=len(queued)) as executor:
            results = list(executor.map(lambda call: self.invoke(*call), queued))
        for (function, event), result in zip(queued, results, strict=False):
            if not result.ok:
                self._on_failure(function, event, result)
            if timeline is not None:
                timeline.invoked.append(result)
            self.timeline.invoked.append(result)
        return len(queued)

    def function_of_job(self, job: str) -> str:
        try:
            return self.topology.job_functions()[job].name
        except KeyError:
            raise KeyError(f"no deployed function runs job {job!r}") from None

    # -- simulated time --------------------------------------------------------------------------

    def next_event_ms(self, until_ms: int) -> int:
        """The next instant (<= until) at which a rule fires or a message becomes visible."""
        candidates = [until_ms]
        for schedule in self._schedules.values():
            candidates.append(schedule.next_after(self._scheduled_until))
        visible = self.poller.next_visibility_ms()
        if visible is not None:
            candidates.append(max(visible, self.clock.now_ms()))
        return min(candidates)

    def advance_to(self, until_ms: int, faults: dict[str, list[dict[str, Any]]] | None = None) -> Timeline:
        """Run the system up to `until_ms`: every due tick fired, every queue drained, in time order."""
        timeline = Timeline()
        self.poller.faults.update(faults or {})
        self.pump(timeline)
        while True:
            target = self.next_event_ms(until_ms)
            self.clock.set(max(target, self.clock.now_ms()))
            self._fire_due(timeline)
            self.pump(timeline)
            if target >= until_ms:
                break
        return timeline

    def advance(self, **delta: float) -> Timeline:
        """`advance_to(now + delta)`; keywords as `FrozenClock.advance`."""
        step = int(
            delta.get("ms", 0)
            + delta.get("seconds", 0) * 1000
            + delta.get("minutes", 0) * 60_000
            + delta.get("hours", 0) * 3_600_000
        )
        return self.advance_to(self.clock.now_ms() + step)

    def pump(self, timeline: Timeline | None = None) -> PumpStats:
        """Run queued async invokes and deliver queue messages until neither has more (at the current instant)."""
        total = PumpStats()
        while True:
            self._run_async(timeline)
            stats = self.poller.pump()
            total.batches += stats.batches
            total.messages += stats.messages
            total.failed += stats.failed
            total.deliveries.extend(stats.deliveries)
            with self._async_lock:
                if not self._async:
                    break
        if timeline is not None:
            timeline.pumped.batches += total.batches
            timeline.pumped.messages += total.messages
            timeline.pumped.failed += total.failed
            timeline.pumped.deliveries.extend(total.deliveries)
        return total

    def rule_states(self) -> dict[str, str]:
        """Every rule's live state (one paginated ListRules: operators change it at any time)."""
        events = self.session.client("events")
        states: dict[str, str] = {}
        for page in events.get_paginator("list_rules").paginate():
            states.update({r["Name"]: r.get("State", "ENABLED") for r in page.get("Rules", [])})
        return states

    def rule_of_job(self, job: str) -> str:
        return self.topology.job_rules()[job].name

    def _fire_due(self, timeline: Timeline) -> None:
        now = self.clock.now_ms()
        due = [
            (name, at)
            for name, schedule in self._schedules.items()
            for at in schedule.fires_between(self._scheduled_until, now)
        ]
        self._scheduled_until = now
        if not due:
            return
        states = self.rule_states()
        fired: list[Tick] = []
        calls = []
        for name, at in sorted(due, key=lambda d: (d[1], d[0])):
            rule = self.topology.rules[name]
            enabled = states.get(name, rule.state) == "ENABLED"
            dropped = enabled and name in self.drop_next
            if dropped:
                self.drop_next.discard(name)
                enabled = False
            copies = 2 if enabled and name in self.duplicate_next else 1
            if enabled:
                self.duplicate_next.discard(name)
            faults = self.faults_next.pop(name, None) if enabled else None
            for arn, constant in rule.targets:
                function = self.topology.function_by_arn(arn)
                event = scheduled_event(rule, at) if constant is None else _json(constant)
                for copy in range(copies):
                    tick = Tick(
                        name, function.job, at, enabled, event_id=event.get("id"), duplicate=copy > 0, dropped=dropped
                    )
                    fired.append(tick)
                    if enabled:
                        calls.append((tick, function.name, event, faults if copy == 0 else None))
        if calls:
            with ThreadPoolExecutor(max_workers=len(calls)) as executor:
                results = list(executor.map(lambda c: self.invoke(c[1], c[2], c[3]), calls))
            for (tick, function_name, event, _), result in zip(calls, results, strict=True):
                tick.invocation = result
                if not result.ok:
                    self._on_failure(function_name, event, result)
        for tick in fired:
            timeline.ticks.append(tick)
            self.timeline.ticks.append(tick)
            if self.on_tick:
                self.on_tick(tick)

    def _on_failure(self, function: str, event: Any, result: Invocation) -> None:
        """A failed asynchronous invoke (retry attempts 0): its record goes to the on-failure destination."""
        info = self.topology.functions[function]
        if not info.on_failure_arn:
            return
        queue = self.topology.queue_by_arn(info.on_failure_arn)
        when = dt.datetime.fromtimestamp(self.clock.now_ms() / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        record = {
            "version": "1.0",
            "timestamp": when,
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": f"{info.arn}:$LATEST",
                "condition": "RetriesExhausted",
                "approximateInvokeCount": 1,
            },
            "requestPayload": event,
            "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
            "responsePayload": {"errorType": result.error_type, "errorMessage": result.error_message},
        }
        self.session.client("sqs").send_message(QueueUrl=queue.url, MessageBody=json.dumps(record))


def record_rule_creation(session: Any, topology: Topology, at_ms: int) -> None:
    """This deploy created every job's rule now: the ledger and the auditor expect no tick of theirs before it."""
    if not topology.leases_table:
        return
    toggles = RuleToggles(session.client("dynamodb"), topology.leases_table)
    for job in topology.job_rules():
        toggles.record_created(job, at_ms)


def _json(text: str) -> Any:
    return json.loads(text)
