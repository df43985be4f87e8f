"""The files `jobfence new job` writes, as `string.Template`s ($name, $subsystem, ...; `$$` is a dollar).

The job is the one docs/your-first-job.md builds: bounded batches over its own
table, one fenced write per row (`RunContext.transaction()`), conditioned so
each row is marked exactly once whatever the faults; its test runs it on moto
and under the fault simulator with that invariant.
"""

from __future__ import annotations

from string import Template

JOB_MODULE = Template('''"""`$name` ($subsystem, $schedule): marks each pending row of `$table` done.

Scaffolded by `jobfence new job`; replace the work in `$name` with yours and
keep its shape: bounded batches (one yield each, the runner renews the lease
between them), and every write that must happen once is a fenced write
(`ctx.transaction()`: it commits only while this run's lease term is live),
conditioned so a row already done is refused rather than done twice.
"""

from __future__ import annotations

from typing import Any, Iterator

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence import ConditionFailed, JobDeps, RunContext

TABLE = "$table"
BATCH = 25  # rows a batch: one batch is a few seconds of work at most
MAX_BATCHES = 40  # a run does at most this much; the next tick does the rest


class RowStore:
    """The job's table: one row per piece of work; `done_at` is set once, by a fenced write."""

    def __init__(self, physical: str) -> None:
        class Row(Model):
            class Meta:
                table_name = physical

            row_id = UnicodeAttribute(hash_key=True)
            created_at = NumberAttribute(default=0)
            done_at = NumberAttribute(null=True)
            marks = NumberAttribute(default=0)  # times it was marked done: the condition keeps it at 1

        self._model: Any = Row

    def add(self, row_id: str, now_ms: int = 0) -> None:
        """A pending row (what the system that produces the work would write)."""
        self._model(row_id, created_at=now_ms).save()

    def pending(self, limit: int) -> list[str]:
        """Up to `limit` ids of rows not done yet (a scan: fine for a small table; an index scales further)."""
        rows = self._model.scan(self._model.done_at.does_not_exist(), limit=limit, consistent_read=True)
        return [row.row_id for row in rows]

    def mark_done(self, tx: Any, row_id: str, now_ms: int) -> None:
        """Add to a fenced transaction: mark `row_id` done, refused (ConditionFailed) if it already is."""
        row = self._model
        tx.update(row(row_id), actions=[row.done_at.set(now_ms), row.marks.add(1)],
                  condition=row.done_at.does_not_exist())


def $name(store: RowStore, ctx: RunContext, batch: int = BATCH) -> Iterator[dict[str, int]]:
    """Mark pending rows done, `batch` a batch, one fenced write per row."""
    for _ in range(MAX_BATCHES):
        pending = store.pending(batch)
        if not pending:
            return
        done = skipped = 0
        for row_id in pending:
            try:
                with ctx.transaction() as tx:
                    store.mark_done(tx, row_id, ctx.now_ms())
                done += 1
            except ConditionFailed:
                skipped += 1  # done by an earlier term whose batch ended before its reply came back
        yield {"done": done, "skipped": skipped}


def build_$name(deps: JobDeps, batch: int = BATCH):
    """The job's factory (its catalog entry's `entry`): collaborators built once, at cold start."""
    store = RowStore(deps.settings.table(TABLE))
    return lambda ctx: $name(store, ctx, batch)
''')

ENTRIES = Template("""TABLES = (*TABLES, TableSpec(
    name="$table",
    subsystem="$subsystem",
    partition_key=("row_id", "S"),
    description="the rows $name works through, one per piece of work",
))

JOBS = (*JOBS, JobSpec(
    name="$name",
    subsystem="$subsystem",
    entry="jobs.$subsystem.$name:build_$name",
    schedule="$schedule",
    interval_s=$interval,
    timeout_s=300,
    tables={"$table": "scan+update"},  # what its store calls: the scan of pending rows, the fenced update
    description="marks each pending row of $table done, 25 a batch, at most 40 batches",
))
""")

NEW_CATALOG = Template('''"""Catalog entries of the $subsystem subsystem: its tables and jobs (`jobs/catalog.py` gathers them)."""

from jobfence.registry import JobSpec, TableSpec

TABLES: tuple[TableSpec, ...] = ()
JOBS: tuple[JobSpec, ...] = ()

# $name (scaffolded by `jobfence new job`)
''')

APPENDED = Template("""

# $name (scaffolded by `jobfence new job`)
from jobfence.registry import JobSpec, TableSpec  # noqa: E402

""")

APPENDED_NO_IMPORT = Template("""

# $name (scaffolded by `jobfence new job`)
""")

PACKAGE = Template('''"""The $subsystem subsystem's jobs (see its `catalog.py`)."""
''')

TEST = Template('''"""`$name`: its ticks on moto, and under the fault simulator (scaffolded by `jobfence new job`)."""

from __future__ import annotations

from jobfence import Outcome
from jobfence.testing import simulate
from jobs.catalog import CATALOG
from jobs.$subsystem.$name import TABLE, RowStore, build_$name

ROWS = 30


def test_a_tick_marks_every_pending_row_done_once(job_harness, clock):
    # GIVEN $name's table with 30 pending rows
    harness = job_harness("$name")
    store = RowStore(harness.tables[TABLE])
    for i in range(ROWS):
        store.add(f"row-{i}", clock.now_ms())
    # WHEN it ticks THEN two batches (25 + 5) marked every row, each once, and its run row says so
    harness.tick().assert_ran(batches=2, done=ROWS, skipped=0)
    assert [row["marks"] for row in harness.rows(TABLE)] == [1] * ROWS
    # AND a tick before its interval has passed is skipped, writing nothing
    clock.advance(seconds=$half_interval)
    harness.tick().assert_outcome(Outcome.SKIPPED_INTERVAL)


def each_row_marked_once(snapshot) -> None:
    rows = snapshot.rows(TABLE)
    assert len(rows) == 5 and all(row.get("marks") == 1 for row in rows), rows


def test_each_row_is_marked_exactly_once_under_faults():
    def five_rows(deps):
        store = RowStore(deps.settings.table(TABLE))
        for i in range(5):
            store.add(f"row-{i}")

    # two rows a batch, so a run has several batches and lease renewals for the faults to land between
    report = simulate(CATALOG, "$name", seeds=range(10), setup=five_rows, invariant=each_row_marked_once,
                      factory=lambda deps: build_$name(deps, batch=2))
    report.assert_ok()
''')

EVENT = Template("""{
  "version": "0",
  "id": "$event_id",
  "detail-type": "Scheduled Event",
  "source": "aws.events",
  "account": "123456789012",
  "time": "2026-01-01T01:00:00Z",
  "region": "us-east-1",
  "resources": ["arn:aws:events:us-east-1:123456789012:rule/jobfence-$name"],
  "detail": {}
}
""")
