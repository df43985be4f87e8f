"""The buffer_one overlap policy: one pending request on the lease item, served once, never beside another run.

Every test runs on moto and on dynalite (which returns no old image with a refusal).
"""

from __future__ import annotations

import pytest

from jobfence.lease import PENDING, Pending
from jobfence.registry import Overlap
from jobfence.scheduled import Outcome
from jobfence.triggers import Trigger, buffered_event
from tests.aws_faults import Faults, acquires, read_timeout, releases
from tests.backends import backend, dynamodb, pytest_generate_tests, tables  # noqa: F401
from tests.runner_support import Harness, spec
from tests.support import LambdaContext

HOUR = 3_600_000
MINUTE = 60_000
BUFFERED = spec(overlap=Overlap.BUFFER_ONE, lease_ttl_s=3 * 3600)  # hourly, gate 0.9 h, a run may outlast its hour


def pending_writes(params):
    return "#pending = if_not_exists" in str(params.get("UpdateExpression", ""))


class IsolateDeath(BaseException):
    """The process vanished mid-run: nothing is released or recorded by it."""


@pytest.fixture
def h(dynamodb, tables, clock):
    handed = []
    harness = Harness(dynamodb, tables, clock, invoke_self=handed.append)
    harness.handed = handed
    return harness


def tick(h, job_spec=BUFFERED, job=None, context=None):
    return h.tick(job_spec, job or one_batch, context)


def one_batch(ctx):
    yield {"done": 1}


def long_run(h, during, hours=1, minutes=10):
    """A job whose first run's one batch lasts past the next tick; `during` runs at that tick (another Lambda's).

    Later runs (the buffered one) are one quick batch.
    """
    runs = []

    def job(ctx):
        runs.append(ctx.run_id)
        if len(runs) == 1:
            h.clock.advance(hours=hours, minutes=minutes - 10)
            during()
            h.clock.advance(minutes=10)
        yield {"done": 1}
    return job


def test_a_tick_that_meets_a_live_holder_is_run_once_more_by_the_holder(h, clock, dynamodb, request_counter):
    t0 = clock.now_ms()
    seen = {}

    def next_ticks():
        request_counter.attach(dynamodb)
        seen["tick"] = tick(h)
        seen["duplicate"] = tick(h)  # EventBridge delivers the same tick twice
        seen["calls"] = list(request_counter.calls)
        seen["item"] = h.leases.read("job_a")

    # WHEN the 00:00 run is still running at 01:00 and the 01:00 tick (twice) meets it
    first = tick(h, job=long_run(h, next_ticks))
    # THEN each copy of the tick wrote exactly one conditional write (one read, one write) and ran nothing
    assert seen["tick"].outcome is Outcome.BUFFERED and seen["duplicate"].outcome is Outcome.BUFFERED
    assert seen["calls"] == ["GetItem", "UpdateItem", "GetItem", "UpdateItem"]
    assert seen["item"][PENDING] == t0 + HOUR
    # AND the holder, on releasing, ran the job once more for that tick, then released
    assert first.outcome is Outcome.RAN
    rows = sorted(h.rows(), key=lambda r: r["started_at"])
    assert [(r["trigger"], r["outcome"]) for r in rows] == [("scheduled", "ran"), ("buffered", "ran")]
    assert rows[1]["scheduled_at"] == t0 + HOUR and rows[1]["fence"] == rows[0]["fence"] + 1
    item = h.leases.read("job_a")
    assert PENDING not in item and "holder" not in item
    assert h.handed == []


def test_skip_writes_nothing_where_buffer_one_writes_once(h, clock, dynamodb, request_counter):
    seen = {}

    def next_tick():
        request_counter.attach(dynamodb)
        seen["skip"] = tick(h, job_spec=spec(lease_ttl_s=3 * 3600))
        seen["writes"] = request_counter.writes

    tick(h, job_spec=spec(lease_ttl_s=3 * 3600), job=long_run(h, next_tick))
    assert seen["skip"].outcome is Outcome.SKIPPED_LEASED and seen["writes"] == 0
    assert len(h.rows()) == 1


def test_a_holder_short_of_time_hands_the_request_over_to_its_own_function(h, clock):
    t0 = clock.now_ms()
    context = LambdaContext(remaining_ms=300_000)

    def next_tick():
        assert tick(h).outcome is Outcome.BUFFERED
        context.remaining_ms = 10_000  # below the 30 s batch budget when the holder finishes

    tick(h, job=long_run(h, next_tick), context=context)
    # THEN the holder ran nothing more: it sent its own function the hand-over event, and released
    assert h.handed == [buffered_event(t0 + HOUR)]
    assert len(h.rows()) == 1 and h.leases.read("job_a")[PENDING] == t0 + HOUR
    # WHEN the hand-over is delivered (twice: an async invoke may be) THEN it runs once
    handed = h.tick(BUFFERED, one_batch, trigger=Trigger("buffered", t0 + HOUR))
    again = h.tick(BUFFERED, one_batch, trigger=Trigger("buffered", t0 + HOUR))
    assert handed.outcome is Outcome.RAN and again.outcome is Outcome.SKIPPED_SERVED
    assert [r["trigger"] for r in sorted(h.rows(), key=lambda r: r["started_at"])] == ["scheduled", "buffered"]
    assert PENDING not in h.leases.read("job_a")


def test_a_request_survives_the_holders_death_and_the_next_term_consumes_it(h, clock):
    t0 = clock.now_ms()

    def dies(ctx):
        clock.advance(hours=1)
        assert tick(h).outcome is Outcome.BUFFERED  # 01:00 meets the live holder
        raise IsolateDeath()
        yield {}  # pragma: no cover

    with pytest.raises(IsolateDeath):
        tick(h, job=dies)
    assert h.leases.read("job_a")[PENDING] == t0 + HOUR
    # WHEN the dead term has expired and the next tick acquires
    clock.set(t0 + 3 * HOUR + MINUTE)
    result = tick(h)
    # THEN that term serves the request (consumed in its acquire), the dead run is recorded, nothing runs twice
    assert result.outcome is Outcome.RAN
    assert PENDING not in h.leases.read("job_a")
    assert sorted(r["outcome"] for r in h.rows()) == ["died", "ran"]
    # AND a late hand-over for that tick finds its request gone
    assert h.tick(BUFFERED, one_batch, trigger=Trigger("buffered", t0 + HOUR)).outcome is Outcome.SKIPPED_SERVED


def test_the_holders_own_tick_or_a_gated_tick_is_not_buffered(h, clock):
    seen = {}

    def during():  # 20 min into the holder's run
        seen["own"] = h.tick(BUFFERED, one_batch, trigger=Trigger("scheduled", seen["t0"]))  # a late duplicate of its tick
        seen["gated"] = tick(h)  # an off-schedule tick 20 min after the holder started: the gate says no
        seen["item"] = h.leases.read("job_a")

    seen["t0"] = clock.now_ms()
    tick(h, job=long_run(h, during, hours=0, minutes=30))
    assert seen["own"].outcome is Outcome.SKIPPED_LEASED
    assert seen["gated"].outcome is Outcome.SKIPPED_INTERVAL
    assert PENDING not in seen["item"]
    assert len(h.rows()) == 1


def test_the_pending_write_under_a_lost_reply_and_a_re_send_records_one_request(h, clock, dynamodb):
    t0 = clock.now_ms()
    faults = Faults(dynamodb)
    faults.reply_lost("UpdateItem", when=pending_writes)  # applied, the reply surfaces as a read timeout
    faults.resent("UpdateItem", when=pending_writes)  # applied again by botocore's own re-send
    seen = {}

    def next_tick():
        seen["tick"] = tick(h)
        seen["item"] = h.leases.read("job_a")

    tick(h, job=long_run(h, next_tick))
    # THEN both faults fired, the tick still counts as one recorded request, and it was served once
    assert faults.count("after") == 1 and faults.count("resend") == 1
    assert seen["tick"].outcome is Outcome.BUFFERED
    assert seen["item"][PENDING] == t0 + HOUR
    assert [r["trigger"] for r in sorted(h.rows(), key=lambda r: r["started_at"])] == ["scheduled", "buffered"]


def test_a_pending_write_re_sent_after_its_request_was_served_is_understood_as_served(h, clock, dynamodb):
    # GIVEN the pending write is applied and its reply lost; before the re-send the holder releases and serves it
    t0 = clock.now_ms()
    holder = h.leases.acquire("job_a", "a", BUFFERED.lease_ttl_s * 1000, HOUR)
    clock.advance(hours=1)
    calls = {"n": 0}

    def second_copy(params):
        if pending_writes(params):
            calls["n"] += 1
            return calls["n"] == 2
        return False

    def holder_serves():
        assert h.leases.release(holder) == t0 + HOUR  # the release reads the request back (no extra read)
        clock.advance(seconds=1)
        h.leases.acquire("job_a", "a", BUFFERED.lease_ttl_s * 1000, HOUR, pending_tick=t0 + HOUR)

    faults = Faults(dynamodb)
    faults.reply_lost("UpdateItem", when=pending_writes, error=read_timeout)
    faults.paused("UpdateItem", then=holder_serves, when=second_copy)
    # WHEN the tick's write is retried THEN its refusal (a term started since the tick) reads as served
    assert h.leases.request_pending("job_a", t0 + HOUR, HOUR) is Pending.SERVED
    assert PENDING not in h.leases.read("job_a")


def test_a_pending_write_on_a_free_lease_tells_the_tick_to_acquire(h, clock):
    t0 = clock.now_ms()
    holder = h.leases.acquire("job_a", "a", BUFFERED.lease_ttl_s * 1000, HOUR)
    h.leases.release(holder)
    clock.advance(hours=1)
    assert h.leases.request_pending("job_a", t0 + HOUR, HOUR) is Pending.LEASE_FREE
    assert PENDING not in h.leases.read("job_a")


def test_a_release_refused_after_its_own_lost_reply_still_reports_the_request(h, clock, dynamodb):
    t0 = clock.now_ms()
    holder = h.leases.acquire("job_a", "a", BUFFERED.lease_ttl_s * 1000, HOUR)
    clock.advance(hours=1)
    assert h.leases.request_pending("job_a", t0 + HOUR, HOUR) is Pending.RECORDED
    faults = Faults(dynamodb)
    faults.resent("UpdateItem", when=releases)
    assert h.leases.release(holder) == t0 + HOUR
    assert faults.count("resend") == 1


def test_an_acquire_consumes_the_request_even_when_its_copy_is_re_sent(h, clock, dynamodb):
    t0 = clock.now_ms()
    holder = h.leases.acquire("job_a", "a", BUFFERED.lease_ttl_s * 1000, HOUR)
    clock.advance(hours=1)
    h.leases.request_pending("job_a", t0 + HOUR, HOUR)
    h.leases.release(holder)
    faults = Faults(dynamodb)
    faults.resent("UpdateItem", when=acquires)
    lease = h.leases.acquire("job_a", "b", BUFFERED.lease_ttl_s * 1000, HOUR, pending_tick=t0 + HOUR)
    assert faults.count("resend") == 1 and lease.holder == "b"
    assert PENDING not in h.leases.read("job_a")


def test_the_benchmark_figures_skip_writes_nothing_buffer_one_writes_once():
    # the figures docs/benchmarks.md shows, from the real runner on moto (ops/bench/overlap.py)
    from ops.bench.overlap import overlap_costs

    figures = dict(overlap_costs())
    assert figures["skip: a tick that meets the live holder"] == (1, 0, 0.5, 0)
    assert figures["buffer_one: a tick that meets the live holder"] == (2, 1, 0.5, 1)
    holder_skip = figures["skip: the holder: its run of one batch, and under buffer_one the run it owes"]
    holder_buffer = figures["buffer_one: the holder: its run of one batch, and under buffer_one the run it owes"]
    assert holder_buffer == tuple(2 * x for x in holder_skip)  # exactly one more run, no extra read
    assert figures["catch-up: the same event again (skipped_served)"] == (1, 0, 0.5, 0)
