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
              rollup (jobfence.work.rollup): one write of the worker's own tally row per batch per
              SQS batch; when the tallies say "maybe done", recount and finalize
    reclaim   requeue_stale / fail_stale: a live item exactly as the index read saw it
              finalize (heartbeat): an open batch with no fresh tally, from its rows
    operator  reopen_failed (jobfence.work.transactions) then reopen the batch row
              cancel (jobfence.work.cancel): record it on the batch row, then pending -> cancelled
              (refunded once); a claim that comes after it is cancelled unrun by its worker
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pynamodb.exceptions import PynamoDBException
from pynamodb.transactions import TransactWrite

from jobfence.binding import bind, connection_beside
from jobfence.clock import Clock
from jobfence.dynamo import (
    REASON_CONDITION_FAILED,
    aws_call,
    cancellation_reasons,
    classify,
    old_image,
    raise_store_error,
)
from jobfence.errors import ErrorKind, StoreError
from jobfence.once import update_once
from jobfence.quota import QuotaStore, available_in
from jobfence.work import sweep
from jobfence.work.cancel import CancelResult, cancel_batch, cancelled_error
from jobfence.work.keys import (
    CLAIM_ROUNDS,
    ITEMS_PER_TRANSACTION,
    MAX_RESULT_REF_CHARS,
    BatchConflict,
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
    RollupTally,
    StaleVerdict,
    bounded_error,
    reclaim_key,
    shards_for,
)
from jobfence.work.rollup import Rollups, batch_view, carry_heartbeat, recount_and_write
from jobfence.work.schema import _Batch, _Item, batch_row, item_row
from jobfence.work.sweep import ShardCounts
from jobfence.work.transactions import ReopenResult, claim_items, reopen_failed


def _s(image: Mapping[str, Any] | None, name: str) -> str | None:
    """A string attribute of a low-level item image (an old image returned with a refusal)."""
    value = (image or {}).get(name) or {}
    return value.get("S") if isinstance(value, Mapping) else None


class WorkStore:
    """Every read and write of the batches and items tables."""

    def __init__(self, batches_table: str, items_table: str, quota: QuotaStore, clock: Clock) -> None:
        self._batches: Any = bind(_Batch, batches_table)
        self._items: Any = bind(_Item, items_table)
        self.quota = quota
        self._clock = clock
        self._rollups = Rollups(batches_table)
        self.shard_counts = ShardCounts()  # batches' item-shard counts: fixed at creation, so kept while warm
        self._connection = connection_beside(self._items)

    def clients(self) -> list[Any]:
        """The botocore clients this store sends its requests through, each once (for a meter or a fault injector,
        never a write): its models may share one (`jobfence.binding`)."""
        models = (self._items, self._batches)
        every = (
            [m._get_connection().connection.client for m in models]
            + self._rollups.clients()
            + [self._connection.client]
        )
        return list({id(client): client for client in every}.values())

    def transaction(self, token: str | None = None) -> TransactWrite:
        """A TransactWriteItems; `token` (ClientRequestToken) makes botocore's re-send of it idempotent."""
        return TransactWrite(connection=self._connection, client_request_token=token)

    @staticmethod
    def _update_returning_old(row: Any, actions: list[Any], condition: Any) -> None:
        """UpdateItem that returns the row with a refusal (ALL_OLD): read it with `dynamo.old_image`.

        pynamodb's `Model.update` cannot ask for the old image, and its error
        wrapper drops it, so the expression pynamodb builds is sent on the
        model's own botocore client; the raw AWS error is raised.
        """
        kwargs = row.get_update_kwargs_from_instance(
            actions=actions, condition=condition, return_values_on_condition_failure="ALL_OLD"
        )
        type(row)._get_connection().connection.client.update_item(**kwargs)

    def now_ms(self) -> int:
        """The store's clock, in epoch milliseconds (what its writes stamp `updated_at` with)."""
        return self._clock.now_ms()

    # -- producer side ------------------------------------------------------------------------

    def open_batch(
        self, ref: BatchRef, kind: str, total: int, created_by: str, tolerated_failures: int | None = None
    ) -> tuple[BatchRow, bool]:
        """Create the batch row (with the failed items it tolerates), or return the existing one. True if created now.

        The row records the batch's item-shard count (`shards_for` its size)
        once: an existing row keeps the count its items were written under.
        """
        now = self._clock.now_ms()
        row = self._batches(
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
        absent = self._batches.tenant.does_not_exist()
        try:
            row.save(condition=absent)
            return batch_row(row), True
        except PynamoDBException as exc:
            # refused: it exists (maybe ours, applied and its reply lost): the row read next decides
            if classify(exc) is not ErrorKind.CONDITION_FAILED:
                raise_store_error(exc, f"creating batch {ref}")
        existing = self.batch(ref)
        if existing is None:
            raise StoreError(f"batch {ref} vanished while being created")
        if existing.kind != kind or existing.total != total:
            raise BatchConflict(f"batch {ref} exists with kind {existing.kind!r} and {existing.total} items")
        return existing, False

    def existing_item_ids(self, ref: BatchRef, shards: int) -> set[str]:
        """Ids of the batch's item rows (keys only; used when a producer call is repeated)."""
        with aws_call(f"listing the items of batch {ref}"):
            return {row.item_id for row in self.batch_items(ref, shards, ["item_id"])}

    def put_items(self, ref: BatchRef, kind: str, items: Sequence[tuple[int, ItemInput]], shards: int) -> int:
        """Write the missing pending item rows, never overwriting one; return how many this call wrote.

        A row, once written, is moved on only by its claims: a producer call
        that paused (or whose request was re-sent) must not put a completed
        item back to pending. So every put is conditional (the row is absent),
        99 to a TransactWriteItems; a refusal names the rows that exist
        already (a repeated call, or a re-sent request applied twice), which
        are dropped before the rest is tried again.

        The same transaction reserves the tenant's quota for the rows it puts
        (as many as are left: the refused reservation's old image says how
        many), so a row is born holding its unit exactly when the counter
        moved, and the tenant's quota row takes one write per 99 items
        rather than one per SQS batch of 10 (docs/benchmarks.md, hottest
        key). A row born without a unit reserves at its claim, as before.
        """
        now = self._clock.now_ms()
        absent = self._items.item_id.does_not_exist()
        written = 0
        left: int | None = None  # units the tenant has left (None: not known yet, try all)
        per_tx = ITEMS_PER_TRANSACTION - 1  # and the quota row's reservation
        for start in range(0, len(items), per_tx):
            chunk = list(items[start : start + per_tx])
            for _ in range(CLAIM_ROUNDS):
                if not chunk:
                    break
                reserve = len(chunk) if left is None else max(min(left, len(chunk)), 0)
                try:
                    with self.transaction(uuid.uuid4().hex) as tx:
                        for i, (seq, item) in enumerate(chunk):
                            tx.save(
                                self._new_item(
                                    ItemKey.of(ref, item.item_id, shards), kind, seq, item, now, reserved=i < reserve
                                ),
                                condition=absent,
                            )
                        if reserve:
                            self.quota.reserve_in(tx, ref.tenant, reserve, now)
                except PynamoDBException as exc:
                    error_kind = classify(exc)
                    if error_kind is ErrorKind.TRANSACTION_CANCELED:
                        reasons = cancellation_reasons(exc)
                        exist = {
                            i for i, r in enumerate(reasons[: len(chunk)]) if r.get("Code") == REASON_CONDITION_FAILED
                        }
                        quota = reasons[len(chunk)] if reserve and len(reasons) > len(chunk) else {}
                        if quota.get("Code") == REASON_CONDITION_FAILED:
                            left = available_in(quota.get("Item"))
                        chunk = [c for i, c in enumerate(chunk) if i not in exist]
                        continue
                    if error_kind.transient:
                        continue  # not applied, or applied and refused next round as existing
                    raise_store_error(exc, f"writing the items of batch {ref}")
                written += len(chunk)
                left = None if left is None else left - reserve
                chunk = []
            if chunk:
                raise StoreError(f"writing the items of batch {ref} failed {CLAIM_ROUNDS} times; repeat the call")
        return written

    def _new_item(self, key: ItemKey, kind: str, seq: int, item: ItemInput, now: int, reserved: bool) -> Any:
        return self._items(
            key.partition,
            item.item_id,
            tenant=key.tenant,
            batch_id=key.batch_id,
            kind=kind,
            seq=seq,
            status=ItemStatus.PENDING.value,
            attempts=0,
            payload=json.dumps(dict(item.payload), separators=(",", ":"), sort_keys=True),
            quota=QuotaHold.RESERVED.value if reserved else None,
            quota_reservations=1 if reserved else 0,
            quota_refunds=0,
            created_at=now,
            updated_at=now,
            reclaim_key=reclaim_key(kind, ItemStatus.PENDING, key),
        )

    def checkpoint_enqueued(self, ref: BatchRef, enqueued: int) -> None:
        """Record that the first `enqueued` items (by seq) have had their wake-up sent."""
        b = self._batches
        behind = b.enqueued < enqueued  # a repeated or late checkpoint never moves it back
        still_open = b.status == BatchStatus.OPEN.value  # a finalized batch never changes again
        try:
            b(ref.tenant, ref.batch_id).update(actions=[b.enqueued.set(enqueued)], condition=behind & still_open)
        except PynamoDBException as exc:
            if classify(exc) is not ErrorKind.CONDITION_FAILED:
                raise_store_error(exc, f"checkpointing batch {ref}")

    # -- reading ------------------------------------------------------------------------------

    def batch(self, ref: BatchRef) -> BatchRow | None:
        """The batch row (a consistent read), or None when there is none."""
        try:
            with aws_call(f"reading batch {ref}"):
                raw = self._batches.get(ref.tenant, ref.batch_id, consistent_read=True)
            row = batch_view(self, raw)
            self.shard_counts.put(ref, row.shards)
            return row
        except self._batches.DoesNotExist:
            return None

    def list_batches(self, tenant: str | None = None, limit: int = 50) -> list[BatchRow]:
        """Up to `limit` batch rows: one tenant's (a query, by batch id) or any tenant's (a bounded scan)."""
        with aws_call("listing batches"):
            rows = self._batches.query(tenant, limit=limit) if tenant else self._batches.scan(limit=limit)
            # a scan also meets roll-up tallies, whose partition key is no tenant id (it holds '#')
            return [batch_view(self, row) for row in rows if "#" not in row.tenant]

    def item(self, key: ItemKey) -> ItemRow | None:
        """The item row (a consistent read), or None when there is none."""
        try:
            with aws_call("reading an item"):
                return item_row(self._items.get(key.partition, key.item_id, consistent_read=True))
        except self._items.DoesNotExist:
            return None

    def batch_items(self, ref: BatchRef, shards: int, attributes: list[str] | None = None) -> Iterator[Any]:
        """Every item row of the batch (strongly consistent), over its `shards` partitions; the caller wraps it in aws_call."""
        for partition in ref.item_partitions(shards):
            yield from self._items.query(partition, consistent_read=True, attributes_to_get=attributes)

    def item_rows(self, ref: BatchRef, shards: int | None = None) -> list[ItemRow]:
        """Every item row of the batch (strongly consistent), in seq order; `shards` None: read from its row."""
        if shards is None:
            batch = self.batch(ref)
            if batch is None:
                return []
            shards = batch.shards
        with aws_call(f"reading the items of batch {ref}"):
            rows = [item_row(r) for r in self.batch_items(ref, shards)]
        return sorted(rows, key=lambda r: r.seq)

    def all_item_rows(self) -> list[ItemRow]:
        """Every item row of the table, of every batch (a strongly consistent scan: small tables, tests and checks only)."""
        with aws_call("scanning the items"):
            return [item_row(r) for r in self._items.scan(consistent_read=True)]

    def describe_batch(self, ref: BatchRef) -> BatchReport | None:
        """Rows first: the batch, then its items (status, attempts, error) ordered by `updated_at`."""
        batch = self.batch(ref)
        if batch is None:
            return None
        items = sorted(self.item_rows(ref, batch.shards), key=lambda r: (r.updated_at, r.seq))
        return BatchReport(batch, items)

    # -- claim (jobfence.work.transactions) ---------------------------------------------------

    def claim(self, keys: Sequence[ItemKey], kind: str, attempts_cap: int) -> dict[ItemKey, Claim]:
        """Claim up to 100 distinct items in one transaction (see `transactions.claim_items`)."""
        return claim_items(self, keys, kind, attempts_cap)

    # -- outcomes of a claimed item (all conditioned on the claim token) ---------------------
    #
    # An outcome keeps the claim token on the row, so a refusal whose old image
    # is already the outcome under our token is recognised as our own write,
    # applied once and refused when its lost reply was re-sent.

    def _holds(self, claim: Claim) -> Any:
        """The claim is still ours: the row is running under our token."""
        return (self._items.claim_token == claim.token) & (self._items.status == ItemStatus.RUNNING.value)

    @staticmethod
    def _ours(image: Mapping[str, Any] | None, claim: Claim, status: ItemStatus) -> bool:
        """The old image is our own outcome already applied (a re-sent request refused)."""
        return _s(image, "claim_token") == claim.token and _s(image, "status") == status.value

    def complete(self, claim: Claim, result_ref: str) -> bool:
        """running -> completed. False if the claim was lost meanwhile (the row says who won)."""
        now = self._clock.now_ms()
        return self._update_claimed(
            claim,
            ItemStatus.COMPLETED,
            [
                self._items.status.set(ItemStatus.COMPLETED.value),
                self._items.result_ref.set(result_ref[:MAX_RESULT_REF_CHARS]),
                self._items.updated_at.set(now),
                self._items.error.remove(),
                self._items.reclaim_key.remove(),
            ],
        )

    def release(self, claim: Claim, kind: str, error: str) -> bool:
        """running -> pending with the error, for another attempt. False if the claim was lost."""
        now = self._clock.now_ms()
        return self._update_claimed(
            claim,
            ItemStatus.PENDING,
            [
                self._items.status.set(ItemStatus.PENDING.value),
                self._items.error.set(bounded_error(error)),
                self._items.updated_at.set(now),
                self._items.reclaim_key.set(reclaim_key(kind, ItemStatus.PENDING, claim.key)),
            ],
        )

    def fail(self, claim: Claim, error: str) -> bool:
        """running -> failed (terminal), refunding its reservation in the same transaction."""
        return self._fail_terminally(claim.key, self._holds(claim), error, claim=claim)

    def cancel_claimed(self, claim: Claim, reason: str) -> bool:
        """running -> cancelled unrun (its batch's cancel came before the claim), refunding as `fail` does."""
        return self._fail_terminally(claim.key, self._holds(claim), reason, claim=claim, outcome=ItemStatus.CANCELLED)

    def cancel_pending(self, key: ItemKey, reason: str) -> bool:
        """pending -> cancelled (its batch was cancelled), refunding its reservation once; False if not pending."""
        pending = self._items.status == ItemStatus.PENDING.value
        return self._fail_terminally(key, pending, reason, outcome=ItemStatus.CANCELLED)

    def _fail_terminally(
        self,
        key: ItemKey,
        condition: Any,
        error: str,
        claim: Claim | None = None,
        outcome: ItemStatus = ItemStatus.FAILED,
    ) -> bool:
        """End one item `outcome` (failed, or cancelled) under `condition`; refund exactly once if it holds a reservation.

        Two variants: with a reservation, the item's `quota` moves reserved ->
        refunded and the quota row gets its unit back in one transaction; the
        item condition (quota = reserved) makes a repeat refund impossible.
        The worker's failure (`claim`) keeps its token on the row, so a re-sent
        transaction refused by its own first application is recognised.
        """
        m = self._items
        now = self._clock.now_ms()
        actions = [
            m.status.set(outcome.value),
            m.error.set(bounded_error(error)),
            m.updated_at.set(now),
            m.reclaim_key.remove(),
        ]
        if claim is None:
            actions.append(m.claim_token.remove())  # the reclaimer revokes whatever claim there was
        reserved = m.quota == QuotaHold.RESERVED.value
        refunded = m.quota == QuotaHold.REFUNDED.value
        holds_nothing = m.quota.does_not_exist()
        row = m(key.partition, key.item_id)
        try:
            with self.transaction(uuid.uuid4().hex) as tx:
                tx.update(
                    row,
                    actions=[*actions, m.quota.set(QuotaHold.REFUNDED.value), m.quota_refunds.add(1)],
                    condition=condition & reserved,
                    return_values="ALL_OLD",
                )
                self.quota.refund_in(tx, key.tenant)
            return True
        except PynamoDBException as exc:
            if classify(exc) is not ErrorKind.TRANSACTION_CANCELED:
                raise_store_error(exc, "failing an item")
            reasons = cancellation_reasons(exc)
            first = reasons[0] if reasons else {}
            if first.get("Code") != REASON_CONDITION_FAILED:
                raise_store_error(exc, "failing an item")
            image = first.get("Item")
            if claim is not None and self._ours(image, claim, outcome):
                return True
            if _s(image, "quota") == QuotaHold.RESERVED.value:
                return False  # the reservation is there, so the item's own condition failed: claim lost
        try:  # no reservation to give back
            self._update_returning_old(row, actions, condition & holds_nothing | (condition & refunded))
            return True
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as a StoreError
            if classify(exc) is not ErrorKind.CONDITION_FAILED:
                raise_store_error(exc, "failing an item")
            return claim is not None and self._ours(old_image(exc), claim, outcome)

    def _update_claimed(self, claim: Claim, outcome: ItemStatus, actions: list[Any]) -> bool:
        row = self._items(claim.key.partition, claim.key.item_id)
        try:
            self._update_returning_old(row, actions, self._holds(claim))
            return True
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as a StoreError
            if classify(exc) is not ErrorKind.CONDITION_FAILED:
                raise_store_error(exc, "writing an item outcome")
            return self._ours(old_image(exc), claim, outcome)

    # -- roll-up, heartbeat and finalize (jobfence.work.rollup) ------------------------------

    def rollup(self, ref: BatchRef, tally: RollupTally) -> BatchRow | None:
        """Write the writer's cumulative tally of the batch (its heartbeat); the batch with its tallies summed.

        Never writes the batch row (see `jobfence.work.rollup`). The caller
        finalizes when a returned open row's counters say done.
        """
        self._rollups.write(self, ref, tally)
        return self.batch(ref)

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
            return carry_heartbeat(self, ref, batch)
        return recount_and_write(self, ref, batch, heartbeat=heartbeat) or self.batch(ref)

    # -- reclaim (see jobfence.reclaim) -------------------------------------------------------

    # The reclaimer's reads are sweep's functions, bound here as methods (their first parameter is the store).
    open_batches = sweep.open_batches
    stale_items = sweep.stale_items

    def _as_seen(self, status: ItemStatus, seen_updated_at: int) -> Any:
        """The row is exactly as the reclaimer's index read saw it."""
        return (self._items.status == status.value) & (self._items.updated_at == seen_updated_at)

    def requeue_stale(
        self, key: ItemKey, kind: str, status: ItemStatus, seen_updated_at: int, attempts_cap: int, error: str
    ) -> StaleVerdict:
        """Move a stale live item on to pending, or say it is at the cap or has changed.

        The condition re-checks status, `updated_at` and attempts, so an item
        that completed, was claimed again or was re-enqueued after the index
        read is never overwritten. A refusal's old image decides the verdict
        (no second read): at the cap, or moved on.
        """
        now = self._clock.now_ms()
        attempts_left = self._items.attempts < attempts_cap
        condition = self._as_seen(status, seen_updated_at) & attempts_left
        actions = [
            self._items.status.set(ItemStatus.PENDING.value),
            self._items.updated_at.set(now),
            self._items.reclaim_key.set(reclaim_key(kind, ItemStatus.PENDING, key)),
        ]
        if status is ItemStatus.RUNNING:
            actions += [self._items.claim_token.remove(), self._items.error.set(bounded_error(error))]
        try:
            self._update_returning_old(self._items(key.partition, key.item_id), actions, condition)
            return StaleVerdict.REQUEUED
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised as a StoreError
            if classify(exc) is not ErrorKind.CONDITION_FAILED:
                raise_store_error(exc, "reclaiming an item")
            image = old_image(exc) or {}
        as_seen = (
            _s(image, "status") == status.value and int((image.get("updated_at") or {}).get("N", -1)) == seen_updated_at
        )
        if as_seen and int((image.get("attempts") or {}).get("N", 0)) >= attempts_cap:
            return StaleVerdict.CAPPED
        return StaleVerdict.CHANGED

    def fail_stale(self, key: ItemKey, status: ItemStatus, seen_updated_at: int, error: str) -> bool:
        """A stale live item at the attempts cap -> failed, refunding its reservation."""
        return self._fail_terminally(key, self._as_seen(status, seen_updated_at), error)

    # -- operator -----------------------------------------------------------------------------

    def cancel(self, ref: BatchRef, requested_by: str) -> CancelResult:
        """Cancel the batch (see `jobfence.work.cancel`): safe to repeat, a repeat continues a crashed one."""
        return cancel_batch(self, ref, requested_by)

    def reopen_failed(self, ref: BatchRef, requested_by: str, chunk: int = 48) -> ReopenResult:
        """Reset failed items to pending (see `transactions.reopen_failed`), recorded on the batch row.

        The items and the batch row's reopening move together, chunk by chunk;
        afterwards the batch row records who asked and when (`retried_by`,
        `retried_at`, `retries`).
        """
        batch = self.batch(ref)
        if batch is None:
            raise StoreError(f"no batch {ref}")
        if batch.cancel_requested:
            raise StoreError(cancelled_error(ref, batch.cancel_requested_by))
        result = reopen_failed(self, batch, requested_by, chunk)
        if result.retried:
            # once per call: a copy re-sent after a lost reply (or late) does not count the retry twice
            b = self._batches
            update_once(
                b(ref.tenant, ref.batch_id),
                [b.retries.add(1), b.retried_by.set(requested_by), b.retried_at.set(self._clock.now_ms())],
                b.tenant.exists(),
                uuid.uuid4().hex,
                f"recording the retry of batch {ref}",
            )
        return result
