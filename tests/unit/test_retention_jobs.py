"""clean_dpop_proofs and clean_conversations (seed 000) through the scheduled runner."""

from __future__ import annotations

import pytest

from jobfence.scheduled import Outcome
from jobs.commerce import retention
from jobs.commerce.conversations import ConversationStore
from jobs.commerce.dpop_proofs import DpopProofStore

MINUTE = 60_000


@pytest.fixture
def dpop(job_harness):
    """clean_dpop_proofs on moto: its own table, the runner, the grant guard (`jobfence.testing`)."""
    return job_harness("clean_dpop_proofs")


@pytest.fixture
def proofs(dpop, clock):
    return DpopProofStore(dpop.tables["dpop_proofs"], clock)


@pytest.fixture
def chats(job_harness):
    return job_harness("clean_conversations")


@pytest.fixture
def conversations(chats, clock):
    return ConversationStore(chats.tables["conversations"], clock)


def scanned_per_query(client):
    """Items DynamoDB read per Query (ScannedCount), summed: what the deletion paid to find rows."""
    totals = {"queries": 0, "scanned": 0}

    def count(parsed, model, **_):
        if model.name == "Query":
            totals["queries"] += 1
            totals["scanned"] += parsed.get("ScannedCount", 0)

    client.meta.events.register("after-call.dynamodb.Query", count)
    return totals


def test_dpop_cleanup_deletes_expired_rows_in_batches_of_1000_and_keeps_live_ones(dpop, proofs, clock, request_counter):
    # GIVEN 2,300 proofs that expire in a minute and 40 that live on
    for i in range(2_300):
        proofs.record(f"old-{i}", clock.now_ms() + MINUTE)
    for i in range(40):
        proofs.record(f"live-{i}", clock.now_ms() + 24 * 60 * MINUTE)
    clock.advance(minutes=2)
    request_counter.attach(proofs.clients()[0])
    job = lambda ctx: retention.clean_dpop_proofs(proofs, ctx)  # noqa: E731
    # WHEN the job runs
    result = dpop.tick(job).result
    # THEN three batches (1,000 + 1,000 + 300) deleted every expired row and no live one
    assert result.outcome is Outcome.RAN
    assert result.summary == {"batches": 3, "deleted": 2_300}
    assert all(proofs.seen(f"live-{i}") for i in range(40))
    assert len(dpop.rows("dpop_proofs")) == 40
    assert request_counter.count("BatchWriteItem") == 2_300 // 25  # deletes go 25 to a request


def test_dpop_cleanup_stops_at_100_batches(dpop, proofs, clock, monkeypatch):
    monkeypatch.setattr(retention, "DPOP_BATCH", 2)
    for i in range(230):
        proofs.record(f"old-{i}", clock.now_ms() + MINUTE)
    clock.advance(minutes=2)
    result = dpop.tick(lambda ctx: retention.clean_dpop_proofs(proofs, ctx)).result
    assert result.summary["batches"] == 100 and result.summary["deleted"] == 200
    assert len(dpop.rows("dpop_proofs")) == 30


def test_dpop_cleanup_cost_does_not_grow_with_live_rows(tables, clock):
    # GIVEN two tables with the same 50 expired rows, one with 10 live rows, one with 1,000
    costs = []
    for live in (10, 1_000):
        store = DpopProofStore(tables["dpop_proofs"], clock)
        for i in range(50):
            store.record(f"old-{live}-{i}", clock.now_ms() + MINUTE)
        for i in range(live):
            store.record(f"live-{live}-{i}", clock.now_ms() + 10**9)
        clock.advance(minutes=2)
        totals = scanned_per_query(store.clients()[0])
        assert store.delete_expired(1_000) == 50
        costs.append(dict(totals))
    # THEN the deletion read exactly the expired rows both times
    assert costs[0] == costs[1] == {"queries": 4, "scanned": 50}


def test_readers_ignore_expired_rows_that_are_not_deleted_yet(dpop, proofs, conversations, clock):
    proofs.record("jti-1", clock.now_ms() + MINUTE)
    conversations.open("c-1", "acct-1", clock.now_ms() + MINUTE)
    assert proofs.seen("jti-1") and conversations.get("c-1") is not None
    assert not proofs.record("jti-1", clock.now_ms() + MINUTE)  # a replay while live
    clock.advance(minutes=1)
    assert not proofs.seen("jti-1") and conversations.get("c-1") is None
    assert len(dpop.rows("dpop_proofs")) == 1  # still stored, just not visible


def test_conversation_cleanup_is_one_bounded_deletion_of_at_most_100(chats, conversations, clock):
    for i in range(150):
        conversations.open(f"c-{i}", "acct", clock.now_ms() + MINUTE)
    clock.advance(minutes=2)
    job = lambda ctx: retention.clean_conversations(conversations, ctx)  # noqa: E731
    first = chats.tick(job).assert_ran().result
    assert first.summary == {"batches": 1, "deleted": 100}
    clock.advance(hours=1)
    chats.tick(job).assert_ran(batches=1, deleted=50)
    assert chats.rows("conversations") == []


def test_a_conversation_extended_after_the_index_read_is_not_deleted(conversations, clock, monkeypatch):
    import jobs.commerce.conversations as module

    conversations.open("c-1", "acct", clock.now_ms() + MINUTE)
    clock.advance(minutes=2)
    real_expired = module.expired

    def expired_then_extended(model, now, limit):
        rows = list(real_expired(model, now, limit))
        conversations.open("c-1", "acct", clock.now_ms() + 60 * MINUTE)  # the user came back
        return iter(rows)

    monkeypatch.setattr(module, "expired", expired_then_extended)
    assert conversations.delete_expired(100) == 0
    assert conversations.get("c-1") is not None
