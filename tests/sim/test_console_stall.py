""""Why did this batch stall?" is one click from the batches page: the batch's page says why, blocking first."""

from __future__ import annotations

import pytest

from jobfence.work import BatchRef, ItemInput
from jobfence_ops.commands import switches
from jobfence_ops.commands.batches import producer, work_store
from jobfence_ops.targets import EmbeddedTarget
from jobs.listings.pipelines import GENERATION
from tests.sim.browser import shot

pytestmark = [pytest.mark.server, pytest.mark.browser]


def test_why_did_this_batch_stall_is_one_click_from_the_batches_page(console, page, runtime):
    target = EmbeddedTarget(runtime)
    # GIVEN everything stopped during an incident, and a batch submitted meanwhile that waits past its limits
    switches.set_everything(target, False)
    try:
        ref = BatchRef(f"stalled-{runtime.clock.now_ms()}", "b1")
        work_store(target).quota.grant(ref.tenant, 10)
        producer(target).submit(ref, GENERATION, [ItemInput(f"i{n}", {"title": "t"}) for n in range(3)], created_by="t")
        runtime.advance(minutes=20)
        # WHEN the operator opens the batches page and clicks the batch
        page.goto(console.url + f"/batches?tenant={ref.tenant}")
        page.get_by_role("link", name=ref.batch_id).first.click()
        # THEN its page says why, blocking reasons first, each with what to do or what happens next
        why = page.locator("#why li")
        assert why.evaluate_all("items => items.map(i => i.dataset.code)") == [
            "worker_paused",
            "reclaim_disabled",
            "pending_lost",
        ]
        assert "is paused: resume it" in why.nth(0).inner_text()
        assert why.nth(2).inner_text().startswith("recovering 3 item(s) pending since")
        shot(page, "console-batch-why")
    finally:
        switches.set_everything(target, True)
    # AND once resumed the batch finishes, and its page says nothing is left to run
    runtime.advance(minutes=30)
    page.reload()
    assert page.locator("#why li").all_inner_texts() == ["note finalized finalized: nothing is left to run"]
