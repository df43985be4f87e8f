"""The roll-up tallies: how a batch's counters are kept without writing its batch row per SQS batch.

The item rows are the truth; roll-ups are a hint that says when to recount.
A batch at 10,000 items/s is rolled up 1,000 times a second (one write per SQS
batch of 10), more than DynamoDB takes on one partition key, so a roll-up never
writes the batch row: each writer (a worker container, a reclaimer) keeps its
own cumulative tally of the batch and writes it whole to its own tally row,
whose partition key is the batch and one of `ROLLUP_SHARDS` shards of the
writer. The batch's counters while it is open are the sum of its tallies, and
its heartbeat is the newest tally (`jobfence.work.batches` reads them so, and
recounts and finalizes when they say "maybe done").

    tallies  (rows of the batches table) tenant = tenant#batch#r<shard> (key) | batch_id = writer (sort)
             | completed | failed | seq | updated_at: one writer's cumulative roll-up of one batch

    roll-up   tally row of writer W: SET completed, failed, seq = n, updated_at
              condition: seq < n (or no row): a re-sent or late older tally is refused,
              and its refusal's old image (seq >= n) says it was applied already

Nothing here double-counts: a tally is absolute, and only its own writer
writes it, one request at a time.
"""

from __future__ import annotations

import zlib

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import aws_call, caller_reads, update_row
from jobfence.work.keys import ROLLUP_SHARDS, BatchRef, RollupTally


class _Tally(Model):
    """One writer's (a worker container's) cumulative roll-up of one batch, beside the batch rows.

    Its partition key is the batch and a shard of the writer, never a tenant
    alone, so the batch's roll-ups spread over `ROLLUP_SHARDS` partition keys.
    """

    class Meta:
        table_name = "unbound"

    partition = UnicodeAttribute(hash_key=True, attr_name="tenant")
    writer = UnicodeAttribute(range_key=True, attr_name="batch_id")
    completed = NumberAttribute(default=0)
    failed = NumberAttribute(default=0)
    seq = NumberAttribute(default=0)
    updated_at = NumberAttribute()


def tally_partition(ref: BatchRef, shard: int) -> str:
    """The partition key of one shard of a batch's tallies ('#' never occurs in a tenant id)."""
    return f"{ref.batch_key}#r{shard}"


def shard_of(writer: str) -> int:
    return zlib.crc32(writer.encode()) % ROLLUP_SHARDS


class Rollups(ModelStore):
    """Every read and write of the tally rows of the batches table."""

    _model_class = _Tally

    def write(self, ref: BatchRef, tally: RollupTally) -> None:
        """Write the writer's whole tally; a refusal means this tally (or a newer one) is there already."""
        t = self._model
        row = t(tally_partition(ref, shard_of(tally.writer)), tally.writer)
        newer = t.seq.does_not_exist() | (t.seq < tally.seq)
        actions = [
            t.completed.set(tally.completed),
            t.failed.set(tally.failed),
            t.seq.set(tally.seq),
            t.updated_at.set(self._clock.now_ms()),
        ]
        # refused: the old image holds seq >= ours: our earlier send (reply lost) or a later one was applied
        update_row(row, actions, newer, f"rolling up batch {ref}", ours=caller_reads)

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
