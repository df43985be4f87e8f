"""Durable batches under scripted AWS faults: each test is one deterministic sequence.

Faults are injected with botocore event hooks (`tests/aws_faults.py`) on the
very clients the stores use (pynamodb's, per model and for transactions),
against moto in-process:

    resent        the call is applied, its reply is lost and botocore re-sends it
                  (the caller sees the re-send's answer)
    reply_lost    the call is applied and the caller gets a ReadTimeoutError
    refused_before the call is not applied: ProvisionedThroughputExceeded after retries
    paused        before the call is sent, another actor runs (a callback): the
                  caller was paused between two of its calls

moto does not implement the ClientRequestToken idempotency of
TransactWriteItems, so a re-sent transaction is applied again here (and
refused by its own first application): the strictest reading of a re-send.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping

import pytest

from jobfence.work import BatchRef, BatchStatus, ItemInput, ItemKey, ItemStatus, Tally
from tests.aws_faults import throttled

B = BatchRef("acme", "b1")


def key(i: int, ref: BatchRef = B, shards: int = 1) -> ItemKey:
    """Item i of a batch; the tests' batches of up to 166 items have one shard (`shards_for`)."""
    return ItemKey.of(ref, f"i{i:05d}", shards)


def containing(*strings: str) -> Callable[[Mapping[str, Any]], bool]:
    """Pick calls whose API parameters contain every string (table names, values)."""
    return lambda params: all(s in json.dumps(params, default=str) for s in strings)


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 1_000})


def items(n: int) -> list[ItemInput]:
    return [ItemInput(f"i{i:05d}", {"title": f"thing {i}"}) for i in range(n)]


def assert_batch_true(rig, ref: BatchRef = B) -> None:
    """Invariants 6 and 11 from the rows: finalized only with `total` rows, none live, counters = recount."""
    report = rig.store.batches.describe_batch(ref)
    if report.batch.status is BatchStatus.FINALIZED:
        c = report.counts()
        assert len(report.items) == report.batch.total
        assert c["pending"] == c["running"] == 0
        assert (report.batch.completed, report.batch.failed) == (c["completed"], c["failed"])


# -- defect 1: a finalized batch must never change again -----------------------------------------


def test_a_resent_finalize_does_not_add_the_rollup_to_the_finalized_batch(rig, faults):
    # GIVEN one item, completed; the roll-up that finalizes the batch is applied and its reply lost
    rig.producer.submit(B, "generation", items(1), "tester")
    faults.resent("UpdateItem", when=containing("listing_batches", "finalized"))
    # WHEN botocore re-sends it (refused: the batch is no longer open)
    rig.drain()
    # THEN the batch is finalized once: counters equal the rows, nothing added on top
    row = rig.store.batches.batch(B)
    assert faults.fired == [("resend", "UpdateItem")]
    assert (row.status, row.completed, row.failed) == (BatchStatus.FINALIZED, 1, 0)
    assert_batch_true(rig)


def test_a_rollup_racing_the_reclaimers_finalize_leaves_the_finalized_batch_alone(rig, faults, clock):
    # GIVEN a batch whose only item completed, but whose roll-up has not been written yet
    rig.producer.submit(B, "generation", items(1), "tester")
    clock.advance(minutes=17)

    def reclaimer_finalizes_first() -> None:
        rig.reclaimer.run_once()

    # the worker's recount-and-finalize is paused while the reclaimer's batch-stale sweep finalizes it
    faults.paused("UpdateItem", then=reclaimer_finalizes_first, when=containing("listing_batches", "finalized"))
    rig.drain()
    finalized = rig.store.batches.batch(B)
    # THEN the worker's write is refused and its fallback ADD does not land on the finalized row
    assert faults.fired == [("pause", "UpdateItem")]
    assert (finalized.status, finalized.completed, finalized.failed) == (BatchStatus.FINALIZED, 1, 0)
    assert_batch_true(rig)


def test_a_late_enqueue_checkpoint_does_not_touch_a_finalized_batch(rig, faults):
    # GIVEN a producer paused just before its enqueue checkpoint, while workers finish the batch
    snapshot: dict[str, Any] = {}

    def workers_finish() -> None:
        rig.drain()
        snapshot["row"] = rig.store.batches.batch(B)

    faults.paused("UpdateItem", then=workers_finish, when=containing("listing_batches", "enqueued"))
    rig.producer.submit(B, "generation", items(3), "tester")
    # THEN the batch row is exactly as it was finalized
    assert snapshot["row"].status is BatchStatus.FINALIZED
    assert rig.store.batches.batch(B) == snapshot["row"]


# -- defect 2: a batch is finalized only when its rows number `total` -------------------------------


def test_a_batch_whose_producer_died_before_its_items_is_not_finalized_and_a_repeat_completes_it(rig, faults, clock):
    # GIVEN a producer that opened the batch and died before writing its items
    class Died(BaseException):
        pass

    def die() -> None:
        raise Died()

    faults.paused("TransactWriteItems", then=die, when=containing("listing_items"))
    faults.paused("BatchWriteItem", then=die, when=containing("listing_items"))  # the write before the fix
    with pytest.raises(Died):
        rig.producer.submit(B, "generation", items(4), "tester")
    # WHEN the batch-stale sweep looks at it
    clock.advance(minutes=17)
    rig.reclaimer.run_once()
    # THEN it is still open (0 rows of 4 is not done)
    assert rig.store.batches.batch(B).status is BatchStatus.OPEN
    # AND the client's repeated submit completes the batch it opened
    result = rig.producer.submit(B, "generation", items(4), "tester")
    assert (result.created, result.rows_written, result.enqueued) == (False, 4, 4)
    rig.drain()
    row = rig.store.batches.batch(B)
    assert (row.status, row.completed) == (BatchStatus.FINALIZED, 4)
    assert_batch_true(rig)


def test_a_paused_producer_never_puts_a_finished_item_back_to_pending(rig, faults):
    # GIVEN producer call A paused before its item write, while the client's repeat B does everything
    def repeat_and_finish() -> None:
        rig.producer.submit(B, "generation", items(3), "tester")
        rig.drain()

    faults.paused("TransactWriteItems", then=repeat_and_finish, when=containing("listing_items"))
    faults.paused("BatchWriteItem", then=repeat_and_finish, when=containing("listing_items"))  # the write before the fix
    # WHEN A resumes and writes its items
    rig.producer.submit(B, "generation", items(3), "tester")
    # THEN every item is still completed and the batch finalized (A's puts were refused)
    assert [r.status for r in rig.store.batches.describe_batch(B).items] == [ItemStatus.COMPLETED] * 3
    assert rig.store.batches.batch(B).status is BatchStatus.FINALIZED
    assert_batch_true(rig)


# -- defect 5: transient errors fail one record, not the SQS batch or the sweep -----------------------


def test_a_read_timeout_on_one_outcome_fails_only_that_message(rig, faults):
    # GIVEN three items in one SQS batch; the first completion is applied and the reply of each try times out
    rig.producer.submit(B, "generation", items(3), "tester")
    faults.reply_lost("UpdateItem", when=containing("listing_items", "completed"), times=3, refused_too=True)
    # WHEN the worker processes the batch
    result = rig.deliver(n=10)
    # THEN one message is a batch item failure (redelivered), the other two are acknowledged
    failed = [o for o in result.outcomes.values() if not o.ok]
    assert len(result.outcomes) == 3 and len(failed) == 1
    assert "ReadTimeoutError" in failed[0].reason
    # AND the redelivery finds the row completed and acknowledges it
    rig.clock.advance(minutes=31)
    assert all(o.ok for o in rig.deliver(n=10).outcomes.values())
    assert [r.status for r in rig.store.batches.describe_batch(B).items] == [ItemStatus.COMPLETED] * 3
    # AND the counters (a hint) missed that item, so the batch-stale sweep finalizes it from the rows
    rig.reclaimer.run_once()
    assert rig.store.batches.batch(B).status is BatchStatus.FINALIZED
    assert_batch_true(rig)


def test_a_throttled_claim_fails_the_messages_but_not_the_invocation(rig, faults):
    # GIVEN throttled claims (each item's conditional update)
    rig.producer.submit(B, "generation", items(2), "tester")
    faults.refused_before(
        "UpdateItem", throttled("UpdateItem"), when=containing("listing_items", "running"), times=100
    )  # every try (the write primitive retries a throttle)
    # WHEN the worker processes the batch
    result = rig.deliver(n=10)
    # THEN every message is redelivered (nothing was claimed) and the call itself returns
    assert len(result.outcomes) == 2 and not any(o.ok for o in result.outcomes.values())
    assert all("ProvisionedThroughputExceeded" in o.reason for o in result.outcomes.values())
    assert [r.status for r in rig.store.batches.describe_batch(B).items] == [ItemStatus.PENDING] * 2


def test_a_throttled_claim_read_of_items_holding_no_unit_fails_the_messages(rig, faults):
    # GIVEN items born holding no unit (their tenant had none at the put), then granted some:
    # they are claimed in a transaction, after a consistent read, which is throttled
    ref = BatchRef("initech", "b1")
    rig.producer.submit(ref, "generation", items(2), "tester")
    rig.quota.grant("initech", 5)
    faults.refused_before("BatchGetItem", throttled("BatchGetItem"))
    # WHEN the worker processes the batch
    result = rig.deliver(n=10)
    # THEN every message is redelivered (nothing was claimed) and the call itself returns
    assert len(result.outcomes) == 2 and not any(o.ok for o in result.outcomes.values())
    assert all("ProvisionedThroughputExceeded" in o.reason for o in result.outcomes.values())
    assert rig.quota.balance("initech").reserved == 0


def test_the_reclaim_sweep_goes_on_after_a_store_error(rig, faults, clock):
    # GIVEN two stale running items (their worker died), and a stale pending item whose wake-up was lost
    rig.producer.submit(B, "generation", items(3), "tester")
    rig.queues["generation"].messages.clear()
    rig.store.items.claim([key(0), key(1)], "generation", 5)
    clock.advance(minutes=17)
    # the first requeue is applied, and the reply of each of its tries times out
    faults.reply_lost("UpdateItem", when=containing("listing_items", "reclaimed"), times=3, refused_too=True)
    # WHEN the reclaimer sweeps
    counts = rig.reclaimer.run_once()
    # THEN the error is counted and the sweep went on: the other running item and the pending one were re-driven
    assert counts.errors == 1
    assert counts.stale_running == 2 and counts.requeued == 2  # 1 running + 1 pending
    assert {r.status for r in rig.store.batches.describe_batch(B).items} == {ItemStatus.PENDING}
    rig.drain()
    clock.advance(minutes=17)
    rig.reclaimer.run_once()
    rig.drain()
    assert rig.store.batches.batch(B).status is BatchStatus.FINALIZED
    assert_batch_true(rig)


def test_a_throttled_read_of_one_batchs_items_does_not_abort_the_sweep(rig, faults, clock):
    # GIVEN two open batches with a stale pending item each, and a throttled read of the first's items
    rig.producer.submit(B, "generation", items(1), "tester")
    rig.producer.submit(BatchRef("acme", "b2"), "generation", items(1), "tester")
    rig.queues["generation"].messages.clear()
    clock.advance(minutes=17)
    faults.refused_before("Query", throttled("Query"), when=containing("listing_items", "acme#b1#"))
    # WHEN the reclaimer sweeps
    counts = rig.reclaimer.run_once()
    # THEN the pending item's wake-up is re-sent all the same
    assert counts.errors == 1 and counts.requeued == 1
    assert len(rig.queues["generation"].messages) == 1


# -- lost replies of the worker's own writes --------------------------------------------------------


def test_a_resent_claim_is_recognised_as_this_workers_claim(rig, faults):
    # GIVEN a claim applied, its reply lost and re-sent by botocore (refused by its own first application)
    rig.producer.submit(B, "generation", items(2), "tester")
    faults.resent("UpdateItem", when=containing("listing_items", "running"))
    # WHEN the worker processes the batch
    result = rig.deliver(n=10)
    # THEN the items are this worker's: run and completed now, not left running until reclaim
    assert faults.fired == [("resend", "UpdateItem")]
    assert result.counts.get(Tally.COMPLETED) == 2
    assert [(r.status, r.attempts) for r in rig.store.batches.describe_batch(B).items] == [(ItemStatus.COMPLETED, 1)] * 2
    assert rig.quota.balance("acme").reserved == 2  # reserved once (with the put), not again


def test_a_resent_claim_transaction_is_recognised_as_this_workers_claim(rig, faults):
    # GIVEN items holding no unit, claimed in a transaction that is applied, its reply lost and re-sent
    ref = BatchRef("initech", "b1")
    rig.producer.submit(ref, "generation", items(2), "tester")
    rig.quota.grant("initech", 5)
    faults.resent("TransactWriteItems", when=containing("running"))
    # WHEN the worker processes the batch
    result = rig.deliver(n=10)
    # THEN the items are this worker's, and their units were reserved once
    assert faults.fired == [("resend", "TransactWriteItems")]
    assert result.counts.get(Tally.COMPLETED) == 2
    assert [(r.status, r.attempts) for r in rig.store.batches.describe_batch(ref).items] == [(ItemStatus.COMPLETED, 1)] * 2
    assert rig.quota.balance("initech").reserved == 2


def test_a_claim_resent_after_a_throttle_repeats_its_parameters_under_its_token(rig, faults, clock):
    # GIVEN a claim transaction (items holding no unit) throttled while time moves on
    rig.producer.submit(BatchRef("initech", "b1"), "generation", items(2), "tester")
    rig.quota.grant("initech", 5)
    faults.paused("TransactWriteItems", then=lambda: clock.advance(seconds=2), when=containing("running"))
    faults.refused_before("TransactWriteItems", throttled("TransactWriteItems"), when=containing("running"))
    # WHEN the worker sends the same plan again
    result = rig.deliver(n=10)
    assert result.counts.get(Tally.COMPLETED) == 2
    # THEN both sends are identical, token included (DynamoDB refuses a token reused with other parameters)
    sent = [json.dumps(params, default=str, sort_keys=True) for op, params in faults.sent if op == "TransactWriteItems"]
    claims = [text for text in sent if "running" in text]
    assert len(claims) == 2 and claims[0] == claims[1]


def test_a_resent_release_still_sends_the_retry_wakeup(rig, faults):
    # GIVEN an item whose first attempt fails; the release to pending is applied, its reply lost and re-sent
    from providers.items_fake import Behaviour

    rig.producer.submit(B, "generation", items(1), "tester")
    rig.generator.script(f"{B.tenant}:{B.batch_id}:i00000", Behaviour.FAIL)
    faults.resent("UpdateItem", when=containing("listing_items", "pending"))
    # WHEN the worker processes it
    result = rig.deliver(n=10)
    # THEN the release is recognised as ours: a delayed retry wake-up is sent, not left to the reclaimer
    assert result.counts.get(Tally.RETRIED) == 1
    assert len(rig.queues["generation"].messages) == 1


def test_a_resent_terminal_failure_refunds_once_and_counts_as_failed(rig, faults):
    # GIVEN an item the provider rejects for good; the fail-and-refund transaction is re-sent
    from providers.items_fake import Behaviour

    rig.producer.submit(B, "generation", items(1), "tester")
    rig.generator.script(f"{B.tenant}:{B.batch_id}:i00000", Behaviour.REJECT)
    faults.resent("TransactWriteItems", when=containing("refunded"))
    result = rig.deliver(n=10)
    # THEN it is failed once, refunded once, and the worker knows it failed it
    assert result.counts.get(Tally.FAILED) == 1
    row = rig.store.items.item(key(0))
    assert (row.status, row.quota_refunds) == (ItemStatus.FAILED, 1)
    bal = rig.quota.balance("acme")
    assert (bal.reserved, bal.refunded) == (1, 1)
    assert_batch_true(rig)


# -- quota -----------------------------------------------------------------------------------------


def test_a_resent_grant_is_counted_once(rig, faults):
    faults.resent("UpdateItem", when=containing("listing_quota"))
    faults.resent("PutItem", when=containing("listing_quota"))  # the first grant's write before the fix
    rig.quota.grant("initech", 7)
    bal = rig.quota.balance("initech")
    assert (bal.limit, bal.available) == (7, 7)


def test_a_grant_re_sent_late_after_a_newer_grant_is_not_applied_again(rig, faults):
    # GIVEN a grant applied whose every try's reply was lost (the caller saw a store error)
    from botocore.exceptions import ClientError

    from jobfence.errors import StoreError

    faults.reply_lost("UpdateItem", when=containing("listing_quota"), times=3, refused_too=True)
    with pytest.raises(StoreError):
        rig.quota.grant("initech", 7)
    first = next(p for op, p in faults.sent if op == "UpdateItem" and "listing_quota" in json.dumps(p))
    # AND a newer grant applied after it
    rig.quota.grant("initech", 3)
    # WHEN a copy of the first request reaches DynamoDB late (the very same parameters)
    try:
        rig.quota.clients()[0].update_item(**first)
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
    # THEN it is refused by its own first application: the books count each grant once
    bal = rig.quota.balance("initech")
    assert (bal.limit, bal.available) == (10, 10)


def test_a_grant_asked_again_with_its_id_after_a_lost_reply_is_read_as_applied(rig, faults):
    from jobfence.errors import StoreError

    faults.reply_lost("UpdateItem", when=containing("listing_quota"), times=3, refused_too=True)
    with pytest.raises(StoreError) as lost:
        rig.quota.grant("initech", 7, grant_id="ticket-42")
    assert lost.value.unanswered  # it says the grant may have landed
    rig.quota.grant("initech", 3)
    # WHEN the operator asks again with the same id THEN it returns the books, the grant counted once
    assert rig.quota.grant("initech", 7, grant_id="ticket-42").limit == 10


def test_a_retry_record_re_sent_after_a_lost_reply_counts_one_retry(rig, faults):
    # GIVEN a finalized batch with a failed item
    from providers.items_fake import Behaviour

    rig.generator.script(f"acme:b1:{key(1).item_id}", Behaviour.REJECT)
    rig.submit("acme", "b1", 3)
    rig.drain()
    assert rig.store.batches.batch(B).failed == 1
    # WHEN the operator's retry is recorded on the batch row, and that write's reply is lost and re-sent
    faults.resent("UpdateItem", when=containing("retried_by"))
    assert rig.ops.retry_failed(B, "ops@example.com").retried == 1
    assert faults.count("resend") == 1
    # THEN the batch row counts one retry
    assert rig.store.batches.batch(B).retries == 1


def test_a_grant_whose_reply_is_lost_once_is_retried_and_read_as_applied_in_the_same_call(rig, faults):
    # GIVEN a grant applied whose reply is lost once
    faults.reply_lost("UpdateItem", when=containing("listing_quota"))
    # WHEN the store retries it (the same request) and the copy is refused by its own first application
    bal = rig.quota.grant("initech", 7, grant_id="ticket-7")
    # THEN the call reports the grant applied, counted once
    assert faults.count("after") == 1
    assert (bal.limit, rig.quota.balance("initech").available) == (7, 7)


def test_grant_ids_are_remembered_across_a_rotation_of_the_applied_set(rig):
    # GIVEN more grants than one set of applied ids holds (it rotates into the previous set)
    from jobfence.once import KEEP

    for n in range(KEEP + 8):
        rig.quota.grant("initech", 1, grant_id=f"g{n}")
    # WHEN an id from before the rotation and one from after are asked again
    rig.quota.grant("initech", 1, grant_id="g5")
    rig.quota.grant("initech", 1, grant_id=f"g{KEEP + 7}")
    # THEN neither is applied twice
    assert rig.quota.balance("initech").limit == KEEP + 8


def test_a_heartbeat_recount_re_sent_after_a_lost_reply_counts_one_recount(rig, clock, faults):
    # GIVEN a quiet batch with items still pending (its wake-ups lost), past batch-stale
    rig.submit("acme", "b1", 3)
    rig.queues["generation"].messages.clear()
    clock.advance(minutes=17)
    # WHEN the reclaimer's recount (a heartbeat: the batch is not done) is applied, its reply lost and re-sent
    faults.resent("UpdateItem", when=containing("recounts"))
    assert rig.reclaimer.run_once().batches_swept == 1
    assert faults.count("resend") == 1
    # THEN the batch row counts one recount
    assert rig.store.batches.batch(B).recounts == 1
