"""Cancel a batch: its pending items end `cancelled` with their quota refunded once; it finalizes `cancelled`.

The batch row records the cancel first, so every actor sees it before any item row is touched:

    record    batch row (`BatchStore.record_cancel`): SET cancel_requested_by, cancel_requested_at
              condition: the row exists, is open and records no cancel yet (the first asker is kept).
              A refusal's old image says why: a cancel recorded already (an earlier call, or this
              call's own write re-sent after a lost reply): continue it; a final batch: refused
    pass      every pending item, page by page over the batch's shards:
              pending -> cancelled, quota reserved -> refunded and the tenant's unit given back,
              in one transaction conditioned on `status = pending` and `quota = reserved` (the
              item store's terminal write, `ItemStore.cancel_pending`): a re-sent, repeated or raced
              write never refunds twice; an item claimed meanwhile is left to its worker
    finalize  the batch store's recount: pending items that appeared since (a running item released
              for another attempt) are cancelled the same way; with no item live, the batch
              row is finalized `cancelled` with the recount's counters (`cancelled` among them)

Who else reads the record:

    worker    after its claims, one consistent read of the batch's cancel
              (`BatchStore.recorded_cancel`): a claim applied after the cancel was recorded is
              cancelled unrun under the worker's own claim token (refunded); a claim applied
              before it runs and finishes, or is refused at its next write when the item was
              moved on meanwhile (its old image says so)
    finalize  any recount of a cancelled batch cancels its pending items and finalizes it
              `cancelled`; a finalize that read the row before the cancel is refused
              (the cancel is part of its condition), so a cancelled batch never ends `finalized`
    retry     retry-failed refuses a cancelled batch, and its transaction re-checks that no
              cancel was recorded, so a cancel racing it wins cleanly or comes after it

Every step is safe to repeat, so a cancel that crashed anywhere is continued by asking again.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.dynamo import aws_call
from jobfence.work.batches import BatchStore
from jobfence.work.items import ItemStore
from jobfence.work.keys import BatchRef, BatchStatus, ItemStatus, QuotaHold, cancel_reason

PAGE_ITEMS = 100  # pending items a query page of the pass holds (the pass keeps one page in memory)


@dataclass(frozen=True)
class CancelResult:
    """What a batch's cancel has done so far, from its rows after this call."""

    ref: BatchRef
    status: BatchStatus  # `cancelled` once no item is live; `open` while some still run
    cancelled: int  # items cancelled (by this call or an earlier one, a worker or a finalize)
    refunded: int  # units of quota the cancelled items gave back (one each that held one)
    running: int  # items still running: they finish, or end cancelled at their next claim
    requested_by: str  # who asked first (kept on the batch row)
    requested_at: int  # when that was recorded (epoch ms)
    recorded_now: bool  # this call recorded the cancel (False: an earlier call had; this one continued it)


def cancel_batch(batches: BatchStore, items: ItemStore, ref: BatchRef, requested_by: str) -> CancelResult:
    """Record the cancel, cancel every pending item, finalize from the rows; the rows' account of it.

    Bounded: the pass reads the batch's item rows page by page (pending ones
    only, `PAGE_ITEMS` at a time) and writes one transaction per pending item.
    A call that crashes anywhere is continued by the next (items already
    cancelled are no longer pending; nothing is refunded twice).
    """
    batch, recorded_now = batches.record_cancel(ref, requested_by)
    asked_by, asked_at = batch.cancel_requested_by or requested_by, batch.cancel_requested_at
    assert asked_at is not None  # recorded now or before
    reason = cancel_reason(asked_by)
    if not batch.status.final:
        for key in items.pending_keys(ref, batch.shards, PAGE_ITEMS):
            items.cancel_pending(key, reason)
        batch = batches.finalize(ref) or batch
    counts = {s: 0 for s in ItemStatus}
    refunded = 0
    with aws_call(f"counting the items of batch {ref}"):
        for row in items.batch_items(ref, batch.shards, ["status", "quota"]):
            counts[ItemStatus(row.status)] += 1
            refunded += row.status == ItemStatus.CANCELLED.value and row.quota == QuotaHold.REFUNDED.value
    return CancelResult(
        ref=ref,
        status=batch.status,
        cancelled=counts[ItemStatus.CANCELLED],
        refunded=refunded,
        running=counts[ItemStatus.RUNNING],
        requested_by=asked_by,
        requested_at=asked_at,
        recorded_now=recorded_now,
    )
