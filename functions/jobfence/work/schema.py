"""The private schema of the batches and items tables (pynamodb models and sparse indexes).

    batches  tenant (key) | batch_id (sort) | kind | status | total | completed | failed
             | enqueued | rollups | recounts | created_by | created_at | updated_at
             | finalized_at | retries | retried_by | retried_at | reopened | tolerated_failures
             | swept | shards | cancelled | cancel_requested_by | cancel_requested_at | applied_ids
             | applied_ids_prev | open_key (sparse GSI "by_open")
    tallies  (rows of the batches table) tenant = tenant#batch#r<shard> (key) | batch_id = writer (sort)
             | completed | failed | seq | updated_at: one writer's cumulative roll-up of one batch
    items    batch_key = tenant#batch#shard (key, `ItemKey.partition`) | item_id (sort) | tenant | batch_id | kind | seq
             | status | attempts | error | claim_token | payload | result_ref | quota
             | quota_reservations | quota_refunds | created_at | updated_at
             | reclaim_key (sparse GSI "by_reclaim")

`shards` is the batch's item-shard count (`keys.shards_for`; absent on rows
written before it was recorded: `MAX_SHARDS`). `reclaim_key` =
kind#status#(the batch's base + the item's shard) exists only while an item is pending or
running, and `open_key` = kind only while a batch is open; both indexes sort on
`updated_at`, so the reclaimer's query `updated_at < cutoff` reads stale rows
only and its cost grows with them, not with the table.

Only `jobfence.work.store` and `jobfence.work.transactions` use these models;
everyone else sees the frozen `ItemRow` / `BatchRow` views.
"""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from jobfence.binding import index
from jobfence.indexes import OPEN_INDEX_SPEC, RECLAIM_INDEX_SPEC
from jobfence.work.keys import MAX_SHARDS, BatchRow, BatchStatus, ItemRow, ItemStatus, QuotaHold


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
    by_open = index(OPEN_INDEX_SPEC)  # generated from the catalog's spec: declared once


class _Tally(Model):
    """One writer's (a worker container's) cumulative roll-up of one batch, beside the batch rows.

    Its partition key is the batch and a shard of the writer, never a tenant
    alone, so the batch's roll-ups spread over `ROLLUP_SHARDS` partition keys;
    `jobfence.work.rollup` owns every read and write of it.
    """

    class Meta:
        table_name = "unbound"

    partition = UnicodeAttribute(hash_key=True, attr_name="tenant")
    writer = UnicodeAttribute(range_key=True, attr_name="batch_id")
    completed = NumberAttribute(default=0)
    failed = NumberAttribute(default=0)
    seq = NumberAttribute(default=0)
    updated_at = NumberAttribute()


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
    by_reclaim = index(RECLAIM_INDEX_SPEC)


def item_row(row: Any) -> ItemRow:
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
    )


def batch_row(row: Any) -> BatchRow:
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
    )
