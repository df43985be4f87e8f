"""The buyer's own capture of a deferred intent (the interactive path seed 001's safety net races).

It uses the key `buyer:<intent id>`; if the safety net captured first, the
provider answers already-captured and the intent is reconciled as captured by
the safety net. Money moves once either way.
"""

from __future__ import annotations

from jobs.commerce.deferred_payments import DeferredPaymentStore, Initiator, capture_key
from providers.payments import AlreadyCaptured, OrderNotCapturable, PaymentPort


def capture_for_buyer(intents: DeferredPaymentStore, payments: PaymentPort, intent_id: str) -> str:
    """Capture the buyer's order now; return "captured" or "already_captured"."""
    row = intents.get(intent_id)
    if row is None or not row.sale_ref:
        raise OrderNotCapturable(f"intent {intent_id} has no sale reference")
    try:
        result = payments.capture(row.sale_ref, capture_key(Initiator.BUYER, intent_id))
    except AlreadyCaptured:
        intents.mark_captured(intent_id, Initiator.SAFETY_NET, None)
        return "already_captured"
    intents.mark_captured(intent_id, Initiator.BUYER, result.capture_id)
    return "captured"
