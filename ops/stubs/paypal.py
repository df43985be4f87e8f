"""A loopback stub of the PayPal REST endpoints the adapter uses, enforcing PayPal's state machine.

    stub = PayPalStub(clock, client_id="id", client_secret="secret")
    base_url = stub.start()        # http://127.0.0.1:<port>; point PROVIDER_PAYPAL_URL at it
    ...
    stub.stop()

Endpoints (shapes follow PayPal's Orders v2 / Payments v2 documentation):

    POST /v1/oauth2/token                          client credentials (HTTP Basic) -> bearer token with expires_in
    POST /v2/checkout/orders                       create an order (CREATED)
    GET  /v2/checkout/orders/{id}                  read an order
    POST /v2/checkout/orders/{id}/capture          APPROVED -> COMPLETED; PayPal-Request-Id makes it idempotent
    POST /v2/payments/captures/{id}/refund         refund (part of) a capture; PayPal-Request-Id idempotent
    POST /_stub/orders/{id}/approve                stub only: the buyer approves (CREATED -> APPROVED)
    POST /_stub/orders/{id}/decline                stub only: the buyer's instrument will be declined

State machine: a capture of a COMPLETED order under another request id answers 422
ORDER_ALREADY_CAPTURED; a replayed request id answers the first successful response
again; a declined instrument answers 422 INSTRUMENT_DECLINED; a not-approved order 422
ORDER_NOT_APPROVED; an unknown id 404 RESOURCE_NOT_FOUND; an expired or unknown bearer
token 401 invalid_token. Fault injection for tests and demos: `fail_next(n, status)`
answers the next n money calls with a 5xx (optionally after committing, i.e. a lost
response), `drop_next(n)` closes the connection without answering (a network error).
Tokens expire on the injected clock, so simulated time expires them too.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs

from jobs.commerce.catalog import PAYPAL_SECRET
from ops.stubs.server import LoopbackStub, QuietHandler

SECRETS = (PAYPAL_SECRET,)  # the secret whose value is the stub's client credentials (the commerce catalog's name)

_CAPTURE = re.compile(r"^/v2/checkout/orders/([A-Za-z0-9-]+)/capture$")
_ORDER = re.compile(r"^/v2/checkout/orders/([A-Za-z0-9-]+)$")
_REFUND = re.compile(r"^/v2/payments/captures/([A-Za-z0-9-]+)/refund$")
_STUB = re.compile(r"^/_stub/orders/([A-Za-z0-9-]+)/(approve|decline)$")


@dataclass
class StubOrder:
    order_id: str
    amount: str
    currency: str
    status: str = "CREATED"
    declined: bool = False
    capture_id: str | None = None
    refunded_cents: int = 0


@dataclass
class _Faults:
    fail: list[tuple[int, bool]] = field(default_factory=list)  # (status, after_commit) per coming money call
    drop: int = 0


class PayPalStub(LoopbackStub):
    """In-process PayPal API on loopback; thread-safe state, inspected directly by tests."""

    name = "paypal"

    def __init__(
        self, clock: Any, client_id: str = "stub-client", client_secret: str = "stub-secret", token_ttl_s: int = 32_400
    ):
        self._clock = clock
        self.client_id = client_id
        self.client_secret = client_secret
        self.token_ttl_s = token_ttl_s
        self.orders: dict[str, StubOrder] = {}
        self.tokens: dict[str, int] = {}  # token -> expires at (epoch ms)
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, PayPal-Request-Id)
        self._replies: dict[str, tuple[int, dict[str, Any]]] = {}  # request id -> first successful reply
        self._faults = _Faults()
        self._seq = 0
        self._lock = threading.RLock()

    def handler_class(self) -> type[QuietHandler]:
        stub = self

        class Handler(_Handler):
            pass

        Handler.stub = stub
        return Handler

    # -- test and demo controls -------------------------------------------------------------

    def create_order(self, amount: str, currency: str = "EUR", approved: bool = True) -> str:
        """An order as checkout leaves it (approved by the buyer unless told otherwise)."""
        with self._lock:
            order_id = self._next("O")
            self.orders[order_id] = StubOrder(order_id, amount, currency, "APPROVED" if approved else "CREATED")
            return order_id

    def fail_next(self, count: int = 1, status: int = 503, after_commit: bool = False) -> None:
        """Answer the next `count` capture/refund calls with `status`; after_commit = the work is done first."""
        with self._lock:
            self._faults.fail.extend([(status, after_commit)] * count)

    def drop_next(self, count: int = 1) -> None:
        """Close the connection of the next `count` capture/refund calls without an answer."""
        with self._lock:
            self._faults.drop += count

    def revoke_tokens(self) -> None:
        """Invalidate every issued token (PayPal may do so at any time)."""
        with self._lock:
            self.tokens.clear()

    def count(self, method: str, path_prefix: str) -> int:
        """How many requests matched (for asserting retries and token fetches)."""
        with self._lock:
            return sum(1 for m, p, _ in self.requests if m == method and p.startswith(path_prefix))

    # -- request handling (called by the handler threads) -----------------------------------

    def _next(self, prefix: str) -> str:
        self._seq += 1
        return f"{prefix}{self._seq:06d}{secrets.token_hex(3).upper()}"

    def _token(self, authorization: str | None, body: bytes) -> tuple[int, dict[str, Any]]:
        expected = base64.b64encode(f"{self.client_id}:{self.client_secret}".encode()).decode()
        if authorization != f"Basic {expected}":
            return 401, {"error": "invalid_client", "error_description": "Client Authentication failed"}
        if parse_qs(body.decode()).get("grant_type") != ["client_credentials"]:
            return 400, {"error": "unsupported_grant_type"}
        token = secrets.token_urlsafe(24)
        self.tokens[token] = self._clock.now_ms() + self.token_ttl_s * 1000
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": self.token_ttl_s, "scope": "stub"}

    def _authorized(self, authorization: str | None) -> bool:
        if not authorization or not authorization.startswith("Bearer "):
            return False
        expires = self.tokens.get(authorization[len("Bearer ") :])
        return expires is not None and expires > self._clock.now_ms()

    def handle(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]] | None:
        """One request -> (status, JSON body), or None to drop the connection."""
        with self._lock:
            request_id = headers.get("paypal-request-id")
            self.requests.append((method, path, request_id))
            if method == "POST" and path == "/v1/oauth2/token":
                return self._token(headers.get("authorization"), body)
            if (m := _STUB.match(path)) and method == "POST":
                order = self.orders.get(m.group(1))
                if order is None:
                    return _not_found()
                if m.group(2) == "approve" and order.status == "CREATED":
                    order.status = "APPROVED"
                if m.group(2) == "decline":
                    order.declined = True
                return 200, _order_body(order)
            if not self._authorized(headers.get("authorization")):
                return 401, {"error": "invalid_token", "error_description": "Token signature verification failed"}
            if method == "POST" and path == "/v2/checkout/orders":
                return self._create(body)
            if method == "GET" and (m := _ORDER.match(path)):
                order = self.orders.get(m.group(1))
                return (200, _order_body(order)) if order else _not_found()
            money: Callable[[], tuple[int, dict[str, Any]]] | None = None
            if method == "POST" and (m := _CAPTURE.match(path)):
                order_id = m.group(1)
                money = lambda: self._capture(order_id)  # noqa: E731
            elif method == "POST" and (m := _REFUND.match(path)):
                capture_id = m.group(1)
                money = lambda: self._refund(capture_id, body)  # noqa: E731
            if money is None:
                return _not_found()
            if self._faults.drop:
                self._faults.drop -= 1
                return None
            if request_id and request_id in self._replies:
                status, reply = self._replies[request_id]
                return 200, reply  # PayPal answers a replayed request id with the first result
            fault = self._faults.fail.pop(0) if self._faults.fail else None
            if fault and not fault[1]:
                return fault[0], {"name": "INTERNAL_SERVER_ERROR", "message": "stub fault", "debug_id": "stub"}
            status, reply = money()
            if request_id and status < 300:
                self._replies[request_id] = (status, reply)
            if fault:
                return fault[0], {
                    "name": "INTERNAL_SERVER_ERROR",
                    "message": "stub fault after commit",
                    "debug_id": "stub",
                }
            return status, reply

    def _create(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            unit = json.loads(body or b"{}")["purchase_units"][0]["amount"]
            amount, currency = str(Decimal(unit["value"]).quantize(Decimal("0.01"))), unit["currency_code"]
        except (ValueError, KeyError, IndexError, TypeError):
            return 400, _error("INVALID_REQUEST", "MISSING_REQUIRED_PARAMETER")
        order = StubOrder(self._next("O"), amount, currency)
        self.orders[order.order_id] = order
        return 201, _order_body(order)

    def _capture(self, order_id: str) -> tuple[int, dict[str, Any]]:
        order = self.orders.get(order_id)
        if order is None:
            return _not_found()
        if order.status == "COMPLETED":
            return 422, _error("UNPROCESSABLE_ENTITY", "ORDER_ALREADY_CAPTURED")
        if order.status != "APPROVED":
            return 422, _error("UNPROCESSABLE_ENTITY", "ORDER_NOT_APPROVED")
        if order.declined:
            return 422, _error("UNPROCESSABLE_ENTITY", "INSTRUMENT_DECLINED")
        order.status = "COMPLETED"
        order.capture_id = self._next("C")
        return 201, _order_body(order)

    def _refund(self, capture_id: str, body: bytes) -> tuple[int, dict[str, Any]]:
        order = next((o for o in self.orders.values() if o.capture_id == capture_id), None)
        if order is None:
            return _not_found()
        total = _cents(order.amount)
        try:
            amount = json.loads(body or b"{}").get("amount")
            cents = _cents(amount["value"]) if amount else total - order.refunded_cents
        except (ValueError, KeyError, TypeError, AttributeError):
            return 400, _error("INVALID_REQUEST", "INVALID_PARAMETER_VALUE")
        if order.refunded_cents >= total:
            return 422, _error("UNPROCESSABLE_ENTITY", "CAPTURE_FULLY_REFUNDED")
        if cents <= 0 or order.refunded_cents + cents > total:
            return 422, _error("UNPROCESSABLE_ENTITY", "REFUND_AMOUNT_EXCEEDED")
        order.refunded_cents += cents
        return 201, {
            "id": self._next("R"),
            "status": "COMPLETED",
            "amount": {"currency_code": order.currency, "value": f"{Decimal(cents) / 100:.2f}"},
        }


class _Handler(QuietHandler):
    stub: PayPalStub
    protocol_version = "HTTP/1.1"

    def _serve(self, method: str) -> None:
        body = self.read_body()
        headers = {k.lower(): v for k, v in self.headers.items()}
        path = self.path.split("?", 1)[0]
        reply = self.stub.handle(method, path, headers, body)
        if reply is None:
            self.close_connection = True
            self.connection.close()
            return
        status, payload = reply
        self.reply_json(status, payload)

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_GET(self) -> None:  # noqa: N802
        self._serve("GET")


def _cents(value: str) -> int:
    return int((Decimal(value) * 100).to_integral_value())


def _error(name: str, issue: str) -> dict[str, Any]:
    return {
        "name": name,
        "details": [{"issue": issue, "description": issue.replace("_", " ").lower()}],
        "debug_id": "stub",
    }


def _not_found() -> tuple[int, dict[str, Any]]:
    return 404, _error("RESOURCE_NOT_FOUND", "INVALID_RESOURCE_ID")


def _order_body(order: StubOrder) -> dict[str, Any]:
    body: dict[str, Any] = {"id": order.order_id, "status": order.status, "intent": "CAPTURE"}
    unit: dict[str, Any] = {"amount": {"currency_code": order.currency, "value": order.amount}}
    if order.capture_id:
        unit["payments"] = {
            "captures": [
                {
                    "id": order.capture_id,
                    "status": "COMPLETED",
                    "amount": {"currency_code": order.currency, "value": order.amount},
                }
            ]
        }
    body["purchase_units"] = [unit]
    return body
