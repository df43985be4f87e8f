"""The durable-batch families: `work` (the core store, producer, workers, reclaim, operator,
quota) and `listings` (the same through `jobs.listings`: both pipelines, the catalog's
`reclaim_listings` job, the real `SqsWakeups`).

The scenario, its actors and its checks are the test kit's pipeline scenario
(`jobfence.testing.sim.pipeline.PipelineScenario`, what `simulate(..., pipelines=...)` runs for any
app): this module gives it this repository's catalog and pipelines, the catalog's failure thresholds
(the rejected item and the short quota cross them in many runs: invariant 14), the listings
provider's own refusal, and the in-flight cap drawn per world (half the worlds run a cap of 2, so
that deferrals happen under faults).

`work` builds the core pieces itself (`WorkStore`, `Reclaimer`, `SqsWakeups` over the generation
queue only); `listings` builds every piece as its functions' cold starts do (the pipelines'
factories, the catalog's `reclaim_listings` job) and calls the provider through its adapter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobfence.quota import QuotaStore
from jobfence.reclaim import Reclaimer, ReclaimPipeline
from jobfence.testing.sim.pipeline import PipelineScenario, PlannedBatch
from jobfence.testing.sim.queue import SimProvider
from jobfence.testing.sim.world import World
from jobfence.work import BatchRef, ItemInput, TenantGate, WorkStore
from jobfence.work.sqs import SqsWakeups
from jobs.catalog import CATALOG
from jobs.listings.catalog import TOLERATED_FAILURE_PCT
from jobs.listings.pipelines import GENERATION, PIPELINES, PUBLISH, endpoint_of, perform_with, worker_pipeline
from providers.errors import ProviderRejected

RECLAIM_JOB = "reclaim_listings"
TENANTS = ("t1", "t2")


class BatchFamily(PipelineScenario):
    """What both batch families share: the listings catalog, its pipelines, thresholds and drawn in-flight cap."""

    name = "batches"

    def __init__(self) -> None:
        super().__init__(
            CATALOG,
            RECLAIM_JOB,
            worker_pipeline,
            tolerated_failure_pct=TOLERATED_FAILURE_PCT,
            rejection=ProviderRejected,
        )

    def gate(self, world: World, kind: str, clock: Any) -> TenantGate:
        """The pipeline's in-flight cap; half the worlds run a cap of 2 so that deferrals happen under faults."""
        if "in_flight_cap" not in world.data:
            world.data["in_flight_cap"] = world.rng.choice((2, PIPELINES[kind].tenant_in_flight_cap))
        cap = world.data["in_flight_cap"]
        return TenantGate(world.tables["listing_quota"], clock, kind, cap, PIPELINES[kind].timing.item_stale_s * 1000)


class WorkFamily(BatchFamily):
    """The core pieces, built directly over the listings tables; the generation pipeline only."""

    name = "work"

    def __init__(self) -> None:
        super().__init__()
        self.kinds_of_batches = (GENERATION,)

    def store(self, world: World, clock: Any) -> WorkStore:
        quota = QuotaStore(world.tables["listing_quota"], clock)
        return WorkStore(world.tables["listing_batches"], world.tables["listing_items"], quota, clock)

    def wakeups(self, world: World) -> dict[str, Any]:
        return {kind: SqsWakeups(world.wire.sqs, world.data["urls"][kind]) for kind in self.kinds_of_batches}

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


class ListingsFamily(BatchFamily):
    """Everything through `jobs.listings`: settings, store, wake-ups, adapters, the catalog's reclaim job."""

    name = "listings"

    def perform(self, world: World, kind: str) -> Callable[..., str]:
        provider: SimProvider = world.data["provider"]
        return perform_with(_Adapter(provider, endpoint_of(PIPELINES[kind])))

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
