"""Every operator command against the embedded runtime (one shared runtime, see conftest)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from jobfence_ops.audit import local_login
from jobfence_ops.cli import main
from ops.invariants import scan_all

pytestmark = pytest.mark.server


def cli(target, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), target=target, console=Console(file=out, width=250, color_system=None))
    return code, out.getvalue()


def snapshot(target) -> dict[str, list]:
    client = target.session.client("dynamodb")
    return {table: sorted(map(repr, scan_all(client, table))) for table in target.topology.tables}


def test_run_triggers_one_job_through_the_manual_contract(target, runtime):
    # GIVEN clean_conversations past its interval gate whatever ran before (the runtime is the session's)
    hour = 3_600_000
    runtime.advance_to((runtime.clock.now_ms() // hour + 1) * hour + 55 * 60_000)
    # WHEN an operator runs one job
    code, out = cli(target, "--as", "alice", "run", "clean_conversations")
    # THEN it ran, and the runs command shows the manual run
    assert code == 0, out
    assert "clean_conversations" in out and "passed: 1  failed: 0" in out
    code, out = cli(target, "runs", "clean_conversations", "--limit", "1")
    assert code == 0 and "manual" in out and "alice" in out


def test_a_manual_run_records_who_asked_as_written_and_the_callers_identity(target, runtime):
    # GIVEN clean_conversations past its interval gate (its last tick 55 minutes ago)
    hour = 3_600_000
    runtime.advance_to((runtime.clock.now_ms() // hour + 1) * hour + 55 * 60_000)
    # WHEN Jane Doe runs it by hand
    code, out = cli(target, "--as", "Jane Doe", "run", "clean_conversations")
    assert code == 0, out
    # THEN its row names her label exactly as written, and the caller identity (on the local runtime the login)
    (row,) = json.loads(cli(target, "runs", "clean_conversations", "--limit", "1", "--json")[1])
    arn = f"local:{local_login()}"
    assert (row["trigger"], row["outcome"], row["requested_by"], row["caller"]) == ("manual", "ran", "Jane Doe", arn)
    assert "Jane Doe" in cli(target, "runs", "clean_conversations", "--limit", "1")[1]
    # AND so does the run's log line
    log = runtime.log_dir / f"{runtime.function_of_job('clean_conversations')}.log"
    lines = [json.loads(line) for line in log.read_text().splitlines() if row["run_id"] in line and line.startswith("{")]
    done = [line for line in lines if line.get("message") == "scheduled_job"]
    assert done and all((d["requested_by"], d["caller"]) == ("Jane Doe", arn) for d in done), lines


def test_a_runs_cost_is_on_its_row_and_the_days_cost_per_job_is_one_command(target, runtime):
    # GIVEN clean_conversations run by hand (past its interval gate)
    hour = 3_600_000
    runtime.advance_to((runtime.clock.now_ms() // hour + 1) * hour + 55 * 60_000)
    assert cli(target, "run", "clean_conversations")[0] == 0
    # THEN its run row carries its DynamoDB units, requests and a dollar estimate, and `runs` shows them
    (row,) = json.loads(cli(target, "runs", "clean_conversations", "--limit", "1", "--json")[1])
    cost = row["cost"]
    assert cost["requests"] >= 4 and cost["units"]["write"] > 0 and cost["units"]["read"] > 0 and cost["dollars"] > 0
    assert "WRU" in cli(target, "runs", "clean_conversations", "--limit", "1")[1]
    # AND `jobfence cost` sums every run of the day per job: the job's line is the sum of its rows
    code, out = cli(target, "cost", "--since", "1d", "--json")
    assert code == 0, out
    report = json.loads(out)
    (mine,) = [j for j in report["jobs"] if j["job"] == "clean_conversations"]
    rows = json.loads(cli(target, "runs", "clean_conversations", "--since", "1d", "--limit", "1000", "--json")[1])
    costed = [r["cost"] for r in rows if r["cost"]]
    assert mine["costed"] == len(costed) and mine["dollars"] == pytest.approx(sum(c["dollars"] for c in costed))
    assert report["dollars"] == pytest.approx(sum(j["dollars"] for j in report["jobs"]))
    code, out = cli(target, "cost")
    assert code == 0 and "clean_conversations" in out and "total" in out and report["prices_as_of"] in out


def test_run_all_prints_one_line_per_job_as_it_finishes_with_its_real_duration(target):
    from jobs.catalog import CATALOG

    code, out = cli(target, "run-all")
    lines = out.strip().splitlines()
    # THEN one line per job (mark, job, outcome, wall-clock milliseconds), then the counts
    assert sorted(line.split()[1] for line in lines[:-1]) == sorted(CATALOG.jobs)
    durations = [int(line.split()[3]) for line in lines[:-1]]
    assert all(line.split()[4] == "ms" for line in lines[:-1]) and max(durations) > 0
    assert lines[-1].startswith("passed: ") and code in (0, 1)


def test_run_all_json_is_one_object_per_job_then_the_totals(target):
    import json

    code, out = cli(target, "run-all", "--json")
    docs = [json.loads(line) for line in out.strip().splitlines()]
    assert {"passed", "failed"} == set(docs[-1])
    assert all({"job", "outcome", "wall_ms", "summary"} <= set(d) for d in docs[:-1])
    assert docs[-1]["passed"] + docs[-1]["failed"] == len(docs) - 1


def test_status_shows_leases_last_runs_and_queues(target):
    cli(target, "run", "clean_dpop_proofs")
    code, out = cli(target, "status")
    assert code == 0, out
    assert "clean_dpop_proofs" in out and "enabled" in out
    assert "queues" in out


def test_sweep_runs_records_a_run_whose_term_ended_unreleased(target, runtime):
    from jobfence.lease import LeaseStore
    from jobfence.runs import RunStore

    # GIVEN a job's run took the lease, wrote its running row and died; nobody ticks it again
    client = target.session.client("dynamodb")
    leases = LeaseStore(client, target.topology.leases_table, runtime.clock)
    lease = leases.acquire("swept_job", "test:dead", 1, run_id="dead-run")
    runs = RunStore(client, target.topology.runs_table)
    runtime.clock.advance(ms=2)
    # WHEN an operator sweeps THEN its row says died, once
    code, out = cli(target, "sweep-runs")
    assert code == 0 and "1 run(s) recorded died" in out, out
    row, = runs.recent("swept_job")
    assert (row["run_id"], row["outcome"], row["fence"]) == ("dead-run", "died", lease.fence)
    assert "0 run(s) recorded died" in cli(target, "sweep-runs")[1]
    leases.release(lease)  # leave the shared runtime without a stray holder


def test_status_json_carries_every_job_with_its_rule_and_last_run(target):
    import json

    cli(target, "run", "clean_dpop_proofs")
    code, out = cli(target, "status", "--json")
    report = json.loads(out)
    jobs = {j["job"]: j for j in report["jobs"]}
    assert code == 0 and set(jobs) == set(target.topology.job_functions())
    assert jobs["clean_dpop_proofs"]["rule_state"] == "ENABLED" and jobs["clean_dpop_proofs"]["next_tick_at"] > report["now_ms"]
    assert jobs["clean_dpop_proofs"]["last_run"]["outcome"] in ("ran", "skipped_interval")
    assert {q["queue"] for q in report["queues"]} == set(target.topology.queues)


@pytest.mark.parametrize("command", ["status", "cost"])
def test_tables_at_80_columns_never_cut_a_job_name(target, command):
    out = io.StringIO()
    main([command], target=target, console=Console(file=out, width=80, color_system=None))
    text = out.getvalue()
    for job in target.topology.job_functions():
        assert job in text, job
    assert "…" not in text


def test_disable_all_stops_ticks_and_workers_and_enable_all_resumes_them(target, runtime):
    # GIVEN every rule and every queue worker disabled in one command
    code, out = cli(target, "disable", "--all")
    assert code == 0 and "DISABLED" in out and "ENABLED" not in out
    lam = runtime.session.client("lambda")
    assert {lam.get_event_source_mapping(UUID=m.uuid)["State"] for m in runtime.topology.mappings} == {"Disabled"}
    try:
        # AND status says so: every worker paused (--json), and a STOPPED line naming what is off
        report = json.loads(cli(target, "status", "--json")[1])
        assert report["workers"] and all(w["paused"] and w["state"] == "Disabled" for w in report["workers"])
        assert {w["function"] for w in report["workers"]} == {
            target.topology.function_by_arn(m.function_arn).name for m in target.topology.mappings
        }
        text = cli(target, "status")[1]
        assert "STOPPED:" in " ".join(text.split()) and "queue worker(s) paused" in " ".join(text.split())
        runs_before = snapshot(target)[target.topology.runs_table]
        # WHEN two simulated hours pass
        timeline = runtime.advance(hours=2)
        # THEN rules came due but nothing was invoked, and no run row was written
        assert timeline.ticks and not any(t.fired for t in timeline.ticks)
        assert snapshot(target)[target.topology.runs_table] == runs_before
    finally:
        code, out = cli(target, "enable", "--all")
    assert code == 0 and "DISABLED" not in out and "Disabled" not in out
    report = json.loads(cli(target, "status", "--json")[1])
    assert not any(w["paused"] for w in report["workers"]) and "STOPPED" not in cli(target, "status")[1]
    # WHEN the next hour passes with the rules enabled again
    timeline = runtime.advance(hours=1)
    # THEN every job ticks again
    fired = {t.job for t in timeline.ticks if t.fired}
    assert {"clean_dpop_proofs", "clean_conversations"} <= fired
    assert all(t.invocation.ok for t in timeline.ticks if t.fired and t.job == "clean_dpop_proofs")


def test_disable_one_job_leaves_the_others_ticking(target, runtime):
    cli(target, "disable", "clean_conversations")
    try:
        timeline = runtime.advance(hours=1)
    finally:
        cli(target, "enable", "clean_conversations")
    by_job = {t.job: t.fired for t in timeline.ticks if t.job in ("clean_conversations", "clean_dpop_proofs")}
    assert by_job == {"clean_conversations": False, "clean_dpop_proofs": True}


def test_ledger_labels_every_tick_and_status_counts_the_missed_ones(target, runtime):
    # GIVEN clean_conversations (hourly) disabled for two hours, then its next tick dropped by EventBridge
    assert cli(target, "disable", "clean_conversations")[0] == 0
    try:
        runtime.advance(hours=2)
    finally:
        assert cli(target, "enable", "clean_conversations")[0] == 0
    runtime.drop_next.add(runtime.rule_of_job("clean_conversations"))
    runtime.advance(hours=2)
    # WHEN an operator reads the last four hours of its ledger
    code, out = cli(target, "ledger", "clean_conversations", "--since", "4h", "--json")
    # THEN each expected tick has its label: two disabled, one missed, then one that ran
    book = json.loads(out)
    assert code == 0 and book["schedule"] == "cron(0 * * * ? *)"
    assert [e["label"] for e in book["entries"]] == ["disabled", "disabled", "missed", "ran"]
    assert book["entries"][-1]["run_id"]
    # AND the table says the same, and `status` counts the missed tick of the last day
    code, out = cli(target, "ledger", "clean_conversations", "--since", "4h")
    assert code == 0 and "4 expected tick(s): disabled=2, missed=1, ran=1" in out, out
    jobs = {j["job"]: j for j in json.loads(cli(target, "status", "--json")[1])["jobs"]}
    assert jobs["clean_conversations"]["missed_last_day"] >= 1
    assert "missed 24h" in cli(target, "status")[1]


def test_a_rule_disabled_outside_the_cli_counts_as_disabled_from_when_it_was_first_seen(target, runtime):
    # GIVEN clean_conversations' rule disabled behind the CLI's back (a deploy, the AWS console): no toggle record
    events = runtime.session.client("events")
    events.disable_rule(Name=runtime.rule_of_job("clean_conversations"))
    try:
        runtime.advance(hours=1)  # one tick nobody saw disabled
        assert cli(target, "ledger", "clean_conversations", "--since", "1h")[0] == 0  # seen disabled now
        runtime.advance(hours=1)
        # WHEN the ledger is read again
        book = json.loads(cli(target, "ledger", "clean_conversations", "--since", "2h", "--json")[1])
    finally:
        cli(target, "enable", "clean_conversations")
    # THEN the tick before the first sighting is missed, the one after it disabled
    assert [e["label"] for e in book["entries"]] == ["missed", "disabled"]


def _after_next_half_hour(runtime):
    hour = 3_600_000
    runtime.advance_to((runtime.clock.now_ms() // hour + 1) * hour + 30 * 60_000)


def test_enable_catch_up_runs_once_for_the_last_disabled_tick(target, runtime):
    # GIVEN clean_conversations (hourly, catch_up none: on demand covers the last day) disabled for two ticks
    _after_next_half_hour(runtime)
    assert cli(target, "disable", "clean_conversations")[0] == 0
    try:
        runtime.advance(hours=2)
    finally:
        # WHEN the operator re-enables it with --catch-up
        code, out = cli(target, "--as", "Jane Doe", "enable", "clean_conversations", "--catch-up")
    # THEN the rule is on, and the job ran once, for the last disabled tick, as a catch-up
    assert code == 0 and "ENABLED" in out and "catch-up clean_conversations for the tick of" in out, out
    (row,) = json.loads(cli(target, "runs", "clean_conversations", "--limit", "1", "--json")[1])
    assert (row["trigger"], row["outcome"], row["requested_by"]) == ("catch_up", "ran", "Jane Doe")
    book = json.loads(cli(target, "ledger", "clean_conversations", "--since", "2h", "--json")[1])
    assert [(e["label"], e["made_up_by"]) for e in book["entries"]] == [("disabled", None), ("disabled", row["run_id"])]
    # AND asking again catches up nothing: the tick has its run
    code, out = cli(target, "enable", "clean_conversations", "--catch-up", "--json")
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == {"job": "clean_conversations", "tick": None, "window_s": 86400,
                                                        "run": None}


def test_a_catch_up_for_a_tick_that_ran_runs_nothing_in_the_deployed_function(target, runtime):
    # GIVEN the hourly tick of 30 minutes ago ran (the embedded runtime ticked it; an hour more clears the gate
    # of any run an earlier test made)
    _after_next_half_hour(runtime)
    runtime.advance(hours=1)
    assert json.loads(cli(target, "ledger", "clean_conversations", "--since", "40m", "--json")[1])["entries"][0]["label"] == "ran"
    tick = runtime.clock.now_ms() - 30 * 60_000
    event = {"trigger": "catch_up", "tick": tick, "requested_by": "auditor"}
    function = runtime.function_of_job("clean_conversations")
    # WHEN a catch-up for it is delivered, twice THEN the function answers skipped_served and writes no row
    outcomes = [runtime.invoke(function, event).payload["outcome"] for _ in range(2)]
    assert outcomes == ["skipped_served", "skipped_served"]
    (row,) = json.loads(cli(target, "runs", "clean_conversations", "--limit", "1", "--json")[1])
    assert row["trigger"] == "scheduled"


def test_invoke_with_a_sample_event(target):
    code, out = cli(target, "invoke", "clean_conversations", "manual_trigger")
    assert code == 0, out
    assert '"job": "clean_conversations"' in out


def test_a_malformed_sample_event_gets_a_clear_error_and_changes_nothing(target):
    before = snapshot(target)
    for sample in ("malformed_scheduled_tick", "malformed_manual_trigger"):
        code, out = cli(target, "invoke", "clean_dpop_proofs", sample)
        assert code == 1
        assert "InvalidEvent" in out
    assert "source='aws.s3'" in cli(target, "invoke", "clean_dpop_proofs", "malformed_scheduled_tick")[1]
    assert snapshot(target) == before


def test_an_unknown_function_is_refused_in_one_line_with_the_choices(target):
    code, out = cli(target, "invoke", "nope", "manual_trigger")
    assert code == 2 and out.count("\n") == 1 and out.startswith("jobfence: error: no deployed function 'nope'")


@pytest.fixture
def finished_batch(target, runtime):
    """A small generation batch with two items the generator refuses, run to its end."""
    from jobfence.work import BatchRef, ItemInput
    from jobs.listings.pipelines import GENERATION
    from jobfence_ops.commands.batches import producer, work_store

    ref = BatchRef("tenant-cli", f"b-{runtime.clock.now_ms()}")
    work_store(target).quota.grant(ref.tenant, 50)
    work = producer(target)
    items = [ItemInput(f"i-{n}", {"title": f"t{n}", **({"reject": True} if n in (1, 4) else {})}) for n in range(8)]
    work.submit(ref, GENERATION, items, created_by="test")
    runtime.advance(minutes=30)
    return ref


def test_batch_shows_the_batch_row_then_its_item_rows(target, finished_batch):
    code, out = cli(target, "batch", str(finished_batch))
    assert code == 0, out
    head, _, items = out.partition("items (by updated_at)")
    assert "finalized" in head
    assert "i-1" in items and "failed" in items and "completed" in items
    assert "items by status: pending=0, running=0, completed=6, failed=2" in out


def test_batch_show_json_carries_the_batchs_cost_the_sum_of_its_item_rows(target, finished_batch):
    import json

    code, out = cli(target, "batch", "show", str(finished_batch), "--json")
    assert code == 0, out
    report = json.loads(out)
    cost, items = report["batch"]["cost"], [i["cost"] for i in report["items"]]
    # every item (completed, or refused by the generator) carries its attempts' cost; the batch their sum
    assert all(c is not None and c["dollars"] > 0 for c in items)
    assert cost["requests"] == sum(c["requests"] for c in items) > 0
    assert cost["dollars"] == pytest.approx(sum(c["dollars"] for c in items))
    code, out = cli(target, "batch", "show", str(finished_batch))
    assert "cost (its items, as last recounted): $" in out


def test_retry_failed_resets_the_budget_of_failed_items_only(target, runtime, finished_batch):
    from jobfence_ops.commands.batches import batch

    code, out = cli(target, "--as", "bob", "retry-failed", str(finished_batch))
    assert code == 0 and "retried 2 item(s)" in out, out
    reopened = batch(target, finished_batch)
    assert reopened.batch.status.value == "open" and reopened.batch.retried_by == "bob"
    assert sorted(i.item_id for i in reopened.items if i.status.value == "pending") == ["i-1", "i-4"]
    # WHEN the wake-ups are delivered, the generator refuses them again: terminal, one attempt each
    runtime.advance(minutes=30)
    again = batch(target, finished_batch)
    assert again.counts() == {"pending": 0, "running": 0, "completed": 6, "failed": 2, "cancelled": 0}
    assert all(i.attempts == 1 for i in again.items if i.status.value == "failed")


def test_batch_commands_refuse_an_unknown_batch_in_one_line(target):
    code, out = cli(target, "batch", "tenant-x/none")
    assert code == 2 and out == "jobfence: error: no batch tenant-x/none\n"


def test_batch_submit_from_a_jsonl_file_then_list_it_while_workers_are_paused(target, runtime, tmp_path):
    import json

    # GIVEN the queue workers paused, and a JSON-lines file of three items
    assert cli(target, "pause-workers")[0] == 0
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "a", "input": {"title": "one"}}\n{"title": "two"}\n\n{"id": "c", "input": {"title": "three"}}\n')
    tenant = f"t-{runtime.clock.now_ms()}"
    try:
        # WHEN it is submitted with a quota grant, and time passes
        code, out = cli(target, "--as", "carol", "batch", "submit", f"{tenant}/b1", str(items), "--grant-quota", "10")
        assert code == 0 and "created batch" in out and "3 item row(s) written, 3 wake-up(s) sent" in out, out
        runtime.advance(minutes=10)
        # THEN nothing was processed: the messages wait in the queue
        code, out = cli(target, "batch", "list", "--tenant", tenant, "--json")
        (row,) = json.loads(out)
        assert (row["tenant"], row["batch_id"], row["total"], row["completed"], row["created_by"]) == (tenant, "b1", 3, 0, "carol")
    finally:
        assert cli(target, "resume-workers")[0] == 0
    # WHEN the workers are resumed and time passes, THEN every item completes
    runtime.advance(minutes=10)
    code, out = cli(target, "batch", f"{tenant}/b1", "--json")
    report = json.loads(out)
    assert report["counts"] == {"pending": 0, "running": 0, "completed": 3, "failed": 0, "cancelled": 0}
    assert sorted(i["item_id"] for i in report["items"]) == ["a", "c", "item-00002"]
    # AND submitting the same file again resumes, writing and sending nothing
    code, out = cli(target, "--as", "carol", "batch", "submit", f"{tenant}/b1", str(items))
    assert code == 0 and "resumed batch" in out and "0 item row(s) written, 0 wake-up(s) sent" in out


def test_the_real_account_path_reads_the_stack_back_through_the_aws_apis(runtime, monkeypatch):
    # GIVEN no --embedded: the CLI builds an AwsTarget from the default credential chain, here
    # pointed at the runtime's emulator the way any AWS endpoint override would be
    for key, value in runtime.emulator.environment().items():
        monkeypatch.setenv(key, value)
    out = io.StringIO()
    console = Console(file=out, width=250, color_system=None)
    # WHEN an operator asks for the status and disables then enables one job's rule
    assert main(["--region", "us-east-1", "status"], console=console) == 0
    assert main(["--region", "us-east-1", "disable", "clean_dpop_proofs", "--json"], console=console) == 0
    assert main(["--region", "us-east-1", "enable", "clean_dpop_proofs", "--json"], console=console) == 0
    text = out.getvalue()
    # THEN the stack was discovered through CloudFormation, and the rule changes went through EventBridge
    assert "target: aws (default credentials, us-east-1)" in text
    disabled, enabled = (json.loads(line) for line in text.strip().splitlines()[-2:])
    assert disabled == [{"kind": "rule", "name": "clean_dpop_proofs", "resource": "jobfence-clean_dpop_proofs", "state": "DISABLED"}]
    assert enabled[0]["state"] == "ENABLED"


def test_the_real_account_path_catches_up_through_the_invoke_api(runtime, monkeypatch):
    # GIVEN an AwsTarget on the emulator, its Lambda Invoke answered by the runtime's own isolate of that
    # function (moto runs no Lambda code); clean_dpop_proofs disabled across two ticks
    from jobfence_ops.targets import AwsTarget

    for key, value in runtime.emulator.environment().items():
        monkeypatch.setenv(key, value)
    sent = []

    def invoke(self, function, event):
        sent.append((function, event))
        return runtime.invoke(function, event)

    monkeypatch.setattr(AwsTarget, "invoke", invoke)
    monkeypatch.setattr("jobfence_ops.targets.SystemClock", lambda: runtime.clock)  # the account's time is the simulated time
    out = io.StringIO()
    console = Console(file=out, width=250, color_system=None)
    _after_next_half_hour(runtime)
    assert main(["--region", "us-east-1", "disable", "clean_dpop_proofs"], console=console) == 0
    try:
        runtime.advance(hours=2)
    finally:
        # WHEN the operator re-enables it with --catch-up
        code = main(["--region", "us-east-1", "--as", "ops", "enable", "clean_dpop_proofs", "--catch-up", "--json"],
                    console=console)
    # THEN one catch-up event went to the job's own function (with the caller from STS), and it ran
    result = json.loads(out.getvalue().strip().splitlines()[-1])
    assert code == 0 and result["run"]["outcome"] == "ran", out.getvalue()
    (function, event), = sent
    assert function == "jobfence-clean_dpop_proofs"
    assert event["trigger"] == "catch_up" and event["tick"] == result["tick"] and event["requested_by"] == "ops"
    assert event["caller"] == runtime.session.client("sts").get_caller_identity()["Arn"]
