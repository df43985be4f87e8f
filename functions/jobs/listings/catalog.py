"""Catalog entries of listings (seed 003): batch, item and quota tables, the two pipelines and
their work queues, and the reclaim job that heals them.

    generation  listing text from an item's input     per-item 240 s < item stale 6 min < batch stale 15 min
    publish     a listing onto the marketplace        per-item 3 min < item stale 5 min < batch stale 15 min

Data only: the builders of a pipeline's worker are in `jobs.listings.pipelines`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jobfence.indexes import OPEN_INDEX_SPEC
from jobfence.registry import JobSpec, QueueSpec, TableSpec
from jobfence.work.timing import Timing

GENERATION = "generation"
PUBLISH = "publish"

BATCHES_TABLE = "listing_batches"
ITEMS_TABLE = "listing_items"
QUOTA_TABLE = "listing_quota"
GENERATION_QUEUE = "listing_generation"
PUBLISH_QUEUE = "listing_publish"


@dataclass(frozen=True)
class Pipeline:
    """One listings pipeline: the queue that wakes its workers, the provider they call, its timing, and the
    share of a batch's items that may fail before the rest of the batch is failed without being attempted."""

    kind: str
    queue: str  # catalog queue name
    provider: str  # catalog provider name (PROVIDER_<NAME>_URL)
    timing: Timing
    # Step Functions' ToleratedFailurePercentage: once more than this share of a batch's items failed, its
    # pending items are failed (refunding their quota) and it finalizes `failed_threshold`. None: no threshold.
    tolerated_failure_pct: float | None = None
    # At most this many of one tenant's items in flight at once (`jobfence.work.fairness`); a worker defers
    # the rest, waking them again after `defer_delay_s`. None: no cap (SQS fair queues alone order tenants).
    tenant_in_flight_cap: int | None = None
    defer_delay_s: int = 30

    def __post_init__(self) -> None:
        if self.tolerated_failure_pct is not None and not 0 <= self.tolerated_failure_pct <= 100:
            raise ValueError(f"pipeline {self.kind!r}: a tolerated failure percentage is within 0..100")
        if self.tenant_in_flight_cap is not None and self.tenant_in_flight_cap < 1:
            raise ValueError(f"pipeline {self.kind!r}: an in-flight cap is at least 1 (None: no cap)")
        if not 1 <= self.defer_delay_s <= 900:
            raise ValueError(f"pipeline {self.kind!r}: a deferral delay is within 1..900 s (SQS DelaySeconds)")


# A worker takes batches of 10 and each queue runs at most 3 workers (`_queue` below): 30 items in flight per
# pipeline. One tenant may hold 20 of them, so a tenant alone still runs at two thirds of the fleet while a
# noisy one always leaves a whole SQS batch's worth (10) to the others (docs/benchmarks.md, tenant fairness).
TENANT_IN_FLIGHT_CAP = 20

PIPELINES: Mapping[str, Pipeline] = {
    GENERATION: Pipeline(
        GENERATION,
        GENERATION_QUEUE,
        "generator",
        Timing(per_item_timeout_s=240, item_stale_s=360, pending_stale_s=900, batch_stale_s=900),
        tolerated_failure_pct=25,  # a provider that refuses a quarter of the inputs is down or misused
        tenant_in_flight_cap=TENANT_IN_FLIGHT_CAP,
    ),
    PUBLISH: Pipeline(
        PUBLISH,
        PUBLISH_QUEUE,
        "publisher",
        Timing(per_item_timeout_s=180, item_stale_s=300, pending_stale_s=900, batch_stale_s=900),
        tolerated_failure_pct=10,  # publishing is paid per listing: stop early when the marketplace refuses
        tenant_in_flight_cap=TENANT_IN_FLIGHT_CAP,
    ),
}
TOLERATED_FAILURE_PCT: Mapping[str, float | None] = {kind: p.tolerated_failure_pct for kind, p in PIPELINES.items()}


def pipeline_of_queue(queue: str) -> Pipeline:
    """The pipeline a worker of catalog queue `queue` runs."""
    for pipeline in PIPELINES.values():
        if pipeline.queue == queue:
            return pipeline
    raise KeyError(f"queue {queue!r} runs no listings pipeline")


SUBSYSTEM = "listings"
WORKER_HANDLER = "handlers.worker.handler"
WORKER_MARGIN_S = 60  # claim, outcome writes and roll-up around the per-item timeout

TABLES = (
    TableSpec(
        name=BATCHES_TABLE,
        subsystem=SUBSYSTEM,
        partition_key=("tenant", "S"),
        sort_key=("batch_id", "S"),
        indexes=(OPEN_INDEX_SPEC,),
        description="one row per batch: status, counters (a roll-up), heartbeat; sparse index of open batches",
        tenant_scoped=True,  # batch rows: tenant; tallies: tenant#batch#r<shard>
    ),
    TableSpec(
        name=ITEMS_TABLE,
        subsystem=SUBSYSTEM,
        partition_key=("batch_key", "S"),
        sort_key=("item_id", "S"),
        description="one row per item (the truth); no index: the reclaimer queries the open batches' partitions",
        tenant_scoped=True,  # tenant#batch#shard
    ),
    TableSpec(
        name=QUOTA_TABLE,
        subsystem=SUBSYSTEM,
        partition_key=("tenant", "S"),
        description="per-tenant quota of paid actions: limit, available, reserved, refunded",
        tenant_scoped=True,  # quota rows: tenant; in-flight holds: tenant#in_flight#kind
    ),
)

# What a worker and the reclaimer call on the work tables: claims, settles and refunds are conditional
# updates (some in transactions), reads are a batch row, item queries, a BatchGet of items claimed in a
# transaction and the GetItem that reads a refused claim's missing row (DynamoDB returns no image for it).
# Only the producers' store puts batches and items (they are not catalog entries).
_WORKER_TABLES = {
    BATCHES_TABLE: "get+query+update",
    ITEMS_TABLE: "batch_get+get+query+update",
    QUOTA_TABLE: "get+update",
}  # get: the in-flight holds row (jobfence.work.fairness)
# The reclaimer also reads the open batches' shard counts, a BatchGet of their rows (BatchStore.open_batches).
_RECLAIM_TABLES = {BATCHES_TABLE: "get+batch_get+query+update", ITEMS_TABLE: "query+update", QUOTA_TABLE: "update"}
# Its writes are not fenced with its lease, on purpose (docs/architecture.md, jobfence.reclaim): each one re-checks
# the row exactly as the index showed it (status, updated_at, attempts), so a paused reclaimer's late write can
# only move a row any reclaimer would move the same way; a refund goes in the same transaction as its item.
_RECLAIM_UNFENCED = {
    BATCHES_TABLE: "a finalize writes its recount once, conditioned on the batch still open and not reopened since",
    ITEMS_TABLE: "each re-drive re-checks the item exactly as the index showed it (status, updated_at, attempts)",
    QUOTA_TABLE: "a refund commits only with its item's move to failed, in one conditioned transaction",
}


def _queue(kind: str, description: str) -> QueueSpec:
    pipeline = PIPELINES[kind]
    worker_timeout = pipeline.timing.per_item_timeout_s + WORKER_MARGIN_S
    return QueueSpec(
        name=pipeline.queue,
        subsystem=SUBSYSTEM,
        handler=WORKER_HANDLER,
        worker_timeout_s=worker_timeout,
        visibility_timeout_s=6 * worker_timeout,
        max_receive_count=5,
        batch_size=10,
        max_concurrency=3,
        tables=_WORKER_TABLES,
        queues=(pipeline.queue,),  # a worker re-sends delayed wake-ups for retries to its own queue
        providers=(pipeline.provider,),
        description=description,
    )


QUEUES = (
    _queue(GENERATION, "wake-ups of listing generation items (one per item, keys only)"),
    _queue(PUBLISH, "wake-ups of marketplace publish items (one per item, keys only)"),
)

JOBS = (
    JobSpec(
        name="reclaim_listings",
        subsystem=SUBSYSTEM,
        entry="jobs.listings.reclaim:build_reclaim_listings",
        schedule="rate(5 minutes)",
        interval_s=300,
        timeout_s=300,
        tables=_RECLAIM_TABLES,
        unfenced=_RECLAIM_UNFENCED,
        queues=(GENERATION_QUEUE, PUBLISH_QUEUE),
        description="re-drive stale items of both pipelines and finalize abandoned batches from their rows",
    ),
)
