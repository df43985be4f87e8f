"""An offline payment provider that models PayPal's order state machine (the port: `providers.payments`).

    CREATED ──buyer approves──► APPROVED ──capture(key)──► COMPLETED ──refund(key)──► (captures refunded)
                                 └─ patch_amount (an accepted upsell; only while APPROVED)

- the same idempotency key returns the first successful result (no second capture);
- another key on a COMPLETED order raises `AlreadyCaptured`;
- `decline(order)` makes captures of that order raise `InstrumentDeclined`;
- `time_out_next(n)` (or `time_out_order`) makes the next n calls raise `ProviderAmbiguous` before
  anything happens; `lose_response_next(n)` makes the next n calls *succeed* on
  the provider and then raise `ProviderAmbiguous` (the answer was lost), which
  is what idempotency keys exist for.

Every call is counted in `calls`, so tests can prove who called the provider.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from providers.errors import ProviderAmbiguous
from providers.payments import (
    AlreadyCaptured,
    CaptureResult,
    CaptureStatus,
    InstrumentDeclined,
    OrderNotCapturable,
    RefundResult,
)


@dataclass
class FakeOrder:
    order_id: str
    amount_cents: int
    currency: str
    status: str = "APPROVED"
    capture_id: str | None = None
    captured_with: str | None = None
    declined: bool = False


class FakePayments:
    """In-memory provider state; thread-safe so racing threads can share it."""

    def __init__(self) -> None:
        self.orders: dict[str, FakeOrder] = {}
        self.refunded: dict[str, int] = {}  # capture id -> cents refunded
        self.calls: list[tuple[str, str, str]] = []  # (operation, target, idempotency key)
        self._results: dict[str, object] = {}
        self._timeouts = 0
        self._order_timeouts: dict[str, int] = {}
        self._lost = 0
        self._seq = 0
        self._lock = threading.Lock()

    # -- test controls ----------------------------------------------------------------------

    def approve(self, order_id: str, amount_cents: int, currency: str = "EUR") -> None:
        """An order the buyer has approved (what checkout leaves behind)."""
        with self._lock:
            self.orders[order_id] = FakeOrder(order_id, amount_cents, currency)

    def capture_elsewhere(self, order_id: str, idempotency_key: str) -> CaptureResult:
        """A capture by another party (the buyer's own path), not counted as ours."""
        return self._capture(order_id, idempotency_key)

    def patch_amount(self, order_id: str, add_cents: int) -> bool:
        """The buyer's accepted upsell patches the order (PayPal refuses a patch once captured)."""
        with self._lock:
            order = self.orders[order_id]
            if order.status != "APPROVED":
                return False
            order.amount_cents += add_cents
            return True

    def decline(self, order_id: str) -> None:
        with self._lock:
            self.orders[order_id].declined = True

    def time_out_next(self, n: int = 1) -> None:
        with self._lock:
            self._timeouts += n

    def time_out_order(self, order_id: str, n: int = 1) -> None:
        """The next n calls on this order time out (the provider never saw them)."""
        with self._lock:
            self._order_timeouts[order_id] = self._order_timeouts.get(order_id, 0) + n

    def lose_response_next(self, n: int = 1) -> None:
        with self._lock:
            self._lost += n

    def captures_of(self, order_id: str) -> int:
        """How many captures moved money on this order (0 or 1 if the model holds)."""
        order = self.orders.get(order_id)
        return int(bool(order and order.status == "COMPLETED"))

    # -- the port ---------------------------------------------------------------------------

    def capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        with self._lock:
            self.calls.append(("capture", order_id, idempotency_key))
        return self._capture(order_id, idempotency_key)

    def refund(self, capture_id: str, amount_cents: int, currency: str, idempotency_key: str) -> RefundResult:
        with self._lock:
            self.calls.append(("refund", capture_id, idempotency_key))
            self._maybe_time_out()
            if idempotency_key in self._results:
                return self._results[idempotency_key]  # type: ignore[return-value]  # the key's first result, replayed
            order = next((o for o in self.orders.values() if o.capture_id == capture_id), None)
            if order is None:
                raise OrderNotCapturable(f"capture {capture_id} not found")
            already = self.refunded.get(capture_id, 0)
            if already + amount_cents > order.amount_cents:
                raise OrderNotCapturable(f"capture {capture_id} cannot refund {amount_cents} more")
            self.refunded[capture_id] = already + amount_cents
            self._seq += 1
            result = RefundResult(capture_id, f"R-{self._seq}", CaptureStatus.COMPLETED, amount_cents, currency)
            self._results[idempotency_key] = result
            self._maybe_lose()
            return result

    # -- the state machine ------------------------------------------------------------------

    def _capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        with self._lock:
            self._maybe_time_out()
            if self._order_timeouts.get(order_id):
                self._order_timeouts[order_id] -= 1
                raise ProviderAmbiguous(f"payment provider timed out on {order_id}")
            if idempotency_key in self._results:
                return self._results[idempotency_key]  # type: ignore[return-value]  # the key's first result, replayed
            order = self.orders.get(order_id)
            if order is None:
                raise OrderNotCapturable(f"order {order_id} not found")
            if order.status == "COMPLETED":
                raise AlreadyCaptured(f"order {order_id} is already captured")
            if order.status != "APPROVED":
                raise OrderNotCapturable(f"order {order_id} is {order.status}, not APPROVED")
            if order.declined:
                raise InstrumentDeclined(f"order {order_id}: instrument declined")
            self._seq += 1
            order.status = "COMPLETED"
            order.capture_id = f"C-{self._seq}"
            order.captured_with = idempotency_key
            result = CaptureResult(
                order_id, order.capture_id, CaptureStatus.COMPLETED, order.amount_cents, order.currency
            )
            self._results[idempotency_key] = result
            self._maybe_lose()
            return result

    def _maybe_time_out(self) -> None:
        if self._timeouts:
            self._timeouts -= 1
            raise ProviderAmbiguous("payment provider timed out")

    def _maybe_lose(self) -> None:
        if self._lost:
            self._lost -= 1
            raise ProviderAmbiguous("payment provider response lost")
