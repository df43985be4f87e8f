"""`mark_overdue_invoices`: every hour, each open invoice past its due date becomes overdue.

    invoices: invoice_id (key) | customer_id | amount_cents | status | due_at | open
    status: open -> paid (the billing API) | overdue (this job)

Bounded: at most `BATCH` invoices a batch and `MAX_BATCHES` batches a run (the runner renews the lease
between batches); what is left waits for the next tick. Each invoice is one fenced transaction
(`ctx.transaction()`): it commits only while this run's lease term is live, so a paused run that lost
its lease cannot write, and only if the invoice is still open and past due, so a payment recorded
between the read and the write wins (`ConditionFailed`, counted, never retried).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from jobfence import ConditionFailed, JobDeps, RunContext

BATCH = 25
MAX_BATCHES = 4
OPEN = "open"  # the sparse index's only partition: set while an invoice is open, removed when it is not


class OpenByDue(GlobalSecondaryIndex):
    """Open invoices by due date (keys only)."""

    class Meta:
        index_name = "open_by_due"
        projection = KeysOnlyProjection()

    open = UnicodeAttribute(hash_key=True)
    due_at = NumberAttribute(range_key=True)


class Invoice(Model):
    """One invoice (epoch milliseconds for `due_at`)."""

    class Meta:
        table_name = "unbound"  # bound at cold start to the physical name (`bound`)

    invoice_id = UnicodeAttribute(hash_key=True)
    customer_id = UnicodeAttribute()
    amount_cents = NumberAttribute()
    status = UnicodeAttribute()
    due_at = NumberAttribute()
    open = UnicodeAttribute(null=True)
    open_by_due = OpenByDue()


def bound(table_name: str) -> type[Invoice]:
    """`Invoice` on the physical table `table_name` (the environment names it; never at import time)."""
    meta = type("Meta", (Invoice.Meta,), {"table_name": table_name})
    return type("Invoice", (Invoice,), {"Meta": meta, "__module__": __name__, "open_by_due": OpenByDue()})


def mark_overdue_invoices(invoices: type[Invoice], ctx: RunContext) -> Iterator[dict[str, Any]]:
    """The job: batches of up to `BATCH` open invoices past due, each marked overdue in a fenced write."""
    for _ in range(MAX_BATCHES):
        now = ctx.now_ms()
        due = list(invoices.open_by_due.query(OPEN, invoices.due_at < now, limit=BATCH))
        marked = settled = 0
        for row in due:
            try:
                with ctx.transaction() as tx:
                    tx.update(
                        invoices(row.invoice_id),
                        actions=[invoices.status.set("overdue"), invoices.open.remove()],
                        condition=(invoices.status == "open") & (invoices.due_at < now),
                    )
                marked += 1
            except ConditionFailed:  # paid (or marked by an earlier run) since the index said open
                settled += 1
        yield {"marked": marked, "already_settled": settled}
        if len(due) < BATCH:
            return


def build_mark_overdue_invoices(deps: JobDeps) -> Callable[[RunContext], Iterator[dict[str, Any]]]:
    """The job's factory (the catalog's `entry`), called once at cold start."""
    invoices = bound(deps.settings.table("invoices"))
    return lambda ctx: mark_overdue_invoices(invoices, ctx)
