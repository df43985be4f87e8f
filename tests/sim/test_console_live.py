"""The console's live views, charts, run logs and run search, in Debian's headless Chromium (Playwright).

The pages carry no inline style or script: the console's own stylesheet and script (`static/`) under a CSP
of `'self'`. A live page (here refreshing every second) takes in a run made behind it without a reload, and
a part the operator is using (a typed name, a ticked box) waits until it is left alone. The jobs page draws
each job's last ticks, the batch page its items finished over time; the run page shows the run's log lines;
the job page searches its runs by outcome, time and who.
"""

from __future__ import annotations

import io
import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from playwright.sync_api import expect
from rich.console import Console

from jobfence.work import BatchRef, ItemInput
from jobfence_ops.cli import main
from jobfence_ops.audit import Operator, local_login
from jobfence_ops.commands import batches, jobs, switches
from jobfence_ops.commands.batches import producer, work_store
from jobfence_ops.console import charts
from jobfence_ops.console.server import ConsoleApp, ConsoleServer
from jobfence_ops.render import cost_text, pairs
from jobfence_ops.targets import EmbeddedTarget
from jobs.listings.pipelines import GENERATION
from tests.sim.browser import past_the_gate, shot

pytestmark = [pytest.mark.server, pytest.mark.browser]

UPDATED_MS = 15_000  # a live page refreshes every second here; a loaded machine may take a few


@pytest.fixture(scope="module")
def live(runtime):
    """A console whose live pages refresh every second."""
    server = ConsoleServer(ConsoleApp(EmbeddedTarget(runtime), audit=lambda line: None, live_s=1)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def runnable(runtime):
    """clean_dpop_proofs' last run over an hour old: its interval gate lets a manual run through."""
    past_the_gate(runtime, "clean_dpop_proofs")
    return EmbeddedTarget(runtime)


def get(url: str) -> tuple[int, Any, str]:
    """Status, headers (any case), body."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def test_pages_use_the_console_s_own_stylesheet_and_script_under_a_strict_policy(live, page):
    # GIVEN the jobs page WHEN it is served THEN its policy allows styles and scripts from the console only
    status, headers, body = get(live.url + "/")
    policy = headers["Content-Security-Policy"]
    assert status == 200 and "style-src 'self'" in policy and "script-src 'self'" in policy
    assert "unsafe-inline" not in policy and "<style" not in body and " style=" not in body
    # AND the console serves them itself, as shipped, and nothing else under /static
    css = get(live.url + "/static/console.css")
    assert css[0] == 200 and css[1]["content-type"].startswith("text/css") and "form.act" in css[2]
    assert get(live.url + "/static/live.js")[1]["content-type"].startswith("text/javascript")
    assert get(live.url + "/static/../server.py")[0] == 404 and get(live.url + "/static/x.css")[0] == 404
    # AND in the browser the stylesheet applies and the policy blocks nothing the page needs
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    page.goto(live.url + "/")
    assert page.evaluate("getComputedStyle(document.querySelector('th')).backgroundColor") == "rgb(238, 238, 255)"
    expect(page.locator("#live")).to_have_text("live")
    assert blocked == []


def as_(name: str) -> Operator:
    """An operator whose runs carry `name` (the `--as` label) beside this machine's identity."""
    me = f"local:{local_login()}"
    return Operator(me, me, name)


def test_the_jobs_page_takes_in_a_run_made_behind_it_and_keeps_a_form_in_use(live, page, runnable):
    target = runnable
    page.goto(live.url + "/")
    page.evaluate("window.notReloaded = true")
    row = page.locator("#job-clean_dpop_proofs")
    other = page.locator("#job-clean_conversations")
    # GIVEN the operator half-way through a Run now of clean_dpop_proofs: the confirmation ticked
    form = row.locator("form[action='/actions/run']")
    form.locator("input[name=confirm]").check()
    # WHEN the job runs behind the page (the runtime, not the browser) and another job's rule is disabled
    assert jobs.run(target, "clean_dpop_proofs", as_("behind")).outcome == "ran"
    counts = pairs(jobs.last_day(target, "clean_dpop_proofs"))
    assert counts not in row.inner_text()
    switches.set_rules(target, False, "clean_conversations")
    try:
        # THEN the other row takes in the change without a reload, and the row in use keeps its form as it was
        expect(other.locator(".rule")).to_have_text("DISABLED", timeout=UPDATED_MS)
        expect(page.locator("#stopped")).to_contain_text("clean_conversations", timeout=UPDATED_MS)  # the banner
    finally:
        switches.set_rules(target, True, "clean_conversations")
    expect(other.locator(".rule")).to_have_text("ENABLED", timeout=UPDATED_MS)
    expect(page.locator("#stopped")).to_have_count(0, timeout=UPDATED_MS)
    expect(page.locator("#live")).to_have_text("live (a part you are using waits)", timeout=UPDATED_MS)
    assert form.locator("input[name=confirm]").is_checked()
    assert counts not in row.inner_text()
    # WHEN the operator leaves the form as it was THEN that row catches up, still without a reload
    form.locator("input[name=confirm]").uncheck()
    page.evaluate("document.activeElement.blur()")
    expect(row).to_contain_text(counts, timeout=UPDATED_MS)
    assert page.evaluate("window.notReloaded") is True
    assert int(page.locator("body").get_attribute("data-live-updates")) >= 1


def test_each_job_has_a_sparkline_of_its_last_ticks(live, page, runtime):
    report = jobs.status(EmbeddedTarget(runtime))
    page.goto(live.url + "/")
    for job in report.jobs:
        shown = job.ticks_last_day[-charts.SPARK_TICKS:]
        marks = page.locator(f"#job-{job.job} svg.spark rect.mark")
        assert marks.count() == len(shown), job.job
        if shown:
            kinds = [charts.TICK_KIND[label] for label in shown]
            assert marks.last.get_attribute("class") == f"mark {kinds[-1]}", job.job
    shot(page, "console-jobs-sparklines")


def test_the_batch_page_charts_its_items_finished_over_time(live, page, runtime):
    # GIVEN six items with quota for four: four complete, two fail
    target = EmbeddedTarget(runtime)
    ref = BatchRef(f"chart-{runtime.clock.now_ms()}", "listings")
    work_store(target).quota.grant(ref.tenant, 4)
    producer(target).submit(ref, GENERATION, [ItemInput(f"item-{n}", {"title": f"t{n}"}) for n in range(6)],
                            created_by="test")
    # (while it is open, a browser without script reloads its page every 3 s; once finished, it does not)
    noscript = '<noscript><meta http-equiv="refresh" content="3"></noscript>'
    assert noscript in get(f"{live.url}/batches/{ref.tenant}/{ref.batch_id}")[2]
    runtime.advance(minutes=30)
    assert noscript not in get(f"{live.url}/batches/{ref.tenant}/{ref.batch_id}")[2]
    report = batches.batch(target, ref)
    b = report.batch
    end = b.finalized_at or max([b.updated_at, *(i.updated_at for i in report.items)])
    counted = charts.buckets([(i.updated_at, i.status.value) for i in report.items], b.created_at, end)
    expected = sum(bool(c.completed) + bool(c.failed) for c in counted)
    # WHEN its page is opened THEN the chart has one mark per bucket and status with items, 4 green 2 red
    page.goto(f"{live.url}/batches/{ref.tenant}/{ref.batch_id}")
    chart = page.locator("#throughput")
    assert chart.locator("rect.mark").count() == expected >= 2
    assert chart.locator("svg").get_attribute("aria-label") == "4 completed, 2 failed"
    assert "4 completed, 2 failed" in chart.locator("figcaption").inner_text()
    # AND its cost, the sum of its item rows' (the recount's), as the CLI writes it
    assert b.cost is not None and b.cost.dollars > 0
    assert page.locator("#cost").inner_text() == f"cost (its items, as last recounted): {cost_text(b.cost)}"
    shot(page, "console-batch-chart")


def test_a_run_page_shows_the_run_s_log_lines_from_the_local_runtime(live, page, runnable):
    result = jobs.run(runnable, "clean_dpop_proofs", as_("logan"))
    assert result.outcome == "ran"
    run = next(r for r in jobs.runs(runnable, "clean_dpop_proofs", 5) if r.requested_by == "logan")
    page.goto(f"{live.url}/jobs/clean_dpop_proofs/runs/{run.run_id}")
    assert page.locator("#logs-source").inner_text().startswith("local runtime: jobfence-clean_dpop_proofs.log")
    logs = page.locator("#logs tr", has_text="scheduled_job")
    assert logs.count() == 1  # its own line, not another run's
    line = logs.first.inner_text()
    assert "outcome=ran" in line and "requested_by=logan" in line and f"run_id={run.run_id}" in line
    assert f'run_id = "{run.run_id}"' in page.locator("#query").inner_text()  # the same run's query, for AWS
    shot(page, "console-run-logs")


def test_the_job_page_searches_its_runs_by_outcome_time_and_who(live, page, runnable):
    assert jobs.run(runnable, "clean_dpop_proofs", as_("sofia")).outcome == "ran"
    page.goto(live.url + "/jobs/clean_dpop_proofs")
    # WHEN the operator searches for runs that ran in the last 2 hours asked for by "SOF"
    search = page.locator("#search")
    search.locator("select[name=outcome]").select_option("ran")
    search.locator("input[name=since]").fill("2h")
    search.locator("input[name=who]").fill("SOF")
    search.locator("button").click()
    # THEN only those runs are listed, the form keeps what was asked, and the URL can be shared
    assert "outcome=ran" in page.url and "who=SOF" in page.url
    whos = page.locator("#runs .who").all_inner_texts()
    assert whos and set(whos) == {"sofia"}
    assert page.locator("#search-count").inner_text().startswith(f"{len(whos)} match(es)")
    assert search.locator("input[name=who]").input_value() == "SOF"
    shot(page, "console-runs-search")
    # AND a bad value is a one-line error, with nothing run or lost
    page.goto(live.url + "/jobs/clean_dpop_proofs?since=yesterday")
    assert page.locator("#error").inner_text() == (
        "search: since: a UTC time like 2026-01-01T03:00 or a span like 30m, 6h, 2d; got 'yesterday'")
    assert get(live.url + "/jobs/clean_dpop_proofs?outcome=nope")[0] == 400


def test_without_script_a_page_still_works_and_offers_a_refresh(live, page):
    # GIVEN a page with script execution switched off (Chromium's own emulation)
    page.context.new_cdp_session(page).send("Emulation.setScriptExecutionDisabled", {"value": True})
    page.goto(live.url + "/jobs/clean_dpop_proofs")
    # THEN it is whole, nothing claims to be live, and a plain link reloads it
    assert page.locator("#runs").count() == 1 and page.locator("#search button").count() == 1
    assert page.locator("#live").inner_text() == ""
    assert page.locator("#reload").get_attribute("href") == ""


def test_jobfence_runs_searches_with_the_same_filter_and_refuses_bad_input_in_one_line(runnable):
    def cli(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(list(argv), target=runnable, console=Console(file=out, width=250, color_system=None))
        return code, out.getvalue()

    assert jobs.run(runnable, "clean_dpop_proofs", as_("Cleo")).outcome == "ran"
    code, out = cli("runs", "clean_dpop_proofs", "--who", "cleo", "--outcome", "ran", "--since", "1h", "--json")
    rows = json.loads(out)
    assert code == 0 and rows and {r["requested_by"] for r in rows} == {"Cleo"}
    assert cli("runs", "clean_dpop_proofs", "--who", "nobody-ran-this", "--json") == (0, "[]\n")
    code, out = cli("runs", "clean_dpop_proofs", "--until", "soon")
    assert code == 2 and out.strip().endswith("until: a UTC time like 2026-01-01T03:00 or a span like 30m, 6h, 2d; "
                                             "got 'soon'") and out.count("\n") == 1, out
