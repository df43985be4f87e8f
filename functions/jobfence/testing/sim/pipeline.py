"""A per-item pipeline under faults: producer, workers, its reclaim job, an operator; the work invariants.

What `jobfence.testing.simulate(registry, reclaim_job, pipelines=...)` runs, for any catalog: the
pipelines (queue -> `WorkerPipeline`, as `worker_handler` takes them) of the queues the reclaim job
re-drives, their work tables found in the catalog by their keys (the batches table has the open
index, the items table is sorted on `item_id`, the quota table is the third table of the queues'), and the
reclaim job built by its own factory. An operator's families (this repository's `ops.sim.families.batches`)
extend it with their own builders.

Actors (one faulty hour of simulated time):
    producer      submits one batch per tenant; the client repeats the call later (the
                  producer contract), once during the hour and once in the fault-free phase
    workers       two per pipeline: receive up to 3 wake-ups, `Worker.process` them (the item step is
                  the simulated provider: idempotent per key, it may fail before or after acting, or
                  time out), acknowledge what it says
    reclaim       the reclaim job under its lease, four ticks at random instants (the real runner)
    operator      `retry-failed` on one batch at a random time
    canceller     the operator's cancel of one batch at a random time, sometimes asked again
                  (`jobfence.testing.sim.cancels`)
Two tenants use the same batch and item ids, so a forged wake-up names a real
item of the other tenant. One tenant's quota is often short, so claims run out of it;
half the runs have the provider refuse one item for good.

Checked on every applied write:
    5   an item never goes over the attempts cap; automation never changes a terminal item
    8   an item row sits under its own tenant; a quota change moves with items of that tenant
    11  a finalized batch never changes again (except the operator's reopen); a batch is
        finalized only when its rows number `total`, none live, counters equal the recount
    14  the failure threshold (the pipeline's tolerated percentage, where one is given): a batch
        finalizes `failed_threshold` exactly when its rows show more failures than it tolerates;
        no item of a `failed_threshold` batch is claimed or completed until retry-failed reopens it
    17  the operator's cancel (`jobfence.testing.sim.cancels.CancelWatch`): no item completes unless it
        was running when the cancel was recorded; a cancelled batch finalizes `cancelled`
    16  in true time: the reclaimer takes a running item from its worker only once the item's last
        applied write is at least item-stale old (a breach whose last write came later than the
        request-age budget after it was built is the fault model's limit, not a violation)
Checked at the end (after at most `SWEEPS` fault-free sweeps: reclaim, then drain):
    5-9 through `jobfence.testing.sim.batch_checks.check_batches`, 9 also per item (one
    idempotency key per item), 10 no payload in any log line, 13 no error unclassified;
    the reclaim ticks' terms through `jobfence.testing.sim.terms.TermWatch` (1-4, 12)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jobfence.clock import REQUEST_AGE_BUDGET_MS
from jobfence.config import ScheduledSettings, Settings, config_env, queue_env, table_env
from jobfence.errors import JobfenceError
from jobfence.indexes import OPEN_INDEX_SPEC
from jobfence.registry import JobSpec, Registry
from jobfence.scheduled import JobDeps, load_job
from jobfence.testing.sim.batch_checks import check_batches
from jobfence.testing.sim.cancels import CANCELLER, CancelWatch
from jobfence.testing.sim.faults import (
    AWS_CALL_FAULTS,
    DELIVERY_FAULTS,
    PAUSES,
    PROVIDER_FAULTS,
    TIME_FAULTS,
    FaultKind,
)
from jobfence.testing.sim.kernel import START_MS, Actor, SkewedClock
from jobfence.testing.sim.queue import SimProvider, SimQueues
from jobfence.testing.sim.scheduled import LambdaContext
from jobfence.testing.sim.terms import TermWatch
from jobfence.testing.sim.world import World, clean_tick_after
from jobfence.triggers import Trigger
from jobfence.work import BatchOperations, BatchRef, ItemInput, Producer, TenantGate, Worker, WorkStore
from jobfence.work.pipeline import WorkerPipeline

HOUR_MS = 3_600_000
TENANTS = ("t1", "t2")
SWEEPS = 8
ITEMS_SORT_KEY = ("item_id", "S")  # an items table (`jobfence.work.items`): one row per item, sorted on its id
RECLAIM_TICKS = 4
TERMINAL = ("completed", "failed", "cancelled")
LIVE = ("pending", "running")
FINAL = ("finalized", "failed_threshold", "cancelled")  # a batch status nothing but retry-failed changes
OPERATOR = "operator"
EARLY_MS = 120_000  # half the cancels come while the batches are being submitted and worked

Pipelines = Mapping[str, WorkerPipeline] | Callable[[str], WorkerPipeline]
"""What `worker_handler` takes: a mapping, or a function, from a catalog queue's name to its `WorkerPipeline`."""


@dataclass(frozen=True)
class PlannedBatch:
    ref: BatchRef
    kind: str
    items: tuple[ItemInput, ...]


@dataclass(frozen=True)
class WorkTables:
    """The logical names of a pipeline's three work tables in its catalog."""

    batches: str
    items: str
    quota: str

    @classmethod
    def of(cls, registry: Registry, queues: tuple[str, ...]) -> WorkTables:
        """Found among the queues' tables by their indexes: one set for every queue (a `ValueError` otherwise)."""
        names = {name for queue in queues for name in registry.queue(queue).tables}
        batches = sorted(n for n in names if OPEN_INDEX_SPEC in registry.tables[n].indexes)
        items = sorted(n for n in names - {*batches} if registry.tables[n].sort_key == ITEMS_SORT_KEY)
        quota = sorted(n for n in names - {*batches, *items} if registry.tables[n].sort_key is None)
        if len(batches) != 1 or len(items) != 1 or len(quota) != 1:
            raise ValueError(
                f"the queues {list(queues)} must share one set of work tables (a batches table with the open "
                f"index, an items table sorted on item_id, a quota table); their tables: {sorted(names)}"
            )
        return cls(batches[0], items[0], quota[0])


class PipelineScenario:
    """The pipelines of the queues `reclaim` re-drives, under faults; a subclass may change how parts are built."""

    name = "pipeline"
    kinds = (
        *AWS_CALL_FAULTS,
        *TIME_FAULTS,
        *PAUSES,
        FaultKind.CLOCK_SKEW,
        *DELIVERY_FAULTS,
        *PROVIDER_FAULTS,
        FaultKind.JOB_FAILURE,
    )

    def __init__(
        self,
        registry: Registry,
        reclaim: str,
        pipelines: Pipelines,
        *,
        tolerated_failure_pct: Mapping[str, float | None] | None = None,
        rejection: Callable[[str], Exception] | None = None,
        invariant: Callable[[Any], None] | None = None,
    ) -> None:
        """`tolerated_failure_pct`: per kind, what the producer is given (the failure threshold, invariant 14).
        `rejection(message)`: the error the simulated provider raises for an input it refuses for good
        (the app's own, which its step turns into `PermanentFailure`; default `PermanentFailure`).
        `invariant(snapshot)`: the author's own check of the tables once every batch is final."""
        self.registry = registry
        self.reclaim: JobSpec = registry.job(reclaim)
        if not self.reclaim.queues:
            raise ValueError(f"{reclaim!r} re-drives no queue: a pipeline's reclaim job names its queues")
        self.work = WorkTables.of(registry, self.reclaim.queues)
        self.pipelines: dict[str, WorkerPipeline] = {}
        self.queue_of: dict[str, str] = {}  # kind -> its queue
        for queue in self.reclaim.queues:
            pipeline = pipelines[queue] if isinstance(pipelines, Mapping) else pipelines(queue)
            self.pipelines[pipeline.kind] = pipeline
            self.queue_of[pipeline.kind] = queue
        self.kinds_of_batches: tuple[str, ...] = tuple(self.pipelines)
        tables = {self.work.batches, self.work.items, self.work.quota, *self.reclaim.tables}
        self.tables: tuple[str, ...] = (*sorted(tables - {"leases", "runs"}), "leases", "runs")
        self.tolerated_failure_pct = dict(tolerated_failure_pct or {})
        self.rejection = rejection
        self.invariant = invariant

    @property
    def first(self) -> WorkerPipeline:
        return self.pipelines[self.kinds_of_batches[0]]

    def pause_ms(self, world: World, kind: FaultKind) -> int:
        timing = self.first.timing
        base = {
            FaultKind.PAUSE_TTL: self.reclaim.lease_ttl_s,
            FaultKind.PAUSE_ITEM_STALE: timing.item_stale_s,
            FaultKind.PAUSE_BATCH_STALE: timing.batch_stale_s,
        }[kind]
        assert base is not None  # the registry fills in every job's lease TTL
        return base * 1000 + world.rng.randrange(1, 300_000)

    # -- builders: what the functions' cold starts build, from the environment infra gives them -----

    def settings(self, world: World, scheduled: bool = False) -> Settings:
        """The settings of a worker (or, `scheduled`, of the reclaim job's function) in this run."""
        env = {table_env(n): world.tables[n] for n in self.tables if n not in ("leases", "runs")}
        env.update({queue_env(self.queue_of[k]): world.data["urls"][k] for k in self.kinds_of_batches})
        if not scheduled:
            return Settings.from_environ(env)
        env.update(JOB_NAME=self.reclaim.name, LEASES_TABLE=world.tables["leases"], RUNS_TABLE=world.tables["runs"])
        env.update({config_env(name): value for name, value in self.reclaim.config.items()})
        return ScheduledSettings.from_environ(env)

    def store(self, world: World, clock: Any) -> WorkStore:
        return self.first.store(self.settings(world), clock)

    def gate(self, world: World, kind: str, clock: Any) -> TenantGate | None:
        build = self.pipelines[kind].gate
        return build(self.settings(world), clock) if build is not None else None

    def wakeups(self, world: World) -> dict[str, Any]:
        return {k: p.wakeups(world.wire.sqs, world.data["urls"][k]) for k, p in self.pipelines.items()}

    def perform(self, world: World, kind: str) -> Callable[..., str]:
        provider: SimProvider = world.data["provider"]
        return lambda request, timeout_s: provider.perform(request.key, request.idempotency_key, timeout_s)

    def reclaim_job(self, world: World, clock: Any) -> Callable[..., Any]:
        settings = self.settings(world, scheduled=True)
        assert isinstance(settings, ScheduledSettings)
        deps = JobDeps(settings, self.reclaim, clock, world.wire.boto3, world.wire.dynamodb, world.logger)
        return load_job(self.reclaim)(deps)

    def plan_batches(self, world: World) -> list[PlannedBatch]:
        marker = world.data["marker"]
        out = []
        for n, tenant in enumerate(TENANTS):
            kind = self.kinds_of_batches[n % len(self.kinds_of_batches)]
            items = tuple(ItemInput(f"i{i}", {"title": f"{marker} {i}"}) for i in range(world.rng.randint(2, 4)))
            out.append(PlannedBatch(BatchRef(tenant, "b1"), kind, items))
        return out

    def producer(self, world: World, clock: Any) -> Producer:
        return Producer(self.store(world, clock), self.wakeups(world), world.logger, self.tolerated_failure_pct)

    # -- setup ----------------------------------------------------------------------------

    def setup(self, world: World) -> None:
        world.data["marker"] = f"PAYLOAD-{world.kernel.seed}-MARK"
        world.data["tenants"] = list(TENANTS)
        queues = SimQueues(world, visibility_ms=6 * 300_000)
        world.wire.queue = queues
        world.data["queues"] = queues
        world.data["urls"] = {k: queues.url(self.queue_of[k]) for k in self.kinds_of_batches}
        batches = self.plan_batches(world)
        world.data["batches"] = batches
        reject = {b.items[0].item_id for b in batches[:1]} if world.rng.random() < 0.5 else set()
        world.data["provider"] = SimProvider(world, reject, rejection=self.rejection)
        quota = self.store(world, SkewedClock(world.kernel.clock)).quota
        quota.grant(TENANTS[0], 50)
        quota.grant(TENANTS[1], world.rng.choice((2, 3, 50)))
        world.data["touched"] = {}  # item key -> (true time, age) of the last applied write that stamped it
        world.wire.on_write.append(lambda w: self._on_write(world, w))
        cancels = world.data["cancels"] = CancelWatch(self.work.batches, self.work.items)
        world.wire.on_write.append(lambda w: cancels.on_write(world, w))
        world.data["watch"] = TermWatch(world)
        end = START_MS + HOUR_MS
        world.data["end"] = end
        for planned in batches:
            world.spawn(f"producer-{planned.ref.tenant}", self._producer(world, planned), at=START_MS)
            world.spawn(
                f"client-{planned.ref.tenant}",
                self._producer(world, planned),
                at=START_MS + world.rng.randrange(HOUR_MS // 2),
            )
        for kind in self.kinds_of_batches:
            for n in range(2):
                world.spawn(
                    f"worker-{kind[:3]}{n}", self._worker(world, kind, end), at=START_MS + world.rng.randrange(5_000)
                )
        # a handful of reclaim ticks at random instants (some at once) is what matters here
        for k in range(RECLAIM_TICKS):
            world.data["watch"].tick(
                world.spawn(f"reclaim{k}", self._reclaim(world), at=START_MS + world.rng.randrange(HOUR_MS))
            )
        first = batches[0]
        world.spawn(OPERATOR, self._operator(world, first), at=START_MS + world.rng.randrange(600_000, HOUR_MS))
        cancelled = first if world.rng.random() < 0.5 else world.rng.choice(batches)
        world.spawn(
            CANCELLER,
            cancels.canceller(world, cancelled.ref, self._operations(world)),
            at=START_MS + world.rng.randrange(EARLY_MS if world.rng.random() < 0.5 else HOUR_MS),
        )

    # -- actors ---------------------------------------------------------------------------

    def _producer(self, world: World, planned: PlannedBatch) -> Callable[[Actor], Any]:
        def run(actor: Actor) -> Any:
            return self.producer(world, actor.clock).submit(
                planned.ref, planned.kind, list(planned.items), "sim-client"
            )

        return run

    def _build_worker(self, world: World, kind: str, clock: Any, gated: bool = True) -> Worker:
        pipeline = self.pipelines[kind]
        return Worker(
            self.store(world, clock),
            kind,
            pipeline.timing,
            self.perform(world, kind),
            self.wakeups(world)[kind],
            world.logger,
            gate=self.gate(world, kind, clock) if gated else None,
            defer_delay_s=pipeline.defer_delay_s,
        )

    def _worker(self, world: World, kind: str, end: int) -> Callable[[Actor], Any]:
        def run(actor: Actor) -> Any:
            queues: SimQueues = world.data["queues"]
            url = world.data["urls"][kind]
            timing = self.pipelines[kind].timing
            worker = self._build_worker(world, kind, actor.clock)
            rounds = 0
            while world.kernel.clock.now_ms() < end:
                records = queues.receive(url, 3, actor)
                if not records:
                    later = queues.next_visible_at(url)
                    wait = 20_000 if later is None else max(1_000, later - world.kernel.clock.now_ms())
                    world.kernel.park(actor, min(wait, 120_000))
                    continue
                result = worker.process(records, remaining_ms=timing.per_item_timeout_s * 1000 + 60_000)
                queues.settle(url, records, result)
                rounds += 1
            return rounds

        return run

    def _reclaim(self, world: World) -> Callable[[Actor], Any]:
        def run(actor: Actor) -> Any:
            spec = self.reclaim
            runner = world.runner(actor.clock)
            context = LambdaContext(actor.name, actor.clock, spec.timeout_s * 1000)
            job = self.reclaim_job(world, actor.clock)
            watch: TermWatch = world.data["watch"]
            fail = world.plan.on(FaultKind.JOB_FAILURE) and world.rng.random() < 0.5
            return runner.run(
                spec,
                lambda ctx: watch.guard(actor, _failing(world, actor, iter(job(ctx)), fail)),
                Trigger("scheduled", actor.clock.now_ms()),
                context,
            )

        return run

    def _operations(self, world: World) -> Callable[[Actor], BatchOperations]:
        return lambda actor: BatchOperations(self.store(world, actor.clock), self.wakeups(world), world.logger)

    def _operator(self, world: World, planned: PlannedBatch) -> Callable[[Actor], Any]:
        def run(actor: Actor) -> Any:
            return self._operations(world)(actor).retry_failed(planned.ref, OPERATOR)

        return run

    # -- checks on every applied write ------------------------------------------------------

    def _on_write(self, world: World, write: Any) -> None:
        cap = self.first.timing.attempts_cap
        item_tenants: set[str] = set()
        quota_tenants: set[str] = set()
        for change in write.changes:
            before, after = change.before or {}, change.after or {}
            if change.table == self.work.items:
                if after and int(after.get("attempts", 0)) > cap:
                    world.violate(5, f"{write.actor}: {change.key} at attempt {after['attempts']} (cap {cap})")
                if after.get("status") in ("running", "completed") and after.get("status") != before.get("status"):
                    self._check_not_past_threshold(world, write, after)
                if before.get("status") == "running" and str(after.get("error", "")).startswith("reclaimed:"):
                    self._check_reclaimed_when_stale(world, write, change.key, after)
                if after.get("updated_at") != before.get("updated_at"):
                    world.data["touched"][change.key] = (write.at, write.age_ms)
                if before.get("status") in TERMINAL and after != before and write.actor != OPERATOR:
                    world.violate(
                        5,
                        f"{write.actor} changed terminal item {change.key}: "
                        f"{before.get('status')} -> {after.get('status') if after else 'deleted'}",
                    )
                if after:
                    tenant = str(after.get("batch_key", "")).split("#")[0]
                    if after.get("tenant") != tenant:
                        world.violate(8, f"{write.actor}: item {change.key} has tenant {after.get('tenant')}")
                    item_tenants.add(tenant)
                    if not before:
                        self._check_batch_open_for(world, write, after)
            elif change.table == self.work.quota:
                quota_tenants.add(str((change.after or change.before or {}).get("tenant")))
            elif change.table == self.work.batches:
                if before.get("status") in FINAL and after != before and write.actor != OPERATOR:
                    moved = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
                    world.violate(11, f"{write.actor} changed finalized batch {change.key}: {moved}")
                if after.get("status") in FINAL and before.get("status") not in FINAL:
                    self._check_finalize(world, write, after)
        if item_tenants and quota_tenants and not quota_tenants <= item_tenants:
            world.violate(
                8, f"{write.actor}: quota of {sorted(quota_tenants)} moved with items of {sorted(item_tenants)}"
            )

    def _items_of(self, world: World, tenant: str, batch_id: str) -> list[dict[str, Any]]:
        return [i for i in world.scan(self.work.items) if i["tenant"] == tenant and i["batch_id"] == batch_id]

    def _batch_row(self, world: World, item: dict[str, Any]) -> dict[str, Any] | None:
        rows = [
            b
            for b in world.scan(self.work.batches)
            if b["tenant"] == item.get("tenant") and b["batch_id"] == item.get("batch_id")
        ]
        return rows[0] if rows else None

    def _check_finalize(self, world: World, write: Any, batch: dict[str, Any]) -> None:
        items = self._items_of(world, batch["tenant"], batch["batch_id"])
        live = [i for i in items if i["status"] in LIVE]
        counts = (sum(i["status"] == "completed" for i in items), sum(i["status"] == "failed" for i in items))
        cancelled = sum(i["status"] == "cancelled" for i in items)
        if len(items) != int(batch["total"]) or live:
            world.violate(
                11,
                f"{write.actor} finalized {batch['tenant']}/{batch['batch_id']} with {len(items)} of "
                f"{batch['total']} rows, {len(live)} live",
            )
        if (int(batch.get("completed", 0)), int(batch.get("failed", 0))) != counts or (
            int(batch.get("cancelled") or 0) != cancelled
        ):
            world.violate(
                6,
                f"{write.actor} finalized {batch['tenant']}/{batch['batch_id']} with counters "
                f"{batch.get('completed')}/{batch.get('failed')}, rows say {counts[0]}/{counts[1]}",
            )
        tolerated = batch.get("tolerated_failures")
        over = tolerated is not None and counts[1] > int(tolerated)
        if batch["status"] != "cancelled" and (batch["status"] == "failed_threshold") != over:
            world.violate(
                14,
                f"{write.actor} finalized {batch['tenant']}/{batch['batch_id']} {batch['status']} with "
                f"{counts[1]} failed of {batch['total']}, {tolerated} tolerated",
            )

    def _check_reclaimed_when_stale(self, world: World, write: Any, key: Any, item: dict[str, Any]) -> None:
        """16, in true time: a running item is reclaimed only once its last write is item-stale old."""
        stale_ms = self.pipelines[str(item["kind"])].timing.item_stale_s * 1000
        at, age = world.data["touched"].get(key, (None, 0))
        if at is None or write.at - at >= stale_ms:
            return
        text = (
            f"{write.actor} reclaimed running item {item.get('tenant')}/{item.get('batch_id')}/{item.get('item_id')} "
            f"{(write.at - at) // 1000} s after its last write was applied (item-stale {stale_ms // 1000} s)"
        )
        if age <= REQUEST_AGE_BUDGET_MS:
            world.violate(16, text)
        else:  # the last write was applied later than the budget after it was built: outside what is promised
            world.limit(16, f"{text}; that write was applied {age // 1000} s after it was built")

    def _check_not_past_threshold(self, world: World, write: Any, item: dict[str, Any]) -> None:
        """No item of a batch finalized `failed_threshold` is claimed or completed (until it is reopened)."""
        row = self._batch_row(world, item)
        if row is not None and row.get("status") == "failed_threshold":
            world.violate(
                14,
                f"{write.actor} moved item {item.get('item_id')} of failed_threshold batch "
                f"{item.get('tenant')}/{item.get('batch_id')} to {item.get('status')}",
            )

    def _check_batch_open_for(self, world: World, write: Any, item: dict[str, Any]) -> None:
        row = self._batch_row(world, item)
        if row is not None and row.get("status") in FINAL:
            world.violate(
                11,
                f"{write.actor} added item {item.get('item_id')} to finalized batch "
                f"{item.get('tenant')}/{item.get('batch_id')}",
            )

    # -- liveness -------------------------------------------------------------------------

    def settle(self, world: World) -> None:
        kernel = world.kernel
        queues: SimQueues = world.data["queues"]
        clock = SkewedClock(kernel.clock)
        spec = self.reclaim
        for planned in world.data["batches"]:  # the client repeats its submit until it succeeds
            try:
                self.producer(world, clock).submit(planned.ref, planned.kind, list(planned.items), "sim-client")
            except JobfenceError as exc:
                world.violate(0, f"liveness: repeating the submit of {planned.ref} failed: {exc}")
        # every term taken so far has expired (an actor's clock may have run up to half the margin ahead)
        kernel.clock.set(clean_tick_after(spec, max(kernel.clock.now_ms(), world.data["end"])))
        for sweep in range(SWEEPS):
            if sweep and self._done(world):  # at least one sweep: a clean tick after every term ended
                world.data["sweeps"] = sweep
                self._author_invariant(world)
                return
            kernel.clock.advance(ms=self.first.timing.batch_stale_s * 1000 + 1_000)
            try:
                result = world.runner(clock).run(
                    spec,
                    self.reclaim_job(world, clock),
                    Trigger("scheduled", clock.now_ms()),
                    LambdaContext("clean-reclaim", clock, spec.timeout_s * 1000),
                )
            except JobfenceError as exc:
                world.violate(0, f"liveness: the clean reclaim tick raised {exc}")
            else:
                if result.outcome.value != "ran":  # every earlier term has ended by now
                    world.violate(0, f"liveness: the clean tick of the reclaim job came to {result.outcome.value}")
            for kind in self.kinds_of_batches:
                url = world.data["urls"][kind]
                worker = self._build_worker(world, kind, clock, gated=False)
                for _ in range(50):
                    kernel.clock.advance(ms=self.pipelines[kind].timing.max_retry_delay_s * 1000)
                    records = queues.receive(url, 10, None)
                    if not records:
                        break
                    queues.settle(url, records, worker.process(records))
        if not self._done(world):
            for planned in world.data["batches"]:
                items = self._items_of(world, planned.ref.tenant, planned.ref.batch_id)
                world.violate(
                    5,
                    f"liveness: after {SWEEPS} clean sweeps {planned.ref} has items "
                    f"{sorted((i['item_id'], i['status']) for i in items)}",
                )

    def _done(self, world: World) -> bool:
        batches = {(b["tenant"], b["batch_id"]): b for b in world.scan(self.work.batches)}
        for planned in world.data["batches"]:
            row = batches.get((planned.ref.tenant, planned.ref.batch_id))
            if row is None or row.get("status") not in FINAL:
                return False
        return all(i["status"] in TERMINAL for i in world.scan(self.work.items))

    def _author_invariant(self, world: World) -> None:
        if self.invariant is None:
            return
        from jobfence.testing.sim.job import Snapshot

        try:
            self.invariant(Snapshot(world))
        except AssertionError as exc:
            world.violate(0, f"the pipeline's invariant: {' '.join(str(exc).split())[:300] or 'AssertionError'}")

    # -- end checks -----------------------------------------------------------------------

    def check(self, world: World) -> None:
        provider: SimProvider = world.data["provider"]
        refs = [p.ref for p in world.data["batches"]]
        store = self.store(world, SkewedClock(world.kernel.clock))
        cap = self.first.timing.attempts_cap
        for verdict in check_batches(store, refs, {"provider": provider.results}, cap=cap, strict_acts=False):
            if not verdict.ok:
                world.violate(verdict.number, verdict.detail)
        for item, keys in provider.keys_by_item.items():
            if len(keys) > 1:
                world.violate(9, f"the provider acted for {item} under {len(keys)} keys")
        for key, tenant in provider.tenant_of.items():
            if not key.startswith(f"{tenant}:"):
                world.violate(8, f"the provider acted for tenant {tenant} under key {key}")
        if world.data["marker"] in world.logs():
            world.violate(10, "an item's payload reached a log line")
        world.data["watch"].check()
        world.data["cancels"].check(world)
        ticks = set(map(id, world.data["watch"].ticks))
        for actor in world.kernel.actors:
            if id(actor) in ticks:
                continue
            if actor.error is not None and not isinstance(actor.error, JobfenceError):
                world.violate(13, f"{actor.name} raised {type(actor.error).__name__}: {str(actor.error)[:100]}")


class ReclaimJobError(Exception):
    """The reclaim job's own error (injected before its first page)."""


def _failing(world: World, actor: Actor, pages: Any, fail: bool) -> Any:
    """The job's pages; with `fail`, it raises its own error before its first page."""
    if fail:
        world.wire.count(FaultKind.JOB_FAILURE, actor, "the reclaim job raises in its first batch")
        raise ReclaimJobError("batch 1 failed")
    yield from pages
