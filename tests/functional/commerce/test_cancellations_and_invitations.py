"""`recover_pending_cancellations` and `expire_agent_invitations` through the scheduled runner on moto."""

from __future__ import annotations

from jobfence.lease import LeaseStore
from jobfence.scheduled import Outcome
from jobs.catalog import CATALOG
from jobs.commerce import cancellations, invitations
from jobs.commerce.cancellations import recover_pending_cancellations
from jobs.commerce.financial_operations import OperationKind, OperationStatus
from jobs.commerce.orders import OrderStatus
from jobs.commerce.invitations import expire_agent_invitations
from tests.support import documented_bounds

from commerce_harness import request_cancellations


HOUR = 3_600_000


def cancel_job(stores, harness):
    return lambda ctx: recover_pending_cancellations(stores.orders, stores.operations, ctx, harness.logger)


def test_both_jobs_are_hourly_with_an_hourly_gate_and_call_no_provider():
    for name in ("recover_pending_cancellations", "expire_agent_invitations"):
        spec = CATALOG.job(name)
        assert (spec.schedule, spec.interval_s, spec.providers, spec.secrets) == ("cron(0 * * * ? *)", 3600, (), ())


def test_pending_cancellations_past_the_grace_are_cancelled_once_with_one_return(stores, harness, clock):
    # GIVEN a captured order and an uncaptured one pending cancellation for 20 minutes, one fresh, one paid
    stores.orders.create("paid-cancel", "acc", 1500, "EUR", status="paid", capture_ref="CAP1")
    stores.orders.create("placed-cancel", "acc", 900, "EUR", status="placed")
    stores.orders.create("fresh-cancel", "acc", 100, "EUR", status="paid", capture_ref="CAP2")
    stores.orders.create("just-paid", "acc", 100, "EUR", status="paid", capture_ref="CAP3")
    stores.orders.request_cancellation("paid-cancel")
    stores.orders.request_cancellation("placed-cancel")
    clock.advance(minutes=14)
    stores.orders.request_cancellation("fresh-cancel")  # the request path may still be finishing it
    clock.advance(minutes=6)

    # WHEN the job runs
    result = harness.run("recover_pending_cancellations", cancel_job(stores, harness))

    # THEN the two old ones are cancelled; only the captured one gets a pending return with a stable key
    assert result.outcome is Outcome.RAN
    assert (result.summary["cancelled"], result.summary["returns_created"], result.summary["already_done"]) == (2, 1, 0)
    assert stores.orders.get("paid-cancel").status is OrderStatus.CANCELLED  # a typed view, not the store's model
    assert stores.orders.get("placed-cancel").status == "cancelled"
    assert stores.orders.get("fresh-cancel").status == "cancellation_pending"
    assert stores.orders.get("just-paid").status == "paid"
    ret = stores.operations.get(cancellations.return_operation_id("paid-cancel"))
    assert (ret.kind, ret.status, ret.target_ref, ret.amount_cents) == (OperationKind.RETURN, OperationStatus.PENDING, "CAP1", 1500)
    assert ret.idempotency_key == "cancel:return-paid-cancel"
    assert stores.operations.get(cancellations.return_operation_id("placed-cancel")) is None

    # WHEN it runs again an hour later
    clock.advance(hours=1)
    again = harness.run("recover_pending_cancellations", cancel_job(stores, harness))
    # THEN only the one that became old enough is done; the rest changes nothing twice
    assert (again.summary["cancelled"], again.summary["returns_created"]) == (1, 1)
    assert stores.operations.get(cancellations.return_operation_id("paid-cancel")).updated_at == ret.updated_at


def test_a_return_already_recorded_by_the_request_path_is_not_duplicated(stores, harness, clock):
    stores.orders.create("o", "acc", 1500, "EUR", status="paid", capture_ref="CAP1")
    stores.orders.request_cancellation("o")
    stores.operations.create(cancellations.return_operation_id("o"), "acc", OperationKind.RETURN, "CAP1", 1500, "EUR", "cancel", "o")
    clock.advance(minutes=20)
    result = harness.run("recover_pending_cancellations", cancel_job(stores, harness))
    assert (result.summary["cancelled"], result.summary["returns_created"]) == (1, 0)
    assert stores.orders.get("o").status == "cancelled"


def test_cancellation_batches_are_bounded_and_renewed(stores, harness, clock, monkeypatch):
    monkeypatch.setattr(cancellations, "CANCEL_BATCH", 2)
    request_cancellations(stores, 5)
    clock.advance(minutes=20)
    renewals = []
    original = LeaseStore.renew  # the runner's store (its job harness's own)
    monkeypatch.setattr(LeaseStore, "renew", lambda self, lease: renewals.append(lease.job) or original(self, lease))
    result = harness.run("recover_pending_cancellations", cancel_job(stores, harness))
    assert result.summary["batches"] == 3 and result.summary["cancelled"] == 5
    assert renewals == ["recover_pending_cancellations"] * 2  # before batches 2 and 3 (the short one: its last)


def test_cancellation_batches_stop_at_the_batch_bound(stores, harness, clock, monkeypatch):
    # GIVEN 5 cancellations due, batches of 2 and at most 2 batches a run
    monkeypatch.setattr(cancellations, "CANCEL_BATCH", 2)
    monkeypatch.setattr(cancellations, "CANCEL_MAX_BATCHES", 2)
    request_cancellations(stores, 5)
    clock.advance(minutes=20)
    # WHEN the job runs
    result = harness.run("recover_pending_cancellations", cancel_job(stores, harness))
    # THEN it stops after 2 batches of 2: the fifth waits for the next run
    assert (result.summary["batches"], result.summary["cancelled"]) == (2, 4)
    assert sum(stores.orders.get(f"o{i}").status == "cancelled" for i in range(5)) == 4


def test_invitations_expire_only_when_expired_and_pending(stores, harness, clock, rows):
    now = clock.now_ms()
    stores.invitations.create("old", "acc", "agent@example.com", now + HOUR)
    stores.invitations.create("live", "acc", "agent@example.com", now + 3 * HOUR)
    stores.invitations.create("accepted", "acc", "agent@example.com", now + HOUR)
    assert stores.invitations.accept("accepted")
    clock.advance(hours=2)
    # readers already hide the expired one before deletion catches up
    assert stores.invitations.get("old") is None and stores.invitations.get("live") is not None

    result = harness.run("expire_agent_invitations", lambda ctx: expire_agent_invitations(stores.invitations, ctx))

    assert result.summary["invitations_deleted"] == 1
    assert rows.count("agent_invitations") == 2
    assert stores.invitations.get("accepted").status == "accepted"
    clock.advance(minutes=55)  # the next tick, before "live" expires
    again = harness.run("expire_agent_invitations", lambda ctx: expire_agent_invitations(stores.invitations, ctx))
    assert again.outcome is Outcome.RAN and again.summary["invitations_deleted"] == 0


def test_invitation_batches_are_bounded(stores, harness, clock, monkeypatch):
    monkeypatch.setattr(invitations, "INVITATION_BATCH", 3)
    monkeypatch.setattr(invitations, "INVITATION_MAX_BATCHES", 2)
    for i in range(8):
        stores.invitations.create(f"i{i}", "acc", "a@example.com", clock.now_ms() + 1000)
    clock.advance(hours=1)
    result = harness.run("expire_agent_invitations", lambda ctx: expire_agent_invitations(stores.invitations, ctx))
    # THEN at most 2 batches of 3: the rest waits for the next run
    assert (result.summary["batches"], result.summary["invitations_deleted"]) == (2, 6)


def test_the_job_table_states_the_bounds_the_code_runs():
    # the operator's table in docs/jobs.md says each job's batch bounds: it must say the code's
    assert (f"{invitations.INVITATION_BATCH} a batch, ≤ {invitations.INVITATION_MAX_BATCHES} batches"
            in documented_bounds("expire_agent_invitations"))
    assert (f"{cancellations.CANCEL_BATCH} orders a batch, ≤ {cancellations.CANCEL_MAX_BATCHES} batches"
            in documented_bounds("recover_pending_cancellations"))
