"""`recover_financial_operations` (seed 000, hourly): financial recovery and, alongside it, retention.

Recovery, in order, each step as bounded batches:

1. expire unconfirmed account intents past their expiry (500 a batch);
2. deleted accounts (25 a batch, from the sparse `by_recovery` index): void
   their uncaptured charges (no provider call: nothing is taken from a deleted
   account), pay out their pending returns, redact their terminal orders, and
   clear the account's recovery when nothing is left open;
3. pending operations the request path left behind past the grace period
   (pending returns, unfinished charges), 50 a batch;
4. card operations whose scheduled retry is due, 50 a batch.

Every provider call sends the operation's stable idempotency key (namespaced by
initiator, fixed at creation), so a retry or an overlapping run gets the first
result back; every settlement is a fenced write conditioned on the status and
attempts that were read, so a second run changes nothing twice.

Retention (`diagnostic_retention.retention_batches`) runs alongside, not after:
the job interleaves one batch of each branch, so each yield is still one bounded
batch with the runner's renewal checkpoint before the next. A failing branch is
set aside and the other keeps running to its end; then the original financial
error is raised (the retention error, if any, is logged), else the retention
error. So a recovery failure cannot skip retention, and both are awaited.
A lost lease is not a branch failure: it stops both at once.

Account provider work and notifications never happen here: this module has
no account-provider or notifier port to call.
"""

from __future__ import annotations

from typing import Any, Iterator

from aws_lambda_powertools import Logger

from jobfence.errors import ConditionFailed, LeaseLost
from jobfence.runs import safe_error
from jobfence.scheduled import JobDeps, RunContext
from jobs.commerce.account_intents import AccountIntentStore
from jobs.commerce.accounts import AccountStatus, AccountStore
from jobs.commerce.customer_activity import CustomerActivityStore
from jobs.commerce.diagnostic_retention import retention_batches
from jobs.commerce.diagnostics import DiagnosticStore
from jobs.commerce.financial_operations import (
    ATTEMPTS_CAP,
    TERMINAL,
    FinancialOperationStore,
    OperationKind,
    OperationStatus,
)
from jobs.commerce.orders import TERMINAL as TERMINAL_ORDERS
from jobs.commerce.orders import OrderStore, UnknownOrderState, status_of
from providers.payments import (
    AlreadyCaptured,
    InstrumentDeclined,
    OrderNotCapturable,
    PaymentPort,
    TransientPaymentError,
)
from providers.paypal import paypal_from_settings

INTENT_BATCH = 500
ACCOUNT_BATCH = 25
PER_ACCOUNT_LIMIT = 100
OPERATION_BATCH = 50
MAX_BATCHES_PER_STEP = 20

_TERMINAL_VALUES = frozenset(status.value for status in TERMINAL)
_SETTLED = frozenset({"succeeded", "reconciled", "failed", "voided", "invalid"})


class FinancialRecovery:
    """The recovery branch, one method per step; each step yields bounded batches."""

    def __init__(
        self,
        intents: AccountIntentStore,
        accounts: AccountStore,
        operations: FinancialOperationStore,
        orders: OrderStore,
        payments: PaymentPort,
        logger: Logger,
    ) -> None:
        self.intents = intents
        self.accounts = accounts
        self.operations = operations
        self.orders = orders
        self.payments = payments
        self.logger = logger

    def batches(self, ctx: RunContext) -> Iterator[dict[str, Any]]:
        yield from self.expire_intents()
        yield from self.recover_deleted_accounts(ctx)
        yield from self.recover_due(ctx, OperationStatus.PENDING, "pending")
        yield from self.recover_due(ctx, OperationStatus.RETRY_SCHEDULED, "retried")

    # -- step 1 -----------------------------------------------------------------------------

    def expire_intents(self) -> Iterator[dict[str, Any]]:
        for _ in range(MAX_BATCHES_PER_STEP):
            changed, scanned = self.intents.expire_due(INTENT_BATCH)
            yield {"intents_expired": changed}
            if scanned < INTENT_BATCH:
                return

    # -- step 2 -----------------------------------------------------------------------------

    def recover_deleted_accounts(self, ctx: RunContext) -> Iterator[dict[str, Any]]:
        cursor = None
        for _ in range(MAX_BATCHES_PER_STEP):
            account_ids, cursor = self.accounts.recovery_due(ACCOUNT_BATCH, cursor)
            counts: dict[str, int] = {"accounts_recovered": 0, "orders_redacted": 0, "invalid_records": 0}
            for account_id in account_ids:
                self._recover_account(ctx, account_id, counts)
            yield counts
            if not cursor:
                return

    def _recover_account(self, ctx: RunContext, account_id: str, counts: dict[str, int]) -> None:
        settled = True
        operations = self.operations.of_account(account_id, PER_ACCOUNT_LIMIT)
        for op in operations:
            if op.status in _TERMINAL_VALUES:
                continue
            outcome = self._execute(ctx, op, account_deleted=True)
            _count(counts, outcome)
            settled = settled and outcome in _SETTLED
        orders = self.orders.of_account(account_id, PER_ACCOUNT_LIMIT)
        for order in orders:
            try:
                status = status_of(order)
                if self.orders.redact(order):
                    counts["orders_redacted"] += 1
            except UnknownOrderState as exc:
                # a clear error on this record; the others proceed; the account stays due
                self.logger.error("order in unknown state", extra={"order_id": order.order_id, "error": safe_error(exc)})
                counts["invalid_records"] += 1
                settled = False
                continue
            settled = settled and status in TERMINAL_ORDERS
        complete = len(operations) < PER_ACCOUNT_LIMIT and len(orders) < PER_ACCOUNT_LIMIT
        if settled and complete and self.accounts.clear_recovery(account_id):
            counts["accounts_recovered"] += 1

    # -- steps 3 and 4 ----------------------------------------------------------------------

    def recover_due(self, ctx: RunContext, status: OperationStatus, label: str) -> Iterator[dict[str, Any]]:
        for _ in range(MAX_BATCHES_PER_STEP):
            rows = self.operations.due(status, ctx.now_ms(), OPERATION_BATCH)
            deleted = {
                account_id
                for account_id, account_status in self.accounts.statuses(r.account_id for r in rows).items()
                if account_status == AccountStatus.DELETED.value
            } if rows else set()
            counts: dict[str, int] = {f"{label}_scanned": len(rows)}
            for op in rows:
                _count(counts, self._execute(ctx, op, account_deleted=op.account_id in deleted))
            yield counts
            if len(rows) < OPERATION_BATCH:
                return

    # -- one operation ----------------------------------------------------------------------

    def _execute(self, ctx: RunContext, op: Any, account_deleted: bool) -> str:
        """Drive one open operation to its next state; return the outcome label."""
        try:
            kind = OperationKind(op.kind)
        except ValueError:
            return self._settle(ctx, op, OperationStatus.FAILED, "invalid", attempted=False, error="invalid: unknown kind")
        if kind is OperationKind.CHARGE and account_deleted:
            return self._settle(ctx, op, OperationStatus.VOIDED, "voided", attempted=False)
        if not op.target_ref:
            return self._settle(ctx, op, OperationStatus.FAILED, "invalid", attempted=False, error="invalid: no target reference")
        try:
            if kind is OperationKind.CHARGE:
                ref = self.payments.capture(op.target_ref, op.idempotency_key).capture_id
            else:
                ref = self.payments.refund(op.target_ref, int(op.amount_cents), op.currency, op.idempotency_key).refund_id
        except AlreadyCaptured:
            # captured under another key (the buyer's path or the safety net): money moved once, reconcile
            return self._settle(ctx, op, OperationStatus.SUCCEEDED, "reconciled", attempted=True, error="reconciled: captured under another key")
        except (InstrumentDeclined, OrderNotCapturable) as exc:
            self.logger.warning("financial operation refused", extra={"operation_id": op.operation_id, "error": type(exc).__name__})
            return self._settle(ctx, op, OperationStatus.FAILED, "failed", attempted=True, error=type(exc).__name__)
        except TransientPaymentError as exc:
            self.logger.warning("financial operation outcome unknown", extra={"operation_id": op.operation_id, "error": type(exc).__name__})
            if int(op.attempts or 0) + 1 >= ATTEMPTS_CAP:
                return self._settle(ctx, op, OperationStatus.FAILED, "failed", attempted=True, error="transient: attempts cap")
            return self._settle(ctx, op, OperationStatus.RETRY_SCHEDULED, "retry_scheduled", attempted=True, error="transient")
        return self._settle(ctx, op, OperationStatus.SUCCEEDED, "succeeded", attempted=True, result_ref=ref)

    def _settle(
        self, ctx: RunContext, op: Any, status: OperationStatus, outcome: str, *, attempted: bool,
        result_ref: str | None = None, error: str | None = None,
    ) -> str:
        try:
            ctx.fenced_write([self.operations.settle_item(op, status, attempted=attempted, result_ref=result_ref, error=error)])
        except ConditionFailed:
            return "conflict"  # an overlapping run settled it first; the provider key made the call harmless
        return outcome


def _count(counts: dict[str, int], outcome: str) -> None:
    counts[f"ops_{outcome}"] = counts.get(f"ops_{outcome}", 0) + 1


def recover_financial_operations(
    recovery: Iterator[dict[str, Any]], retention: Iterator[dict[str, Any]], logger: Logger
) -> Iterator[dict[str, Any]]:
    """Interleave the two branches batch by batch; await both; raise the financial error first."""
    branches: dict[str, Iterator[dict[str, Any]]] = {"recovery": recovery, "retention": retention}
    errors: dict[str, Exception] = {}
    try:
        while branches:
            for name in list(branches):
                try:
                    counts = next(branches[name])
                except StopIteration:
                    del branches[name]
                    continue
                except LeaseLost:
                    raise  # not a branch failure: the term is over, stop everything
                except Exception as exc:
                    # set the failing branch aside; the other one still runs to its end
                    logger.error("branch failed", extra={"branch": name, "error": safe_error(exc)})
                    errors[name] = exc
                    del branches[name]
                    continue
                yield counts
    finally:
        for remaining in branches.values():
            close = getattr(remaining, "close", None)
            if close:
                close()
    if "recovery" in errors:
        if "retention" in errors:
            errors["recovery"].add_note(f"retention also failed: {safe_error(errors['retention'])}")
        raise errors["recovery"]
    if "retention" in errors:
        raise errors["retention"]


def build_recover_financial_operations(deps: JobDeps):
    settings, clock = deps.settings, deps.clock
    recovery = FinancialRecovery(
        AccountIntentStore(settings.table("account_intents"), clock),
        AccountStore(settings.table("accounts"), clock),
        FinancialOperationStore(settings.table("financial_operations"), clock),
        OrderStore(settings.table("orders"), clock),
        paypal_from_settings(settings, deps.session, clock),
        deps.logger,
    )
    diagnostics = DiagnosticStore(settings.table("diagnostic_captures"), clock)
    activity = CustomerActivityStore(settings.table("customer_activity"), clock)
    return lambda ctx: recover_financial_operations(
        recovery.batches(ctx), retention_batches(diagnostics, activity, ctx, deps.logger), deps.logger
    )
