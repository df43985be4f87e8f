"""Account work only on explicit request; the backoffice ledger cleanup in its own subsystem."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from jobfence.registry import CatalogError, JobSpec, Registry
from jobfence.scheduled import Outcome
from commerce_harness import StealingContext
from jobs.backoffice import ledger_cleanup
from jobs.backoffice.catalog import TABLES as BACKOFFICE_TABLES
from jobs.backoffice.ledger_cleanup import clean_operator_access_ledger
from jobs.catalog import CATALOG
from jobs.commerce import catalog as commerce_catalog
from jobs.commerce.account_operations import (
    AccountOperationFailed,
    AccountOperations,
    NotAuthorized,
    NothingPending,
    Requester,
    RequesterKind,
)
from jobs.commerce.accounts import AccountOperationGone, OperationKind
from jobs.commerce.cancellations import recover_pending_cancellations
from jobs.commerce.diagnostic_retention import retention_batches
from jobs.commerce.financial_recovery import FinancialRecovery, recover_financial_operations
from jobs.commerce.invitations import expire_agent_invitations
from jobs.commerce.safety_net import capture_abandoned_deferred


HOUR = 3_600_000
CUSTOMER = Requester(RequesterKind.CUSTOMER, "acc")


def operations(stores, account_provider, notifier):
    return AccountOperations(stores.accounts, account_provider, notifier)


# -- resume_account_operation ---------------------------------------------------------------


def test_scheduled_jobs_make_zero_account_provider_and_notification_calls(
    stores, payments, harness, clock, account_provider, notifier
):
    # GIVEN accounts with pending deletion and email-change operations, and work for every job
    stores.accounts.create("acc", "c@example.com")
    stores.accounts.create("acc2", "d@example.com")
    stores.accounts.request_operation("acc", "del-1", OperationKind.DELETION)
    stores.accounts.request_operation("acc2", "mail-1", OperationKind.EMAIL_CHANGE, new_email="new@example.com")
    stores.intents.create("i", "acc", "email_confirmation", clock.now_ms() + HOUR)
    stores.invitations.create("inv", "acc", "agent@example.com", clock.now_ms() + HOUR)
    stores.orders.create("o", "acc", 100, "EUR", status="placed")
    stores.orders.request_cancellation("o")
    payments.approve("PP", 100)
    stores.deferred.create("di", "PP", 100)
    clock.advance(hours=2)
    jobs = {
        "recover_pending_cancellations": lambda ctx: recover_pending_cancellations(stores.orders, stores.operations, ctx, harness.logger),
        "recover_financial_operations": lambda ctx: recover_financial_operations(
            FinancialRecovery(stores.intents, stores.accounts, stores.operations, stores.orders, payments, harness.logger).batches(ctx),
            retention_batches(stores.diagnostics, stores.activity, ctx, harness.logger),
            harness.logger,
        ),
        "expire_agent_invitations": lambda ctx: expire_agent_invitations(stores.invitations, ctx),
        "capture_abandoned_deferred": lambda ctx: capture_abandoned_deferred(stores.deferred, payments, ctx, harness.logger),
    }

    # WHEN every scheduled commerce job runs, twice (an hour apart)
    for _ in range(2):
        for name, job in jobs.items():
            assert harness.run(name, job).outcome is Outcome.RAN
        clock.advance(hours=1)

    # THEN the account provider and the notifier were never called, and the operations still wait
    assert account_provider.calls == [] and notifier.calls == []
    assert stores.accounts.get("acc").pending_operation.operation_id == "del-1"
    assert stores.accounts.get("acc").status == "deletion_pending"
    assert stores.accounts.get("acc2").email == "d@example.com"

    # WHEN the customer retries explicitly
    assert operations(stores, account_provider, notifier).resume_account_operation("acc", CUSTOMER) == "deletion"
    # THEN exactly one provider call and one notice happen, with the operation id as key
    assert account_provider.calls == [("delete_account", "acc", "del-1")]
    assert notifier.calls == [("acc", "deletion_completed", "del-1")]
    assert stores.accounts.get("acc").status == "deleted"


@pytest.mark.slow  # a Python subprocess
def test_no_scheduled_job_module_can_reach_the_account_ports():
    # GIVEN a fresh interpreter WHEN every job's factory module is imported
    # THEN neither the account-provider port nor the explicit-request path was loaded
    code = (
        "import importlib, sys\n"
        "from jobs.catalog import CATALOG\n"
        "for spec in CATALOG.jobs.values(): importlib.import_module(spec.entry.partition(':')[0])\n"
        "print(sorted(m for m in sys.modules if m in ('providers.accounts', 'jobs.commerce.account_operations')))\n"
    )
    root = pathlib.Path(__file__).resolve().parents[3]
    env = {**os.environ, "PYTHONPATH": f"{root / 'functions'}{os.pathsep}{root}"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_operator_recovery_needs_the_role(stores, account_provider, notifier):
    stores.accounts.create("acc", "c@example.com")
    stores.accounts.request_operation("acc", "mail-1", OperationKind.EMAIL_CHANGE, new_email="new@example.com")
    ops = operations(stores, account_provider, notifier)
    with pytest.raises(NotAuthorized):
        ops.resume_account_operation("acc", Requester(RequesterKind.OPERATOR, "op-1"))
    with pytest.raises(NotAuthorized):
        ops.resume_account_operation("acc", Requester(RequesterKind.CUSTOMER, "someone-else"))
    assert account_provider.calls == []
    assert ops.resume_account_operation("acc", Requester(RequesterKind.OPERATOR, "op-1", frozenset({"account_recovery"}))) == "email_change"
    assert stores.accounts.get("acc").email == "new@example.com"
    with pytest.raises(NothingPending):
        ops.resume_account_operation("acc", CUSTOMER)


def test_a_provider_failure_leaves_the_operation_pending_for_another_explicit_retry(stores, account_provider, notifier):
    stores.accounts.create("acc", "c@example.com")
    stores.accounts.request_operation("acc", "del-1", OperationKind.DELETION)
    account_provider.fail_next()
    ops = operations(stores, account_provider, notifier)
    with pytest.raises(AccountOperationFailed):
        ops.resume_account_operation("acc", CUSTOMER)
    assert stores.accounts.get("acc").status == "deletion_pending" and notifier.calls == []
    ops.resume_account_operation("acc", CUSTOMER)
    assert [c[2] for c in account_provider.calls] == ["del-1", "del-1"]  # same idempotency key
    assert int(stores.accounts.get("acc").deleted_at) > 0 and stores.accounts.get("acc").recovery_due == "due"


def test_an_attempt_count_re_sent_after_its_lost_reply_is_counted_once(stores, account_provider, notifier):
    # GIVEN a pending operation, and a provider that fails, so the operation stays pending with its count
    from tests.aws_faults import Faults

    stores.accounts.create("acc", "c@example.com")
    stores.accounts.request_operation("acc", "del-1", OperationKind.DELETION)
    account_provider.fail_next()
    faults = Faults(*stores.accounts.clients())
    faults.resent("UpdateItem", when=lambda params: "attempts" in str(params.get("ExpressionAttributeNames", {}).values()))
    # WHEN the count's UpdateItem is applied, its reply lost and re-sent by botocore
    with pytest.raises(AccountOperationFailed):
        operations(stores, account_provider, notifier).resume_account_operation("acc", CUSTOMER)
    # THEN the copy is refused by the first and read as counted: one attempt, not two
    assert faults.count("resend") == 1
    assert int(stores.accounts.get("acc").pending_operation.attempts) == 1
    # and a replaced operation is still told apart from a counted one
    stores.accounts.request_operation("acc", "del-2", OperationKind.DELETION)
    with pytest.raises(AccountOperationGone):
        stores.accounts.note_attempt("acc", "del-1", 0)


# -- backoffice -----------------------------------------------------------------------------


def test_the_ledger_table_belongs_to_the_backoffice_and_only_its_cleanup_uses_it():
    users = [j.name for j in CATALOG.jobs.values() if "operator_access_ledger" in j.tables]
    users += [q.name for q in CATALOG.queues.values() if "operator_access_ledger" in q.tables]
    assert users == ["clean_operator_access_ledger"]
    spec = CATALOG.job("clean_operator_access_ledger")
    assert (spec.subsystem, spec.schedule, spec.interval_s, spec.providers, spec.secrets) == (
        "backoffice", "cron(0 * * * ? *)", 3600, (), ()
    )
    # and the registry refuses a commerce job that tries to use it
    sneaky = JobSpec(name="sneaky", subsystem="commerce", entry="x:y", schedule="rate(1 hour)",
                     tables={"operator_access_ledger": "read"})
    with pytest.raises(CatalogError, match="belongs to subsystem 'backoffice'"):
        Registry(tables=[*commerce_catalog.TABLES, *BACKOFFICE_TABLES], jobs=[sneaky])


def test_ledger_cleanup_deletes_expired_entries_and_never_exposes_sessions(stores, harness, clock, monkeypatch, rows):
    now = clock.now_ms()
    stores.ledger.record("e-old", "op-1", "read_orders", "session-secret-1", now + HOUR)
    stores.ledger.record("e-live", "op-1", "read_orders", "session-secret-2", now + 3 * HOUR)
    clock.advance(hours=2)
    assert stores.ledger.get("e-old") is None  # live expiry
    live = stores.ledger.get("e-live")
    assert "session-secret-2" not in repr(live) and "session_digest" not in live
    assert rows.get("operator_access_ledger", "e-live")["session_digest"] != "session-secret-2"

    result = harness.run("clean_operator_access_ledger", lambda ctx: clean_operator_access_ledger(stores.ledger, ctx))

    assert result.outcome is Outcome.RAN and result.summary == {"batches": 1, "ledger_deleted": 1}
    assert rows.count("operator_access_ledger") == 1
    clock.advance(minutes=55)  # the next tick, before "e-live" expires: nothing changes twice
    again = harness.run("clean_operator_access_ledger", lambda ctx: clean_operator_access_ledger(stores.ledger, ctx))
    assert again.outcome is Outcome.RAN and again.summary["ledger_deleted"] == 0


def test_ledger_batches_are_bounded_and_a_lost_lease_stops_it(stores, harness, clock, monkeypatch, rows):
    monkeypatch.setattr(ledger_cleanup, "LEDGER_BATCH", 2)
    for i in range(5):
        stores.ledger.record(f"e{i}", "op", "x", "s", clock.now_ms() + 1)
    clock.advance(hours=1)
    result = harness.run(
        "clean_operator_access_ledger",
        lambda ctx: clean_operator_access_ledger(stores.ledger, ctx),
        context=StealingContext(harness, "clean_operator_access_ledger"),
    )
    assert result.outcome is Outcome.LEASE_LOST and result.summary["batches"] == 1
    assert rows.count("operator_access_ledger") == 3
