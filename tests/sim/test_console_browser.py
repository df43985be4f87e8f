"""The web console in a real browser: Debian's headless Chromium driven by Playwright.

One browser for the module, against the console served over the session's
local runtime. The flow is the operator's: the jobs page, a batch whose items
failed (the tenant's quota ran out), retry them after raising the quota and
see them complete, disable a job and see its rule disabled in EventBridge.
Set JOBFENCE_SCREENSHOTS=DIR to keep the pages as PNGs (docs/img has them).
"""

from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.request

import pytest
from playwright.sync_api import sync_playwright

from jobfence.work import BatchRef, ItemInput
from jobs.listings.pipelines import GENERATION
from ops.commands.batches import producer, work_store
from ops.console.server import ConsoleApp, ConsoleServer
from ops.targets import EmbeddedTarget

pytestmark = [pytest.mark.server, pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"  # Debian's package; `make test` and .ci/run install it
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def console(runtime):
    audit: list[str] = []
    server = ConsoleServer(ConsoleApp(EmbeddedTarget(runtime), audit=audit.append)).start()
    server.audit = audit
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM, headless=True, args=FLAGS
        )
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser):
    page = browser.new_page()
    yield page
    page.close()


def shot(page, name: str) -> None:
    folder = os.environ.get("JOBFENCE_SCREENSHOTS")
    if folder:
        pathlib.Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(pathlib.Path(folder) / f"{name}.png"), full_page=True)


@pytest.fixture
def quota_starved_batch(runtime):
    """Six items, quota for four: two fail with "quota exhausted"."""
    target = EmbeddedTarget(runtime)
    ref = BatchRef(f"acme-{runtime.clock.now_ms()}", "listings")
    work_store(target).quota.grant(ref.tenant, 4)
    producer(target).submit(ref, GENERATION, [ItemInput(f"item-{n}", {"title": f"listing {n}"}) for n in range(6)], created_by="test")
    runtime.advance(minutes=30)
    return ref


def act(page, form_selector: str, who: str) -> None:
    form = page.locator(form_selector)
    form.locator("input[name=who]").fill(who)
    form.locator("input[name=confirm]").check()
    form.locator("button").click()


def test_jobs_page_lists_every_job_with_its_rule_and_lease(console, page, runtime):
    page.goto(console.url + "/")
    rows = page.locator("#jobs tr")
    assert rows.count() == len(runtime.topology.job_functions()) + 1
    text = page.locator("#jobs").inner_text()
    for job in runtime.topology.job_functions():
        assert job in text
    assert "ENABLED" in text and "cron(" in text
    shot(page, "console-jobs")


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
    act(page, "form[action='/actions/retry']", "erin")
    # THEN the batch is open again, says who retried, and refreshes itself while it runs
    assert "erin retried 2 failed item(s)" in page.locator("#flash").inner_text()
    assert page.locator("#status").inner_text() == "open"
    assert page.locator("meta[http-equiv=refresh]").count() == 1
    # WHEN the wake-ups are delivered, THEN every item completed and the batch is finalized
    batch_url = page.url.split("?")[0]
    page.goto("about:blank")  # stop the open batch's 3 s auto-refresh: it would abort a reload mid-flight
    runtime.advance(minutes=30)
    page.goto(batch_url)
    assert page.locator("#counts").inner_text() == "pending=0, running=0, completed=6, failed=0"
    assert page.locator("#status").inner_text() == "finalized"
    assert "erin" in page.locator("#batch").inner_text()
    shot(page, "console-batch-retried")
    assert any("erin retried 2" in line for line in console.audit)


def test_disable_a_job_and_see_its_rule_disabled(console, page, runtime):
    events = runtime.session.client("events")
    rule = runtime.rule_of_job("clean_conversations")
    page.goto(console.url + "/")
    row = page.locator("#jobs tr", has_text="clean_conversations")
    try:
        act(page, "#jobs tr:has-text('clean_conversations') form[action='/actions/disable']", "frank")
        assert "frank disabled clean_conversations: rule DISABLED" in page.locator("#flash").inner_text()
        assert row.locator(".rule").inner_text() == "DISABLED"
        assert events.describe_rule(Name=rule)["State"] == "DISABLED"
        shot(page, "console-job-disabled")
    finally:
        events.enable_rule(Name=rule)


def test_a_run_page_shows_its_row_and_log_query(console, page, runtime):
    page.goto(console.url + "/")
    act(page, "#jobs tr:has-text('clean_dpop_proofs') form[action='/actions/run']", "gina")
    assert "gina ran clean_dpop_proofs" in page.locator("#flash").inner_text()
    page.locator("#runs a").first.click()
    assert "clean_dpop_proofs" in page.locator("#run").inner_text()
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

    good = {"job": "clean_dpop_proofs", "who": "mallory", "confirm": "yes", "csrf": console.app.csrf}
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
        data = json.dumps({}).encode()
        request = urllib.request.Request(server.url + "/actions/run", data=data, method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
    finally:
        server.stop()
