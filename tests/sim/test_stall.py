"""`why`: the answer to "why did this batch stall?" from its rows and the switches, on the local runtime."""

from __future__ import annotations

import pytest

from jobfence.work import BatchRef, ItemInput
from jobfence_ops.commands import stall, switches
from jobfence_ops.commands.batches import batch, producer, work_store
from jobfence_ops.targets import EmbeddedTarget
from jobs.listings.pipelines import GENERATION

pytestmark = pytest.mark.server


def _submit(runtime, name: str, quota: int, items: int = 4) -> BatchRef:
    target = EmbeddedTarget(runtime)
    ref = BatchRef(f"{name}-{runtime.clock.now_ms()}", "b1")
    work_store(target).quota.grant(ref.tenant, quota)
    producer(target).submit(ref, GENERATION, [ItemInput(f"i{n}", {"title": f"t{n}"}) for n in range(items)], created_by="test")
    return ref


def _codes(target, ref) -> list[str]:
    return [f.code for f in stall.why(target, batch(target, ref))]


def test_after_stop_everything_the_paused_worker_the_disabled_reclaimer_and_lost_wakeups_are_named(runtime):
    target = EmbeddedTarget(runtime)
    switches.set_everything(target, False)
    try:
        ref = _submit(runtime, "paused", quota=10)
        runtime.advance(minutes=1)
        findings = stall.why(target, batch(target, ref))
        assert [f.code for f in findings] == ["worker_paused", "reclaim_disabled", "moving"]
        assert findings[0].severity is stall.Severity.BLOCKED and "resume" in findings[0].says
        assert "4 pending" in findings[-1].says  # within their limit: not lost yet
        runtime.advance(minutes=20)  # past pending-stale (900 s): no delivery, and no reclaimer to re-send
        findings = stall.why(target, batch(target, ref))
        assert [f.code for f in findings] == ["worker_paused", "reclaim_disabled", "pending_lost"]
        assert findings[-1].severity is stall.Severity.RECOVERING and findings[-1].says.startswith("4 item(s) pending")
    finally:
        switches.set_everything(target, True)
    runtime.advance(minutes=30)
    assert _codes(target, ref) == ["finalized"]


def test_items_that_failed_for_quota_say_grant_then_retry_even_once_the_batch_gave_up(runtime):
    target = EmbeddedTarget(runtime)
    ref = _submit(runtime, "starved", quota=2)  # two of four fail: past the pipeline's 25 % threshold
    runtime.advance(minutes=30)
    report = batch(target, ref)
    assert report.batch.status.value == "failed_threshold"
    findings = stall.why(target, report)
    assert [f.code for f in findings] == ["quota_exhausted", "finalized"]
    assert findings[0].severity is stall.Severity.BLOCKED and findings[0].says.startswith("2 item(s) failed")
    assert "grant quota, then retry" in findings[0].says


def test_the_cli_batch_command_ends_with_the_same_findings(runtime):
    import io
    import json

    from rich.console import Console

    from jobfence_ops.cli import main

    def cli(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        code = main(list(argv), target=target, console=Console(file=out, width=400, color_system=None))
        return code, out.getvalue()

    target = EmbeddedTarget(runtime)
    ref = _submit(runtime, "told", quota=2)
    runtime.advance(minutes=30)
    code, out = cli("batch", str(ref))
    assert code == 0
    assert out.strip().splitlines()[-2:] == [
        f"why: [blocked] 2 item(s) failed: tenant {ref.tenant}'s quota ran out; grant quota, then retry the failed items",
        "why: [note] finalized failed_threshold: nothing is left to run",
    ]
    code, out = cli("batch", str(ref), "--json")
    assert [f["code"] for f in json.loads(out)["why"]] == ["quota_exhausted", "finalized"]
