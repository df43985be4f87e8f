"""A Hypothesis state machine over durable batches: enqueue, deliver, duplicate, crash a worker,
advance the clock and reclaim, checking invariants 5-7 (docs/guarantees.md) after every step."""

from __future__ import annotations

import os

import boto3
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from moto import mock_aws

from jobfence.clock import FrozenClock
from jobfence.testing.grants import within_grant
from jobfence.work import BatchRef, BatchStatus, ItemStatus, QuotaHold, parse_wakeup
from ops.harness import build_rig, record
from providers.items_fake import Behaviour
from tests.support import create_catalog_tables

TENANTS = ("acme", "globex")
BEHAVIOURS = st.sampled_from(
    [("succeed", 0)] * 4 + [("fail_times", 1), ("fail_times", 3), ("fail", 0), ("reject", 0)]
)


class DurableBatches(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._mock = mock_aws()
        self._mock.start()
        client = boto3.client("dynamodb", region_name=os.environ["AWS_DEFAULT_REGION"])
        tables = create_catalog_tables(client, names={"listing_batches", "listing_items", "listing_quota"})
        self.clock = FrozenClock()
        self.rig = build_rig(client, tables, self.clock, guard=within_grant)
        for tenant in TENANTS:
            self.rig.quota.grant(tenant, 40)
        self.batches: list[BatchRef] = []
        self.seen_bodies: list[str] = []
        self.terminal: dict = {}

    def teardown(self) -> None:
        try:
            # invariant 5: after any crash, bounded reclaim sweeps bring every item to an end
            for _ in range(12):
                if self._settled():
                    break  # every item terminal, every batch final: further sweeps have nothing to do
                self.clock.advance(minutes=16)
                self.rig.reclaimer.run_once()
                self._drain()
            for row in self._items():
                assert row.status in (ItemStatus.COMPLETED, ItemStatus.FAILED), row
            for ref in self.batches:
                assert self.rig.store.batches.batch(ref).status is BatchStatus.FINALIZED
            self.books_balance()
            self.finalized_batches_match_rows()
        finally:
            self.rig.generator.calls.release()
            self._mock.stop()

    # -- helpers ------------------------------------------------------------------------------

    def _settled(self) -> bool:
        return (all(r.status in (ItemStatus.COMPLETED, ItemStatus.FAILED) for r in self._items())
                and all(self.rig.store.batches.batch(ref).status is BatchStatus.FINALIZED for ref in self.batches))

    def _items(self, ref: BatchRef | None = None):
        # one scan of the (small) test table, not a batch's 64 item partitions queried per invariant and step:
        # the invariants run after every step
        rows = self.rig.store.items.all_item_rows()
        return [r for r in rows if BatchRef(r.tenant, r.batch_id) in ([ref] if ref else self.batches)]

    def _deliver(self, messages):
        result = self.rig.workers["generation"].process([record(m) for m in messages])
        self.rig.queues["generation"].settle(messages, result)
        return result

    def _drain(self) -> None:
        for _ in range(200):
            taken = self.rig.queues["generation"].take(10)
            if not taken:
                return
            self._deliver(taken)

    # -- rules --------------------------------------------------------------------------------

    @rule(tenant=st.sampled_from(TENANTS), behaviours=st.lists(BEHAVIOURS, min_size=1, max_size=6))
    def enqueue(self, tenant, behaviours):
        ref = BatchRef(tenant, f"b{len(self.batches)}")
        before = len(self.rig.queues["generation"].messages)
        self.rig.submit(tenant, ref.batch_id, len(behaviours))
        for i, (name, times) in enumerate(behaviours):
            self.rig.generator.script(f"{tenant}:{ref.batch_id}:i{i:05d}", Behaviour(name), times)
        self.batches.append(ref)
        self.seen_bodies += [m.body for m in self.rig.queues["generation"].messages[before:]]

    @rule(n=st.integers(1, 10), newest_first=st.booleans())
    def deliver(self, n, newest_first):
        taken = self.rig.queues["generation"].take(n, newest_first=newest_first)
        self.seen_bodies += [m.body for m in taken]
        if taken:
            self._deliver(taken)

    @precondition(lambda self: self.seen_bodies)
    @rule(data=st.data())
    def duplicate(self, data):
        body = data.draw(st.sampled_from(self.seen_bodies))
        result = self.rig.workers["generation"].process([{"messageId": "dup", "body": body}])
        assert result.outcomes["dup"].ok  # a duplicate never becomes a failure to redeliver

    @rule(n=st.integers(1, 3))
    def crash_worker(self, n):
        # a worker claims and dies: its rows stay running, its messages are gone with it
        taken = self.rig.queues["generation"].take(n)
        for m in taken:
            self.rig.queues["generation"].messages.remove(m)
        keys = list({parse_wakeup(m.body) for m in taken})
        if keys:
            self.rig.store.items.claim(keys, "generation", 5)

    @rule(minutes=st.integers(1, 20))
    def advance_clock(self, minutes):
        self.clock.advance(minutes=minutes)

    @rule()
    def reclaim(self):
        self.rig.reclaimer.run_once()

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def attempts_never_exceed_the_cap_and_terminal_rows_never_move(self):
        for row in self._items():
            assert row.attempts <= 5
            if row.key in self.terminal:
                assert row == self.terminal[row.key], "automation touched a terminal item"
            elif row.status in (ItemStatus.COMPLETED, ItemStatus.FAILED):
                self.terminal[row.key] = row

    @invariant()
    def finalized_batches_match_rows(self):
        for ref in self.batches:
            batch = self.rig.store.batches.batch(ref)
            if batch.status is BatchStatus.FINALIZED:
                rows = self._items(ref)
                assert batch.completed == sum(r.status is ItemStatus.COMPLETED for r in rows)
                assert batch.failed == sum(r.status is ItemStatus.FAILED for r in rows)
                assert all(r.status in (ItemStatus.COMPLETED, ItemStatus.FAILED) for r in rows)

    @invariant()
    def books_balance(self):
        rows = self._items()
        for tenant in TENANTS:
            bal = self.rig.quota.balance(tenant)
            mine = [r for r in rows if r.tenant == tenant]
            assert bal.used == bal.reserved - bal.refunded
            assert bal.reserved == sum(r.quota_reservations for r in mine)
            assert bal.refunded == sum(r.quota_refunds for r in mine)
            for r in mine:
                assert r.quota_reservations - r.quota_refunds == (1 if r.quota is QuotaHold.RESERVED else 0)
                assert r.quota_refunds <= 1  # without retry_failed, a unit is refunded at most once
                if r.status is ItemStatus.FAILED:
                    assert r.quota is not QuotaHold.RESERVED


DurableBatches.TestCase.settings = settings(
    max_examples=int(os.environ.get("WORK_STATEFUL_EXAMPLES", "10")),
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDurableBatches = DurableBatches.TestCase
