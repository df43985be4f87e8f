"""Every commerce job stops before its next batch when its lease is lost; readers apply live expiry."""

from __future__ import annotations

from jobfence.scheduled import Outcome
from jobs.commerce import cancellations, invitations, safety_net
from jobs.commerce.cancellations import recover_pending_cancellations
from jobs.commerce.invitations import expire_agent_invitations
from jobs.commerce.safety_net import capture_abandoned_deferred

from commerce_harness import StealingContext, request_cancellations

HOUR = 3_600_000


def test_safety_net_stops_after_the_batch_in_which_its_lease_was_lost(stores, payments, harness, clock, monkeypatch):
    monkeypatch.setattr(safety_net, "SAFETY_NET_BATCH", 2)
    for i in range(5):
        payments.approve(f"O{i}", 100)
        stores.deferred.create(f"i{i}", f"O{i}", 100)
    clock.advance(minutes=22)
    job = lambda ctx: capture_abandoned_deferred(stores.deferred, payments, ctx, harness.logger)  # noqa: E731
    result = harness.run("capture_abandoned_deferred", job, context=StealingContext(harness, "capture_abandoned_deferred"))
    assert result.outcome is Outcome.LEASE_LOST and result.summary["captured"] == 2
    assert len(payments.calls) == 2  # the second batch never started


def test_cancellations_stop_after_the_batch_in_which_the_lease_was_lost(stores, harness, clock, monkeypatch):
    monkeypatch.setattr(cancellations, "CANCEL_BATCH", 2)
    request_cancellations(stores, 5)
    clock.advance(minutes=20)
    job = lambda ctx: recover_pending_cancellations(stores.orders, stores.operations, ctx, harness.logger)  # noqa: E731
    result = harness.run("recover_pending_cancellations", job, context=StealingContext(harness, "recover_pending_cancellations"))
    assert result.outcome is Outcome.LEASE_LOST and result.summary["cancelled"] == 2
    assert sum(stores.orders.get(f"o{i}").status == "cancelled" for i in range(5)) == 2


def test_invitations_stop_after_the_batch_in_which_the_lease_was_lost(stores, harness, clock, monkeypatch, rows):
    monkeypatch.setattr(invitations, "INVITATION_BATCH", 2)
    for i in range(5):
        stores.invitations.create(f"i{i}", "acc", "a@example.com", clock.now_ms() + 1)
    clock.advance(hours=1)
    job = lambda ctx: expire_agent_invitations(stores.invitations, ctx)  # noqa: E731
    result = harness.run("expire_agent_invitations", job, context=StealingContext(harness, "expire_agent_invitations"))
    assert result.outcome is Outcome.LEASE_LOST and result.summary["invitations_deleted"] == 2
    assert rows.count("agent_invitations") == 3


def test_a_fenced_write_after_the_term_ended_is_refused_mid_batch(stores, payments, harness, clock):
    # GIVEN the holder's term expires while it is inside a batch (a paused isolate)
    for i in range(3):
        payments.approve(f"O{i}", 100)
        stores.deferred.create(f"i{i}", f"O{i}", 100)
    clock.advance(minutes=22)

    class PausingPayments:
        def capture(self, order_id, key):
            result = payments.capture(order_id, key)
            if order_id == "O0":
                clock.advance(minutes=31)  # the lease (30 min) runs out during this call
            return result

    job = lambda ctx: capture_abandoned_deferred(stores.deferred, PausingPayments(), ctx, harness.logger)  # noqa: E731
    result = harness.run("capture_abandoned_deferred", job)
    # THEN its write is rejected by the fence, the job stops, and the next run reconciles with the same key
    assert result.outcome is Outcome.LEASE_LOST
    assert stores.deferred.get("i0").status == "capturing"  # claimed under the live term, settled later by key
    clock.advance(minutes=5)
    again = harness.run("capture_abandoned_deferred", lambda ctx: capture_abandoned_deferred(stores.deferred, payments, ctx, harness.logger))
    assert again.summary["captured"] == 3 and payments.captures_of("O0") == 1
    assert stores.deferred.get("i0").captured_by == "safetynet"


def test_rows_restored_from_a_backup_are_hidden_by_every_reader(stores, clock):
    # GIVEN rows written (as a restore would) with expiries already in the past
    past = clock.now_ms() - HOUR
    stores.intents.create("i", "acc", "signup", past)
    stores.invitations.create("inv", "acc", "a@example.com", past)
    stores.diagnostics.record("d", "acc", ["r"], "h", "t", past, 1, 1)
    stores.ledger.record("e", "op", "x", "s", past)
    stores.activity.record("acc", "ev", "login", past - 30 * 24 * HOUR)
    # THEN no reader shows them, before any deletion job ran
    assert stores.intents.status("i").value == "expired"
    assert stores.invitations.get("inv") is None
    assert stores.diagnostics.read("d") is None
    assert stores.ledger.get("e") is None
    assert stores.activity.recent("acc") == []
