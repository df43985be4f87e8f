"""The cost of a batch, on its rows (issue 33 item 2): each item row adds what its attempts consumed, and the
batch row's recount writes the sum of its item rows.

moto answers every call with constant units, so the tests compare rows with rows (the batch with its items)
and with themselves (a re-sent outcome), never with figures of DynamoDB's own.
"""

from __future__ import annotations

import pytest

from jobfence.capacity import Cost
from jobfence.work import BatchRef, BatchStatus, ItemInput, ItemStatus
from tests.functional.test_work_faults import containing

B = BatchRef("acme", "costly")


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 1_000})


def items(n: int) -> list[ItemInput]:
    return [ItemInput(f"i{i:05d}", {"title": f"thing {i}"}) for i in range(n)]


def summed(costs: list[Cost]) -> Cost:
    """The costs as a recount sums them (and writes them: rounded by `Cost.fields`)."""
    return Cost.of_fields(sum(costs, Cost()).fields())


def test_every_completed_item_carries_its_cost_and_the_finalized_batch_their_sum(rig):
    # GIVEN a batch of three items
    rig.producer.submit(B, "generation", items(3), "tester")
    # WHEN the worker processes them and the batch finalizes
    rig.drain()
    report = rig.store.batches.describe_batch(B)
    # THEN each item row carries the units, requests and dollars of its claim share and its own calls
    assert report.batch.status is BatchStatus.FINALIZED
    assert [r.status for r in report.items] == [ItemStatus.COMPLETED] * 3
    for row in report.items:
        assert row.cost is not None
        assert row.cost.units.read + row.cost.units.write > 0  # moto reports no units for a transaction
        assert row.cost.dollars > 0
    # AND the batch row's cost is the sum of its item rows' costs (shared requests split as whole numbers)
    assert report.batch.cost == summed([r.cost for r in report.items if r.cost is not None])
    assert report.batch.cost is not None and report.batch.cost.requests > 0


def test_a_resent_completion_adds_the_items_cost_once(rig, faults):
    # GIVEN one item whose completion is applied, its reply lost and re-sent by botocore
    rig.producer.submit(B, "generation", items(1), "tester")
    faults.resent("UpdateItem", when=containing("listing_items", "completed"))
    rig.drain()
    assert faults.fired == [("resend", "UpdateItem")]
    resent = rig.store.batches.describe_batch(B)
    # AND the same batch in a second run, without the fault
    other = BatchRef("acme", "quiet")
    rig.producer.submit(other, "generation", items(1), "tester")
    rig.drain()
    quiet = rig.store.batches.describe_batch(other)
    # THEN the re-sent completion's item carries the cost of one attempt, as the quiet one does (not twice)
    assert resent.items[0].status is ItemStatus.COMPLETED
    assert resent.items[0].cost is not None and resent.items[0].cost.requests > 0
    assert resent.items[0].cost == quiet.items[0].cost
    assert resent.batch.cost == quiet.batch.cost
