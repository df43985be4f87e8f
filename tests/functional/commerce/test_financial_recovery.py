"""`recover_financial_operations` (recovery alongside retention) through the scheduled runner on moto."""

from __future__ import annotations

import pytest
from commerce_harness import StealingContext, recovery_job

from jobfence.errors import ConditionFailed, LeaseLost, StoreError
from jobfence.scheduled import Outcome
from jobs.catalog import CATALOG
from jobs.commerce import diagnostic_retention, financial_recovery
from jobs.commerce.account_operations import AccountOperations, Requester, RequesterKind
from jobs.commerce.accounts import OperationKind as AccountOperationKind
from jobs.commerce.customer_activity import ACTIVITY_RETENTION_MS
from jobs.commerce.diagnostic_retention import retention_batches
from jobs.commerce.diagnostics import ExpiredCapture
from jobs.commerce.financial_operations import OperationKind, OperationStatus
from jobs.commerce.financial_recovery import recover_financial_operations
from providers.errors import ProviderAuthFailed
from tests.support import documented_bounds

HOUR = 3_600_000
DAY = 24 * HOUR
JOB = "recover_financial_operations"


def job(stores, payments, harness, recovery_payments=None):
    return recovery_job(stores, harness, recovery_payments or payments)


def delete_account(stores, account_provider, notifier, account_id):
    stores.accounts.request_operation(account_id, f"del-{account_id}", AccountOperationKind.DELETION)
    ops = AccountOperations(stores.accounts, account_provider, notifier)
    ops.resume_account_operation(account_id, Requester(RequesterKind.CUSTOMER, account_id))


def record_diagnostic(stores, capture_id, account_id, expires_at, retained=30, minutes=7):
    stores.diagnostics.record(capture_id, account_id, ["r1", "r2"], "h", "t", expires_at, retained, minutes)


def test_schedule_tables_and_provider():
    spec = CATALOG.job(JOB)
    assert (spec.schedule, spec.interval_s, spec.providers) == ("cron(0 * * * ? *)", 3600, ("paypal",))
    assert set(spec.tables) == {
        "account_intents", "accounts", "financial_operations", "orders", "diagnostic_captures", "customer_activity"
    }


# -- recovery -------------------------------------------------------------------------------


def test_unconfirmed_intents_expire_once_and_readers_see_expiry_before_that(stores, payments, harness, clock, rows):
    now = clock.now_ms()
    stores.intents.create("old", "acc", "email_confirmation", now + HOUR)
    stores.intents.create("live", "acc", "email_confirmation", now + 3 * HOUR)
    stores.intents.create("confirmed", "acc", "email_confirmation", now + HOUR)
    assert stores.intents.confirm("confirmed")
    clock.advance(hours=2)
    assert stores.intents.status("old").value == "expired"  # live expiry, before the job ran
    assert not stores.intents.confirm("old")

    first = harness.run(JOB, job(stores, payments, harness))
    clock.advance(minutes=55)  # the next tick, before "live" expires
    second = harness.run(JOB, job(stores, payments, harness))

    assert first.summary["intents_expired"] == 1 and second.summary["intents_expired"] == 0
    assert rows.get("account_intents", "old")["status"] == "expired"
    assert rows.get("account_intents", "confirmed")["status"] == "confirmed"


def test_deleted_account_recovery_voids_refunds_redacts_and_then_clears(
    stores, payments, harness, clock, account_provider, notifier, rows
):
    # GIVEN an account with an uncaptured charge, a captured order with a pending return,
    # a fulfilled order, and an order still being paid
    stores.accounts.create("acc", "c@example.com", "C")
    payments.approve("PP-1", 2000)
    payments.capture_elsewhere("PP-1", "buyer:x")
    capture_id = payments.orders["PP-1"].capture_id
    payments.approve("PP-2", 500)
    stores.operations.create("charge-2", "acc", OperationKind.CHARGE, "PP-2", 500, "EUR", "buyer")
    stores.operations.create("return-1", "acc", OperationKind.RETURN, capture_id, 2000, "EUR", "cancel")
    personal = dict(customer_name="C", customer_email="c@example.com", shipping_address="1 Road")
    stores.orders.create("o-refunded", "acc", 2000, "EUR", status="cancelled", capture_ref=capture_id, **personal)
    stores.orders.create("o-fulfilled", "acc", 700, "EUR", status="fulfilled", **personal)
    stores.orders.create("o-paying", "acc", 500, "EUR", status="placed", **personal)
    delete_account(stores, account_provider, notifier, "acc")
    provider_calls = len(account_provider.calls), len(notifier.calls)

    # WHEN recovery runs (before the pending grace period is over: the deleted account is handled anyway)
    first = harness.run(JOB, job(stores, payments, harness))

    # THEN the uncaptured charge is voided without a provider call; the return is paid with its stable key
    assert stores.operations.get("charge-2").status == "voided"
    assert not any(target == "PP-2" for _, target, _ in payments.calls)
    assert stores.operations.get("return-1").status == "succeeded"
    assert payments.refunded[capture_id] == 2000
    assert [c for c in payments.calls if c[0] == "refund"] == [("refund", capture_id, "cancel:return-1")]
    # AND the terminal orders are redacted (amounts and references stay), the open one is not
    for order_id in ("o-refunded", "o-fulfilled"):
        row = stores.orders.get(order_id)
        assert (row.customer_name, row.customer_email, row.shipping_address) == (None, None, None)
        assert row.redacted_at and row.amount_cents and row.status in ("cancelled", "fulfilled")
    assert stores.orders.get("o-refunded").capture_ref == capture_id
    assert stores.orders.get("o-paying").customer_email == "c@example.com"
    assert first.summary["orders_redacted"] == 2 and first.summary["accounts_recovered"] == 0
    assert stores.accounts.get("acc").recovery_due == "due"  # an order is still open
    # AND no account provider or notification work happened in the scheduled run
    assert (len(account_provider.calls), len(notifier.calls)) == provider_calls

    # WHEN the open order completes and recovery runs again
    rows.set("orders", ("o-paying",), status="fulfilled")
    clock.advance(hours=1)
    second = harness.run(JOB, job(stores, payments, harness))

    # THEN redaction is idempotent (only the new terminal order) and the account leaves the index
    assert second.summary["orders_redacted"] == 1 and second.summary["accounts_recovered"] == 1
    assert stores.accounts.get("acc").recovery_due is None
    assert payments.refunded[capture_id] == 2000
    clock.advance(hours=1)
    third = harness.run(JOB, job(stores, payments, harness))
    assert third.summary.get("orders_redacted", 0) == 0 and third.summary.get("accounts_recovered", 0) == 0


def test_an_order_in_an_unknown_state_is_a_clear_error_on_that_record_only(stores, payments, harness, clock, account_provider, notifier, rows):
    stores.accounts.create("acc", "c@example.com")
    stores.orders.create("o-weird", "acc", 100, "EUR", status="teleported", customer_email="c@example.com")
    stores.orders.create("o-done", "acc", 100, "EUR", status="fulfilled", customer_email="c@example.com")
    delete_account(stores, account_provider, notifier, "acc")

    result = harness.run(JOB, job(stores, payments, harness))

    assert result.outcome is Outcome.RAN
    assert (result.summary["invalid_records"], result.summary["orders_redacted"]) == (1, 1)
    weird = rows.get("orders", "o-weird")
    assert (weird["status"], weird["customer_email"]) == ("teleported", "c@example.com")  # nothing lost
    assert stores.orders.get("o-weird").status is None  # the store's view: a status outside the enum
    assert stores.accounts.get("acc").recovery_due == "due"  # it stays visible for an operator


def test_an_operation_in_an_unknown_state_is_a_clear_error_on_that_account_and_never_executed(stores, payments, harness, account_provider, notifier, rows):
    # GIVEN a deleted account with an operation whose status this code does not know, and a terminal order
    stores.accounts.create("acc", "c@example.com")
    payments.approve("PP", 100)
    stores.operations.create("op", "acc", OperationKind.CHARGE, "PP", 100, "EUR", "operator")
    rows.set("financial_operations", ("op",), status="teleported")
    stores.orders.create("o-done", "acc", 100, "EUR", status="fulfilled", customer_email="c@example.com")
    delete_account(stores, account_provider, notifier, "acc")

    # WHEN recovery runs
    result = harness.run(JOB, job(stores, payments, harness))

    # THEN the run goes on: the record is counted invalid and left as it is (no claim, no provider call),
    # the account's order is still redacted, and the account stays due for an operator
    assert result.outcome is Outcome.RAN
    assert (result.summary["invalid_records"], result.summary["orders_redacted"]) == (1, 1)
    assert rows.get("financial_operations", "op")["status"] == "teleported" and payments.calls == []
    assert stores.accounts.get("acc").recovery_due == "due"
    with pytest.raises(StoreError, match="operation op is in an unknown state"):
        stores.operations.get("op")


def test_pending_returns_and_card_retries_use_the_stable_key_and_settle_once(stores, payments, harness, clock):
    # GIVEN a charge whose first recovery attempt times out, one whose answer gets lost,
    # a declined one, one already captured by the buyer, and a fresh one still in its grace period
    stores.accounts.create("acc", "c@example.com")
    for order in ("PP-T", "PP-L", "PP-D", "PP-B", "PP-F"):
        payments.approve(order, 100)
    payments.decline("PP-D")
    payments.capture_elsewhere("PP-B", "buyer:other")
    for op, order in (("t", "PP-T"), ("l", "PP-L"), ("d", "PP-D"), ("b", "PP-B")):
        stores.operations.create(op, "acc", OperationKind.CHARGE, order, 100, "EUR", "operator")
    clock.advance(minutes=16)
    stores.operations.create("f", "acc", OperationKind.CHARGE, "PP-F", 100, "EUR", "operator")
    payments.time_out_order("PP-T")

    class LosingOnL:
        def capture(self, order_id, key):
            if order_id == "PP-L" and not payments.orders["PP-L"].capture_id:
                payments.lose_response_next()
            return payments.capture(order_id, key)

        def refund(self, *args):
            return payments.refund(*args)

    # WHEN recovery runs
    first = harness.run(JOB, job(stores, payments, harness, recovery_payments=LosingOnL()))

    # THEN
    assert stores.operations.get("t").status == "retry_scheduled" and int(stores.operations.get("t").attempts) == 1
    assert stores.operations.get("l").status == "retry_scheduled"
    assert stores.operations.get("d").status == "failed"
    assert stores.operations.get("b").status == "succeeded" and first.summary["ops_reconciled"] == 1
    assert stores.operations.get("f").status == "pending"  # the request path still owns it
    assert payments.orders["PP-L"].status == "COMPLETED"  # money moved, answer lost

    # WHEN an hour later the retries are due
    clock.advance(hours=1)
    second = harness.run(JOB, job(stores, payments, harness))

    # THEN both retries succeed with the same key; the lost one is not captured twice
    assert stores.operations.get("t").status == "succeeded"
    assert stores.operations.get("l").status == "succeeded"
    assert stores.operations.get("l").result_ref == payments.orders["PP-L"].capture_id
    keys = [k for _, order, k in payments.calls if order == "PP-L"]
    assert keys == ["operator:l", "operator:l"]
    assert payments.captures_of("PP-L") == 1
    assert stores.operations.get("f").status == "succeeded"  # its grace period is over
    assert second.summary["ops_succeeded"] == 3


def test_an_operation_whose_money_may_have_moved_is_never_given_up_as_failed(stores, payments, harness, clock):
    # GIVEN the provider captures on the first call but recovery never hears back for five runs
    stores.accounts.create("acc", "c@example.com")
    payments.approve("PP", 100)
    stores.operations.create("op", "acc", OperationKind.CHARGE, "PP", 100, "EUR", "operator")
    payments.lose_response_next(1)
    payments.time_out_order("PP", 4)
    clock.advance(minutes=16)
    for _ in range(5):
        result = harness.run(JOB, job(stores, payments, harness))
        assert result.summary["ops_unknown"] == 1 and "ops_failed" not in result.summary
        clock.advance(hours=7)  # past the longest back-off
    # THEN it is still being retried with its key (not `failed`, though money moved), and the 6th run records it
    op = stores.operations.get("op")
    assert (op.status, int(op.attempts)) == ("retry_scheduled", 5)
    assert harness.run(JOB, job(stores, payments, harness)).summary["ops_succeeded"] == 1
    op = stores.operations.get("op")
    assert (op.status, op.result_ref, op.due_at) == (OperationStatus.SUCCEEDED, payments.orders["PP"].capture_id, None)
    assert op.status is OperationStatus.SUCCEEDED and op.attempts == 6  # a typed view, not the store's model
    assert payments.captures_of("PP") == 1 and {key for _, _, key in payments.calls} == {"operator:op"}
    calls = len(payments.calls)
    harness.run(JOB, job(stores, payments, harness))
    assert len(payments.calls) == calls  # automation never touches a terminal operation again


# -- retention ------------------------------------------------------------------------------


def test_expired_diagnostics_cascade_and_release_the_retained_charge_once(stores, payments, harness, clock, rows):
    now = clock.now_ms()
    record_diagnostic(stores, "old", "acc", now + HOUR, retained=30, minutes=7)
    record_diagnostic(stores, "live", "acc", now + 5 * HOUR, retained=11, minutes=3)
    assert stores.diagnostics.usage("acc") == (41, 10)
    clock.advance(hours=2)
    assert stores.diagnostics.read("old") is None  # live expiry before deletion
    assert stores.diagnostics.read("live") == {"ref#0000": "r1", "ref#0001": "r2", "header": "h", "token": "t"}

    first = harness.run(JOB, job(stores, payments, harness))
    clock.advance(hours=1)
    second = harness.run(JOB, job(stores, payments, harness))

    assert (first.summary["charges_released"], first.summary["diagnostic_rows_deleted"]) == (1, 5)
    assert second.summary["charges_released"] == 0
    assert stores.diagnostics.usage("acc") == (11, 10)  # retained released once; minute charges never refunded
    assert rows.count("diagnostic_captures", "old") == 0
    assert stores.diagnostics.read("live") is not None


def test_customer_activity_expires_after_30_days_and_orders_and_payments_stay(stores, payments, harness, clock, rows):
    start = clock.now_ms()
    stores.orders.create("o", "acc", 100, "EUR", status="fulfilled", customer_email="c@example.com")
    stores.operations.create("op", "acc", OperationKind.CHARGE, "PP", 100, "EUR", "buyer")
    stores.activity.record("acc", "e1", "login", start)
    clock.advance(hours=24 * 20)
    stores.activity.record("acc", "e2", "login", clock.now_ms())
    clock.advance(hours=24 * 11)
    assert [r.kind for r in stores.activity.recent("acc")] == ["login"]
    order_before = stores.orders.get("o")

    # WHEN only the retention branch runs (recovery has nothing to do with activity)
    result = harness.run(
        JOB,
        lambda ctx: recover_financial_operations(
            iter(()), retention_batches(stores.diagnostics, stores.activity, ctx, harness.logger), harness.logger
        ),
    )

    assert result.summary["activity_deleted"] == 1
    assert rows.count("customer_activity", "acc") == 1
    assert stores.orders.get("o") == order_before
    assert stores.operations.get("op") is not None
    assert ACTIVITY_RETENTION_MS == 30 * DAY


class Refusing:
    """A payment port whose every call is a configuration error (credentials refused)."""

    def capture(self, *args):
        raise ProviderAuthFailed("PayPal token: client credentials refused (HTTP 401)")

    refund = capture


# -- recovery and retention: both attempted, both awaited ----------------------------------


def _seed_both(stores, payments, clock):
    now = clock.now_ms()
    stores.accounts.create("acc", "c@example.com")
    payments.approve("PP", 100)
    stores.operations.create("op", "acc", OperationKind.CHARGE, "PP", 100, "EUR", "operator")
    stores.intents.create("i", "acc", "email_confirmation", now + HOUR)
    record_diagnostic(stores, "d", "acc", now + HOUR)
    stores.activity.record("acc", "e", "login", now - 31 * DAY)
    clock.advance(hours=2)


def _break_retention(stores, monkeypatch):
    def broken(limit):
        raise StoreError("diagnostics unavailable")

    monkeypatch.setattr(stores.diagnostics, "expired_parents", broken)


@pytest.mark.parametrize(
    "recovery_fails, retention_fails",
    [(False, False), (True, False), (False, True), (True, True)],
    ids=["none", "recovery", "retention", "both"],
)
def test_every_failure_combination(stores, payments, harness, clock, monkeypatch, recovery_fails, retention_fails, rows):
    # GIVEN work for both branches
    _seed_both(stores, payments, clock)
    if retention_fails:
        _break_retention(stores, monkeypatch)
    port = Refusing() if recovery_fails else payments

    # WHEN the job runs
    if recovery_fails or retention_fails:
        expected = ProviderAuthFailed if recovery_fails else StoreError
        with pytest.raises(expected) as raised:
            harness.run(JOB, job(stores, payments, harness, recovery_payments=port))
        if recovery_fails and retention_fails:
            assert any("retention also failed" in note for note in raised.value.__notes__)
    else:
        assert harness.run(JOB, job(stores, payments, harness)).outcome is Outcome.RAN

    # THEN the branch that did not fail did all its work
    assert rows.get("account_intents", "i")["status"] == "expired"  # recovery's first step ran either way
    # (a refused call leaves its claim in place: the next run resumes it with the same key)
    assert stores.operations.get("op").status == ("in_progress" if recovery_fails else "succeeded")
    diagnostics_left = rows.count("diagnostic_captures", "d")
    assert diagnostics_left == (5 if retention_fails else 0)
    assert rows.count("customer_activity", "acc") == (1 if retention_fails else 0)
    # AND a failed run is recorded with the original (financial first) error; the lease is released
    row = harness.run_rows.recent(JOB)[0]
    assert harness.leases.peek(JOB).holder is None
    if recovery_fails or retention_fails:
        assert row["outcome"] == "failed"
        assert row["error"].startswith("ProviderAuthFailed" if recovery_fails else "StoreError")
    else:
        assert row["outcome"] == "ran"


def test_recovery_failing_in_its_first_batch_cannot_skip_retention(stores, payments, harness, clock, monkeypatch, rows):
    _seed_both(stores, payments, clock)

    def broken(limit):
        raise StoreError("intents unavailable")

    monkeypatch.setattr(stores.intents, "expire_due", broken)
    with pytest.raises(StoreError, match="intents unavailable"):
        harness.run(JOB, job(stores, payments, harness))
    assert rows.count("diagnostic_captures", "d") == 0
    assert stores.operations.get("op").status == "pending"


# -- overlapping runs and lost leases -------------------------------------------------------


def test_the_retained_charge_is_released_once_across_two_overlapping_runs(stores, payments, harness, clock, rows):
    # GIVEN run A released the charge of an expired capture, then paused before deleting it
    now = clock.now_ms()
    record_diagnostic(stores, "d", "acc", now + HOUR, retained=30, minutes=7)
    clock.advance(hours=2)
    ctx_a = harness.context(JOB, holder="A")
    parent = stores.diagnostics.expired_parents(10)[0]
    release(ctx_a, stores, parent)
    assert stores.diagnostics.usage("acc") == (0, 7)

    # WHEN A's lease expires, run B takes over and retires the capture
    clock.advance(minutes=31)
    result = harness.run(JOB, job(stores, payments, harness))

    # THEN B does not release again, and A (waking up) cannot write anything any more
    assert result.outcome is Outcome.RAN and result.summary["charges_released"] == 0
    assert stores.diagnostics.usage("acc") == (0, 7)
    assert rows.count("diagnostic_captures", "d") == 0
    with pytest.raises(LeaseLost):
        release(ctx_a, stores, parent)
    assert stores.diagnostics.usage("acc") == (0, 7)


def test_two_runs_racing_on_the_same_parent_release_once(stores, payments, harness, clock):
    # GIVEN two live terms (A expired-but-unaware is refused by the fence; without the fence
    # the parent's own condition still refuses a second release)
    record_diagnostic(stores, "d", "acc", clock.now_ms() + HOUR, retained=30, minutes=7)
    clock.advance(hours=2)
    (parent,) = stores.diagnostics.expired_parents(10)
    assert parent == ExpiredCapture("d", "acc", retained_charge_cents=30, charge_released_at=None)  # a typed view
    ctx = harness.context(JOB, holder="B")
    release(ctx, stores, parent)
    with pytest.raises(ConditionFailed) as refused:
        release(ctx, stores, parent)
    assert refused.value.index == 0
    assert stores.diagnostics.usage("acc") == (0, 7)


def test_a_lost_lease_stops_the_job_before_its_next_batch(stores, payments, harness, clock, monkeypatch, rows):
    monkeypatch.setattr(diagnostic_retention, "DIAGNOSTIC_CHUNK", 1)
    monkeypatch.setattr(financial_recovery, "INTENT_BATCH", 1)
    for i in range(3):
        record_diagnostic(stores, f"d{i}", "acc", clock.now_ms() + HOUR)
        stores.intents.create(f"i{i}", "acc", "email_confirmation", clock.now_ms() + HOUR)
    clock.advance(hours=2)

    result = harness.run(JOB, job(stores, payments, harness), context=StealingContext(harness, JOB))

    assert result.outcome is Outcome.LEASE_LOST and result.summary["batches"] == 1
    expired = sum(1 for i in range(3) if rows.get("account_intents", f"i{i}")["status"] == "expired")
    deleted = sum(1 for i in range(3) if rows.count("diagnostic_captures", f"d{i}") == 0)
    assert expired + deleted == 1  # exactly one batch of one branch happened
    assert harness.leases.peek(JOB).holder == "intruder"


def test_the_job_table_states_the_bounds_the_code_runs():
    # the operator's table in docs/jobs.md says the job's batch bounds: it must say the code's
    row = documented_bounds(JOB)
    assert f"due operations {financial_recovery.OPERATION_BATCH} a batch" in row
    assert f"diagnostics ≤ {diagnostic_retention.DIAGNOSTIC_CHUNK:,} expired parents a chunk" in row
    assert f"activity {diagnostic_retention.ACTIVITY_BATCH:,} a batch" in row
    assert f"intents {financial_recovery.INTENT_BATCH} a batch" in row
    assert f"deleted accounts {financial_recovery.ACCOUNT_BATCH} a batch" in row
    assert f"≤ {financial_recovery.MAX_BATCHES_PER_STEP} batches per step" in row


def release(ctx, stores, parent):
    """The retention job's fenced release of one parent's retained charge."""
    with ctx.transaction() as tx:
        tx.add(*stores.diagnostics.release_ops(parent))
