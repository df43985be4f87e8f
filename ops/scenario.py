"""The lease scenario: both retention jobs over simulated hours on moto's server.

Each tick composes the scheduled runner exactly as `handlers.scheduled` does
(settings from an environment, the catalog's job, lease and run stores) but
with a `FrozenClock`, so six hours pass in seconds. The scenario injects the
faults DESIGN §4 talks about and then judges invariants 1-4 on the stored rows:

    00:00  both jobs tick
    01:00  clean_dpop_proofs fired twice at once (two threads); clean_conversations ticks
    02:00  clean_conversations fails (injected); clean_dpop_proofs ticks
    03:00  clean_dpop_proofs' holder dies after its first batch: no release; its row
           stays `running` until the next run records it `died`
    03:10  a retry tick of clean_dpop_proofs meets the dead holder's live lease
    04:00  the lease has expired: the tick takes over (fence + 1); the dead holder
           then tries to renew, release and fenced-write, and is refused
    04:02  a duplicate tick of both jobs (inside the interval) writes nothing
    05:00, 06:00  both jobs tick
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from aws_lambda_powertools import Logger, Metrics

from jobfence.clock import FrozenClock
from jobfence.config import ENV_JOB_NAME, ENV_LEASES_TABLE, ENV_RUNS_TABLE, METRICS_NAMESPACE, ScheduledSettings, table_env
from jobfence.errors import JobfenceError, LeaseLost
from jobfence.lease import LeaseStore
from jobfence.runs import RunStore, safe_error
from jobfence.scheduled import JobDeps, RunContext, ScheduledRunner
from jobfence.triggers import Trigger
from jobs.catalog import CATALOG
from ops import tables
from ops.invariants import Check, Observation, StaleTermProbe, check_lease_invariants, plain_items, scan_all

HOUR_MS = 3_600_000
MINUTE_MS = 60_000
JOBS = ("clean_dpop_proofs", "clean_conversations")
WRITE_OPERATIONS = frozenset(
    {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems", "CreateTable", "DeleteTable"}
)


class IsolateDeath(BaseException):
    """The Lambda isolate vanished mid-run. A BaseException, so no `except Exception` in
    the runner sees it: exactly like a killed process, nothing is released or recorded."""


class InjectedFailure(RuntimeError):
    """A job failure the scenario injects on purpose."""


def create_catalog_tables(client: Any, suffix: str) -> dict[str, str]:
    """Create every catalog table (keys and indexes as the catalog says); logical -> physical."""
    return tables.create_catalog_tables(client, suffix=suffix)


class WriteCounter:
    """Counts DynamoDB writes a client got accepted (botocore event hook, not the code path).

    A conditional write that DynamoDB refuses is a request but changes nothing,
    so it is counted apart: "a skipped tick writes nothing" is about accepted writes.
    """

    def __init__(self, client: Any) -> None:
        self.writes = 0
        self.refused = 0
        client.meta.events.register("after-call.dynamodb.*", self._count)

    def _count(self, model, http_response=None, **_: Any) -> None:
        if model.name not in WRITE_OPERATIONS:
            return
        if http_response is not None and http_response.status_code < 300:
            self.writes += 1
        else:
            self.refused += 1


@dataclass
class Fleet:
    """The two jobs composed like their Lambdas, sharing one frozen clock and the emulator."""

    session: Any
    tables: dict[str, str]
    clock: FrozenClock
    logger: Logger = field(default_factory=lambda: Logger(service="demo", logger_handler=logging.NullHandler()))
    _jobs: dict[str, Callable] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.client = self.session.client("dynamodb")
        for name in JOBS:
            spec = CATALOG.job(name)
            deps = JobDeps(self.settings(name), spec, self.clock, self.session, self.client, self.logger)
            self._jobs[name] = spec.load()(deps)

    def settings(self, job: str) -> ScheduledSettings:
        spec = CATALOG.job(job)
        env = {ENV_JOB_NAME: job, ENV_LEASES_TABLE: self.tables["leases"], ENV_RUNS_TABLE: self.tables["runs"]}
        env.update({table_env(t): self.tables[t] for t in spec.tables})
        return ScheduledSettings.from_environ(env)

    def leases(self, client: Any | None = None) -> LeaseStore:
        return LeaseStore(client or self.client, self.tables["leases"], self.clock)

    def lease_item(self, job: str) -> dict[str, Any]:
        item = self.client.get_item(TableName=self.tables["leases"], Key={"job": {"S": job}}, ConsistentRead=True)
        return plain_items([item.get("Item", {})])[0]

    def invoke(self, job: str, label: str, wrap: Callable | None = None, group: str | None = None) -> Observation:
        """One invocation of a job's function, with its own client so its writes can be counted."""
        spec = CATALOG.job(job)
        client = self.session.fresh_client("dynamodb")
        counter = WriteCounter(client)
        metrics = Metrics(namespace=METRICS_NAMESPACE, service=spec.subsystem)
        runner = ScheduledRunner(self.leases(client), RunStore(client, self.tables["runs"]), self.clock, self.logger, metrics)
        body = self._jobs[job] if wrap is None else wrap(self._jobs[job])
        now = self.clock.now_ms()
        obs = Observation(at_ms=now, job=job, label=label, outcome=None, group=group)
        try:
            result = runner.run(spec, body, Trigger(kind="scheduled", scheduled_at=now))
        except IsolateDeath:
            obs.died = True
        except Exception as exc:
            obs.raised, obs.error = True, safe_error(exc)
            obs.outcome = "failed"
            obs.lease_after = self.lease_item(job)
        else:
            obs.outcome, obs.run_id, obs.summary = result.outcome.value, result.run_id, result.summary
        finally:
            metrics.clear_metrics()
        obs.writes, obs.refused_writes = counter.writes, counter.refused
        return obs


def die_after_first_batch(captured: dict[str, Any]) -> Callable:
    """Wrap a job so its isolate dies once the first batch is done (its term is captured)."""

    def wrap(job: Callable) -> Callable:
        def dying(ctx: RunContext) -> Iterator[dict[str, Any]]:
            batches = job(ctx)
            yield next(batches)
            captured["lease"] = ctx.lease
            raise IsolateDeath()

        return dying

    return wrap


def fail_in_first_batch(job: Callable) -> Callable:
    def failing(ctx: RunContext) -> Iterator[dict[str, Any]]:
        raise InjectedFailure("injected failure: the store timed out")
        yield {}  # pragma: no cover - makes this a generator

    return failing


@dataclass
class ScenarioReport:
    observations: list[Observation]
    checks: list[Check]
    runs: list[dict[str, Any]]
    seeded: dict[str, int]
    remaining_expired: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def seed(fleet: Fleet, rng: random.Random, hours: int, scale: int = 1) -> dict[str, int]:
    """Expired and live rows for both jobs: some expired at the start, more expiring each hour."""
    from jobs.commerce.conversations import ConversationStore
    from jobs.commerce.dpop_proofs import DpopProofStore
    from jobfence.clock import ttl_seconds
    from jobfence.expiry import expiry_shard

    start = fleet.clock.now_ms()
    proofs = DpopProofStore(fleet.tables["dpop_proofs"], fleet.clock).model
    conversations = ConversationStore(fleet.tables["conversations"], fleet.clock).model
    counts = {"dpop_proofs": 0, "conversations": 0}
    with proofs.batch_write() as batch:
        for i in range(1200 * scale + 400):
            # expiries spread from an hour ago to past the end, so each tick finds new dead rows
            expires = start + rng.randint(-HOUR_MS, (hours + 2) * HOUR_MS)
            jti = uuid.UUID(int=rng.getrandbits(128)).hex
            batch.save(proofs(jti, expires_at=expires, expiry_shard=expiry_shard(jti), ttl=ttl_seconds(expires)))
            counts["dpop_proofs"] += 1
    with conversations.batch_write() as batch:
        for i in range(150 * scale + 50):
            expires = start + rng.randint(-HOUR_MS, (hours + 2) * HOUR_MS)
            cid = f"c-{i:05d}"
            batch.save(
                conversations(cid, account_id=f"a-{i % 17}", expires_at=expires, expiry_shard=expiry_shard(cid), ttl=ttl_seconds(expires))
            )
            counts["conversations"] += 1
    return counts


def run_scenario(
    session: Any, *, seed_value: int = 7, scale: int = 1, on_tick: Callable[[str, list[Observation]], None] | None = None) -> ScenarioReport:
    """Drive both jobs over six simulated hours and judge invariants 1-4."""
    rng = random.Random(seed_value)
    clock = FrozenClock()
    start = clock.now_ms()
    tables = create_catalog_tables(session.client("dynamodb"), uuid.UUID(int=rng.getrandbits(128)).hex[:8])
    fleet = Fleet(session, tables, clock)
    seeded = seed(fleet, rng, hours=6, scale=scale)
    observations: list[Observation] = []
    probes: list[StaleTermProbe] = []
    dead: dict[str, Any] = {}

    def at(offset_ms: int) -> None:
        clock.set(start + offset_ms)

    def report(title: str, batch: list[Observation]) -> None:
        observations.extend(batch)
        if on_tick:
            on_tick(title, batch)

    def tick(title: str, plan: dict[str, Callable | None]) -> None:
        report(title, [fleet.invoke(job, "tick", wrap) for job, wrap in plan.items()])

    for hour in range(0, 7):
        at(hour * HOUR_MS)
        stamp = f"{hour:02d}:00"
        if hour == 1:
            report(stamp, concurrent_pair(fleet, "clean_dpop_proofs"))
            tick(stamp, {"clean_conversations": None})
        elif hour == 2:
            tick(stamp, {"clean_dpop_proofs": None, "clean_conversations": fail_in_first_batch})
        elif hour == 3:
            tick(stamp, {"clean_dpop_proofs": die_after_first_batch(dead), "clean_conversations": None})
            dead["expires_at"] = dead["lease"].expires_at
            at(3 * HOUR_MS + 10 * MINUTE_MS)
            report("03:10", [fleet.invoke("clean_dpop_proofs", "retry")])
        elif hour == 4:
            tick(stamp, {"clean_dpop_proofs": None, "clean_conversations": None})
            probes.append(probe_stale_term(fleet, dead["lease"], dead["expires_at"]))
            at(4 * HOUR_MS + 2 * MINUTE_MS)
            report("04:02", duplicate_tick(fleet))
        else:
            tick(stamp, {job: None for job in JOBS})

    client = session.client("dynamodb")
    runs = scan_all(client, tables["runs"])
    leases = scan_all(client, tables["leases"])
    checks = check_lease_invariants(observations, runs, leases, probes, clock.now_ms())
    remaining = {
        name: sum(1 for row in scan_all(client, tables[name]) if int(row["expires_at"]) <= clock.now_ms())
        for name in ("dpop_proofs", "conversations")
    }
    return ScenarioReport(observations, checks, runs, seeded, remaining)


def concurrent_pair(fleet: Fleet, job: str) -> list[Observation]:
    """Two invocations of one job at the same instant, on two real threads."""
    barrier = threading.Barrier(2)
    out: list[Observation] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait()
        obs = fleet.invoke(job, "concurrent", group=f"{job}@{fleet.clock.now_ms()}")
        with lock:
            out.append(obs)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


def duplicate_tick(fleet: Fleet) -> list[Observation]:
    """Both jobs ticked again inside their interval: judged by a snapshot of every table."""
    client = fleet.client
    before = {name: _sorted(scan_all(client, physical)) for name, physical in fleet.tables.items()}
    batch = [fleet.invoke(job, "duplicate") for job in JOBS]
    after = {name: _sorted(scan_all(client, physical)) for name, physical in fleet.tables.items()}
    for obs in batch:
        obs.tables_changed = before != after
    return batch


def _sorted(items: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(sorted(i.items())) for i in items)


def probe_stale_term(fleet: Fleet, lease: Any, dead_expires_at: int) -> StaleTermProbe:
    """The dead holder comes back after the takeover and tries to act on its old term."""
    return probe_term(fleet.leases(), fleet.client, fleet.tables["leases"], fleet.tables["conversations"], lease, dead_expires_at)


def probe_term(store: LeaseStore, client: Any, leases_table: str, write_table: str, lease: Any, dead_expires_at: int) -> StaleTermProbe:
    """A holder whose term was taken over tries renew, release and a fenced write; record what it got."""

    def lease_item() -> dict[str, Any]:
        item = client.get_item(TableName=leases_table, Key={"job": {"S": lease.job}}, ConsistentRead=True)
        return plain_items([item.get("Item", {})])[0]

    before = lease_item()
    outcomes = {}
    key = {"conversation_id": {"S": "stale-holder-write"}}
    write = {"Put": {"TableName": write_table, "Item": {**key, "account_id": {"S": "x"}, "expires_at": {"N": "0"}}}}
    for action, call in (
        ("renew", lambda: store.renew(lease)),
        ("release", lambda: store.release(lease)),
        ("fenced_write", lambda: store.fenced_write(lease, [write])),
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
