"""RunContext.transaction(): a pynamodb TransactWrite with the lease check first (moto, in-process)."""

from __future__ import annotations

import pytest
from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import bind
from jobfence.errors import ConditionFailed, LeaseLost
from jobfence.lease import LeaseStore
from jobfence.scheduled import RunContext
from jobfence.transaction import MAX_ENTRIES, delete_write, save_write, update_write
from jobfence.triggers import Trigger
from jobs.catalog import CATALOG

TTL = 30 * 60_000


class _Run(Model):  # a row of the runs table, as a stand-in for any store's table
    class Meta:
        table_name = "unbound"

    job = UnicodeAttribute(hash_key=True)
    run_key = UnicodeAttribute(range_key=True)
    n = NumberAttribute(null=True)


@pytest.fixture
def rows(tables):
    return bind(_Run, tables["runs"])


@pytest.fixture
def context(dynamodb, tables, clock):
    def open_term(holder: str = "a") -> RunContext:
        leases = LeaseStore(dynamodb, tables["leases"], clock)
        spec = CATALOG.job("reclaim_listings")
        lease = leases.acquire(spec.name, holder, TTL)
        return RunContext(spec, f"run-{holder}", Trigger("manual", clock.now_ms(), holder), lease, leases, clock)

    return open_term


def test_writes_commit_together_inside_a_live_term(rows, context):
    # GIVEN a live term WHEN a put and an update go in one transaction THEN both are applied
    rows("j", "existing", n=1).save()
    with context().transaction() as tx:
        tx.save(rows("j", "new", n=7), condition=rows.job.does_not_exist())
        tx.update(rows("j", "existing"), actions=[rows.n.add(1)], condition=rows.n == 1)
    assert (rows.get("j", "new").n, rows.get("j", "existing").n) == (7, 2)


def test_a_refused_condition_names_the_callers_entry_in_the_order_added(rows, context):
    # GIVEN an update added first and a put added second (pynamodb sends puts before updates)
    rows("j", "existing", n=1).save()
    rows("j", "taken", n=5).save()
    # WHEN only the put's condition fails
    with pytest.raises(ConditionFailed) as refused:
        with context().transaction() as tx:
            tx.update(rows("j", "existing"), actions=[rows.n.add(1)], condition=rows.n == 1)
            tx.save(rows("j", "taken", n=9), condition=rows.job.does_not_exist())
    # THEN the error names caller entry 1 with its old image, and nothing was applied
    assert refused.value.index == 1 and refused.value.item["n"] == 5
    assert (rows.get("j", "existing").n, rows.get("j", "taken").n) == (1, 5)


def test_prepared_writes_added_together_keep_the_callers_order(rows, context):
    # GIVEN prepared writes of three kinds, added in one call: an update, a delete, then a put
    rows("j", "existing", n=1).save()
    rows("j", "doomed", n=2).save()
    rows("j", "taken", n=5).save()
    writes = (
        update_write(rows("j", "existing"), [rows.n.add(1)], rows.n == 1),
        delete_write(rows("j", "doomed"), rows.n == 2),
        save_write(rows("j", "taken", n=9), rows.job.does_not_exist()),
    )
    # WHEN only the last one's condition fails THEN it is entry 2 (pynamodb sends puts first), nothing applied
    ctx = context()
    with pytest.raises(ConditionFailed) as refused:
        with ctx.transaction() as tx:
            tx.add(*writes)
    assert refused.value.index == 2 and refused.value.item["n"] == 5
    assert (rows.get("j", "existing").n, rows.count("j")) == (1, 3)
    # AND without the refused one the others commit together
    with ctx.transaction() as tx:
        tx.add(*writes[:2])
    assert (rows.get("j", "existing").n, rows.count("j")) == (2, 2)


def test_after_a_takeover_the_old_term_writes_nothing(rows, context, clock):
    # GIVEN term a expired and b took over
    old = context("a")
    clock.advance(ms=TTL + 1)
    context("b")
    # WHEN a writes THEN LeaseLost (with b's lease as the competitor) and no row appears
    with pytest.raises(LeaseLost) as lost:
        with old.transaction() as tx:
            tx.save(rows("j", "late"))
    assert lost.value.competing["holder"] == "b"
    assert rows.count("j") == 0


def test_an_error_inside_the_block_sends_nothing_and_the_size_is_bounded(rows, context):
    ctx = context()
    with pytest.raises(RuntimeError):
        with ctx.transaction() as tx:
            tx.save(rows("j", "never"))
            raise RuntimeError("the job changed its mind")
    assert rows.count("j") == 0
    with pytest.raises(ValueError, match="at most 99"):
        with ctx.transaction() as tx:
            for i in range(MAX_ENTRIES + 1):
                tx.save(rows("j", f"r{i}"))
    assert rows.count("j") == 0
