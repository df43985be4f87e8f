"""The test kit (`jobfence.testing`): a job author's harness and fault simulation, on a catalog of their own."""

from __future__ import annotations

import pytest

from jobfence.runs import RunState
from jobfence.scheduled import Outcome
from jobfence.testing import JobHarness, simulate
from tests.kit_jobs import KIT_CATALOG, ROWS, each_row_once, seed_rows


class Boom(Exception):
    pass


@pytest.fixture
def jobfence_catalog():
    """The plugin's catalog fixture, overridden as a job author's conftest would: their own `Registry`."""
    return KIT_CATALOG


def test_the_harness_creates_only_the_tables_its_entry_names_and_a_tick_runs_every_batch(job_harness, dynamodb):
    # GIVEN the harness of mark_rows and five pending rows
    harness: JobHarness = job_harness("mark_rows")
    assert sorted(harness.tables) == ["kit_rows", "leases", "runs"]
    assert len(dynamodb.list_tables()["TableNames"]) == 3
    seed_rows(harness.deps())
    # WHEN it ticks THEN three batches (2 + 2 + 1) ran, and the run row says so
    tick = harness.tick().assert_ran(batches=3, done=ROWS, skipped=0)
    assert tick.row.outcome is RunState.RAN and tick.row.fence == 1
    assert all(row["times"] == 1 for row in harness.rows("kit_rows"))
    assert harness.metrics.count("ran") == 1


def test_a_second_tick_inside_the_interval_is_a_skip_with_no_row(job_harness, clock):
    harness = job_harness("mark_rows")
    harness.tick().assert_ran()
    clock.advance(minutes=10)
    harness.tick().assert_outcome(Outcome.SKIPPED_INTERVAL)
    assert len(harness.runs()) == 1
    clock.advance(hours=1)
    harness.tick().assert_ran(batches=0)


def test_assertions_fail_when_the_outcome_or_a_count_differs(job_harness):
    harness = job_harness("mark_rows")
    seed_rows(harness.deps(), n=1)
    tick = harness.tick()
    with pytest.raises(AssertionError, match="these differ"):
        tick.assert_ran(done=2)
    with pytest.raises(AssertionError, match="came to ran, expected skipped_leased"):
        tick.assert_outcome(Outcome.SKIPPED_LEASED)


def test_a_job_that_writes_beyond_its_grant_fails_its_tick(job_harness):
    # GIVEN greedy, whose entry may only scan kit_rows, and which puts a row
    harness = job_harness("greedy")
    # WHEN it ticks THEN the grant guard names the table and the missing action
    with pytest.raises(AssertionError, match=r"\('kit_rows', 'dynamodb:PutItem'\)"):
        harness.tick()


FENCE_BREACH = r"outside ctx.transaction\(\): UpdateItem on 'kit_rows' \(jobfence-kit_rows-\w+\) from kit_jobs.py:\d+ \(job\)"


@pytest.mark.parametrize("job", ["mark_rows_conditioned", "mark_rows_unfenced"])
def test_a_write_outside_the_fenced_transaction_fails_the_tick_naming_the_call(job_harness, clock, job):
    # GIVEN a job whose update keeps its condition (or has none) but skips ctx.transaction(), and pending rows
    harness: JobHarness = job_harness(job)
    seed_rows(harness.deps())
    # WHEN it ticks THEN the first tick fails (no fault needed), naming the operation, the table and the line
    with pytest.raises(AssertionError, match=FENCE_BREACH) as failure:
        harness.tick()
    assert str(failure.value).startswith(f"{job} wrote to its catalog tables outside ctx.transaction()")
    # AND the same through `run` (the tick's run alone), at the next interval
    clock.advance(hours=1)
    seed_rows(harness.deps())
    with pytest.raises(AssertionError, match=FENCE_BREACH):
        harness.run()


def test_the_same_job_written_with_the_fenced_transaction_passes(job_harness):
    harness = job_harness("mark_rows")
    seed_rows(harness.deps())
    harness.tick().assert_ran(done=ROWS)


def test_a_table_the_entry_declares_unfenced_may_be_written_outside_the_transaction(job_harness):
    # GIVEN the conditioned job, its table declared `unfenced` with a reason
    harness = job_harness("mark_rows_declared")
    seed_rows(harness.deps())
    # WHEN it ticks THEN its writes are allowed
    harness.tick().assert_ran(done=ROWS)


def test_another_partys_write_and_a_harness_without_the_fence_are_not_checked(job_harness, aws, clock):
    from jobfence.testing import another_party

    harness = job_harness("mark_rows")
    seed_rows(harness.deps())

    def job(ctx):
        with another_party():  # e.g. the request path, played by the test in the middle of the tick
            harness.dynamodb.update_item(TableName=harness.tables["kit_rows"], Key={"row_id": {"S": "r0"}},
                                         UpdateExpression="SET times = :one", ExpressionAttributeValues={":one": {"N": "1"}})
        yield {"done": 0}

    harness.tick(job).assert_ran(done=0)
    # AND a harness made with fence=False (a test of the runner itself) lets the job write as it likes
    seed_rows(harness.deps())
    unchecked = JobHarness(aws, KIT_CATALOG, "mark_rows_conditioned", clock, tables=harness.tables, fence=False)
    unchecked.tick().assert_ran(done=ROWS)


def test_a_fence_breach_in_a_tick_that_also_raised_names_both(job_harness):
    harness = job_harness("greedy")  # puts a row its entry may only scan, outside the transaction
    with pytest.raises(AssertionError, match=r"(?s)PutItem on 'kit_rows'.*the tick also raised AssertionError"):
        harness.tick()


def test_the_catalog_refuses_an_unfenced_table_the_entry_does_not_use():
    from jobfence import CatalogError
    from jobfence.registry import JobSpec, Registry, TableSpec

    table = TableSpec(name="kit_rows", subsystem="kit", partition_key=("row_id", "S"))
    for unfenced in ({"other": "why"}, {"kit_rows": " "}):
        spec = JobSpec(name="j", subsystem="kit", entry="m:f", schedule="rate(1 hour)", tables={"kit_rows": "update"},
                       unfenced=unfenced)
        with pytest.raises(CatalogError, match="unfenced"):
            Registry(tables=[table], jobs=[spec])


def test_a_job_that_raises_re_raises_and_its_row_says_failed(job_harness):
    harness = job_harness("mark_rows")

    def failing(ctx):
        yield {"done": 0}
        raise Boom("bad row")

    with pytest.raises(Boom):
        harness.tick(failing)
    [row] = harness.runs()
    assert row.outcome is RunState.FAILED and "Boom" in row.error


@pytest.mark.slow  # a simulator campaign
def test_the_fenced_job_keeps_its_invariant_on_every_default_seed_which_inject_every_fault_kind():
    from jobfence.testing.faults import DEFAULT_SEEDS
    from jobfence.testing.sim.scheduled import ScheduledJobScenario

    report = simulate(KIT_CATALOG, "mark_rows", setup=seed_rows, invariant=each_row_once)
    report.assert_ok()
    assert report.seeds == len(DEFAULT_SEEDS) == 20
    # the default is documented as enough to inject every fault kind of the scheduled scenario at least once
    assert report.faults == {kind.value for kind in ScheduledJobScenario.kinds}


@pytest.mark.slow  # a simulator campaign
def test_an_unfenced_job_that_counts_twice_under_faults_shows_the_fence_and_its_cost():
    # GIVEN the job with a plain unconditional update (ADD times 1), and seed 52, whose faults re-apply a write
    report = simulate(KIT_CATALOG, "mark_rows_unfenced", seeds=[52], setup=seed_rows, invariant=each_row_once)
    # THEN the seed names the missing fence (every seed does) and what it cost here: a row counted twice
    [failure] = report.failures
    assert failure.seed == 52 and failure.violations[0].startswith("invariant 2: mark_rows_unfenced wrote")
    assert any("counted exactly once" in v for v in failure.violations)
    with pytest.raises(AssertionError, match=r"seeds broke an invariant:\nseed 52"):
        report.assert_ok()


@pytest.mark.slow  # a simulator campaign
def test_an_invariant_that_cannot_hold_fails_every_seed_and_setup_runs_first():
    def never(snapshot):
        assert len(snapshot.rows("kit_rows")) == ROWS  # setup wrote them before the first tick
        raise AssertionError("never holds")

    report = simulate(KIT_CATALOG, "mark_rows", seeds=range(2), setup=seed_rows, invariant=never)
    assert [f.seed for f in report.failures] == [0, 1]
    assert all("never holds" in f.violations[0] for f in report.failures)


@pytest.mark.slow  # a Python subprocess
def test_importing_the_kit_and_its_plugin_loads_neither_moto_nor_the_simulator():
    import pathlib
    import subprocess
    import sys

    functions = pathlib.Path(__file__).resolve().parents[2] / "functions"
    probe = ("import sys; import jobfence.testing, jobfence.testing.plugin; "
             "print(sorted(m for m in ('moto', 'pynamodb', 'jobfence.testing.sim', 'ops', 'jobfence.scheduled') "
             "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(functions), "PATH": ""}, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # a Python subprocess
def test_simulating_a_job_loads_none_of_this_applications_jobs():
    """An app with a `jobs` package of its own can simulate: the kit's simulator imports none of ours, nor `ops`."""
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    probe = ("import sys; from jobfence.testing import simulate; from tests.kit_jobs import KIT_CATALOG, seed_rows; "
             "simulate(KIT_CATALOG, 'mark_rows', seeds=range(1), setup=seed_rows).assert_ok(); "
             "print(sorted(m for m in sys.modules "
             "if m.split('.')[0] in ('jobs', 'ops', 'providers', 'handlers')))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=root,
                         env={"PYTHONPATH": f"{root / 'functions'}:{root}", "PATH": "", "AWS_DEFAULT_REGION": "us-east-1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_without_moto_installed_simulate_names_the_extra_that_brings_it(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "moto", None)  # as if the `testing` extra were not installed
    with pytest.raises(ModuleNotFoundError, match=r"install the extra jobfence\[testing\]"):
        simulate(KIT_CATALOG, "mark_rows", seeds=range(1))
