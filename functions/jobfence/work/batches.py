"""The batch store: every read and write of the batch rows (open, checkpoint, read, finalize, reopen, cancel).

    batches  tenant (key) | batch_id (sort) | kind | status | total | completed | failed
             | enqueued | rollups | recounts | created_by | created_at | updated_at
             | finalized_at | retries | retried_by | retried_at | reopened | tolerated_failures
             | swept | shards | cancelled | cancel_requested_by | cancel_requested_at | applied_ids
             | applied_ids_prev | open_key (sparse GSI "by_open")
             | rru | wru | index_rru | index_wru | requests | cost_usd (the items' summed costs)

The same table holds the roll-up tallies (`jobfence.work.rollup`, partition
keys with '#'). `shards` is the batch's item-shard count (`keys.shards_for`;
absent on rows written before it was recorded: `MAX_SHARDS`); `open_key` =
kind exists only while a batch is open, and the index sorts on `updated_at`.

The item rows (`jobfence.work.items`) are the truth; the batch row's counters
are a hint that the item rows settle (recount). Timeline of a batch
(docs/architecture.md, "Durable batches"):

    open_batch    batch row: status open, total N, reopened 0, updated_at (open index entry)
    checkpoint    enqueued = k once the first k wake-ups are sent (never moved back)
    roll-up       a tally row per writer (`jobfence.work.rollup`): while open, the batch as read
                  is its row with the tallies summed in, and its heartbeat is the newest tally
    maybe done    sum of the tallies (+ swept - reopened) >= total, or a cancel recorded: recount
    recount       rows counted, their costs summed and SET on the batch row (every recount: a
                  repeated one writes the same sum); when they number N and none is live:
    finalize      batch row: SET counters = recount, status finalized     if still open and nothing
                  (failed_threshold when more failed than it tolerates:    reopened since, and no
                  its pending rows are failed first, each refunding once;  cancel since it was read
                  cancelled when a cancel is recorded: its pending rows
                  are cancelled first, each refunding once)
    reclaimer     open batch whose batch row is older than batch-stale: a tally newer than that is
                  its heartbeat, copied to the batch row (the open index entry moves once per
                  batch-stale period, not per roll-up); otherwise recount and finalize
    cancel        record_cancel: the first asker kept on the row (`jobfence.work.cancel`)
    (finalized)   the batch row is never written again, except by reopen_failed, which reopens it
                  explicitly in the same transaction as the items it reopens (reopened + k)

The reclaimer reads the open-batch index once per pipeline (`open_batches`):
no open batch means no live item (a live item's batch is always open: the
producer opens the row before it puts items, finalize needs every row
terminal, and reopen_failed reopens the row in the transaction that reopens
items). Otherwise it learns each open batch's item-shard count (fixed when the
row is created, so a warm process keeps it: `ShardCounts`) and reads only
those batches' item partitions (`ItemStore.stale_items`).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from jobfence.binding import bind, client_of, index
from jobfence.capacity import Cost
from jobfence.clock import Clock
from jobfence.dynamo import Refused, Transaction, aws_call, caller_reads, put_row, update_row
from jobfence.errors import StoreError
from jobfence.indexes import OPEN_INDEX_SPEC
from jobfence.once import update_once
from jobfence.work.items import COST_FIELDS, ItemStore, cost_fields
from jobfence.work.keys import (
    MAX_SHARDS,
    BatchConflict,
    BatchRef,
    BatchRow,
    BatchStatus,
    ItemKey,
    ItemStatus,
    cancel_reason,
    cancelled_error,
    shards_for,
    threshold_error,
)
from jobfence.work.rollup import Rollups

if TYPE_CHECKING:  # loaded by the methods that make them: the reclaimer's, the operator's
    from jobfence.work.report import BatchReport
    from jobfence.work.stale import OpenBatches
    from jobfence.work.transactions import ReopenResult

MAX_REQUESTED_BY = 128  # the operator's name as recorded with a cancel (the same bound as a retry's)
OPEN_READ_LIMIT = 5_000  # open batches one sweep reads per pipeline (the oldest heartbeats first)
BATCH_GET_KEYS = 100  # BatchGetItem takes at most 100 keys


class _Batch(Model):
    class Meta:
        table_name = "unbound"

    tenant = UnicodeAttribute(hash_key=True)
    batch_id = UnicodeAttribute(range_key=True)
    kind = UnicodeAttribute()
    status = UnicodeAttribute()
    total = NumberAttribute()
    completed = NumberAttribute(default=0)
    failed = NumberAttribute(default=0)
    enqueued = NumberAttribute(default=0)
    rollups = NumberAttribute(default=0)
    recounts = NumberAttribute(default=0)
    created_by = UnicodeAttribute()
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    finalized_at = NumberAttribute(null=True)
    retries = NumberAttribute(default=0)
    retried_by = UnicodeAttribute(null=True)
    retried_at = NumberAttribute(null=True)
    reopened = NumberAttribute(null=True)  # items ever reopened by retry_failed (absent on old rows: 0)
    applied_ids = UnicodeSetAttribute(null=True)  # the retries recorded (jobfence.once)
    applied_ids_prev = UnicodeSetAttribute(null=True)
    tolerated_failures = NumberAttribute(null=True)  # absent: no failure threshold
    swept = NumberAttribute(null=True)  # pending items a recount failed past the threshold (never rolled up)
    shards = NumberAttribute(null=True)  # item shards, fixed at creation (absent on old rows: MAX_SHARDS)
    cancelled = NumberAttribute(null=True)  # items cancelled, written by the finalize of a cancelled batch
    cancel_requested_by = UnicodeAttribute(null=True)  # the operator's cancel (jobfence.work.cancel), once
    cancel_requested_at = NumberAttribute(null=True)
    open_key = UnicodeAttribute(null=True)
    rru = NumberAttribute(null=True)  # the sum of its item rows' costs (`Cost.fields`), SET by each recount
    wru = NumberAttribute(null=True)
    index_rru = NumberAttribute(null=True)
    index_wru = NumberAttribute(null=True)
    requests = NumberAttribute(null=True)
    cost_usd = NumberAttribute(null=True)
    by_open = index(OPEN_INDEX_SPEC)  # generated from the catalog's spec: declared once


def batch_row(row: Any) -> BatchRow:
    """The frozen view of a batch row as stored (counters as last written)."""
    return BatchRow(
        tenant=row.tenant,
        batch_id=row.batch_id,
        kind=row.kind,
        status=BatchStatus(row.status),
        total=int(row.total),
        completed=int(row.completed or 0),
        failed=int(row.failed or 0),
        enqueued=int(row.enqueued or 0),
        rollups=int(row.rollups or 0),
        recounts=int(row.recounts or 0),
        created_by=row.created_by,
        created_at=int(row.created_at),
        updated_at=int(row.updated_at),
        finalized_at=int(row.finalized_at) if row.finalized_at is not None else None,
        retries=int(row.retries or 0),
        retried_by=row.retried_by,
        retried_at=int(row.retried_at) if row.retried_at is not None else None,
        reopened=int(row.reopened or 0),
        tolerated_failures=int(row.tolerated_failures) if row.tolerated_failures is not None else None,
        shards=int(row.shards) if row.shards is not None else MAX_SHARDS,
        cancelled=int(row.cancelled or 0),
        cancel_requested_by=row.cancel_requested_by,
        cancel_requested_at=int(row.cancel_requested_at) if row.cancel_requested_at is not None else None,
        cost=Cost.of_fields(cost_fields(row)),
    )


class ShardCounts:
    """Batches' item-shard counts, kept while the process is warm (a count never changes), bounded."""

    MAX_BATCHES = 10_000

    def __init__(self) -> None:
        self._counts: dict[BatchRef, int] = {}

    def get(self, ref: BatchRef) -> int | None:
        return self._counts.get(ref)

    def put(self, ref: BatchRef, shards: int) -> None:
        if len(self._counts) >= self.MAX_BATCHES and ref not in self._counts:
            self._counts.clear()  # forgetting costs a read each, never a wrong answer
        self._counts[ref] = shards


class BatchStore:
    """Every read and write of the batch rows; the items it recounts and settles through their `ItemStore`."""

    def __init__(self, batches_table: str, items: ItemStore, rollups: Rollups, clock: Clock) -> None:
        self._model: Any = bind(_Batch, batches_table)
        self._items = items
        self._rollups = rollups
        self._clock = clock
        self._shard_counts = ShardCounts()  # batches' item-shard counts: fixed at creation, so kept while warm

    def clients(self) -> list[Any]:
        """The botocore clients this store sends its requests through (for a meter or a fault injector, never a write)."""
        return [client_of(self._model)]

    # -- producer side ------------------------------------------------------------------------

    def open_batch(
        self, ref: BatchRef, kind: str, total: int, created_by: str, tolerated_failures: int | None = None
    ) -> tuple[BatchRow, bool]:
        """Create the batch row (with the failed items it tolerates), or return the existing one. True if created now.

        The row records the batch's item-shard count (`shards_for` its size)
        once: an existing row keeps the count its items were written under.
        """
        now = self._clock.now_ms()
        row = self._model(
            ref.tenant,
            ref.batch_id,
            kind=kind,
            status=BatchStatus.OPEN.value,
            total=total,
            completed=0,
            failed=0,
            enqueued=0,
            rollups=0,
            recounts=0,
            retries=0,
            reopened=0,
            created_by=created_by,
            created_at=now,
            updated_at=now,
            open_key=kind,
            tolerated_failures=tolerated_failures,
            shards=shards_for(total),
        )
        absent = self._model.tenant.does_not_exist()
        # refused: it exists (maybe ours, applied and its reply lost): the row read next decides
        if put_row(row, absent, f"creating batch {ref}", ours=caller_reads).applied:
            return batch_row(row), True
        existing = self.batch(ref)
        if existing is None:
            raise StoreError(f"batch {ref} vanished while being created")
        if existing.kind != kind or existing.total != total:
            raise BatchConflict(f"batch {ref} exists with kind {existing.kind!r} and {existing.total} items")
        return existing, False

    def checkpoint_enqueued(self, ref: BatchRef, enqueued: int) -> None:
        """Record that the first `enqueued` items (by seq) have had their wake-up sent."""
        b = self._model
        behind = b.enqueued < enqueued  # a repeated or late checkpoint never moves it back
        still_open = b.status == BatchStatus.OPEN.value  # a finalized batch never changes again
        # refused: a checkpoint as far or further is there, or the batch is final: nothing to do
        row = b(ref.tenant, ref.batch_id)
        update_row(
            row, [b.enqueued.set(enqueued)], behind & still_open, f"checkpointing batch {ref}", ours=caller_reads
        )

    # -- reading ------------------------------------------------------------------------------

    def batch(self, ref: BatchRef) -> BatchRow | None:
        """The batch (a consistent read, an open one's tallies summed in), or None when there is none."""
        try:
            with aws_call(f"reading batch {ref}"):
                raw = self._model.get(ref.tenant, ref.batch_id, consistent_read=True)
            row = self._view(raw)
            self._shard_counts.put(ref, row.shards)
            return row
        except self._model.DoesNotExist:
            return None

    def list_batches(self, tenant: str | None = None, limit: int = 50) -> list[BatchRow]:
        """Up to `limit` batch rows: one tenant's (a query, by batch id) or any tenant's (a bounded scan)."""
        with aws_call("listing batches"):
            rows = self._model.query(tenant, limit=limit) if tenant else self._model.scan(limit=limit)
            # a scan also meets roll-up tallies, whose partition key is no tenant id (it holds '#')
            return [self._view(row) for row in rows if "#" not in row.tenant]

    def describe_batch(self, ref: BatchRef) -> BatchReport | None:
        """Rows first: the batch, then its items (status, attempts, error) ordered by `updated_at`."""
        batch = self.batch(ref)
        if batch is None:
            return None
        from jobfence.work.report import BatchReport

        items = sorted(self._items.item_rows(ref, batch.shards), key=lambda r: (r.updated_at, r.seq))
        return BatchReport(batch, items)

    def _view(self, raw: Any) -> BatchRow:
        """The batch as the operator sees it: a final batch's own row; an open one's with its tallies summed in.

        Roll-ups count each reopened item's earlier failure too, and never the
        pending items a recount failed past the threshold (`swept`), so both are
        corrected for; the result is a hint that a recount settles.
        """
        row = batch_row(raw)
        if row.status.final:
            return row
        completed, failed, rollups, newest = self._rollups.sums(row.ref)
        failed = max(failed + int(raw.swept or 0) - row.reopened, 0)
        return dataclasses.replace(
            row, completed=completed, failed=failed, rollups=rollups, updated_at=max(row.updated_at, newest)
        )

    # -- recount and finalize -----------------------------------------------------------------

    def finalize(
        self, ref: BatchRef, seen: BatchRow | None = None, heartbeat: bool = False, stale_before: int | None = None
    ) -> BatchRow | None:
        """Recount the item rows and finalize the batch when they number `total` and none is live.

        Idempotent; the counters written are the recount's, never tallies.
        `heartbeat` (the reclaimer's case) bumps `updated_at` when the batch
        is not done, so a batch that is merely slow (or whose producer has not
        written all its rows yet) is looked at again one batch-stale period
        later; with `stale_before`, a batch with a tally newer than that is
        alive: its newest tally becomes the batch row's heartbeat, no recount.
        """
        batch = seen or self.batch(ref)
        if batch is None or batch.status.final:
            return batch
        if stale_before is not None and batch.updated_at >= stale_before:
            return self._carry_heartbeat(ref, batch)
        return self._recount_and_write(ref, batch, heartbeat=heartbeat) or self.batch(ref)

    def _recount_and_write(self, ref: BatchRef, seen: BatchRow, heartbeat: bool = False) -> BatchRow | None:
        """Recount, then one conditional write of the batch row; None if the batch moved on since `seen`.

        `seen` is read before the recount, so an item reopened after it (which
        moves `reopened` in the same transaction) refuses the finalize; items
        only ever become terminal otherwise, so a recount that found every row
        terminal is still true when the write lands. Past the batch's failure
        threshold, its pending rows are failed first (`jobfence.work.keys.threshold_error`).
        The item rows' costs are summed on the way and SET on the batch row
        with every recount (`jobfence.work.items`: what each item's attempts
        consumed; the recount's own reads are on no row).
        """
        counts = {s: 0 for s in ItemStatus}
        pending: list[ItemKey] = []
        attrs = ["batch_key", "item_id", "status", *COST_FIELDS]
        spent = Cost()
        with aws_call(f"recounting batch {ref}"):
            for row in self._items.batch_items(ref, seen.shards, attrs):
                counts[ItemStatus(row.status)] += 1
                spent += Cost.of_fields(cost_fields(row)) or Cost()
                if row.status == ItemStatus.PENDING.value:
                    pending.append(ItemKey.of_row(row.batch_key, row.item_id))
        tolerated = seen.tolerated_failures
        over = tolerated is not None and counts[ItemStatus.FAILED] > tolerated
        swept = 0
        if seen.cancel_requested and pending:  # cancelled: what has not started never will (a claimed one finishes)
            reason = cancel_reason(seen.cancel_requested_by)
            cancelled = sum(self._items.cancel_pending(key, reason) for key in pending)
            counts[ItemStatus.PENDING] -= cancelled
            counts[ItemStatus.CANCELLED] += cancelled
        elif over and pending:  # past its failure threshold: fail what has not started (a claimed one is left alone)
            assert tolerated is not None  # over implies a threshold
            reason = threshold_error(counts[ItemStatus.FAILED], seen.total, tolerated)
            swept = sum(self._items.fail_pending(key, reason) for key in pending)
            counts[ItemStatus.PENDING] -= swept
            counts[ItemStatus.FAILED] += swept
        now = self._clock.now_ms()
        live = counts[ItemStatus.PENDING] + counts[ItemStatus.RUNNING]
        done = live == 0 and sum(counts.values()) == seen.total
        final = BatchStatus.FAILED_THRESHOLD if over else BatchStatus.FINALIZED
        if seen.cancel_requested:
            final = BatchStatus.CANCELLED
        b = self._model
        actions = [b.recounts.add(1), *(getattr(b, name).set(value) for name, value in spent.fields().items())]
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
        same_cancel = (
            b.cancel_requested_at.exists() if seen.cancel_requested else b.cancel_requested_at.does_not_exist()
        )
        # once per recount: a copy re-sent after a lost reply does not add to `recounts` and `swept` again
        applied = update_once(
            b(ref.tenant, ref.batch_id),
            actions,
            still_open & no_reopen_since & same_cancel,
            uuid.uuid4().hex,
            f"finalizing batch {ref}",
        )
        return self.batch(ref) if applied else None

    def _carry_heartbeat(self, ref: BatchRef, seen: BatchRow) -> BatchRow:
        """Copy the newest tally's time to the open batch row (moves its open-index entry once a stale period)."""
        b = self._model
        # refused: finalized meanwhile, or a newer heartbeat is there already
        update_row(
            b(ref.tenant, ref.batch_id),
            [b.updated_at.set(seen.updated_at)],
            (b.status == BatchStatus.OPEN.value) & (b.updated_at < seen.updated_at),
            f"carrying the heartbeat of batch {ref}",
            ours=caller_reads,
        )
        return seen

    # -- operator -----------------------------------------------------------------------------

    def reopen_failed(self, ref: BatchRef, requested_by: str, chunk: int = 48) -> ReopenResult:
        """Reset failed items to pending (`ItemStore.reopen_failed`), the batch row reopened with them.

        The items and the batch row's reopening move together, chunk by chunk;
        afterwards the batch row records who asked and when (`retried_by`,
        `retried_at`, `retries`).
        """
        batch = self.batch(ref)
        if batch is None:
            raise StoreError(f"no batch {ref}")
        if batch.cancel_requested:
            raise StoreError(cancelled_error(ref, batch.cancel_requested_by))
        kind = batch.kind

        def reopen_batch_in(tx: Transaction, items: int, now: int) -> None:
            self._reopen_in(tx, ref, kind, items, now)

        result = self._items.reopen_failed(batch, requested_by, reopen_batch_in, chunk)
        if result.retried:
            # once per call: a copy re-sent after a lost reply (or late) does not count the retry twice
            b = self._model
            update_once(
                b(ref.tenant, ref.batch_id),
                [b.retries.add(1), b.retried_by.set(requested_by), b.retried_at.set(self._clock.now_ms())],
                b.tenant.exists(),
                uuid.uuid4().hex,
                f"recording the retry of batch {ref}",
            )
        return result

    def _reopen_in(self, tx: Transaction, ref: BatchRef, kind: str, items: int, now: int) -> None:
        """Add "reopen the batch for `items` reopened failed items" to the caller's transaction."""
        b = self._model
        tx.update(
            b(ref.tenant, ref.batch_id),
            actions=[
                b.status.set(BatchStatus.OPEN.value),
                b.open_key.set(kind),
                b.failed.add(-items),
                b.finalized_at.remove(),
                b.updated_at.set(now),
                b.reopened.add(items),
            ],
            condition=b.tenant.exists() & b.cancel_requested_at.does_not_exist(),  # a cancelled batch is never reopened
        )

    def record_cancel(self, ref: BatchRef, requested_by: str) -> tuple[BatchRow, bool]:
        """Record the cancel on the batch row (the first asker kept): the row after, and whether this call recorded it."""
        if not requested_by or len(requested_by) > MAX_REQUESTED_BY:
            raise ValueError(f"a cancel needs who asked (1..{MAX_REQUESTED_BY} characters)")
        b = self._model
        asked = b.tenant.exists() & (b.status == BatchStatus.OPEN.value) & b.cancel_requested_at.does_not_exist()
        recorded = update_row(
            b(ref.tenant, ref.batch_id),
            [b.cancel_requested_by.set(requested_by), b.cancel_requested_at.set(self._clock.now_ms())],
            asked,
            f"cancelling batch {ref}",
            ours=caller_reads,  # refused: read below (the first asker is kept; a final batch refuses)
        )
        if isinstance(recorded, Refused):
            if not recorded.item:
                raise StoreError(f"no batch {ref}")
            if recorded.item.get("cancel_requested_at") is None:  # final, and not by a cancel
                raise StoreError(f"batch {ref} is {recorded.item.get('status')}: only an open batch can be cancelled")
        row = self.batch(ref)
        if row is None:
            raise StoreError(f"no batch {ref}")
        return row, recorded.applied

    def recorded_cancel(self, ref: BatchRef) -> str | None:
        """Who cancelled the batch, when its row records a cancel (one consistent read of two attributes); else None.

        The worker's read after its claim: a claim applied after the cancel was
        recorded sees it here (the read comes after the claim).
        """
        b = self._model
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

    # -- reclaim (see jobfence.reclaim) -------------------------------------------------------

    def open_batches(self, kind: str, scoped: Callable[[str], BatchStore] | None = None) -> OpenBatches:
        """The pipeline's open batches (oldest heartbeat first), each with its item-shard count.

        One Query of the open index (keys only); then, for the batches whose
        count this process has not seen, one BatchGetItem per 100 (the count
        alone). With `scoped`, the batch rows are read per tenant through
        `scoped(tenant)` (its session's store, `jobfence.tenants`); only the
        keys-only index is read as this store. The index is eventually
        consistent: an entry a sweep does not see yet is minutes younger than
        any stale limit, and the next sweep sees it. Past `OPEN_READ_LIMIT`
        open batches, the oldest heartbeats are returned.
        """
        from jobfence.work.stale import OpenBatch, OpenBatches

        with aws_call(f"reading the open {kind} batches"):
            rows = list(self._model.by_open.query(kind, limit=OPEN_READ_LIMIT))
        found = [(BatchRef(r.tenant, r.batch_id), int(r.updated_at)) for r in rows]
        unknown: dict[str, list[BatchRef]] = {}  # by tenant (one tenant's only, with `scoped`)
        for ref, _ in found:
            if self._shard_counts.get(ref) is None:
                unknown.setdefault(ref.tenant if scoped else "", []).append(ref)
        got: dict[BatchRef, int] = {}
        for tenant, refs in unknown.items():
            store = scoped(tenant) if scoped is not None else self
            for i in range(0, len(refs), BATCH_GET_KEYS):
                got.update(store._shard_counts_of(kind, refs[i : i + BATCH_GET_KEYS]))
        for ref, count in got.items():
            self._shard_counts.put(ref, count)
        batches = tuple(
            # a row not returned (gone meanwhile): assume the most shards
            OpenBatch(ref, updated_at, self._shard_counts.get(ref) or got.get(ref, MAX_SHARDS))
            for ref, updated_at in found
        )
        return OpenBatches(kind, batches)

    def _shard_counts_of(self, kind: str, refs: list[BatchRef]) -> dict[BatchRef, int]:
        """The item-shard counts of up to 100 batch rows (one BatchGetItem; a row not found is left out)."""
        with aws_call(f"reading the shard counts of open {kind} batches"):
            return {
                BatchRef(r.tenant, r.batch_id): int(r.shards) if r.shards is not None else MAX_SHARDS
                for r in self._model.batch_get(
                    [(ref.tenant, ref.batch_id) for ref in refs], attributes_to_get=["tenant", "batch_id", "shards"]
                )
            }
