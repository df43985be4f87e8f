"""Who did what, on what, when: the audit table from the console and the CLI, in Debian's Chromium.

The console over the session's local runtime acts as its caller identity (`ME`, `local:<login>`), never a typed
name; every action is a row of the stack's audit table, listed on /audit and on the run, job and batch pages.
"""

from __future__ import annotations

import io
import urllib.error
import urllib.request

import pytest
from rich.console import Console

from jobfence.work import BatchRef
from jobfence_ops import audit
from jobfence_ops.cli import main
from jobfence_ops.console.server import ConsoleApp, ConsoleServer
from jobfence_ops.runtime.topology import Topology
from jobfence_ops.targets import EmbeddedTarget
from jobfence_ops.console.access import detect
from tests.sim.browser import ME, act, shot
from tests.sim.test_console_access import RecordingSimulator, account  # noqa: F401  (the assumed role's target)

pytestmark = [pytest.mark.server, pytest.mark.browser]

JOB = "clean_dpop_proofs"  # interval one hour: a second Run now at once is skipped by its gate


def past_the_gate(runtime, job: str = JOB) -> None:
    """The job's last run over an hour old, without a tick of its own in between."""
    events, rule = runtime.session.client("events"), runtime.rule_of_job(job)
    events.disable_rule(Name=rule)
    try:
        runtime.advance(minutes=61)
    finally:
        events.enable_rule(Name=rule)


def entries(runtime, **filters) -> list[audit.AuditEntry]:
    target = EmbeddedTarget(runtime)
    return audit.log_of(target).recent(target.clock.now_ms(), 50, **filters)


def cli(runtime, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), target=EmbeddedTarget(runtime), console=Console(file=out, width=250, color_system=None))
    return code, out.getvalue()


def test_who_triggered_this_run_is_one_click_from_the_jobs_page(console, page, runtime):
    past_the_gate(runtime)
    # GIVEN the console, which says who it acts as, and no name field on any form
    page.goto(console.url + "/")
    assert page.locator("#identity").inner_text() == f"you are {ME}"
    assert page.locator("input[name=who]").count() == 0
    # WHEN the operator runs the job (one tick of the confirmation) and goes back to the jobs page
    act(page, f"#jobs tr:has-text('{JOB}') form[action='/actions/run']")
    assert f"{ME} ran {JOB}: ran" in page.locator("#flash").inner_text()
    page.goto(console.url + "/")
    # THEN one click on the job's last run opens that run, which names the caller identity ...
    page.locator(f"#jobs tr:has-text('{JOB}') a.run-link").click()
    fields = page.locator("#run").inner_text()
    assert f"requested by\t{ME}" in fields and f"caller\t{ME}" in fields, fields
    run_id = page.url.rsplit("/", 1)[-1]
    # ... and the audit entry of that run now: who, what, the result, linked to this very run
    mine = page.locator("#audit tr", has=page.locator(f"a.run[href$='{run_id}']"))
    assert mine.count() == 1
    assert mine.locator(".actor").inner_text() == ME
    assert mine.locator(".action").inner_text() == "run now"
    assert mine.locator(".result").inner_text() == "ran: ran"
    shot(page, "console-run-audit")


def test_a_skipped_run_now_is_recorded_with_who_asked_and_why(console, page, runtime):
    past_the_gate(runtime)
    page.goto(console.url + f"/jobs/{JOB}")
    act(page, "form[action='/actions/run']")
    page.locator("#runs tr").first.wait_for()  # the live part may be mid-swap: count the rendered table
    runs_before = page.locator("#runs tr").count()
    # WHEN it is asked again at once: the interval gate skips it, and no run row is written
    act(page, "form[action='/actions/run']")
    assert "not run: skipped_interval" in page.locator("#flash").inner_text()
    page.locator("#runs tr").first.wait_for()
    assert page.locator("#runs tr").count() == runs_before
    # THEN the job's page lists who asked and that it did not run, and so does the table
    newest = page.locator("#audit tr").nth(1)
    assert newest.locator(".actor").inner_text() == ME
    assert newest.locator(".result").inner_text().startswith("not run: skipped_interval (its last run is more recent")
    (row,) = entries(runtime, subject=audit.job_subject(JOB), action="run now")[:1]
    assert (row.actor, row.caller, row.source, row.run_id) == (ME, ME, "console", None)
    assert row.result.startswith("not run: skipped_interval")


def test_every_action_is_on_the_audit_page_filtered_by_actor_action_and_subject(console, page, runtime):
    rule = runtime.rule_of_job("clean_conversations")
    page.goto(console.url + "/")
    try:
        act(page, "#jobs tr:has-text('clean_conversations') form[action='/actions/disable']")
    finally:
        runtime.session.client("events").enable_rule(Name=rule)
    # WHEN the operator opens the audit page (one click from any page)
    page.get_by_role("link", name="Audit", exact=True).click()
    # THEN the disable is the newest entry: who, what, on what, when, the result, from where
    newest = page.locator("#audit tr").nth(1)
    assert newest.locator(".actor").inner_text() == ME
    assert newest.locator(".action").inner_text() == "disable"
    assert newest.locator("a", has_text="job:clean_conversations").count() == 1
    assert newest.locator(".result").inner_text() == "1 rule(s) DISABLED"
    assert "console" in newest.inner_text()
    shot(page, "console-audit")
    # AND the filters narrow it: by action and subject, by a part of the actor; an unknown actor finds nothing
    page.locator("select[name=action]").select_option("disable")
    page.locator("input[name=subject]").fill("job:clean_conversations")
    page.locator("#audit-filter button").click()
    actions = page.locator("#audit .action").all_inner_texts()
    assert actions and set(actions) == {"disable"}
    page.goto(console.url + f"/audit?actor={ME.split(':', 1)[1]}&action=disable")
    assert page.locator("#audit .actor").count() >= 1
    page.goto(console.url + "/audit?actor=nobody-of-that-name")
    assert page.locator("#audit tr.empty").inner_text() == "no action recorded"


def test_actions_from_the_cli_are_on_the_batch_page(console, page, runtime, tmp_path):
    # GIVEN a batch submitted from the CLI (with quota granted), WHEN its failed items are retried, with a label
    ref = BatchRef(f"audited-{runtime.clock.now_ms()}", "b")
    items = tmp_path / "items.jsonl"
    items.write_text('{"id": "i-1", "input": {"title": "t"}}\n')
    code, out = cli(runtime, "batch", "submit", str(ref), str(items), "--grant-quota", "1")
    assert code == 0, out
    code, out = cli(runtime, "--as", "Jane Doe", "retry-failed", str(ref))
    assert code == 0, out
    # THEN the batch page lists both, newest first: the caller identity, the label beside it, the result, the CLI
    page.goto(console.url + f"/batches/{ref.tenant}/{ref.batch_id}")
    retried, submitted = page.locator("#audit tr").all()[1:]
    assert [r.locator(".action").inner_text() for r in (retried, submitted)] == ["retry failed", "submit"]
    assert retried.locator(".actor").inner_text() == ME == submitted.locator(".actor").inner_text()
    assert retried.locator(".label").inner_text() == "as 'Jane Doe'" and submitted.locator(".label").count() == 0
    assert retried.locator(".result").inner_text().startswith("retried 0 item(s)")
    assert submitted.locator(".result").inner_text() == "created (generation): 1 item row(s) written, 1 wake-up(s) sent"
    assert "cli" in retried.inner_text()
    # AND the quota grant is an entry about the tenant
    (grant,) = entries(runtime, subject=f"tenant:{ref.tenant}")
    assert (grant.action, grant.actor, grant.result) == ("grant quota", ME, "granted 1: limit 1, available 1")


def test_a_failed_audit_write_is_said_beside_the_actions_own_result(runtime, monkeypatch):
    # GIVEN a stack whose audit table cannot be written (here: a name that does not exist)
    monkeypatch.setattr(Topology, "audit_table", property(lambda self: "jobfence-no-such-audit"))
    past_the_gate(runtime)
    app = ConsoleApp(EmbeddedTarget(runtime), audit=lambda line: None)
    # WHEN a run now is done from the console
    done = app.post("/actions/run", {"job": JOB, "confirm": "yes", "csrf": app.csrf}, app.csrf)
    # THEN its result is shown, and beside it that the audit entry was not written, and why
    message = app.result(done.split("done=", 1)[1])
    assert message == (
        f"{ME} ran {JOB}: ran; the audit entry was NOT written (AWS answered ResourceNotFoundException)"
    ), message
    # AND from the CLI: the result line, then the audit line, and a failing exit status
    code, out = cli(runtime, "disable", "clean_conversations")
    runtime.session.client("events").enable_rule(Name=runtime.rule_of_job("clean_conversations"))
    assert code == 1 and "DISABLED" in out, out
    assert "audit: the entry for disable job:clean_conversations was NOT written (AWS answered" in out


def test_behind_a_trusted_proxy_each_request_acts_as_the_user_its_header_names(runtime, browser):
    server = ConsoleServer(
        ConsoleApp(EmbeddedTarget(runtime), audit=lambda line: None, proxy_header="X-Forwarded-User")
    ).start()
    page = browser.new_page()
    try:
        # WHEN a request comes without the header THEN it is refused, before any page or action
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(server.url + "/", timeout=10)
        assert refused.value.code == 401
        assert "X-Forwarded-User" in refused.value.read().decode()
        post = urllib.request.Request(
            server.url + "/actions/disable",
            data=f"job=clean_conversations&confirm=yes&csrf={server.app.csrf}".encode(),
            headers={"Cookie": f"jobfence_csrf={server.app.csrf}"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(post, timeout=10)
        assert refused.value.code == 401
        events = runtime.session.client("events")
        assert events.describe_rule(Name=runtime.rule_of_job("clean_conversations"))["State"] == "ENABLED"
        # WHEN the proxy names the signed-in user THEN the console acts as that user, via its own caller
        page.set_extra_http_headers({"X-Forwarded-User": "jane@example.com"})
        page.goto(server.url + "/")
        assert page.locator("#identity").inner_text() == f"you are proxy:jane@example.com (via {ME})"
        try:
            act(page, "#jobs tr:has-text('clean_conversations') form[action='/actions/disable']")
        finally:
            events.enable_rule(Name=runtime.rule_of_job("clean_conversations"))
        assert "proxy:jane@example.com (via" in page.locator("#flash").inner_text()
        (row,) = entries(runtime, subject="job:clean_conversations", action="disable", actor="jane@")[:1]
        assert (row.actor, row.caller) == ("proxy:jane@example.com", ME)
    finally:
        page.close()
        server.stop()


def test_without_the_flag_the_proxy_header_is_not_believed(console, page, runtime):
    page.set_extra_http_headers({"X-Forwarded-User": "mallory"})
    page.goto(console.url + "/")
    assert page.locator("#identity").inner_text() == f"you are {ME}"


def test_against_an_account_the_actor_is_the_callers_sts_identity(account, runtime, page):
    # GIVEN a console over the stack with an assumed role's credentials (moto standing in for the account)
    target, role_arn = account
    simulator = RecordingSimulator()
    access = detect(target, simulator)
    # THEN recording in the audit table is one of the calls it must be allowed to act
    asked = {call: resources for _, calls, resources in simulator.asked for call in calls}
    assert [arn.rsplit("/", 1)[-1] for arn in asked["dynamodb:PutItem"]] == ["jobfence-audit"]
    server = ConsoleServer(ConsoleApp(target, audit=lambda line: None, access=access)).start()
    try:
        sts = target.session.client("sts").get_caller_identity()["Arn"]
        assert ":assumed-role/" in sts and sts.endswith("/erin")
        page.goto(server.url + "/")
        assert page.locator("#identity").inner_text() == f"you are {sts}"
        try:
            act(page, "#jobs tr:has-text('clean_conversations') form[action='/actions/disable']")
        finally:
            runtime.session.client("events").enable_rule(Name=runtime.rule_of_job("clean_conversations"))
        assert f"{sts} disabled clean_conversations" in page.locator("#flash").inner_text()
        # (the account's time is the wall clock's, not the runtime's simulated one)
        found = audit.log_of(target).recent(target.clock.now_ms(), 5, subject="job:clean_conversations")
        assert (found[0].action, found[0].actor, found[0].caller, found[0].label) == ("disable", sts, sts, None)
    finally:
        server.stop()
