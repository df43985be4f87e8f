"""The work store: every read and write of the batches and items tables.

The item row is the truth; the batch row's counters are a hint that the
item rows settle (recount). Every write is conditional, and each condition is
built from named parts so that what it re-checks reads as a sentence.

Timeline of one item (generation: per-item 240 s < item stale 6 min < batch stale 15 min):

    producer  open_batch (put if absent), put_items pending, checkpoint_enqueued
    worker    claim (jobfence.work.transactions): pending -> running, token T, quota reserved
              complete  (holds T): running -> completed
              release   (holds T): running -> pending + error (another attempt)
              fail      (holds T): running -> failed + error, quota refunded in one transaction
              rollup: one batch-row update per batch per SQS batch (counters + updated_at =
              heartbeat); when the counters say "maybe done", recount and finalize in that write
    reclaim   requeue_stale / fail_stale: a live item exactly as the index read saw it
              finalize (heartbeat): an open batch nobody rolled up, from its rows
    operator  reopen_failed (jobfence.work.transactions) then reopen the batch row
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from pynamodb.connection import Connection
from pynamodb.exceptions import PutError, TransactWriteError, UpdateError
from pynamodb.transactions import TransactWrite

from jobfence.clock import Clock
from jobfence.dynamo import bind
from jobfence.errors import StoreError
from jobfence.quota import QuotaStore
from jobfence.work.keys import (
    MAX_RESULT_REF_CHARS,
    RECLAIM_SHARDS,
    BatchConflict,
    BatchDelta,
    BatchRef,
    BatchReport,
    BatchRow,
    BatchStatus,
    Claim,
    ItemInput,
    ItemKey,
    ItemRow,
    ItemStatus,
    QuotaHold,
    StaleVerdict,
    bounded_error,
    reclaim_key,
)
from jobfence.work.schema import _Batch, _Item, batch_row, item_row
from jobfence.work.transactions import ReopenResult, claim_items, reopen_failed

CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"


class WorkStore:
    """Every read and write of the batches and items tables."""

    def __init__(self, batches_table: str, items_table: str, quota: QuotaStore, clock: Clock) -> None:
        self.batches: Any = bind(_Batch, batches_table)
        self.items: Any = bind(_Item, items_table)
        self.quota = quota
        self._clock = clock
        meta = self.items.Meta
        self._connection = Connection(region=getattr(meta, "region", None), host=getattr(meta, "host", None))

    def transaction(self) -> TransactWrite:
        return TransactWrite(connection=self._connection)

    def now_ms(self) -> int:
        return self._clock.now_ms()

    # -- producer side ------------------------------------------------------------------------

    def open_batch(self, ref: BatchRef, kind: str, total: int, created_by: str) -> tuple[BatchRow, bool]:
        """Create the batch row, or return the existing one. True when it was created now."""
        now = self._clock.now_ms()
        row = self.batches(
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
            created_by=created_by,
            created_at=now,
            updated_at=now,
            open_key=kind,
        )
        absent = self.batches.tenant.does_not_exist()
        try:
            row.save(condition=absent)
            return batch_row(row), True
        except PutError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"creating batch {ref} failed: {exc.cause_response_code}") from exc
        existing = self.batch(ref)
        if existing is None:
            raise StoreError(f"batch {ref} vanished while being created")
        if existing.kind != kind or existing.total != total:
            raise BatchConflict(f"batch {ref} exists with kind {existing.kind!r} and {existing.total} items")
        return existing, False

    def existing_item_ids(self, ref: BatchRef) -> set[str]:
        """Ids of the batch's item rows (keys only; used when a producer call is repeated)."""
        return {
            row.item_id
            for row in self.items.query(ref.batch_key, consistent_read=True, attributes_to_get=["item_id"])
        }

    def put_items(self, ref: BatchRef, kind: str, items: Sequence[tuple[int, ItemInput]]) -> None:
        """Write new pending item rows (25 per BatchWriteItem request)."""
        now = self._clock.now_ms()
        with self.items.batch_write() as writer:
            for seq, item in items:
                key = ItemKey(ref.tenant, ref.batch_id, item.item_id)
                writer.save(
                    self.items(
                        ref.batch_key,
                        item.item_id,
                        tenant=ref.tenant,
                        batch_id=ref.batch_id,
                        kind=kind,
                        seq=seq,
                        status=ItemStatus.PENDING.value,
                        attempts=0,
                        payload=json.dumps(dict(item.payload), separators=(",", ":"), sort_keys=True),
                        quota_reservations=0,
                        quota_refunds=0,
                        created_at=now,
                        updated_at=now,
                        reclaim_key=reclaim_key(kind, ItemStatus.PENDING, key),
                    )
                )

    def checkpoint_enqueued(self, ref: BatchRef, enqueued: int) -> None:
        """Record that the first `enqueued` items (by seq) have had their wake-up sent."""
        behind = self.batches.enqueued < enqueued  # a repeated or late checkpoint never moves it back
        try:
            self.batches(ref.tenant, ref.batch_id).update(actions=[self.batches.enqueued.set(enqueued)], condition=behind)
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"checkpointing batch {ref} failed: {exc.cause_response_code}") from exc

    # -- reading ------------------------------------------------------------------------------

    def batch(self, ref: BatchRef) -> BatchRow | None:
        try:
            return batch_row(self.batches.get(ref.tenant, ref.batch_id, consistent_read=True))
        except self.batches.DoesNotExist:
            return None

    def item(self, key: ItemKey) -> ItemRow | None:
        try:
            return item_row(self.items.get(key.batch.batch_key, key.item_id, consistent_read=True))
        except self.items.DoesNotExist:
            return None

    def item_rows(self, ref: BatchRef) -> list[ItemRow]:
        """Every item row of the batch (one partition, strongly consistent), in seq order."""
        rows = [item_row(r) for r in self.items.query(ref.batch_key, consistent_read=True)]
        return sorted(rows, key=lambda r: r.seq)

    def describe_batch(self, ref: BatchRef) -> BatchReport | None:
        """Rows first: the batch, then its items (status, attempts, error) ordered by `updated_at`."""
        batch = self.batch(ref)
        if batch is None:
            return None
        items = sorted(self.item_rows(ref), key=lambda r: (r.updated_at, r.seq))
        return BatchReport(batch, items)

    # -- claim (jobfence.work.transactions) ---------------------------------------------------

    def claim(self, keys: Sequence[ItemKey], kind: str, attempts_cap: int) -> dict[ItemKey, Claim]:
        """Claim up to 100 distinct items in one transaction (see `transactions.claim_items`)."""
        return claim_items(self, keys, kind, attempts_cap)

    # -- outcomes of a claimed item (all conditioned on the claim token) ---------------------

    def _holds(self, claim: Claim) -> Any:
        """The claim is still ours: the row is running under our token."""
        return (self.items.claim_token == claim.token) & (self.items.status == ItemStatus.RUNNING.value)

    def complete(self, claim: Claim, result_ref: str) -> bool:
        """running -> completed. False if the claim was lost meanwhile (the row says who won)."""
        now = self._clock.now_ms()
        return self._update_claimed(
            claim,
            [
                self.items.status.set(ItemStatus.COMPLETED.value),
                self.items.result_ref.set(result_ref[:MAX_RESULT_REF_CHARS]),
                self.items.updated_at.set(now),
                self.items.error.remove(),
                self.items.claim_token.remove(),
                self.items.reclaim_key.remove(),
            ],
        )

    def release(self, claim: Claim, kind: str, error: str) -> bool:
        """running -> pending with the error, for another attempt. False if the claim was lost."""
        now = self._clock.now_ms()
        return self._update_claimed(
            claim,
            [
                self.items.status.set(ItemStatus.PENDING.value),
                self.items.error.set(bounded_error(error)),
                self.items.updated_at.set(now),
                self.items.claim_token.remove(),
                self.items.reclaim_key.set(reclaim_key(kind, ItemStatus.PENDING, claim.key)),
            ],
        )

    def fail(self, claim: Claim, error: str) -> bool:
        """running -> failed (terminal), refunding its reservation in the same transaction."""
        return self._fail_terminally(claim.key, self._holds(claim), error)

    def _fail_terminally(self, key: ItemKey, condition: Any, error: str) -> bool:
        """Fail one item under `condition`; refund exactly once if it holds a reservation.

        Two variants: with a reservation, the item's `quota` moves reserved ->
        refunded and the quota row gets its unit back in one transaction; the
        item condition (quota = reserved) makes a repeat refund impossible.
        """
        m = self.items
        now = self._clock.now_ms()
        actions = [
            m.status.set(ItemStatus.FAILED.value),
            m.error.set(bounded_error(error)),
            m.updated_at.set(now),
            m.claim_token.remove(),
            m.reclaim_key.remove(),
        ]
        reserved = m.quota == QuotaHold.RESERVED.value
        refunded = m.quota == QuotaHold.REFUNDED.value
        holds_nothing = m.quota.does_not_exist()
        row = m(key.batch.batch_key, key.item_id)
        try:
            with self.transaction() as tx:
                tx.update(
                    row,
                    actions=[*actions, m.quota.set(QuotaHold.REFUNDED.value), m.quota_refunds.add(1)],
                    condition=condition & reserved,
                    return_values="ALL_OLD",
                )
                self.quota.refund_in(tx, key.tenant)
            return True
        except TransactWriteError as exc:
            if exc.cause_response_code != "TransactionCanceledException":
                raise StoreError(f"failing an item failed: {exc.cause_response_code}") from exc
            reasons = exc.cancellation_reasons
            first = reasons[0] if reasons else None
            if first is None or first.code != "ConditionalCheckFailed":
                raise StoreError("failing an item was cancelled: " + ",".join(str(r and r.code) for r in reasons)) from exc
            if first.raw_item and first.raw_item.get("quota", {}).get("S") == QuotaHold.RESERVED.value:
                return False  # the reservation is there, so the item's own condition failed: claim lost
        try:  # no reservation to give back
            row.update(actions=actions, condition=condition & holds_nothing | (condition & refunded))
            return True
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"failing an item failed: {exc.cause_response_code}") from exc
            return False

    def _update_claimed(self, claim: Claim, actions: list[Any]) -> bool:
        try:
            self.items(claim.key.batch.batch_key, claim.key.item_id).update(actions=actions, condition=self._holds(claim))
            return True
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"writing an item outcome failed: {exc.cause_response_code}") from exc
            return False

    # -- roll-up, heartbeat and finalize ------------------------------------------------------

    def rollup(self, ref: BatchRef, delta: BatchDelta) -> BatchRow | None:
        """One write per batch per SQS batch: the counts and `updated_at` (the heartbeat).

        A consistent read of the batch row first tells whether these counts may
        finish the batch; if so the item rows are recounted and the roll-up and
        the finalize are one write (so finishing a batch costs no extra write).
        Otherwise, or if another roll-up raced in between, it is a plain ADD.
        The caller finalizes when a returned open row's counters say done.
        """
        seen = self.batch(ref)
        if seen is None:
            return None
        if seen.status is BatchStatus.OPEN and seen.completed + seen.failed + delta.completed + delta.failed >= seen.total:
            row = self._recount_and_write(ref, seen, rollup=True)
            if row is not None:
                return row
        now = self._clock.now_ms()
        row = self.batches(ref.tenant, ref.batch_id)
        exists = self.batches.tenant.exists()
        try:
            row.update(
                actions=[
                    self.batches.completed.add(delta.completed),
                    self.batches.failed.add(delta.failed),
                    self.batches.rollups.add(1),
                    self.batches.updated_at.set(now),
                ],
                condition=exists,
            )
        except UpdateError as exc:
            if exc.cause_response_code == CONDITIONAL_CHECK_FAILED:
                return None
            raise StoreError(f"rolling up batch {ref} failed: {exc.cause_response_code}") from exc
        return batch_row(row)

    def finalize(self, ref: BatchRef, seen: BatchRow | None = None, heartbeat: bool = False) -> BatchRow | None:
        """Recount the item rows and finalize the batch when none is live. Idempotent.

        The counters written are the recount's, never in-memory tallies. When
        items are still live, the counters are corrected only if no roll-up
        happened since `seen` (so a racing roll-up is never overwritten), and
        `heartbeat` (the reclaimer's case) bumps `updated_at` so a batch that is
        merely slow is looked at again one batch-stale period later, not every sweep.
        """
        batch = seen or self.batch(ref)
        if batch is None or batch.status is BatchStatus.FINALIZED:
            return batch
        return self._recount_and_write(ref, batch, heartbeat=heartbeat) or self.batch(ref)

    def _recount_and_write(
        self, ref: BatchRef, seen: BatchRow, rollup: bool = False, heartbeat: bool = False
    ) -> BatchRow | None:
        """Recount, then one conditional write; None if the batch moved on since `seen`."""
        counts = {s: 0 for s in ItemStatus}
        attrs = ["batch_key", "item_id", "status"]
        for row in self.items.query(ref.batch_key, consistent_read=True, attributes_to_get=attrs):
            counts[ItemStatus(row.status)] += 1
        now = self._clock.now_ms()
        live = counts[ItemStatus.PENDING] + counts[ItemStatus.RUNNING]
        b = self.batches
        actions = [
            b.completed.set(counts[ItemStatus.COMPLETED]),
            b.failed.set(counts[ItemStatus.FAILED]),
            b.recounts.add(1),
        ]
        if rollup:
            actions.append(b.rollups.add(1))
        if live == 0:
            actions += [b.status.set(BatchStatus.FINALIZED.value), b.finalized_at.set(now), b.open_key.remove()]
        if live == 0 or heartbeat or rollup:
            actions.append(b.updated_at.set(now))
        still_open = b.status == BatchStatus.OPEN.value
        # nobody rolled up since `seen`: the recount includes everything the counters do
        no_rollup_since = b.rollups == seen.rollups
        condition = still_open & no_rollup_since
        if live == 0 and not rollup:
            condition = still_open  # rows say done: always true
        row = b(ref.tenant, ref.batch_id)
        try:
            row.update(actions=actions, condition=condition)
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"finalizing batch {ref} failed: {exc.cause_response_code}") from exc
            return None
        return batch_row(row)

    # -- reclaim (see jobfence.reclaim) -------------------------------------------------------

    def stale_items(
        self, kind: str, status: ItemStatus, cutoff: int, limit: int, cursor: tuple[int, Any] | None = None
    ) -> tuple[list[tuple[ItemKey, int]], tuple[int, Any] | None]:
        """One page: up to `limit` (key, updated_at) of live items with `updated_at < cutoff`.

        Reads the sparse index only, shard by shard; `cursor` continues where the
        previous page stopped (None when every shard is exhausted).
        """
        shard, start = cursor or (0, None)
        out: list[tuple[ItemKey, int]] = []
        while shard < RECLAIM_SHARDS and len(out) < limit:
            pages = self.items.by_reclaim.query(
                f"{kind}#{status.value}#{shard}",
                self.items.updated_at < cutoff,
                limit=limit - len(out),
                last_evaluated_key=start,
            )
            for row in pages:
                tenant, _, batch_id = row.batch_key.partition("#")
                out.append((ItemKey(tenant, batch_id, row.item_id), int(row.updated_at)))
            start = pages.last_evaluated_key
            if start is None:
                shard += 1
        return out, ((shard, start) if shard < RECLAIM_SHARDS else None)

    def stale_batches(self, kind: str, cutoff: int, limit: int) -> list[BatchRef]:
        """Up to `limit` open batches with `updated_at < cutoff`, through the sparse index."""
        return [
            BatchRef(row.tenant, row.batch_id)
            for row in self.batches.by_open.query(kind, self.batches.updated_at < cutoff, limit=limit)
        ]

    def _as_seen(self, status: ItemStatus, seen_updated_at: int) -> Any:
        """The row is exactly as the reclaimer's index read saw it."""
        return (self.items.status == status.value) & (self.items.updated_at == seen_updated_at)

    def requeue_stale(self, key: ItemKey, kind: str, status: ItemStatus, seen_updated_at: int, attempts_cap: int,
                      error: str) -> StaleVerdict:
        """Move a stale live item on to pending, or say it is at the cap or has changed.

        The condition re-checks status, `updated_at` and attempts, so an item
        that completed, was claimed again or was re-enqueued after the index
        read is never overwritten.
        """
        now = self._clock.now_ms()
        attempts_left = self.items.attempts < attempts_cap
        condition = self._as_seen(status, seen_updated_at) & attempts_left
        actions = [
            self.items.status.set(ItemStatus.PENDING.value),
            self.items.updated_at.set(now),
            self.items.reclaim_key.set(reclaim_key(kind, ItemStatus.PENDING, key)),
        ]
        if status is ItemStatus.RUNNING:
            actions += [self.items.claim_token.remove(), self.items.error.set(bounded_error(error))]
        try:
            self.items(key.batch.batch_key, key.item_id).update(actions=actions, condition=condition)
            return StaleVerdict.REQUEUED
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"reclaiming an item failed: {exc.cause_response_code}") from exc
        row = self.item(key)
        if row is not None and row.status is status and row.updated_at == seen_updated_at and row.attempts >= attempts_cap:
            return StaleVerdict.CAPPED
        return StaleVerdict.CHANGED

    def fail_stale(self, key: ItemKey, status: ItemStatus, seen_updated_at: int, error: str) -> bool:
        """A stale live item at the attempts cap -> failed, refunding its reservation."""
        return self._fail_terminally(key, self._as_seen(status, seen_updated_at), error)

    # -- operator -----------------------------------------------------------------------------

    def reopen_failed(self, ref: BatchRef, requested_by: str, chunk: int = 50) -> ReopenResult:
        """Reset failed items to pending (see `transactions.reopen_failed`), then reopen the batch row.

        The batch row records who asked and when (`retried_by`, `retried_at`, `retries`).
        """
        batch = self.batch(ref)
        if batch is None:
            raise StoreError(f"no batch {ref}")
        result = reopen_failed(self, ref, batch.kind, requested_by, chunk)
        if result.retried:
            now = self._clock.now_ms()
            b = self.batches
            try:
                b(ref.tenant, ref.batch_id).update(
                    actions=[
                        b.status.set(BatchStatus.OPEN.value),
                        b.open_key.set(batch.kind),
                        b.failed.add(-len(result.retried)),
                        b.finalized_at.remove(),
                        b.updated_at.set(now),
                        b.retries.add(1),
                        b.retried_by.set(requested_by),
                        b.retried_at.set(now),
                    ],
                    condition=b.tenant.exists(),
                )
            except UpdateError as exc:
                raise StoreError(f"reopening batch {ref} failed: {exc.cause_response_code}") from exc
        return result
