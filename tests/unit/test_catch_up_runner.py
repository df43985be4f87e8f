"""The runner's catch-up: one run for a past tick, decided in the acquire with the lease and the gate.

Every test runs on moto and on dynalite (which returns no old image with a refusal).
"""

from __future__ import annotations

import pytest

from jobfence.registry import CatchUp
from jobfence.scheduled import Outcome
from jobfence.triggers import Trigger
from tests.aws_faults import Faults, acquires
from tests.backends import backend, dynamodb, pytest_generate_tests, tables  # noqa: F401
from tests.runner_support import Harness, counting_job, spec

HOUR = 3_600_000
JOB = spec(catch_up=CatchUp.ONCE, catch_up_window_s=6 * 3600)


@pytest.fixture
def h(dynamodb, tables, clock):
    return Harness(dynamodb, tables, clock)


def catch_up(h, tick, job=None):
    return h.tick(JOB, job or counting_job(1, []), trigger=Trigger("catch_up", tick, requested_by="auditor"))


def test_a_catch_up_runs_once_and_its_row_names_its_trigger_and_tick(h, clock):
    # GIVEN the 00:00 tick ran, and 01:00 and 02:00 were never delivered
    t0 = clock.now_ms()
    assert h.tick(JOB, counting_job(1, [])).outcome is Outcome.RAN
    clock.set(t0 + 2 * HOUR + 5 * 60_000)
    # WHEN the auditor catches up 02:00
    result = catch_up(h, t0 + 2 * HOUR)
    # THEN it ran once, its row says catch_up for that tick, who asked, and it went through the gate (stamped)
    assert result.outcome is Outcome.RAN
    row = h.rows()[0]
    assert (row["trigger"], row["scheduled_at"], row["requested_by"]) == ("catch_up", t0 + 2 * HOUR, "auditor")
    assert h.leases.read("job_a")["last_started_at"] == clock.now_ms()
    outcome_line = [line for line in h.logs() if line.get("run_id") == result.run_id][-1]
    assert outcome_line["trigger"] == "catch_up" and outcome_line["tick"] == t0 + 2 * HOUR


def test_a_duplicate_or_older_catch_up_writes_nothing_and_runs_nothing(h, clock, dynamodb, request_counter):
    t0 = clock.now_ms()
    clock.set(t0 + 2 * HOUR)
    assert catch_up(h, t0 + HOUR).outcome is Outcome.RAN
    clock.advance(ms=3 * HOUR)  # past the gate: only "a run started since the tick" refuses it
    request_counter.attach(dynamodb)
    # WHEN the same catch-up is delivered again, and one for an older tick arrives late
    for tick in (t0 + HOUR, t0):
        result = catch_up(h, tick)
        # THEN the pre-gate read sees a run started since: skipped_served, 0 writes, no row
        assert result.outcome is Outcome.SKIPPED_SERVED
    assert request_counter.writes == 0 and request_counter.count("GetItem") == 2
    assert len(h.rows()) == 1


def test_a_racing_catch_up_is_refused_by_the_acquire_itself(h, clock, dynamodb):
    # GIVEN two copies of one catch-up: the first passes the pre-gate, then pauses before its acquire
    t0 = clock.now_ms()
    clock.set(t0 + 2 * HOUR)
    faults = Faults(dynamodb)
    other = {}

    def the_other_copy_runs():
        clock.advance(seconds=1)
        other["result"] = catch_up(h, t0 + HOUR)

    faults.paused("UpdateItem", then=the_other_copy_runs, when=acquires)
    # WHEN the paused copy's acquire is finally sent
    first = catch_up(h, t0 + HOUR)
    # THEN the other copy ran, and this one was refused by the condition, not the (stale) pre-gate
    assert other["result"].outcome is Outcome.RAN
    assert first.outcome is Outcome.SKIPPED_SERVED
    assert [r["run_id"] for r in h.rows()] == [other["result"].run_id]


def test_a_catch_up_acquire_re_sent_after_a_lost_reply_is_its_own_run(h, clock, dynamodb):
    # GIVEN the catch-up's acquire is applied, its reply lost, and botocore sends it again
    t0 = clock.now_ms()
    clock.set(t0 + 2 * HOUR)
    faults = Faults(dynamodb)
    faults.resent("UpdateItem", when=acquires)
    # WHEN it runs THEN the refused copy (a run started since the tick: our own) is recognised as ours
    result = catch_up(h, t0 + HOUR)
    assert faults.count("resend") == 1
    assert result.outcome is Outcome.RAN
    row, = h.rows()
    assert row["outcome"] == "ran" and row["fence"] == 1
    assert "holder" not in h.leases.read("job_a")  # released


def test_a_catch_up_meets_the_lease_and_the_gate_like_a_tick(h, clock):
    t0 = clock.now_ms()
    clock.set(t0 + HOUR + 10 * 60_000)

    def slow(ctx):
        # while it runs, a catch-up for the earlier missed tick arrives: the lease is live
        held["during"] = catch_up(h, t0)
        yield {"done": 1}

    held = {}
    manual = h.tick(JOB, slow, trigger=Trigger("manual", clock.now_ms(), requested_by="ops"))
    assert manual.outcome is Outcome.RAN
    # the live holder started after the tick: the request is served by it (not merely leased)
    assert held["during"].outcome is Outcome.SKIPPED_SERVED
    assert len(h.rows()) == 1
