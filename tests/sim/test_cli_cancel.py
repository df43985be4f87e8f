"""`jobfence cancel TENANT/BATCH` against the embedded runtime (one shared runtime, see conftest)."""

from __future__ import annotations

import json
import uuid

import pytest

from jobfence.work import BatchRef, ItemInput
from jobfence_ops.commands import switches
from jobfence_ops.commands.batches import batch, producer, work_store
from jobs.listings.pipelines import GENERATION
from tests.sim.test_cli import cli

pytestmark = pytest.mark.server


@pytest.fixture
def waiting_batch(target):
    """Four items waiting pending (the queue workers paused), each holding one of the tenant's units."""
    ref = BatchRef(f"cli-cancel-{uuid.uuid4().hex[:12]}", "b1")
    work_store(target).quota.grant(ref.tenant, 4)
    switches.set_workers(target, False)
    try:
        producer(target).submit(ref, GENERATION, [ItemInput(f"i-{n}", {"title": f"t{n}"}) for n in range(4)], "test")
        yield ref
    finally:
        switches.set_workers(target, True)


def test_cancel_prints_what_it_did_and_a_repeat_says_who_asked_first(target, waiting_batch):
    ref = waiting_batch
    # WHEN an operator cancels the waiting batch
    code, out = cli(target, "--as", "carol", "cancel", str(ref))
    # THEN one line says what the rows show: every item cancelled, every unit refunded, nothing running
    assert code == 0, out
    assert out == f"batch {ref} cancelled: cancelled 4 item(s), refunded 4 unit(s), 0 still running\n"
    assert work_store(target).quota.balance(ref.tenant).used == 0
    report = batch(target, ref)
    assert (report.batch.status.value, report.batch.cancelled, report.batch.cancel_requested_by) == (
        "cancelled",
        4,
        "carol",
    )
    # AND asked again (--json, by someone else), it refunds nothing more and names the first asker
    code, out = cli(target, "--as", "dave", "--json", "cancel", str(ref))
    result = json.loads(out)
    assert code == 0 and result["status"] == "cancelled" and result["recorded_now"] is False
    assert (result["cancelled"], result["refunded"], result["running"], result["requested_by"]) == (4, 4, 0, "carol")
    assert result["ref"] == {"tenant": ref.tenant, "batch_id": ref.batch_id}
    assert work_store(target).quota.balance(ref.tenant).refunded == 4


def test_retry_failed_on_a_cancelled_batch_and_cancel_of_an_unknown_batch_are_one_line_errors(target, waiting_batch):
    ref = waiting_batch
    assert cli(target, "--as", "carol", "cancel", str(ref))[0] == 0
    code, out = cli(target, "--as", "carol", "retry-failed", str(ref))
    assert code == 2 and out == (
        f"jobfence: error: batch {ref} was cancelled by carol: retry-failed does not reopen it\n"
    )
    code, out = cli(target, "cancel", "tenant-x/none")
    assert code == 2 and out == "jobfence: error: no batch tenant-x/none\n"
