"""`capture_abandoned_deferred` (seed 001, every 5 minutes behind its interval gate): the safety net.

A buyer who abandons mid-upsell leaves the PayPal order APPROVED but uncaptured.
Every intent still `deferred` and untouched for 20 minutes (each accepted upsell
refreshes `updated_at`, so this excludes buyers still upselling) is captured
with idempotency key `safetynet:<intent id>`, distinct from the buyer's own
`buyer:<intent id>`: if the two race, the provider sees two keys for one order
and the second fails cleanly as already captured, which we reconcile as
captured by the buyer (counted `reconciled`, not `captured`).

One intent's failure is logged (intent id and error class, never a payload)
and never stops the others. A decline or a missing sale reference is terminal
(`capture_failed`); a timeout leaves the intent deferred for the next tick,
which retries with the same key, up to 5 attempts. Each batch of up to 50
intents (from the (status, updated_at) index, never a scan) yields
`{captured, failed, scanned, reconciled}`.
"""

from __future__ import annotations

from typing import Any, Iterator

from aws_lambda_powertools import Logger

from jobfence.errors import ConditionFailed
from jobfence.runs import safe_error
from jobfence.scheduled import JobDeps, RunContext
from jobs.commerce.deferred_payments import DeferredPaymentStore, Initiator, capture_key
from providers.payments import AlreadyCaptured, InstrumentDeclined, OrderNotCapturable, PaymentPort
from providers.paypal import paypal_from_settings

CUTOFF_MS = 20 * 60_000
SAFETY_NET_BATCH = 50
SAFETY_NET_MAX_BATCHES = 20
_TERMINAL_ERRORS = (InstrumentDeclined, OrderNotCapturable)


def capture_abandoned_deferred(
    intents: DeferredPaymentStore, payments: PaymentPort, ctx: RunContext, logger: Logger
) -> Iterator[dict[str, Any]]:
    """Capture stale deferred intents, 50 a batch, at most 20 batches a run."""
    cutoff = ctx.now_ms() - CUTOFF_MS  # fixed for the run: intents patched during it are not ours
    cursor = None
    for _ in range(SAFETY_NET_MAX_BATCHES):
        rows, cursor = intents.stale_deferred(cutoff, SAFETY_NET_BATCH, cursor)
        counts = {"captured": 0, "failed": 0, "scanned": len(rows), "reconciled": 0}
        for row in rows:
            counts[_capture_one(intents, payments, ctx, logger, row)] += 1
        yield counts
        if not cursor:
            return


def _capture_one(intents: DeferredPaymentStore, payments: PaymentPort, ctx: RunContext, logger: Logger, row: Any) -> str:
    if not row.sale_ref:
        logger.error("abandoned deferred capture failed", extra={"intent_id": row.intent_id, "error": "no sale reference"})
        _write(ctx, intents.failed_attempt_item(row, "invalid: no sale reference", terminal=True))
        return "failed"
    try:
        result = payments.capture(row.sale_ref, capture_key(Initiator.SAFETY_NET, row.intent_id))
    except AlreadyCaptured:
        # the buyer's own capture won the race: it is theirs, not ours
        _write(ctx, intents.captured_item(row, Initiator.BUYER, None))
        return "reconciled"
    except Exception as exc:  # noqa: BLE001 - one intent's failure never stops the others
        logger.error("abandoned deferred capture failed", extra={"intent_id": row.intent_id, "error": safe_error(exc)})
        _write(ctx, intents.failed_attempt_item(row, type(exc).__name__, terminal=isinstance(exc, _TERMINAL_ERRORS)))
        return "failed"
    if not _write(ctx, intents.captured_item(row, Initiator.SAFETY_NET, result.capture_id)):
        logger.warning("intent changed while capturing", extra={"intent_id": row.intent_id})
    return "captured"


def _write(ctx: RunContext, item: dict[str, Any]) -> bool:
    """A fenced conditional write; False when the intent moved on meanwhile (buyer activity or capture)."""
    try:
        ctx.fenced_write([item])
    except ConditionFailed:
        return False
    return True


def build_capture_abandoned_deferred(deps: JobDeps):
    settings = deps.settings
    intents = DeferredPaymentStore(settings.table("payment_intents"), deps.clock)
    payments = paypal_from_settings(settings, deps.session, deps.clock)
    return lambda ctx: capture_abandoned_deferred(intents, payments, ctx, deps.logger)
