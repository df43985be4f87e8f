"""The safety net under faults (issue: never capture a live intent; money at most once; counts agree).

Interleavings are cooperative (a hook runs the buyer's action at an exact point of
the run); AWS faults are scripted through botocore's event hooks; the fake
provider models PayPal's idempotency keys and order state machine.
"""

from __future__ import annotations

import pytest

from jobfence.testing import another_party

from jobs.commerce.checkout import capture_for_buyer
from jobs.commerce.safety_net import capture_abandoned_deferred
from tests.aws_faults import Faults, connection_closed, from_call, throttled

from commerce_harness import Crash, HookedPayments

COUNTS = ("captured", "reconciled", "failed", "unknown", "skipped", "scanned")


class HookedIntents:
    """The real store, with a hook that runs right after the stale query returned (a pause, a buyer).

    The hook is another party than the job: its writes are checked by neither the job's grant nor its fence.
    """

    def __init__(self, store, after_query):
        self._store = store
        self._after_query = after_query

    def stale_deferred(self, *args, **kwargs):
        page = self._store.stale_deferred(*args, **kwargs)
        with another_party():
            self._after_query()
        return page

    def __getattr__(self, name):
        return getattr(self._store, name)


def run(harness, intents, payments):
    return harness.run("capture_abandoned_deferred", lambda ctx: capture_abandoned_deferred(intents, payments, ctx, harness.logger))


def counts(result):
    return {k: result.summary.get(k, 0) for k in COUNTS}


def one_stale_intent(stores, payments, clock, amount=1_000):
    payments.approve("O-1", amount)
    stores.deferred.create("i1", "O-1", amount)
    clock.advance(minutes=22)


def upsell(stores, payments, add, upsell_id="u1"):
    """The buyer accepts an upsell: PayPal's order is patched, then the intent (refreshing updated_at)."""
    patched = payments.patch_amount("O-1", add)
    return patched and stores.deferred.patch_upsell("i1", add, upsell_id)


def test_a_buyer_upsell_between_the_query_and_the_capture_wins_and_nothing_is_captured(stores, payments, harness, clock):
    # GIVEN an intent untouched for 22 minutes (past the cutoff and its time budget)
    one_stale_intent(stores, payments, clock)
    # WHEN the buyer's upsell is accepted right after the run read it as stale (no fault: just timing)
    intents = HookedIntents(stores.deferred, lambda: upsell(stores, payments, 500))
    result = run(harness, intents, payments)
    # THEN the run does not capture an intent touched within the cutoff: the buyer's change wins
    assert payments.calls == []
    assert payments.orders["O-1"].status == "APPROVED"
    row = stores.deferred.get("i1")
    assert (row.status, int(row.amount_cents)) == ("deferred", 1_500)
    assert counts(result) == {"captured": 0, "reconciled": 0, "failed": 0, "unknown": 0, "skipped": 1, "scanned": 1}


def test_an_upsell_after_the_claim_is_refused_and_the_claimed_amount_is_captured(stores, payments, harness, clock):
    # GIVEN an intent the run has already claimed, and a buyer who comes back just before the capture
    one_stale_intent(stores, payments, clock)
    accepted = []
    hooked = HookedPayments(payments, before=lambda order: accepted.append(stores.deferred.patch_upsell("i1", 500, "late")))
    # WHEN the run captures
    result = run(harness, stores.deferred, hooked)
    # THEN the late upsell was refused (the amount was frozen by the claim) and the claimed amount was captured
    assert accepted == [False]
    row = stores.deferred.get("i1")
    assert (row.status, row.captured_by, int(row.amount_cents)) == ("captured", "safetynet", 1_000)
    assert payments.orders["O-1"].amount_cents == 1_000 and payments.captures_of("O-1") == 1
    assert counts(result)["captured"] == 1


def test_a_buyer_that_died_between_its_intent_write_and_the_paypal_patch_is_captured_for_paypals_amount(
    stores, payments, harness, clock
):
    # GIVEN a buyer whose upsell reached the intent (1,000 -> 1,500) and whose client died before
    # patching PayPal's order (still 1,000), and who never came back
    payments.approve("O-1", 1_000)
    stores.deferred.create("i1", "O-1", 1_000)
    assert stores.deferred.patch_upsell("i1", 500, "u1")
    # WHEN the safety net runs, once the intent is untouched past the cutoff
    clock.advance(minutes=22)
    result = run(harness, stores.deferred, payments)
    # THEN money moves once, for what the buyer approved at PayPal, under the safety net's key
    assert payments.captures_of("O-1") == 1 and payments.orders["O-1"].amount_cents == 1_000
    assert counts(result)["captured"] == 1
    # AND the intent records what was captured beside what it was asked for: the upsell was not charged
    row = stores.deferred.get("i1")
    assert (row.status, row.captured_by) == ("captured", "safetynet")
    assert (int(row.amount_cents), int(row.captured_cents)) == (1_500, 1_000)
    # AND a later tick moves nothing more
    clock.advance(minutes=5)
    run(harness, stores.deferred, payments)
    assert payments.captures_of("O-1") == 1


def test_a_lost_paypal_reply_is_counted_unknown_and_the_next_tick_captures_nothing_twice(stores, payments, harness, clock):
    # GIVEN PayPal will capture and then lose its answer
    one_stale_intent(stores, payments, clock)
    payments.lose_response_next(1)
    # WHEN the safety net runs
    first = run(harness, stores.deferred, payments)
    # THEN the run does not claim a failure it cannot know: unknown, and the intent stays claimed
    assert payments.captures_of("O-1") == 1
    assert counts(first) == {"captured": 0, "reconciled": 0, "failed": 0, "unknown": 1, "skipped": 0, "scanned": 1}
    assert stores.deferred.get("i1").status == "capturing"
    # WHEN the next tick resumes it with the same key
    clock.advance(minutes=5)
    second = run(harness, stores.deferred, payments)
    # THEN PayPal answers with the first capture: recorded once, counted captured once in total
    assert counts(second)["captured"] == 1
    assert [key for _, _, key in payments.calls] == ["safetynet:i1", "safetynet:i1"]
    assert payments.captures_of("O-1") == 1
    row = stores.deferred.get("i1")
    assert (row.status, row.captured_by, row.capture_ref) == ("captured", "safetynet", payments.orders["O-1"].capture_id)


def test_a_crash_after_paypal_captured_is_settled_by_key_on_a_later_tick(stores, payments, harness, clock):
    # GIVEN a run that dies right after PayPal captured, before recording it
    one_stale_intent(stores, payments, clock)

    def die(order):
        raise Crash()

    with pytest.raises(Crash):
        run(harness, stores.deferred, HookedPayments(payments, after=die))
    assert stores.deferred.get("i1").status == "capturing"
    # WHEN a later tick runs (after the dead holder's lease expired)
    clock.advance(minutes=40)
    result = run(harness, stores.deferred, payments)
    # THEN it settles the intent with the same key: captured once, never as the buyer's
    assert counts(result)["captured"] == 1
    assert payments.captures_of("O-1") == 1 and {key for _, _, key in payments.calls} == {"safetynet:i1"}
    assert stores.deferred.get("i1").status == "captured"


def test_the_buyer_capturing_while_the_net_holds_the_claim_is_reconciled(stores, payments, harness, clock):
    # GIVEN the buyer's final capture reaches PayPal after the net's claim, before the net's call
    one_stale_intent(stores, payments, clock)
    outcomes = []
    hooked = HookedPayments(payments, before=lambda order: outcomes.append(capture_for_buyer(stores.deferred, payments, "i1")))
    result = run(harness, stores.deferred, hooked)
    # THEN money moved once, under the buyer's key, and the intent is the buyer's
    assert outcomes == ["captured"]
    assert payments.orders["O-1"].captured_with == "buyer:i1" and payments.captures_of("O-1") == 1
    row = stores.deferred.get("i1")
    assert (row.status, row.captured_by) == ("captured", "buyer")
    assert counts(result)["captured"] == 0 and counts(result)["reconciled"] + counts(result)["skipped"] == 1


def test_a_claim_whose_reply_was_lost_is_recognised_from_the_old_image(stores, payments, harness, clock, dynamodb):
    # GIVEN the claim (the first fenced write) is applied but its reply is lost
    one_stale_intent(stores, payments, clock)
    faults = Faults(dynamodb).reply_lost("TransactWriteItems", error=connection_closed)
    result = run(harness, stores.deferred, payments)
    faults.detach()
    # THEN the retried claim is refused by its own first try, recognised as ours, and the capture goes on once
    assert faults.fired == [("after", "TransactWriteItems")]
    assert counts(result)["captured"] == 1
    assert payments.captures_of("O-1") == 1 and len(payments.calls) == 1


def test_a_settle_write_throttled_after_paypal_captured_is_unknown_then_settled_once(stores, payments, harness, clock, dynamodb):
    # GIVEN the settle write after a successful capture is throttled on every try
    one_stale_intent(stores, payments, clock)
    faults = Faults(dynamodb).refused_before("TransactWriteItems", throttled, when=from_call(2), times=3)
    first = run(harness, stores.deferred, payments)
    faults.detach()
    # THEN the run does not count a capture it could not record, and does not fail the run for it
    assert len(faults.fired) == 3
    assert counts(first)["captured"] == 0 and counts(first)["unknown"] == 1
    # WHEN the next tick comes THEN it is recorded once; the provider saw one capture
    clock.advance(minutes=5)
    second = run(harness, stores.deferred, payments)
    assert counts(second)["captured"] == 1
    assert payments.captures_of("O-1") == 1 and {key for _, _, key in payments.calls} == {"safetynet:i1"}


def test_a_settle_write_whose_reply_was_lost_is_counted_once(stores, payments, harness, clock, dynamodb):
    one_stale_intent(stores, payments, clock)
    faults = Faults(dynamodb).reply_lost("TransactWriteItems", when=from_call(2), error=connection_closed)
    first = run(harness, stores.deferred, payments)
    faults.detach()
    assert counts(first)["captured"] == 1 and counts(first)["unknown"] == 0
    clock.advance(minutes=5)
    assert counts(run(harness, stores.deferred, payments))["scanned"] == 0
    assert len(payments.calls) == 1


def test_an_intent_whose_capture_may_have_happened_is_never_given_up_as_failed(stores, payments, harness, clock):
    # GIVEN PayPal captures on the first call but the net never hears back for five ticks
    one_stale_intent(stores, payments, clock)
    payments.lose_response_next(1)
    payments.time_out_order("O-1", 4)
    for _ in range(5):
        result = run(harness, stores.deferred, payments)
        assert counts(result)["unknown"] == 1
        clock.advance(minutes=5)
    # THEN it is still being settled (not capture_failed though the money moved), and the 6th tick records it
    row = stores.deferred.get("i1")
    assert (row.status, int(row.capture_attempts)) == ("capturing", 5)
    assert counts(run(harness, stores.deferred, payments))["captured"] == 1
    assert stores.deferred.get("i1").captured_by == "safetynet" and payments.captures_of("O-1") == 1


def test_on_the_wire_a_capture_whose_every_reply_was_lost_is_unknown_then_settled_by_its_request_id(
    stores, harness, clock
):
    # GIVEN the real PayPal adapter against the loopback PayPal stub (one attempt a call: with more,
    # the adapter's own retry with the same PayPal-Request-Id would get the first result back), and
    # an order the stub captures and then answers with a 503
    from providers.http import HttpClient

    from ops.stubs.paypal import PayPalStub
    from providers.paypal import PayPalPayments

    with PayPalStub(clock, client_id="cid", client_secret="cs") as stub:
        paypal = PayPalPayments(HttpClient("paypal", stub.base_url), lambda: {"client_id": "cid", "client_secret": "cs"},
                                clock, lambda _s: None, attempts=1)
        order = stub.create_order("10.00")
        stores.deferred.create("i1", order, 1_000)
        clock.advance(minutes=22)
        stub.fail_next(1, 503, after_commit=True)
        first = run(harness, stores.deferred, paypal)
        # THEN the run counts it unknown, not failed: PayPal did capture
        assert counts(first)["unknown"] == 1 and counts(first)["failed"] == 0
        assert stub.orders[order].status == "COMPLETED"
        # WHEN the next tick asks again with the same request id THEN it is recorded, captured once
        clock.advance(minutes=5)
        assert counts(run(harness, stores.deferred, paypal))["captured"] == 1
        assert stores.deferred.get("i1").capture_ref == stub.orders[order].capture_id
        assert stub.count("POST", f"/v2/checkout/orders/{order}/capture") == 2


class Skewed:
    """An actor's clock: the true clock plus a fixed offset."""

    def __init__(self, true_clock, offset_ms):
        self._true, self._offset = true_clock, offset_ms

    def now_ms(self):
        return self._true.now_ms() + self._offset


def test_a_delayed_buyer_write_from_a_clock_behind_is_not_captured_within_20_true_minutes(
    aws, stores, payments, dynamodb, tables, clock
):
    # GIVEN a buyer whose clock runs 30 s behind, a safety net whose clock runs 30 s ahead (60 s apart:
    # the skew budget), and the buyer's upsell applied 9 s after it stamped `updated_at` (inside the
    # request-age budget: its request was delayed)
    from commerce_harness import Harness
    from jobs.commerce.deferred_payments import DeferredPaymentStore
    from tests.aws_faults import Faults

    buyer = DeferredPaymentStore(tables["payment_intents"], Skewed(clock, -30_000))
    net = Harness(aws, dynamodb, tables, Skewed(clock, 30_000))
    payments.approve("O-1", 1_000)
    buyer.create("i1", "O-1", 1_000)
    clock.advance(minutes=5)
    Faults(*buyer.clients()).paused("UpdateItem", lambda: clock.advance(seconds=9))
    assert buyer.patch_upsell("i1", 500, "u1") and payments.patch_amount("O-1", 500)
    applied = clock.now_ms()
    # WHEN the safety net runs 19 minutes after that write was applied (true time), when its stamp
    # already looks 20 minutes and 30 s old to the net's clock
    clock.set(applied + 19 * 60_000)
    first = run(net, stores.deferred, payments)
    # THEN nothing is captured: the cutoff waits the time budget longer (before: captured 19 minutes
    # after the buyer's write)
    assert payments.calls == [] and counts(first)["captured"] == 0
    # WHEN the next tick comes, more than 20 true minutes after the write THEN it is captured, once
    clock.advance(minutes=5)
    second = run(net, stores.deferred, payments)
    assert counts(second)["captured"] == 1 and payments.orders["O-1"].amount_cents == 1_500
    assert payments.captures_of("O-1") == 1
