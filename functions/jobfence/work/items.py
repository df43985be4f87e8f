"""The item store: every read and write of the items table (puts, claims, outcomes, the reclaimer's).

The item row is the truth. Every write is conditional, and each condition is
built from named parts so that what it re-checks reads as a sentence.

    items  batch_key = tenant#batch#shard (key, `ItemKey.partition`) | item_id (sort) | tenant | batch_id | kind
           | seq | status | attempts | error | claim_token | payload | result_ref | quota
           | quota_reservations | quota_refunds | created_at | updated_at
           | rru | wru | index_rru | index_wru | requests | cost_usd (what its attempts consumed: `spent`)

The table has no index: an item's writes cost their own units and nothing
more (docs/benchmarks.md, "Cost per million items"). The reclaimer finds stale
items by reading the item partitions of open batches (`stale_items`): a live
item's batch is always open, so its reads grow with the rows of open batches,
never with the table's finished ones.

The cost fields (`jobfence.capacity.Cost.fields`) are added by the outcome
writes of the worker (complete, release, fail, cancel_claimed): each ADDs what
the attempt's meter counted before the write was sent (its share of the claim,
its own calls, a refused first try of the same outcome), so attempts
accumulate. An ADD rides in the outcome's own conditional write: a re-sent
copy is refused by its condition (recognised as ours) and adds nothing.

Timeline of one item (generation: per-item 240 s < item stale 6 min < batch stale 15 min):

    producer  put_items pending (after the batch row: `jobfence.work.batches`), quota reserved with it
    worker    claim (jobfence.work.transactions): pending -> running, token T (one conditional
              update of a row born holding its unit; a transaction with the quota row otherwise)
              complete  (holds T): running -> completed
              release   (holds T): running -> pending + error (another attempt)
              fail      (holds T): running -> failed + error, quota refunded in one transaction
    reclaim   requeue_stale / fail_stale: a live item exactly as the sweep's read saw it
    batch     cancel_pending / fail_pending: pending -> cancelled / failed (a cancelled batch, or one
              past its failure threshold; `jobfence.work.batches`), refunded once
    operator  reopen_failed (jobfence.work.transactions, with the batch row's reopening)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import bind, client_of
from jobfence.capacity import Cost, Meter
from jobfence.clock import Clock
from jobfence.dynamo import Ours, Refused, Transaction, aws_call, caller_reads, update_row
from jobfence.errors import StoreError
from jobfence.quota import QuotaStore, available_in
from jobfence.work.keys import (
    CLAIM_ROUNDS,
    ITEMS_PER_TRANSACTION,
    MAX_RESULT_REF_CHARS,
    BatchRef,
    BatchRow,
    ItemKey,
    ItemRow,
    ItemStatus,
    QuotaHold,
    bounded_error,
)
from jobfence.work.table import ItemTable

if TYPE_CHECKING:  # each loaded by the role that uses it: the reclaimer's, the worker's, the producer's, the operator's
    from jobfence.work.claims import Claim
    from jobfence.work.inputs import ItemInput
    from jobfence.work.stale import OpenBatch, StaleCutoffs, StaleItem, StaleVerdict
    from jobfence.work.transactions import ReopenResult


class _Item(Model):
    class Meta:
        table_name = "unbound"

    batch_key = UnicodeAttribute(hash_key=True)
    item_id = UnicodeAttribute(range_key=True)
    tenant = UnicodeAttribute()
    batch_id = UnicodeAttribute()
    kind = UnicodeAttribute()
    seq = NumberAttribute()
    status = UnicodeAttribute()
    attempts = NumberAttribute(default=0)
    error = UnicodeAttribute(null=True)
    claim_token = UnicodeAttribute(null=True)
    payload = UnicodeAttribute()
    result_ref = UnicodeAttribute(null=True)
    quota = UnicodeAttribute(null=True)
    quota_reservations = NumberAttribute(default=0)
    quota_refunds = NumberAttribute(default=0)
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    rru = NumberAttribute(null=True)  # the cost of its attempts (`Cost.fields`), added by each outcome
    wru = NumberAttribute(null=True)
    index_rru = NumberAttribute(null=True)
    index_wru = NumberAttribute(null=True)
    requests = NumberAttribute(null=True)
    cost_usd = NumberAttribute(null=True)


def item_row(row: Any) -> ItemRow:
    """The frozen view of an item row (what every caller outside this module sees)."""
    return ItemRow(
        tenant=row.tenant,
        batch_id=row.batch_id,
        item_id=row.item_id,
        kind=row.kind,
        seq=int(row.seq),
        status=ItemStatus(row.status),
        attempts=int(row.attempts or 0),
        error=row.error,
        updated_at=int(row.updated_at),
        result_ref=row.result_ref,
        quota=QuotaHold(row.quota) if row.quota else None,
        quota_reservations=int(row.quota_reservations or 0),
        quota_refunds=int(row.quota_refunds or 0),
        claim_token=row.claim_token,
        shard=int(row.batch_key.rsplit("#", 1)[1]),
        cost=Cost.of_fields(cost_fields(row)),
    )


COST_FIELDS = tuple(Cost().fields())  # the attributes a row records its cost in (`Cost.fields`)


def cost_fields(row: Any) -> dict[str, Any]:
    """The cost fields a pynamodb row (an item's or a batch's) holds, for `Cost.of_fields`."""
    return {name: getattr(row, name, None) for name in COST_FIELDS if getattr(row, name, None) is not None}


class ItemStore:
    """Every read and write of the items table (and the quota units its rows hold)."""

    def __init__(self, items_table: str, quota: QuotaStore, clock: Clock) -> None:
        self._model: Any = bind(_Item, items_table)
        self._quota = quota
        self._clock = clock
        self._table = ItemTable(self._model, self._transaction, quota, clock)  # lent to its transactions

    def clients(self) -> list[Any]:
        """The botocore clients this store sends its requests through (for a meter or a fault injector, never a write)."""
        return [client_of(self._model)]

    def _transaction(self, token: str | None = None) -> Transaction:
        """A TransactionItems on the items model's client; `token` is its ClientRequestToken (one per plan)."""
        return Transaction(client_of(self._model), "an item transaction", token)

    # -- producer side ------------------------------------------------------------------------

    def existing_item_ids(self, ref: BatchRef, shards: int) -> set[str]:
        """Ids of the batch's item rows (keys only; used when a producer call is repeated)."""
        with aws_call(f"listing the items of batch {ref}"):
            return {row.item_id for row in self.batch_items(ref, shards, ["item_id"])}

    def put_items(self, ref: BatchRef, kind: str, items: Sequence[tuple[int, ItemInput]], shards: int) -> int:
        """Write the missing pending item rows, never overwriting one; return how many this call wrote.

        A row, once written, is moved on only by its claims: a producer call
        that paused (or whose request was re-sent) must not put a completed
        item back to pending. So every put is conditional (the row is absent),
        99 to a TransactionItems; a refusal names the rows that exist
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
        absent = self._model.item_id.does_not_exist()
        written = 0
        left: int | None = None  # units the tenant has left (None: not known yet, try all)
        per_tx = ITEMS_PER_TRANSACTION - 1  # and the quota row's reservation
        for start in range(0, len(items), per_tx):
            chunk = list(items[start : start + per_tx])
            for _ in range(CLAIM_ROUNDS):
                if not chunk:
                    break
                reserve = len(chunk) if left is None else max(min(left, len(chunk)), 0)
                tx = self._transaction()
                for i, (seq, item) in enumerate(chunk):
                    key = ItemKey.of(ref, item.item_id, shards)
                    tx.save(self._new_item(key, kind, seq, item, now, reserved=i < reserve), condition=absent)
                if reserve:
                    self._quota.reserve_in(tx, ref.tenant, reserve, now)
                try:
                    outcome = tx.commit()
                except StoreError as exc:
                    if exc.kind is not None and exc.kind.transient:
                        continue  # not applied, or applied and refused next round as existing
                    raise
                if isinstance(outcome, Refused):  # the rows that exist already, and what the quota has left
                    if reserve and len(chunk) in outcome.entries:
                        left = available_in(outcome.entries[len(chunk)])
                    chunk = [c for i, c in enumerate(chunk) if i not in outcome.entries]
                    continue
                written += len(chunk)
                left = None if left is None else left - reserve
                chunk = []
            if chunk:
                raise StoreError(f"writing the items of batch {ref} failed {CLAIM_ROUNDS} times; repeat the call")
        return written

    def _new_item(self, key: ItemKey, kind: str, seq: int, item: ItemInput, now: int, reserved: bool) -> Any:
        return self._model(
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
        )

    # -- reading ------------------------------------------------------------------------------

    def item(self, key: ItemKey) -> ItemRow | None:
        """The item row (a consistent read), or None when there is none."""
        try:
            with aws_call("reading an item"):
                return item_row(self._model.get(key.partition, key.item_id, consistent_read=True))
        except self._model.DoesNotExist:
            return None

    def batch_items(self, ref: BatchRef, shards: int, attributes: list[str] | None = None) -> Iterator[Any]:
        """Every item row of the batch (strongly consistent), over its `shards` partitions; the caller wraps it in aws_call.

        The raw rows: a caller reads only the `attributes` it asked for (all when None).
        """
        for partition in ref.item_partitions(shards):
            yield from self._model.query(partition, consistent_read=True, attributes_to_get=attributes)

    def item_rows(self, ref: BatchRef, shards: int) -> list[ItemRow]:
        """Every item row of the batch (strongly consistent) over its `shards` partitions, in seq order."""
        with aws_call(f"reading the items of batch {ref}"):
            rows = [item_row(r) for r in self.batch_items(ref, shards)]
        return sorted(rows, key=lambda r: r.seq)

    def all_item_rows(self) -> list[ItemRow]:
        """Every item row of the table, of every batch (a strongly consistent scan: small tables, tests and checks only)."""
        with aws_call("scanning the items"):
            return [item_row(r) for r in self._model.scan(consistent_read=True)]

    def pending_keys(self, ref: BatchRef, shards: int, page_items: int) -> Iterator[ItemKey]:
        """The keys of the batch's pending items, partition by partition, `page_items` to a query page.

        A strongly consistent query filtered on status: the caller acts on
        each key as it comes, so one page at a time is held in memory.
        """
        pending = self._model.status == ItemStatus.PENDING.value
        for partition in ref.item_partitions(shards):
            with aws_call(f"reading the pending items of batch {ref}"):  # one page at a time, as it is acted on
                for row in self._model.query(
                    partition,
                    filter_condition=pending,
                    consistent_read=True,
                    attributes_to_get=["batch_key", "item_id"],
                    page_size=page_items,
                ):
                    yield ItemKey.of_row(row.batch_key, row.item_id)

    # -- multi-item transactions (jobfence.work.transactions) ---------------------------------

    def claim(self, keys: Sequence[ItemKey], kind: str, attempts_cap: int) -> dict[ItemKey, Claim]:
        """Claim distinct items: one conditional update each, a transaction for those holding no unit (`transactions.claim_items`)."""
        from jobfence.work.transactions import claim_items  # a worker loads it at init (`jobfence.work.worker`)

        return claim_items(self._table, keys, kind, attempts_cap)

    def reopen_failed(
        self,
        batch: BatchRow,
        requested_by: str,
        reopen_batch_in: Callable[[Transaction, int, int], None],
        chunk: int = 48,
    ) -> ReopenResult:
        """Reset the batch's failed items to pending (see `transactions.reopen_failed`), chunk by chunk.

        Each chunk's transaction also holds `reopen_batch_in(tx, items, now)`:
        the batch row's reopening, given by the batch store
        (`jobfence.work.batches.BatchStore.reopen_failed`).
        """
        from jobfence.work.transactions import reopen_failed  # the operator's retry-failed only

        rows = self.item_rows(batch.ref, batch.shards)
        return reopen_failed(self._table, batch, rows, requested_by, reopen_batch_in, chunk)

    # -- outcomes of a claimed item (all conditioned on the claim token) ---------------------
    #
    # An outcome keeps the claim token on the row, so a refusal whose old image
    # is already the outcome under our token is recognised as our own write,
    # applied once and refused when its lost reply was re-sent.

    def _holds(self, claim: Claim) -> Any:
        """The claim is still ours: the row is running under our token."""
        return (self._model.claim_token == claim.token) & (self._model.status == ItemStatus.RUNNING.value)

    @staticmethod
    def _ours(claim: Claim, status: ItemStatus) -> Ours:
        """Recognises our own outcome already applied in an old image (a re-sent request refused)."""
        return lambda image: image.get("claim_token") == claim.token and image.get("status") == status.value

    def _spent(self, meter: Meter | None) -> list[Any]:
        """ADD what `meter` counted so far to the row's cost fields (nothing without a meter)."""
        if meter is None:
            return []
        m = self._model
        return [getattr(m, name).add(value) for name, value in meter.cost(0).fields().items()]

    def complete(self, claim: Claim, result_ref: str, spent: Meter | None = None) -> bool:
        """running -> completed, adding what `spent` counted. False if the claim was lost meanwhile."""
        now = self._clock.now_ms()
        return self._update_claimed(
            claim,
            ItemStatus.COMPLETED,
            [
                self._model.status.set(ItemStatus.COMPLETED.value),
                self._model.result_ref.set(result_ref[:MAX_RESULT_REF_CHARS]),
                self._model.updated_at.set(now),
                self._model.error.remove(),
                *self._spent(spent),
            ],
        )

    def release(self, claim: Claim, error: str, spent: Meter | None = None) -> bool:
        """running -> pending with the error, for another attempt, adding what `spent` counted. False if the claim was lost."""
        now = self._clock.now_ms()
        return self._update_claimed(
            claim,
            ItemStatus.PENDING,
            [
                self._model.status.set(ItemStatus.PENDING.value),
                self._model.error.set(bounded_error(error)),
                self._model.updated_at.set(now),
                *self._spent(spent),
            ],
        )

    def fail(self, claim: Claim, error: str, spent: Meter | None = None) -> bool:
        """running -> failed (terminal), refunding its reservation in the same transaction; adds what `spent` counted."""
        return self._fail_terminally(claim.key, self._holds(claim), error, claim=claim, spent=spent)

    def cancel_claimed(self, claim: Claim, reason: str, spent: Meter | None = None) -> bool:
        """running -> cancelled unrun (its batch's cancel came before the claim), refunding as `fail` does."""
        return self._fail_terminally(
            claim.key, self._holds(claim), reason, claim=claim, outcome=ItemStatus.CANCELLED, spent=spent
        )

    def cancel_pending(self, key: ItemKey, reason: str) -> bool:
        """pending -> cancelled (its batch was cancelled), refunding its reservation once; False if not pending."""
        pending = self._model.status == ItemStatus.PENDING.value
        return self._fail_terminally(key, pending, reason, outcome=ItemStatus.CANCELLED)

    def fail_pending(self, key: ItemKey, reason: str) -> bool:
        """pending -> failed unrun (its batch crossed its failure threshold), refunding once; False if not pending."""
        return self._fail_terminally(key, self._model.status == ItemStatus.PENDING.value, reason)

    def _fail_terminally(
        self,
        key: ItemKey,
        condition: Any,
        error: str,
        claim: Claim | None = None,
        outcome: ItemStatus = ItemStatus.FAILED,
        spent: Meter | None = None,
    ) -> bool:
        """End one item `outcome` (failed, or cancelled) under `condition`; refund exactly once if it holds a reservation.

        Two variants: with a reservation, the item's `quota` moves reserved ->
        refunded and the quota row gets its unit back in one transaction; the
        item condition (quota = reserved) makes a repeat refund impossible.
        The worker's failure (`claim`) keeps its token on the row, so a re-sent
        transaction refused by its own first application is recognised.
        `spent` (the worker's attempt meter) is added to the row's cost by
        whichever of the two writes applies, as counted when it is built (the
        second includes the refused transaction).
        """
        m = self._model
        now = self._clock.now_ms()
        actions = [
            m.status.set(outcome.value),
            m.error.set(bounded_error(error)),
            m.updated_at.set(now),
        ]
        if claim is None:
            actions.append(m.claim_token.remove())  # the reclaimer revokes whatever claim there was
        reserved = m.quota == QuotaHold.RESERVED.value
        refunded = m.quota == QuotaHold.REFUNDED.value
        holds_nothing = m.quota.does_not_exist()
        row = m(key.partition, key.item_id)
        tx = self._transaction()
        refund = [m.quota.set(QuotaHold.REFUNDED.value), m.quota_refunds.add(1), *self._spent(spent)]
        tx.update(row, [*actions, *refund], condition & reserved)
        self._quota.refund_in(tx, key.tenant)
        sent = tx.commit()
        if not isinstance(sent, Refused):
            return True
        if 0 not in sent.entries:  # only the quota row refused: the tenant has no books
            raise StoreError(f"failing an item of {key.tenant}: its quota row refused the refund")
        image = sent.entries[0]
        if claim is not None and self._ours(claim, outcome)(image):
            return True
        if image.get("quota") == QuotaHold.RESERVED.value:
            return False  # the reservation is there, so the item's own condition failed: claim lost
        # no reservation to give back
        ours = self._ours(claim, outcome) if claim is not None else caller_reads
        without = condition & holds_nothing | (condition & refunded)
        return update_row(row, [*actions, *self._spent(spent)], without, "failing an item", ours=ours).applied

    def _update_claimed(self, claim: Claim, outcome: ItemStatus, actions: list[Any]) -> bool:
        row = self._model(claim.key.partition, claim.key.item_id)
        return update_row(
            row, actions, self._holds(claim), "writing an item outcome", ours=self._ours(claim, outcome)
        ).applied

    # -- reclaim (see jobfence.reclaim) -------------------------------------------------------

    def stale_items(self, batch: OpenBatch, cutoffs: StaleCutoffs) -> Iterator[StaleItem]:
        """The open `batch`'s live items past their stale limit, read partition by partition.

        One Query per item partition of the batch (and per 1 MB page it reads),
        eventually consistent, filtered by DynamoDB to the live
        rows past their cutoff, so only those come back; DynamoDB charges the
        rows it reads (half a unit per 4 KB), so a sweep's reads grow with
        the rows of open batches, never with finished ones. A read a second
        behind a write shows the row as it was: every write the reclaimer
        makes re-checks exactly what it saw (`requeue_stale`), so such a row
        is left alone. Errors surface as `StoreError` while iterating.
        """
        from jobfence.work.stale import StaleItem

        m = self._model
        running = (m.status == ItemStatus.RUNNING.value) & (m.updated_at < cutoffs.running)
        pending = (m.status == ItemStatus.PENDING.value) & (m.updated_at < cutoffs.pending)
        for partition in batch.item_partitions():
            with aws_call(f"reading the stale items of batch {batch.ref}"):
                for row in m.query(
                    partition,
                    filter_condition=running | pending,
                    attributes_to_get=["batch_key", "item_id", "status", "updated_at"],
                ):
                    key = ItemKey.of_row(row.batch_key, row.item_id)
                    yield StaleItem(key, ItemStatus(row.status), int(row.updated_at))

    def _as_seen(self, status: ItemStatus, seen_updated_at: int) -> Any:
        """The row is exactly as the reclaimer's read saw it."""
        return (self._model.status == status.value) & (self._model.updated_at == seen_updated_at)

    def requeue_stale(
        self, key: ItemKey, status: ItemStatus, seen_updated_at: int, attempts_cap: int, error: str
    ) -> StaleVerdict:
        """Move a stale live item on to pending, or say it is at the cap or has changed.

        The condition re-checks status, `updated_at` and attempts, so an item
        that completed, was claimed again or was re-enqueued after the sweep's
        read is never overwritten. A refusal's old image decides the verdict
        (no second read): at the cap, or moved on.
        """
        from jobfence.work.stale import StaleVerdict

        now = self._clock.now_ms()
        attempts_left = self._model.attempts < attempts_cap
        condition = self._as_seen(status, seen_updated_at) & attempts_left
        actions = [
            self._model.status.set(ItemStatus.PENDING.value),
            self._model.updated_at.set(now),
        ]
        if status is ItemStatus.RUNNING:
            actions += [self._model.claim_token.remove(), self._model.error.set(bounded_error(error))]

        def ours(seen: Mapping[str, Any]) -> bool:  # our own requeue, applied before its reply was lost
            return seen.get("status") == ItemStatus.PENDING.value and seen.get("updated_at") == now

        outcome = update_row(
            self._model(key.partition, key.item_id), actions, condition, "reclaiming an item", ours=ours
        )
        if outcome.applied:
            return StaleVerdict.REQUEUED
        image = outcome.item  # the refusal decides the verdict: at the cap, or moved on
        as_seen = image.get("status") == status.value and image.get("updated_at") == seen_updated_at
        if as_seen and int(image.get("attempts") or 0) >= attempts_cap:
            return StaleVerdict.CAPPED
        return StaleVerdict.CHANGED

    def fail_stale(self, key: ItemKey, status: ItemStatus, seen_updated_at: int, error: str) -> bool:
        """A stale live item at the attempts cap -> failed, refunding its reservation."""
        return self._fail_terminally(key, self._as_seen(status, seen_updated_at), error)
