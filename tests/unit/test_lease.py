"""The fenced lease store on moto (in-process): acquire, gate, renew, release, fenced write."""

from __future__ import annotations

import pytest
from botocore.exceptions import ConnectionClosedError

from jobfence.errors import ConditionFailed, IntervalNotElapsed, LeaseHeld, LeaseLost
from jobfence.lease import LeaseStore

TTL = 30 * 60_000
HOUR = 3_600_000


@pytest.fixture
def leases(dynamodb, tables, clock) -> LeaseStore:
    return LeaseStore(dynamodb, tables["leases"], clock)


def put_marker(tables, name):
    return {"Put": {"TableName": tables["runs"], "Item": {"job": {"S": "marker"}, "run_key": {"S": name}}}}


def test_acquire_takes_a_free_lease_and_bumps_the_fence(leases, clock):
    # GIVEN a job never run WHEN two holders acquire one after the other's release
    first = leases.acquire("job", "a", TTL)
    leases.release(first)
    second = leases.acquire("job", "b", TTL)
    # THEN each term has its own id and the fence only grows
    assert (first.fence, second.fence) == (1, 2)
    assert first.lease_id != second.lease_id
    assert second.expires_at == clock.now_ms() + TTL


def test_live_lease_refuses_a_second_holder_and_names_the_competitor(leases):
    leases.acquire("job", "a", TTL)
    with pytest.raises(LeaseHeld) as refused:
        leases.acquire("job", "b", TTL)
    assert refused.value.competing["holder"] == "a"


def test_expired_lease_is_taken_over_and_the_old_holder_is_fenced_out(leases, clock, tables):
    # GIVEN holder a's term has run out without a release (its isolate died)
    old = leases.acquire("job", "a", TTL)
    clock.advance(ms=TTL + 1)
    # WHEN b acquires
    new = leases.acquire("job", "b", TTL)
    assert new.fence == old.fence + 1
    # THEN a can neither renew, nor release, nor write under the lease
    with pytest.raises(LeaseLost) as lost:
        leases.renew(old)
    assert lost.value.competing["holder"] == "b"
    with pytest.raises(LeaseLost):
        leases.release(old)
    with pytest.raises(LeaseLost):
        leases.fenced_write(old, [put_marker(tables, "from-a")])
    # AND b's term is intact
    leases.fenced_write(new, [put_marker(tables, "from-b")])
    leases.renew(new)
    leases.release(new)


def test_expired_but_not_taken_over_holder_cannot_fenced_write(leases, clock, tables, dynamodb):
    # GIVEN a holder whose term expired while nobody else acquired
    lease = leases.acquire("job", "a", TTL)
    clock.advance(ms=TTL)
    # WHEN it tries a protected write THEN DynamoDB rejects it (expires_at > now fails)
    with pytest.raises(LeaseLost):
        leases.fenced_write(lease, [put_marker(tables, "late")])
    assert "Item" not in dynamodb.get_item(
        TableName=tables["runs"], Key={"job": {"S": "marker"}, "run_key": {"S": "late"}}
    )


def test_fenced_write_reports_the_callers_own_condition_separately(leases, tables):
    lease = leases.acquire("job", "a", TTL)
    leases.fenced_write(lease, [put_marker(tables, "once")])
    guarded = put_marker(tables, "once")
    guarded["Put"]["ConditionExpression"] = "attribute_not_exists(job)"
    guarded["Put"]["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    with pytest.raises(ConditionFailed) as refused:
        leases.fenced_write(lease, [guarded])
    assert refused.value.index == 0
    assert refused.value.item["run_key"] == "once"


def test_renewal_retried_after_its_response_was_lost_still_succeeds(leases, dynamodb, clock):
    # GIVEN a renewal that DynamoDB applied but whose response never reached us
    lease = leases.acquire("job", "a", TTL)
    clock.advance(minutes=5)
    lost = {"done": False}

    def drop_response(http_response, parsed, model, **_):
        if model.name == "UpdateItem" and not lost["done"]:
            lost["done"] = True
            raise ConnectionClosedError(endpoint_url="dynamodb")

    dynamodb.meta.events.register("after-call.dynamodb.UpdateItem", drop_response)
    with pytest.raises(ConnectionClosedError):
        leases.renew(lease)
    dynamodb.meta.events.unregister("after-call.dynamodb.UpdateItem", drop_response)
    # WHEN the same holder retries with the same term THEN it succeeds
    renewed = leases.renew(lease)
    assert renewed.lease_id == lease.lease_id
    assert renewed.expires_at == clock.now_ms() + TTL


def test_release_retried_after_its_response_was_lost_is_not_a_lost_lease(leases, dynamodb):
    lease = leases.acquire("job", "a", TTL)
    leases.release(lease)
    leases.release(lease)  # same fence, nobody holds it: our own earlier release


def test_release_keeps_the_fence_and_the_gate_stamp(leases, dynamodb, tables, clock):
    lease = leases.acquire("job", "a", TTL, interval_ms=HOUR)
    leases.release(lease)
    item = dynamodb.get_item(TableName=tables["leases"], Key={"job": {"S": "job"}})["Item"]
    assert "holder" not in item and "lease_id" not in item
    assert item["fence"] == {"N": "1"}
    assert item["last_started_at"] == {"N": str(clock.now_ms())}


def test_gate_refuses_inside_the_interval_and_admits_a_tick_a_few_ms_early(leases, clock):
    # GIVEN an hourly job that started at t0 and released
    leases.release(leases.acquire("job", "a", TTL, interval_ms=HOUR))
    # WHEN a duplicate tick arrives a minute later THEN the gate refuses it
    clock.advance(minutes=1)
    with pytest.raises(IntervalNotElapsed):
        leases.acquire("job", "b", TTL, interval_ms=HOUR)
    # WHEN the next tick arrives 5 ms before its nominal boundary THEN it runs (10 % tolerance)
    clock.advance(ms=HOUR - 60_000 - 5)
    assert leases.acquire("job", "c", TTL, interval_ms=HOUR).holder == "c"


def test_gate_tolerance_is_ten_percent_not_more(leases, clock):
    leases.release(leases.acquire("job", "a", TTL, interval_ms=HOUR))
    clock.advance(ms=int(HOUR * 0.9) - 1)
    with pytest.raises(IntervalNotElapsed):
        leases.acquire("job", "b", TTL, interval_ms=HOUR)
    clock.advance(ms=1)
    leases.acquire("job", "b", TTL, interval_ms=HOUR)


def test_held_lease_is_reported_as_held_even_when_the_gate_would_also_refuse(leases):
    leases.acquire("job", "a", TTL, interval_ms=HOUR)
    with pytest.raises(LeaseHeld):
        leases.acquire("job", "b", TTL, interval_ms=HOUR)


def test_peek_predicts_skips_without_writing(leases, clock, dynamodb, request_counter):
    request_counter.attach(dynamodb)
    state = leases.peek("job")
    assert leases.would_skip(state, clock.now_ms(), HOUR) is None
    lease = leases.acquire("job", "a", TTL, interval_ms=HOUR)
    assert leases.would_skip(leases.peek("job"), clock.now_ms(), HOUR) is LeaseHeld
    leases.release(lease)
    assert leases.would_skip(leases.peek("job"), clock.now_ms(), HOUR) is IntervalNotElapsed
    assert request_counter.count("GetItem") == 3
    assert request_counter.writes == 2  # the acquire and the release, nothing from peek


def test_trust_window_ends_a_margin_before_expiry(leases, clock):
    lease = leases.acquire("job", "a", TTL)
    assert lease.trusted_until(60_000) == clock.now_ms() + TTL - 60_000
    clock.advance(minutes=10)
    renewed = leases.renew(lease)
    assert renewed.trusted_until(60_000) == clock.now_ms() + TTL - 60_000
