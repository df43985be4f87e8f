"""`mark_overdue_invoices` under jobfence's fault simulator (`jobfence.testing.simulate`, from the `jobfence[testing]`
extra): duplicate ticks, crashed and re-sent calls, lost replies, pauses past the lease, clock skew, for a few
seeds; the lease and run-row guarantees are checked on every run, and this job's own invariant once a clean
tick has run."""

from __future__ import annotations

from jobfence.testing import simulate
from invoices.catalog import CATALOG
from invoices.overdue import OPEN, bound

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def invoices_of_a_billing_day(deps) -> None:
    """Five open invoices past due, one open and due in ten days, one paid past due (what the billing API wrote)."""
    invoices = bound(deps.settings.table("invoices"))
    now = deps.clock.now_ms()
    for i in range(5):
        invoices(f"past-due-{i}", customer_id="c-1", amount_cents=1200, status="open", due_at=now - HOUR_MS - i,
                 open=OPEN).save()
    invoices("not-due", customer_id="c-2", amount_cents=900, status="open", due_at=now + 10 * DAY_MS, open=OPEN).save()
    invoices("paid", customer_id="c-3", amount_cents=500, status="paid", due_at=now - 2 * HOUR_MS).save()


def each_past_due_open_invoice_is_overdue_and_nothing_else_changed(snapshot) -> None:
    rows = {row["invoice_id"]: row for row in snapshot.rows("invoices")}
    statuses = {invoice_id: row["status"] for invoice_id, row in rows.items()}
    assert statuses == {**{f"past-due-{i}": "overdue" for i in range(5)}, "not-due": "open", "paid": "paid"}, statuses
    # the sparse index holds exactly the open invoices: an overdue one left it in the same write
    assert {invoice_id for invoice_id, row in rows.items() if row.get("open")} == {"not-due"}, rows


def test_under_faults_the_past_due_invoices_and_only_they_become_overdue():
    report = simulate(CATALOG, "mark_overdue_invoices", seeds=range(5), setup=invoices_of_a_billing_day,
                      invariant=each_past_due_open_invoice_is_overdue_and_nothing_else_changed)
    report.assert_ok()
    assert report.seeds == 5 and report.faults, report  # the seeds ran, and faults were injected into them
