"""The `make demo` scenario: a simulated day of the deployed system on the embedded runtime.

    00:00  every rule ticks on its schedule from here on (hourly jobs, 5-minute jobs, reclaim)
    01:00  EventBridge delivers clean_conversations' tick twice at once: one run, one skip
    02:00  clean_conversations fails (its table answers an error): the other jobs run on
    02:30  a generation batch of a few hundred items is submitted; the first worker isolate
           is SIGKILLed right after claiming its messages' items (mid-item); reclaim and the
           visibility timeout bring every item to completed or failed
    03:00  clean_dpop_proofs' isolate is SIGKILLed mid-run: its lease stays; EventBridge drops
           clean_conversations' tick (never delivered: the run ledger's `missed`)
    03:10  an operator's manual run meets the dead holder's live lease (skipped_leased)
    04:00  the lease has expired: the tick takes over with the next fence; the dead term is
           probed (renew, release, fenced write: all refused)
    H/2    every rule is disabled (no ticks) ... H/2 + H/8 re-enabled (ticks resume); the short
           day disables them 04:00 .. 06:00
    H      end: reports per job and per batch, then the the invariants of docs/guarantees.md on the tables

Everything runs in the deployed functions' isolates; the driver only moves the
clock, seeds data, arms faults and reads the tables.
"""

from __future__ import annotations

import pathlib
import random
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger

from jobfence.config import Settings, queue_env, table_env
from jobfence.errors import JobfenceError, LeaseLost
from jobfence.lease import Lease, LeaseStore
from jobfence.testing.sim.markers import marker_write
from jobfence.work import BatchRef, ItemInput, Producer
from jobfence_ops.commands.batches import batch
from jobfence_ops.commands.switches import set_rules
from jobfence_ops.local.daemon import kill_after_claims
from jobfence_ops.runtime.runtime import LocalRuntime, Tick
from jobfence_ops.targets import EmbeddedTarget
from jobs.commerce.conversations import ConversationStore
from jobs.commerce.dpop_proofs import DpopProofStore
from jobs.listings.catalog import TOLERATED_FAILURE_PCT
from jobs.listings.pipelines import GENERATION, PIPELINES
from jobs.listings.stores import build_store, build_wakeups
from ops.invariants import (
    Check,
    Observation,
    StaleTermProbe,
    check_batch_invariants,
    check_lease_invariants,
    check_logs,
    plain_items,
    scan_all,
)
from ops.seeds import seed_domains

HOUR = 3_600_000
MINUTE = 60_000
DUPLICATE_JOB = "clean_conversations"
FAILING_JOB = "clean_conversations"
DYING_JOB = "clean_dpop_proofs"
DROPPED_JOB = "clean_conversations"

# The invariants that need one phase's fault to have anything to judge (a skip, a failure, a taken-over term).
PHASE_OF_CHECK = {2: "_takeover", 3: "_duplicate", 4: "_failing"}


@dataclass(frozen=True)
class DayConfig:
    hours: float = 24
    batch_items: int = 200
    rejected_items: int = 3  # the generator refuses these: terminal failures, for retry-failed
    dpop_rows: int = 1500
    conversation_rows: int = 250
    disable_from: float | None = None  # hours: when every rule is disabled (default the middle of the day)
    disabled_for: float | None = None  # hours: for how long (default an eighth of the day)

    @property
    def disable_at(self) -> float:
        return self.disable_from if self.disable_from is not None else max(4.5, self.hours / 2)

    @property
    def enable_at(self) -> float:
        return self.disable_at + (self.disabled_for if self.disabled_for is not None else max(0.5, self.hours / 8))


SHORT = DayConfig(
    hours=6.5, batch_items=40, rejected_items=2, dpop_rows=300, conversation_rows=60, disable_from=4, disabled_for=2
)


@dataclass
class BatchSummary:
    ref: str
    items: int
    by_status: dict[str, int]
    batch_row: dict[str, Any]


@dataclass
class DayReport:
    observations: list[Observation]
    checks: list[Check]
    runs: list[dict[str, Any]]
    batches: list[BatchSummary]
    killed_workers: int
    log_dir: pathlib.Path
    events: list[str] = field(default_factory=list)
    deliveries: Counter = field(default_factory=Counter)  # SQS batches delivered, by invocation status
    start_ms: int = 0  # the day's 00:00 (simulated)
    end_ms: int = 0

    def summary_totals(self) -> dict[str, dict[str, float]]:
        """Per job, the numeric summary counts of its runs added up (deleted, requeued, ...)."""
        out: dict[str, dict[str, float]] = {}
        for row in self.runs:
            for key, value in (row.get("summary") or {}).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key != "batches":
                    totals = out.setdefault(row["job"], {})
                    totals[key] = totals.get(key, 0) + value
        return out

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def runs_by_outcome(self) -> dict[str, Counter]:
        out: dict[str, Counter] = {}
        for row in self.runs:
            out.setdefault(row["job"], Counter())[row["outcome"]] += 1
        return out


class DayScenario:
    """Drives one `LocalRuntime` through the day; `on_event(text)` narrates, `on_tick` sees every tick."""

    def __init__(
        self,
        runtime: LocalRuntime,
        config: DayConfig = DayConfig(),
        seed: int = 7,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.rt = runtime
        self.config = config
        self.rng = random.Random(seed)
        self.seed = seed
        self.marker = f"PAYLOAD-MARKER-{seed}-{uuid.UUID(int=self.rng.getrandbits(128)).hex[:8]}"
        self.on_event = on_event or (lambda text: None)
        self.observations: list[Observation] = []
        self.probes: list[StaleTermProbe] = []
        self.events: list[str] = []
        self.batch_refs: list[Any] = []
        self._dead: dict[str, Any] = {}  # the killed isolate's lease item, read at 03:00
        self._reached: set[str] = set()  # the phases run (a shorter day runs the first ones)
        self.killed_workers = 0
        self.deliveries: Counter = Counter()
        runtime.poller.on_delivery = self._delivered
        now = runtime.clock.now_ms()
        self._start = -(-now // HOUR) * HOUR  # the next full hour: the phases are set on hourly ticks
        top = runtime.topology
        self.client = runtime.session.client("dynamodb")
        if top.leases_table is None or top.runs_table is None:
            raise RuntimeError("the deployed stack names no leases or runs table: the day needs both")
        self.leases_table: str = top.leases_table
        self.runs_table: str = top.runs_table
        self.lease_store = LeaseStore(self.client, self.leases_table, runtime.clock)

    @property
    def start_ms(self) -> int:
        """The day's 00:00 (simulated): the next full hour after the runtime's clock at construction."""
        return self._start

    # -- narration and observation --------------------------------------------------------------

    def _say(self, text: str) -> None:
        stamp = self._stamp(self.rt.clock.now_ms())
        line = f"{stamp}  {text}"
        self.events.append(line)
        self.on_event(line)

    def _stamp(self, ms: int) -> str:
        minutes = (ms - self._start) // MINUTE
        return f"{minutes // 60:02d}:{minutes % 60:02d}"

    def _observe(self, tick: Tick, label: str | None = None, group: str | None = None) -> Observation | None:
        inv = tick.invocation
        if inv is None or tick.job is None:
            return None
        payload = inv.payload if isinstance(inv.payload, dict) else {}
        obs = Observation(
            at_ms=tick.at_ms if inv.started_sim_ms == 0 else inv.started_sim_ms,
            job=tick.job,
            label=label or ("duplicate" if tick.duplicate else "tick"),
            outcome=payload.get("outcome") if inv.ok else ("failed" if inv.status == "error" else None),
            run_id=payload.get("run_id"),
            error=f"{inv.error_type}: {inv.error_message}" if inv.error_type else None,
            raised=inv.status == "error",
            died=inv.status == "died",
            writes=inv.writes("dynamodb"),
            summary=payload.get("summary") or {},
            group=group,
        )
        self.observations.append(obs)
        return obs

    def _delivered(self, delivery: Any) -> None:
        status = delivery.invocation.status
        self.deliveries[status] += 1
        if status == "died":
            self.killed_workers += 1
            self._say(f"a {delivery.function} isolate died mid-batch ({delivery.messages} messages stay in flight)")

    def _lease_item(self, job: str) -> dict[str, Any]:
        item = self.client.get_item(TableName=self.leases_table, Key={"job": {"S": job}}, ConsistentRead=True)
        return plain_items([item.get("Item", {})])[0]

    def _advance_to(self, hours: float, faults_note: str | None = None) -> list[Tick]:
        target = self._start + int(hours * HOUR)
        if target <= self.rt.clock.now_ms():
            return []
        timeline = self.rt.advance_to(target)
        return timeline.ticks

    def _collect(self, ticks: list[Tick]) -> None:
        duplicate_events = Counter(t.event_id for t in ticks if t.fired)
        for tick in ticks:
            group = f"{tick.job}@{tick.event_id}" if duplicate_events[tick.event_id] > 1 else None
            obs = self._observe(tick, group=group)
            if obs is not None and obs.outcome == "failed" and obs.lease_after is None:
                obs.lease_after = self._lease_item(obs.job)

    # -- the day ---------------------------------------------------------------------------------

    def run(self) -> DayReport:
        self.rt.advance_to(self._start)
        self._seed_retention()
        seeded = seed_domains(self.rt)
        self._say(
            f"seeded retention rows and {', '.join(f'{k}={v}' for k, v in seeded.items())}; every rule ticks on its schedule from now on"
        )
        # each phase at its hour, as long as the day lasts that long (`--hours N` simulates N hours, not more)
        phases = [
            (1, self._duplicate),
            (2, self._failing),
            (2.5, self._batch),
            (3, self._kill_and_drop),
            (3 + 10 / 60, self._manual),
            (4, self._takeover),
        ]
        if self.config.enable_at <= self.config.hours:
            phases += [
                (self.config.disable_at, lambda: self._set_rules(False)),
                (self.config.enable_at, lambda: self._set_rules(True)),
            ]
        for at, phase in sorted(phases, key=lambda p: p[0]):
            if at > self.config.hours:
                self._say(
                    f"the day ends before {self._stamp(self._start + int(at * HOUR))}: the phases from there on are not run"
                )
                break
            phase()
            self._reached.add(phase.__name__)
        self._collect(self._advance_to(self.config.hours))
        self._say("end of the simulated day")
        return self._report()

    # -- the phases, each at its hour ------------------------------------------------------------

    def _duplicate(self) -> None:
        rt = self.rt
        self._collect(self._advance_to(0.99))
        rt.duplicate_next.add(rt.rule_of_job(DUPLICATE_JOB))
        self._collect(self._advance_to(1))
        self._say(f"01:00 tick of {DUPLICATE_JOB} delivered twice at once")

    def _failing(self) -> None:
        rt = self.rt
        self._collect(self._advance_to(1.99))
        conversations = rt.topology.job_functions()[FAILING_JOB].environment[table_env("conversations")]
        rt.faults_next[rt.rule_of_job(FAILING_JOB)] = [
            {"operation": "Query", "contains": conversations, "action": "raise"}
        ]
        ticks = self._advance_to(2)
        self._collect(ticks)
        self._say(
            f"02:00 {FAILING_JOB}'s table answered an error; {sum(1 for t in ticks if t.fired and t.invocation and t.invocation.ok)} other tick(s) ran on"
        )

    def _batch(self) -> None:
        self._collect(self._advance_to(2.5))
        self._submit_batch()

    def _kill_and_drop(self) -> None:
        rt = self.rt
        proofs = rt.topology.job_functions()[DYING_JOB].environment[table_env("dpop_proofs")]
        self._collect(self._advance_to(2.99))
        rt.faults_next[rt.rule_of_job(DYING_JOB)] = [{"operation": "Query", "contains": proofs, "action": "kill"}]
        rt.drop_next.add(rt.rule_of_job(DROPPED_JOB))
        self._collect(self._advance_to(3))
        self._dead = self._lease_item(DYING_JOB)
        self._say(
            f"03:00 {DYING_JOB}'s isolate was killed mid-run; its lease (fence {self._dead.get('fence')}) stays; "
            f"EventBridge dropped {DROPPED_JOB}'s tick"
        )

    def _manual(self) -> None:
        rt = self.rt
        self._collect(self._advance_to(3 + 10 / 60))
        manual = rt.invoke(rt.function_of_job(DYING_JOB), {"trigger": "manual", "requested_by": "demo-operator"})
        self._observe(Tick(rt.rule_of_job(DYING_JOB), DYING_JOB, rt.clock.now_ms(), True, manual), label="manual")
        self._say(f"03:10 manual run of {DYING_JOB}: {manual.payload.get('outcome') if manual.ok else manual.status}")

    def _takeover(self) -> None:
        self._collect(self._advance_to(4))
        dead = self._dead
        if dead.get("lease_id"):
            self.probes.append(self._probe(dead))
            self._say(
                f"04:00 {DYING_JOB} taken over; the dead term's renew/release/fenced write: "
                f"{self.probes[-1].renew}/{self.probes[-1].release}/{self.probes[-1].fenced_write}"
            )

    def _probe(self, dead: dict[str, Any]) -> StaleTermProbe:
        lease = Lease(
            job=dead["job"],
            holder=dead["holder"],
            lease_id=dead["lease_id"],
            fence=int(dead["fence"]),
            acquired_at=int(dead["acquired_at"]),
            renewed_at=int(dead["renewed_at"]),
            expires_at=int(dead["expires_at"]),
            ttl_ms=int(dead["ttl_ms"]),
        )
        conversations = self.rt.topology.job_functions()[FAILING_JOB].environment[table_env("conversations")]
        return probe_term(self.lease_store, self.client, self.leases_table, conversations, lease, lease.expires_at)

    def _set_rules(self, enabled: bool) -> None:
        self._collect(self._advance_to(self.config.disable_at if not enabled else self.config.enable_at))
        changes = set_rules(EmbeddedTarget(self.rt), enabled)
        self._say(f"operator {'enabled' if enabled else 'disabled'} {len(changes)} rule(s)")

    # -- data ------------------------------------------------------------------------------------

    def _seed_retention(self) -> None:
        jobs = self.rt.topology.job_functions()
        start, span = self._start, int(self.config.hours * HOUR)

        def proofs():
            for _ in range(self.config.dpop_rows):
                expires = start + self.rng.randint(-HOUR, span + HOUR)
                yield uuid.UUID(int=self.rng.getrandbits(128)).hex, expires

        DpopProofStore(jobs["clean_dpop_proofs"].environment[table_env("dpop_proofs")], self.rt.clock).load(proofs())
        conversations = ConversationStore(
            jobs["clean_conversations"].environment[table_env("conversations")], self.rt.clock
        )
        conversations.load(
            (f"c-{i:05d}", f"a-{i % 17}", start + self.rng.randint(-HOUR, span + HOUR))
            for i in range(self.config.conversation_rows)
        )

    def work_function(self) -> Any:
        """The function an SQS event source feeds from the generation queue, when batches are deployed."""
        top = self.rt.topology
        for mapping in top.mappings:
            function = top.function_by_arn(mapping.function_arn)
            queue = top.queue_by_arn(mapping.queue_arn)
            for key, value in function.environment.items():
                if key == queue_env(PIPELINES[GENERATION].queue) and value.rstrip("/").endswith("/" + queue.name):
                    return function
        return None

    def _submit_batch(self) -> None:
        worker = self.work_function()
        if worker is None or self.config.batch_items <= 0:
            self._say("no generation worker is deployed: the batch phase is skipped")
            return
        settings = Settings.from_environ(worker.environment)
        store = build_store(settings, self.rt.clock)
        wakeups = build_wakeups(settings, self.rt.session.client("sqs"))
        producer = Producer(store, wakeups, Logger(service="demo", level="ERROR"), TOLERATED_FAILURE_PCT)
        store.quota.grant(ref_tenant := "tenant-a", self.config.batch_items + 50)
        rejected = set(self.rng.sample(range(self.config.batch_items), self.config.rejected_items))
        items = [
            ItemInput(
                f"item-{i:04d}", {"title": f"listing {i} {self.marker}", **({"reject": True} if i in rejected else {})}
            )
            for i in range(self.config.batch_items)
        ]
        ref = BatchRef(ref_tenant, f"gen-{self.seed}")
        producer.submit(ref, GENERATION, items, created_by="demo")
        self.batch_refs.append(ref)
        self.rt.poller.faults[worker.name] = kill_after_claims(1)
        self._say(f"submitted {ref} ({len(items)} items); the first worker isolate will be killed mid-item")

    # -- report ----------------------------------------------------------------------------------

    def _report(self) -> DayReport:
        runs = scan_all(self.client, self.runs_table)
        leases = scan_all(self.client, self.leases_table)
        checks = check_lease_invariants(self.observations, runs, leases, self.probes, self.rt.clock.now_ms())
        # a day shorter than the scenario never made the fault some invariants judge: those are not reported
        unjudged = {number for number, phase in PHASE_OF_CHECK.items() if phase not in self._reached}
        checks = [c for c in checks if c.number not in unjudged]
        batches = []
        if self.batch_refs:
            worker = self.work_function()
            stubs = {name: started.stub for name, started in self.rt.providers.stubs.items() if name == "generator"}
            checks += check_batch_invariants(self.rt, worker, self.batch_refs, stubs)
            for ref in self.batch_refs:
                report = batch(EmbeddedTarget(self.rt), ref)
                batches.append(
                    BatchSummary(
                        str(ref),
                        len(report.items),
                        report.counts(),
                        {
                            "status": report.batch.status.value,
                            "completed": report.batch.completed,
                            "failed": report.batch.failed,
                        },
                    )
                )
        checks.append(check_logs(self.rt.log_dir, [self.marker], list(self._secret_values())))
        return DayReport(
            self.observations,
            checks,
            runs,
            batches,
            self.killed_workers,
            self.rt.log_dir,
            self.events,
            self.deliveries,
            self._start,
            self._start + int(self.config.hours * HOUR),
        )

    def _secret_values(self):
        sm = self.rt.session.client("secretsmanager")
        for name in self.rt.providers.secrets.values():
            yield sm.get_secret_value(SecretId=name)["SecretString"]


def probe_term(
    store: LeaseStore, client: Any, leases_table: str, write_table: str, lease: Any, dead_expires_at: int
) -> StaleTermProbe:
    """A holder whose term was taken over tries renew, release and a fenced write; record what it got."""

    def lease_item() -> dict[str, Any]:
        item = client.get_item(TableName=leases_table, Key={"job": {"S": lease.job}}, ConsistentRead=True)
        return plain_items([item.get("Item", {})])[0]

    before = lease_item()
    outcomes = {}
    key = {"conversation_id": {"S": "stale-holder-write"}}
    write = marker_write(write_table, conversation_id="stale-holder-write")

    def fenced_write() -> None:
        with store.transaction(lease) as tx:
            tx.add(write)

    for action, call in (
        ("renew", lambda: store.renew(lease)),
        ("release", lambda: store.release(lease)),
        ("fenced_write", fenced_write),
    ):
        try:
            call()
            outcomes[action] = "accepted"
        except LeaseLost:
            outcomes[action] = "LeaseLost"
        except JobfenceError as exc:
            outcomes[action] = type(exc).__name__
    after = lease_item()
    landed = client.get_item(TableName=write_table, Key=key, ConsistentRead=True)
    return StaleTermProbe(
        write_landed="Item" in landed,
        job=lease.job,
        fence=lease.fence,
        lease_before={**before, "dead_expires_at": dead_expires_at},
        lease_after=after,
        **outcomes,
    )
