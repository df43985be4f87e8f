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

A job that calls PayPal only when a row needs it takes `paypal_on_first_call`: its grants are checked at cold
start, the adapter is built by the first capture or refund (`PaymentsOnFirstCall`).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from providers.errors import ProviderRejected

if TYPE_CHECKING:  # `paypal_on_first_call` imports the adapter on the first call: a tick without one never loads it
    from jobfence.clock import Clock
    from jobfence.config import Settings


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


class PaymentsOnFirstCall:
    """A payment port whose adapter `build` makes on the first capture or refund, and every later call reuses.

    Most ticks of a PayPal job find no row that needs PayPal, and a tick that calls nothing needs neither the
    adapter's modules nor its HTTP client and Secrets Manager client (docs/benchmarks.md, "Cold start"). A
    failed build raises its own error from the call that needed it (what the build would have raised at cold
    start, not wrapped: the job handles it as any error of that call), and the next call builds again.
    """

    def __init__(self, build: Callable[[], PaymentPort]) -> None:
        self._built = functools.cache(build)  # kept once built; a build that raised is not kept

    def capture(self, order_id: str, idempotency_key: str) -> CaptureResult:
        return self._built().capture(order_id, idempotency_key)

    def refund(self, capture_id: str, amount_cents: int, currency: str, idempotency_key: str) -> RefundResult:
        return self._built().refund(capture_id, amount_cents, currency, idempotency_key)


def paypal_on_first_call(
    settings: Settings, session: Any, clock: Clock, *, provider: str, secret: str
) -> PaymentsOnFirstCall:
    """PayPal's adapter (`providers.paypal.paypal_from_settings`, same names) built on the first call.

    The grants, the provider's URL (`PROVIDER_<PROVIDER>_URL`) and the credentials' secret (`SECRET_<SECRET>`),
    are checked now: a function without them fails at its cold start with a `SettingsError`. The credentials
    are read on use by the adapter, as before (a rotated secret reaches a warm function the same way)."""
    settings.provider_url(provider)
    settings.secret(secret)

    def build() -> PaymentPort:
        from providers.paypal import paypal_from_settings

        return paypal_from_settings(settings, session, clock, provider=provider, secret=secret)

    return PaymentsOnFirstCall(build)
