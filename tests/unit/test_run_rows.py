"""Run rows under faults: every run that took the lease has a row whose outcome is true
(invariant 12), and a store error never replaces a job's own error (invariant 4).

On moto (in-process) and on dynalite (over loopback HTTP, no old images with refusals).
"""

from __future__ import annotations

import pytest

from jobfence.errors import StoreError
from jobfence.lease import Term
from jobfence.runs import RunStart, RunState
from jobfence.sweep import sweep_dead_runs
from jobfence.scheduled import Outcome
from jobfence.testing import another_party
from tests.aws_faults import Faults, acquires, connection_closed, read_timeout, releases, run_finishes, throttled
from tests.backends import backend, dynamodb, pytest_generate_tests, tables  # noqa: F401
from tests.runner_support import Harness, counting_job, spec

TTL_MS = spec().lease_ttl_s * 1000  # the default: the function timeout plus the safety margin


class IsolateDeath(BaseException):
    """The process vanished mid-run: no `except Exception` sees it, nothing is released or recorded."""


@pytest.fixture
def h(dynamodb, tables, clock):
    return Harness(dynamodb, tables, clock)


def dying_job(ctx):
    yield {"done": 1}
    raise IsolateDeath()


def failing_job(ctx):
    yield {"done": 1}
    raise RuntimeError("the job's own error")


# -- running, then finished ------------------------------------------------------------------------


def test_the_row_says_running_while_the_job_runs_and_is_finished_at_the_end(h):
    seen_rows = []

    def job(ctx):
        seen_rows.append(h.rows())
        yield {"done": 1}

    result = h.tick(spec(), job)
    (running,), = seen_rows
    assert running["outcome"] == "running" and running["run_id"] == result.run_id
    assert (running["fence"], running["holder"].startswith("test:")) == (1, True)
    assert "finished_at" not in running
    row, = h.rows()
    assert row["outcome"] == "ran" and row["run_key"] == running["run_key"] and row["finished_at"] >= row["started_at"]


def test_a_run_that_died_is_recorded_died_by_the_next_acquire(h, clock):
    # GIVEN a run whose isolate died mid-run: its row says running, its term was never released
    with pytest.raises(IsolateDeath):
        h.tick(spec(interval_s=None), dying_job)
    dead, = h.rows()
    assert dead["outcome"] == "running"
    # WHEN the next tick after the term's expiry takes over
    clock.advance(ms=TTL_MS + 1)
    result = h.tick(spec(interval_s=None), counting_job(1, []))
    # THEN the dead run's row says died, ending when its term expired, and the new run ran
    assert result.outcome is Outcome.RAN
    new, old = h.rows()
    assert (old["run_id"], old["outcome"], old["fence"]) == (dead["run_id"], "died", 1)
    assert old["finished_at"] == dead["started_at"] + TTL_MS and old["trigger"] == "scheduled"
    assert new["outcome"] == "ran" and new["fence"] == 2
    assert h.metric("died") == [1]


def test_a_run_that_died_before_its_row_was_written_still_gets_a_died_row(h, dynamodb, clock):
    # GIVEN a run that took the lease and died before its `running` put
    Faults(dynamodb).refused_before("PutItem", IsolateDeath)
    with pytest.raises(IsolateDeath):
        h.tick(spec(interval_s=None), counting_job(1, []))
    assert h.rows() == []
    # WHEN the next tick takes over THEN the lease item named the run: its row is created, died
    clock.advance(ms=TTL_MS + 1)
    h.tick(spec(interval_s=None), counting_job(1, []))
    new, old = h.rows()
    assert (old["outcome"], old["fence"], old["trigger"]) == ("died", 1, "unknown")
    assert new["outcome"] == "ran"


def test_a_runner_paused_past_its_term_finishes_its_own_row_over_died(h, dynamodb, clock, tables):
    # GIVEN a run paused past its term: the next acquire marked it died
    other = Harness(dynamodb, tables, clock)

    def paused(ctx):
        clock.advance(ms=TTL_MS + 1)
        other.tick(spec(interval_s=None), counting_job(1, []))  # takes over; marks us died
        yield {"done": 1}

    # WHEN it wakes up THEN its release is refused: its row is lease_lost (what it knows), not died
    result = h.tick(spec(interval_s=None), paused)
    assert result.outcome is Outcome.LEASE_LOST
    ours = next(r for r in h.rows() if r["run_id"] == result.run_id)
    assert ours["outcome"] == "lease_lost" and "error" in ours and "died" not in ours["error"]


def test_a_row_marked_died_before_the_run_began_makes_it_lease_lost(h, clock):
    # GIVEN the runner is paused between acquire and its `running` put, and the sweep marks the term died
    real_start = h.runs.start

    def late_start(run):
        clock.advance(ms=TTL_MS + 1)
        with another_party():  # the sweep's function, not the job's
            sweep_dead_runs(h.leases, h.runs, clock.now_ms())
        return real_start(run)

    h.runs.start = late_start
    ran = []
    result = h.tick(spec(interval_s=None), counting_job(1, ran))
    # THEN the job never runs and the row says lease_lost
    assert (result.outcome, ran) == (Outcome.LEASE_LOST, [])
    assert h.rows()[0]["outcome"] == "lease_lost"


# -- ambiguous writes ------------------------------------------------------------------------------


def test_a_resent_acquire_runs_the_job_and_records_it(h, dynamodb):
    # GIVEN the acquire is applied, its reply lost, and botocore sends it again (refused: the term is ours)
    faults = Faults(dynamodb)
    faults.resent("UpdateItem", when=acquires)
    # WHEN the tick runs THEN it is not mistaken for skipped_leased: the job runs, the row says ran
    result = h.tick(spec(), counting_job(1, []))
    assert faults.count("resend") == 1
    assert result.outcome is Outcome.RAN
    assert h.rows()[0]["outcome"] == "ran" and h.leases.peek("job_a").holder is None


def test_the_running_row_survives_a_lost_reply_on_its_put(h, dynamodb):
    faults = Faults(dynamodb)
    faults.reply_lost("PutItem")  # applied, reply lost: the re-sent put is refused by our own row
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.RAN
    assert faults.count("after") == 1
    assert [r["outcome"] for r in h.rows()] == ["ran"]


def test_the_running_row_survives_one_transient_error_on_its_put(h, dynamodb):
    Faults(dynamodb).refused_before("PutItem", throttled("PutItem"))
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.RAN
    assert [r["outcome"] for r in h.rows()] == ["ran"]


def test_the_finish_survives_a_lost_reply(h, dynamodb):
    faults = Faults(dynamodb)
    faults.reply_lost("UpdateItem", when=run_finishes)
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.RAN
    assert faults.count("after") == 1 and h.rows()[0]["outcome"] == "ran"


# -- store errors never mask the job's own error ----------------------------------------------------


@pytest.mark.parametrize("fault", ["read_timeout_after_apply", "throttled_forever"])
def test_a_failing_job_reraises_its_own_error_whatever_release_does(h, dynamodb, fault):
    faults = Faults(dynamodb)
    if fault == "read_timeout_after_apply":
        faults.reply_lost("UpdateItem", when=releases, times=100)
    else:
        faults.refused_before("UpdateItem", throttled, when=releases, times=100)
    # WHEN the job fails and its release keeps failing THEN the job's own error is raised, not the store's
    with pytest.raises(RuntimeError, match="the job's own error"):
        h.tick(spec(), failing_job)
    row, = h.rows()
    assert row["outcome"] == "failed" and row["error"] == "RuntimeError"
    if fault == "read_timeout_after_apply":
        # the first copy landed: the re-sent one is refused, and the refusal shows our own release
        assert h.leases.peek("job_a").holder is None
    else:
        # never applied: logged, and the term simply expires
        assert any(line["message"] == "release failed" for line in h.logs())


def test_a_failing_job_reraises_its_own_error_when_its_row_cannot_be_finished(h, dynamodb, clock):
    Faults(dynamodb).refused_before("UpdateItem", read_timeout, when=run_finishes, times=3)
    with pytest.raises(RuntimeError, match="the job's own error"):
        h.tick(spec(interval_s=None), failing_job)
    assert h.metric("unrecorded") == [1]
    # THEN the term is kept (a released term always has a finished row) and expires on its own
    assert h.rows()[0]["outcome"] == "running" and h.leases.peek("job_a").holder is not None
    clock.advance(ms=TTL_MS + 1)
    h.tick(spec(interval_s=None), counting_job(1, []))
    assert [r["outcome"] for r in h.rows()] == ["ran", "died"]


def test_a_throttled_release_after_a_good_run_is_retried_and_recorded(h, dynamodb):
    Faults(dynamodb).refused_before("UpdateItem", throttled, when=releases, times=2)
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.RAN
    assert h.rows()[0]["outcome"] == "ran" and h.leases.peek("job_a").holder is None


def test_a_release_that_keeps_failing_after_a_good_run_still_records_the_run(h, dynamodb, clock):
    Faults(dynamodb).refused_before("UpdateItem", throttled, when=releases, times=100)
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.RAN
    assert h.rows()[0]["outcome"] == "ran"
    # the term simply expires; the next acquire finds its row finished and leaves it
    clock.advance(hours=1)
    h.tick(spec(), counting_job(1, []))
    assert [r["outcome"] for r in h.rows()] == ["ran", "ran"]


def test_a_row_that_cannot_be_started_stops_the_run_and_raises_the_store_error(h, dynamodb):
    Faults(dynamodb).refused_before("PutItem", throttled("PutItem"), times=100)
    ran = []
    with pytest.raises(StoreError):
        h.tick(spec(), counting_job(1, ran))
    assert ran == []
    assert h.rows()[0]["outcome"] == "failed"  # the finish is an upsert: the row exists all the same
    assert h.leases.peek("job_a").holder is None


# -- the dead-run sweep ------------------------------------------------------------------------------


def test_the_sweep_records_died_runs_nobody_took_over_and_leaves_live_and_finished_ones(h, clock):
    # GIVEN job_a died mid-run and was never ticked again; job_b is running right now; job_c ran
    with pytest.raises(IsolateDeath):
        h.tick(spec("job_a"), dying_job)
    h.tick(spec("job_c"), counting_job(1, []))
    clock.advance(ms=TTL_MS + 1)
    swept = []

    def live(ctx):
        with another_party():  # the sweep's function, not the job's
            swept.append(sweep_dead_runs(h.leases, h.runs, clock.now_ms()))
        yield {"done": 1}

    h.tick(spec("job_b"), live)
    # THEN only job_a's run is marked, once
    assert (swept[0].jobs, swept[0].died) == (3, 1)
    assert [r["outcome"] for r in h.rows("job_a")] == ["died"]
    assert [r["outcome"] for r in h.rows("job_b")] == ["ran"] and [r["outcome"] for r in h.rows("job_c")] == ["ran"]
    assert sweep_dead_runs(h.leases, h.runs, clock.now_ms()).died == 0


def died_marks(params):
    values = params.get("ExpressionAttributeValues", {})
    return ":running" in values and ":final" not in values


@pytest.mark.parametrize("failures, recorded_by", [(3, "the run, at its end"), (6, "the sweep")])
def test_a_died_write_that_fails_is_tried_again(h, dynamodb, clock, failures, recorded_by):
    # GIVEN a run died; the next acquire took over but its `died` write failed (3 tries each time)
    with pytest.raises(IsolateDeath):
        h.tick(spec(interval_s=None), dying_job)
    clock.advance(ms=TTL_MS + 1)
    Faults(dynamodb).refused_before("UpdateItem", throttled, when=died_marks, times=failures)
    h.tick(spec(interval_s=None), counting_job(1, []))
    if recorded_by == "the sweep":
        # WHEN its second try at the end failed too THEN the lease item's copy of the term lets the sweep do it
        assert [r["outcome"] for r in h.rows()] == ["ran", "running"]
        assert sweep_dead_runs(h.leases, h.runs, clock.now_ms()).died == 1
    assert [r["outcome"] for r in h.rows()] == ["ran", "died"]


@pytest.mark.parametrize("recorded_by", ["the next tick", "the sweep"])
def test_a_chain_of_runners_that_die_right_after_acquiring_loses_no_run(h, dynamodb, clock, recorded_by):
    # GIVEN run 1 died mid-run; run 2 took over and died before it recorded run 1 (or wrote its own row)
    with pytest.raises(IsolateDeath):
        h.tick(spec(interval_s=None), dying_job)
    clock.advance(ms=TTL_MS + 1)
    Faults(dynamodb).refused_before("UpdateItem", IsolateDeath, when=died_marks)
    with pytest.raises(IsolateDeath):
        h.tick(spec(interval_s=None), counting_job(1, []))
    assert [(r["fence"], r["outcome"]) for r in h.rows()] == [(1, "running")]
    clock.advance(ms=TTL_MS + 1)
    # WHEN the next tick comes (or an operator sweeps first)
    if recorded_by == "the sweep":
        assert sweep_dead_runs(h.leases, h.runs, clock.now_ms()).died == 2
    result = h.tick(spec(interval_s=None), counting_job(1, []))
    # THEN both dead runs are recorded died (before the fix run 1 stayed `running` forever), and run 3 ran
    assert result.outcome is Outcome.RAN
    assert sorted((r["fence"], r["outcome"]) for r in h.rows()) == [(1, "died"), (2, "died"), (3, "ran")]
    assert h.leases.read("job_a")["prev_holder"] == "-"  # the copy of run 2 is settled


def test_a_resent_acquire_still_records_the_term_it_replaced(h, dynamodb, clock):
    # GIVEN a dead run, and the takeover's acquire is applied, its reply lost, and sent again
    with pytest.raises(IsolateDeath):
        h.tick(spec(interval_s=None), dying_job)
    clock.advance(ms=TTL_MS + 1)
    Faults(dynamodb).resent("UpdateItem", when=acquires)
    # WHEN the re-sent copy only sees our own new term THEN the replaced term is still known from its copy
    assert h.tick(spec(interval_s=None), counting_job(1, [])).outcome is Outcome.RAN
    assert [r["outcome"] for r in h.rows()] == ["ran", "died"]


def test_a_died_row_never_overwrites_a_finished_one_and_finish_is_idempotent(h, clock):
    run = RunStart("job_a", "r1", "scheduled", clock.now_ms(), clock.now_ms(), "test:x", 1)
    assert h.runs.start(run) and h.runs.start(run)  # a second copy: our own running row
    h.runs.finish(run, RunState.RAN, clock.now_ms() + 5, {"done": 1}, None)
    h.runs.finish(run, RunState.RAN, clock.now_ms() + 5, {"done": 1}, None)  # a re-sent copy
    term = Term("job_a", "r1", "test:x", 1, run.started_at, run.started_at + TTL_MS)
    assert h.runs.mark_died(term, clock.now_ms()) is False
    row, = h.rows()
    assert (row["outcome"], row["duration_ms"]) == ("ran", 5)


# -- an acquire applied unanswered, then overtaken before its retry -------------------------------


def nth_acquire(n):
    """Matches the n-th acquire sent from now on (counted as calls are built, nested ones included)."""
    seen = []

    def when(params):
        if acquires(params):
            seen.append(1)
            return len(seen) == n
        return False

    return when


@pytest.mark.parametrize("takeovers", [1, 2])
def test_an_acquire_applied_unanswered_and_overtaken_is_reported_lease_lost_not_skipped(h, dynamodb, clock, takeovers):
    # GIVEN tick A's acquire is applied and its reply lost; its retry waits past the term while
    # one tick (the copy on the lease item names A's run) or two (only A's run row is left) take over
    later = []

    def others_take_over():
        clock.advance(ms=TTL_MS + 1)
        for _ in range(takeovers):
            later.append(h.tick(spec(interval_s=None), counting_job(1, [])))
            clock.advance(ms=1_000)

    faults = Faults(dynamodb)
    faults.reply_lost("UpdateItem", when=acquires)
    faults.paused("UpdateItem", others_take_over, when=nth_acquire(2))
    # WHEN A's retry is refused
    result = h.tick(spec(interval_s=None), counting_job(1, []))
    # THEN A reports its lost term, not a skip (before the fix: skipped_leased, and its term's row `died`)
    assert faults.count("after") == 1 and faults.count("pause") == 1
    assert [r.outcome for r in later] == [Outcome.RAN] * takeovers
    assert result.outcome is Outcome.LEASE_LOST and result.run_id is not None
    rows = sorted((r["fence"], r["outcome"], r["run_id"]) for r in h.rows())
    assert [(f, o) for f, o, _ in rows] == [(1, "lease_lost")] + [(1 + i, "ran") for i in range(1, takeovers + 1)]
    assert rows[0][2] == result.run_id


def test_an_acquire_retried_after_a_lost_reply_that_was_not_applied_is_still_a_skip(h, dynamodb, clock):
    # GIVEN a live term of another tick, and our acquire's first try times out before it was applied
    h.leases.acquire("job_a", "other", TTL_MS, run_id="other-run")
    faults = Faults(dynamodb)
    faults.refused_before("GetItem", throttled("GetItem"))  # the pre-gate cannot read: the tick acquires
    faults.refused_before("UpdateItem", read_timeout, when=acquires)
    # WHEN its retry is refused by the live term
    result = h.tick(spec(interval_s=None), counting_job(1, []))
    # THEN it is a skip with no write: the one extra read (of the run row the first try would have
    # made) found nothing
    sent = list(faults.sent)
    assert faults.count("before") == 2
    assert result.outcome is Outcome.SKIPPED_LEASED
    assert h.rows() == []
    assert [op for op, _ in sent if op not in ("GetItem",)] == ["UpdateItem", "UpdateItem"]  # the two tries
    assert [p["TableName"] for op, p in sent if op == "GetItem"][-1] == h.tables["runs"]


# -- an acquire whose every try went unanswered ----------------------------------------------------


def test_an_acquire_applied_whose_three_replies_were_all_lost_runs_the_job(h, dynamodb):
    # GIVEN the acquire is applied, and its reply and the replies of both retries (refusals by
    # our own term) are lost: every try ends in a transient error
    faults = Faults(dynamodb).reply_lost("UpdateItem", times=3, error=connection_closed, refused_too=True)
    # WHEN the tick runs
    result = h.tick(spec(), counting_job(1, []))
    faults.detach()
    # THEN one consistent read finds our term: the job runs and is recorded, the lease is released
    # (before: StoreError, and the job locked out until the term expired and the next acquire recorded it died)
    assert faults.count("after_any") == 3
    assert result.outcome is Outcome.RAN
    assert [(r["outcome"], r["run_id"]) for r in h.rows()] == [("ran", result.run_id)]
    assert h.leases.peek("job_a").holder is None


def test_an_acquire_refused_whose_three_replies_were_all_lost_raises_and_holds_nothing(h, dynamodb):
    # GIVEN another tick's live term, and our three tries refused by it with every reply lost
    h.leases.acquire("job_a", "other", TTL_MS, run_id="other-run")
    scripted = Faults(dynamodb).refused_before("GetItem", throttled("GetItem"))  # the pre-gate cannot read: the tick acquires
    scripted.reply_lost("UpdateItem", times=3, error=connection_closed, refused_too=True)
    # WHEN the tick runs THEN the read shows the other term: the store error stands, nothing is written
    with pytest.raises(StoreError):
        h.tick(spec(interval_s=None), counting_job(1, []))
    scripted.detach()
    assert scripted.count("after_any") == 3
    assert h.rows() == [] and h.leases.read("job_a")["run_id"] == "other-run"


# -- an acquire answered past the request-age budget -----------------------------------------------


@pytest.mark.parametrize("delay_s, runs", [(9, True), (15, False)])
def test_an_acquire_applied_late_runs_only_inside_the_request_age_budget(h, dynamodb, clock, delay_s, runs):
    # GIVEN the acquire is stamped when it is sent, then delayed (a stalled process, botocore's
    # retries) and applied `delay_s` later: its gate stamp is that much earlier than its term's start
    stamped = clock.now_ms()
    Faults(dynamodb).paused("UpdateItem", lambda: clock.advance(seconds=delay_s), when=acquires)
    seen = []
    # WHEN the tick runs
    result = h.tick(spec(), counting_job(1, seen))
    row, = h.rows()
    lease = h.leases.read("job_a")
    # THEN inside the 10 s budget it runs; past it the tick is unknown: recorded lease_lost and released,
    # never run on the stale stamp (before: it ran, and the next run could start that much sooner)
    assert (result.outcome is Outcome.RAN) is runs and (seen != []) is runs
    assert row["outcome"] == ("ran" if runs else "lease_lost")
    if not runs:
        assert "answered 15 s after it was sent" in row["error"]
    assert "holder" not in lease and lease["last_started_at"] == stamped  # released; the stamp stays
