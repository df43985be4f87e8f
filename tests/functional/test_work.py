"""Durable batches over moto: claims, duplicates, crashes, timeouts, quota, reclaim, retry_failed.

Every test drives the real stores against moto's in-process DynamoDB, with an
in-memory wake-up queue on the frozen clock and the offline provider fakes.
"""

from __future__ import annotations

import json
import random

import pytest

from jobfence.clock import TIME_BUDGET_MS
from jobfence.testing.grants import within_grant
from jobfence.work import BatchRef, BatchStatus, ItemKey, ItemStatus, QuotaHold, RetryResult, StaleVerdict, Tally
from ops.harness import build_rig, record
from providers.items_fake import Behaviour

B = BatchRef("acme", "b1")


def key(i: int, ref: BatchRef = B, shards: int = 1) -> ItemKey:
    """Item i of a batch; the tests' batches of up to 166 items have one shard (`shards_for`)."""
    return ItemKey.of(ref, f"i{i:05d}", shards)


def idem(i: int, ref: BatchRef = B) -> str:
    return f"{ref.tenant}:{ref.batch_id}:i{i:05d}"


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 10_000, "globex": 10_000})


def scan(dynamodb, table):
    items = dynamodb.scan(TableName=table)["Items"]
    return sorted(json.dumps(i, sort_keys=True) for i in items)


def assert_books_balance(rig, tenant="acme"):
    """Invariant 7: used = reserved - refunded, and the item rows account for every unit."""
    bal = rig.quota.balance(tenant)
    assert bal.used == bal.reserved - bal.refunded
    rows = [i for b in rig.store.batches.list_batches(tenant) for i in rig.store.items.item_rows(b.ref, b.shards)]
    assert sum(i.quota_reservations for i in rows) == bal.reserved
    assert sum(i.quota_refunds for i in rows) == bal.refunded
    for i in rows:
        held = 1 if i.quota is QuotaHold.RESERVED else 0
        assert i.quota_reservations - i.quota_refunds == held
        if i.status is ItemStatus.FAILED:
            assert i.quota is not QuotaHold.RESERVED  # a failed item always gave its unit back


def assert_finalized_matches_rows(rig, ref=B):
    """Invariant 6: a finalized batch's counters equal a recount of its item rows."""
    report = rig.store.batches.describe_batch(ref)
    if report.batch.status is BatchStatus.FINALIZED:
        c = report.counts()
        assert (report.batch.completed, report.batch.failed) == (c["completed"], c["failed"])
        assert c["pending"] == c["running"] == 0


# -- producer ---------------------------------------------------------------------------------


def test_repeating_a_submit_creates_no_rows_and_enqueues_nothing(rig, dynamodb, tables):
    # GIVEN a submitted batch of 35 items
    first = rig.submit("acme", "b1", 35)
    rows_before = scan(dynamodb, tables["listing_items"])
    # WHEN the same call is repeated
    second = rig.submit("acme", "b1", 35)
    # THEN no row was written or changed and nothing more was enqueued
    assert (first.created, first.rows_written, first.enqueued) == (True, 35, 35)
    assert (second.created, second.rows_written, second.enqueued) == (False, 0, 0)
    assert scan(dynamodb, tables["listing_items"]) == rows_before
    assert rig.queues["generation"].sent == 35


def test_a_submit_interrupted_mid_enqueue_resumes_without_resending(rig):
    # GIVEN a queue that refuses every send after the first two chunks
    queue = rig.queues["generation"]
    real_send, calls = queue.send, {"n": 0}

    def flaky(keys, delay_s=0):
        calls["n"] += 1
        return list(keys) if calls["n"] > 2 else real_send(keys, delay_s)

    queue.send = flaky
    with pytest.raises(Exception, match="could not be sent"):
        rig.submit("acme", "b1", 45)
    assert queue.sent == 20
    # WHEN the call is repeated with a healthy queue
    queue.send = real_send
    again = rig.submit("acme", "b1", 45)
    # THEN exactly the 25 unsent wake-ups go out, each item once
    assert again.enqueued == 25 and again.rows_written == 0
    bodies = [m.body for m in queue.messages]
    assert len(bodies) == len(set(bodies)) == 45


def test_the_enqueue_checkpoint_is_written_per_hundred_wake_ups_and_a_producer_dying_between_resends_fewer(rig):
    # GIVEN a producer whose checkpoints are recorded, and that dies after its 14th SendMessageBatch (130 wake-ups)
    queue = rig.queues["generation"]
    real_send, calls, marks = queue.send, {"n": 0}, []
    real_mark = rig.store.batches.checkpoint_enqueued

    class Died(BaseException):
        pass

    def dying(keys, delay_s=0):
        calls["n"] += 1
        if calls["n"] > 13:
            raise Died()
        return real_send(keys, delay_s)

    rig.store.batches.checkpoint_enqueued = lambda ref, n: (marks.append(n), real_mark(ref, n))
    queue.send = dying
    with pytest.raises(Died):
        rig.submit("acme", "b1", 250)
    # THEN it had checkpointed once, at 100 (not after every SendMessageBatch of 10)
    assert marks == [100]
    # WHEN the call is repeated
    queue.send = real_send
    again = rig.submit("acme", "b1", 250)
    # THEN it resumes at the checkpoint: the 30 wake-ups sent after it go out twice, and it checkpoints per 100 and at the end
    assert again.enqueued == 150 and marks == [100, 200, 250]
    # AND each item still completes exactly once
    rig.drain()
    assert rig.generator.calls.calls() == 250
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed) == (BatchStatus.FINALIZED, 250)


def test_a_batch_id_reused_with_another_size_is_refused(rig):
    rig.submit("acme", "b1", 3)
    with pytest.raises(Exception, match="exists"):
        rig.submit("acme", "b1", 4)


# -- duplicates and order ------------------------------------------------------------------------


def test_every_message_delivered_twice_does_each_item_once(rig):
    # GIVEN a batch of 30 items
    rig.submit("acme", "b1", 30)
    # WHEN every delivery carries each message twice
    while rig.queues["generation"].visible():
        rig.deliver(twice=True)
    # THEN each item ran once, was paid once, and the duplicates were acknowledged
    assert rig.generator.calls.calls() == 30
    report = rig.store.batches.describe_batch(B)
    assert all(i.status is ItemStatus.COMPLETED and i.attempts == 1 for i in report.items)
    assert rig.quota.balance("acme").used == 30
    assert report.batch.status is BatchStatus.FINALIZED
    assert_books_balance(rig)


def test_a_redelivery_after_completion_is_acknowledged_and_changes_nothing(rig, dynamodb, tables):
    # GIVEN a completed batch and the messages that woke it
    rig.submit("acme", "b1", 5)
    old = list(rig.queues["generation"].messages)
    rig.drain()
    before = scan(dynamodb, tables["listing_items"])
    # WHEN the same messages arrive again (SQS at-least-once)
    result = rig.workers["generation"].process([record(m) for m in old])
    # THEN every one is acknowledged as a duplicate and no row moved
    assert all(o.ok for o in result.outcomes.values())
    assert result.counts.get(Tally.DUPLICATE) == 5
    assert scan(dynamodb, tables["listing_items"]) == before


def test_messages_delivered_out_of_order_all_complete(rig):
    rig.submit("acme", "b1", 40)
    while rig.queues["generation"].visible():
        rig.deliver(n=7, newest_first=True)
    report = rig.store.batches.describe_batch(B)
    assert report.counts()["completed"] == 40
    assert report.batch.status is BatchStatus.FINALIZED and report.batch.recounts <= 2


# -- crashes and reclaim ----------------------------------------------------------------------------


def test_a_worker_that_dies_mid_item_is_reclaimed_and_the_item_completes(rig, clock):
    # GIVEN a worker that claimed an item and died (the row is left running, the message is gone)
    rig.submit("acme", "b1", 1)
    rig.queues["generation"].messages.clear()
    claims = rig.store.items.claim([key(0)], "generation", 5)
    assert claims[key(0)].state.value == "claimed"
    # WHEN the item is not yet stale, reclaim leaves it alone
    clock.advance(minutes=5)
    assert rig.reclaimer.run_once().stale_running == 0
    # AND just past item-stale it still does: the time budget (skew + request age) is waited on top
    clock.advance(minutes=1, seconds=1)
    assert rig.reclaimer.run_once().stale_running == 0
    # AND once it is past item-stale and the time budget, reclaim re-enqueues it
    clock.advance(ms=TIME_BUDGET_MS)
    counts = rig.reclaimer.run_once()
    assert counts.stale_running == 1 and counts.requeued == 1
    row = rig.store.items.item(key(0))
    assert row.status is ItemStatus.PENDING and "reclaimed" in row.error
    rig.drain()
    # THEN the item completes on its second attempt, holding the one reservation it made first
    row = rig.store.items.item(key(0))
    assert (row.status, row.attempts, row.quota_reservations) == (ItemStatus.COMPLETED, 2, 1)
    assert rig.store.batches.batch(B).status is BatchStatus.FINALIZED
    assert_books_balance(rig)


def test_a_claim_stamped_early_is_not_reclaimed_before_item_stale_in_true_time(rig, clock, tables):
    # GIVEN a worker whose clock runs 60 s behind the reclaimer's (the skew budget) and whose claim
    # was applied 9 s after it read that clock (within the request-age budget): its stamp is 69 s early
    from jobfence.work import WorkStore

    class Early:
        def now_ms(self) -> int:
            return clock.now_ms() - 69_000

    rig.submit("acme", "b1", 1)
    rig.queues["generation"].messages.clear()
    worker_store = WorkStore(tables["listing_batches"], tables["listing_items"], rig.quota, Early())
    assert worker_store.items.claim([key(0)], "generation", 5)[key(0)].state.value == "claimed"
    # WHEN the reclaimer sweeps 359 s after the claim was applied (item-stale is 360 s)
    clock.advance(seconds=359)
    # THEN the item is left to its worker: the comparison waits the time budget on the stamp
    assert rig.reclaimer.run_once().stale_running == 0
    assert rig.store.items.item(key(0)).status is ItemStatus.RUNNING
    # AND once item-stale has passed in true time, it is reclaimed
    clock.advance(seconds=3)
    assert rig.reclaimer.run_once().requeued == 1


def test_a_publish_retried_after_a_crash_is_not_published_twice(rig, clock):
    # GIVEN a publish item whose worker published it and died before writing the outcome
    ref = BatchRef("acme", "p1")
    rig.submit("acme", "p1", 1, kind="publish")
    rig.queues["publish"].messages.clear()
    claim = rig.store.items.claim([key(0, ref)], "publish", 5)[key(0, ref)]
    from jobfence.work import WorkRequest

    perform_listing = rig.performs["publish"]  # the same step the worker runs
    first_id = perform_listing(WorkRequest(key(0, ref), "publish", claim.attempts, claim.payload), 10)
    # WHEN reclaim re-drives it and a worker runs it again
    clock.advance(minutes=6, seconds=11)  # item-stale (5 min) and the time budget
    rig.reclaimer.run_once()
    rig.drain("publish")
    # THEN the marketplace holds one listing, the one the row records
    assert rig.marketplace.created() == 1
    assert rig.store.items.item(key(0, ref)).result_ref == first_id


def test_an_item_that_always_fails_stops_at_exactly_five_attempts(rig, clock):
    # GIVEN an item whose provider always fails
    rig.submit("acme", "b1", 3)
    rig.generator.script(idem(1), Behaviour.FAIL)
    # WHEN its delayed retries are delivered and reclaim runs in between
    for _ in range(40):
        if rig.store.batches.batch(B).status is BatchStatus.FINALIZED:
            break  # the loop below checks that automation never touches it again
        clock.advance(minutes=5)
        rig.drain()
        rig.reclaimer.run_once()
    # THEN it failed terminally at attempt 5, its unit refunded once, and the batch is finalized
    row = rig.store.items.item(key(1))
    assert (row.status, row.attempts, row.quota_refunds) == (ItemStatus.FAILED, 5, 1)
    assert "503" in row.error
    assert rig.generator.calls.calls(idem(1)) == 5
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed, batch.failed) == (BatchStatus.FINALIZED, 2, 1)
    # AND automation never touches it again
    before = rig.store.items.item(key(1))
    for _ in range(5):
        clock.advance(minutes=20)
        rig.reclaimer.run_once()
        rig.drain()
    assert rig.store.items.item(key(1)) == before
    assert_books_balance(rig)

    # WHEN an operator retries the failed items (the provider has recovered)
    rig.generator.script(idem(1), Behaviour.SUCCEED)
    counts = rig.ops.retry_failed(B, "ops@example.com")
    assert counts == RetryResult(retried=1, skipped_quota=0, unsent=0)
    reopened = rig.store.batches.batch(B)
    assert (reopened.status, reopened.retried_by, reopened.retries) == (BatchStatus.OPEN, "ops@example.com", 1)
    rig.drain()
    # THEN it comes back once with a fresh budget and completes; the batch finalizes again
    row = rig.store.items.item(key(1))
    assert (row.status, row.attempts, row.quota_reservations, row.quota_refunds) == (ItemStatus.COMPLETED, 1, 2, 1)
    assert rig.store.batches.batch(B).status is BatchStatus.FINALIZED
    assert_finalized_matches_rows(rig)
    assert_books_balance(rig)
    # AND a second retry has nothing to do
    assert rig.ops.retry_failed(B, "ops@example.com").retried == 0


def test_reclaim_racing_a_completion_never_overwrites_it(rig, clock):
    # GIVEN a running item that looks stale to the reclaimer's read
    rig.submit("acme", "b1", 1)
    rig.queues["generation"].messages.clear()
    claim = rig.store.items.claim([key(0)], "generation", 5)[key(0)]
    clock.advance(minutes=8)
    from jobfence.work import ItemStatus as S
    from jobfence.work import StaleCutoffs

    (batch,) = rig.store.batches.open_batches("generation").batches
    cutoffs = StaleCutoffs(running=clock.now_ms() - 360_000, pending=0)
    stale = list(rig.store.items.stale_items(batch, cutoffs))
    assert [(s.key, s.status) for s in stale] == [(key(0), S.RUNNING)]
    # WHEN the slow worker completes before the reclaimer writes
    assert rig.store.items.complete(claim, "gen_late")
    verdict = rig.store.items.requeue_stale(key(0), S.RUNNING, stale[0].updated_at, 5, "reclaimed")
    # THEN the reclaimer's conditional write is refused and the completion stands
    assert verdict is StaleVerdict.CHANGED
    row = rig.store.items.item(key(0))
    assert (row.status, row.result_ref) == (ItemStatus.COMPLETED, "gen_late")
    # AND a completion arriving after the reclaimer won is refused instead
    rig.submit("acme", "b2", 1)
    k2 = key(0, BatchRef("acme", "b2"))
    c2 = rig.store.items.claim([k2], "generation", 5)[k2]
    clock.advance(minutes=8)
    rig.reclaimer.run_once()
    assert not rig.store.items.complete(c2, "gen_too_late")
    assert rig.store.items.item(k2).status is ItemStatus.PENDING


def test_a_lost_wakeup_of_a_pending_item_is_re_sent_by_reclaim(rig, clock):
    # GIVEN items whose wake-ups were lost
    rig.submit("acme", "b1", 12)
    rig.queues["generation"].messages.clear()
    # WHEN pending-stale and the time budget pass and reclaim runs (twice: the second finds nothing new)
    clock.advance(minutes=16, seconds=11)
    counts = rig.reclaimer.run_once()
    assert counts.stale_pending == 12 and counts.requeued == 12
    assert rig.reclaimer.run_once().stale_pending == 0
    rig.drain()
    # THEN every item completes on its first attempt
    report = rig.store.batches.describe_batch(B)
    assert all(i.status is ItemStatus.COMPLETED and i.attempts == 1 for i in report.items)


def test_a_batch_whose_rollup_was_lost_is_finalized_by_reclaim_from_its_rows(rig, clock):
    # GIVEN a batch whose items all completed but whose roll-ups never landed
    rig.submit("acme", "b1", 4)
    rig.queues["generation"].messages.clear()
    claims = rig.store.items.claim([key(i) for i in range(4)], "generation", 5)
    for c in claims.values():
        assert rig.store.items.complete(c, "gen_x")
    assert rig.store.batches.batch(B).status is BatchStatus.OPEN
    # WHEN batch-stale and the time budget pass and reclaim runs (not before)
    clock.advance(minutes=16, seconds=9)
    assert rig.reclaimer.run_once().batches_swept == 0
    clock.advance(seconds=2)
    counts = rig.reclaimer.run_once()
    # THEN the batch is finalized with counters recounted from its rows
    assert counts.batches_finalized == 1
    batch = rig.store.batches.batch(B)
    assert (batch.status, batch.completed, batch.failed, batch.recounts) == (BatchStatus.FINALIZED, 4, 0, 1)


def test_a_slow_batch_is_swept_at_most_once_per_batch_stale_period(rig, clock):
    # GIVEN a quiet batch with items still pending
    rig.submit("acme", "b1", 3)
    clock.advance(minutes=16, seconds=11)
    assert rig.reclaimer.run_once().batches_swept == 1
    # WHEN reclaim runs again five minutes later
    clock.advance(minutes=5)
    # THEN the batch is not recounted again (the sweep bumped its heartbeat)
    assert rig.reclaimer.run_once().batches_swept == 0
    assert rig.store.batches.batch(B).status is BatchStatus.OPEN


# -- timeouts, rejections, quota -------------------------------------------------------------------


def test_a_hung_provider_call_times_out_and_only_the_row_records_it(dynamodb, tables, clock):
    # GIVEN a worker with a short per-item timeout and a provider that hangs on one item
    rig = build_rig(dynamodb, tables, clock, per_item_timeout_s=0.3, guard=within_grant)
    rig.quota.grant("acme", 100)
    try:
        rig.submit("acme", "b1", 3)
        rig.generator.script(idem(2), Behaviour.HANG)
        # WHEN the batch is delivered
        result = rig.deliver()
    finally:
        rig.generator.calls.release()
    # THEN the others completed, the hung item went back to pending with the timeout on its row
    assert all(o.ok for o in result.outcomes.values())
    row = rig.store.items.item(key(2))
    assert row.status is ItemStatus.PENDING and row.attempts == 1
    assert row.error == "timed out after 0.3 s (per-item limit)"
    assert [rig.store.items.item(key(i)).status for i in (0, 1)] == [ItemStatus.COMPLETED] * 2


def test_a_provider_timeout_at_the_cap_fails_the_item_with_its_reason(rig, clock):
    rig.submit("acme", "b1", 1)
    rig.generator.script(idem(0), Behaviour.TIME_OUT)
    for _ in range(10):
        rig.drain()
        clock.advance(minutes=5)
    row = rig.store.items.item(key(0))
    assert (row.status, row.attempts) == (ItemStatus.FAILED, 5)
    assert "ProviderAmbiguous" in row.error or "no answer" in row.error


def test_a_permanent_rejection_fails_at_once_and_refunds(rig):
    rig.submit("acme", "b1", 2)
    rig.generator.script(idem(0), Behaviour.REJECT)
    rig.drain()
    row = rig.store.items.item(key(0))
    assert (row.status, row.attempts, row.quota) == (ItemStatus.FAILED, 1, QuotaHold.REFUNDED)
    assert "422" in row.error
    assert rig.quota.balance("acme").used == 1
    assert_books_balance(rig)


def test_items_beyond_the_quota_fail_without_reserving_and_retry_after_a_grant(rig):
    # GIVEN a tenant with 3 units and a batch of 5
    rig.quota.grant("initech", 3)
    ref = BatchRef("initech", "q1")
    rig.submit("initech", "q1", 5)
    # WHEN it is processed
    rig.drain()
    # THEN 3 completed, 2 failed for quota with nothing reserved, and the books balance
    report = rig.store.batches.describe_batch(ref)
    assert report.counts() == {"pending": 0, "running": 0, "completed": 3, "failed": 2, "cancelled": 0}
    failed = [i for i in report.items if i.status is ItemStatus.FAILED]
    assert all(i.error.startswith("quota exhausted") and i.quota is None for i in failed)
    assert rig.quota.balance("initech").used == 3
    # WHEN retried without quota, nothing is reopened
    assert rig.ops.retry_failed(ref, "ops").skipped_quota == 2
    # AND after a grant the retry re-reserves and the items complete
    rig.quota.grant("initech", 2)
    assert rig.ops.retry_failed(ref, "ops").retried == 2
    rig.drain()
    assert rig.store.batches.describe_batch(ref).counts()["completed"] == 5
    assert rig.quota.balance("initech").used == 5
    assert_books_balance(rig, "initech")


# -- tenant isolation and bad messages ----------------------------------------------------------------


def test_a_cross_tenant_message_and_a_malformed_body_fail_and_change_nothing(rig, dynamodb, tables, caplog):
    # GIVEN batches of two tenants
    rig.submit("acme", "b1", 2)
    rig.submit("globex", "g1", 2)
    rig.queues["generation"].messages.clear()
    before = {t: scan(dynamodb, tables[t]) for t in ("listing_items", "listing_batches", "listing_quota")}
    # WHEN a message names tenant acme with globex's batch and item, and another is not a wake-up
    records = [
        {"messageId": "x1", "body": json.dumps({"tenant": "acme", "batch": "g1", "item": "i00000"})},
        {"messageId": "x2", "body": "{\"tenant\": \"acme\", \"batch\": \"b1\"}"},
        {"messageId": "x3", "body": "not json"},
    ]
    result = rig.workers["generation"].process(records)
    # THEN each is a batch item failure with a clear reason and no row changed
    assert not any(o.ok for o in result.outcomes.values())
    assert "no such item for this tenant" in result.outcomes["x1"].reason
    assert "item" in result.outcomes["x2"].reason and "missing" in result.outcomes["x2"].reason
    assert "not a wake-up" in result.outcomes["x3"].reason
    assert {t: scan(dynamodb, tables[t]) for t in before} == before


def test_a_wakeup_on_the_wrong_queue_changes_nothing(rig, dynamodb, tables):
    rig.submit("acme", "b1", 1)
    before = scan(dynamodb, tables["listing_items"])
    result = rig.workers["publish"].process([{"messageId": "w", "body": key(0).body()}])
    assert not result.outcomes["w"].ok and "generation pipeline" in result.outcomes["w"].reason
    assert scan(dynamodb, tables["listing_items"]) == before


def test_logs_carry_no_payload(rig, capsys):
    secret = "SECRET-INPUT-7f3a"
    from jobfence.work import ItemInput

    rig.producer.submit(B, "generation", [ItemInput("i00000", {"title": secret})], "tester")
    rig.generator.script(idem(0), Behaviour.FAIL_TIMES, times=1)
    rig.drain()
    out = capsys.readouterr()
    assert secret not in out.out + out.err


# -- many items, random failures ---------------------------------------------------------------------


def test_random_failures_over_hundreds_of_items_keep_the_books(rig, clock):
    # GIVEN 300 items over two tenants, a third of them flaky, some rejected, some always failing
    rnd = random.Random(7)
    rig.submit("acme", "b1", 200)
    rig.submit("globex", "g1", 100)
    for ref, n in ((B, 200), (BatchRef("globex", "g1"), 100)):
        for i in range(n):
            roll = rnd.random()
            if roll < 0.3:
                rig.generator.script(idem(i, ref), Behaviour.FAIL_TIMES, times=rnd.randint(1, 6))
            elif roll < 0.35:
                rig.generator.script(idem(i, ref), Behaviour.REJECT)
            elif roll < 0.4:
                rig.generator.script(idem(i, ref), Behaviour.FAIL)
    # WHEN it runs to the end with duplicates, crashes-free reclaim sweeps and time passing
    refs = (B, BatchRef("globex", "g1"))
    for step in range(60):
        while rig.queues["generation"].visible():
            rig.deliver(twice=rnd.random() < 0.2, newest_first=rnd.random() < 0.5)
        if all(rig.store.batches.batch(ref).status is BatchStatus.FINALIZED for ref in refs) and not rig.queues["generation"].messages:
            break  # both final and nothing left to deliver: later sweeps would find nothing
        clock.advance(minutes=4)
        rig.reclaimer.run_once()
    # THEN every item is terminal, attempts never exceed 5, counters equal recounts and the books balance
    for ref in refs:
        report = rig.store.batches.describe_batch(ref)
        assert report.batch.status is BatchStatus.FINALIZED
        assert all(i.status in (ItemStatus.COMPLETED, ItemStatus.FAILED) for i in report.items)
        assert max(i.attempts for i in report.items) <= 5
        assert report.batch.recounts <= 2
        assert_finalized_matches_rows(rig, ref)
    assert_books_balance(rig, "acme")
    assert_books_balance(rig, "globex")
