"""Shards follow the load: a batch's recorded shard count, the wake-up's shard, and a sweep that reads what exists.

The real stores, producer, worker and reclaimer against moto's in-process
DynamoDB (`ops.harness`), every Query the store sends recorded by a botocore
hook on its own clients.
"""

from __future__ import annotations

import json
import zlib

import pytest

from jobfence.work import BatchRef, BatchStatus, ClaimState, ItemKey, ItemStatus, shards_for
from ops.harness import record


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 10_000})


@pytest.fixture
def queries(rig):
    """Every Query the work store sends: (index or "base", partition key value)."""
    seen: list[tuple[str, str]] = []

    def note(params, **_):
        value = params.get("ExpressionAttributeValues", {}).get(":0", {})
        seen.append((params.get("IndexName", "base"), next(iter(value.values()), "?")))

    for client in rig.store.clients():
        client.meta.events.register("before-parameter-build.dynamodb.Query", note)
    return seen


def item_partitions(queries: list[tuple[str, str]]) -> set[str]:
    """The item partitions the sweep queried (the base table: the items table has no index)."""
    return set(item_queries(queries))


def item_queries(queries: list[tuple[str, str]]) -> list[str]:
    """Each item-partition query, in order (`tenant#batch#shard`; a roll-up tally's shard is `r<n>`)."""
    return [key for index, key in queries if index == "base" and key.rsplit("#", 1)[-1].isdigit()]


def test_a_sweep_with_no_open_batch_reads_the_open_index_and_nothing_else(rig, clock, queries):
    # GIVEN a batch that finished (its rows all terminal, the batch finalized)
    rig.submit("acme", "done", 3)
    rig.drain()
    assert rig.store.batches.batch(BatchRef("acme", "done")).status is BatchStatus.FINALIZED
    queries.clear()
    # WHEN the reclaimer sweeps, long after
    clock.advance(hours=1)
    counts = rig.reclaimer.run_once()
    # THEN it read the open index once per pipeline and no item row
    assert counts.errors == 0
    assert item_partitions(queries) == set()
    assert sorted(queries) == [("by_open", "generation"), ("by_open", "publish")]


def test_a_small_batch_is_swept_in_its_own_shard_only(rig, clock, queries):
    # GIVEN a 12-item batch whose wake-ups were all lost (one shard: every item on one key)
    rig.submit("acme", "small", 12)
    rig.queues["generation"].messages.clear()
    batch = rig.store.batches.batch(BatchRef("acme", "small"))
    assert batch.shards == shards_for(12) == 1
    assert {r.shard for r in rig.store.items.item_rows(batch.ref, batch.shards)} == {0}
    queries.clear()
    # WHEN the reclaimer sweeps past pending-stale
    clock.advance(minutes=17)
    counts = rig.reclaimer.run_once()
    # THEN it queried that batch's one item partition (once for both statuses, once more for the batch-stale
    # recount), found every item and re-sent them
    assert item_queries(queries) == ["acme#small#0"] * 2
    assert counts.stale_pending == 12 and counts.requeued == 12
    # AND the re-sent wake-ups find their rows: the batch completes
    rig.drain()
    assert rig.store.batches.batch(batch.ref).status is BatchStatus.FINALIZED


def test_open_batches_are_swept_in_their_own_partitions_only(rig, clock, queries):
    # GIVEN three small open batches, a 400-item one (4 shards) and a finished one
    refs = [BatchRef("acme", name) for name in ("s1", "s2", "s3")]
    for ref in refs:
        rig.submit(ref.tenant, ref.batch_id, 5)
    rig.submit("acme", "big", 400)
    rig.queues["generation"].messages.clear()
    rig.submit("acme", "done", 3)
    rig.drain()
    queries.clear()
    # WHEN the reclaimer sweeps
    clock.advance(minutes=1)
    rig.reclaimer.run_once()
    # THEN it queried each open batch's item partitions, once each, and nothing of the finished batch
    wanted = {f"acme#{ref.batch_id}#0" for ref in refs} | {f"acme#big#{shard}" for shard in range(4)}
    assert item_partitions(queries) == wanted
    assert len(item_queries(queries)) == len(wanted)


def test_a_big_batch_is_spread_and_still_found_whole_by_describe_and_recount(rig, clock):
    # GIVEN a 400-item batch: 4 shards by its size
    rig.submit("acme", "big", 400)
    ref = BatchRef("acme", "big")
    batch = rig.store.batches.batch(ref)
    assert batch.shards == shards_for(400) == 4
    # THEN describe finds every item, spread over its 4 partitions
    report = rig.store.batches.describe_batch(ref)
    assert len(report.items) == 400 and {i.shard for i in report.items} == {0, 1, 2, 3}
    assert all(i.shard == batch.item_key(i.item_id).shard for i in report.items)
    # AND a repeated submit finds every row (it writes none again)
    assert rig.submit("acme", "big", 400).rows_written == 0
    # WHEN every item is worked THEN the recount finds them all and finalizes
    rig.drain()
    done = rig.store.batches.batch(ref)
    assert (done.status, done.completed, done.failed) == (BatchStatus.FINALIZED, 400, 0)


def test_a_forged_shard_finds_no_row_and_writes_nothing(rig):
    # GIVEN an item of a one-shard batch and a wake-up naming another shard for it
    rig.submit("acme", "b1", 2)
    rig.queues["generation"].messages.clear()
    real = rig.store.batches.batch(BatchRef("acme", "b1")).item_key("i00000")
    forged = ItemKey(real.tenant, real.batch_id, real.item_id, 5)
    # WHEN a worker is woken with it
    claims = rig.store.items.claim([forged], "generation", 5)
    result = rig.workers["generation"].process([{"messageId": "m1", "body": forged.body()}])
    # THEN it finds nothing: a batch item failure, the row untouched and still claimable through its real key
    assert claims[forged].state is ClaimState.NOT_FOUND
    assert not result.outcomes["m1"].ok
    row = rig.store.items.item(real)
    assert (row.status, row.attempts) == (ItemStatus.PENDING, 0)
    assert rig.store.items.claim([real], "generation", 5)[real].state is ClaimState.CLAIMED


def _put_legacy_batch(rig, dynamodb, tables, clock, batch_id: str, n: int) -> None:
    """A batch as the producer wrote it before counts were recorded: no `shards`, rows and index over 64."""
    now = clock.now_ms()
    dynamodb.put_item(TableName=tables["listing_batches"], Item={
        "tenant": {"S": "acme"}, "batch_id": {"S": batch_id}, "kind": {"S": "generation"}, "status": {"S": "open"},
        "total": {"N": str(n)}, "completed": {"N": "0"}, "failed": {"N": "0"}, "enqueued": {"N": str(n)},
        "rollups": {"N": "0"}, "recounts": {"N": "0"}, "retries": {"N": "0"}, "reopened": {"N": "0"},
        "created_by": {"S": "old producer"}, "created_at": {"N": str(now)}, "updated_at": {"N": str(now)},
        "open_key": {"S": "generation"},
    })
    for i in range(n):
        item_id = f"i{i:05d}"
        old_index_shard = zlib.crc32(f"acme#{batch_id}#{item_id}".encode()) % 64
        dynamodb.put_item(TableName=tables["listing_items"], Item={
            "batch_key": {"S": f"acme#{batch_id}#{zlib.crc32(item_id.encode()) % 64}"}, "item_id": {"S": item_id},
            "tenant": {"S": "acme"}, "batch_id": {"S": batch_id}, "kind": {"S": "generation"}, "seq": {"N": str(i)},
            "status": {"S": "pending"}, "attempts": {"N": "0"}, "payload": {"S": '{"title":"old"}'},
            "quota_reservations": {"N": "0"}, "quota_refunds": {"N": "0"},
            "created_at": {"N": str(now)}, "updated_at": {"N": str(now)},
            "reclaim_key": {"S": f"generation#pending#{old_index_shard}"},
        })


def test_a_batch_and_its_wakeups_from_before_shard_counts_are_worked_and_reclaimed(rig, dynamodb, tables, clock):
    # GIVEN a batch written before counts were recorded, and one of its wake-ups in the old format (no shard)
    _put_legacy_batch(rig, dynamodb, tables, clock, "old", 6)
    ref = BatchRef("acme", "old")
    assert rig.store.batches.batch(ref).shards == 64
    body = '{"tenant":"acme","batch":"old","item":"i00000"}'
    # WHEN a worker gets the old wake-up THEN it finds the row (its shard under 64) and completes it
    result = rig.workers["generation"].process([{"messageId": "m0", "body": body}])
    assert result.outcomes["m0"].ok
    assert rig.store.items.item(rig.store.batches.batch(ref).item_key("i00000")).status is ItemStatus.COMPLETED
    # AND the other items, whose wake-ups were lost, are found by the sweep over every shard and re-sent
    clock.advance(minutes=17)
    counts = rig.reclaimer.run_once()
    assert counts.stale_pending == 5 and counts.requeued == 5
    sent = rig.queues["generation"].take(10)
    assert len(sent) == 5
    # in the new format: their shard is the row's
    layout = rig.store.batches.batch(ref)
    assert all(json.loads(m.body)["shard"] == layout.item_key(json.loads(m.body)["item"]).shard for m in sent)
    assert all(o.ok for o in rig.workers["generation"].process([record(m) for m in sent]).outcomes.values())
    # AND the recount over its 64 partitions finds all six and finalizes it
    clock.advance(minutes=17)
    rig.reclaimer.run_once()
    done = rig.store.batches.batch(ref)
    assert (done.status, done.completed) == (BatchStatus.FINALIZED, 6)


def test_a_sweep_over_many_open_batches_yields_bounded_pages_so_the_runner_renews_between_them(rig, clock, queries):
    # GIVEN 7 open batches with nothing stale, and a reclaimer whose pages hold 3 batches' reads, 2 pages a run
    from jobfence.reclaim import ReclaimCounts, ReclaimPipeline, Reclaimer
    from jobs.listings.pipelines import PIPELINES

    for n in range(7):
        rig.submit("acme", f"o{n}", 2)
    reclaimer = Reclaimer(
        rig.store,
        {k: ReclaimPipeline(k, p.timing, rig.queues[k]) for k, p in PIPELINES.items()},
        clock,
        rig.logger,
        page_size=3,
        max_pages=2,
    )
    queries.clear()
    # WHEN it sweeps
    pages = list(reclaimer.pages())
    # THEN a page comes after every 3 batches read (the runner renews its lease between pages), and the run
    # stops after 2 pages: 6 batches read, the 7th left for the next run
    assert pages == [ReclaimCounts(), ReclaimCounts()]
    assert len(set(item_queries(queries))) == 6
