"""The scheduled runner: outcomes, renewal between batches, failure handling, run rows, logs, metrics."""

from __future__ import annotations

import pytest

from jobfence.batch import LastBatch
from jobfence.errors import JobfenceError
from jobfence.scheduled import Outcome
from tests.runner_support import Harness, counting_job, spec


@pytest.fixture
def h(dynamodb, tables, clock):
    return Harness(dynamodb, tables, clock)


def test_a_run_renews_before_every_batch_after_the_first(h, dynamodb, request_counter):
    request_counter.attach(dynamodb)
    seen = []
    result = h.tick(spec(), counting_job(3, seen))
    assert result.outcome is Outcome.RAN
    assert result.summary == {"batches": 3, "done": 3}
    # acquire + a renewal before resuming the job after each batch + the row's finish + release;
    # the last renewal finds the generator exhausted (the runner cannot know that without resuming it:
    # a job that knows says so with LastBatch, below)
    assert request_counter.count("UpdateItem") == 1 + 3 + 1 + 1
    assert request_counter.count("GetItem") == 1
    assert request_counter.count("PutItem") == 1  # the `running` row, written when the lease is taken
    row, = h.rows()
    assert row["outcome"] == "ran" and row["fence"] == 1 and row["summary"] == {"batches": 3, "done": 3}
    assert set(row) >= {"job", "run_key", "trigger", "scheduled_at", "started_at", "finished_at", "duration_ms", "holder", "ttl"}


def test_a_last_batch_ends_the_run_without_the_renew_a_next_batch_would_need(h, dynamodb, request_counter):
    request_counter.attach(dynamodb)
    after_last, closed = [], []

    def job(ctx):
        try:
            yield {"done": 1}
            yield {"done": 1}
            yield LastBatch({"done": 1, "board": "posted"})
            after_last.append("ran")  # never: the runner closes the generator at its last batch
            yield {"done": 1}
        finally:
            closed.append(True)

    result = h.tick(spec(), job)
    assert result.outcome is Outcome.RAN
    assert result.summary == {"batches": 3, "done": 3, "board": "posted"}
    assert request_counter.count("UpdateItem") == 1 + 2 + 1 + 1  # acquire, 2 renewals, finish, release
    assert after_last == [] and closed == [True]
    (row,) = h.rows()
    assert row["outcome"] == "ran" and row["summary"] == {"batches": 3, "done": 3, "board": "posted"}


def test_a_lost_lease_stops_the_job_before_its_next_batch(h, clock):
    # GIVEN batch 1 runs so long that the lease expires and another holder takes over
    started = []

    def job(ctx):
        started.append(1)
        clock.advance(minutes=31)
        h.leases.acquire("job_a", "usurper", 30 * 60_000)
        yield {"done": 1}
        started.append(2)
        yield {"done": 1}

    # WHEN the runner checkpoints before batch 2
    result = h.tick(spec(lease_ttl_s=30 * 60, interval_s=None), job)
    # THEN batch 2 never starts, the lease stays with the usurper, and the run is lease_lost
    assert started == [1]
    assert result.outcome is Outcome.LEASE_LOST
    assert h.leases.peek("job_a").holder == "usurper"
    assert h.rows()[0]["outcome"] == "lease_lost"
    assert h.metric("lease_lost") == [1]


def test_trust_window_stops_new_batches_but_a_still_held_lease_is_released(h, clock):
    def job(ctx):
        clock.advance(minutes=29, seconds=30)  # past renewed_at + ttl - 60 s margin
        yield {"done": 1}
        raise AssertionError("must not start a second batch")

    result = h.tick(spec(), job)
    assert result.outcome is Outcome.RAN
    assert result.summary["stopped"] == "trust_window"
    assert h.leases.peek("job_a").holder is None


def test_low_remaining_lambda_time_stops_new_batches(h, lambda_context):
    seen = []
    lambda_context.remaining_ms = 10_000  # below the 30 s batch budget
    result = h.tick(spec(), counting_job(5, seen), lambda_context)
    assert len(seen) == 1
    assert result.summary["stopped"] == "time_budget"


def test_failure_releases_records_failed_and_reraises_and_the_gate_stamp_stays(h, clock):
    def job(ctx):
        yield {"done": 1}
        raise RuntimeError("card 4111111111111111 declined for jane@example.com")

    with pytest.raises(RuntimeError):
        h.tick(spec(), job)
    row, = h.rows()
    assert row["outcome"] == "failed"
    assert row["error"] == "RuntimeError"  # a foreign exception's message may carry payload
    state = h.leases.peek("job_a")
    assert state.holder is None and state.last_started_at == row["started_at"]
    # the next tick inside the interval is skipped: a failing job is no hot loop
    clock.advance(minutes=5)
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.SKIPPED_INTERVAL
    assert h.metric("failed") == [1]
    assert "4111" not in h.log_stream.getvalue() and "jane@" not in h.log_stream.getvalue()


def test_our_own_errors_keep_their_bounded_message(h):
    def job(ctx):
        raise JobfenceError("x" * 1000)
        yield  # pragma: no cover

    with pytest.raises(JobfenceError):
        h.tick(spec(), job)
    assert len(h.rows()[0]["error"]) <= 300 and h.rows()[0]["error"].startswith("JobfenceError: xxx")


def test_a_failing_job_does_not_block_another_job(h):
    def boom(ctx):
        raise RuntimeError("boom")
        yield  # pragma: no cover

    with pytest.raises(RuntimeError):
        h.tick(spec("job_a"), boom)
    assert h.tick(spec("job_b"), counting_job(1, [])).outcome is Outcome.RAN
    assert h.leases.peek("job_a").holder is None


def test_skipped_ticks_write_nothing_and_record_no_row(h, clock, dynamodb, request_counter):
    h.tick(spec(), counting_job(1, []))
    request_counter.attach(dynamodb)
    # duplicate tick inside the interval: decided by the pre-gate read alone
    result = h.tick(spec(), counting_job(1, []))
    assert result.outcome is Outcome.SKIPPED_INTERVAL
    assert result.as_dict() == {"job": "job_a", "outcome": "skipped_interval", "run_id": None, "duration_ms": 0, "summary": {}}
    assert request_counter.writes == 0 and request_counter.calls == ["GetItem"]
    assert len(h.rows()) == 1


def test_a_stale_pre_gate_read_is_corrected_by_the_conditional_write(h, dynamodb, tables, request_counter):
    # GIVEN another holder is running, but our eventually consistent read comes back stale (empty)
    h.leases.acquire("job_a", "other", 30 * 60_000, 3_600_000)
    before = dynamodb.get_item(TableName=tables["leases"], Key={"job": {"S": "job_a"}})["Item"]

    def stale(parsed, model, **_):
        if model.name == "GetItem":
            parsed.pop("Item", None)

    dynamodb.meta.events.register("after-call.dynamodb.GetItem", stale)
    request_counter.attach(dynamodb)
    # WHEN a tick arrives THEN the conditional write refuses it: skipped_leased, nothing changed
    assert h.tick(spec(), counting_job(1, [])).outcome is Outcome.SKIPPED_LEASED
    dynamodb.meta.events.unregister("after-call.dynamodb.GetItem", stale)
    assert request_counter.calls == ["GetItem", "UpdateItem"]
    assert dynamodb.get_item(TableName=tables["leases"], Key={"job": {"S": "job_a"}})["Item"] == before
    assert h.rows() == []


def test_every_outcome_is_logged_with_worker_stage_and_outcome_keys(h):
    h.logger.append_keys(worker="test", stage="job_a")
    h.tick(spec(), counting_job(1, []))
    h.tick(spec(), counting_job(1, []))
    outcomes = [(l["worker"], l["stage"], l["outcome"]) for l in h.logs() if l["message"] == "scheduled_job"]
    assert outcomes == [("test", "job_a", "ran"), ("test", "job_a", "skipped_interval")]
    assert h.metric("ran") == [1] and h.metric("skipped_interval") == [1]
