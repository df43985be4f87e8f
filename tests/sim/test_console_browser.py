"""The web console in a real browser: Debian's headless Chromium driven by Playwright.

One browser for the module, against the console served over the session's
local runtime. The flow is the operator's: the jobs page, a batch whose items
failed (the tenant's quota ran out), retry them after raising the quota and
see them complete, disable a job and see its rule disabled in EventBridge.
And the issue's story end to end: a batch submitted with the CLI, a worker
killed mid-batch with the CLI, time advanced with the CLI, the batch page
refreshing itself as the batch recovers, its failed items retried by a click.
Set JOBFENCE_SCREENSHOTS=DIR to keep the pages as PNGs (docs/img has them).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

import pytest
from playwright.sync_api import expect

from jobfence.work import BatchRef, ItemInput
from jobfence_ops.commands import jobs, switches
from jobfence_ops.commands.batches import producer, work_store
from jobfence_ops.console.server import ConsoleApp, ConsoleServer
from jobfence_ops.local.control import LocalControl
from jobfence_ops.render import when
from jobfence_ops.targets import EmbeddedTarget, LocalTarget
from jobs.listings.pipelines import GENERATION
from tests.sim.browser import ME, act, past_the_gate, shot
from tests.sim.chained import cli

pytestmark = [pytest.mark.server, pytest.mark.browser]

@pytest.fixture
def quota_starved_batch(runtime):
    """Six items, quota for four: two fail with "quota exhausted"."""
    target = EmbeddedTarget(runtime)
    ref = BatchRef(f"acme-{runtime.clock.now_ms()}", "listings")
    work_store(target).quota.grant(ref.tenant, 4)
    producer(target).submit(ref, GENERATION, [ItemInput(f"item-{n}", {"title": f"listing {n}"}) for n in range(6)], created_by="test")
    runtime.advance(minutes=30)
    return ref


def test_jobs_page_lists_every_job_with_its_rule_and_lease(console, page, runtime):
    page.goto(console.url + "/")
    rows = page.locator("#jobs tr")
    assert rows.count() == len(runtime.topology.job_functions()) + 1
    text = page.locator("#jobs").inner_text()
    for job in runtime.topology.job_functions():
        assert job in text
    assert "ENABLED" in text and "cron(" in text
    shot(page, "console-jobs")


def test_a_dead_letter_queue_with_messages_stands_out_and_empty_queues_are_folded(console, page, runtime):
    sqs = runtime.session.client("sqs")
    # GIVEN an empty dead-letter queue (the session's runtime is shared: the day's dying job may have filled it)
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName="jobfence-clean_dpop_proofs-dlq")["QueueUrl"])
    url = sqs.get_queue_url(QueueName="jobfence-clean_conversations-dlq")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="{}")  # a tick EventBridge gave up on
    try:
        page.goto(console.url + "/")
        held = page.locator("#queues tr", has_text="jobfence-clean_conversations-dlq")
        assert held.locator(".bad").inner_text() == "jobfence-clean_conversations-dlq"
        folded = page.locator("#empty-queues summary").inner_text()
        assert folded.endswith("empty queue(s)") and int(folded.split()[0]) > 0
        assert "jobfence-clean_dpop_proofs-dlq" not in page.locator("#queues").inner_text()
    finally:
        sqs.purge_queue(QueueUrl=url)


def test_retry_failed_items_of_a_batch_and_see_them_complete(console, page, runtime, quota_starved_batch):
    ref = quota_starved_batch
    # GIVEN the batch list, WHEN the operator opens the batch
    page.goto(console.url + "/batches")
    page.get_by_role("link", name=str(ref)).click()
    # THEN its rows come first by status: two failed for quota, four completed
    assert page.locator("#counts").inner_text() == "pending=0, running=0, completed=4, failed=2"
    assert "quota exhausted" in page.locator("#items-failed").inner_text()
    shot(page, "console-batch-failed")
    # WHEN the tenant's quota is raised and the operator retries the failed items (name, confirmation)
    work_store(EmbeddedTarget(runtime)).quota.grant(ref.tenant, 2)
    act(page, "form[action='/actions/retry']")
    # THEN the batch is open again, says who retried, and refreshes itself while it runs
    assert f"{ME} retried 2 failed item(s)" in page.locator("#flash").inner_text()
    assert page.locator("#status").inner_text() == "open"
    assert page.locator("body").get_attribute("data-live-every") == "3"  # its live parts, every 3 s
    # WHEN the wake-ups are delivered, THEN every item completed and the batch is finalized
    batch_url = page.url.split("?")[0]
    page.goto("about:blank")  # stop the open batch's 3 s auto-refresh: it would abort a reload mid-flight
    runtime.advance(minutes=30)
    page.goto(batch_url)
    assert page.locator("#counts").inner_text() == "pending=0, running=0, completed=6, failed=0"
    assert page.locator("#status").inner_text() == "finalized"
    assert ME in page.locator("#batch").inner_text()
    shot(page, "console-batch-retried")
    assert any(f"{ME} retried 2" in line for line in console.audit)


def test_disable_a_job_and_see_its_rule_disabled(console, page, runtime):
    events = runtime.session.client("events")
    rule = runtime.rule_of_job("clean_conversations")
    page.goto(console.url + "/")
    row = page.locator("#jobs tr", has_text="clean_conversations")
    try:
        act(page, "#jobs tr:has-text('clean_conversations') form[action='/actions/disable']")
        assert f"{ME} disabled clean_conversations: rule DISABLED" in page.locator("#flash").inner_text()
        assert row.locator(".rule").inner_text() == "DISABLED"
        assert events.describe_rule(Name=rule)["State"] == "DISABLED"
        shot(page, "console-job-disabled")
    finally:
        events.enable_rule(Name=rule)


def test_stop_everything_is_one_action_with_a_banner_on_every_page_and_resume_undoes_it(console, page, runtime):
    # "stop everything": one click behind the confirmation, then a banner on every page while anything is off
    target = EmbeddedTarget(runtime)
    try:
        page.goto(console.url + "/")
        assert page.locator("#stopped").count() == 0
        act(page, "#switches form[action='/actions/stop-all']")
        flash = page.locator("#flash").inner_text()
        rules, workers = len(runtime.topology.job_rules()), len(runtime.topology.mappings)
        assert f"{ME} stopped everything: {rules} rule(s) disabled, {workers} queue worker(s) paused" in flash
        assert "queue worker(s) paused" in page.locator("#stopped").inner_text()
        assert page.locator("#workers .bad").count() == workers  # each mapping shown, highlighted
        assert page.locator("#jobs .rule.bad").count() == rules  # DISABLED highlighted
        shot(page, "console-stopped")
        page.goto(console.url + "/batches")
        assert "STOPPED:" in page.locator("#stopped").inner_text()
        # AND it is so in the services, as `status` reads them
        report = jobs.status(target)
        assert {j.rule_state for j in report.jobs if j.rule_state} == {"DISABLED"}
        assert report.workers and all(w.paused for w in report.workers)
        # WHEN resumed from the console, THEN everything runs again and the banner is gone
        page.goto(console.url + "/")
        act(page, "#switches form[action='/actions/resume-all']")
        assert f"{ME} resumed everything" in page.locator("#flash").inner_text()
        assert page.locator("#stopped").count() == 0
        report = jobs.status(target)
        assert {j.rule_state for j in report.jobs if j.rule_state} == {"ENABLED"}
        assert not any(w.paused for w in report.workers)
    finally:
        switches.set_everything(target, True)


def test_no_text_from_the_url_is_shown_as_a_result(console, page):
    # an action's result is shown by the id its redirect carries; a crafted link shows nothing official-looking
    page.goto(console.url + "/?msg=Your+account+is+locked.+Call+555-0100&done=forged-id")
    assert page.locator("#flash").count() == 0
    assert "555-0100" not in page.content()


def test_did_it_run_at_that_hour_is_one_click_from_the_jobs_page(console, page, runtime):
    # GIVEN clean_conversations (hourly) disabled for a tick, then a tick EventBridge dropped, then one that ran
    target = EmbeddedTarget(runtime)
    switches.set_rules(target, False, "clean_conversations")
    try:
        runtime.advance(hours=1)
    finally:
        switches.set_rules(target, True, "clean_conversations")
    runtime.drop_next.add(runtime.rule_of_job("clean_conversations"))
    runtime.advance(hours=1)
    runtime.advance(hours=1)
    # WHEN the operator clicks the job's missed count on the jobs page
    page.goto(console.url + "/")
    link = page.locator("#jobs tr:has-text('clean_conversations') a.missed")
    assert int(link.inner_text()) >= 1 and "bad" in (link.get_attribute("class") or "")
    link.click()
    # THEN the ledger shows each expected hour and what became of it, the latest three as they happened
    assert page.locator("h1").inner_text() == "Ledger of clean_conversations"
    ticks = page.locator("#ledger tr .tick").all_inner_texts()
    labels = page.locator("#ledger tr .label").all_inner_texts()
    assert labels[-3:] == ["disabled", "missed", "ran"], list(zip(ticks, labels, strict=True))
    now = runtime.clock.now_ms()
    assert ticks[-1] == when(now - now % 3_600_000)  # the hour that just struck: ran
    shot(page, "console-ledger")
    # AND the run that answered it is one more click away
    page.locator("#ledger tr").last.locator("a").first.click()
    assert "clean_conversations" in page.locator("#run").inner_text()


def test_run_now_that_the_interval_gate_skips_says_it_did_not_run(console, page, runtime):
    # GIVEN clean_dpop_proofs run just now (its interval is an hour)
    page.goto(console.url + "/")
    act(page, "#jobs tr:has-text('clean_dpop_proofs') form[action='/actions/run']")
    # WHEN it is asked to run again at once (from its runs page, where that redirect lands), THEN the message
    # says it was not run, and why
    act(page, "form[action='/actions/run']")
    flash = page.locator("#flash").inner_text()
    assert flash == (f"{ME} asked to run clean_dpop_proofs: not run: "
                     "skipped_interval (its last run is more recent than its interval)"), flash


def test_at_760_px_nothing_runs_off_the_screen(console, browser):
    narrow = browser.new_page()
    narrow.set_viewport_size({"width": 760, "height": 900})
    try:
        for path in ("/", "/jobs/clean_conversations", "/jobs/clean_conversations/ledger", "/batches"):
            narrow.goto(console.url + path)
            # the page itself never scrolls sideways: wide tables scroll inside their own box
            assert narrow.evaluate("document.documentElement.scrollWidth") <= 760, path
            for button in narrow.locator("button").all()[:40]:
                box = button.bounding_box()
                assert box is None or box["x"] + box["width"] <= 760 or _inside_scroller(button), path
        shot(narrow, "console-760px")
    finally:
        narrow.close()


def _inside_scroller(locator) -> bool:
    """A button in a table that scrolls sideways inside its own box (reachable by scrolling that table)."""
    return locator.evaluate("el => !!el.closest('.scroll')")


def test_a_run_page_shows_its_row_and_log_query(console, page, runtime):
    # GIVEN clean_dpop_proofs' last run over an hour old (its interval gate would skip a manual run sooner)
    past_the_gate(runtime, "clean_dpop_proofs")
    page.goto(console.url + "/")
    act(page, "#jobs tr:has-text('clean_dpop_proofs') form[action='/actions/run']")
    assert f"{ME} ran clean_dpop_proofs: ran" in page.locator("#flash").inner_text()
    # "who triggered this run?": the runs table and the run page name the caller identity
    mine = page.locator("#runs tr", has=page.locator(".who", has_text=ME)).first
    assert mine.locator(".caller").inner_text() == ME
    mine.locator("a").first.click()
    fields = page.locator("#run").inner_text()
    assert "clean_dpop_proofs" in fields and f"requested by\t{ME}" in fields, fields
    assert f"caller\t{ME}" in fields
    assert 'filter stage = "clean_dpop_proofs" and run_id = ' in page.locator("#query").inner_text()


def test_an_action_without_the_form_token_or_confirmation_is_refused(console, runtime):
    def post(body: dict, cookie: str | None = None) -> int:
        data = "&".join(f"{k}={v}" for k, v in body.items()).encode()
        request = urllib.request.Request(console.url + "/actions/disable", data=data, method="POST")
        if cookie:
            request.add_header("Cookie", f"jobfence_csrf={cookie}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    good = {"job": "clean_dpop_proofs", "confirm": "yes", "csrf": console.app.csrf}
    assert post({**good, "csrf": "forged"}, console.app.csrf) == 403
    assert post(good) == 403  # no cookie: a form posted from another site
    assert post({k: v for k, v in good.items() if k != "confirm"}, console.app.csrf) == 400
    events = runtime.session.client("events")
    assert events.describe_rule(Name=runtime.rule_of_job("clean_dpop_proofs"))["State"] == "ENABLED"


def test_a_read_only_console_has_no_buttons_and_refuses_actions(runtime, page):
    server = ConsoleServer(ConsoleApp(EmbeddedTarget(runtime), read_only=True)).start()
    try:
        page.goto(server.url + "/")
        assert page.locator("form.act").count() == 0
        assert page.locator("#mode").inner_text() == "read-only: started with --read-only"
        shot(page, "console-read-only")
        # WHEN a POST that a writable console would accept (valid token in form and cookie, confirmed, named)
        # is sent to it, THEN it is refused as read-only and nothing runs
        target = EmbeddedTarget(runtime)
        before = len(jobs.runs(target, "clean_dpop_proofs", 1000))
        data = urllib.parse.urlencode(
            {"csrf": server.app.csrf, "confirm": "yes", "job": "clean_dpop_proofs"}
        ).encode()
        request = urllib.request.Request(server.url + "/actions/run", data=data, method="POST",
                                         headers={"Cookie": f"jobfence_csrf={server.app.csrf}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
        assert "this console is read-only: started with --read-only" in refused.value.read().decode()
        assert len(jobs.runs(target, "clean_dpop_proofs", 1000)) == before
    finally:
        server.stop()


REFRESHED_S = 20  # the batch page reloads itself every 3 s; a loaded machine may take a few reloads' time


def test_a_new_users_story_submit_kill_a_worker_watch_it_recover_retry(local_dir, runtime, page, tmp_path):
    # GIVEN the console served over the background local runtime, as `jobfence console --local` serves it
    audit: list[str] = []
    server = ConsoleServer(ConsoleApp(LocalTarget(LocalControl(local_dir)), audit=audit.append)).start()
    try:
        tenant = f"story-{runtime.clock.now_ms()}"
        items = tmp_path / "items.jsonl"
        items.write_text("".join(json.dumps({"id": f"i-{n:02d}", "input": {"title": f"t{n}"}}) + "\n" for n in range(12)))
        # WHEN a batch of 12 is submitted with quota for 10 (one command) and opened in the console (one click)
        code, out = cli("--local", "--as", "dana", "batch", "submit", f"{tenant}/b", str(items), "--grant-quota", "10")
        assert code == 0 and "12 wake-up(s) sent" in out, out
        page.goto(server.url + "/batches")
        page.get_by_role("link", name=f"{tenant}/b").click()
        # THEN it is open, waiting, and refreshes itself
        expect(page.locator("#status")).to_have_text("open")
        expect(page.locator("#counts")).to_have_text("pending=12, running=0, completed=0, failed=0")
        assert page.locator("body").get_attribute("data-live-every") == "3"  # its live parts, every 3 s
        shot(page, "console-story-submitted")
        # WHEN the generation worker is killed mid-batch (one command) and time moves on (one command)
        code, out = cli("local", "kill-worker")
        assert code == 0 and "listing_generation-worker" in out, out
        code, out = cli("local", "advance", "5m")
        assert code == 0 and "died mid-batch" in out, out
        # THEN the page, refreshing itself, shows the items the dead isolate claimed, still running
        expect(page.locator("#items-running")).to_be_visible(timeout=REFRESHED_S * 1000)
        shot(page, "console-story-worker-killed")
        # WHEN time moves past the visibility timeout and the reclaim sweep (one command)
        code, out = cli("local", "advance", "40m")
        assert code == 0, out
        # THEN the page shows the batch recovered by itself: ten completed, two failed for quota, finalized
        expect(page.locator("#counts")).to_have_text("pending=0, running=0, completed=10, failed=2", timeout=REFRESHED_S * 1000)
        expect(page.locator("#status")).to_have_text("finalized")
        assert "quota exhausted" in page.locator("#items-failed").inner_text()
        assert page.locator("body").get_attribute("data-live-every") == "5"  # finalized: as any page
        shot(page, "console-story-recovered")
        # WHEN the tenant gets two more actions (one command) and the failed items are retried (one click)
        assert cli("--local", "quota", tenant, "--grant", "2")[0] == 0
        act(page, "form[action='/actions/retry']")
        expect(page.locator("#flash")).to_contain_text(f"{ME} retried 2 failed item(s)")
        code, out = cli("local", "advance", "30m")
        assert code == 0, out
        # THEN the page shows every item completed, by itself
        expect(page.locator("#counts")).to_have_text("pending=0, running=0, completed=12, failed=0", timeout=REFRESHED_S * 1000)
        expect(page.locator("#status")).to_have_text("finalized")
        assert ME in page.locator("#batch").inner_text()
        shot(page, "console-story-retried")
    finally:
        server.stop()
    assert any(f"{ME} retried 2 failed item(s)" in line for line in audit)
