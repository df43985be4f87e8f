"""Cancel a batch from the console, in a real browser (Debian's headless Chromium driven by Playwright).

An open batch (its queue workers paused, so every item waits pending, each holding its unit of
quota): the operator opens its page, clicks "Cancel batch" behind the confirmation and their name,
and the page shows the batch cancelled with its counts, who cancelled it, and the units refunded.
Set JOBFENCE_SCREENSHOTS=DIR to keep the pages as PNGs.
"""

from __future__ import annotations

import uuid

import pytest

from jobfence.work import BatchRef, ItemInput
from jobfence_ops import audit
from jobfence_ops.audit import batch_subject
from jobfence_ops.commands import switches
from jobfence_ops.commands.batches import batch, producer, work_store
from jobfence_ops.targets import EmbeddedTarget
from jobs.listings.pipelines import GENERATION
from tests.sim.browser import ME, act, shot

pytestmark = [pytest.mark.server, pytest.mark.browser]


@pytest.fixture
def open_batch(runtime):
    """Five items waiting pending (the queue workers paused), each born holding one of the tenant's five units."""
    target = EmbeddedTarget(runtime)
    ref = BatchRef(f"cancel-{uuid.uuid4().hex[:12]}", "listings")  # a batch of its own for each test
    work_store(target).quota.grant(ref.tenant, 5)
    switches.set_workers(target, False)
    try:
        items = [ItemInput(f"item-{n}", {"title": f"listing {n}"}) for n in range(5)]
        producer(target).submit(ref, GENERATION, items, created_by="test")
        yield ref
    finally:
        switches.set_workers(target, True)


def test_cancel_an_open_batch_by_a_click_and_see_it_cancelled_with_its_quota_refunded(console, page, runtime, open_batch):
    ref = open_batch
    target = EmbeddedTarget(runtime)
    assert work_store(target).quota.balance(ref.tenant).used == 5
    # GIVEN the open batch's page: every item pending, a "Cancel batch" button
    page.goto(console.url + "/batches")
    page.get_by_role("link", name=str(ref)).click()
    assert page.locator("#status").inner_text() == "open"
    assert page.locator("#counts").inner_text() == "pending=5, running=0, completed=0, failed=0"
    # WHEN the operator cancels it (confirmation, one click)
    act(page, "form[action='/actions/cancel']")
    # THEN the page shows it cancelled, its counts from the rows, who asked, and the units refunded
    flash = page.locator("#flash").inner_text()
    assert f"{ME} cancelled {ref}: batch {ref} cancelled: cancelled 5 item(s), refunded 5 unit(s), 0 still running" == flash
    assert page.locator("#status").inner_text() == "cancelled"
    assert page.locator("#counts").inner_text() == "pending=0, running=0, completed=0, failed=0, cancelled=5"
    assert page.locator("#items-cancelled tr").count() == 6  # the header and five items
    assert f"cancelled by {ME} before it ran" in page.locator("#items-cancelled").inner_text()
    assert page.locator("#cancelled-by").inner_text().startswith(f"cancel asked by {ME} at ")
    assert page.locator("form[action='/actions/cancel']").count() == 0  # a final batch has nothing to cancel
    assert page.locator("meta[http-equiv=refresh]").count() == 0  # nor does it refresh itself
    shot(page, "console-batch-cancelled")
    # AND so say the rows and the tenant's books: the five units are back
    assert work_store(target).quota.balance(ref.tenant).used == 0
    assert batch(target, ref).batch.cancelled == 5
    assert any(f"{ME} cancelled {ref}" in line for line in console.audit)
    # AND the audit table has the entry, shown on the batch's page with who and the result
    (entry,) = audit.log_of(target).about(batch_subject(ref), 0, runtime.clock.now_ms())
    assert (entry.action, entry.actor) == ("cancel", ME) and "cancelled 5 item(s)" in entry.result


def test_the_wake_ups_of_a_cancelled_batch_run_nothing_once_workers_resume(console, page, runtime, open_batch):
    ref = open_batch
    target = EmbeddedTarget(runtime)
    page.goto(console.url + f"/batches/{ref.tenant}/{ref.batch_id}")
    act(page, "form[action='/actions/cancel']")
    assert page.locator("#status").inner_text() == "cancelled"
    # WHEN the workers resume and the queued wake-ups are delivered
    switches.set_workers(target, True)
    runtime.advance(minutes=30)
    # THEN nothing ran: every item is still cancelled, the books unchanged
    page.goto(console.url + f"/batches/{ref.tenant}/{ref.batch_id}")
    assert page.locator("#counts").inner_text() == "pending=0, running=0, completed=0, failed=0, cancelled=5"
    assert work_store(target).quota.balance(ref.tenant).used == 0
