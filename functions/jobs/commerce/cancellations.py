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

import enum
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.errors import ConditionFailed
from jobfence.scheduled import JobDeps, RunContext
from jobfence.transaction import Write
from jobs.commerce.financial_operations import FinancialOperationStore, OperationKind
from jobs.commerce.orders import Order, OrderStore

CANCEL_BATCH = 100
CANCEL_MAX_BATCHES = 20
CANCEL_GRACE_MS = 15 * 60_000
CANCEL_INITIATOR = "cancel"


class CancelOutcome(enum.Enum):
    """What one pending cancellation came to."""

    CANCELLED = "cancelled"  # nothing was captured: the order alone
    CANCELLED_WITH_RETURN = "cancelled_with_return"  # and its pending return created, in the same transaction
    ALREADY_DONE = "already_done"  # no longer pending (the request path or an overlapping run finished it)


@dataclass(frozen=True)
class CancellationCounts:
    """One batch (every field in the run row, zeros included)."""

    cancelled: int  # orders this run cancelled, with or without a return
    returns_created: int
    already_done: int

    @classmethod
    def of(cls, outcomes: Iterable[CancelOutcome]) -> CancellationCounts:
        n = Counter(outcomes)
        with_return = n[CancelOutcome.CANCELLED_WITH_RETURN]
        return cls(n[CancelOutcome.CANCELLED] + with_return, with_return, n[CancelOutcome.ALREADY_DONE])

    def summary(self) -> dict[str, int]:
        return asdict(self)


def return_operation_id(order_id: str) -> str:
    """The one return a cancellation creates for an order (stable, so it is created once)."""
    return f"return-{order_id}"


def recover_pending_cancellations(
    orders: OrderStore, operations: FinancialOperationStore, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Cancel orders pending past the grace period, 100 a batch, at most 20 batches."""
    for n in range(1, CANCEL_MAX_BATCHES + 1):
        rows = orders.pending_cancellations(ctx.now_ms() - CANCEL_GRACE_MS, CANCEL_BATCH)
        counts = CancellationCounts.of(_cancel(orders, operations, ctx, row, logger) for row in rows).summary()
        if len(rows) < CANCEL_BATCH or n == CANCEL_MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts


def _cancel(
    orders: OrderStore, operations: FinancialOperationStore, ctx: RunContext, row: Order, logger: Logger
) -> CancelOutcome:
    cancel = orders.cancel_op(row)
    if not row.capture_ref:
        return _cancel_alone(ctx, cancel)
    refund = operations.create_op(
        return_operation_id(row.order_id),
        row.account_id,
        OperationKind.RETURN,
        row.capture_ref,
        row.amount_cents,
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
            return CancelOutcome.ALREADY_DONE
        # the return exists already (the request path got that far): finish the order alone
        logger.info("cancellation return already recorded", extra={"order_id": row.order_id})
        return _cancel_alone(ctx, cancel)
    return CancelOutcome.CANCELLED_WITH_RETURN


def _cancel_alone(ctx: RunContext, cancel: Write) -> CancelOutcome:
    try:
        with ctx.transaction() as tx:
            cancel(tx)
    except ConditionFailed:
        return CancelOutcome.ALREADY_DONE
    return CancelOutcome.CANCELLED


def build_recover_pending_cancellations(deps: JobDeps):
    orders = OrderStore(deps.settings.table("orders"), deps.clock)
    operations = FinancialOperationStore(deps.settings.table("financial_operations"), deps.clock)
    return lambda ctx: recover_pending_cancellations(orders, operations, ctx, deps.logger)
