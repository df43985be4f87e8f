"""Cancel a batch: its pending items end `cancelled` with their quota refunded once; it finalizes `cancelled`.

The batch row records the cancel first, so every actor sees it before any item row is touched:

    record    batch row: SET cancel_requested_by, cancel_requested_at
              condition: the row exists, is open and records no cancel yet (the first asker is kept).
              A refusal's old image says why: a cancel recorded already (an earlier call, or this
              call's own write re-sent after a lost reply): continue it; a final batch: refused
    pass      every pending item, page by page over the batch's shards:
              pending -> cancelled, quota reserved -> refunded and the tenant's unit given back,
              in one transaction conditioned on `status = pending` and `quota = reserved` (the
              store's terminal write, `WorkStore.cancel_pending`): a re-sent, repeated or raced
              write never refunds twice; an item claimed meanwhile is left to its worker
    finalize  the store's recount: pending items that appeared since (a running item released
              for another attempt) are cancelled the same way; with no item live, the batch
              row is finalized `cancelled` with the recount's counters (`cancelled` among them)

Who else reads the record:

    worker    after its claim transaction, one consistent read of the batch's cancel: a claim
              applied after the cancel was recorded is cancelled unrun under the worker's own
              claim token (refunded); a claim applied before it runs and finishes, or is refused
              at its next write when the item was moved on meanwhile (its old image says so)
    finalize  any recount of a cancelled batch cancels its pending items and finalizes it
              `cancelled`; a finalize that read the row before the cancel is refused
              (the cancel is part of its condition), so a cancelled batch never ends `finalized`
    retry     retry-failed refuses a cancelled batch, and its transaction re-checks that no
              cancel was recorded, so a cancel racing it wins cleanly or comes after it

Every step is safe to repeat, so a cancel that crashed anywhere is continued by asking again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobfence.dynamo import aws_call, update_or_refusal
from jobfence.errors import StoreError
from jobfence.work.keys import BatchRef, BatchRow, BatchStatus, ItemKey, ItemStatus, QuotaHold

if TYPE_CHECKING:
    from jobfence.work.store import WorkStore

MAX_REQUESTED_BY = 128  # the operator's name as recorded (the same bound as a retry's)
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


def cancelled_error(ref: BatchRef, requested_by: str | None) -> str:
    """Why retry-failed refuses a cancelled batch (one line)."""
    return f"batch {ref} was cancelled by {requested_by or 'an operator'}: retry-failed does not reopen it"


def cancel_reason(requested_by: str | None) -> str:
    """The error a cancelled item carries."""
    return f"cancelled by {requested_by or 'an operator'} before it ran"


def record_cancel(store: WorkStore, ref: BatchRef, requested_by: str) -> tuple[BatchRow, bool]:
    """Record the cancel on the batch row (the first asker kept): the row after, and whether this call recorded it."""
    if not requested_by or len(requested_by) > MAX_REQUESTED_BY:
        raise ValueError(f"a cancel needs who asked (1..{MAX_REQUESTED_BY} characters)")
    b = store._batches
    asked = b.tenant.exists() & (b.status == BatchStatus.OPEN.value) & b.cancel_requested_at.does_not_exist()
    refused = update_or_refusal(
        b(ref.tenant, ref.batch_id),
        [b.cancel_requested_by.set(requested_by), b.cancel_requested_at.set(store.now_ms())],
        asked,
        f"cancelling batch {ref}",
    )
    if refused is not None:
        if not refused:
            raise StoreError(f"no batch {ref}")
        if refused.get("cancel_requested_at") is None:  # final, and not by a cancel
            raise StoreError(f"batch {ref} is {refused.get('status')}: only an open batch can be cancelled")
    row = store.batch(ref)
    if row is None:
        raise StoreError(f"no batch {ref}")
    return row, refused is None


def cancel_batch(store: WorkStore, ref: BatchRef, requested_by: str) -> CancelResult:
    """Record the cancel, cancel every pending item, finalize from the rows; the rows' account of it.

    Bounded: the pass reads the batch's item rows page by page (pending ones
    only, `PAGE_ITEMS` at a time) and writes one transaction per pending item.
    A call that crashes anywhere is continued by the next (items already
    cancelled are no longer pending; nothing is refunded twice).
    """
    batch, recorded_now = record_cancel(store, ref, requested_by)
    asked_by, asked_at = batch.cancel_requested_by or requested_by, batch.cancel_requested_at
    assert asked_at is not None  # recorded now or before
    reason = cancel_reason(asked_by)
    if not batch.status.final:
        m = store._items
        pending = m.status == ItemStatus.PENDING.value
        for partition in ref.item_partitions(batch.shards):
            with aws_call(f"reading the pending items of batch {ref}"):  # one page at a time, as it is cancelled
                for row in m.query(
                    partition,
                    filter_condition=pending,
                    consistent_read=True,
                    attributes_to_get=["batch_key", "item_id"],
                    page_size=PAGE_ITEMS,
                ):
                    store.cancel_pending(ItemKey.of_row(row.batch_key, row.item_id), reason)
        batch = store.finalize(ref) or batch
    counts = {s: 0 for s in ItemStatus}
    refunded = 0
    with aws_call(f"counting the items of batch {ref}"):
        for row in store.batch_items(ref, batch.shards, ["status", "quota"]):
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


def recorded_cancel(store: WorkStore, ref: BatchRef) -> str | None:
    """Who cancelled the batch, when its row records a cancel (one consistent read of two attributes); else None.

    The worker's read after its claim: a claim applied after the cancel was
    recorded sees it here (the read comes after the claim).
    """
    b = store._batches
    try:
        with aws_call(f"reading the cancel of batch {ref}"):
            row = b.get(
                ref.tenant,
                ref.batch_id,
                consistent_read=True,
                attributes_to_get=["cancel_requested_by", "cancel_requested_at"],
            )
    except b.DoesNotExist:
        return None
    return (row.cancel_requested_by or "an operator") if row.cancel_requested_at is not None else None
