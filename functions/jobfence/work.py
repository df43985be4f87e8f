"""Durable batches over SQS (seed 003): batch and item rows, the producer and the worker.

**The item row is the truth; an SQS message is only a wake-up call** carrying
the keys (tenant, batch, item). A duplicate message loses the claim and is
acknowledged; a lost one is re-driven by the reclaimer (`jobfence.reclaim`).

Tables (every DynamoDB expression of both lives in this module):

    batches  tenant (key) | batch_id (sort) | kind | status | total | completed | failed
             | enqueued | rollups | recounts | created_by | created_at | updated_at
             | finalized_at | retries | retried_by | retried_at | open_key (sparse GSI "by_open")
    items    batch_key = tenant#batch (key) | item_id (sort) | tenant | batch_id | kind | seq
             | status | attempts | error | claim_token | payload | result_ref | quota
             | quota_reservations | quota_refunds | created_at | updated_at
             | reclaim_key (sparse GSI "by_reclaim")

`reclaim_key` = kind#status#shard exists only while an item is pending or
running, and `open_key` = kind only while a batch is open; both indexes sort on
`updated_at`, so the reclaimer's query `updated_at < cutoff` reads stale rows
only and its cost grows with them, not with the table.

Timeline of one item (generation: per-item 240 s < item stale 6 min < batch stale 15 min):

    producer  put row pending, attempts 0 ............................. wake-up sent
    worker    claim: pending -> running, attempts+1, token T, quota reserved (one transaction
              per SQS batch, with one quota Update per tenant)
              run the provider call, bounded by the per-item timeout
              complete (condition token = T): running -> completed        | or
              release (token = T, attempts < 5): running -> pending + error, delayed wake-up | or
              fail (token = T): running -> failed + error, quota refunded in the same transaction
              roll-up: one batch-row update per batch per SQS batch (counters + updated_at =
              heartbeat); when the counters say "maybe done", finalize = recount item rows
    reclaim   running and updated_at < now - item stale  -> pending (attempts < 5) or failed
              pending and updated_at < now - pending stale -> wake-up re-sent
              open batch and updated_at < now - batch stale -> finalize from rows

A completed item costs two base-table item writes (claim, complete) plus its
share of one quota update and one roll-up per SQS batch: 2.2 writes per item
with batches of 10 (see docs/benchmarks.md).
"""

from __future__ import annotations

import enum
import json
import re
import uuid
import zlib
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from aws_lambda_powertools import Logger
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.connection import Connection
from pynamodb.exceptions import PutError, PynamoDBException, TransactWriteError, UpdateError
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from jobfence.clock import Clock
from jobfence.dynamo import bind
from jobfence.errors import InvalidEvent, JobfenceError, StoreError
from jobfence.quota import QuotaStore, available_in
from jobfence.registry import IndexSpec
from jobfence.runs import safe_error

CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"
MAX_ITEMS_PER_BATCH = 10_000
MAX_ERROR_CHARS = 300
MAX_PAYLOAD_CHARS = 4_000
MAX_RESULT_REF_CHARS = 256
SEND_CHUNK = 10  # SendMessageBatch takes at most 10 entries
RECLAIM_SHARDS = 4  # spreads the index's write load; the reclaimer queries every shard
RECLAIM_INDEX = "by_reclaim"
OPEN_INDEX = "by_open"
CLAIM_ROUNDS = 3  # re-plan a claim transaction at most this often (races, conflicts)
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"  # no '#': it separates key parts

RECLAIM_INDEX_SPEC = IndexSpec(
    name=RECLAIM_INDEX, partition_key=("reclaim_key", "S"), sort_key=("updated_at", "N"), projection="KEYS_ONLY"
)
OPEN_INDEX_SPEC = IndexSpec(
    name=OPEN_INDEX, partition_key=("open_key", "S"), sort_key=("updated_at", "N"), projection="KEYS_ONLY"
)


class ItemStatus(str, enum.Enum):
    """The state of one item. The item row is the truth."""

    PENDING = "pending"  # set by the producer; by the worker after a retriable failure; by the reclaimer
    #                      for a stale running item with attempts left; by the operator's retry_failed
    RUNNING = "running"  # set by the worker's claim (attempts + 1)
    COMPLETED = "completed"  # set by the worker that holds the claim token (terminal)
    FAILED = "failed"  # set by the worker (attempts cap, permanent error, quota exhausted) or by the
    #                    reclaimer (stale at the cap); terminal for automation, only retry_failed reopens


class BatchStatus(str, enum.Enum):
    """The state of one batch, derived from its item rows."""

    OPEN = "open"  # set by the producer; by retry_failed when it reopens failed items
    FINALIZED = "finalized"  # set by finalize (worker roll-up or reclaimer) when a recount finds no live item


class QuotaHold(str, enum.Enum):
    """What an item holds of its tenant's quota (absent: nothing yet)."""

    RESERVED = "reserved"  # set by the claim transaction or by retry_failed; kept on completion (spent)
    REFUNDED = "refunded"  # set by the terminal-failure transaction that gives the unit back


LIVE = (ItemStatus.PENDING, ItemStatus.RUNNING)
TERMINAL = (ItemStatus.COMPLETED, ItemStatus.FAILED)


@dataclass(frozen=True)
class Timing:
    """Timing and limits of one pipeline (DESIGN §3)."""

    per_item_timeout_s: int = 240
    item_stale_s: int = 360
    pending_stale_s: int = 900
    batch_stale_s: int = 900
    attempts_cap: int = 5
    retry_delay_s: int = 30  # first retry's delay; doubles per attempt, capped below pending_stale

    def __post_init__(self) -> None:
        if not 0 < self.per_item_timeout_s < self.item_stale_s <= self.batch_stale_s:
            raise ValueError("need per-item timeout < item stale <= batch stale: a live item must never look stale")
        if self.attempts_cap < 1:
            raise ValueError("the attempts cap is at least 1")
        if self.max_retry_delay_s >= self.pending_stale_s:
            raise ValueError("a delayed retry must arrive before its pending item looks lost")

    @property
    def max_retry_delay_s(self) -> int:
        return min(900, self.retry_delay_s * 2 ** max(self.attempts_cap - 2, 0))

    def retry_delay(self, attempts: int) -> int:
        """SQS delay of the wake-up after the `attempts`-th attempt failed (SQS allows at most 900 s)."""
        return min(900, self.retry_delay_s * 2 ** max(attempts - 1, 0), self.max_retry_delay_s)


@dataclass(frozen=True)
class BatchRef:
    """A batch, always named with its tenant."""

    tenant: str
    batch_id: str

    @property
    def batch_key(self) -> str:
        return f"{self.tenant}#{self.batch_id}"

    @classmethod
    def parse(cls, text: str) -> "BatchRef":
        """`tenant/batch` (the operator CLI's spelling)."""
        tenant, sep, batch_id = text.partition("/")
        ref = _Keys.model_validate({"tenant": tenant, "batch": batch_id, "item": "x"}) if sep else None
        if ref is None:
            raise ValueError(f"a batch is written tenant/batch, got {text!r}")
        return cls(ref.tenant, ref.batch)

    def __str__(self) -> str:
        return f"{self.tenant}/{self.batch_id}"


@dataclass(frozen=True)
class ItemKey:
    """One item: the only thing a wake-up message carries."""

    tenant: str
    batch_id: str
    item_id: str

    @property
    def batch(self) -> BatchRef:
        return BatchRef(self.tenant, self.batch_id)

    def body(self) -> str:
        return json.dumps({"tenant": self.tenant, "batch": self.batch_id, "item": self.item_id}, separators=(",", ":"))


class _Keys(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tenant: str = Field(pattern=ID_PATTERN)
    batch: str = Field(pattern=ID_PATTERN)
    item: str = Field(pattern=ID_PATTERN)


def parse_wakeup(body: str) -> ItemKey:
    """The keys of an SQS message body, or `InvalidEvent` saying what is wrong (never echoing the body)."""
    try:
        keys = _Keys.model_validate_json(body)
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['type']}" for err in exc.errors()[:3]
        )
        raise InvalidEvent(f"message body is not a wake-up {{tenant, batch, item}}: {where}") from None
    return ItemKey(keys.tenant, keys.batch, keys.item)


@dataclass(frozen=True)
class ItemInput:
    """One item handed to the producer: its id and its (bounded, never logged) input."""

    item_id: str
    payload: Mapping[str, Any]


@dataclass(frozen=True)
class WorkRequest:
    """What a provider call gets: the item's keys, its input and a key that makes retries idempotent."""

    key: ItemKey
    kind: str
    attempt: int
    payload: Mapping[str, Any]

    @property
    def idempotency_key(self) -> str:
        # per item, not per attempt: a retry after a lost response must not act twice
        return f"{self.key.tenant}:{self.key.batch_id}:{self.key.item_id}"


Perform = Callable[[WorkRequest, float], str]  # (request, timeout seconds) -> result reference


class PermanentFailure(JobfenceError):
    """A provider refused the item for good (bad input): fail it now, whatever its attempts."""


class BatchConflict(JobfenceError):
    """A batch id reused with a different kind or size."""


def _validate_id(value: str, what: str) -> str:
    if not re.fullmatch(ID_PATTERN, value or ""):
        raise ValueError(f"{what} must match {ID_PATTERN}")
    return value


# -- rows ------------------------------------------------------------------------------------


class _ReclaimIndex(GlobalSecondaryIndex):
    class Meta:
        index_name = RECLAIM_INDEX
        projection = KeysOnlyProjection()

    reclaim_key = UnicodeAttribute(hash_key=True)
    updated_at = NumberAttribute(range_key=True)


class _OpenIndex(GlobalSecondaryIndex):
    class Meta:
        index_name = OPEN_INDEX
        projection = KeysOnlyProjection()

    open_key = UnicodeAttribute(hash_key=True)
    updated_at = NumberAttribute(range_key=True)


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
    open_key = UnicodeAttribute(null=True)
    by_open = _OpenIndex()


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
    reclaim_key = UnicodeAttribute(null=True)
    by_reclaim = _ReclaimIndex()


def reclaim_key(kind: str, status: ItemStatus, key: ItemKey) -> str:
    """The sparse index partition of a live item."""
    shard = zlib.crc32(f"{key.batch.batch_key}#{key.item_id}".encode()) % RECLAIM_SHARDS
    return f"{kind}#{status.value}#{shard}"


def bounded_error(text: str) -> str:
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


@dataclass(frozen=True)
class ItemRow:
    """An item as the operator and the tests see it (no payload)."""

    tenant: str
    batch_id: str
    item_id: str
    kind: str
    seq: int
    status: ItemStatus
    attempts: int
    error: str | None
    updated_at: int
    result_ref: str | None
    quota: QuotaHold | None
    quota_reservations: int
    quota_refunds: int
    claim_token: str | None

    @property
    def key(self) -> ItemKey:
        return ItemKey(self.tenant, self.batch_id, self.item_id)


@dataclass(frozen=True)
class BatchRow:
    """A batch as the operator and the tests see it."""

    tenant: str
    batch_id: str
    kind: str
    status: BatchStatus
    total: int
    completed: int
    failed: int
    enqueued: int
    rollups: int
    recounts: int
    created_by: str
    created_at: int
    updated_at: int
    finalized_at: int | None
    retries: int
    retried_by: str | None
    retried_at: int | None

    @property
    def ref(self) -> BatchRef:
        return BatchRef(self.tenant, self.batch_id)


@dataclass(frozen=True)
class BatchReport:
    """Rows first (seed 003's debugging procedure): the batch, then its items by `updated_at`."""

    batch: BatchRow
    items: list[ItemRow]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in ItemStatus}
        for item in self.items:
            out[item.status.value] += 1
        return out


def _item_row(row: Any) -> ItemRow:
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
    )


def _batch_row(row: Any) -> BatchRow:
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
    )


# -- claims ----------------------------------------------------------------------------------


class ClaimState(str, enum.Enum):
    """How one wake-up's claim came out."""

    CLAIMED = "claimed"  # this worker holds the item: process it
    DUPLICATE = "duplicate"  # not pending (done, running elsewhere, failed): acknowledge
    NOT_FOUND = "not_found"  # no such item under this tenant and batch: a batch item failure
    WRONG_PIPELINE = "wrong_pipeline"  # the item belongs to the other queue: a batch item failure
    QUOTA_EXHAUSTED = "quota_exhausted"  # failed terminally, nothing reserved: acknowledge
    CONTENDED = "contended"  # the claim lost every round to races: a batch item failure (redelivered)


@dataclass(frozen=True)
class Claim:
    key: ItemKey
    state: ClaimState
    token: str | None = None
    attempts: int = 0
    payload: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""


@dataclass
class BatchDelta:
    """What one SQS batch did to one batch: rolled up in one write (the heartbeat)."""

    completed: int = 0
    failed: int = 0


class WorkStore:
    """Every read and write of the batches and items tables."""

    def __init__(self, batches_table: str, items_table: str, quota: QuotaStore, clock: Clock) -> None:
        self.batches: Any = bind(_Batch, batches_table)
        self.items: Any = bind(_Item, items_table)
        self.quota = quota
        self._clock = clock
        meta = self.items.Meta
        self._connection = Connection(region=getattr(meta, "region", None), host=getattr(meta, "host", None))

    def _tx(self) -> TransactWrite:
        return TransactWrite(connection=self._connection)

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
        try:
            row.save(condition=self.batches.tenant.does_not_exist())
            return _batch_row(row), True
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
        try:
            self.batches(ref.tenant, ref.batch_id).update(
                actions=[self.batches.enqueued.set(enqueued)], condition=self.batches.enqueued < enqueued
            )
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"checkpointing batch {ref} failed: {exc.cause_response_code}") from exc

    # -- reading ------------------------------------------------------------------------------

    def batch(self, ref: BatchRef) -> BatchRow | None:
        try:
            return _batch_row(self.batches.get(ref.tenant, ref.batch_id, consistent_read=True))
        except self.batches.DoesNotExist:
            return None

    def item(self, key: ItemKey) -> ItemRow | None:
        try:
            return _item_row(self.items.get(key.batch.batch_key, key.item_id, consistent_read=True))
        except self.items.DoesNotExist:
            return None

    def item_rows(self, ref: BatchRef) -> list[ItemRow]:
        """Every item row of the batch (one partition, strongly consistent), in seq order."""
        rows = [_item_row(r) for r in self.items.query(ref.batch_key, consistent_read=True)]
        return sorted(rows, key=lambda r: r.seq)

    def describe_batch(self, ref: BatchRef) -> BatchReport | None:
        """Rows first: the batch, then its items (status, attempts, error) ordered by `updated_at`."""
        batch = self.batch(ref)
        if batch is None:
            return None
        items = sorted(self.item_rows(ref), key=lambda r: (r.updated_at, r.seq))
        return BatchReport(batch, items)

    # -- claim --------------------------------------------------------------------------------

    def claim(self, keys: Sequence[ItemKey], kind: str, attempts_cap: int) -> dict[ItemKey, Claim]:
        """Claim up to 100 distinct items in one transaction, reserving quota for those without.

        One consistent BatchGetItem reads the rows (the worker needs their input,
        and a transaction returns nothing), then one TransactWriteItems moves every
        claimable row pending -> running under a condition that re-checks exactly
        what was read, together with one quota Update per tenant. A refused
        condition comes back with the row (ALL_OLD), so the plan is corrected
        and retried without a re-read.
        """
        if len(set(keys)) != len(keys):
            raise ValueError("claim takes distinct keys")
        rows: dict[ItemKey, Any] = {}
        if keys:
            try:
                found = list(self.items.batch_get([(k.batch.batch_key, k.item_id) for k in keys], consistent_read=True))
            except PynamoDBException as exc:
                raise StoreError(f"reading items to claim failed: {safe_error(exc)}") from exc
            by_id = {(r.batch_key, r.item_id): r for r in found}
            for k in keys:
                row = by_id.get((k.batch.batch_key, k.item_id))
                if row is not None and row.tenant == k.tenant:
                    rows[k] = row
        out: dict[ItemKey, Claim] = {}
        for k in keys:
            if k not in rows:
                out[k] = Claim(k, ClaimState.NOT_FOUND, reason="no such item for this tenant and batch")
        quota_left: dict[str, int | None] = {}  # None: not known yet, try all
        for _ in range(CLAIM_ROUNDS):
            plan = self._plan_claims(rows, out, kind, attempts_cap, quota_left)
            if not plan.ops:
                return out
            try:
                with self._tx() as tx:
                    for op in plan.ops:
                        op.add_to(tx)
            except TransactWriteError as exc:
                if exc.cause_response_code != "TransactionCanceledException":
                    raise StoreError(f"claim transaction failed: {exc.cause_response_code}") from exc
                self._read_refusals(exc, plan, rows, quota_left)
                continue
            out.update(plan.results)
            return out
        for k in rows:
            out.setdefault(k, Claim(k, ClaimState.CONTENDED, reason=f"claim lost {CLAIM_ROUNDS} rounds to races"))
        return out

    def _plan_claims(
        self,
        rows: dict[ItemKey, Any],
        out: dict[ItemKey, Claim],
        kind: str,
        attempts_cap: int,
        quota_left: dict[str, int | None],
    ) -> "_ClaimPlan":
        now = self._clock.now_ms()
        plan = _ClaimPlan()
        wanting: dict[str, list[ItemKey]] = {}
        for key, row in sorted(rows.items(), key=lambda kv: int(kv[1].seq)):
            if key in out:
                continue
            status = ItemStatus(row.status)
            if row.kind != kind:
                out[key] = Claim(key, ClaimState.WRONG_PIPELINE, reason=f"item belongs to the {row.kind} pipeline")
            elif status is not ItemStatus.PENDING:
                out[key] = Claim(key, ClaimState.DUPLICATE, reason=f"item is {status.value}")
            elif int(row.attempts or 0) >= attempts_cap:
                out[key] = Claim(key, ClaimState.DUPLICATE, reason="attempts cap reached")
            elif row.quota == QuotaHold.RESERVED.value:
                plan.claim(self, key, row, kind, reserve=False, now=now)
            else:
                wanting.setdefault(key.tenant, []).append(key)
        for tenant, wanted in wanting.items():
            left = quota_left.get(tenant)
            granted = wanted if left is None else wanted[: max(left, 0)]
            for key in wanted[len(granted):]:
                plan.exhaust(self, key, rows[key], now=now)
            if granted:
                plan.reserve(self, tenant, len(granted))
                for key in granted:
                    plan.claim(self, key, rows[key], kind, reserve=True, now=now)
        return plan

    def _read_refusals(
        self, exc: TransactWriteError, plan: "_ClaimPlan", rows: dict[ItemKey, Any], quota_left: dict[str, int | None]
    ) -> None:
        for op, reason in zip(plan.ops, exc.cancellation_reasons):
            if reason is None or reason.code != "ConditionalCheckFailed":
                continue  # TransactionConflict or collateral: the next round tries again
            if op.tenant_quota is not None:
                quota_left[op.tenant_quota] = available_in(reason.raw_item)
            elif op.key is not None:
                if not reason.raw_item:
                    rows.pop(op.key, None)  # deleted meanwhile: reported as not found next round
                    continue
                rows[op.key] = self.items.from_raw_data(reason.raw_item)

    # -- outcomes of a claimed item (all conditioned on the claim token) ---------------------

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
        condition = (self.items.claim_token == claim.token) & (self.items.status == ItemStatus.RUNNING.value)
        return self._fail_terminally(claim.key, condition, error)

    def _fail_terminally(self, key: ItemKey, condition: Any, error: str) -> bool:
        """Fail one item under `condition`; refund exactly once if it holds a reservation.

        Two variants: with a reservation, the item's `quota` moves reserved ->
        refunded and the quota row gets its unit back in one transaction; the
        item condition (quota = reserved) makes a repeat refund impossible.
        """
        now = self._clock.now_ms()
        actions = [
            self.items.status.set(ItemStatus.FAILED.value),
            self.items.error.set(bounded_error(error)),
            self.items.updated_at.set(now),
            self.items.claim_token.remove(),
            self.items.reclaim_key.remove(),
        ]
        row = self.items(key.batch.batch_key, key.item_id)
        try:
            with self._tx() as tx:
                tx.update(
                    row,
                    actions=[*actions, self.items.quota.set(QuotaHold.REFUNDED.value), self.items.quota_refunds.add(1)],
                    condition=condition & (self.items.quota == QuotaHold.RESERVED.value),
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
            row.update(actions=actions, condition=condition & self.items.quota.does_not_exist() | (
                condition & (self.items.quota == QuotaHold.REFUNDED.value)
            ))
            return True
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"failing an item failed: {exc.cause_response_code}") from exc
            return False

    def _update_claimed(self, claim: Claim, actions: list[Any]) -> bool:
        condition = (self.items.claim_token == claim.token) & (self.items.status == ItemStatus.RUNNING.value)
        try:
            self.items(claim.key.batch.batch_key, claim.key.item_id).update(actions=actions, condition=condition)
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
        try:
            row.update(
                actions=[
                    self.batches.completed.add(delta.completed),
                    self.batches.failed.add(delta.failed),
                    self.batches.rollups.add(1),
                    self.batches.updated_at.set(now),
                ],
                condition=self.batches.tenant.exists(),
            )
        except UpdateError as exc:
            if exc.cause_response_code == CONDITIONAL_CHECK_FAILED:
                return None
            raise StoreError(f"rolling up batch {ref} failed: {exc.cause_response_code}") from exc
        return _batch_row(row)

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
        actions = [
            self.batches.completed.set(counts[ItemStatus.COMPLETED]),
            self.batches.failed.set(counts[ItemStatus.FAILED]),
            self.batches.recounts.add(1),
        ]
        if rollup:
            actions.append(self.batches.rollups.add(1))
        if live == 0:
            actions += [
                self.batches.status.set(BatchStatus.FINALIZED.value),
                self.batches.finalized_at.set(now),
                self.batches.open_key.remove(),
            ]
        if live == 0 or heartbeat or rollup:
            actions.append(self.batches.updated_at.set(now))
        # nobody rolled up since `seen`: the recount includes everything the counters do
        condition = (self.batches.status == BatchStatus.OPEN.value) & (self.batches.rollups == seen.rollups)
        if live == 0 and not rollup:
            condition = self.batches.status == BatchStatus.OPEN.value  # rows say done: always true
        row = self.batches(ref.tenant, ref.batch_id)
        try:
            row.update(actions=actions, condition=condition)
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"finalizing batch {ref} failed: {exc.cause_response_code}") from exc
            return None
        return _batch_row(row)

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

    def requeue_stale(self, key: ItemKey, kind: str, status: ItemStatus, seen_updated_at: int, attempts_cap: int,
                      error: str) -> str:
        """Move a stale live item on: 'requeued', 'capped' (needs failing) or 'changed' (left alone).

        The condition re-checks status, `updated_at` and attempts, so an item
        that completed, was claimed again or was re-enqueued after the index
        read is never overwritten.
        """
        now = self._clock.now_ms()
        condition = (
            (self.items.status == status.value)
            & (self.items.updated_at == seen_updated_at)
            & (self.items.attempts < attempts_cap)
        )
        actions = [
            self.items.status.set(ItemStatus.PENDING.value),
            self.items.updated_at.set(now),
            self.items.reclaim_key.set(reclaim_key(kind, ItemStatus.PENDING, key)),
        ]
        if status is ItemStatus.RUNNING:
            actions += [self.items.claim_token.remove(), self.items.error.set(bounded_error(error))]
        try:
            self.items(key.batch.batch_key, key.item_id).update(actions=actions, condition=condition)
            return "requeued"
        except UpdateError as exc:
            if exc.cause_response_code != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"reclaiming an item failed: {exc.cause_response_code}") from exc
        row = self.item(key)
        if row is not None and row.status is status and row.updated_at == seen_updated_at and row.attempts >= attempts_cap:
            return "capped"
        return "changed"

    def fail_stale(self, key: ItemKey, status: ItemStatus, seen_updated_at: int, error: str) -> bool:
        """A stale live item at the attempts cap -> failed, refunding its reservation."""
        condition = (self.items.status == status.value) & (self.items.updated_at == seen_updated_at)
        return self._fail_terminally(key, condition, error)

    # -- operator -----------------------------------------------------------------------------

    def reopen_failed(self, ref: BatchRef, requested_by: str, chunk: int = 50) -> "RetryResult":
        """Reset failed items to pending with a fresh attempts budget, re-reserving their quota.

        Per chunk: one transaction with the tenant's quota reservation and every
        item's reset (condition: still failed exactly as read). Items the quota
        cannot cover stay failed. The batch row records who asked and when, and
        is reopened. Only this operator action ever resets a budget.
        """
        batch = self.batch(ref)
        if batch is None:
            raise StoreError(f"no batch {ref}")
        failed = [self.items.get(ref.batch_key, r.item_id, consistent_read=True)
                  for r in self.item_rows(ref) if r.status is ItemStatus.FAILED]
        retried: list[ItemKey] = []
        skipped = 0
        for start in range(0, len(failed), chunk):
            part = failed[start:start + chunk]
            for _ in range(CLAIM_ROUNDS):
                if not part:
                    break
                now = self._clock.now_ms()
                m = self.items
                try:
                    with self._tx() as tx:
                        self.quota.reserve_in(tx, ref.tenant, len(part))
                        for row in part:
                            key = ItemKey(ref.tenant, ref.batch_id, row.item_id)
                            tx.update(
                                m(ref.batch_key, row.item_id),
                                actions=[
                                    m.status.set(ItemStatus.PENDING.value),
                                    m.attempts.set(0),
                                    m.updated_at.set(now),
                                    m.error.set(bounded_error(f"retry requested by {requested_by}; last error: {row.error}")),
                                    m.quota.set(QuotaHold.RESERVED.value),
                                    m.quota_reservations.add(1),
                                    m.reclaim_key.set(reclaim_key(batch.kind, ItemStatus.PENDING, key)),
                                ],
                                condition=(m.status == ItemStatus.FAILED.value) & (m.updated_at == int(row.updated_at)),
                                return_values="ALL_OLD",
                            )
                except TransactWriteError as exc:
                    if exc.cause_response_code != "TransactionCanceledException":
                        raise StoreError(f"retrying failed items failed: {exc.cause_response_code}") from exc
                    reasons = exc.cancellation_reasons
                    quota_reason = reasons[0] if reasons else None
                    if quota_reason is not None and quota_reason.code == "ConditionalCheckFailed":
                        left = available_in(quota_reason.raw_item)
                        skipped += len(part) - max(left, 0)
                        part = part[: max(left, 0)]
                    changed = {
                        row.item_id
                        for row, reason in zip(part, reasons[1:])
                        if reason is not None and reason.code == "ConditionalCheckFailed"
                    }
                    part = [row for row in part if row.item_id not in changed]
                    continue
                retried += [ItemKey(ref.tenant, ref.batch_id, row.item_id) for row in part]
                break
        if retried:
            now = self._clock.now_ms()
            try:
                self.batches(ref.tenant, ref.batch_id).update(
                    actions=[
                        self.batches.status.set(BatchStatus.OPEN.value),
                        self.batches.open_key.set(batch.kind),
                        self.batches.failed.add(-len(retried)),
                        self.batches.finalized_at.remove(),
                        self.batches.updated_at.set(now),
                        self.batches.retries.add(1),
                        self.batches.retried_by.set(requested_by),
                        self.batches.retried_at.set(now),
                    ],
                    condition=self.batches.tenant.exists(),
                )
            except UpdateError as exc:
                raise StoreError(f"reopening batch {ref} failed: {exc.cause_response_code}") from exc
        return RetryResult(retried=retried, skipped_quota=skipped)


@dataclass(frozen=True)
class RetryResult:
    """What retry_failed did: the items reopened (and re-enqueued) and those the quota could not cover."""

    retried: list[ItemKey]
    skipped_quota: int


@dataclass
class _ClaimOp:
    key: ItemKey | None
    tenant_quota: str | None
    add_to: Callable[[TransactWrite], None]


@dataclass
class _ClaimPlan:
    ops: list[_ClaimOp] = field(default_factory=list)
    results: dict[ItemKey, Claim] = field(default_factory=dict)

    def claim(self, store: WorkStore, key: ItemKey, row: Any, kind: str, reserve: bool, now: int) -> None:
        m = store.items
        token = uuid.uuid4().hex
        seen_quota = (m.quota == row.quota) if row.quota else m.quota.does_not_exist()
        condition = (
            (m.status == ItemStatus.PENDING.value)
            & (m.attempts == int(row.attempts or 0))
            & (m.updated_at == int(row.updated_at))
            & (m.tenant == key.tenant)
            & seen_quota
        )
        actions = [
            m.status.set(ItemStatus.RUNNING.value),
            m.claim_token.set(token),
            m.updated_at.set(now),
            m.attempts.add(1),
            m.reclaim_key.set(reclaim_key(kind, ItemStatus.RUNNING, key)),
        ]
        if reserve:
            actions += [m.quota.set(QuotaHold.RESERVED.value), m.quota_reservations.add(1)]
        target = m(key.batch.batch_key, key.item_id)
        self.ops.append(
            _ClaimOp(key, None, lambda tx: tx.update(target, actions=actions, condition=condition, return_values="ALL_OLD"))
        )
        self.results[key] = Claim(
            key,
            ClaimState.CLAIMED,
            token=token,
            attempts=int(row.attempts or 0) + 1,
            payload=json.loads(row.payload),
        )

    def exhaust(self, store: WorkStore, key: ItemKey, row: Any, now: int) -> None:
        m = store.items
        condition = (
            (m.status == ItemStatus.PENDING.value)
            & (m.updated_at == int(row.updated_at))
            & (m.tenant == key.tenant)
            & ~(m.quota == QuotaHold.RESERVED.value)
        )
        actions = [
            m.status.set(ItemStatus.FAILED.value),
            m.error.set("quota exhausted: the tenant has no units left (retry_failed re-reserves)"),
            m.updated_at.set(now),
            m.reclaim_key.remove(),
        ]
        target = m(key.batch.batch_key, key.item_id)
        self.ops.append(
            _ClaimOp(key, None, lambda tx: tx.update(target, actions=actions, condition=condition, return_values="ALL_OLD"))
        )
        self.results[key] = Claim(key, ClaimState.QUOTA_EXHAUSTED, reason="quota exhausted")

    def reserve(self, store: WorkStore, tenant: str, units: int) -> None:
        self.ops.append(_ClaimOp(None, tenant, lambda tx: store.quota.reserve_in(tx, tenant, units)))


# -- wake-ups ------------------------------------------------------------------------------


class Wakeups(Protocol):
    """Where wake-up messages go (one queue per pipeline)."""

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        """Send one wake-up per key; return the keys that could not be sent."""
        ...


class SqsWakeups:
    """Wake-ups on an SQS queue, 10 to a SendMessageBatch request."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._client = client
        self._url = queue_url

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        failed: list[ItemKey] = []
        for start in range(0, len(keys), SEND_CHUNK):
            chunk = list(keys[start:start + SEND_CHUNK])
            entries = [
                {"Id": str(i), "MessageBody": key.body(), "DelaySeconds": max(0, min(int(delay_s), 900))}
                for i, key in enumerate(chunk)
            ]
            try:
                out = self._client.send_message_batch(QueueUrl=self._url, Entries=entries)
            except Exception:  # noqa: BLE001 - the caller decides; the rows stay the truth
                failed += chunk
                continue
            failed += [chunk[int(f["Id"])] for f in out.get("Failed", [])]
        return failed


# -- producer ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmitResult:
    """What one producer call did."""

    ref: BatchRef
    created: bool  # the batch row was created by this call
    rows_written: int
    enqueued: int  # wake-ups sent by this call


class Producer:
    """Create a batch of up to 10,000 items and wake a worker for each.

    Repeating a call is safe: the batch row is created once (conditional put),
    only missing item rows are written, and wake-ups resume from the batch's
    `enqueued` checkpoint (advanced after every SendMessageBatch), so a call
    that completed enqueues nothing the second time.
    """

    def __init__(self, store: WorkStore, wakeups: Mapping[str, Wakeups], logger: Logger) -> None:
        self._store = store
        self._wakeups = dict(wakeups)
        self._logger = logger

    def submit(self, ref: BatchRef, kind: str, items: Sequence[ItemInput], created_by: str) -> SubmitResult:
        """Create (or resume creating) the batch; raise `StoreError` if wake-ups cannot be sent."""
        _validate_id(ref.tenant, "tenant")
        _validate_id(ref.batch_id, "batch id")
        if kind not in self._wakeups:
            raise ValueError(f"no pipeline {kind!r}")
        if not 1 <= len(items) <= MAX_ITEMS_PER_BATCH:
            raise ValueError(f"a batch has 1..{MAX_ITEMS_PER_BATCH} items, got {len(items)}")
        ids = [_validate_id(i.item_id, "item id") for i in items]
        if len(set(ids)) != len(ids):
            raise ValueError("item ids must be unique within a batch")
        for item in items:
            if len(json.dumps(dict(item.payload), separators=(",", ":"))) > MAX_PAYLOAD_CHARS:
                raise ValueError(f"an item's input is limited to {MAX_PAYLOAD_CHARS} characters")
        batch, created = self._store.open_batch(ref, kind, len(items), created_by)
        if created:
            missing = list(enumerate(items))
        else:
            existing = self._store.existing_item_ids(ref)
            if not existing <= set(ids):
                raise BatchConflict(f"batch {ref} exists with other item ids")
            missing = [(seq, item) for seq, item in enumerate(items) if item.item_id not in existing]
        if missing:
            self._store.put_items(ref, kind, missing)
        sent = 0
        for start in range(batch.enqueued, len(items), SEND_CHUNK):
            chunk = [ItemKey(ref.tenant, ref.batch_id, i.item_id) for i in items[start:start + SEND_CHUNK]]
            failed = self._wakeups[kind].send(chunk)
            if failed:
                failed = self._wakeups[kind].send(failed)  # one more try for a partial failure
            if failed:
                raise StoreError(f"{len(failed)} wake-ups of batch {ref} could not be sent; repeat the call to resume")
            sent += len(chunk)
            self._store.checkpoint_enqueued(ref, start + len(chunk))
        self._logger.info(
            "batch submitted",
            extra={"tenant": ref.tenant, "batch": ref.batch_id, "kind": kind, "batch_created": created,
                   "rows_written": len(missing), "enqueued": sent},
        )
        return SubmitResult(ref, created, len(missing), sent)

    def retry_failed(self, ref: BatchRef, requested_by: str) -> dict[str, int]:
        """The operator's "retry failed" (see `BatchOperations.retry_failed`)."""
        return BatchOperations(self._store, self._wakeups, self._logger).retry_failed(ref, requested_by)


# -- worker --------------------------------------------------------------------------------


class MessageFailed(JobfenceError):
    """This SQS message becomes a batch item failure (SQS redelivers it, then dead-letters it)."""


@dataclass(frozen=True)
class MessageOutcome:
    ok: bool
    reason: str


@dataclass
class RoundResult:
    """Per-message outcomes of one SQS batch, and counts for metrics."""

    outcomes: dict[str, MessageOutcome] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    def settle(self, record: Any) -> str:
        """Powertools record handler: raise for a message that must be redelivered."""
        message_id = record["messageId"] if isinstance(record, Mapping) else record.message_id
        outcome = self.outcomes.get(message_id)
        if outcome is None:
            raise MessageFailed("message was not part of this round")
        if not outcome.ok:
            raise MessageFailed(outcome.reason)
        return outcome.reason


class Worker:
    """Process one SQS batch of wake-ups for one pipeline (the function's own, never the message's).

    claim all (one transaction) -> run every claimed item at once, each bounded
    by the per-item timeout -> write each outcome to its row as it lands ->
    one roll-up per batch (heartbeat) -> finalize when the counters say done.
    """

    def __init__(
        self,
        store: WorkStore,
        kind: str,
        timing: Timing,
        perform: Perform,
        wakeups: Wakeups,
        logger: Logger,
        deadline_margin_ms: int = 20_000,
    ) -> None:
        self._store = store
        self.kind = kind
        self.timing = timing
        self._perform = perform
        self._wakeups = wakeups
        self._logger = logger
        self._margin = deadline_margin_ms

    def process(self, records: Sequence[Mapping[str, Any]], remaining_ms: int | None = None) -> RoundResult:
        """Claim, run and record every item the records wake; never raises for one bad message."""
        result = RoundResult()
        message_of: dict[ItemKey, str] = {}
        for record in records:
            message_id = str(record.get("messageId", ""))
            try:
                key = parse_wakeup(str(record.get("body", "")))
            except InvalidEvent as exc:
                self._reject(result, message_id, str(exc), "malformed")
                continue
            if key in message_of:
                self._ack(result, message_id, key, "duplicate in this delivery", "duplicate")
                continue
            message_of[key] = message_id
        try:
            claims = self._store.claim(list(message_of), self.kind, self.timing.attempts_cap)
        except JobfenceError as exc:
            for key, message_id in message_of.items():
                self._reject(result, message_id, f"claim error: {safe_error(exc)}", "claim_error", key)
            return result
        deltas: dict[BatchRef, BatchDelta] = {}
        claimed: list[Claim] = []
        for key, claim in claims.items():
            message_id = message_of[key]
            if claim.state is ClaimState.CLAIMED:
                claimed.append(claim)
                deltas.setdefault(key.batch, BatchDelta())
            elif claim.state is ClaimState.DUPLICATE:
                self._ack(result, message_id, key, f"claim refused: {claim.reason}", "duplicate")
            elif claim.state is ClaimState.QUOTA_EXHAUSTED:
                deltas.setdefault(key.batch, BatchDelta()).failed += 1
                self._ack(result, message_id, key, "failed: quota exhausted", "failed")
            else:
                self._reject(result, message_id, f"claim refused: {claim.reason}", claim.state.value, key)
        retry: list[Claim] = []
        if claimed:
            self._run(claimed, remaining_ms, result, message_of, deltas, retry)
        self._wake_retries(retry, result, message_of)
        for ref, delta in deltas.items():
            self._roll_up(ref, delta, result)
        return result

    # -- running ----------------------------------------------------------------------------

    def _run(
        self,
        claimed: list[Claim],
        remaining_ms: int | None,
        result: RoundResult,
        message_of: dict[ItemKey, str],
        deltas: dict[BatchRef, BatchDelta],
        retry: list[Claim],
    ) -> None:
        timeout_s = float(self.timing.per_item_timeout_s)
        if remaining_ms is not None:
            # leave time to write the timeout rows before Lambda itself stops us
            timeout_s = max(1.0, min(timeout_s, (remaining_ms - self._margin) / 1000))
        pool = ThreadPoolExecutor(max_workers=len(claimed), thread_name_prefix="item")
        futures: dict[Future, Claim] = {}
        for claim in claimed:
            request = WorkRequest(claim.key, self.kind, claim.attempts, claim.payload)
            futures[pool.submit(self._perform, request, timeout_s)] = claim
        settled: set[Future] = set()
        try:
            for future in _as_completed(futures, timeout_s):
                settled.add(future)
                claim = futures[future]
                error = future.exception()
                if error is None:
                    self._record(claim, "completed", future.result(), result, message_of, deltas, retry)
                elif isinstance(error, PermanentFailure):
                    self._record(claim, "rejected", safe_error(error), result, message_of, deltas, retry)
                else:
                    self._record(claim, "error", safe_error(error), result, message_of, deltas, retry)
        finally:
            for future, claim in futures.items():
                if future not in settled:
                    # the row is the only trace of a timeout (seed 003, US-1552)
                    reason = f"timed out after {timeout_s:g} s (per-item limit)"
                    self._record(claim, "error", reason, result, message_of, deltas, retry)
            pool.shutdown(wait=False, cancel_futures=True)

    def _record(
        self,
        claim: Claim,
        how: str,
        detail: str,
        result: RoundResult,
        message_of: dict[ItemKey, str],
        deltas: dict[BatchRef, BatchDelta],
        retry: list[Claim],
    ) -> None:
        message_id = message_of[claim.key]
        delta = deltas.setdefault(claim.key.batch, BatchDelta())
        try:
            if how == "completed":
                if self._store.complete(claim, str(detail)):
                    delta.completed += 1
                    self._ack(result, message_id, claim.key, "completed", "completed", log=False)
                    return
            elif how == "rejected" or claim.attempts >= self.timing.attempts_cap:
                if self._store.fail(claim, detail):
                    delta.failed += 1
                    self._ack(result, message_id, claim.key, f"failed at attempt {claim.attempts}: {detail}", "failed")
                    return
            else:
                if self._store.release(claim, self.kind, detail):
                    retry.append(claim)
                    self._ack(result, message_id, claim.key, f"attempt {claim.attempts} failed, will retry: {detail}",
                              "retried")
                    return
        except JobfenceError as exc:
            # the row still says running: reclaim picks it up after item-stale
            self._reject(result, message_id, f"writing the outcome failed: {safe_error(exc)}", "write_error", claim.key)
            return
        # the claim token no longer matches: the reclaimer (or an operator) moved the row on
        self._ack(result, message_id, claim.key, "claim lost before the outcome was written", "claim_lost")

    def _wake_retries(self, retry: list[Claim], result: RoundResult, message_of: dict[ItemKey, str]) -> None:
        by_delay: dict[int, list[ItemKey]] = {}
        for claim in retry:
            by_delay.setdefault(self.timing.retry_delay(claim.attempts), []).append(claim.key)
        for delay, keys in by_delay.items():
            for key in self._wakeups.send(keys, delay_s=delay):
                # the item is pending: a redelivery of this very message claims it again
                self._reject(result, message_of[key], "retry wake-up could not be sent", "wake_error", key)

    def _roll_up(self, ref: BatchRef, delta: BatchDelta, result: RoundResult) -> None:
        try:
            row = self._store.rollup(ref, delta)
            result.count("rollups")
            if row is not None and row.status is BatchStatus.OPEN and row.completed + row.failed >= row.total:
                self._store.finalize(ref, seen=row)  # a roll-up raced ours: recount once more
        except JobfenceError as exc:
            # counters are only a hint: the reclaimer finalizes a quiet batch from its rows
            self._logger.warning("roll-up failed", extra={"tenant": ref.tenant, "batch": ref.batch_id,
                                                          "reason": safe_error(exc)})

    # -- message outcomes ---------------------------------------------------------------------

    def _ack(self, result: RoundResult, message_id: str, key: ItemKey, reason: str, counter: str,
             log: bool = True) -> None:
        result.outcomes[message_id] = MessageOutcome(True, reason)
        result.count(counter)
        if log:
            self._logger.info("item", extra={"outcome": counter, "reason": reason, **_ids(key)})

    def _reject(self, result: RoundResult, message_id: str, reason: str, counter: str,
                key: ItemKey | None = None) -> None:
        result.outcomes[message_id] = MessageOutcome(False, reason)
        result.count("message_failures")
        self._logger.warning("message failed", extra={"outcome": counter, "reason": reason, "message_id": message_id,
                                                       **(_ids(key) if key else {})})


def _ids(key: ItemKey) -> dict[str, str]:
    return {"tenant": key.tenant, "batch": key.batch_id, "item": key.item_id}


def _as_completed(futures: Iterable[Future], timeout_s: float) -> Iterator[Future]:
    """Futures as they finish, until `timeout_s` after the first call (all items started together)."""
    try:
        yield from as_completed(list(futures), timeout=timeout_s)
    except TimeoutError:
        return


# -- operator ------------------------------------------------------------------------------


class BatchOperations:
    """What an operator does to a batch: look at its rows, retry its failed items."""

    def __init__(self, store: WorkStore, wakeups: Mapping[str, Wakeups], logger: Logger) -> None:
        self._store = store
        self._wakeups = dict(wakeups)
        self._logger = logger

    def describe_batch(self, ref: BatchRef) -> BatchReport | None:
        """Rows first: the batch row, then its items ordered by `updated_at`."""
        return self._store.describe_batch(ref)

    def retry_failed(self, ref: BatchRef, requested_by: str) -> dict[str, int]:
        """Reopen failed items with a fresh attempts budget, re-reserve quota, re-enqueue them.

        The only thing that ever resets a budget. Recorded on the batch row
        (`retried_by`, `retried_at`, `retries`).
        """
        if not requested_by or len(requested_by) > 128:
            raise ValueError("retry_failed needs who asked (1..128 characters)")
        batch = self._store.batch(ref)
        if batch is None:
            raise StoreError(f"no batch {ref}")
        outcome = self._store.reopen_failed(ref, requested_by)
        unsent = self._wakeups[batch.kind].send(outcome.retried) if outcome.retried else []
        counts = {"retried": len(outcome.retried), "skipped_quota": outcome.skipped_quota, "unsent": len(unsent)}
        self._logger.info("retry_failed", extra={"tenant": ref.tenant, "batch": ref.batch_id,
                                                   "requested_by": requested_by, **counts})
        return counts
