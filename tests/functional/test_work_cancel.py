"""Cancelling a batch over moto: pending items cancelled and refunded exactly once, running ones finish.

Each test is one deterministic sequence; faults are injected on the stores' own
clients (`tests/aws_faults.py`): a re-sent or crashed cancel, a cancel racing a
worker's claim, the reclaimer, a finalize and retry-failed.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import pytest

from jobfence.errors import StoreError
from jobfence.work import BatchRef, BatchStatus, ItemKey, ItemStatus, QuotaHold, Tally
from providers.items_fake import Behaviour
from tests.aws_faults import throttled

B = BatchRef("acme", "b1")


def key(i: int) -> ItemKey:
    return ItemKey.of(B, f"i{i:05d}", 1)


def containing(*strings: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda params: all(s in json.dumps(params, default=str) for s in strings)


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 1_000})


def assert_books(rig, tenant: str = "acme") -> None:
    """Quota conserved: the books match the item rows, every cancelled item gave back each unit it took."""
    bal = rig.quota.balance(tenant)
    rows = rig.store.batches.describe_batch(B).items
    assert bal.used == bal.reserved - bal.refunded
    assert (sum(i.quota_reservations for i in rows), sum(i.quota_refunds for i in rows)) == (bal.reserved, bal.refunded)
    for i in rows:
        if i.status in (ItemStatus.CANCELLED, ItemStatus.FAILED):
            assert i.quota_refunds == i.quota_reservations, i
            assert i.quota is not QuotaHold.RESERVED
        if i.status is ItemStatus.COMPLETED:
            assert i.quota_refunds == i.quota_reservations - 1, i


def test_a_cancel_ends_every_pending_item_refunded_and_finalizes_cancelled(rig):
    # GIVEN an open batch of 6 pending items, each born holding its unit
    rig.submit("acme", "b1", 6)
    assert rig.quota.balance("acme").used == 6
    # WHEN the operator cancels it
    result = rig.ops.cancel(B, "ops@example.com")
    # THEN every item is cancelled, its unit given back, and the batch finalized `cancelled` from its rows
    assert (result.status, result.cancelled, result.refunded, result.running) == (BatchStatus.CANCELLED, 6, 6, 0)
    assert (result.requested_by, result.recorded_now) == ("ops@example.com", True)
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.cancelled, batch.completed, batch.failed) == (BatchStatus.CANCELLED, 6, 0, 0)
    assert batch.cancel_requested_by == "ops@example.com" and batch.finalized_at is not None
    assert {i.status for i in rig.store.batches.describe_batch(B).items} == {ItemStatus.CANCELLED}
    assert rig.quota.balance("acme").used == 0
    assert_books(rig)
    # AND the wake-ups still queued are acknowledged without calling the provider
    rig.drain()
    assert rig.generator.calls.calls() == 0


def test_a_resent_cancel_refunds_once_and_a_repeat_reports_the_same(rig, faults):
    # GIVEN an open batch of 4
    rig.submit("acme", "b1", 4)
    # WHEN the cancel's record and one item's transaction are each applied, their replies lost and re-sent
    faults.resent("UpdateItem", when=containing("cancel_requested_by"))
    faults.resent("TransactWriteItems", when=containing("cancelled"))
    first = rig.ops.cancel(B, "ops@example.com")
    assert faults.count("resend") == 2
    # AND the operator asks again (a re-sent cancel), as another operator
    again = rig.ops.cancel(B, "other@example.com")
    # THEN each item was refunded exactly once and both answers are the rows' account
    assert (first.cancelled, first.refunded, first.status) == (4, 4, BatchStatus.CANCELLED)
    assert (again.cancelled, again.refunded, again.recorded_now) == (4, 4, False)
    assert again.requested_by == "ops@example.com"  # the first asker is kept
    assert rig.quota.balance("acme").refunded == 4
    assert_books(rig)


def test_a_cancel_that_crashed_midway_is_continued_by_the_next(rig, faults):
    # GIVEN an open batch of 5, and a cancel that dies at its third item (that write not applied)
    rig.submit("acme", "b1", 5)
    sent: list[int] = []

    def third_cancel(params: Mapping[str, Any]) -> bool:
        if "cancelled" in json.dumps(params, default=str):
            sent.append(1)
        return len(sent) >= 3  # the third item's transaction, on each of its tries

    faults.refused_before("TransactWriteItems", lambda: throttled("TransactWriteItems"), when=third_cancel, times=3)
    with pytest.raises(StoreError):
        rig.ops.cancel(B, "ops@example.com")
    faults.detach()
    # THEN the row records the cancel though the pass stopped: two items cancelled, three pending
    statuses = sorted(i.status.value for i in rig.store.batches.describe_batch(B).items)
    assert statuses == ["cancelled", "cancelled", "pending", "pending", "pending"]
    assert rig.store.batches.batch(B).cancel_requested
    # AND a worker woken meanwhile does not run a pending item of it: its claim is cancelled unrun
    rig.queues["generation"].messages.sort(key=lambda m: m.body)
    result = rig.deliver(n=5)
    assert result.counts.get(Tally.CANCELLED) == 3 and rig.generator.calls.calls() == 0
    # WHEN the operator cancels again THEN it continues: all five cancelled, each refunded once
    done = rig.ops.cancel(B, "ops@example.com")
    assert (done.cancelled, done.refunded, done.status, done.recorded_now) == (5, 5, BatchStatus.CANCELLED, False)
    assert_books(rig)


def test_an_item_running_before_the_cancel_finishes_and_counts_completed(rig):
    # GIVEN a batch of 3 with one item claimed (running) before the cancel
    rig.submit("acme", "b1", 3)
    claim = rig.store.items.claim([key(0)], "generation", 5)[key(0)]
    # WHEN the batch is cancelled
    result = rig.ops.cancel(B, "ops@example.com")
    # THEN the pending items are cancelled, the running one is reported still running, the batch stays open
    assert (result.status, result.cancelled, result.running) == (BatchStatus.OPEN, 2, 1)
    # AND the running item finishes: its completion is accepted, and the next finalize ends the batch cancelled
    assert rig.store.items.complete(claim, "ref-0")
    batch = rig.store.batches.finalize(B)
    assert (batch.status, batch.completed, batch.cancelled) == (BatchStatus.CANCELLED, 1, 2)
    assert_books(rig)


def test_a_claim_applied_after_the_cancel_is_cancelled_unrun(rig, faults):
    # GIVEN a batch of 4 whose cancel is recorded, and a worker that claims before the pass reaches the items
    rig.submit("acme", "b1", 4)
    seen: list[Any] = []
    faults.paused("Query", then=lambda: seen.append(rig.deliver(n=4)), when=containing("listing_items"))
    # WHEN the cancel runs (the worker claims between its record and its pass)
    result = rig.ops.cancel(B, "ops@example.com")
    # THEN the worker read the cancel after its claim and ran nothing: every item cancelled once
    assert seen and seen[0].counts.get(Tally.CANCELLED) == 4
    assert rig.generator.calls.calls() == 0
    assert (result.cancelled, result.refunded, result.status) == (4, 4, BatchStatus.CANCELLED)
    assert_books(rig)


def test_the_reclaimer_requeuing_a_running_item_of_a_cancelled_batch_cancels_it_once(rig, clock):
    # GIVEN a cancelled batch with one item whose worker died while it was running
    rig.submit("acme", "b1", 2)
    claim = rig.store.items.claim([key(0)], "generation", 5)[key(0)]
    assert rig.ops.cancel(B, "ops@example.com").running == 1
    # WHEN the item goes stale and the reclaimer sweeps (requeue, then the batch-stale finalize)
    for _ in range(3):
        clock.advance(minutes=20)
        rig.reclaimer.run_once()
    # THEN the item ends cancelled, refunded once, and the batch is cancelled
    assert rig.store.items.item(key(0)).status is ItemStatus.CANCELLED
    assert rig.store.batches.batch(B).status is BatchStatus.CANCELLED
    # AND the old worker's late completion is refused: nothing moves, nothing is refunded twice
    assert not rig.store.items.complete(claim, "late")
    assert not rig.store.items.fail(claim, "late")
    assert rig.store.items.item(key(0)).quota_refunds == 1
    assert_books(rig)


def test_a_finalize_that_read_the_batch_before_the_cancel_is_refused(rig):
    # GIVEN a batch whose items are all terminal, read by a finalize that is then overtaken by a cancel
    rig.submit("acme", "b1", 2)
    for i in range(2):
        claim = rig.store.items.claim([key(i)], "generation", 5)[key(i)]
        assert rig.store.items.complete(claim, f"r{i}")
    seen = rig.store.batches.batch(B)
    rig.store.batches.record_cancel(B, "ops@example.com")
    # WHEN the finalize writes THEN it is refused: a cancelled batch never ends `finalized`
    after = rig.store.batches.finalize(B, seen=seen)
    assert after.status is BatchStatus.OPEN
    # AND the next finalize ends it cancelled, with its rows' counters
    batch = rig.store.batches.finalize(B)
    assert (batch.status, batch.completed, batch.cancelled) == (BatchStatus.CANCELLED, 2, 0)


def test_retry_failed_on_a_cancelled_batch_is_refused_with_one_line(rig):
    # GIVEN a batch with a failed item, then cancelled
    rig.generator.script("acme:b1:i00000", Behaviour.REJECT)
    rig.submit("acme", "b1", 3)
    rig.deliver(n=1)
    assert rig.store.items.item(key(0)).status is ItemStatus.FAILED
    rig.ops.cancel(B, "ops@example.com")
    # WHEN the operator asks to retry its failed items THEN it is refused, nothing reopened
    with pytest.raises(StoreError, match=r"^batch acme/b1 was cancelled by ops@example.com: retry-failed does not"):
        rig.ops.retry_failed(B, "ops@example.com")
    assert rig.store.items.item(key(0)).status is ItemStatus.FAILED
    assert rig.store.batches.batch(B).status is BatchStatus.CANCELLED
    assert_books(rig)


def test_a_cancel_recorded_while_a_retry_is_under_way_refuses_the_retry(rig, faults):
    # GIVEN an open batch of 3: one item failed (rejected), two pending
    rig.generator.script("acme:b1:i00000", Behaviour.REJECT)
    rig.submit("acme", "b1", 3)
    rig.deliver(n=1)
    assert rig.store.items.item(key(0)).status is ItemStatus.FAILED
    # WHEN a retry has read the batch and a whole cancel runs before its transaction is sent
    cancelled: list[Any] = []
    faults.paused(
        "TransactWriteItems",
        then=lambda: cancelled.append(rig.ops.cancel(B, "ops@example.com")),
        when=containing("reopened"),
    )
    # THEN the retry is refused by the cancel its transaction re-checks; the failed item stays failed, refunded once
    with pytest.raises(StoreError, match="was cancelled by ops@example.com"):
        rig.ops.retry_failed(B, "other@example.com")
    assert cancelled and cancelled[0].cancelled == 2
    assert rig.store.items.item(key(0)).status is ItemStatus.FAILED
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.failed, batch.cancelled, batch.retries) == (BatchStatus.CANCELLED, 1, 2, 0)
    assert_books(rig)


def test_a_retry_before_the_cancel_reopens_items_the_cancel_then_refunds(rig):
    # GIVEN an open batch of 3 with one failed item, retried (reopened pending, its unit re-reserved)
    rig.generator.script("acme:b1:i00000", Behaviour.REJECT)
    rig.submit("acme", "b1", 3)
    rig.deliver(n=1)
    assert rig.ops.retry_failed(B, "ops@example.com").retried == 1
    # WHEN the batch is cancelled
    result = rig.ops.cancel(B, "ops@example.com")
    # THEN all three are cancelled; the retried one reserved twice and was refunded twice (once per reservation)
    assert (result.cancelled, result.status) == (3, BatchStatus.CANCELLED)
    item = rig.store.items.item(key(0))
    assert (item.status, item.quota_reservations, item.quota_refunds) == (ItemStatus.CANCELLED, 2, 2)
    assert rig.quota.balance("acme").used == 0
    assert_books(rig)


def test_a_final_batch_cannot_be_cancelled(rig):
    # GIVEN a finalized batch
    rig.submit("acme", "b1", 2)
    rig.drain()
    assert rig.store.batches.batch(B).status is BatchStatus.FINALIZED
    # WHEN it is cancelled THEN it is refused with one line, and nothing is recorded
    with pytest.raises(StoreError, match=r"^batch acme/b1 is finalized: only an open batch can be cancelled$"):
        rig.ops.cancel(B, "ops@example.com")
    assert not rig.store.batches.batch(B).cancel_requested
    with pytest.raises(StoreError, match="^no batch acme/nope$"):
        rig.ops.cancel(BatchRef("acme", "nope"), "ops@example.com")


def test_claims_cancelled_unrun_do_not_recount_the_batch_and_the_reclaimer_finalizes_it(rig, clock):
    # GIVEN a batch of 4 whose cancel is recorded (the pass not run: its caller crashed), one item running
    rig.submit("acme", "b1", 4)
    claim = rig.store.items.claim([key(0)], "generation", 5)[key(0)]
    rig.store.batches.record_cancel(B, "ops@example.com")
    # WHEN the wake-ups of the other three are delivered
    result = rig.deliver(n=10)
    # THEN each is cancelled unrun, and no recount was spent on them (one per SQS batch would be per claim)
    assert result.counts.get(Tally.CANCELLED) == 3
    assert rig.store.batches.batch(B).recounts == 0
    # AND once the running item finishes, the reclaimer's batch-stale sweep finalizes it `cancelled` from its rows
    assert rig.store.items.complete(claim, "r0")
    clock.advance(minutes=20)
    rig.reclaimer.run_once()
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed, batch.cancelled) == (BatchStatus.CANCELLED, 1, 3)
    assert_books(rig)
