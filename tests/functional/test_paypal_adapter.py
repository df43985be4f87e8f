"""The real PayPal adapter against the loopback PayPal stub (ops/stubs/paypal.py)."""

from __future__ import annotations

import json

import pytest
import urllib3

from jobfence.clock import FrozenClock
from ops.stubs.paypal import PayPalStub
from providers.errors import ProviderAmbiguous, ProviderAuthFailed
from providers.payments import AlreadyCaptured, CaptureStatus, InstrumentDeclined, OrderNotCapturable
from providers.http import HttpClient
from providers.paypal import PayPalPayments, build_paypal

CREDS = {"client_id": "cid", "client_secret": "csecret"}


@pytest.fixture
def stub(clock):
    stub = PayPalStub(clock, client_id="cid", client_secret="csecret", token_ttl_s=600)
    stub.start()
    yield stub
    stub.stop()


@pytest.fixture
def sleeps():
    return []


@pytest.fixture
def adapter(stub, clock, sleeps):
    return PayPalPayments(HttpClient("paypal", stub.base_url, timeout_s=5.0), lambda: CREDS, clock, sleeps.append)


def test_capture_completes_an_approved_order_and_caches_the_token(stub, adapter):
    first, second = stub.create_order("12.34"), stub.create_order("1.00")
    result = adapter.capture(first, "safetynet:a")
    adapter.capture(second, "safetynet:b")
    assert (result.order_id, result.status, result.amount_cents, result.currency) == (first, CaptureStatus.COMPLETED, 1234, "EUR")
    assert stub.orders[first].status == "COMPLETED" and stub.orders[first].capture_id == result.capture_id
    assert stub.count("POST", "/v1/oauth2/token") == 1 and adapter.token_fetches == 1
    captures = [r for r in stub.requests if r[1].endswith("/capture")]
    assert [r[2] for r in captures] == ["safetynet:a", "safetynet:b"]  # PayPal-Request-Id = our key


def test_token_is_refreshed_before_it_expires(stub, adapter, clock):
    adapter.capture(stub.create_order("1.00"), "k1")
    clock.advance(seconds=600 - 59)  # inside the one-minute margin before expiry
    adapter.capture(stub.create_order("1.00"), "k2")
    assert stub.count("POST", "/v1/oauth2/token") == 2


def test_a_revoked_token_is_replaced_once_and_the_call_goes_through(stub, adapter):
    adapter.capture(stub.create_order("1.00"), "k1")
    stub.revoke_tokens()
    order = stub.create_order("2.00")
    assert adapter.capture(order, "k2").amount_cents == 200
    assert stub.count("POST", "/v1/oauth2/token") == 2


def test_a_lost_answer_is_retried_with_the_same_request_id_and_captures_once(stub, adapter, sleeps):
    # GIVEN PayPal captures, then the answer is lost (a 503 after the commit)
    order = stub.create_order("5.00")
    stub.fail_next(1, status=503, after_commit=True)
    # WHEN the adapter captures
    result = adapter.capture(order, "safetynet:x")
    # THEN it retried with the same request id and got the first result back
    ids = [r[2] for r in stub.requests if r[1].endswith("/capture")]
    assert ids == ["safetynet:x", "safetynet:x"]
    assert result.capture_id == stub.orders[order].capture_id and len(sleeps) == 1


def test_5xx_then_success(stub, adapter, sleeps):
    order = stub.create_order("3.00")
    stub.fail_next(2, status=500)
    assert adapter.capture(order, "k").status is CaptureStatus.COMPLETED
    assert stub.count("POST", f"/v2/checkout/orders/{order}/capture") == 3
    assert sleeps == [0.2, 0.4]


def test_a_dropped_connection_is_a_network_error_retried_with_the_same_id(stub, adapter):
    order = stub.create_order("3.00")
    stub.drop_next(1)
    assert adapter.capture(order, "k").status is CaptureStatus.COMPLETED
    assert [r[2] for r in stub.requests if r[1].endswith("/capture")] == ["k", "k"]


def test_persistent_5xx_becomes_a_transient_error_after_the_attempts(stub, adapter):
    order = stub.create_order("3.00")
    stub.fail_next(3, status=502)
    with pytest.raises(ProviderAmbiguous, match="3 attempts"):
        adapter.capture(order, "k")
    assert stub.orders[order].status == "APPROVED"


def test_another_key_on_a_captured_order_is_already_captured_and_not_retried(stub, adapter):
    order = stub.create_order("9.99")
    adapter.capture(order, "buyer:i1")
    with pytest.raises(AlreadyCaptured):
        adapter.capture(order, "safetynet:i1")
    assert stub.count("POST", f"/v2/checkout/orders/{order}/capture") == 2


def test_a_declined_instrument_is_a_typed_error_and_not_retried(stub, adapter):
    order = stub.create_order("9.99")
    stub.handle("POST", f"/_stub/orders/{order}/decline", {}, b"")
    with pytest.raises(InstrumentDeclined):
        adapter.capture(order, "k")
    assert stub.count("POST", f"/v2/checkout/orders/{order}/capture") == 1


def test_unknown_unapproved_and_malformed_orders(stub, adapter):
    with pytest.raises(OrderNotCapturable):
        adapter.capture("NOPE", "k1")
    with pytest.raises(OrderNotCapturable):
        adapter.capture(stub.create_order("1.00", approved=False), "k2")
    with pytest.raises(OrderNotCapturable):
        adapter.capture("../v1/oauth2/token", "k3")  # never reaches the wire


def test_refund_is_idempotent_and_bounded_by_the_capture(stub, adapter):
    order = stub.create_order("10.00")
    capture = adapter.capture(order, "buyer:o")
    first = adapter.refund(capture.capture_id, 400, "EUR", "cancel:r1")
    again = adapter.refund(capture.capture_id, 400, "EUR", "cancel:r1")
    assert first.refund_id == again.refund_id and stub.orders[order].refunded_cents == 400
    with pytest.raises(OrderNotCapturable):
        adapter.refund(capture.capture_id, 700, "EUR", "cancel:r2")


def test_refused_credentials_are_an_auth_error(stub, clock, sleeps):
    bad = PayPalPayments(
        HttpClient("paypal", stub.base_url), lambda: {"client_id": "cid", "client_secret": "wrong"}, clock, sleeps.append
    )
    with pytest.raises(ProviderAuthFailed):
        bad.capture(stub.create_order("1.00"), "k")


def test_the_composition_root_reads_credentials_from_secrets_manager(aws, stub, clock):
    # GIVEN the credentials in Secrets Manager (moto) under the fixed secret name
    aws.client("secretsmanager").create_secret(Name="jobfence/paypal_credentials", SecretString=json.dumps(CREDS))
    adapter = build_paypal(stub.base_url, "jobfence/paypal_credentials", aws, clock)
    # WHEN it captures over loopback
    order = stub.create_order("4.20")
    # THEN the token request used them
    assert adapter.capture(order, "k").amount_cents == 420


def test_the_stub_enforces_its_state_machine_over_http(stub):
    http = urllib3.PoolManager(retries=False)
    token = json.loads(
        http.request(
            "POST", stub.base_url + "/v1/oauth2/token", body=b"grant_type=client_credentials",
            headers=urllib3.make_headers(basic_auth="cid:csecret"),
        ).data
    )["access_token"]
    auth = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    created = http.request("POST", stub.base_url + "/v2/checkout/orders", headers=auth, body=json.dumps(
        {"intent": "CAPTURE", "purchase_units": [{"amount": {"currency_code": "EUR", "value": "7.00"}}]}
    ).encode())
    order = json.loads(created.data)["id"]
    assert created.status == 201 and json.loads(created.data)["status"] == "CREATED"
    early = http.request("POST", f"{stub.base_url}/v2/checkout/orders/{order}/capture", headers={**auth, "PayPal-Request-Id": "a"})
    assert early.status == 422 and json.loads(early.data)["details"][0]["issue"] == "ORDER_NOT_APPROVED"
    http.request("POST", f"{stub.base_url}/_stub/orders/{order}/approve")
    ok = http.request("POST", f"{stub.base_url}/v2/checkout/orders/{order}/capture", headers={**auth, "PayPal-Request-Id": "b"})
    assert ok.status == 201
    no_token = http.request("POST", f"{stub.base_url}/v2/checkout/orders/{order}/capture")
    assert no_token.status == 401


def test_stop_closes_the_port():
    stub = PayPalStub(FrozenClock())
    url = stub.start()
    stub.stop()
    with pytest.raises(urllib3.exceptions.HTTPError):
        urllib3.PoolManager(retries=False).request("GET", url + "/v2/checkout/orders/x", timeout=1.0)
