"""Commerce seed data for the demo: abandoned deferred intents, pending cancellations, expired diagnostics.

Intents point at orders the PayPal stub holds as APPROVED, so the safety net's
captures go through the real PayPal adapter over loopback HTTP.
"""

from __future__ import annotations

from typing import Any

from jobs.commerce.deferred_payments import DeferredPaymentStore
from jobs.commerce.diagnostics import DiagnosticStore
from jobs.commerce.orders import OrderStore

MINUTE = 60_000
HOUR = 60 * MINUTE
ABANDONED = 12
PENDING_CANCELLATIONS = 6
EXPIRED_DIAGNOSTICS = 8


def seed_for_runtime(tables: dict[str, str], clock: Any, paypal: Any | None) -> dict[str, int]:
    """Write the rows; `paypal` is the PayPal stub (None: intents are seeded without approved orders)."""
    counts: dict[str, int] = {}
    if "payment_intents" in tables:
        intents = DeferredPaymentStore(tables["payment_intents"], clock)
        for i in range(ABANDONED):
            sale_ref = paypal.create_order(f"{20 + i}.00") if paypal else f"O-demo-{i}"
            intents.create(f"intent-{i:03d}", sale_ref, (20 + i) * 100, account_id=f"acct-{i % 4}")
        counts["deferred_intents"] = ABANDONED
    if "orders" in tables:
        orders = OrderStore(tables["orders"], clock)
        for i in range(PENDING_CANCELLATIONS):
            orders.create(f"order-{i:03d}", f"acct-{i % 3}", 1_500 + i, "EUR", status="paid")
            orders.request_cancellation(f"order-{i:03d}")
        counts["pending_cancellations"] = PENDING_CANCELLATIONS
    if "diagnostic_captures" in tables:
        diagnostics = DiagnosticStore(tables["diagnostic_captures"], clock)
        now = clock.now_ms()
        for i in range(EXPIRED_DIAGNOSTICS):
            diagnostics.record(
                f"capture-{i:03d}",
                f"acct-{i % 2}",
                refs=[f"ref-{i}-{n}" for n in range(3)],
                header="x-demo: 1",
                token="demo-token",
                expires_at=now + (30 + 10 * i) * MINUTE,  # they expire during the first hours of the day
                retained_charge_cents=25,
                minute_write_cents=5,
            )
        counts["expiring_diagnostics"] = EXPIRED_DIAGNOSTICS
    return counts
