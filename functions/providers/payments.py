"""The payment port: capture an approved order, refund a capture.

Every call carries an idempotency key. The provider answers a repeated key with
the first result, so a retried call after a lost response can never move money
twice; a *different* key on an order that is already captured fails with
`AlreadyCaptured` (seed 001: keys are namespaced by initiator, so a race between
the buyer's capture and the safety net fails cleanly on the provider's own state
machine instead of succeeding twice).

Errors are the providers' one vocabulary (`providers.errors`), so callers decide without parsing
text; this port refines `ProviderRejected` with the refusals a payment caller acts on:

    ProviderRejected
      ├─ AlreadyCaptured      the order was captured under another key (terminal, reconcile)
      ├─ InstrumentDeclined   the buyer's instrument was refused (terminal)
      └─ OrderNotCapturable   not found / not approved / already refunded (terminal)
    ProviderAuthFailed        our credentials were refused (configuration)
    ProviderAmbiguous         timeout, network error, 5xx after retries (retry later, same key)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from providers.errors import ProviderRejected


class AlreadyCaptured(ProviderRejected):
    """The order was already captured under a different idempotency key."""


class InstrumentDeclined(ProviderRejected):
    """The payment instrument was declined."""


class OrderNotCapturable(ProviderRejected):
    """The order or capture cannot take this operation (unknown, not approved, refunded)."""


class CaptureStatus(str, enum.Enum):
    """What the provider says about one capture or refund."""

    COMPLETED = "COMPLETED"  # money moved
    PENDING = "PENDING"  # the provider accepted it and settles later (counted as done: no retry needed)


@dataclass(frozen=True)
class CaptureResult:
    """The provider's answer to a capture."""

    order_id: str
    capture_id: str
    status: CaptureStatus
    amount_cents: int
    currency: str


@dataclass(frozen=True)
class RefundResult:
    """The provider's answer to a refund."""

    capture_id: str
    refund_id: str
    status: CaptureStatus
    amount_cents: int
    currency: str


class PaymentPort(Protocol):
    """Capture and refund with idempotency keys."""

    def capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        """Capture an approved order (all of its current amount)."""
        ...

    def refund(self, capture_id: str, amount_cents: int, currency: str, idempotency_key: str) -> RefundResult:
        """Refund (part of) a capture."""
        ...
