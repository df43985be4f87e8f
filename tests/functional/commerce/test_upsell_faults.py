"""A buyer's upsell under faults: it adds to the amount, so a re-sent copy must never add twice.

The upsell carries its own request id; a copy of it (botocore's re-send after a
lost reply, the buyer's client asking again after a timeout) is refused by its
own first application and read as applied from the refusal's old image.
"""

from __future__ import annotations

import pytest

from jobfence.errors import StoreError
from jobs.commerce.safety_net import capture_abandoned_deferred
from tests.aws_faults import Faults

from commerce_harness import HookedPayments

UPSELLS = lambda params: "amount_cents" in str(params.get("ExpressionAttributeNames", {}).values())  # noqa: E731


@pytest.fixture
def intent(stores, payments):
    payments.approve("O-1", 1_000)
    stores.deferred.create("i1", "O-1", 1_000)
    return "i1"


def amount(stores) -> int:
    return int(stores.deferred.get("i1").amount_cents)


def test_an_upsell_re_sent_after_its_lost_reply_is_added_once_and_captured_once(stores, payments, harness, clock, intent):
    # GIVEN an intent of 1000, and an upsell of 500 whose UpdateItem is applied, its reply lost and re-sent by botocore
    faults = Faults(*stores.deferred.clients())
    faults.resent("UpdateItem", when=UPSELLS)
    # WHEN the buyer accepts the upsell once
    accepted = stores.deferred.patch_upsell(intent, 500, "u1") and payments.patch_amount("O-1", 500)
    # THEN the re-sent copy is refused by the first and read as applied: 1500, not 2000
    assert faults.count("resend") == 1
    assert accepted
    assert amount(stores) == 1_500
    # WHEN the buyer leaves and the safety net runs 22 minutes later
    clock.advance(minutes=22)
    result = harness.run("capture_abandoned_deferred", lambda ctx: capture_abandoned_deferred(stores.deferred, payments, ctx, harness.logger))
    # THEN it captures the 1500 the buyer agreed to, once
    assert result.summary["captured"] == 1
    assert payments.orders["O-1"].amount_cents == 1_500 and payments.captures_of("O-1") == 1


def test_an_upsell_whose_reply_never_came_is_asked_again_with_its_id_and_added_once(stores, clock, intent):
    # GIVEN an upsell applied whose reply is lost for good (every try's, the refused copies' too)
    faults = Faults(*stores.deferred.clients())
    faults.reply_lost("UpdateItem", when=UPSELLS, times=3, refused_too=True)
    with pytest.raises(StoreError) as lost:
        stores.deferred.patch_upsell(intent, 500, "u1")
    assert lost.value.unanswered
    # WHEN the buyer's client asks again with the same upsell id, then accepts a second, different upsell
    assert stores.deferred.patch_upsell(intent, 500, "u1")
    assert stores.deferred.patch_upsell(intent, 200, "u2")
    # THEN each upsell was added exactly once
    assert amount(stores) == 1_700
    assert set(stores.deferred.get(intent).upsell_ids) == {"u1", "u2"}


def test_an_upsell_whose_reply_is_lost_once_is_retried_and_read_as_added_once(stores, intent):
    # GIVEN an upsell applied whose reply is lost once (a read timeout)
    faults = Faults(*stores.deferred.clients())
    faults.reply_lost("UpdateItem", when=UPSELLS)
    # WHEN the store retries the same request and the copy is refused (the upsell id is on the intent)
    assert stores.deferred.patch_upsell(intent, 500, "u1")
    # THEN the call says it was added, and it was added once
    assert faults.count("after") == 1
    assert amount(stores) == 1_500


def test_a_copy_refused_without_an_old_image_is_read_from_the_item(stores, intent):
    # GIVEN a store that returns no old image with a refusal (as dynalite), and a re-sent upsell
    faults = Faults(*stores.deferred.clients())
    faults.resent("UpdateItem", when=UPSELLS)
    faults.without_old_image("UpdateItem")
    # THEN the refusal is read from one consistent read of the intent: applied once
    assert stores.deferred.patch_upsell(intent, 500, "u1")
    assert faults.count("no_image") == 1
    assert amount(stores) == 1_500


def test_after_the_claim_a_late_copy_of_an_earlier_upsell_reads_as_applied_and_a_new_one_is_refused(
    stores, payments, harness, clock, intent
):
    # GIVEN an upsell added, and a safety net run 22 minutes later that has claimed the intent (the amount is frozen)
    assert stores.deferred.patch_upsell(intent, 500, "u1") and payments.patch_amount("O-1", 500)
    clock.advance(minutes=22)
    answers = []

    def buyer_comes_back(order):  # runs after the claim, just before the provider call
        answers.append(stores.deferred.patch_upsell(intent, 500, "u1"))  # a late copy of the first upsell
        answers.append(stores.deferred.patch_upsell(intent, 300, "u2"))  # a new one

    hooked = HookedPayments(payments, before=buyer_comes_back)
    harness.run("capture_abandoned_deferred", lambda ctx: capture_abandoned_deferred(stores.deferred, hooked, ctx, harness.logger))
    # THEN the copy reads as applied (it was, before the claim), the new one is refused, and the claimed amount is captured
    assert answers == [True, False]
    row = stores.deferred.get(intent)
    assert (row.status, int(row.amount_cents)) == ("captured", 1_500)
    assert payments.captures_of("O-1") == 1


def test_an_upsell_of_an_unknown_intent_is_refused_and_creates_nothing(stores):
    assert not stores.deferred.patch_upsell("nope", 500, "u1")
    assert stores.deferred.get("nope") is None
