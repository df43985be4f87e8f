"""`recover_financial_operations` (seed 000, hourly): financial recovery and, alongside it, retention.

Recovery, in order, each step as bounded batches:

1. expire unconfirmed account intents past their expiry (500 a batch);
2. resume operations an earlier run claimed and did not settle (`in_progress`:
   it died, or could not record the outcome), 50 a batch;
3. deleted accounts (25 a batch, from the sparse `by_recovery` index): void
   their charges recovery never sent (no provider call: nothing is taken from
   a deleted account), pay out their pending returns, redact their terminal
   orders, and clear the account's recovery when nothing is left open;
4. pending operations the request path left behind past the grace period
   (pending returns, unfinished charges), 50 a batch;
5. operations whose scheduled retry is due, 50 a batch.

Claim before the provider call. The index row is only a hint: before calling
the provider the run moves the operation to `in_progress` in a fenced write
conditioned on the status, attempts and `updated_at` it read. A request-path
change after the read (a void, an amended amount) refuses the claim and the
provider is not called (counted `skipped`); a change after the claim is
refused (the request path's changes need `pending`), so the provider acts on
the row as claimed. Then the provider is called with the operation's stable
idempotency key (namespaced by initiator, fixed at creation) and the outcome
settled, conditioned on the claim still being in place (timeline in
`financial_operations`). A crash or a store error between claim and settle
leaves the operation `in_progress`, resumed by key on a later run (step 2); a
timeout or lost reply is counted `unknown` and retried with the same key
(never given up as `failed`: the provider may have acted); the provider
answers a repeated key with its first result, so money moves at most once per
operation. Every conditional write is retried on a store error and its
refusal read from the old image (`jobfence.retried`).

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

import enum
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.dynamo import safe_error
from jobfence.errors import LeaseLost
from jobfence.retried import WriteResult, fenced_write_retried
from jobfence.scheduled import JobDeps, RunContext
from jobs.commerce.account_intents import AccountIntentStore
from jobs.commerce.accounts import AccountStore
from jobs.commerce.catalog import PAYPAL, PAYPAL_SECRET  # the names declared once
from jobs.commerce.customer_activity import CustomerActivityStore
from jobs.commerce.diagnostic_retention import retention_batches
from jobs.commerce.diagnostics import DiagnosticStore
from jobs.commerce.financial_operations import (
    TERMINAL,
    FinancialOperationStore,
    Operation,
    OperationKind,
    OperationStatus,
    UnknownOperationState,
)
from jobs.commerce.orders import TERMINAL as TERMINAL_ORDERS
from jobs.commerce.orders import OrderStore, UnknownOrderState, status_of
from providers.errors import ProviderAmbiguous
from providers.payments import (
    AlreadyCaptured,
    InstrumentDeclined,
    OrderNotCapturable,
    PaymentPort,
    paypal_on_first_call,
)

INTENT_BATCH = 500
ACCOUNT_BATCH = 25
PER_ACCOUNT_LIMIT = 100
OPERATION_BATCH = 50
MAX_BATCHES_PER_STEP = 20


class OperationOutcome(str, enum.Enum):
    """What one attempt did to one operation (counted as `ops_<value>` in the run row)."""

    SUCCEEDED = "succeeded"  # the provider confirmed it, recorded by this run
    RECONCILED = "reconciled"  # captured under another key (the buyer's path, the safety net): recorded succeeded
    FAILED = "failed"  # the provider refused it for good (decline, not capturable)
    VOIDED = "voided"  # a deleted account's charge recovery never sent: dropped, no provider call
    INVALID = "invalid"  # a record that can never be executed (unknown kind, no target)
    UNKNOWN = (
        "unknown"  # the provider's outcome, the claim or the record of either is unknown: a later run settles it by key
    )
    SKIPPED = (
        "skipped"  # changed since it was read (the request path, another run): not called, or settled by someone else
    )


_SETTLED = frozenset(
    {
        OperationOutcome.SUCCEEDED,
        OperationOutcome.RECONCILED,
        OperationOutcome.FAILED,
        OperationOutcome.VOIDED,
        OperationOutcome.INVALID,
    }
)


class DueStep(enum.Enum):
    """Steps 2, 4 and 5: the open operations of one status whose due time has come."""

    RESUMED = OperationStatus.IN_PROGRESS  # step 2: claimed by an earlier run that did not settle them
    PENDING = OperationStatus.PENDING  # step 4: left behind by the request path past the grace period
    RETRIED = OperationStatus.RETRY_SCHEDULED  # step 5: an unknown outcome whose retry is due


def _ops_summary(outcomes: Iterable[OperationOutcome]) -> dict[str, int]:
    """`ops_<outcome>` per outcome that happened (none for an outcome that did not)."""
    return {f"ops_{outcome.value}": n for outcome, n in Counter(outcomes).items()}


@dataclass(frozen=True)
class IntentsExpired:
    """One batch of step 1."""

    expired: int

    def summary(self) -> dict[str, int]:
        return {"intents_expired": self.expired}


@dataclass(frozen=True)
class AccountsBatch:
    """One batch of step 3: deleted accounts."""

    recovered: int = 0  # accounts whose recovery was cleared (nothing left open)
    orders_redacted: int = 0
    invalid_records: int = 0  # orders or operations in an unknown state: logged, left as they are, account still due
    outcomes: tuple[OperationOutcome, ...] = ()  # what each attempt on an open operation did

    def summary(self) -> dict[str, int]:
        return {
            "accounts_recovered": self.recovered,
            "orders_redacted": self.orders_redacted,
            "invalid_records": self.invalid_records,
            **_ops_summary(self.outcomes),
        }


@dataclass(frozen=True)
class DueBatch:
    """One batch of step 2, 4 or 5: the operations read (`<step>_scanned`) and what each attempt did."""

    step: DueStep
    scanned: int
    outcomes: tuple[OperationOutcome, ...]

    def summary(self) -> dict[str, int]:
        return {f"{self.step.name.lower()}_scanned": self.scanned, **_ops_summary(self.outcomes)}


RecoveryBatch = IntentsExpired | AccountsBatch | DueBatch


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

    def batches(self, ctx: RunContext) -> Iterator[dict[str, int]]:
        """Every step's batches in order, each as its run-row counts."""
        return (batch.summary() for batch in self.steps(ctx))

    def steps(self, ctx: RunContext) -> Iterator[RecoveryBatch]:
        yield from self.expire_intents()
        yield from self.recover_due(ctx, DueStep.RESUMED)
        yield from self.recover_deleted_accounts(ctx)
        yield from self.recover_due(ctx, DueStep.PENDING)
        yield from self.recover_due(ctx, DueStep.RETRIED)

    # -- step 1 -----------------------------------------------------------------------------

    def expire_intents(self) -> Iterator[IntentsExpired]:
        for _ in range(MAX_BATCHES_PER_STEP):
            changed, scanned = self.intents.expire_due(INTENT_BATCH)
            yield IntentsExpired(changed)
            if scanned < INTENT_BATCH:
                return

    # -- step 3 -----------------------------------------------------------------------------

    def recover_deleted_accounts(self, ctx: RunContext) -> Iterator[AccountsBatch]:
        cursor = None
        for _ in range(MAX_BATCHES_PER_STEP):
            account_ids, cursor = self.accounts.recovery_due(ACCOUNT_BATCH, cursor)
            batch = AccountsBatch()
            for account_id in account_ids:
                batch = self._recover_account(ctx, account_id, batch)
            yield batch
            if not cursor:
                return

    def _recover_account(self, ctx: RunContext, account_id: str, batch: AccountsBatch) -> AccountsBatch:
        """`batch` with this account's work added."""
        redacted = invalid = 0
        try:
            operations = self.operations.of_account(account_id, PER_ACCOUNT_LIMIT)
        except UnknownOperationState as exc:
            # a clear error on this account's operations (left as they are, none executed); the orders
            # proceed; the account stays due
            self.logger.error("operation in unknown state", extra={"account_id": account_id, "error": safe_error(exc)})
            operations, invalid = [], 1
        outcomes = [self._execute(ctx, op, account_deleted=True) for op in operations if op.status not in TERMINAL]
        settled = not invalid and all(outcome in _SETTLED for outcome in outcomes)
        orders = self.orders.of_account(account_id, PER_ACCOUNT_LIMIT)
        for order in orders:
            try:
                status = status_of(order)
                if self.orders.redact(order):
                    redacted += 1
            except UnknownOrderState as exc:
                # a clear error on this record; the others proceed; the account stays due
                self.logger.error(
                    "order in unknown state", extra={"order_id": order.order_id, "error": safe_error(exc)}
                )
                invalid += 1
                settled = False
                continue
            settled = settled and status in TERMINAL_ORDERS
        complete = len(operations) < PER_ACCOUNT_LIMIT and len(orders) < PER_ACCOUNT_LIMIT
        recovered = settled and complete and self.accounts.clear_recovery(account_id)
        return AccountsBatch(
            recovered=batch.recovered + (1 if recovered else 0),
            orders_redacted=batch.orders_redacted + redacted,
            invalid_records=batch.invalid_records + invalid,
            outcomes=(*batch.outcomes, *outcomes),
        )

    # -- steps 2, 4 and 5 (one query each: in_progress, pending, retry_scheduled) -------------

    def recover_due(self, ctx: RunContext, step: DueStep) -> Iterator[DueBatch]:
        for _ in range(MAX_BATCHES_PER_STEP):
            rows = self.operations.due(step.value, ctx.now_ms(), OPERATION_BATCH)
            deleted = self.accounts.deleted(r.account_id for r in rows) if rows else set()
            outcomes = tuple(self._execute(ctx, op, account_deleted=op.account_id in deleted) for op in rows)
            yield DueBatch(step, len(rows), outcomes)
            if len(rows) < OPERATION_BATCH:
                return

    # -- one operation ----------------------------------------------------------------------

    def _execute(self, ctx: RunContext, op: Operation, account_deleted: bool) -> OperationOutcome:
        """Drive one open operation to its next state: claim it, call the provider, settle."""
        kind = op.kind
        if kind is None:
            return self._settle(
                ctx, op, OperationStatus.FAILED, OperationOutcome.INVALID, error="invalid: unknown kind"
            )
        # claimed by an earlier run that died (or could not record the outcome): resumed by its key below
        resumed = op.status is OperationStatus.IN_PROGRESS
        if not resumed and kind is OperationKind.CHARGE and account_deleted and not op.attempts:
            # never sent by recovery: nothing is taken from a deleted account. One already sent is
            # finished by its key instead (the provider may have captured it; `voided` would say it did not)
            return self._settle(ctx, op, OperationStatus.VOIDED, OperationOutcome.VOIDED)
        target = op.target_ref
        if not target:  # a bad record (a claim is only ever made with a target)
            return self._settle(
                ctx, op, OperationStatus.FAILED, OperationOutcome.INVALID, error="invalid: no target reference"
            )
        if resumed:
            return self._call(ctx, op, kind, target)
        run_id = ctx.run_id
        claimed = fenced_write_retried(
            ctx,
            self.operations.claim_op(op, run_id),
            lambda old: old.get("status") == OperationStatus.IN_PROGRESS.value and old.get("claimed_by") == run_id,
        )
        if claimed is WriteResult.REFUSED:
            # changed since the read (voided, amended, settled): the row is stale, never call the provider with it
            return OperationOutcome.SKIPPED
        if claimed is WriteResult.UNKNOWN:
            # the claim may be in place: a later run resumes it by key; the provider was not called
            self._log("financial operation claim not recorded", op, "store error")
            return OperationOutcome.UNKNOWN
        return self._call(ctx, op, kind, target)

    def _call(self, ctx: RunContext, op: Operation, kind: OperationKind, target: str) -> OperationOutcome:
        """A claimed operation (frozen since the claim): the provider call with its stable key, then the settle."""
        try:
            if kind is OperationKind.CHARGE:
                ref = self.payments.capture(target, op.idempotency_key).capture_id
            else:
                ref = self.payments.refund(target, op.amount_cents, op.currency, op.idempotency_key).refund_id
        except AlreadyCaptured:
            # captured under another key (the buyer's path or the safety net): money moved once, reconcile
            return self._settle(
                ctx,
                op,
                OperationStatus.SUCCEEDED,
                OperationOutcome.RECONCILED,
                claimed=True,
                error="reconciled: captured under another key",
            )
        except (InstrumentDeclined, OrderNotCapturable) as exc:
            self._log("financial operation refused", op, type(exc).__name__)
            return self._settle(
                ctx, op, OperationStatus.FAILED, OperationOutcome.FAILED, claimed=True, error=type(exc).__name__
            )
        except ProviderAmbiguous as exc:
            # the provider may have acted (a lost reply) or not (a timeout): the same key finds out next time
            self._log("financial operation outcome unknown", op, type(exc).__name__)
            return self._settle(
                ctx, op, OperationStatus.RETRY_SCHEDULED, OperationOutcome.UNKNOWN, claimed=True, error="transient"
            )
        return self._settle(
            ctx, op, OperationStatus.SUCCEEDED, OperationOutcome.SUCCEEDED, claimed=True, result_ref=ref
        )

    def _settle(
        self,
        ctx: RunContext,
        op: Operation,
        status: OperationStatus,
        outcome: OperationOutcome,
        *,
        claimed: bool = False,
        result_ref: str | None = None,
        error: str | None = None,
    ) -> OperationOutcome:
        """Record an outcome; a refusal whose old image already holds it (our lost reply) is ours.

        `claimed`: after a claim, the provider was called (`attempts` + 1) and the row is `in_progress`.
        """
        attempts = op.attempts + (1 if claimed else 0)
        written = fenced_write_retried(
            ctx,
            self.operations.settle_op(
                op, status, attempted=claimed, claimed=claimed, result_ref=result_ref, error=error
            ),
            lambda old: old.get("status") == status.value and int(old.get("attempts", 0)) == attempts,
        )
        if written is WriteResult.APPLIED:
            return outcome
        if written is WriteResult.UNKNOWN:
            # still in_progress if it was not applied: the next run resumes it by key
            self._log("financial operation outcome not recorded", op, "store error")
            return OperationOutcome.UNKNOWN
        return OperationOutcome.SKIPPED  # another run settled it first; the provider key made our call harmless

    def _log(self, message: str, op: Operation, error: str) -> None:
        self.logger.warning(message, extra={"operation_id": op.operation_id, "error": error})


def recover_financial_operations(
    recovery: Iterator[Mapping[str, int]], retention: Iterator[Mapping[str, int]], logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Interleave the two branches batch by batch; await both; raise the financial error first."""
    branches: dict[str, Iterator[Mapping[str, int]]] = {"recovery": recovery, "retention": retention}
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
                # a branch's last batch is not the run's: the other branch may have more
                yield dict(counts) if isinstance(counts, LastBatch) else counts
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
        # the grants are checked now; PayPal's adapter is built by the first provider call (most runs make none)
        paypal_on_first_call(settings, deps.session, clock, provider=PAYPAL, secret=PAYPAL_SECRET),
        deps.logger,
    )
    diagnostics = DiagnosticStore(settings.table("diagnostic_captures"), clock)
    activity = CustomerActivityStore(settings.table("customer_activity"), clock)
    return lambda ctx: recover_financial_operations(
        recovery.batches(ctx), retention_batches(diagnostics, activity, ctx, deps.logger), deps.logger
    )
