"""The durable-batch families: `work` (the core store, producer, workers, reclaim, operator,
quota) and `listings` (the same through `jobs.listings`: both pipelines, the catalog's
`reclaim_listings` job, the real `SqsWakeups`).

Actors (one faulty hour of simulated time):
    producer      submits one batch per tenant; the client repeats the call later (the
                  producer contract), once during the hour and once in the fault-free phase
    workers       receive up to 3 wake-ups, `Worker.process` them, acknowledge what it says
    reclaim       the reclaim job under its lease, four ticks at random instants (the real runner)
    operator      `retry-failed` on one batch at a random time
Two tenants use the same batch and item ids, so a forged wake-up names a real
item of the other tenant. One tenant's quota is short, so claims run out of it.

Checked on every applied write:
    5   an item never goes over the attempts cap; automation never changes a terminal item
    8   an item row sits under its own tenant; a quota change moves with items of that tenant
    11  a finalized batch never changes again (except the operator's reopen); a batch is
        finalized only when its rows number `total`, none live, counters equal the recount
    14  the failure threshold (the catalog's tolerated percentage, which the rejected item and the
        short quota cross in many runs): a batch finalizes `failed_threshold` exactly when its
        rows show more failures than it tolerates; no item of a `failed_threshold` batch is
        claimed or completed until retry-failed reopens it (so no claim made after it can reach
        the provider: every item is terminal); an item failed by the threshold refunds its
        reservation exactly once (7, at the end)
    16  in true time: the reclaimer takes a running item from its worker (running -> pending or
        failed, "reclaimed") only once the item's last applied write is at least item-stale old.
        Every actor's requests may be applied late (within the request-age budget and beyond it);
        a breach whose last write came later than that budget after it was built is reported as
        the fault model's limit (docs/guarantees.md, "The time budget"), not a violation
Checked at the end (after at most `SWEEPS` fault-free sweeps: reclaim, then drain):
    5-9 through `ops.invariants.check_batches` (also used by the demo), 9 also per item
    (one idempotency key per item), 10 no payload in any log line, 13 no error unclassified;
    the reclaim ticks' terms through `jobfence.testing.sim.terms.TermWatch` (1-4, 12)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jobfence.clock import REQUEST_AGE_BUDGET_MS
from jobfence.config import ScheduledSettings, Settings
from jobfence.errors import JobfenceError
from jobfence.quota import QuotaStore
from jobfence.reclaim import Reclaimer, ReclaimPipeline
from jobfence.scheduled import JobDeps
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
from jobfence.work.sqs import SqsWakeups
from jobs.catalog import CATALOG
from jobs.listings.catalog import TOLERATED_FAILURE_PCT
from jobs.listings.pipelines import GENERATION, PIPELINES, PUBLISH, endpoint_of, perform_with
from ops.invariants import check_batches
from providers.errors import ProviderRejected

HOUR_MS = 3_600_000
RECLAIM_JOB = "reclaim_listings"
TENANTS = ("t1", "t2")
SWEEPS = 8
RECLAIM_TICKS = 4
TERMINAL = ("completed", "failed")
LIVE = ("pending", "running")
FINAL = ("finalized", "failed_threshold")  # a batch status nothing but retry-failed changes
OPERATOR = "operator"


@dataclass(frozen=True)
class PlannedBatch:
    ref: BatchRef
    kind: str
    items: tuple[ItemInput, ...]


class BatchFamily:
    """What both batch families share; subclasses say which pipelines and builders."""

    name = "batches"
    tables = ("listing_batches", "listing_items", "listing_quota", "leases", "runs")
    registry = CATALOG
    kinds = (
        *AWS_CALL_FAULTS,
        *TIME_FAULTS,
        *PAUSES,
        FaultKind.CLOCK_SKEW,
        *DELIVERY_FAULTS,
        *PROVIDER_FAULTS,
        FaultKind.JOB_FAILURE,
    )
    kinds_of_batches: tuple[str, ...] = (GENERATION,)

    def pause_ms(self, world: World, kind: FaultKind) -> int:
        timing = PIPELINES[GENERATION].timing
        base = {
            FaultKind.PAUSE_TTL: CATALOG.job(RECLAIM_JOB).lease_ttl_s,
            FaultKind.PAUSE_ITEM_STALE: timing.item_stale_s,
            FaultKind.PAUSE_BATCH_STALE: timing.batch_stale_s,
        }[kind]
        assert base is not None  # the catalog fills in every job's lease TTL
        return base * 1000 + world.rng.randrange(1, 300_000)

    # -- builders (the listings family overrides all but `gate`) -----------------------------

    def store(self, world: World, clock: Any) -> WorkStore:
        quota = QuotaStore(world.tables["listing_quota"], clock)
        return WorkStore(world.tables["listing_batches"], world.tables["listing_items"], quota, clock)

    def gate(self, world: World, kind: str, clock: Any) -> TenantGate:
        """The pipeline's in-flight cap; half the worlds run a cap of 2 so that deferrals happen under faults."""
        if "in_flight_cap" not in world.data:
            world.data["in_flight_cap"] = world.rng.choice((2, PIPELINES[kind].tenant_in_flight_cap))
        cap = world.data["in_flight_cap"]
        return TenantGate(world.tables["listing_quota"], clock, kind, cap, PIPELINES[kind].timing.item_stale_s * 1000)

    def wakeups(self, world: World) -> dict[str, Any]:
        return {kind: SqsWakeups(world.wire.sqs, world.data["urls"][kind]) for kind in self.kinds_of_batches}

    def perform(self, world: World, kind: str) -> Callable[..., str]:
        provider: SimProvider = world.data["provider"]
        return lambda request, timeout_s: provider.perform(request.key, request.idempotency_key, timeout_s)

    def reclaim_job(self, world: World, clock: Any) -> Callable[..., Any]:
        reclaimer = Reclaimer(
            self.store(world, clock),
            {k: ReclaimPipeline(k, PIPELINES[k].timing, w) for k, w in self.wakeups(world).items()},
            clock,
            world.logger,
        )
        return lambda ctx: reclaimer.job_batches()

    def plan_batches(self, world: World) -> list[PlannedBatch]:
        marker = world.data["marker"]
        out = []
        for tenant in TENANTS:
            n = world.rng.randint(2, 4)
            items = tuple(ItemInput(f"i{i}", {"title": f"{marker} {i}"}) for i in range(n))
            out.append(PlannedBatch(BatchRef(tenant, "b1"), GENERATION, items))
        return out

    # -- setup ----------------------------------------------------------------------------

    def setup(self, world: World) -> None:
        world.data["marker"] = f"PAYLOAD-{world.kernel.seed}-MARK"
        world.data["tenants"] = list(TENANTS)
        queues = SimQueues(world, visibility_ms=6 * 300_000)
        world.wire.queue = queues
        world.data["queues"] = queues
        world.data["urls"] = {k: queues.url(PIPELINES[k].queue) for k in self.kinds_of_batches}
        batches = self.plan_batches(world)
        world.data["batches"] = batches
        reject = {b.items[0].item_id for b in batches[:1]} if world.rng.random() < 0.5 else set()
        world.data["provider"] = SimProvider(world, reject, rejection=ProviderRejected)
        driver = SkewedClock(world.kernel.clock)
        quota = QuotaStore(world.tables["listing_quota"], driver)
        quota.grant(TENANTS[0], 50)
        quota.grant(TENANTS[1], world.rng.choice((2, 3, 50)))
        world.data["touched"] = {}  # item key -> (true time, age) of the last applied write that stamped it
        world.wire.on_write.append(lambda w: self._on_write(world, w))
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
        # the catalog ticks every 5 minutes; a handful of ticks at random instants (some at once) is
        # what matters here, and each costs a dozen index queries
        for k in range(RECLAIM_TICKS):
            world.data["watch"].tick(
                world.spawn(f"reclaim{k}", self._reclaim(world), at=START_MS + world.rng.randrange(HOUR_MS))
            )
        first = batches[0]
        world.spawn(OPERATOR, self._operator(world, first), at=START_MS + world.rng.randrange(600_000, HOUR_MS))

    # -- actors ---------------------------------------------------------------------------

    def _producer(self, world: World, planned: PlannedBatch):
        def run(actor: Actor) -> Any:
            producer = Producer(
                self.store(world, actor.clock), self.wakeups(world), world.logger, TOLERATED_FAILURE_PCT
            )
            return producer.submit(planned.ref, planned.kind, list(planned.items), "sim-client")

        return run

    def _worker(self, world: World, kind: str, end: int):
        def run(actor: Actor) -> Any:
            queues: SimQueues = world.data["queues"]
            url = world.data["urls"][kind]
            wakeups = self.wakeups(world)[kind]
            worker = Worker(
                self.store(world, actor.clock),
                kind,
                PIPELINES[kind].timing,
                self.perform(world, kind),
                wakeups,
                world.logger,
                gate=self.gate(world, kind, actor.clock),
                defer_delay_s=PIPELINES[kind].defer_delay_s,
            )
            rounds = 0
            while world.kernel.clock.now_ms() < end:
                records = queues.receive(url, 3, actor)
                if not records:
                    later = queues.next_visible_at(url)
                    wait = 20_000 if later is None else max(1_000, later - world.kernel.clock.now_ms())
                    world.kernel.park(actor, min(wait, 120_000))
                    continue
                result = worker.process(records, remaining_ms=PIPELINES[kind].timing.per_item_timeout_s * 1000 + 60_000)
                queues.settle(url, records, result)
                rounds += 1
            return rounds

        return run

    def _reclaim(self, world: World):
        def run(actor: Actor) -> Any:
            spec = CATALOG.job(RECLAIM_JOB)
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

    def _operator(self, world: World, planned: PlannedBatch):
        def run(actor: Actor) -> Any:
            ops = BatchOperations(self.store(world, actor.clock), self.wakeups(world), world.logger)
            return ops.retry_failed(planned.ref, OPERATOR)

        return run

    # -- checks on every applied write ------------------------------------------------------

    def _on_write(self, world: World, write: Any) -> None:
        cap = PIPELINES[GENERATION].timing.attempts_cap
        item_tenants: set[str] = set()
        quota_tenants: set[str] = set()
        for change in write.changes:
            before, after = change.before or {}, change.after or {}
            if change.table == "listing_items":
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
            elif change.table == "listing_quota":
                quota_tenants.add(str((change.after or change.before or {}).get("tenant")))
            elif change.table == "listing_batches":
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
        return [i for i in world.scan("listing_items") if i["tenant"] == tenant and i["batch_id"] == batch_id]

    def _check_finalize(self, world: World, write: Any, batch: dict[str, Any]) -> None:
        items = self._items_of(world, batch["tenant"], batch["batch_id"])
        live = [i for i in items if i["status"] in LIVE]
        counts = (sum(i["status"] == "completed" for i in items), sum(i["status"] == "failed" for i in items))
        if len(items) != int(batch["total"]) or live:
            world.violate(
                11,
                f"{write.actor} finalized {batch['tenant']}/{batch['batch_id']} with {len(items)} of "
                f"{batch['total']} rows, {len(live)} live",
            )
        if (int(batch.get("completed", 0)), int(batch.get("failed", 0))) != counts:
            world.violate(
                6,
                f"{write.actor} finalized {batch['tenant']}/{batch['batch_id']} with counters "
                f"{batch.get('completed')}/{batch.get('failed')}, rows say {counts[0]}/{counts[1]}",
            )
        tolerated = batch.get("tolerated_failures")
        over = tolerated is not None and counts[1] > int(tolerated)
        if (batch["status"] == "failed_threshold") != over:
            world.violate(
                14,
                f"{write.actor} finalized {batch['tenant']}/{batch['batch_id']} {batch['status']} with "
                f"{counts[1]} failed of {batch['total']}, {tolerated} tolerated",
            )

    def _check_reclaimed_when_stale(self, world: World, write: Any, key: Any, item: dict[str, Any]) -> None:
        """16, in true time: a running item is reclaimed only once its last write is item-stale old."""
        stale_ms = PIPELINES[str(item["kind"])].timing.item_stale_s * 1000
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
        rows = [
            b
            for b in world.scan("listing_batches")
            if b["tenant"] == item.get("tenant") and b["batch_id"] == item.get("batch_id")
        ]
        if rows and rows[0].get("status") == "failed_threshold":
            world.violate(
                14,
                f"{write.actor} moved item {item.get('item_id')} of failed_threshold batch "
                f"{item.get('tenant')}/{item.get('batch_id')} to {item.get('status')}",
            )

    def _check_batch_open_for(self, world: World, write: Any, item: dict[str, Any]) -> None:
        rows = [
            b
            for b in world.scan("listing_batches")
            if b["tenant"] == item.get("tenant") and b["batch_id"] == item.get("batch_id")
        ]
        if rows and rows[0].get("status") in FINAL:
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
        spec = CATALOG.job(RECLAIM_JOB)
        for planned in world.data["batches"]:  # the client repeats its submit until it succeeds
            try:
                Producer(self.store(world, clock), self.wakeups(world), world.logger, TOLERATED_FAILURE_PCT).submit(
                    planned.ref, planned.kind, list(planned.items), "sim-client"
                )
            except JobfenceError as exc:
                world.violate(0, f"liveness: repeating the submit of {planned.ref} failed: {exc}")
        # every term taken so far has expired (an actor's clock may have run up to half the margin ahead)
        kernel.clock.set(clean_tick_after(spec, max(kernel.clock.now_ms(), world.data["end"])))
        for sweep in range(SWEEPS):
            if sweep and self._done(world):  # at least one sweep: a clean tick after every term ended
                world.data["sweeps"] = sweep
                return
            kernel.clock.advance(ms=PIPELINES[GENERATION].timing.batch_stale_s * 1000 + 1_000)
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
                worker = Worker(
                    self.store(world, clock),
                    kind,
                    PIPELINES[kind].timing,
                    self.perform(world, kind),
                    self.wakeups(world)[kind],
                    world.logger,
                )
                for _ in range(50):
                    kernel.clock.advance(ms=PIPELINES[kind].timing.max_retry_delay_s * 1000)
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
        batches = {(b["tenant"], b["batch_id"]): b for b in world.scan("listing_batches")}
        for planned in world.data["batches"]:
            row = batches.get((planned.ref.tenant, planned.ref.batch_id))
            if row is None or row.get("status") not in FINAL:
                return False
        return all(i["status"] in TERMINAL for i in world.scan("listing_items"))

    # -- end checks -----------------------------------------------------------------------

    def check(self, world: World) -> None:
        provider: SimProvider = world.data["provider"]
        refs = [p.ref for p in world.data["batches"]]
        store = self.store(world, SkewedClock(world.kernel.clock))
        for verdict in check_batches(store, refs, {"provider": provider.results}, strict_acts=False):
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
        ticks = set(map(id, world.data["watch"].ticks))
        for actor in world.kernel.actors:
            if id(actor) in ticks:
                continue
            if actor.error is not None and not isinstance(actor.error, JobfenceError):
                world.violate(13, f"{actor.name} raised {type(actor.error).__name__}: {str(actor.error)[:100]}")


class ReclaimJobError(Exception):
    """The reclaim job's own error (injected between two of its pages)."""


def _failing(world: World, actor: Actor, pages: Any, fail: bool) -> Any:
    """The job's pages; with `fail`, it raises its own error before its first page."""
    if fail:
        world.wire.count(FaultKind.JOB_FAILURE, actor, "the reclaim job raises in its first batch")
        raise ReclaimJobError("batch 1 failed")
    yield from pages


class WorkFamily(BatchFamily):
    name = "work"


class ListingsFamily(BatchFamily):
    """Everything through `jobs.listings`: settings, store, wake-ups, adapters, the catalog's reclaim job."""

    name = "listings"
    kinds_of_batches = (GENERATION, PUBLISH)

    def _settings(self, world: World, scheduled: bool = False) -> Settings:
        env = {f"TABLE_{n.upper()}": world.tables[n] for n in ("listing_batches", "listing_items", "listing_quota")}
        env.update({f"QUEUE_{PIPELINES[k].queue.upper()}": world.data["urls"][k] for k in self.kinds_of_batches})
        if scheduled:
            env.update(JOB_NAME=RECLAIM_JOB, LEASES_TABLE=world.tables["leases"], RUNS_TABLE=world.tables["runs"])
            return ScheduledSettings.from_environ(env)
        return Settings.from_environ(env)

    def store(self, world: World, clock: Any) -> WorkStore:
        from jobs.listings.pipelines import build_store

        return build_store(self._settings(world), clock)

    def wakeups(self, world: World) -> dict[str, Any]:
        from jobs.listings.pipelines import build_wakeups

        return build_wakeups(self._settings(world), world.wire.sqs)

    def perform(self, world: World, kind: str) -> Callable[..., str]:
        provider: SimProvider = world.data["provider"]
        return perform_with(_Adapter(provider, endpoint_of(PIPELINES[kind])))

    def reclaim_job(self, world: World, clock: Any) -> Callable[..., Any]:
        spec = CATALOG.job(RECLAIM_JOB)
        settings = self._settings(world, scheduled=True)
        assert isinstance(settings, ScheduledSettings)
        return spec.load()(JobDeps(settings, spec, clock, world.wire.boto3, world.wire.dynamodb, world.logger))

    def plan_batches(self, world: World) -> list[PlannedBatch]:
        marker = world.data["marker"]
        out = []
        for tenant, kind in zip(TENANTS, (GENERATION, PUBLISH), strict=True):
            items = tuple(ItemInput(f"i{i}", {"title": f"{marker} {i}"}) for i in range(world.rng.randint(2, 3)))
            out.append(PlannedBatch(BatchRef(tenant, "b1"), kind, items))
        return out


class _Adapter:
    """The item-provider port of `jobs.listings` (either configuration) on the simulated provider."""

    def __init__(self, provider: SimProvider, endpoint: Any) -> None:
        self._provider = provider
        self.endpoint = endpoint

    def call(self, request: Any, timeout_s: float) -> str:
        from jobfence.work import ItemKey

        tenant, batch_id, item_id = [*request.idempotency_key.split(":"), "", "", ""][:3]
        # the simulated provider reads the ids only (a provider never sees where the row lives)
        return self._provider.perform(ItemKey(tenant, batch_id, item_id, 0), request.idempotency_key, timeout_s)
