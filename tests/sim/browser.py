"""Shared parts of the console's browser tests: Debian's headless Chromium driven by Playwright.

The fixtures (`console`, `browser`, `page`) are registered for tests/sim by its conftest; `shot` keeps a page
as a PNG when JOBFENCE_SCREENSHOTS=DIR is set (docs/img has them); `act` submits one action's form, as `ME`.
"""

from __future__ import annotations

import os
import pathlib

import pytest
from playwright.sync_api import sync_playwright

from jobfence_ops.audit import local_login
from jobfence_ops.console.server import ConsoleApp, ConsoleServer
from jobfence_ops.targets import EmbeddedTarget

ME = f"local:{local_login()}"  # who a console over the local runtime acts as (`jobfence_ops.audit`)
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


def act(page, form_selector: str) -> None:
    """Tick the form's confirmation and submit it (who acts is the console's caller identity, `ME` here)."""
    form = page.locator(form_selector)
    form.locator("input[name=confirm]").check()
    form.locator("button").click()


def past_the_gate(runtime, job: str) -> None:
    """Advance an hour with the job's rule disabled: its last run is over an hour old, so its interval gate
    lets a manual run through (and no tick of its own ran meanwhile)."""
    events, rule = runtime.session.client("events"), runtime.rule_of_job(job)
    events.disable_rule(Name=rule)
    try:
        runtime.advance(minutes=61)
    finally:
        events.enable_rule(Name=rule)
