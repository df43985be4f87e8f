"""Durable batches over SQS (seed 003): batch and item rows, the producer and the worker.

**The item row is the truth; an SQS message is only a wake-up call** carrying
the keys (tenant, batch, item) and the shard the item's row lives in. A duplicate message loses the claim and is
acknowledged; a lost one is re-driven by the reclaimer (`jobfence.reclaim`).

The package, by responsibility:

    timing        Timing: one pipeline's per-item timeout, stale limits and attempts cap (catalog data)
    keys          states (ItemStatus, BatchStatus, QuotaHold), keys (BatchRef, ItemKey),
                  the wake-up body, the row views (ItemRow, BatchRow, BatchReport)
    stale         what the reclaimer reads and decides (OpenBatches, StaleItem, StaleVerdict)
    items         ItemStore: the items table (its model and index): puts, claims, outcomes, the
                  reclaimer's stale reads and writes, the pending items' cancel and threshold fail
    transactions  the item store's multi-item transactions: claim, reopen failed items
    batches       BatchStore: the batch rows (their model and the open index): open, checkpoint, reads,
                  recount and finalize, retry-failed's reopening, the cancel's record, the open batches
    rollup        Rollups: the roll-up tallies (their model): written by each writer, summed on read
    refusals      the UpdateItem that returns a refused row's old image (items and tallies)
    store         WorkStore: the three role stores over one pair of tables (and one session)
    wakeups       Wakeups: where wake-up messages go (the port)
    sqs           SqsWakeups: the port's SQS adapter
    producer      Producer: create a batch and wake a worker for each item
    worker        Worker: claim, run, record, roll up one SQS batch
    pipeline      WorkerPipeline: what an app gives for a queue's worker (jobfence.handler.worker_handler)
    fairness      TenantGate: a pipeline's per-tenant in-flight cap (holds taken before the claim)
    operations    BatchOperations: an operator's describe, retry-failed and cancel
    cancel        CancelResult: cancel a batch (recorded on its row; pending items cancelled, refunded once)

Timeline of one item (generation: per-item 240 s < item stale 6 min < batch stale 15 min):

    producer  put row pending, attempts 0 ............................. wake-up sent
    worker    claim: pending -> running, attempts+1, token T, quota reserved (one transaction
              per SQS batch, with one quota Update per tenant)
              run the provider call, bounded by the per-item timeout
              complete (condition token = T): running -> completed        | or
              release (token = T, attempts < 5): running -> pending + error, delayed wake-up | or
              fail (token = T): running -> failed + error, quota refunded in the same transaction
              roll-up: one write per batch per SQS batch of the worker's own tally row (its cumulative
              counts + updated_at = heartbeat), spread over ROLLUP_SHARDS partition keys; when the
              tallies say "maybe done", finalize = recount item rows
    reclaim   running and updated_at < now - item stale  -> pending (attempts < 5) or failed
              pending and updated_at < now - pending stale -> wake-up re-sent
              open batch and updated_at < now - batch stale -> finalize from rows
    operator  cancel: recorded on the batch row, pending -> cancelled (refunded once); a claim after it is
              cancelled unrun; the batch finalizes `cancelled` from its rows

A completed item costs two base-table item writes (claim, complete) plus its
share of one quota update and one roll-up (tally) write per SQS batch: 2.2 writes per item
with batches of 10 (see docs/benchmarks.md).
"""

from jobfence.exports import on_demand, public_names

_MODULES = {
    "jobfence.work.keys": (
        "CLAIM_ROUNDS ID_PATTERN KEY_WRITES_PER_S LIVE MAX_ERROR_CHARS MAX_ITEMS_PER_BATCH MAX_PAYLOAD_CHARS MAX_RESULT_REF_CHARS "
        "MAX_SHARDS PEAK_ITEMS_PER_S ROLLUP_SHARDS SEND_CHUNK TERMINAL WRITES_PER_ITEM BatchConflict BatchDelta "
        "BatchRef BatchRow BatchStatus ItemKey ItemRow ItemStatus "
        "PermanentFailure QuotaHold RollupTally Tallies bounded_error "
        "shard_of shards_for threshold_error tolerated_failures"
    ),
    "jobfence.work.claims": "Claim ClaimState Perform WorkRequest parse_wakeup",
    "jobfence.work.inputs": "ItemInput",
    "jobfence.work.report": "BatchReport",
    "jobfence.work.stale": "OpenBatch OpenBatches StaleCutoffs StaleItem StaleVerdict",
    "jobfence.work.timing": "Timing",
    "jobfence.indexes": "OPEN_INDEX OPEN_INDEX_SPEC",
    "jobfence.work.operations": "BatchOperations RetryResult",
    "jobfence.work.cancel": "CancelResult",
    "jobfence.work.pipeline": "WorkerPipeline",
    "jobfence.work.producer": "Producer SubmitResult",
    "jobfence.work.store": "WorkStore",
    "jobfence.work.items": "ItemStore",
    "jobfence.work.batches": "BatchStore",
    "jobfence.work.rollup": "Rollups",
    "jobfence.work.sqs": "SqsWakeups",
    "jobfence.work.wakeups": "Wakeups",
    "jobfence.work.fairness": "Admission TenantGate",
    "jobfence.work.worker": "Attempt MessageFailed MessageOutcome RoundResult Tally Worker",
}
# Importing the package loads none of these: a catalog, or a function that needs only the keys, never loads
# pynamodb and the stores (docs/benchmarks.md, cold start).
__getattr__ = on_demand(__name__, _MODULES)
__all__ = public_names(_MODULES)
