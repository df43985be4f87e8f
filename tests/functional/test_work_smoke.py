"""Smoke: a batch flows through claim, completion, roll-up and finalize."""

import pytest

from jobfence.work import BatchRef, BatchStatus, ItemStatus


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 1000})


def test_a_batch_completes_and_finalizes_once(rig):
    # GIVEN a batch of 25 generation items
    rig.submit("acme", "b1", 25)
    # WHEN the queue drains
    rig.drain()
    # THEN every item completed, the batch is finalized from one recount, and quota was spent per item
    report = rig.store.batches.describe_batch(BatchRef("acme", "b1"))
    assert report.counts() == {"pending": 0, "running": 0, "completed": 25, "failed": 0, "cancelled": 0}
    assert report.batch.status is BatchStatus.FINALIZED
    assert (report.batch.completed, report.batch.failed, report.batch.recounts) == (25, 0, 1)
    assert rig.quota.balance("acme").used == 25
    assert all(i.status is ItemStatus.COMPLETED and i.attempts == 1 for i in report.items)
