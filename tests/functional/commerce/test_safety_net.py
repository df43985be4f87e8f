"""The safety net of seed 001 (`capture_abandoned_deferred`) through the scheduled runner on moto."""

from __future__ import annotations

import pytest
from tests.support import dynamodb_operations

from jobfence.errors import StoreError
from jobfence.scheduled import Outcome
from jobs.catalog import CATALOG
from jobs.commerce import safety_net
from jobs.commerce.checkout import capture_for_buyer
from jobs.commerce.deferred_payments import DeferredStatus, Initiator
from jobs.commerce.safety_net import capture_abandoned_deferred



def job(stores, payments, harness):
    return lambda ctx: capture_abandoned_deferred(stores.deferred, payments, ctx, harness.logger)


def seed(stores, payments, n, prefix="i"):
    ids = []
    for i in range(n):
        intent_id = f"{prefix}{i:03d}"
        order_id = f"O-{intent_id}"
        payments.approve(order_id, 1_000 + i)
        stores.deferred.create(intent_id, order_id, 1_000 + i)
        ids.append(intent_id)
    return ids


def test_schedule_is_a_short_rate_behind_an_interval_gate():
    spec = CATALOG.job("capture_abandoned_deferred")
    assert spec.schedule == "rate(5 minutes)"
    assert spec.interval_s == 300
    assert spec.providers == ("paypal",) and spec.secrets == ("paypal_credentials",)


def test_an_intent_is_captured_only_after_twenty_minutes_without_buyer_activity(stores, payments, harness, clock):
    # GIVEN a deferred intent whose buyer was last active 19 minutes ago (seed 001: the cutoff is 20 minutes)
    seed(stores, payments, 1)
    clock.advance(minutes=19)
    # WHEN the safety net runs THEN it leaves the intent and calls nothing
    first = harness.run("capture_abandoned_deferred", job(stores, payments, harness))
    assert first.outcome is Outcome.RAN and first.summary["captured"] == 0 and not payments.calls
    assert stores.deferred.get("i000").status == "deferred"
    # AND the next tick, 24 minutes after the buyer's last activity, captures it
    clock.advance(minutes=5)
    second = harness.run("capture_abandoned_deferred", job(stores, payments, harness))
    assert second.summary["captured"] == 1 and stores.deferred.get("i000").status == "captured"


def test_fifty_intents_some_fail_some_race_the_buyer_some_still_upselling(stores, payments, harness, clock):
    # GIVEN 50 deferred intents created at t0
    ids = seed(stores, payments, 50)
    declined, timed_out, raced, patched = ids[0:5], ids[5:10], ids[10:15], ids[15:20]
    ours = ids[20:]
    for i in declined:
        payments.decline(f"O-{i}")
    for i in timed_out:
        payments.time_out_order(f"O-{i}")
    for i in raced:  # the buyer's own capture reached PayPal, its intent row not updated yet
        payments.capture_elsewhere(f"O-{i}", f"buyer:{i}")
    clock.advance(minutes=17)
    for i in patched:  # these buyers accepted an upsell 5 minutes before the run
        assert stores.deferred.patch_upsell(i, 500, f"u-{i}")
    clock.advance(minutes=5)

    # WHEN the safety net runs
    result = harness.run("capture_abandoned_deferred", job(stores, payments, harness))

    # THEN 45 were scanned, 30 captured by us, 5 reconciled as the buyer's, 5 declined, 5 unknown (timed out)
    assert result.outcome is Outcome.RAN
    assert {k: result.summary[k] for k in ("captured", "failed", "scanned", "reconciled", "unknown", "skipped")} == {
        "captured": 30, "failed": 5, "scanned": 45, "reconciled": 5, "unknown": 5, "skipped": 0,
    }
    for i in ours:
        row = stores.deferred.get(i)
        assert (row.status, row.captured_by) == ("captured", "safetynet")
        assert payments.orders[f"O-{i}"].captured_with == f"safetynet:{i}"
    for i in raced:
        row = stores.deferred.get(i)
        assert (row.status, row.captured_by) == ("captured", "buyer")
        assert payments.orders[f"O-{i}"].captured_with == f"buyer:{i}"
    for i in declined:
        assert stores.deferred.get(i).status == "capture_failed"
    for i in timed_out:  # claimed: the amount is frozen, the next tick settles it with the same key
        row = stores.deferred.get(i)
        assert (row.status, int(row.capture_attempts)) == ("capturing", 1)
        assert not stores.deferred.patch_upsell(i, 100, f"late-{i}")
    for i in patched:
        row = stores.deferred.get(i)
        assert row.status == "deferred" and int(row.amount_cents) == 1_000 + int(i[1:]) + 500
        assert not any(order == f"O-{i}" for _, order, _ in payments.calls)
    assert all(payments.captures_of(f"O-{i}") == 1 for i in ours + raced)

    # WHEN the next tick comes 5 minutes later
    clock.advance(minutes=5)
    calls_before = len(payments.calls)
    second = harness.run("capture_abandoned_deferred", job(stores, payments, harness))

    # THEN only the timed-out ones are resumed (same key) and captured; nothing is captured twice
    assert (second.summary["captured"], second.summary["scanned"], second.summary["failed"], second.summary["unknown"]) == (5, 5, 0, 0)
    retried = payments.calls[calls_before:]
    assert sorted(key for _, _, key in retried) == sorted(f"safetynet:{i}" for i in timed_out)
    assert all(stores.deferred.get(i).status == "deferred" for i in patched)  # patched 10 minutes ago: still live


def test_a_tick_inside_the_interval_is_skipped_without_touching_anything(stores, payments, harness, clock):
    # GIVEN a run that just happened, and an intent that is stale by the next tick
    seed(stores, payments, 3)
    clock.advance(minutes=22)
    assert harness.run("capture_abandoned_deferred", job(stores, payments, harness)).outcome is Outcome.RAN
    payments.approve("O-late", 100)
    stores.deferred.create("late", "O-late", 100)
    clock.advance(minutes=1)
    calls = len(payments.calls)
    # WHEN another tick arrives only 1 minute after the run
    result = harness.run("capture_abandoned_deferred", job(stores, payments, harness))
    # THEN the gate skips it and nothing is called
    assert result.outcome is Outcome.SKIPPED_INTERVAL
    assert len(payments.calls) == calls
    # AND a tick 4.5 minutes after the run (0.9 x interval) runs
    clock.advance(minutes=3, seconds=30)
    assert harness.run("capture_abandoned_deferred", job(stores, payments, harness)).outcome is Outcome.RAN


def test_an_intent_without_a_sale_reference_fails_alone(stores, payments, harness, clock):
    # GIVEN three stale intents, the middle one without a sale reference
    seed(stores, payments, 1, prefix="a")
    stores.deferred.create("b000", None, 700)
    seed(stores, payments, 1, prefix="c")
    clock.advance(minutes=22)
    # WHEN the safety net runs
    result = harness.run("capture_abandoned_deferred", job(stores, payments, harness))
    # THEN that record gets a clear terminal error and the others are captured
    assert (result.summary["captured"], result.summary["failed"]) == (2, 1)
    bad = stores.deferred.get("b000")
    assert bad.status == "capture_failed" and bad.last_error == "invalid: no sale reference"
    assert stores.deferred.get("a000").status == stores.deferred.get("c000").status == "captured"


def test_an_unexpected_provider_error_on_one_intent_never_stops_the_others(stores, payments, harness, clock):
    ids = seed(stores, payments, 3)
    clock.advance(minutes=22)

    class Exploding:
        def capture(self, order_id, key):
            if order_id == "O-i001":
                raise RuntimeError("boom")
            return payments.capture(order_id, key)

    result = harness.run("capture_abandoned_deferred", lambda ctx: capture_abandoned_deferred(stores.deferred, Exploding(), ctx, harness.logger))
    # an unexpected error may have come after the provider acted: unknown, left claimed, resumed next tick
    assert (result.summary["captured"], result.summary["failed"], result.summary["unknown"]) == (2, 0, 1)
    assert stores.deferred.get(ids[1]).status == "capturing"


def test_the_buyer_losing_the_race_is_reconciled_as_the_safety_nets_capture(stores, payments, harness, clock):
    seed(stores, payments, 1)
    clock.advance(minutes=22)
    harness.run("capture_abandoned_deferred", job(stores, payments, harness))
    # WHEN the buyer's own final capture arrives afterwards
    stores.deferred.create("j", "O-i000", 1)  # a second intent row pointing at the captured order
    assert capture_for_buyer(stores.deferred, payments, "j") == "already_captured"
    assert payments.captures_of("O-i000") == 1
    intent = stores.deferred.get("j")
    assert (intent.status, intent.captured_by) == (DeferredStatus.CAPTURED, Initiator.SAFETY_NET)
    assert intent.captured_by is Initiator.SAFETY_NET  # a typed view, not the store's model


def test_an_intent_in_an_unknown_state_is_a_clear_error_naming_it(stores, rows):
    stores.deferred.create("i", "O-i", 100)
    rows.set("payment_intents", ("i",), status="teleported")
    with pytest.raises(StoreError, match="intent i is in an unknown state"):
        stores.deferred.get("i")
    assert rows.get("payment_intents", "i")["status"] == "teleported"  # left as it is


def test_batches_are_bounded_and_paged_and_never_scan(stores, payments, harness, clock, monkeypatch):
    # GIVEN 7 stale intents, 2 of which time out, and a batch size of 3
    monkeypatch.setattr(safety_net, "SAFETY_NET_BATCH", 3)
    ids = seed(stores, payments, 7)
    for i in ids[:2]:
        payments.time_out_order(f"O-{i}")
    clock.advance(minutes=22)
    with dynamodb_operations() as operations:
        result = harness.run("capture_abandoned_deferred", job(stores, payments, harness))
    assert "Query" in operations and "Scan" not in operations  # it reads through its index, never a scan
    # THEN every intent was tried once (the cursor pages past the ones left deferred)
    assert result.summary["scanned"] == 7 and result.summary["batches"] == 3
    assert sorted(o for _, o, _ in payments.calls) == sorted(f"O-{i}" for i in ids)
