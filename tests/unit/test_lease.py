"""The fenced lease store: acquire, gate, renew, release, fenced write; writes whose reply was lost.

Every test runs on moto (in-process) and on dynalite (a second DynamoDB implementation, over
loopback HTTP, which never returns an old image with a refusal); fenced writes on moto only.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ConnectionClosedError

from jobfence.errors import ErrorKind
from jobfence.errors import ConditionFailed, IntervalNotElapsed, LeaseHeld, LeaseLost, PredecessorUnrecorded, Skip, StoreError
from jobfence.lease import LeaseStore, Term
from jobfence.testing.sim.markers import marker_write
from tests.aws_faults import Faults, acquires, connection_closed, read_timeout, releases, renewals, throttled
from tests.backends import backend, dynamodb, peer_client, pytest_generate_tests, tables  # noqa: F401

TTL = 30 * 60_000
HOUR = 3_600_000


@pytest.fixture
def leases(dynamodb, tables, clock) -> LeaseStore:
    return LeaseStore(dynamodb, tables["leases"], clock)


def put_marker(tables, name, only_if_absent=False):
    return marker_write(tables["runs"], only_if_absent, job="marker", run_key=name)


def fenced_write(leases, lease, *writes):
    with leases.transaction(lease) as tx:
        tx.add(*writes)


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


@pytest.mark.transactions
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
        fenced_write(leases, old, put_marker(tables, "from-a"))
    # AND b's term is intact
    fenced_write(leases, new, put_marker(tables, "from-b"))
    leases.renew(new)
    leases.release(new)


@pytest.mark.transactions
def test_expired_but_not_taken_over_holder_cannot_fenced_write(leases, clock, tables, dynamodb):
    # GIVEN a holder whose term expired while nobody else acquired
    lease = leases.acquire("job", "a", TTL)
    clock.advance(ms=TTL)
    # WHEN it tries a protected write THEN DynamoDB rejects it (expires_at > now fails)
    with pytest.raises(LeaseLost):
        fenced_write(leases, lease, put_marker(tables, "late"))
    assert "Item" not in dynamodb.get_item(
        TableName=tables["runs"], Key={"job": {"S": "marker"}, "run_key": {"S": "late"}}
    )


@pytest.mark.transactions
def test_fenced_write_reports_the_callers_own_condition_separately(leases, tables):
    lease = leases.acquire("job", "a", TTL)
    fenced_write(leases, lease, put_marker(tables, "once"))
    with pytest.raises(ConditionFailed) as refused:
        fenced_write(leases, lease, put_marker(tables, "once", only_if_absent=True))
    assert refused.value.index == 0
    assert refused.value.item["run_key"] == "once"


def test_renewal_retried_after_its_response_was_lost_still_succeeds(leases, dynamodb, clock, request_counter):
    # GIVEN a renewal that DynamoDB applies but whose response never reaches us
    lease = leases.acquire("job", "a", TTL)
    clock.advance(minutes=5)
    lost = {"done": False}

    def drop_response(http_response, parsed, model, **_):
        if model.name == "UpdateItem" and not lost["done"]:
            lost["done"] = True
            raise ConnectionClosedError(endpoint_url="dynamodb")

    dynamodb.meta.events.register("after-call.dynamodb.UpdateItem", drop_response)
    request_counter.attach(dynamodb)
    # WHEN the holder renews THEN the same request is sent again and succeeds
    renewed = leases.renew(lease)
    assert request_counter.count("UpdateItem") == 2
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
    assert leases.would_skip(leases.peek("job"), clock.now_ms(), HOUR) is Skip.LEASED
    leases.release(lease)
    assert leases.would_skip(leases.peek("job"), clock.now_ms(), HOUR) is Skip.INTERVAL
    assert request_counter.count("GetItem") == 3
    assert request_counter.writes == 2  # the acquire and the release, nothing from peek


def test_trust_window_ends_a_margin_before_expiry(leases, clock):
    lease = leases.acquire("job", "a", TTL)
    assert lease.trusted_until(60_000) == clock.now_ms() + TTL - 60_000
    clock.advance(minutes=10)
    renewed = leases.renew(lease)
    assert renewed.trusted_until(60_000) == clock.now_ms() + TTL - 60_000


# -- ambiguous writes: applied, reply lost, sent again --------------------------------------------


def test_a_resent_acquire_refused_by_its_own_term_is_our_term(leases, dynamodb, clock):
    # GIVEN an acquire that DynamoDB applies, whose reply is lost, and that botocore sends again
    faults = Faults(dynamodb)
    faults.resent("UpdateItem", when=acquires)
    # WHEN the second copy is refused (the lease is now held: by us)
    lease = leases.acquire("job", "a", TTL, interval_ms=HOUR, run_id="run-1")
    # THEN the refusal is read as our own term, not as someone else's
    assert faults.count("resend") == 1
    assert (lease.holder, lease.fence, lease.run_id) == ("a", 1, "run-1")
    assert lease.expires_at == clock.now_ms() + TTL
    leases.renew(lease)
    leases.release(lease)


def test_an_acquire_whose_reply_timed_out_is_sent_again_with_the_same_term(leases, dynamodb):
    # GIVEN an acquire applied but surfaced as a read timeout (botocore gave up)
    faults = Faults(dynamodb)
    faults.reply_lost("UpdateItem", when=acquires)
    # WHEN the store sends it again THEN the refusal shows our lease_id: the term is ours
    lease = leases.acquire("job", "a", TTL)
    assert faults.count("after") == 1 and lease.fence == 1
    leases.release(lease)


def test_an_acquire_whose_every_try_went_unanswered_finds_its_term_with_one_read(leases, dynamodb, request_counter):
    # GIVEN an acquire applied, then its reply and both retries' replies lost (no answer at all)
    faults = Faults(dynamodb).reply_lost("UpdateItem", times=3, error=connection_closed, refused_too=True)
    request_counter.attach(dynamodb)
    # WHEN the store gives up retrying THEN one consistent read shows our lease_id: the term is ours
    lease = leases.acquire("job", "a", TTL, run_id="run-1")
    faults.detach()
    assert len(faults.fired) == 3 and request_counter.count("GetItem") == 1
    assert (lease.holder, lease.fence, lease.run_id) == ("a", 1, "run-1")
    leases.release(lease)


def test_an_acquire_throttled_on_every_try_is_not_read_back(leases, dynamodb, request_counter):
    # GIVEN every try refused before it was applied: nothing of ours can be on the item
    Faults(dynamodb).refused_before("UpdateItem", throttled, when=acquires, times=3)
    request_counter.attach(dynamodb)
    with pytest.raises(StoreError) as failed:
        leases.acquire("job", "a", TTL, run_id="run-1")
    # THEN the error stands without a read
    assert failed.value.kind is ErrorKind.THROTTLED and request_counter.count("GetItem") == 0


def test_a_release_whose_reply_was_lost_after_a_successor_acquired_is_not_a_lost_lease(leases, dynamodb, tables, clock):
    # GIVEN our release lands, its reply is lost, and another holder acquires before our copy is re-sent
    lease = leases.acquire("job", "a", TTL)
    successor: list = []

    def lose_and_let_b_in():
        other = peer_client(dynamodb)  # another Lambda: its own client, no faults
        successor.append(LeaseStore(other, tables["leases"], clock).acquire("job", "b", TTL))
        return read_timeout()

    Faults(dynamodb).reply_lost("UpdateItem", when=releases, error=lose_and_let_b_in)
    # WHEN the store re-sends the release THEN the refusal (fence + 1, taken while our term was live) is our own release
    leases.release(lease)
    assert successor[0].fence == lease.fence + 1
    # AND b's term is untouched
    leases.renew(successor[0])


def test_a_release_refused_by_a_takeover_after_expiry_is_still_a_lost_lease(leases, clock):
    lease = leases.acquire("job", "a", TTL)
    clock.advance(ms=TTL + 1)
    leases.acquire("job", "b", TTL)
    with pytest.raises(LeaseLost):
        leases.release(lease)


def test_transient_errors_are_retried_a_bounded_number_of_times(leases, dynamodb, request_counter):
    lease = leases.acquire("job", "a", TTL)
    faults = Faults(dynamodb)
    request_counter.attach(dynamodb)
    # GIVEN two throttles after botocore's own retries: the third copy goes through
    faults.refused_before("UpdateItem", throttled, when=renewals, times=2)
    lease = leases.renew(lease)
    assert request_counter.count("UpdateItem") == 3
    # GIVEN a throttle that does not end: a StoreError of kind THROTTLED, after 3 copies
    faults.refused_before("UpdateItem", throttled, when=releases, times=100)
    with pytest.raises(StoreError) as failed:
        leases.release(lease)
    assert failed.value.kind is ErrorKind.THROTTLED
    assert request_counter.count("UpdateItem") == 6


def test_a_read_timeout_is_a_store_error_not_a_raw_botocore_error(leases, dynamodb):
    Faults(dynamodb).refused_before("GetItem", read_timeout, times=1)
    with pytest.raises(StoreError) as failed:
        leases.peek("job")
    assert failed.value.kind is ErrorKind.REPLY_LOST and "ReadTimeoutError" in str(failed.value)


# -- refusals without an old image (DynamoDB implementations that never return one) ---------------


def test_a_refused_acquire_without_an_old_image_is_classified_by_one_consistent_read(leases, dynamodb, request_counter):
    # GIVEN a live holder, and refusals that come back without the old image
    leases.acquire("job", "a", TTL, interval_ms=HOUR)
    Faults(dynamodb).without_old_image("UpdateItem")
    request_counter.attach(dynamodb)
    # WHEN b tries THEN it is told the lease is held (not that the interval has not elapsed)
    with pytest.raises(LeaseHeld) as refused:
        leases.acquire("job", "b", TTL, interval_ms=HOUR)
    assert refused.value.competing["holder"] == "a"
    assert request_counter.calls == ["UpdateItem", "GetItem"]


def test_a_retried_release_without_an_old_image_is_still_our_release(leases, dynamodb):
    lease = leases.acquire("job", "a", TTL)
    Faults(dynamodb).without_old_image("UpdateItem")
    leases.release(lease)
    leases.release(lease)  # refused, no image: the read shows our fence and no holder


# -- the predecessor: a term taken over without a release -----------------------------------------


def test_acquire_returns_the_term_it_took_over_unreleased(leases, clock):
    # GIVEN run-1's term that was never released
    dead = leases.acquire("job", "a", TTL, run_id="run-1")
    clock.advance(ms=TTL + 1)
    # WHEN the next acquire takes over
    lease = leases.acquire("job", "b", TTL, run_id="run-2")
    # THEN it names the dead term (for its run row); a released term names none
    assert lease.predecessor == Term("job", "run-1", "a", dead.fence, dead.acquired_at, dead.expires_at)
    leases.settle(lease.predecessor)
    leases.release(lease)
    clock.advance(ms=1)
    assert leases.acquire("job", "c", TTL, run_id="run-3").predecessor is None


def test_an_acquire_waits_until_the_copy_it_would_overwrite_is_settled(leases, clock, dynamodb):
    # GIVEN run-1 died unreleased, run-2 took over and died too before recording run-1
    leases.acquire("job", "a", TTL, run_id="run-1")
    clock.advance(ms=TTL + 1)
    second = leases.acquire("job", "b", TTL, run_id="run-2")
    clock.advance(ms=TTL + 1)
    # WHEN run-3 acquires THEN it is refused and told which term to record first (not told "held")
    with pytest.raises(PredecessorUnrecorded) as refused:
        leases.acquire("job", "c", TTL, run_id="run-3")
    assert refused.value.term == second.predecessor
    assert leases.read("job")["fence"] == second.fence  # nothing changed
    # WHEN it settles that copy (twice: a re-sent copy is harmless) THEN it takes over, naming run-2
    Faults(dynamodb).resent("UpdateItem", when=lambda p: "SET prev_holder" in str(p.get("UpdateExpression")))
    leases.settle(refused.value.term)
    third = leases.acquire("job", "c", TTL, run_id="run-3")
    assert (third.fence, third.predecessor.run_id, third.predecessor.fence) == (second.fence + 1, "run-2", second.fence)


def test_a_settle_that_finds_a_later_copy_changes_nothing(leases, clock):
    leases.acquire("job", "a", TTL, run_id="run-1")
    clock.advance(ms=TTL + 1)
    second = leases.acquire("job", "b", TTL, run_id="run-2")
    leases.settle(second.predecessor)
    leases.release(second)
    third = leases.acquire("job", "c", TTL, run_id="run-3")
    before = leases.read("job")
    leases.settle(second.predecessor)  # late: the copy now names run-2 (released, so settled)
    assert leases.read("job") == before and third.predecessor is None


def test_every_skip_is_a_run_outcome_and_every_acquire_refusal_that_skips_names_its_skip():
    from jobfence.errors import RequestServed
    from jobfence.scheduled import Outcome

    assert {Outcome(s.value) for s in Skip} == {Outcome.SKIPPED_LEASED, Outcome.SKIPPED_INTERVAL, Outcome.SKIPPED_SERVED}
    assert (LeaseHeld.skip, IntervalNotElapsed.skip, RequestServed.skip) == (Skip.LEASED, Skip.INTERVAL, Skip.SERVED)
    assert PredecessorUnrecorded.skip is None  # not a skip: the runner records the replaced run and acquires again
