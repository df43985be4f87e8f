"""Keys and states of durable batches: what a row, a wake-up and a claim are made of.

Nothing here talks to AWS. The states are the item row's and the batch row's
`status`; `ItemKey` is the only thing a wake-up message carries. One
pipeline's limits are `jobfence.work.timing.Timing` (catalog data).

Shards follow the load (docs/architecture.md, "Shards follow the load"): a
batch spreads its item rows over `shards_for(total)` partition keys, recorded
on its row; the reclaimer queries those partitions of open batches only
(there is no per-item index: docs/benchmarks.md, "Cost per million items").
"""

from __future__ import annotations

import enum
import json
import re
import uuid
import zlib
from dataclasses import dataclass

from jobfence.capacity import Cost
from jobfence.errors import JobfenceError, bounded

MAX_ITEMS_PER_BATCH = 10_000
MAX_ERROR_CHARS = 300
MAX_PAYLOAD_CHARS = 4_000
MAX_RESULT_REF_CHARS = 256
SEND_CHUNK = 10  # SendMessageBatch takes at most 10 entries
ITEMS_PER_TRANSACTION = 100  # TransactWriteItems takes at most 100 actions
MAX_SHARDS = 64  # the most item shards a batch uses, and the count of a batch row written before counts were recorded
KEY_WRITES_PER_S = (
    500  # the most writes a second a batch may put on one partition key (docs/benchmarks.md, hottest key)
)
WRITES_PER_ITEM = 3  # writes one item puts on its partition key in a pass: put, claim, outcome (see `shards_for`)
PEAK_ITEMS_PER_S = 10_000  # the rate a pipeline's fleet is sized for (a batch is worked at most this fast)
ROLLUP_SHARDS = 8  # a batch's roll-up tallies spread over this many partition keys (docs/benchmarks.md, hottest key)
CLAIM_ROUNDS = 3  # re-plan a claim transaction at most this often (races, conflicts)
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"  # no '#': it separates key parts


class ItemStatus(str, enum.Enum):
    """The state of one item. The item row is the truth."""

    PENDING = "pending"  # set by the producer; by the worker after a retriable failure; by the reclaimer
    #                      for a stale running item with attempts left; by the operator's retry_failed
    RUNNING = "running"  # set by the worker's claim (attempts + 1)
    COMPLETED = "completed"  # set by the worker that holds the claim token (terminal)
    FAILED = "failed"  # set by the worker (attempts cap, permanent error, quota exhausted) or by the
    #                    reclaimer (stale at the cap); terminal for automation, only retry_failed reopens
    CANCELLED = "cancelled"  # set by the operator's cancel (a pending item), by a worker whose claim came
    #                          after the batch's cancel, or by a finalize of a cancelled batch; terminal


class BatchStatus(str, enum.Enum):
    """The state of one batch, derived from its item rows."""

    OPEN = "open"  # set by the producer; by retry_failed when it reopens failed items
    FINALIZED = "finalized"  # set by finalize (worker roll-up or reclaimer) when a recount finds no live item
    FAILED_THRESHOLD = "failed_threshold"  # set by finalize instead when more items failed than the batch
    #                                        tolerates (its pending ones were failed); retry_failed reopens it
    CANCELLED = "cancelled"  # set by finalize instead when the operator cancelled the batch; never reopened

    @property
    def final(self) -> bool:
        """Never written again (only retry_failed reopens it explicitly)."""
        return self is not BatchStatus.OPEN


class QuotaHold(str, enum.Enum):
    """What an item holds of its tenant's quota (absent: nothing yet)."""

    RESERVED = "reserved"  # set by the producer's put, a claim transaction or retry_failed; kept on completion
    REFUNDED = "refunded"  # set by the terminal-failure (or cancel) transaction that gives the unit back


LIVE = (ItemStatus.PENDING, ItemStatus.RUNNING)
TERMINAL = (ItemStatus.COMPLETED, ItemStatus.FAILED, ItemStatus.CANCELLED)


@dataclass(frozen=True)
class BatchRef:
    """A batch, always named with its tenant."""

    tenant: str
    batch_id: str

    @property
    def batch_key(self) -> str:
        """`tenant#batch_id`: the prefix of the partition keys of the batch's item rows."""
        return f"{self.tenant}#{self.batch_id}"

    def item_partitions(self, shards: int) -> list[str]:
        """Every partition key the item rows of the batch may have, given its recorded shard count."""
        return [f"{self.batch_key}#{shard}" for shard in range(shards)]

    @classmethod
    def parse(cls, text: str) -> BatchRef:
        """`tenant/batch` (the operator CLI's spelling)."""
        tenant, sep, batch_id = text.partition("/")
        if not sep:
            raise ValueError(f"a batch is written tenant/batch, got {text!r}")
        return cls(validate_id(tenant, "a tenant"), validate_id(batch_id, "a batch id"))

    def __str__(self) -> str:
        return f"{self.tenant}/{self.batch_id}"


def shards_for(total: int, rate_items_per_s: int = PEAK_ITEMS_PER_S) -> int:
    """How many item shards a batch of `total` items needs.

    One item puts `WRITES_PER_ITEM` writes on its partition key in a pass
    (the producer's put, the claim, the outcome; a retry comes a delay of 30 s
    or more later). A batch of N items on s shards puts N x 3 / s writes on a
    key in all, and it is worked at most `rate_items_per_s` items a second,
    so no key takes more than min(N, rate) x 3 / s writes in any second. The
    count is the smallest power of two that keeps that at or under
    `KEY_WRITES_PER_S` (the rounding up leaves room for an uneven hash), at
    most `MAX_SHARDS`: 12 items -> 1, 1,000 -> 8, 10,000 at 10,000 items/s -> 64.
    """
    if total < 1 or rate_items_per_s < 1:
        raise ValueError("a batch has at least one item and a positive rate")
    need = -(-min(total, rate_items_per_s) * WRITES_PER_ITEM // KEY_WRITES_PER_S)
    shards = 1
    while shards < need and shards < MAX_SHARDS:
        shards *= 2
    return shards


def shard_of(item_id: str, shards: int) -> int:
    """The item shard of an item id in a batch of `shards` shards."""
    return zlib.crc32(item_id.encode()) % shards


@dataclass(frozen=True)
class ItemKey:
    """One item: the only thing a wake-up message carries, with the shard its row lives in."""

    tenant: str
    batch_id: str
    item_id: str
    shard: int  # the item shard of its row (`shard_of` its id under the batch's recorded count)

    @classmethod
    def of(cls, ref: BatchRef, item_id: str, shards: int) -> ItemKey:
        """The key of an item of a batch whose row records `shards` item shards."""
        return cls(ref.tenant, ref.batch_id, item_id, shard_of(item_id, shards))

    @property
    def batch(self) -> BatchRef:
        """The batch the item belongs to."""
        return BatchRef(self.tenant, self.batch_id)

    @property
    def partition(self) -> str:
        """The item row's partition key: its batch and its shard (ids never hold '#').

        A key with a shard that is not its row's (a forged or corrupted
        wake-up) names a partition where the row is not: it finds nothing.
        """
        return f"{self.batch.batch_key}#{self.shard}"

    @classmethod
    def of_row(cls, partition: str, item_id: str) -> ItemKey:
        """The key of an item row from its partition key and id (an index entry carries only those)."""
        tenant, batch_id, shard = partition.split("#")
        return cls(tenant, batch_id, item_id, int(shard))

    def body(self) -> str:
        return json.dumps(
            {"tenant": self.tenant, "batch": self.batch_id, "item": self.item_id, "shard": self.shard},
            separators=(",", ":"),
        )

    def log_ids(self) -> dict[str, str]:
        """The keys as log fields (never the payload)."""
        return {"tenant": self.tenant, "batch": self.batch_id, "item": self.item_id}


def validate_id(value: str, what: str) -> str:
    if not re.fullmatch(ID_PATTERN, value or ""):
        raise ValueError(f"{what} must match {ID_PATTERN}")
    return value


def tolerated_failures(percent: float | None, total: int) -> int | None:
    """How many of `total` items may fail before the batch crosses `percent` (None: no threshold).

    As Step Functions' `ToleratedFailurePercentage`: the batch fails once its
    failed items are more than `percent` of all its items.
    """
    if percent is None:
        return None
    if not 0 <= percent <= 100:
        raise ValueError(f"a tolerated failure percentage is within 0..100, got {percent}")
    return int(percent * total // 100)


def threshold_error(failed: int, total: int, tolerated: int) -> str:
    """The reason a pending item of a batch past its failure threshold is failed with."""
    return (
        f"not attempted: the batch crossed its failure threshold ({failed} of {total} items failed, "
        f"{tolerated} tolerated); retry-failed reopens it"
    )


def cancelled_error(ref: BatchRef, requested_by: str | None) -> str:
    """Why retry-failed refuses a cancelled batch (one line)."""
    return f"batch {ref} was cancelled by {requested_by or 'an operator'}: retry-failed does not reopen it"


def cancel_reason(requested_by: str | None) -> str:
    """The error a cancelled item carries (`jobfence.work.cancel`)."""
    return f"cancelled by {requested_by or 'an operator'} before it ran"


def bounded_error(text: str) -> str:
    """An item's error text cut to `MAX_ERROR_CHARS` (the one helper, `jobfence.errors.bounded`)."""
    return bounded(text, MAX_ERROR_CHARS)


class PermanentFailure(JobfenceError):
    """A provider refused the item for good (bad input): fail it now, whatever its attempts."""


class BatchConflict(JobfenceError):
    """A batch id reused with a different kind or size."""


# -- claims and outcomes ---------------------------------------------------------------------


@dataclass
class BatchDelta:
    """What one SQS batch did to one batch: rolled up in one write (the heartbeat)."""

    completed: int = 0
    failed: int = 0


@dataclass(frozen=True)
class RollupTally:
    """One writer's cumulative roll-up of one batch: what it has settled so far, and how many roll-ups.

    A writer (a worker container, a reclaimer) keeps it in memory and writes
    it whole, never a delta: a re-sent or late write of an older tally is
    refused by a newer `seq`, and a write whose reply was lost is carried
    again by the next one, so nothing is counted twice or lost while the
    writer lives.
    """

    writer: str
    completed: int = 0
    failed: int = 0
    seq: int = 0

    def plus(self, delta: BatchDelta) -> RollupTally:
        return RollupTally(self.writer, self.completed + delta.completed, self.failed + delta.failed, self.seq + 1)


class Tallies:
    """One writer's tallies of the batches it rolls up (a worker container's, a reclaimer's), bounded.

    A forgotten batch (final, or the oldest past `MAX_BATCHES`) starts again
    under a new writer id, so its new tally never competes with the old row.
    """

    MAX_BATCHES = 1_000

    def __init__(self) -> None:
        self._writer = uuid.uuid4().hex[:16]
        self._forgotten = 0
        self._by_batch: dict[BatchRef, RollupTally] = {}

    def add(self, ref: BatchRef, delta: BatchDelta) -> RollupTally:
        """The batch's tally with `delta` counted in (kept even if writing it fails: the next write carries it)."""
        tally = self._by_batch.pop(ref, None) or RollupTally(f"{self._writer}.{self._forgotten}")
        self._by_batch[ref] = tally = tally.plus(delta)
        while len(self._by_batch) > self.MAX_BATCHES:
            self._by_batch.pop(next(iter(self._by_batch)))
            self._forgotten += 1
        return tally

    def forget(self, ref: BatchRef) -> None:
        if self._by_batch.pop(ref, None) is not None:
            self._forgotten += 1


# -- rows as the operator and the tests see them -----------------------------------------------


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
    shard: int  # the item shard its row lives in
    cost: Cost | None = None  # what its attempts consumed (`jobfence.work.items`); None: none recorded

    @property
    def key(self) -> ItemKey:
        """The item's keys (what its wake-up carries)."""
        return ItemKey(self.tenant, self.batch_id, self.item_id, self.shard)


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
    reopened: int = 0  # items ever reopened by retry_failed; every reopen moves it with its items
    tolerated_failures: int | None = None  # failed items the batch tolerates (None: any number)
    shards: int = MAX_SHARDS  # item shards, fixed when it is created (`shards_for`)
    cancelled: int = 0  # items cancelled (a finalized `cancelled` batch's recount)
    cancel_requested_by: str | None = None  # who asked to cancel it (`jobfence.work.cancel`); None: never asked
    cancel_requested_at: int | None = None  # when that was recorded (epoch ms)
    cost: Cost | None = None  # the sum of its item rows' costs, as its last recount wrote it; None: never recounted

    @property
    def cancel_requested(self) -> bool:
        """The operator asked to cancel it: no item of it starts again, it finalizes `cancelled`."""
        return self.cancel_requested_at is not None

    def item_key(self, item_id: str) -> ItemKey:
        """The key of one of its items (where its row lives)."""
        return ItemKey.of(self.ref, item_id, self.shards)

    @property
    def over_threshold(self) -> bool:
        """More items failed than the batch tolerates (by its counters: a hint until a recount)."""
        return self.tolerated_failures is not None and self.failed > self.tolerated_failures

    @property
    def ref(self) -> BatchRef:
        """The batch's tenant and id."""
        return BatchRef(self.tenant, self.batch_id)
