"""The offline payment fake models PayPal's state machine and idempotency (no socket)."""

from __future__ import annotations

import pytest

from providers.errors import ProviderAmbiguous
from providers.payments_fake import FakePayments
from providers.payments import AlreadyCaptured, InstrumentDeclined, OrderNotCapturable


@pytest.fixture
def fake():
    fake = FakePayments()
    fake.approve("O1", 1000)
    return fake


def test_approved_to_captured_and_the_same_key_returns_the_first_result(fake):
    first = fake.capture("O1", "buyer:1")
    again = fake.capture("O1", "buyer:1")
    assert first == again and fake.orders["O1"].status == "COMPLETED" and fake.captures_of("O1") == 1


def test_another_key_on_a_captured_order_fails_as_already_captured(fake):
    fake.capture("O1", "buyer:1")
    with pytest.raises(AlreadyCaptured):
        fake.capture("O1", "safetynet:1")


def test_declines_and_unknown_orders_are_typed(fake):
    fake.decline("O1")
    with pytest.raises(InstrumentDeclined):
        fake.capture("O1", "k")
    assert fake.orders["O1"].status == "APPROVED"
    with pytest.raises(OrderNotCapturable):
        fake.capture("nope", "k")


def test_a_timeout_before_the_provider_saw_it_moves_nothing(fake):
    fake.time_out_next()
    with pytest.raises(ProviderAmbiguous):
        fake.capture("O1", "k")
    assert fake.orders["O1"].status == "APPROVED"
    assert fake.capture("O1", "k").amount_cents == 1000


def test_a_lost_answer_moved_money_and_the_retry_with_the_same_key_gets_it_back(fake):
    fake.lose_response_next()
    with pytest.raises(ProviderAmbiguous):
        fake.capture("O1", "k")
    assert fake.orders["O1"].status == "COMPLETED"
    assert fake.capture("O1", "k").capture_id == fake.orders["O1"].capture_id
    with pytest.raises(AlreadyCaptured):
        fake.capture("O1", "other")


def test_refunds_are_idempotent_and_bounded(fake):
    capture = fake.capture("O1", "k")
    assert fake.refund(capture.capture_id, 600, "EUR", "r1") == fake.refund(capture.capture_id, 600, "EUR", "r1")
    with pytest.raises(OrderNotCapturable):
        fake.refund(capture.capture_id, 600, "EUR", "r2")
    assert fake.refunded[capture.capture_id] == 600
