"""The two pipelines of seed 003 and how a worker or the reclaimer is put together for them.

    generation  listing text from an item's input     per-item 240 s < item stale 6 min < batch stale 15 min
    publish     a listing onto the marketplace        per-item 3 min < item stale 5 min < batch stale 15 min

Which pipeline a worker runs comes from its function's own configuration
(`WORKER_QUEUE`), never from a message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from jobfence.clock import Clock
from jobfence.config import Settings
from jobfence.quota import QuotaStore
from jobfence.work import PermanentFailure, Perform, SqsWakeups, Timing, WorkRequest, WorkStore
from providers.generator import GenerationRequest, Generator, HttpGenerator
from providers.publisher import HttpPublisher, Publisher, PublishRequest
from providers.scripted import ProviderRejected

GENERATION = "generation"
PUBLISH = "publish"

BATCHES_TABLE = "listing_batches"
ITEMS_TABLE = "listing_items"
QUOTA_TABLE = "listing_quota"
GENERATION_QUEUE = "listing_generation"
PUBLISH_QUEUE = "listing_publish"


@dataclass(frozen=True)
class Pipeline:
    kind: str
    queue: str  # catalog queue name
    provider: str  # catalog provider name (PROVIDER_<NAME>_URL)
    timing: Timing


PIPELINES: Mapping[str, Pipeline] = {
    GENERATION: Pipeline(
        GENERATION, GENERATION_QUEUE, "generator",
        Timing(per_item_timeout_s=240, item_stale_s=360, pending_stale_s=900, batch_stale_s=900),
    ),
    PUBLISH: Pipeline(
        PUBLISH, PUBLISH_QUEUE, "publisher",
        Timing(per_item_timeout_s=180, item_stale_s=300, pending_stale_s=900, batch_stale_s=900),
    ),
}


def pipeline_of_queue(queue: str) -> Pipeline:
    """The pipeline a worker of catalog queue `queue` runs."""
    for pipeline in PIPELINES.values():
        if pipeline.queue == queue:
            return pipeline
    raise KeyError(f"queue {queue!r} runs no listings pipeline")


def generate_with(generator: Generator) -> Perform:
    """The generation step: a provider refusal is permanent, anything else is retried."""

    def perform(request: WorkRequest, timeout_s: float) -> str:
        try:
            return generator.generate(
                GenerationRequest(request.key.tenant, request.idempotency_key, request.payload), timeout_s
            )
        except ProviderRejected as exc:
            raise PermanentFailure(str(exc)) from None

    return perform


def publish_with(publisher: Publisher) -> Perform:
    """The publish step: a provider refusal is permanent, anything else is retried."""

    def perform(request: WorkRequest, timeout_s: float) -> str:
        try:
            return publisher.publish(
                PublishRequest(request.key.tenant, request.idempotency_key, request.payload), timeout_s
            )
        except ProviderRejected as exc:
            raise PermanentFailure(str(exc)) from None

    return perform


def real_perform(pipeline: Pipeline, settings: Settings) -> Perform:
    """The real adapter of a pipeline's provider, at the URL the function was configured with."""
    url = settings.provider_url(pipeline.provider)
    if pipeline.kind == GENERATION:
        return generate_with(HttpGenerator(url))
    return publish_with(HttpPublisher(url))


def build_store(settings: Settings, clock: Clock) -> WorkStore:
    quota = QuotaStore(settings.table(QUOTA_TABLE), clock)
    return WorkStore(settings.table(BATCHES_TABLE), settings.table(ITEMS_TABLE), quota, clock)


def build_wakeups(settings: Settings, sqs: Any) -> dict[str, SqsWakeups]:
    """The wake-up queue of every pipeline this function was granted."""
    return {
        kind: SqsWakeups(sqs, settings.queue(pipeline.queue))
        for kind, pipeline in PIPELINES.items()
        if pipeline.queue in settings.queues
    }
