"""Hypothesis stateful test of the lease: invariants 1 and 2 after every step.

Holders acquire, renew, release, fenced-write and crash (forget their term
without releasing) while the clock advances. A model of who owns the current
term predicts every answer; after each step we check that at most one holder
has an unexpired term (invariant 1) and that a holder whose term was taken over
cannot renew, release or fenced-write (invariant 2, via the predictions).
"""

from __future__ import annotations

import boto3
import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from moto import mock_aws

from jobfence.clock import FrozenClock
from jobfence.errors import IntervalNotElapsed, LeaseHeld, LeaseLost
from jobfence.lease import LeaseStore
from jobfence.testing.sim.markers import marker_write
from tests.support import create_catalog_tables

TTL = 10_000
HOLDERS = ("a", "b", "c")


class LeaseMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.mock = mock_aws()
        self.mock.start()
        self.client = boto3.client("dynamodb")
        self.tables = create_catalog_tables(self.client, names={"leases", "runs"})
        self.clock = FrozenClock()
        self.store = LeaseStore(self.client, self.tables["leases"], self.clock)
        self.terms = {}  # holder -> Lease it believes it has
        self.owner = None  # the lease_id DynamoDB holds, per the model
        self.owner_expires = 0
        self.writes = 0

    def teardown(self):
        self.mock.stop()

    def _free(self):
        return self.owner is None or self.owner_expires < self.clock.now_ms()

    @rule(holder=st.sampled_from(HOLDERS))
    def acquire(self, holder):
        free = self._free()
        try:
            lease = self.store.acquire("job", holder, TTL)
        except (LeaseHeld, IntervalNotElapsed):
            assert not free, "a free lease was refused"
            return
        assert free, "a live lease was taken"
        self.terms[holder] = lease
        self.owner, self.owner_expires = lease.lease_id, lease.expires_at

    @precondition(lambda self: self.terms)
    @rule(data=st.data())
    def renew(self, data):
        holder = data.draw(st.sampled_from(sorted(self.terms)))
        lease = self.terms[holder]
        mine = lease.lease_id == self.owner
        try:
            renewed = self.store.renew(lease)
        except LeaseLost:
            assert not mine, "the owner could not renew"
            del self.terms[holder]
            return
        assert mine, "a superseded holder renewed"
        self.terms[holder] = renewed
        self.owner_expires = renewed.expires_at

    @precondition(lambda self: self.terms)
    @rule(data=st.data())
    def release(self, data):
        holder = data.draw(st.sampled_from(sorted(self.terms)))
        lease = self.terms.pop(holder)
        mine = lease.lease_id == self.owner
        try:
            self.store.release(lease)
        except LeaseLost:
            assert not mine, "the owner could not release"
            return
        assert mine, "a superseded holder released"
        self.owner = None

    @precondition(lambda self: self.terms)
    @rule(data=st.data())
    def fenced_write(self, data):
        holder = data.draw(st.sampled_from(sorted(self.terms)))
        lease = self.terms[holder]
        allowed = lease.lease_id == self.owner and self.owner_expires > self.clock.now_ms()
        write = marker_write(self.tables["runs"], job="w", run_key=str(self.writes))
        try:
            with self.store.transaction(lease) as tx:
                tx.add(write)
        except LeaseLost:
            assert not allowed, "the live owner's write was rejected"
            return
        assert allowed, "a write outside the live term went through"
        self.writes += 1

    @precondition(lambda self: self.terms)
    @rule(data=st.data())
    def crash(self, data):
        # the holder's isolate dies: it forgets its term, the lease item stays
        del self.terms[data.draw(st.sampled_from(sorted(self.terms)))]

    @rule(ms=st.integers(min_value=1, max_value=2 * TTL))
    def advance(self, ms):
        self.clock.advance(ms=ms)

    @invariant()
    def at_most_one_unexpired_holder(self):
        now = self.clock.now_ms()
        live = [h for h, lease in self.terms.items() if lease.lease_id == self.owner and self.owner_expires > now]
        assert len(live) <= 1
        item = self.client.get_item(TableName=self.tables["leases"], Key={"job": {"S": "job"}}).get("Item")
        if item and "lease_id" in item:
            assert item["lease_id"]["S"] == self.owner
        else:
            assert self.owner is None

    @invariant()
    def fenced_rows_match_the_model(self):
        assert self.client.scan(TableName=self.tables["runs"], Select="COUNT")["Count"] == self.writes


LeaseMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=25, deadline=None)
TestLeaseMachine = LeaseMachine.TestCase
