"""Every operator command against the embedded runtime (one shared runtime, see conftest)."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ops.cli import main
from ops.invariants import scan_all

pytestmark = pytest.mark.server


def cli(target, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), target=target, console=Console(file=out, width=250, color_system=None))
    return code, out.getvalue()


def snapshot(target) -> dict[str, list]:
    client = target.session.client("dynamodb")
    return {table: sorted(map(repr, scan_all(client, table))) for table in target.topology.tables}


def test_run_triggers_one_job_through_the_manual_contract(target):
    # WHEN an operator runs one job
    code, out = cli(target, "--as", "alice", "run", "clean_conversations")
    # THEN it ran (or its gate said it ran recently), and the runs command shows the manual run
    assert code == 0, out
    assert "clean_conversations" in out and "passed: 1  failed: 0" in out
    code, out = cli(target, "runs", "clean_conversations")
    assert code == 0 and "manual" in out or "skipped_interval" in out


def test_run_all_prints_one_line_per_job_and_the_counts(target):
    from jobs.catalog import CATALOG

    code, out = cli(target, "run-all")
    for job in CATALOG.jobs:
        assert job in out
    assert "passed:" in out and "failed:" in out
    assert code in (0, 1)


def test_status_shows_leases_last_runs_and_queues(target):
    cli(target, "run", "clean_dpop_proofs")
    code, out = cli(target, "status")
    assert code == 0, out
    assert "clean_dpop_proofs" in out and "ENABLED" in out
    assert "queues" in out


def test_disable_stops_ticks_and_enable_resumes_them(target, runtime):
    # GIVEN every rule disabled
    code, out = cli(target, "disable")
    assert code == 0 and "DISABLED" in out and "ENABLED" not in out
    try:
        runs_before = snapshot(target)[target.topology.runs_table]
        # WHEN two simulated hours pass
        timeline = runtime.advance(hours=2)
        # THEN rules came due but nothing was invoked, and no run row was written
        assert timeline.ticks and not any(t.fired for t in timeline.ticks)
        assert snapshot(target)[target.topology.runs_table] == runs_before
    finally:
        code, out = cli(target, "enable")
    assert code == 0 and "DISABLED" not in out
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


def test_unknown_names_are_refused_with_the_choices(target):
    code, out = cli(target, "run", "no_such_job")
    assert code == 2 and "no deployed job 'no_such_job'" in out and "clean_dpop_proofs" in out
    code, out = cli(target, "invoke", "nope", "manual_trigger")
    assert code == 2 and "no deployed function" in out
    code, out = cli(target, "invoke", "clean_dpop_proofs", "no_such_event")
    assert code == 2 and "no event file" in out
