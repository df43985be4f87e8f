"""Jobs of a job author's own catalog, for the test kit's tests (`tests/unit/test_testing_kit.py`).

`mark_rows` marks each pending row done with one fenced write per row, conditioned
on the row not being done yet: each row is counted exactly once whatever the
faults. `mark_rows_unfenced` does the same with a plain unconditional update
(`ADD times 1`): a re-sent request, or a holder paused past its term, counts a
row twice. `mark_rows_conditioned` keeps the condition but skips
`ctx.transaction()`: a term that was taken over still writes. `mark_rows_declared`
is that job with its table declared `unfenced` (the kit then lets it write).
`greedy` writes a row its entry only declares it may scan.
"""

from __future__ import annotations

from typing import Any, Iterator

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import bind
from jobfence.errors import ConditionFailed
from jobfence.registry import JobSpec, Registry, TableSpec
from jobfence.scheduled import JobDeps, RunContext

BATCH = 2
ROWS = 5


class _Row(Model):
    class Meta:
        table_name = "unbound"

    row_id = UnicodeAttribute(hash_key=True)
    done_at = NumberAttribute(null=True)
    times = NumberAttribute(default=0)


def seed_rows(deps: JobDeps, n: int = ROWS) -> None:
    """`n` pending rows in the job's table."""
    model = bind(_Row, deps.settings.table("kit_rows"))
    for i in range(n):
        model(f"r{i}", times=0).save()


def each_row_once(snapshot: Any) -> None:
    """The invariant: every row is done, and was counted exactly once."""
    rows = snapshot.rows("kit_rows")
    assert len(rows) == ROWS, f"{len(rows)} rows"
    wrong = {r["row_id"]: r.get("times") for r in rows if r.get("times") != 1 or r.get("done_at") is None}
    assert not wrong, f"rows not counted exactly once: {wrong}"


def _pending(model: Any) -> list[Any]:
    return list(model.scan(model.done_at.does_not_exist(), limit=BATCH, consistent_read=True))


def build_mark_rows(deps: JobDeps):
    model = bind(_Row, deps.settings.table("kit_rows"))

    def job(ctx: RunContext) -> Iterator[dict[str, int]]:
        while rows := _pending(model):
            done = skipped = 0
            for row in rows:
                try:
                    with ctx.transaction() as tx:
                        tx.update(model(row.row_id), actions=[model.done_at.set(ctx.now_ms()), model.times.add(1)],
                                  condition=model.done_at.does_not_exist())
                    done += 1
                except ConditionFailed:
                    skipped += 1  # another term did it
            yield {"done": done, "skipped": skipped}

    return job


def build_mark_rows_unfenced(deps: JobDeps):
    model = bind(_Row, deps.settings.table("kit_rows"))

    def job(ctx: RunContext) -> Iterator[dict[str, int]]:
        while rows := _pending(model):
            for row in rows:
                model(row.row_id).update(actions=[model.done_at.set(ctx.now_ms()), model.times.add(1)])
            yield {"done": len(rows)}

    return job


def build_mark_rows_conditioned(deps: JobDeps):
    model = bind(_Row, deps.settings.table("kit_rows"))

    def job(ctx: RunContext) -> Iterator[dict[str, int]]:
        while rows := _pending(model):
            for row in rows:
                model(row.row_id).update(actions=[model.done_at.set(ctx.now_ms()), model.times.add(1)],
                                         condition=model.done_at.does_not_exist())
            yield {"done": len(rows)}

    return job


build_mark_rows_declared = build_mark_rows_conditioned


def build_greedy(deps: JobDeps):
    model = bind(_Row, deps.settings.table("kit_rows"))

    def job(ctx: RunContext) -> Iterator[dict[str, int]]:
        model("extra", times=0).save()
        yield {"done": 1}

    return job


def _entry(name: str, access: str, **more: Any) -> JobSpec:
    return JobSpec(name=name, subsystem="kit", entry=f"tests.kit_jobs:build_{name}", schedule="rate(1 hour)",
                   interval_s=3600, timeout_s=60, tables={"kit_rows": access}, **more)


KIT_CATALOG = Registry(
    tables=[TableSpec(name="kit_rows", subsystem="kit", partition_key=("row_id", "S"))],
    jobs=[
        _entry("mark_rows", "scan+update"),
        _entry("mark_rows_unfenced", "scan+update"),
        _entry("mark_rows_conditioned", "scan+update"),
        _entry("mark_rows_declared", "scan+update", unfenced={"kit_rows": "a test of the declaration"}),
        _entry("greedy", "scan"),
    ],
)
