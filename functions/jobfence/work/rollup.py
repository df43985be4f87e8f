"""The work store's roll-ups, recount and finalize: how a batch row learns its items are done.

The item rows are the truth; roll-ups are a hint that says when to recount.
A batch at 10,000 items/s is rolled up 1,000 times a second (one write per SQS
batch of 10), more than DynamoDB takes on one partition key, so a roll-up never
writes the batch row: each writer (a worker container, a reclaimer) keeps its
own cumulative tally of the batch and writes it whole to its own tally row,
whose partition key is the batch and one of `ROLLUP_SHARDS` shards of the
writer. The batch's counters while it is open are the sum of its tallies, and
its heartbeat is the newest tally.

Timeline of a batch (docs/architecture.md, "Durable batches"):

    open_batch    batch row: status open, total N, reopened 0, updated_at (open index entry)
    roll-up       tally row of writer W: SET completed, failed, seq = n, updated_at
                  condition: seq < n (or no row): a re-sent or late older tally is refused,
                  and its refusal's old image (seq >= n) says it was applied already
    maybe done    sum of the tallies (+ swept - reopened) >= total, or a cancel recorded: recount
    recount       rows counted; when they number N and none is live:
    finalize      batch row: SET counters = recount, status finalized     if still open and nothing
                  (failed_threshold when more failed than it tolerates:    reopened since, and no
                  its pending rows are failed first, each refunding once;  cancel since it was read
                  cancelled when a cancel is recorded: its pending rows
                  are cancelled first, each refunding once)
    reclaimer     open batch whose batch row is older than batch-stale: a tally newer than that is
                  its heartbeat, copied to the batch row (the open index entry moves once per
                  batch-stale period, not per roll-up); otherwise recount and finalize
    (finalized)   the batch row is never written again, except by retry_failed, which reopens it
                  explicitly in the same transaction as the items it reopens (reopened + k)

Nothing here double-counts: a tally is absolute, and only its own writer
writes it, one request at a time.
"""

from __future__ import annotations

import dataclasses
import uuid
import zlib
from typing import TYPE_CHECKING, Any

from pynamodb.exceptions import PynamoDBException

from jobfence.binding import ModelStore, bind
from jobfence.dynamo import aws_call, classify, raise_store_error
from jobfence.errors import ErrorKind
from jobfence.once import update_once
from jobfence.work.cancel import cancel_reason
from jobfence.work.keys import (
    ROLLUP_SHARDS,
    BatchRef,
    BatchRow,
    BatchStatus,
    ItemKey,
    ItemStatus,
    RollupTally,
    threshold_error,
)
from jobfence.work.schema import _Tally, batch_row

if TYPE_CHECKING:
    from jobfence.work.store import WorkStore


def tally_partition(ref: BatchRef, shard: int) -> str:
    """The partition key of one shard of a batch's tallies ('#' never occurs in a tenant id)."""
    return f"{ref.batch_key}#r{shard}"


def shard_of(writer: str) -> int:
    return zlib.crc32(writer.encode()) % ROLLUP_SHARDS


class Rollups(ModelStore):
    """Read and write the tally rows of the batches table."""

    def __init__(self, batches_table: str) -> None:
        self._model: Any = bind(_Tally, batches_table)

    def write(self, store: WorkStore, ref: BatchRef, tally: RollupTally) -> None:
        """Write the writer's whole tally; a refusal means this tally (or a newer one) is there already."""
        t = self._model
        row = t(tally_partition(ref, shard_of(tally.writer)), tally.writer)
        newer = t.seq.does_not_exist() | (t.seq < tally.seq)
        actions = [
            t.completed.set(tally.completed),
            t.failed.set(tally.failed),
            t.seq.set(tally.seq),
            t.updated_at.set(store.now_ms()),
        ]
        try:
            store._update_returning_old(row, actions, newer)
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as a StoreError
            if classify(exc) is not ErrorKind.CONDITION_FAILED:
                raise_store_error(exc, f"rolling up batch {ref}")
            # the old image holds seq >= ours: our earlier send (reply lost) or a later one was applied

    def sums(self, ref: BatchRef) -> tuple[int, int, int, int]:
        """(completed, failed, roll-ups, newest updated_at) over every tally of the batch."""
        completed = failed = rollups = newest = 0
        with aws_call(f"reading the roll-ups of batch {ref}"):
            for shard in range(ROLLUP_SHARDS):
                for row in self._model.query(tally_partition(ref, shard), consistent_read=True):
                    completed += int(row.completed or 0)
                    failed += int(row.failed or 0)
                    rollups += int(row.seq or 0)
                    newest = max(newest, int(row.updated_at))
        return completed, failed, rollups, newest


def batch_view(store: WorkStore, raw: Any) -> BatchRow:
    """The batch as the operator sees it: a final batch's own row; an open one's with its tallies summed in.

    Roll-ups count each reopened item's earlier failure too, and never the
    pending items a recount failed past the threshold (`swept`), so both are
    corrected for; the result is a hint that a recount settles.
    """
    row = batch_row(raw)
    if row.status.final:
        return row
    completed, failed, rollups, newest = store._rollups.sums(row.ref)
    failed = max(failed + int(raw.swept or 0) - row.reopened, 0)
    return dataclasses.replace(
        row, completed=completed, failed=failed, rollups=rollups, updated_at=max(row.updated_at, newest)
    )


def recount_and_write(store: WorkStore, ref: BatchRef, seen: BatchRow, heartbeat: bool = False) -> BatchRow | None:
    """Recount, then one conditional write of the batch row; None if the batch moved on since `seen`.

    `seen` is read before the recount, so an item reopened after it (which
    moves `reopened` in the same transaction) refuses the finalize; items
    only ever become terminal otherwise, so a recount that found every row
    terminal is still true when the write lands. Past the batch's failure
    threshold, its pending rows are failed first (`jobfence.work.keys.threshold_error`).
    """
    counts = {s: 0 for s in ItemStatus}
    pending: list[ItemKey] = []
    attrs = ["batch_key", "item_id", "status"]
    with aws_call(f"recounting batch {ref}"):
        for row in store.batch_items(ref, seen.shards, attrs):
            counts[ItemStatus(row.status)] += 1
            if row.status == ItemStatus.PENDING.value:
                pending.append(ItemKey.of_row(row.batch_key, row.item_id))
    tolerated = seen.tolerated_failures
    over = tolerated is not None and counts[ItemStatus.FAILED] > tolerated
    swept = 0
    if seen.cancel_requested and pending:  # cancelled: what has not started never will (a claimed one finishes)
        reason = cancel_reason(seen.cancel_requested_by)
        cancelled = sum(store.cancel_pending(key, reason) for key in pending)
        counts[ItemStatus.PENDING] -= cancelled
        counts[ItemStatus.CANCELLED] += cancelled
    elif over and pending:  # past its failure threshold: fail what has not started (a claimed one is left alone)
        assert tolerated is not None  # over implies a threshold
        reason = threshold_error(counts[ItemStatus.FAILED], seen.total, tolerated)
        swept = sum(
            store._fail_terminally(key, store._items.status == ItemStatus.PENDING.value, reason) for key in pending
        )
        counts[ItemStatus.PENDING] -= swept
        counts[ItemStatus.FAILED] += swept
    now = store.now_ms()
    live = counts[ItemStatus.PENDING] + counts[ItemStatus.RUNNING]
    done = live == 0 and sum(counts.values()) == seen.total
    final = BatchStatus.FAILED_THRESHOLD if over else BatchStatus.FINALIZED
    if seen.cancel_requested:
        final = BatchStatus.CANCELLED
    b = store._batches
    actions = [b.recounts.add(1)]
    if swept:
        actions.append(b.swept.add(swept))
    if done:
        actions += [
            b.completed.set(counts[ItemStatus.COMPLETED]),
            b.failed.set(counts[ItemStatus.FAILED]),
            b.status.set(final.value),
            b.cancelled.set(counts[ItemStatus.CANCELLED]),
            b.finalized_at.set(now),
            b.open_key.remove(),
        ]
    if done or heartbeat:
        actions.append(b.updated_at.set(now))
    still_open = b.status == BatchStatus.OPEN.value
    no_reopen_since = (
        (b.reopened == seen.reopened) if seen.reopened else (b.reopened.does_not_exist() | (b.reopened == 0))
    )
    # a cancel recorded after `seen` was read refuses it: a cancelled batch never ends `finalized`
    same_cancel = b.cancel_requested_at.exists() if seen.cancel_requested else b.cancel_requested_at.does_not_exist()
    # once per recount: a copy re-sent after a lost reply does not add to `recounts` and `swept` again
    applied = update_once(
        b(ref.tenant, ref.batch_id),
        actions,
        still_open & no_reopen_since & same_cancel,
        uuid.uuid4().hex,
        f"finalizing batch {ref}",
    )
    return store.batch(ref) if applied else None


def carry_heartbeat(store: WorkStore, ref: BatchRef, seen: BatchRow) -> BatchRow:
    """Copy the newest tally's time to the open batch row (moves its open-index entry once a stale period)."""
    b = store._batches
    try:
        b(ref.tenant, ref.batch_id).update(
            actions=[b.updated_at.set(seen.updated_at)],
            condition=(b.status == BatchStatus.OPEN.value) & (b.updated_at < seen.updated_at),
        )
    except PynamoDBException as exc:
        if classify(exc) is not ErrorKind.CONDITION_FAILED:
            raise_store_error(exc, f"carrying the heartbeat of batch {ref}")
        # finalized meanwhile, or a newer heartbeat is there already
    return seen
