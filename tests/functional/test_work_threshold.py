"""The failure threshold of a batch, on moto: past its pipeline's tolerated failure percentage, the
batch's pending items are failed without being attempted (refunding quota exactly once), the batch
finalizes `failed_threshold`, and retry-failed brings it back.
"""

from __future__ import annotations

import pytest

from jobfence.work import (
    BatchRef,
    BatchStatus,
    ItemInput,
    ItemStatus,
    Producer,
    QuotaHold,
    tolerated_failures,
)
from jobs.listings.catalog import GENERATION, PIPELINES, TOLERATED_FAILURE_PCT, Pipeline
from providers.items_fake import Behaviour
from tests.functional.test_work import assert_books_balance, idem, key
from tests.functional.test_work_faults import containing

B = BatchRef("acme", "b1")
N = 20  # generation tolerates 25%: 5 failed items of 20, not 6


@pytest.fixture
def rig(work_rig):
    r = work_rig({"acme": 1_000})
    r.producer = Producer(r.store, r.queues, r.logger, TOLERATED_FAILURE_PCT)  # the catalog's percentages
    return r


def submit(rig, n: int = N):
    items = [ItemInput(f"i{i:05d}", {"title": f"thing {i}"}) for i in range(n)]
    return rig.producer.submit(B, GENERATION, items, "tester")


def reject(rig, *items: int) -> None:
    for i in items:
        rig.generator.script(idem(i), Behaviour.REJECT)


def test_the_tolerated_count_is_step_functions_percentage_of_the_batch():
    assert PIPELINES[GENERATION].tolerated_failure_pct == 25
    assert [tolerated_failures(25, n) for n in (1, 3, 4, 20, 21)] == [0, 0, 1, 5, 5]
    assert tolerated_failures(None, 20) is None and tolerated_failures(0, 20) == 0
    with pytest.raises(ValueError, match="0..100"):
        tolerated_failures(101, 20)
    with pytest.raises(ValueError, match="0..100"):
        Pipeline("x", "q", "p", PIPELINES[GENERATION].timing, tolerated_failure_pct=-1)


def test_the_producer_records_the_tolerated_count_on_the_batch_row_once(rig):
    submit(rig)
    submit(rig)  # a repeated call changes nothing
    assert rig.store.batches.batch(B).tolerated_failures == 5


def test_crossing_the_threshold_fails_the_pending_items_unattempted_and_finalizes_failed_threshold(rig):
    # GIVEN 20 items of which the first 6 are refused by the provider (5 tolerated)
    submit(rig)
    reject(rig, *range(6))
    # WHEN the first SQS batch (items 0-9) is processed: 6 fail, 4 complete
    rig.deliver()
    # THEN the roll-up saw 6 > 5: the 10 items not yet started were failed with the reason, never attempted
    batch = rig.store.batches.batch(B)
    assert batch.status is BatchStatus.FAILED_THRESHOLD and batch.finalized_at is not None
    assert (batch.completed, batch.failed) == (4, 16)  # the recount's
    rows = {r.item_id: r for r in rig.store.batches.describe_batch(B).items}
    for i in range(10, N):
        row = rows[f"i{i:05d}"]
        assert row.status is ItemStatus.FAILED and row.attempts == 0
        assert "crossed its failure threshold (6 of 20 items failed, 5 tolerated)" in row.error
        assert rig.generator.calls.calls(idem(i)) == 0
    # WHEN their wake-ups arrive: acknowledged as duplicates, no provider call, the batch never changes
    rig.drain()
    assert all(rig.generator.calls.calls(idem(i)) == 0 for i in range(10, N))
    assert rig.store.batches.batch(B) == batch
    assert_books_balance(rig)


def test_at_the_threshold_exactly_the_batch_finalizes_as_usual(rig):
    submit(rig)
    reject(rig, *range(5))  # 5 of 20 = 25%: tolerated
    rig.drain()
    batch = rig.store.batches.batch(B)
    assert batch.status is BatchStatus.FINALIZED and (batch.completed, batch.failed) == (15, 5)


def _released_then_crossed(rig):
    """Item 3 fails once (retriable: pending again, its reservation kept); items 0-2 and 10-12 are refused."""
    submit(rig)
    reject(rig, 0, 1, 2, 10, 11, 12)
    rig.generator.script(idem(3), Behaviour.FAIL)
    rig.deliver()  # items 0-9: 3 failed (tolerated), item 3 released to pending with its wake-up delayed
    assert rig.store.items.item(key(3)).quota is QuotaHold.RESERVED
    rig.deliver()  # items 10-19: 6 failed > 5 -> item 3, pending and holding a reservation, is failed


def test_a_pending_item_holding_a_reservation_is_refunded_exactly_once_by_the_threshold(rig):
    _released_then_crossed(rig)
    item = rig.store.items.item(key(3))
    assert item.status is ItemStatus.FAILED and "failure threshold" in item.error
    assert (item.quota, item.quota_reservations, item.quota_refunds) == (QuotaHold.REFUNDED, 1, 1)
    assert rig.store.batches.batch(B).status is BatchStatus.FAILED_THRESHOLD
    rig.clock.advance(minutes=20)
    rig.drain()  # its delayed wake-up: a duplicate, no second attempt, no second refund
    assert rig.generator.calls.calls(idem(3)) == 1
    assert rig.store.items.item(key(3)).quota_refunds == 1
    assert_books_balance(rig)


@pytest.mark.parametrize("fault", ["resent", "reply_lost"])
def test_the_thresholds_refund_is_safe_when_its_reply_is_lost_or_its_request_re_sent(rig, faults, fault):
    # GIVEN the sweep's transaction for item 3 (item and quota together) applied, and its reply lost
    getattr(faults, fault)("TransactWriteItems", when=containing("i00003", QuotaHold.REFUNDED.value))
    _released_then_crossed(rig)
    assert faults.count({"resent": "resend", "reply_lost": "after"}[fault]) == 1
    # THEN the item is failed and refunded once, whatever the caller saw; the reclaimer settles the batch
    rig.clock.advance(minutes=17)
    rig.reclaimer.run_once()
    item = rig.store.items.item(key(3))
    assert (item.status, item.quota_reservations, item.quota_refunds) == (ItemStatus.FAILED, 1, 1)
    batch = rig.store.batches.batch(B)
    assert batch.status is BatchStatus.FAILED_THRESHOLD and (batch.completed, batch.failed) == (13, 7)
    assert_books_balance(rig)


def test_retry_failed_brings_a_failed_threshold_batch_back(rig):
    submit(rig)
    reject(rig, *range(6))
    rig.deliver()
    assert rig.store.batches.batch(B).status is BatchStatus.FAILED_THRESHOLD
    # WHEN the provider is fixed and an operator retries the batch
    for i in range(6):
        rig.generator.script(idem(i), Behaviour.SUCCEED)
    result = rig.ops.retry_failed(B, "ops@example.com")
    assert result.retried == 16
    assert rig.store.batches.batch(B).status is BatchStatus.OPEN
    rig.drain()
    # THEN every item completes and the batch finalizes as usual
    batch = rig.store.batches.batch(B)
    assert batch.status is BatchStatus.FINALIZED and (batch.completed, batch.failed) == (N, 0)
    assert_books_balance(rig)
