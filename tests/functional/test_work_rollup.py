"""Roll-ups as per-writer tallies: no write to the batch row, no double count, the newest tally is the heartbeat.

At 10,000 items/s through one batch a roll-up per SQS batch is 1,000 writes a
second, so roll-ups go to tally rows spread over `ROLLUP_SHARDS` partition
keys (docs/benchmarks.md, "The hottest key"); these tests pin what that must
keep: the counters, prompt finalization, retry safety and the reclaimer's view.
"""

from __future__ import annotations

import pytest

from jobfence.work import ROLLUP_SHARDS, BatchDelta, BatchRef, BatchStatus, ItemKey, RollupTally, Tallies, Worker
from jobfence.work.rollup import shard_of, tally_partition
from jobs.listings.catalog import PIPELINES
from ops.harness import record

B = BatchRef("acme", "b1")


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 10_000})


def raw_batch_row(dynamodb, tables, ref=B):
    return dynamodb.get_item(TableName=tables["listing_batches"], ConsistentRead=True,
                             Key={"tenant": {"S": ref.tenant}, "batch_id": {"S": ref.batch_id}})["Item"]


def fleet(rig, n):
    return [Worker(rig.store, "generation", PIPELINES["generation"].timing, rig.performs["generation"],
                   rig.queues["generation"], rig.logger) for _ in range(n)]


def test_roll_ups_never_write_the_batch_row_until_it_finalizes(rig, dynamodb, tables, clock):
    # GIVEN an open batch of 30 items
    rig.submit("acme", "b1", 30)
    before = raw_batch_row(dynamodb, tables)
    # WHEN two SQS batches are processed, a second apart
    rig.deliver()
    clock.advance(seconds=1)
    rig.deliver()
    # THEN the batch row (and so its open-index entry) is untouched, and the batch reads its tallies
    assert raw_batch_row(dynamodb, tables) == before
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed, batch.rollups) == (BatchStatus.OPEN, 20, 2)
    assert batch.updated_at == clock.now_ms()  # the newest tally is the heartbeat
    # AND the last roll-up finalizes the batch from a recount, at once
    rig.deliver()
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed, batch.recounts) == (BatchStatus.FINALIZED, 30, 1)
    assert raw_batch_row(dynamodb, tables)["completed"] == {"N": "30"}


def test_a_re_sent_or_late_roll_up_is_not_counted_twice(rig):
    rig.submit("acme", "b1", 20)
    first = RollupTally("w1", completed=4, seq=1)
    second = RollupTally("w1", completed=9, failed=1, seq=2)
    # WHEN a tally is written, its lost reply makes it be sent again, and a newer one lands
    rig.store.rollups.write(B, first)
    rig.store.rollups.write(B, first)
    rig.store.rollups.write(B, second)
    # AND the first one's late copy arrives after the newer one
    rig.store.rollups.write(B, first)
    row = rig.store.batches.batch(B)
    # THEN each count is there once, from the newest tally
    assert (row.completed, row.failed, row.rollups) == (9, 1, 2)


def test_a_writers_tally_carries_a_write_that_failed(rig):
    tallies = Tallies()
    one = tallies.add(B, BatchDelta(completed=3))
    two = tallies.add(B, BatchDelta(completed=2, failed=1))
    # a failed first write is not lost: the second write is the whole tally
    assert (one.seq, two.seq, two.completed, two.failed, two.writer) == (1, 2, 5, 1, one.writer)
    rig.submit("acme", "b1", 10)
    rig.store.rollups.write(B, two)
    assert rig.store.batches.batch(B).completed == 5
    # a forgotten batch starts again under a new writer id, never competing with its old row
    tallies.forget(B)
    assert tallies.add(B, BatchDelta(completed=1)).writer != one.writer


def test_a_fleet_spreads_its_roll_ups_over_the_shards_and_finalizes_once(rig, dynamodb, tables):
    # GIVEN a batch of 200 items drained by 20 workers
    rig.submit("acme", "b1", 200)
    workers = fleet(rig, 20)
    turn = 0
    while rig.queues["generation"].visible():
        taken = rig.queues["generation"].take(10)
        rig.queues["generation"].settle(taken, workers[turn % 20].process([record(m) for m in taken]))
        turn += 1
    # THEN the tallies sit on several partition keys, none of them the tenant's
    keys = {i["tenant"]["S"] for i in dynamodb.scan(TableName=tables["listing_batches"])["Items"]} - {"acme"}
    assert keys <= {tally_partition(B, s) for s in range(ROLLUP_SHARDS)} and len(keys) >= 3
    # AND the batch finalized once, with exact counters
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed, batch.failed, batch.recounts) == (BatchStatus.FINALIZED, 200, 0, 1)
    # AND listing batches skips the tallies
    assert [b.batch_id for b in rig.store.batches.list_batches()] == ["b1"]


def test_reclaim_takes_a_fresh_tally_as_the_heartbeat_and_does_not_recount(rig, dynamodb, tables, clock):
    # GIVEN a long batch whose batch row is older than batch-stale but whose workers rolled up a minute ago
    rig.submit("acme", "b1", 30)
    clock.advance(minutes=14)
    rig.deliver()
    clock.advance(minutes=2, seconds=11)  # the row is past batch-stale and the time budget; the tally is not
    # WHEN reclaim sweeps
    counts = rig.reclaimer.run_once()
    # THEN the batch is seen, not recounted, and its row carries the tally's time (the index entry moved once)
    assert counts.batches_swept == 1 and counts.batches_finalized == 0
    assert rig.store.batches.batch(B).recounts == 0
    assert int(raw_batch_row(dynamodb, tables)["updated_at"]["N"]) == clock.now_ms() - 131_000
    assert rig.reclaimer.run_once().batches_swept == 0
    # AND once every tally is older than batch-stale too, the sweep recounts (and heartbeats the live batch)
    clock.advance(minutes=15)
    counts = rig.reclaimer.run_once()
    assert counts.batches_swept == 1 and rig.store.batches.batch(B).recounts == 1


def test_tally_partitions_spread_writers(rig):
    shards = {shard_of(f"w{i}") for i in range(64)}
    assert len(shards) == ROLLUP_SHARDS
    assert tally_partition(B, 3) == "acme#b1#r3"
    assert ItemKey("acme", "b1", "i1", 0).batch.batch_key == "acme#b1"
