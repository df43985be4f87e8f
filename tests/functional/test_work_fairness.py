"""Tenant fairness on moto: wake-ups carry the tenant as MessageGroupId, and a pipeline's per-tenant
in-flight cap admits at most N of one tenant's items at once, deferring the rest (their rows
untouched), under lost replies, re-sent writes and workers that die holding holds.
"""

from __future__ import annotations

import pytest

from jobfence.work import BatchRef, ItemKey, ItemStatus, Tally, TenantGate
from jobfence.work.sqs import SqsWakeups
from jobfence.work.fairness import new_owner
from jobs.listings.catalog import GENERATION, PIPELINES, TENANT_IN_FLIGHT_CAP, Pipeline
from tests.aws_faults import Faults
from tests.functional.test_work_faults import containing
from ops.harness import record

CAP = 3
HOLD_MS = PIPELINES[GENERATION].timing.item_stale_s * 1000


@pytest.fixture
def rig(work_rig):
    return work_rig({"acme": 1_000, "quiet": 1_000}, in_flight_cap=CAP)


@pytest.fixture
def gate(tables, clock):
    return TenantGate(tables["listing_quota"], clock, GENERATION, CAP, HOLD_MS)


def keys(tenant: str, n: int, batch: str = "b1") -> list[ItemKey]:
    return [ItemKey(tenant, batch, f"i{i:05d}", 0) for i in range(n)]  # the gate reads the tenant only


def gate_client(gate: TenantGate):
    return gate.clients()[0]  # the holds row's own connection


def test_the_catalog_caps_each_pipeline_and_refuses_a_cap_below_one():
    assert {p.tenant_in_flight_cap for p in PIPELINES.values()} == {TENANT_IN_FLIGHT_CAP}
    with pytest.raises(ValueError, match="at least 1"):
        Pipeline("x", "q", "p", PIPELINES[GENERATION].timing, tenant_in_flight_cap=0)
    with pytest.raises(ValueError, match="1..900"):
        Pipeline("x", "q", "p", PIPELINES[GENERATION].timing, defer_delay_s=901)


def test_a_round_claims_up_to_the_cap_and_defers_the_rest_untouched(rig, gate):
    rig.submit("acme", "b1", 10)
    result = rig.deliver(n=10)
    assert result.counts[Tally.COMPLETED] == CAP
    assert result.counts[Tally.DEFERRED] == 10 - CAP
    assert all(o.ok for o in result.outcomes.values())  # deferred messages are acknowledged, not redelivered
    rows = rig.store.batches.describe_batch(BatchRef("acme", "b1")).items
    assert sorted(r.status for r in rows).count(ItemStatus.COMPLETED) == CAP
    waiting = [r for r in rows if r.status is ItemStatus.PENDING]
    assert len(waiting) == 10 - CAP and all(r.attempts == 0 for r in waiting)  # never claimed
    # their wake-ups come back after the pipeline's deferral delay, and the holds were given back
    queue = rig.queues[GENERATION]
    assert len(queue.messages) == 10 - CAP and not queue.visible()
    rig.clock.advance(seconds=PIPELINES[GENERATION].defer_delay_s)
    assert len(queue.visible()) == 10 - CAP
    rig.deliver(n=10)  # 3 more, 4 deferred again
    for _ in range(2):
        rig.clock.advance(seconds=PIPELINES[GENERATION].defer_delay_s)
        rig.drain()
    assert all(r.status is ItemStatus.COMPLETED for r in rig.store.batches.describe_batch(BatchRef("acme", "b1")).items)
    assert gate.live_holds("acme") == {}  # read from the holds row the workers' gate writes


def test_a_tenant_at_its_cap_leaves_room_for_another_tenant(gate):
    a, b = new_owner(), new_owner()
    first = gate.admit(keys("acme", 3), a)
    assert len(first.admitted) == 3 and not first.deferred
    blocked = gate.admit(keys("acme", 2, batch="b2") + keys("quiet", 2), b)
    assert {k.tenant for k in blocked.admitted} == {"quiet"} and len(blocked.admitted) == 2
    assert [k.tenant for k in blocked.deferred] == ["acme", "acme"]
    gate.release(keys("acme", 3), a)
    again = gate.admit(keys("acme", 2, batch="b2"), b)
    assert len(again.admitted) == 2


def test_a_lost_admit_reply_re_sent_counts_its_own_holds_once(gate, clock):
    owner = new_owner()
    faults = Faults(gate_client(gate))
    faults.resent("UpdateItem", when=containing("in_flight"))
    admission = gate.admit(keys("acme", 2), owner)
    assert faults.count("resend") == 1
    assert len(admission.admitted) == 2  # refused by its own version bump, re-read: ours
    assert len(gate.live_holds("acme")) == 2
    assert len(gate.admit(keys("acme", 5, batch="b2"), new_owner()).admitted) == 1  # 2 held, cap 3


def test_a_surfaced_lost_reply_is_settled_by_the_re_read(gate):
    owner = new_owner()
    faults = Faults(gate_client(gate))
    faults.reply_lost("UpdateItem", when=containing("in_flight"))
    admission = gate.admit(keys("acme", 2), owner)
    assert faults.count("after") == 1
    assert len(admission.admitted) == 2 and len(gate.live_holds("acme")) == 2


def test_a_re_sent_release_removes_only_its_own_holds(gate):
    a, b = new_owner(), new_owner()
    gate.admit(keys("acme", 2), a)
    gate.admit(keys("acme", 1, batch="b2"), b)
    faults = Faults(gate_client(gate))
    faults.resent("UpdateItem", when=containing("in_flight"))
    gate.release(keys("acme", 2), a)
    assert faults.count("resend") == 1
    assert list(gate.live_holds("acme")) == ["b2#i00000"]


def test_holds_of_a_dead_worker_expire_after_item_stale_and_are_swept(gate, clock):
    gate.admit(keys("acme", 3), new_owner())  # the worker dies: never released
    assert gate.admit(keys("acme", 1, batch="b2"), new_owner()).deferred
    clock.advance(ms=HOLD_MS + 1)
    admission = gate.admit(keys("acme", 1, batch="b2"), new_owner())
    assert len(admission.admitted) == 1
    assert list(gate.live_holds("acme")) == ["b2#i00000"]
    assert len(gate._read("acme")[0]) == 1  # the expired ones were removed, not just ignored


def test_a_duplicate_delivery_of_an_admitted_item_cannot_release_its_hold(gate):
    a, b = new_owner(), new_owner()
    gate.admit(keys("acme", 1), a)
    holds = gate.live_holds("acme")
    dup = gate.admit(keys("acme", 1), b)  # the same item's second wake-up in another worker
    assert len(dup.admitted) == 1  # rides on a's hold (one item, one hold): the claim decides which runs
    assert gate.live_holds("acme") == holds  # a's hold, not overwritten by b's
    gate.release(keys("acme", 1), b)  # not b's hold: a's stays until a releases it
    assert gate.live_holds("acme") == holds
    gate.release(keys("acme", 1), a)
    assert gate.live_holds("acme") == {}


def test_a_deferred_wake_up_that_cannot_be_sent_is_redelivered_by_sqs(rig, monkeypatch):
    rig.submit("acme", "b1", 5)
    queue = rig.queues[GENERATION]
    taken = queue.take(5)
    monkeypatch.setattr(queue, "send", lambda ks, delay_s=0: list(ks))  # SQS refuses every re-send
    result = rig.workers[GENERATION].process([record(m) for m in taken])
    failed = [o for o in result.outcomes.values() if not o.ok]
    assert len(failed) == 5 - CAP and all("deferred wake-up could not be sent" in o.reason for o in failed)


def test_wake_ups_carry_the_tenant_as_message_group_id_on_the_standard_queue(aws):
    sqs = aws.client("sqs")
    url = sqs.create_queue(QueueName="wakeups")["QueueUrl"]
    assert SqsWakeups(sqs, url).send(keys("acme", 2) + keys("quiet", 1)) == []
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["MessageGroupId"])
    groups = sorted(m["Attributes"]["MessageGroupId"] for m in got["Messages"])
    assert groups == ["acme", "acme", "quiet"]


def test_with_the_cap_a_quiet_tenant_does_not_wait_for_a_noisy_backlog_on_a_standard_queue():
    from ops.bench.fairness import ITEM_S, QUIET_AT_S, WORKERS, scenario

    noisy = 120  # four rounds of the whole fleet, the last two after the quiet tenant arrives
    uncapped = scenario(fair=False, cap=None, noisy=noisy)
    capped = scenario(fair=False, cap=TENANT_IN_FLIGHT_CAP, noisy=noisy)
    assert min(uncapped.dwell_s) >= noisy // (WORKERS * 10) * ITEM_S - QUIET_AT_S  # behind the whole backlog
    assert max(capped.dwell_s) < 1.5 * ITEM_S  # its own round, started as it arrives
    assert capped.deferred > 0 and uncapped.deferred == 0
