"""How a worker is put together for the two pipelines of seed 003 (its store and wake-ups: `jobs.listings.stores`).

The pipelines themselves (queues, tables, timing, tolerated failures) are
catalog data (`jobs.listings.catalog`). Which pipeline a worker runs comes
from its function's own configuration (`WORKER_QUEUE`), never from a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from jobfence.clock import Clock
from jobfence.config import Settings
from jobfence.work import Perform, PermanentFailure, TenantGate, WorkRequest
from jobfence.work.pipeline import WorkerPipeline
from jobfence.work.sqs import SqsWakeups
from jobs.listings.catalog import (  # noqa: F401 (the pipelines' data, re-exported for their builders' callers)
    BATCHES_TABLE,
    GENERATION,
    GENERATION_QUEUE,
    ITEMS_TABLE,
    PIPELINES,
    PUBLISH,
    PUBLISH_QUEUE,
    QUOTA_TABLE,
    Pipeline,
    pipeline_of_queue,
)
from jobs.listings.stores import build_store
from providers.errors import ProviderRejected
from providers.items import GENERATOR, PUBLISHER, HttpItemProvider, ItemEndpoint, ItemProvider, ItemRequest

# The catalog names each pipeline's provider (data); the port's configuration for that name lives here.
ENDPOINTS: Mapping[str, ItemEndpoint] = {e.name: e for e in (GENERATOR, PUBLISHER)}


def endpoint_of(pipeline: Pipeline) -> ItemEndpoint:
    """The item-provider configuration a pipeline calls."""
    return ENDPOINTS[pipeline.provider]


def perform_with(provider: ItemProvider) -> Perform:
    """A pipeline's step: one provider call per item; a provider refusal is permanent, anything else is retried."""

    def perform(request: WorkRequest, timeout_s: float) -> str:
        try:
            return provider.call(ItemRequest(request.key.tenant, request.idempotency_key, request.payload), timeout_s)
        except ProviderRejected as exc:
            raise PermanentFailure(str(exc)) from None

    return perform


def real_perform(pipeline: Pipeline, settings: Settings) -> Perform:
    """The real adapter of a pipeline's provider, at the URL the function was configured with."""
    return perform_with(HttpItemProvider(endpoint_of(pipeline), settings.provider_url(pipeline.provider)))


def build_gate(pipeline: Pipeline, settings: Settings, clock: Clock) -> TenantGate | None:
    """The pipeline's per-tenant in-flight cap, its holds in the quota table (None: the catalog sets no cap)."""
    if pipeline.tenant_in_flight_cap is None:
        return None
    return TenantGate(
        settings.table(QUOTA_TABLE),
        clock,
        pipeline.kind,
        pipeline.tenant_in_flight_cap,
        hold_ms=pipeline.timing.item_stale_s * 1000,
    )


def worker_pipeline(queue: str) -> WorkerPipeline:
    """What the worker of catalog queue `queue` runs (`jobfence.handler.worker_handler`): its listings pipeline."""
    pipeline = pipeline_of_queue(queue)
    return WorkerPipeline(
        kind=pipeline.kind,
        timing=pipeline.timing,
        store=build_store,
        perform=partial(real_perform, pipeline),
        wakeups=SqsWakeups,
        gate=partial(build_gate, pipeline),
        defer_delay_s=pipeline.defer_delay_s,
    )
