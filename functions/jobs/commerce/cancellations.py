"""`recover_pending_cancellations` (seed 000, hourly): finish cancellations the request path left pending.

An order waits in `cancellation_pending` when the API accepted a cancel and did
not finish it (timeout, crash). Once it has waited past a grace period (so an
in-flight request is not raced), one fenced transaction per order moves it to
`cancelled` and, if money was captured, creates the pending return with the
stable key `cancel:return-<order>`; `recover_financial_operations` pays it out.
This job calls no provider at all. Bounded batches of 100 orders, at most 20
per run, each a renewal checkpoint; a second run finds nothing left to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.errors import ConditionFailed
from jobfence.scheduled import JobDeps, RunContext
from jobfence.transaction import Write
from jobs.commerce.financial_operations import FinancialOperationStore, OperationKind
from jobs.commerce.orders import OrderStore

CANCEL_BATCH = 100
CANCEL_MAX_BATCHES = 20
CANCEL_GRACE_MS = 15 * 60_000
CANCEL_INITIATOR = "cancel"


def return_operation_id(order_id: str) -> str:
    """The one return a cancellation creates for an order (stable, so it is created once)."""
    return f"return-{order_id}"


def recover_pending_cancellations(
    orders: OrderStore, operations: FinancialOperationStore, ctx: RunContext, logger: Logger
) -> Iterator[dict[str, Any] | LastBatch]:
    """Cancel orders pending past the grace period, 100 a batch, at most 20 batches."""
    for n in range(1, CANCEL_MAX_BATCHES + 1):
        rows = orders.pending_cancellations(ctx.now_ms() - CANCEL_GRACE_MS, CANCEL_BATCH)
        outcomes = [_cancel(orders, operations, ctx, row, logger) for row in rows]
        with_return = outcomes.count("cancelled_with_return")
        counts = {
            "cancelled": outcomes.count("cancelled") + with_return,
            "returns_created": with_return,
            "already_done": outcomes.count("already_done"),
        }
        if len(rows) < CANCEL_BATCH or n == CANCEL_MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts


def _cancel(orders: OrderStore, operations: FinancialOperationStore, ctx: RunContext, row: Any, logger: Logger) -> str:
    cancel = orders.cancel_op(row)
    if not row.capture_ref:
        return _cancel_alone(ctx, cancel)
    refund = operations.create_op(
        return_operation_id(row.order_id),
        row.account_id,
        OperationKind.RETURN,
        row.capture_ref,
        int(row.amount_cents),
        row.currency,
        CANCEL_INITIATOR,
        order_id=row.order_id,
    )
    try:
        with ctx.transaction() as tx:
            cancel(tx)
            refund(tx)
    except ConditionFailed as exc:
        if exc.index == 0:
            return "already_done"
        # the return exists already (the request path got that far): finish the order alone
        logger.info("cancellation return already recorded", extra={"order_id": row.order_id})
        return _cancel_alone(ctx, cancel)
    return "cancelled_with_return"


def _cancel_alone(ctx: RunContext, cancel: Write) -> str:
    try:
        with ctx.transaction() as tx:
            cancel(tx)
    except ConditionFailed:
        return "already_done"
    return "cancelled"


def build_recover_pending_cancellations(deps: JobDeps):
    orders = OrderStore(deps.settings.table("orders"), deps.clock)
    operations = FinancialOperationStore(deps.settings.table("financial_operations"), deps.clock)
    return lambda ctx: recover_pending_cancellations(orders, operations, ctx, deps.logger)
