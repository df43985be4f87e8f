"""The kit's `simulate` (issue 30): the fence on every seed, a failing seed's trace and replay, pipelines."""

from __future__ import annotations

import re

import pytest

from jobfence.testing import simulate
from jobfence.testing.faults import DEFAULT_SEEDS, TRACE_LINES
from tests import kit_pipeline
from tests.kit_jobs import KIT_CATALOG, each_row_once, seed_rows

FENCE_BREACH = (
    r"^invariant 2: {job} wrote to its catalog tables outside ctx.transaction\(\): "
    r"UpdateItem on 'kit_rows' \(jobfence-kit_rows-\w+\) from kit_jobs.py:\d+ \(job\)"
)


@pytest.mark.slow  # a simulator campaign (20 seeds, twice)
@pytest.mark.parametrize("job", ["mark_rows_conditioned", "mark_rows_unfenced"])
def test_a_write_outside_the_fenced_transaction_fails_every_default_seed_naming_the_call(job):
    # GIVEN a job whose update keeps its condition (or has none) but skips ctx.transaction()
    # WHEN it is simulated with the default seeds
    report = simulate(KIT_CATALOG, job, setup=seed_rows, invariant=each_row_once)
    # THEN every seed fails (no fault needs to land on that write), naming the operation, the table and the line
    assert report.seeds == len(DEFAULT_SEEDS)
    assert [f.seed for f in report.failures] == list(DEFAULT_SEEDS)
    for failure in report.failures:
        assert re.match(FENCE_BREACH.format(job=job), failure.violations[0]), failure.violations[0]
    with pytest.raises(AssertionError, match=f"{job}: 20 of 20 seeds broke an invariant"):
        report.assert_ok()


@pytest.mark.slow  # a simulator campaign
def test_a_table_the_entry_declares_unfenced_may_be_written_outside_the_transaction_under_simulate():
    simulate(KIT_CATALOG, "mark_rows_declared", seeds=range(3), setup=seed_rows, invariant=each_row_once).assert_ok()


@pytest.mark.slow  # two simulator runs of one seed
def test_a_failing_seed_carries_its_bounded_trace_and_the_assertion_says_how_to_replay_it():
    def run():
        return simulate(KIT_CATALOG, "mark_rows_conditioned", seeds=[3], setup=seed_rows, invariant=each_row_once)

    [failure] = run().failures
    # the trace: the run's header, the calls and faults that led there, ending at the first violation
    assert failure.trace[0].endswith("seed 3 family job:mark_rows_conditioned faults " + failure.trace[0].split("faults ")[1])
    assert "VIOLATION 2: mark_rows_conditioned wrote" in failure.trace[-1]
    assert len(failure.trace) <= TRACE_LINES + 2  # the header, and a line saying what was left out
    assert any("UpdateItem leases" in line for line in failure.trace)  # the tick took its lease first
    # the assertion names the seed, how to replay it, and prints that trace
    with pytest.raises(AssertionError) as raised:
        run().assert_ok()
    message = str(raised.value)
    assert "replay seed 3: the same simulate(...) call with seeds=[3]" in message
    assert message.rstrip().endswith(failure.trace[-1].strip())
    # AND replaying the seed gives the same run, trace and all
    assert run().failures == (failure,)


# -- pipelines ----------------------------------------------------------------------------------------------------


@pytest.mark.slow  # a simulator campaign
def test_a_pipeline_keeps_the_work_invariants_under_faults():
    # GIVEN an author's pipeline (catalog, WorkerPipeline, reclaim job), as docs/your-first-pipeline.md builds one
    report = simulate(kit_pipeline.CATALOG, "reclaim_drops", seeds=range(6), pipelines=kit_pipeline.PIPELINES)
    # THEN every seed keeps the work invariants, under the pipeline's own fault kinds too
    report.assert_ok()
    assert report.job == "reclaim_drops" and report.seeds == 6
    assert {"duplicate_delivery", "forged_delivery", "provider_crash_after", "pause_item_stale"} <= report.faults


@pytest.mark.slow  # a simulator campaign
def test_a_pipeline_whose_wakeups_raise_out_of_the_worker_is_caught_with_its_trace():
    # GIVEN the same pipeline whose wake-up adapter lets a failed SendMessageBatch raise (seed 8 loses the reply
    # of one, which surfaces as a read timeout; seed 6 has none)
    report = simulate(kit_pipeline.CATALOG, "reclaim_drops", seeds=[6, 8], pipelines=kit_pipeline.RAISING_PIPELINES)
    # THEN that seed fails: the error escaped the worker unclassified (its SQS batch would all come back)
    [failure] = report.failures
    assert failure.seed == 8
    assert failure.violations[0].startswith("invariant 13: worker-dro0 raised ReadTimeoutError")
    # its trace keeps that worker's calls, though the error was judged at the end of the run
    assert any("worker-dro0" in line and "FAULT reply_lost_surfaced: SendMessageBatch" in line for line in failure.trace)
    assert len(failure.trace) <= TRACE_LINES + 2
    with pytest.raises(AssertionError, match=r"(?s)seed 8 \(faults: .*replay seed 8"):
        report.assert_ok()


@pytest.mark.slow  # a simulator campaign
def test_a_pipelines_own_invariant_is_judged_once_every_batch_is_final():
    seen = []

    def never(snapshot):
        items = snapshot.rows("drop_items")
        seen.append(sorted({item["status"] for item in items}))
        raise AssertionError("never holds")

    report = simulate(
        kit_pipeline.CATALOG, "reclaim_drops", seeds=range(2), pipelines=kit_pipeline.PIPELINES, invariant=never
    )
    assert [f.seed for f in report.failures] == [0, 1]
    assert all("invariant 0: the pipeline's invariant: never holds" in f.violations for f in report.failures)
    assert len(seen) == 2 and all(set(statuses) <= {"completed", "failed", "cancelled"} for statuses in seen)


def test_simulate_refuses_a_pipeline_with_a_setup_and_a_reclaim_job_that_names_no_queue():
    with pytest.raises(ValueError, match="setup and factory are for a scheduled job"):
        simulate(kit_pipeline.CATALOG, "reclaim_drops", pipelines=kit_pipeline.PIPELINES, setup=lambda deps: None)
    with pytest.raises(ValueError, match="'mark_rows' re-drives no queue"):
        simulate(KIT_CATALOG, "mark_rows", pipelines=kit_pipeline.PIPELINES)
