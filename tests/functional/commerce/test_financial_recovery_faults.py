"""`recover_financial_operations` under faults: claim before the provider call, resume by key, unknown not failed.

Interleavings are cooperative (a hook runs the request path's change at an exact
point of the run); AWS faults are scripted through botocore's event hooks; the
fake provider models PayPal's idempotency keys and order state machine.
"""

from __future__ import annotations

import pytest

from jobfence.testing import another_party

from jobs.commerce.accounts import OperationKind as AccountOperationKind
from jobs.commerce.account_operations import AccountOperations, Requester, RequesterKind
from jobs.commerce.financial_operations import OperationKind
from tests.aws_faults import Faults, connection_closed, from_call, throttled

from commerce_harness import Crash, HookedPayments, recovery_job

JOB = "recover_financial_operations"
HOUR_MINUTES = 60


class HookedOperations:
    """The real store, with a hook that runs once, right after the first query of `pending` operations returned.

    The hook is the request path (another party): its writes are not the job's.
    """

    def __init__(self, store, after_query):
        self._store, self._after_query = store, after_query

    def due(self, status, now, limit):
        rows = self._store.due(status, now, limit)
        if status.value == "pending" and self._after_query:
            hook, self._after_query = self._after_query, None
            with another_party():
                hook()
        return rows

    def __getattr__(self, name):
        return getattr(self._store, name)


def run(stores, harness, payments, operations=None):
    return harness.run(JOB, recovery_job(stores, harness, payments, operations))


def ops(result, outcome):
    return result.summary.get(f"ops_{outcome}", 0)


def a_pending_charge(stores, payments, clock, op="op"):
    """A charge the request path left `pending` past its grace period."""
    stores.accounts.create("acc", "c@example.com")
    payments.approve("PP", 1_000)
    stores.operations.create(op, "acc", OperationKind.CHARGE, "PP", 1_000, "EUR", "buyer")
    clock.advance(minutes=16)


def a_pending_return(stores, payments, clock):
    """A captured order and a pending return of all of it, past its grace period; returns the capture id."""
    stores.accounts.create("acc", "c@example.com")
    payments.approve("PP", 2_000)
    payments.capture_elsewhere("PP", "buyer:o")
    capture_id = payments.orders["PP"].capture_id
    stores.operations.create("ret", "acc", OperationKind.RETURN, capture_id, 2_000, "EUR", "cancel")
    clock.advance(minutes=16)
    return capture_id


def a_run_that_dies(stores, harness, payments, when):
    """A run whose function dies just `before` or `after` the provider acts on its first call."""

    def die(target):
        raise Crash()

    with pytest.raises(Crash):
        run(stores, harness, HookedPayments(payments, **{when: die}))


def next_run(clock):
    clock.advance(minutes=HOUR_MINUTES)


# -- a request-path change between the read and the provider call ---------------------------


def test_a_charge_voided_after_the_read_is_never_captured(stores, payments, harness, clock):
    # GIVEN a pending charge, and the request path voiding it right after recovery read it
    a_pending_charge(stores, payments, clock)
    voided = []
    hooked = HookedOperations(stores.operations, lambda: voided.append(stores.operations.void("op")))
    # WHEN recovery runs
    result = run(stores, harness, payments, hooked)
    # THEN the read is stale: the claim is refused and the provider is never called; the void stands
    assert voided == [True]
    assert payments.calls == [] and payments.orders["PP"].status == "APPROVED"
    assert stores.operations.get("op").status == "voided"
    assert ops(result, "skipped") == 1 and ops(result, "succeeded") == 0


def test_a_return_amended_after_the_read_is_refunded_once_for_the_new_amount(stores, payments, harness, clock):
    # GIVEN a pending return of 2,000, amended to 500 by the request path right after recovery read it
    capture_id = a_pending_return(stores, payments, clock)
    amended = []
    hooked = HookedOperations(stores.operations, lambda: amended.append(stores.operations.amend_amount("ret", 500)))
    # WHEN recovery runs
    first = run(stores, harness, payments, hooked)
    # THEN nothing is refunded from the stale row
    assert amended == [True]
    assert [c for c in payments.calls if c[0] == "refund"] == [] and capture_id not in payments.refunded
    assert ops(first, "skipped") == 1
    # WHEN the next run comes (the amendment restarted the grace period, which is over by then)
    next_run(clock)
    second = run(stores, harness, payments)
    # THEN the amended amount is refunded once, with the stable key
    assert payments.refunded[capture_id] == 500
    assert [c for c in payments.calls if c[0] == "refund"] == [("refund", capture_id, "cancel:ret")]
    assert stores.operations.get("ret").status == "succeeded" and ops(second, "succeeded") == 1


def test_a_change_after_the_claim_is_refused_and_the_claimed_row_is_executed(stores, payments, harness, clock):
    # GIVEN a pending return recovery has claimed, and a request path that tries to amend it and void it
    # just before the provider call
    capture_id = a_pending_return(stores, payments, clock)
    tried = []
    hooked = HookedPayments(payments, before=lambda target: tried.extend(
        [stores.operations.amend_amount("ret", 500), stores.operations.void("ret")]
    ))
    # WHEN recovery runs
    result = run(stores, harness, hooked)
    # THEN both changes were refused (the claim froze the row) and the claimed amount was refunded once
    assert tried == [False, False]
    op = stores.operations.get("ret")
    assert (op.status, int(op.amount_cents)) == ("succeeded", 2_000)
    assert payments.refunded[capture_id] == 2_000 and ops(result, "succeeded") == 1


# -- a crash after the claim -----------------------------------------------------------------


def test_a_crash_between_the_claim_and_the_provider_call_is_resumed_by_key(stores, payments, harness, clock):
    # GIVEN a run that dies after claiming a charge, before calling the provider
    a_pending_charge(stores, payments, clock)
    a_run_that_dies(stores, harness, payments, "before")
    assert stores.operations.get("op").status == "in_progress" and payments.calls == []
    # WHEN the next run comes (the dead holder's lease has expired)
    next_run(clock)
    result = run(stores, harness, payments)
    # THEN it resumes the claimed operation with the same key: captured once, recorded once
    assert result.summary["resumed_scanned"] == 1 and ops(result, "succeeded") == 1
    assert payments.calls == [("capture", "PP", "buyer:op")] and payments.captures_of("PP") == 1
    op = stores.operations.get("op")
    assert (op.status, op.result_ref, int(op.attempts)) == ("succeeded", payments.orders["PP"].capture_id, 1)


def test_a_crash_after_the_provider_captured_is_settled_by_key_without_a_second_capture(stores, payments, harness, clock):
    # GIVEN a run that dies right after the provider captured, before recording it
    a_pending_charge(stores, payments, clock)
    a_run_that_dies(stores, harness, payments, "after")
    assert stores.operations.get("op").status == "in_progress"
    # WHEN the next run comes THEN the provider answers the repeated key with its first capture
    next_run(clock)
    result = run(stores, harness, payments)
    assert ops(result, "succeeded") == 1
    assert [key for _, _, key in payments.calls] == ["buyer:op", "buyer:op"] and payments.captures_of("PP") == 1
    assert stores.operations.get("op").result_ref == payments.orders["PP"].capture_id


# -- a lost provider reply -------------------------------------------------------------------


def test_a_lost_provider_reply_is_counted_unknown_and_reconciled_by_key_on_the_next_run(stores, payments, harness, clock):
    # GIVEN the provider will capture and then lose its answer
    a_pending_charge(stores, payments, clock)
    payments.lose_response_next(1)
    # WHEN recovery runs
    first = run(stores, harness, payments)
    # THEN the run does not claim a failure it cannot know: unknown, retried with the same key
    assert payments.captures_of("PP") == 1
    assert ops(first, "unknown") == 1 and ops(first, "failed") == 0 and ops(first, "succeeded") == 0
    op = stores.operations.get("op")
    assert (op.status, int(op.attempts)) == ("retry_scheduled", 1)
    # WHEN the retry is due THEN the provider answers with the first capture: recorded once
    next_run(clock)
    second = run(stores, harness, payments)
    assert ops(second, "succeeded") == 1
    assert [key for _, _, key in payments.calls] == ["buyer:op", "buyer:op"] and payments.captures_of("PP") == 1
    assert stores.operations.get("op").result_ref == payments.orders["PP"].capture_id


def test_a_charge_sent_before_its_account_was_deleted_is_settled_by_key_not_voided(
    stores, payments, harness, clock, account_provider, notifier
):
    # GIVEN a charge whose capture happened but whose reply was lost, then the account is deleted
    a_pending_charge(stores, payments, clock)
    payments.lose_response_next(1)
    run(stores, harness, payments)
    stores.accounts.request_operation("acc", "del-acc", AccountOperationKind.DELETION)
    AccountOperations(stores.accounts, account_provider, notifier).resume_account_operation(
        "acc", Requester(RequesterKind.CUSTOMER, "acc")
    )
    # WHEN recovery runs again
    next_run(clock)
    result = run(stores, harness, payments)
    # THEN the money that moved is recorded (voided would say none did), and it moved once
    op = stores.operations.get("op")
    assert (op.status, op.result_ref) == ("succeeded", payments.orders["PP"].capture_id)
    assert ops(result, "voided") == 0 and payments.captures_of("PP") == 1


# -- lost and refused store replies around the claim and the settle ----------------------------


def test_a_claim_whose_reply_was_lost_is_recognised_from_the_old_image(stores, payments, harness, clock, dynamodb):
    # GIVEN the claim (the run's first fenced write) is applied but its reply is lost
    a_pending_charge(stores, payments, clock)
    faults = Faults(dynamodb).reply_lost("TransactWriteItems", error=connection_closed)
    result = run(stores, harness, payments)
    faults.detach()
    # THEN the retried claim is refused by its own first try, recognised as ours, and the capture goes on once
    assert faults.fired == [("after", "TransactWriteItems")]
    assert ops(result, "succeeded") == 1 and len(payments.calls) == 1


def test_a_settle_throttled_after_the_provider_captured_is_unknown_then_resumed_once(
    stores, payments, harness, clock, dynamodb
):
    # GIVEN the settle write after a successful capture is throttled on every try
    a_pending_charge(stores, payments, clock)
    faults = Faults(dynamodb).refused_before("TransactWriteItems", throttled, when=from_call(2), times=3)
    first = run(stores, harness, payments)
    faults.detach()
    # THEN the run counts it unknown (not failed, not succeeded: it could not record it) and the claim stays
    assert len(faults.fired) == 3
    assert ops(first, "unknown") == 1 and ops(first, "succeeded") == 0
    assert stores.operations.get("op").status == "in_progress"
    # WHEN the next run resumes it THEN it is recorded once; the provider saw one capture
    next_run(clock)
    second = run(stores, harness, payments)
    assert second.summary["resumed_scanned"] == 1 and ops(second, "succeeded") == 1
    assert payments.captures_of("PP") == 1 and {key for _, _, key in payments.calls} == {"buyer:op"}
