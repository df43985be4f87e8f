"""`mark_overdue_invoices` on moto under a frozen clock, run by jobfence's runner inside its declared grant."""

from __future__ import annotations

import importlib
import json
import pathlib
import sys

import pytest

from jobfence import Outcome, SystemClock

JOB = "mark_overdue_invoices"
HOUR_MS = 3_600_000
EVENTS = pathlib.Path(__file__).resolve().parent / "events"


@pytest.fixture
def harness(job_harness):
    return job_harness(JOB)  # the leases, runs and invoices tables, on moto


def put_invoice(harness, invoice_id: str, due_at: int, status: str = "open") -> None:
    """What the billing API writes: an open invoice carries `open` (the sparse index's key)."""
    item = {"invoice_id": {"S": invoice_id}, "customer_id": {"S": "c-1"}, "amount_cents": {"N": "1200"},
            "status": {"S": status}, "due_at": {"N": str(due_at)}, **({"open": {"S": "open"}} if status == "open" else {})}
    harness.dynamodb.put_item(TableName=harness.tables["invoices"], Item=item)


def statuses(harness) -> dict[str, str]:
    return {row["invoice_id"]: row["status"] for row in harness.rows("invoices")}


def test_an_open_invoice_past_due_becomes_overdue_and_no_other_changes(harness, clock):
    # GIVEN one open invoice past due, one open not yet due, one paid past due
    now = clock.now_ms()
    put_invoice(harness, "past-due", now - HOUR_MS)
    put_invoice(harness, "not-due", now + HOUR_MS)
    put_invoice(harness, "paid", now - 2 * HOUR_MS, status="paid")
    # WHEN the hourly tick runs the job (inside its grant: query+update on invoices)
    harness.tick().assert_ran(marked=1, already_settled=0)
    # THEN exactly the open past-due invoice is overdue, and it left the open index
    assert statuses(harness) == {"past-due": "overdue", "not-due": "open", "paid": "paid"}
    assert "open" not in next(r for r in harness.rows("invoices") if r["invoice_id"] == "past-due")


def test_a_run_is_bounded_and_the_next_hour_finishes_the_rest(harness, clock):
    from invoices.overdue import BATCH, MAX_BATCHES

    # GIVEN more overdue invoices than one run may mark
    per_run, total = BATCH * MAX_BATCHES, BATCH * MAX_BATCHES + 7
    for i in range(total):
        put_invoice(harness, f"inv-{i:03d}", clock.now_ms() - HOUR_MS - i)
    # WHEN the tick runs, THEN it stops at its bound
    harness.tick().assert_outcome(Outcome.RAN)
    assert list(statuses(harness).values()).count("overdue") == per_run
    # WHEN the next hour's tick runs, THEN it marks the rest
    clock.advance(hours=1)
    harness.tick().assert_ran(marked=7)
    assert set(statuses(harness).values()) == {"overdue"}
    assert [row.outcome.value for row in harness.runs()] == ["ran", "ran"]


def test_a_payment_the_index_has_not_seen_yet_wins(harness, clock):
    # GIVEN an invoice paid, which the (eventually consistent) index still lists as open
    put_invoice(harness, "just-paid", clock.now_ms() - HOUR_MS, status="paid")
    harness.dynamodb.update_item(TableName=harness.tables["invoices"], Key={"invoice_id": {"S": "just-paid"}},
                                 UpdateExpression="SET #o = :o", ExpressionAttributeNames={"#o": "open"},
                                 ExpressionAttributeValues={":o": {"S": "open"}})
    # WHEN the job runs: the fenced write's condition refuses it (status is no longer open)
    harness.tick().assert_ran(marked=0, already_settled=1)
    # THEN the paid invoice stays paid
    assert statuses(harness) == {"just-paid": "paid"}


def test_a_duplicate_tick_within_the_hour_writes_nothing(harness, clock):
    # GIVEN the job ran this hour, and an invoice fell due since
    harness.tick().assert_outcome(Outcome.RAN)
    put_invoice(harness, "late", clock.now_ms() - 1)
    # WHEN a second (duplicate or early) tick arrives ten minutes later
    clock.advance(minutes=10)
    # THEN the interval gate skips it: no run row, no invoice changed
    harness.tick().assert_outcome(Outcome.SKIPPED_INTERVAL)
    assert statuses(harness) == {"late": "open"}


def test_the_lambda_handler_cold_starts_and_runs_the_job_its_function_names(harness, lambda_context, monkeypatch):
    # GIVEN the environment jobfence-cdk gives the job's function
    for name, value in harness.environ().items():
        monkeypatch.setenv(name, value)
    put_invoice(harness, "past-due", harness.clock.now_ms() - HOUR_MS)
    # WHEN Lambda imports handlers.scheduled (the cold start) and delivers the scheduled tick
    sys.modules.pop("handlers.scheduled", None)
    handler = importlib.import_module("handlers.scheduled").handler
    # (the sample's shape, sent now by the job's own rule: a function takes ticks of its rule only, on time)
    sample = json.loads((EVENTS / "scheduled_tick.json").read_text())
    tick = harness.scheduled_event(SystemClock().now_ms())
    assert set(tick) == set(sample) and tick["resources"] == [harness.environ()["RULE_ARN"]]
    result = handler(tick, lambda_context)
    # THEN the catalog's job ran (on the wall clock: the invoice was due an hour before the frozen start)
    assert result["job"] == JOB and result["outcome"] == "ran"
    assert statuses(harness) == {"past-due": "overdue"}
