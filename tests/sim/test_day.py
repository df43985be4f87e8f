"""The `make demo` scenario, shortened, on the shared embedded runtime: its invariant report passes."""

from __future__ import annotations

import dataclasses

import pytest

from ops.day import SHORT, DayScenario
from ops.invariants import check_lease_invariants

pytestmark = [pytest.mark.server, pytest.mark.slow]  # six simulated hours on the embedded runtime


@pytest.fixture(scope="module")
def report(runtime):
    from jobfence_ops.emulator import point_process_at

    # GIVEN the deployed system; the driver's own stores point at the emulator while it seeds and reads
    mp = pytest.MonkeyPatch()
    for key, value in runtime.emulator.environment().items():
        mp.setenv(key, value)
    try:
        # WHEN six simulated hours run with every injected fault
        yield DayScenario(runtime, SHORT, seed=11).run()
    finally:
        mp.undo()


def test_every_invariant_of_the_report_holds(report):
    failed = [c for c in report.checks if not c.ok]
    assert not failed, failed
    numbers = {c.number for c in report.checks}
    assert {1, 2, 3, 4, 10} <= numbers


def test_the_faults_happened(report):
    seen = [(o.job, o.label, o.outcome, o.died) for o in report.observations]
    # a duplicate delivery of one tick: one run, one skip
    pair = sorted(str(o.outcome) for o in report.observations if o.group)
    assert len(pair) == 2 and pair[0] == "ran" and pair[1].startswith("skipped_")
    # a failing job; an isolate killed mid-run whose live lease a manual run then met
    assert ("clean_conversations", "tick", "failed", False) in seen
    assert ("clean_dpop_proofs", "tick", None, True) in seen
    assert ("clean_dpop_proofs", "manual", "skipped_leased", False) in seen
    # the failed run has its row with a bounded error
    failed_rows = [r for r in report.runs if r["outcome"] == "failed"]
    assert [r["job"] for r in failed_rows] == ["clean_conversations"]
    assert 0 < len(failed_rows[0]["error"]) <= 300
    # AND the killed run has its row, recorded `died`, and the run that took over has the next fence
    dpop = sorted((r for r in report.runs if r["job"] == "clean_dpop_proofs"), key=lambda r: r["fence"])
    assert [r["fence"] for r in dpop] == list(range(1, len(dpop) + 1))  # every term has its row
    died, = (r for r in dpop if r["outcome"] == "died")
    successor = next(r for r in dpop if r["fence"] == died["fence"] + 1)
    assert died["finished_at"] < successor["started_at"]  # it ended when its term expired


def test_the_checks_can_fail(report):
    # GIVEN the day's report with two overlapping terms and a skip that wrote
    runs = [dict(r) for r in report.runs]
    first, second = sorted((r for r in runs if r["job"] == "clean_conversations"), key=lambda r: r["started_at"])[:2]
    second["started_at"] = first["started_at"]
    observations = [dataclasses.replace(o) for o in report.observations]
    skipped = next(o for o in observations if (o.outcome or "").startswith("skipped_"))
    skipped.writes = 1
    # WHEN judged again
    checks = check_lease_invariants(observations, runs, [], [], 0)
    # THEN invariants 1 and 3 fail, naming what broke
    assert not checks[0].ok and "overlap" in checks[0].detail
    assert not checks[2].ok and "write request" in checks[2].detail


def test_disabled_rules_did_not_tick(report, runtime):
    start = min(o.at_ms for o in report.observations)
    off_from = start + int(SHORT.disable_at * 3_600_000)
    off_until = start + int(SHORT.enable_at * 3_600_000)
    during = [t for t in runtime.timeline.ticks if off_from < t.at_ms < off_until and t.at_ms >= start]
    assert during and not any(t.fired for t in during)
    after = [t for t in runtime.timeline.ticks if t.at_ms > off_until]
    assert after and all(t.fired for t in after if t.at_ms <= start + int(SHORT.hours * 3_600_000))


def test_a_worker_killed_mid_item_is_recovered(report):
    # GIVEN a worker isolate SIGKILLed right after claiming its batch's items
    assert report.killed_workers == 1 and report.deliveries["died"] == 1
    # THEN reclaim put the stranded items back and every item of the batch is terminal
    assert report.summary_totals()["reclaim_listings"]["requeued"] >= 1
    (batch,) = report.batches
    assert batch.by_status["pending"] == batch.by_status["running"] == 0
    assert batch.by_status["completed"] + batch.by_status["failed"] == batch.items
    assert batch.batch_row["status"] == "finalized"


def test_failed_ticks_go_to_the_jobs_dead_letter_queue(report, runtime):
    import json

    # GIVEN the failing job's function, whose async invoke config names its DLQ as on-failure destination
    function = runtime.topology.job_functions()["clean_conversations"]
    assert function.on_failure_arn, "the template gives scheduled jobs an on-failure destination"
    queue = runtime.topology.queue_by_arn(function.on_failure_arn)
    # THEN the failed tick's record is there: the scheduled event and the safe error
    messages = runtime.session.client("sqs").receive_message(QueueUrl=queue.url, MaxNumberOfMessages=10).get("Messages", [])
    records = [json.loads(m["Body"]) for m in messages]
    assert len(records) == 1
    assert records[0]["requestContext"]["condition"] == "RetriesExhausted"
    assert records[0]["requestPayload"]["detail-type"] == "Scheduled Event"
    assert records[0]["responsePayload"]["errorType"]


def test_the_seeded_domains_give_every_club_and_commerce_job_something_to_change(report, runtime):
    # THEN each of the seven club jobs, the intake retry and the commerce jobs changed something
    totals = report.summary_totals()
    expect = {
        "expire_memberships": "expired",
        "reconcile_membership_roles": "changed",
        "sweep_darkroom_schedule": "applied",
        "sweep_studio_schedule": "moved",
        "sync_darkroom_stats": "events",
        "send_equipment_reminders": "claimed",
        "expire_photographer_requests": "expired",
        "retry_email_intake": "delivered",
        "recover_pending_cancellations": "cancelled",
        "capture_abandoned_deferred": "captured",
    }
    for job, key in expect.items():
        assert totals.get(job, {}).get(key, 0) > 0, (job, dict(totals.get(job, {})))
    # AND the safety net's captures went over HTTP to the PayPal stub, under the safety-net key prefix
    paypal = runtime.providers.stubs["paypal"].stub
    assert paypal.count("POST", "/v2/checkout/orders/") >= totals["capture_abandoned_deferred"]["captured"]
    # AND the club's Discord changes reached the Discord stub through the worker
    discord = runtime.providers.stubs["discord"].stub
    methods = {method for method, _route in discord.requests}
    assert {"PUT", "PATCH", "POST"} <= methods, discord.requests


def _happened(ticks) -> str:
    """What became of one tick instant of one job, from the runtime's own timeline (the ledger's oracle)."""
    if any(t.dropped for t in ticks):
        return "missed"
    outcomes = []
    for t in ticks:
        if not t.fired:
            continue
        inv = t.invocation
        outcomes.append("died" if inv.status == "died" else "failed" if not inv.ok else inv.payload["outcome"])
    if not outcomes:
        return "disabled"
    ran = [o for o in outcomes if not o.startswith("skipped_")]  # a duplicate delivery: the copy that ran
    return ran[0] if ran else outcomes[0]


def test_the_ledger_labels_every_expected_tick_of_the_day_as_it_happened(report, runtime):
    from jobfence.ledger import TickLabel
    from jobfence_ops.commands.jobs import job_ledger
    from ops.day import DROPPED_JOB, DUPLICATE_JOB, DYING_JOB, FAILING_JOB
    from jobfence_ops.targets import EmbeddedTarget

    # GIVEN the day: rules disabled 04:00 .. 06:00, an isolate killed mid-run at 03:00, a duplicate
    # tick at 01:00 and a tick EventBridge dropped at 03:00
    target = EmbeddedTarget(runtime)
    hour = 3_600_000
    at = lambda hours: report.start_ms + int(hours * hour)  # noqa: E731
    for job in sorted(runtime.topology.job_functions()):
        # WHEN each job's ledger of the day is read from its run rows and toggles alone
        book = job_ledger(target, job, report.start_ms, report.end_ms)
        # THEN every expected tick is labelled with what the runtime saw happen to it
        timeline: dict[int, list] = {}
        for tick in runtime.timeline.ticks:
            if tick.job == job and report.start_ms < tick.at_ms <= report.end_ms:
                timeline.setdefault(tick.at_ms, []).append(tick)
        assert [e.tick_at for e in book.entries] == sorted(timeline), job
        mismatched = [(e.tick_at - report.start_ms, e.label.value, _happened(timeline[e.tick_at]))
                      for e in book.entries if e.label.value != _happened(timeline[e.tick_at])]
        assert not mismatched, (job, mismatched)
        labels = {e.tick_at: e.label for e in book.entries}
        # the disabled window: every tick after 04:00 up to 06:00 is `disabled`, and only those
        assert {t for t, label in labels.items() if label is TickLabel.DISABLED} == {t for t in labels if at(4) < t <= at(6)}
        if job == DUPLICATE_JOB:
            assert labels[at(1)] is TickLabel.RAN
        if job == FAILING_JOB:
            assert labels[at(2)] is TickLabel.FAILED
        if job == DROPPED_JOB:
            assert labels[at(3)] is TickLabel.MISSED and book.missed == 1
        else:
            assert book.missed == 0, job
        if job == DYING_JOB:
            assert labels[at(3)] is TickLabel.DIED and labels[at(4)] is TickLabel.RAN
