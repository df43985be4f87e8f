"""Catalog entries of listings (seed 003): batch, item and quota tables, the two work queues,
and the reclaim job that heals them."""

from jobfence.registry import JobSpec, QueueSpec, TableSpec
from jobfence.work import OPEN_INDEX_SPEC, RECLAIM_INDEX_SPEC
from jobs.listings.pipelines import (
    BATCHES_TABLE,
    GENERATION,
    GENERATION_QUEUE,
    ITEMS_TABLE,
    PIPELINES,
    PUBLISH,
    PUBLISH_QUEUE,
    QUOTA_TABLE,
)

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
    ),
    TableSpec(
        name=ITEMS_TABLE,
        subsystem=SUBSYSTEM,
        partition_key=("batch_key", "S"),
        sort_key=("item_id", "S"),
        indexes=(RECLAIM_INDEX_SPEC,),
        description="one row per item (the truth); sparse index of live items by updated_at",
    ),
    TableSpec(
        name=QUOTA_TABLE,
        subsystem=SUBSYSTEM,
        partition_key=("tenant", "S"),
        description="per-tenant quota of paid actions: limit, available, reserved, refunded",
    ),
)

# What a worker and the reclaimer call on the work tables: claims, settles and refunds are conditional
# updates (in transactions), reads are a batch row, item queries and a BatchGet of claimed items.
# Only the producers' store puts batches and items (they are not catalog entries).
_WORKER_TABLES = {BATCHES_TABLE: "get+query+update", ITEMS_TABLE: "batch_get+query+update", QUOTA_TABLE: "update"}
_RECLAIM_TABLES = {BATCHES_TABLE: "get+query+update", ITEMS_TABLE: "query+update", QUOTA_TABLE: "update"}


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
        queues=(GENERATION_QUEUE, PUBLISH_QUEUE),
        description="re-drive stale items of both pipelines and finalize abandoned batches from their rows",
    ),
)
