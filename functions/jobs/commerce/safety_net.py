"""`capture_abandoned_deferred` (seed 001, every 5 minutes behind its interval gate): the safety net.

A buyer who abandons mid-upsell leaves the PayPal order APPROVED but uncaptured.
Every intent still `deferred` and untouched for 20 minutes (each accepted upsell
refreshes `updated_at`, so this excludes buyers still upselling; the stamp is
compared a time budget early, so the 20 minutes hold in true time) is captured
with idempotency key `safetynet:<intent id>`, distinct from the buyer's own
`buyer:<intent id>`: if the two race, the provider sees two keys for one order
and the second fails cleanly as already captured, which we reconcile as
captured by the buyer (counted `reconciled`, not `captured`).

Claim before the provider call. The index row is only a hint: before calling
PayPal the run moves the intent `deferred -> capturing` in a fenced write
conditioned on the `updated_at` it read. A buyer's upsell accepted after the
read changed `updated_at`, so the claim is refused and nothing is captured
(counted `skipped`); an upsell after the claim is refused (patches need
`deferred`), so the amount captured is the amount the claim froze. Only then
is the provider called, and the outcome settled (timeline in
`deferred_payments`).

Each run first resumes intents left `capturing` by an earlier attempt (an
unknown outcome, a crash between claim and settle, a paused holder) with the
same `safetynet:` key: the provider answers a repeated key with its first
result, so money moves at most once per order.

Per-intent outcomes, counted per batch of up to 50 (from the (status,
updated_at) index, never a scan) with `scanned`:

    captured     this run recorded the safety net's capture (counted once, by the run that recorded it)
    reconciled   captured under the buyer's key: recorded as the buyer's
    failed       the provider refused (decline, not capturable, credentials) or the claim could not be
                 written: no money moved in this attempt
    unknown      the provider's outcome, or the record of it, is unknown (timeout, lost reply, a settle
                 write that kept failing): the intent stays `capturing` and a later tick settles it by key
    skipped      the buyer touched the intent after it was read, or another run settled it first

One intent's failure is logged (intent id and error class, never a payload)
and never stops the others. Every conditional write (`jobfence.retried`) is retried a few times on
a store error (safe: the condition makes a repeat a no-op) and a refusal is
read from the old image DynamoDB returns, so our own applied-but-unanswered
write is recognised as ours. Only a definite refusal (decline, not capturable)
makes an intent `capture_failed`; an unknown outcome is never given up, so an
order that may have been paid is never reported as failed.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.clock import TIME_BUDGET_MS
from jobfence.dynamo import safe_error
from jobfence.retried import WriteResult, fenced_write_retried
from jobfence.scheduled import JobDeps, RunContext
from jobfence.transaction import Write
from jobs.commerce.catalog import PAYPAL, PAYPAL_SECRET  # the names declared once
from jobs.commerce.deferred_payments import (
    DeferredIntent,
    DeferredPaymentStore,
    DeferredStatus,
    Initiator,
    capture_key,
)
from providers.errors import ProviderAuthFailed
from providers.payments import (
    AlreadyCaptured,
    InstrumentDeclined,
    OrderNotCapturable,
    PaymentPort,
    paypal_on_first_call,
)

CUTOFF_MS = 20 * 60_000
SAFETY_NET_BATCH = 50
SAFETY_NET_MAX_BATCHES = 20
_TERMINAL_ERRORS = (InstrumentDeclined, OrderNotCapturable)
_REFUSED_ERRORS = (ProviderAuthFailed,)  # the provider answered and did not capture; retried next tick


class IntentOutcome(str, enum.Enum):
    """What one attempt did to one intent (the run row's counters; see the module docstring)."""

    CAPTURED = "captured"
    RECONCILED = "reconciled"
    FAILED = "failed"
    UNKNOWN = "unknown"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class IntentCounts:
    """One batch: the intents read and what each attempt did (every field in the run row, zeros included)."""

    scanned: int
    captured: int = 0
    reconciled: int = 0
    failed: int = 0
    unknown: int = 0
    skipped: int = 0

    @classmethod
    def of(cls, scanned: int, outcomes: Iterable[IntentOutcome]) -> IntentCounts:
        n = Counter(outcomes)
        return cls(
            scanned=scanned,
            captured=n[IntentOutcome.CAPTURED],
            reconciled=n[IntentOutcome.RECONCILED],
            failed=n[IntentOutcome.FAILED],
            unknown=n[IntentOutcome.UNKNOWN],
            skipped=n[IntentOutcome.SKIPPED],
        )

    def summary(self) -> dict[str, int]:
        """The counts as a run row's batch summary (field name -> count)."""
        return asdict(self)


def capture_abandoned_deferred(
    intents: DeferredPaymentStore, payments: PaymentPort, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Resume claimed intents, then claim and capture stale ones: 50 a batch, at most 20 batches a run."""
    net = _SafetyNet(intents, payments, ctx, logger)
    # fixed for the run (intents patched during it are not ours), and a time budget early: the buyer's stamp
    # and our clock may differ by the skew budget, and the buyer's write land up to the request-age budget
    # after its stamp, so 20 minutes since the buyer's last applied write hold in true time
    cutoff = ctx.now_ms() - CUTOFF_MS - TIME_BUDGET_MS
    batches = 0
    cursor = None
    while batches < SAFETY_NET_MAX_BATCHES:  # first: intents an earlier attempt left capturing
        rows, cursor = intents.capturing(SAFETY_NET_BATCH, cursor)
        if rows:  # usually none: no batch to report
            batches += 1
            yield IntentCounts.of(len(rows), (net.capture(row) for row in rows)).summary()
        if not cursor:
            break
    cursor = None
    while batches < SAFETY_NET_MAX_BATCHES:  # then: deferred intents untouched since the cutoff
        rows, cursor = intents.stale_deferred(cutoff, SAFETY_NET_BATCH, cursor)
        batches += 1
        counts = IntentCounts.of(len(rows), (net.claim_and_capture(row) for row in rows)).summary()
        if not cursor or batches == SAFETY_NET_MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts


class _SafetyNet:
    """One run's claims, provider calls and settlements."""

    def __init__(self, intents: DeferredPaymentStore, payments: PaymentPort, ctx: RunContext, logger: Logger) -> None:
        self._intents = intents
        self._payments = payments
        self._ctx = ctx
        self._logger = logger

    def claim_and_capture(self, row: DeferredIntent) -> IntentOutcome:
        """A stale deferred intent: claim it against the `updated_at` read, then capture it."""
        if not row.sale_ref:
            self._log_failure(row, "no sale reference")
            if (
                self._write(self._intents.invalid_op(row, "invalid: no sale reference"), lambda old: False)
                is WriteResult.APPLIED
            ):
                return IntentOutcome.FAILED
            return IntentOutcome.SKIPPED
        run_id = self._ctx.run_id
        claimed = self._write(
            self._intents.claim_op(row, run_id),
            lambda old: old.get("status") == DeferredStatus.CAPTURING.value and old.get("claimed_by") == run_id,
        )
        if claimed is WriteResult.REFUSED:
            # the buyer changed it after our read (or it was settled): the read is stale, never capture it
            return IntentOutcome.SKIPPED
        if claimed is WriteResult.UNKNOWN:
            # the claim may be in place: a later tick resumes it by key; the provider was not called
            self._log_failure(row, "claim not recorded")
            return IntentOutcome.FAILED
        return self.capture(row)

    def capture(self, row: DeferredIntent) -> IntentOutcome:
        """A claimed (`capturing`) intent: call the provider with the safety net's key and settle."""
        intent_id = row.intent_id
        try:
            if not row.sale_ref:  # a bad record: a claim is only ever made with one
                raise OrderNotCapturable(f"intent {intent_id} has no sale reference")
            result = self._payments.capture(row.sale_ref, capture_key(Initiator.SAFETY_NET, intent_id))
        except AlreadyCaptured:
            # the buyer's own capture won the race: it is theirs, not ours
            return self._settle(
                row, self._intents.captured_op(row, Initiator.BUYER, None), Initiator.BUYER, IntentOutcome.RECONCILED
            )
        except Exception as exc:  # noqa: BLE001 - one intent's failure never stops the others
            self._log_failure(row, safe_error(exc))
            terminal = isinstance(exc, _TERMINAL_ERRORS)
            attempts = row.capture_attempts + 1
            self._write(
                self._intents.failed_attempt_op(row, type(exc).__name__, terminal=terminal),
                lambda old: int(old.get("capture_attempts", 0)) >= attempts,
            )
            # a typed refusal is an answer (no money moved); anything else may have captured
            return IntentOutcome.FAILED if terminal or isinstance(exc, _REFUSED_ERRORS) else IntentOutcome.UNKNOWN
        if result.amount_cents != row.amount_cents:
            # the buyer's upsell reached the intent but never PayPal (its client died in between):
            # PayPal captured the amount the buyer approved there, and the intent records that
            self._logger.warning(
                "captured amount differs from the intent's (an upsell not patched at PayPal)",
                extra={"intent_id": intent_id},
            )
        return self._settle(
            row,
            self._intents.captured_op(row, Initiator.SAFETY_NET, result.capture_id, result.amount_cents),
            Initiator.SAFETY_NET,
            IntentOutcome.CAPTURED,
        )

    def _settle(self, row: DeferredIntent, write: Write, by: Initiator, outcome: IntentOutcome) -> IntentOutcome:
        """Record a capture; a refusal whose old image already says so (a lost reply, the buyer's path) is ours."""
        written = self._write(
            write, lambda old: old.get("status") == DeferredStatus.CAPTURED.value and old.get("captured_by") == by.value
        )
        if written is WriteResult.APPLIED:
            return outcome
        if written is WriteResult.UNKNOWN:
            self._log_failure(row, "capture not recorded")
            return IntentOutcome.UNKNOWN  # still capturing if it was not applied: the next tick settles it by key
        self._logger.warning("intent settled by someone else while capturing", extra={"intent_id": row.intent_id})
        return IntentOutcome.SKIPPED

    def _write(self, write: Write, mine: Callable[[Mapping[str, Any]], bool]) -> WriteResult:
        return fenced_write_retried(self._ctx, write, mine)

    def _log_failure(self, row: DeferredIntent, error: str) -> None:
        self._logger.error("abandoned deferred capture failed", extra={"intent_id": row.intent_id, "error": error})


def build_capture_abandoned_deferred(deps: JobDeps):
    settings = deps.settings
    intents = DeferredPaymentStore(settings.table("payment_intents"), deps.clock)
    # the grants are checked now; PayPal's adapter is built by the first capture (most ticks capture nothing)
    payments = paypal_on_first_call(settings, deps.session, deps.clock, provider=PAYPAL, secret=PAYPAL_SECRET)
    return lambda ctx: capture_abandoned_deferred(intents, payments, ctx, deps.logger)
