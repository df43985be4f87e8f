"""The missed-run auditor (issue 12, part 2): the real runner runs the auditor job and an hourly job on
moto under a FrozenClock; each missed tick is counted once, by the audit whose window holds it, and an
audit that never ran is made up by the next one."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from jobfence.auditor import (
    AUDIT_SETTLE_MS,
    MAX_AUDIT_SPAN_MS,
    MISSED_METRIC,
    AuditWindow,
    audit_missed_runs,
    audit_window,
    cloudwatch_emitter,
)
from jobfence.ledger import RunRecord
from jobfence.lease_toggles import RuleToggles
from jobfence.registry import CatalogError, CatchUp, Registry
from jobfence.runs import RunState
from jobfence.scheduled import Outcome
from jobfence.triggers import Trigger, catch_up_event, parse_trigger
from jobs.catalog import AUDITOR, CATALOG, JOBS
from tests.runner_support import Harness, counting_job, spec
from tests.support import create_catalog_tables

HOUR = 3_600_000
MINUTE = 60_000
HOURLY = spec("hourly_job")  # cron(0 * * * ? *), gate 0.9 h
AUDITOR_SPEC = spec("auditor", schedule="rate(15 minutes)", interval_s=900, timeout_s=60, audits=(HOURLY.name,))


@pytest.fixture
def h(dynamodb, clock):
    return Harness(dynamodb, create_catalog_tables(dynamodb, ["leases", "runs"]), clock)


class Audits:
    """The auditor job on the harness's runner, its emitted metrics kept per audit, its invokes recorded."""

    def __init__(self, h, audited=HOURLY, invoke=None):
        self.h = h
        self.emitted: list[dict[str, int]] = []
        self.invoked: list[tuple[str, dict]] = []
        toggles = RuleToggles(h.dynamodb, h.tables["leases"])
        invoke = invoke or (lambda s, event: self.invoked.append((s.name, event)))

        def job(ctx):
            current: dict[str, int] = {}
            self.emitted.append(current)
            emit = lambda s, n: current.__setitem__(s.name, n)  # noqa: E731
            return audit_missed_runs([audited], h.runs, toggles, emit, invoke, h.logger, ctx)

        self.job = job

    def at(self, t_ms: int, auditor=AUDITOR_SPEC) -> dict[str, int]:
        self.h.clock.set(t_ms)
        result = self.h.tick(auditor, self.job, trigger=Trigger("scheduled", t_ms))
        assert result.outcome is Outcome.RAN
        return self.emitted[-1]


def tick(h, t_ms, delay_ms=0, job_spec=HOURLY):
    h.clock.set(t_ms + delay_ms)
    return h.tick(job_spec, counting_job(1, []), trigger=Trigger("scheduled", t_ms))


def test_a_missed_tick_is_counted_once_by_the_audit_whose_window_holds_it(h, clock):
    start = clock.now_ms()  # 2026-01-01T00:00Z
    at = lambda hours, minutes=0: start + hours * HOUR + minutes * MINUTE  # noqa: E731
    audits = Audits(h)
    assert tick(h, at(1), 30_000).outcome is Outcome.RAN  # 01:00 ran, 30 s late
    # 01:15: the first audit looks back one interval, (00:57, 01:12]: 01:00 ran
    assert audits.at(at(1, 15)) == {HOURLY.name: 0}
    # 02:00 never delivered; the 02:15 audit judges (01:12, 02:12]: one missed
    assert audits.at(at(2, 15)) == {HOURLY.name: 1}
    # 02:30: (02:12, 02:27] holds no tick; the miss is not counted again
    assert audits.at(at(2, 30)) == {HOURLY.name: 0}
    # 03:00 and 04:00 never delivered either, and the audits of 02:45 to 04:00 never ran (the auditor was down too)
    # 04:15 makes them up: (02:27, 04:12] holds both
    assert audits.at(at(4, 15)) == {HOURLY.name: 2}
    # 05:00 ran; the 05:15 audit counts nothing
    assert tick(h, at(5)).outcome is Outcome.RAN
    assert audits.at(at(5, 15)) == {HOURLY.name: 0}
    rows = {r["run_id"]: r for r in h.runs.recent(AUDITOR_SPEC.name)}
    assert [r["summary"]["missed"] for r in sorted(rows.values(), key=lambda r: r["started_at"])] == [0, 1, 0, 2, 0]
    warnings = [line for line in h.logs() if line.get("message") == "missed ticks"]
    assert [(w["audited_job"], w["missed_at"]) for w in warnings] == [(HOURLY.name, [at(2)]), (HOURLY.name, [at(3), at(4)])]


def test_a_tick_skipped_by_a_live_holder_or_the_gate_or_a_disabled_rule_is_not_missed(h, clock):
    start = clock.now_ms()
    at = lambda hours, minutes=0: start + hours * HOUR + minutes * MINUTE  # noqa: E731
    audits = Audits(h)
    audits.at(at(0, 50))  # the first audit, before any tick of the window below
    # 01:00 is answered by a run that started at 00:59:40 by hand; 02:00 arrives while a manual run holds the lease
    h.clock.set(at(0, 59) + 40_000)
    assert h.tick(HOURLY, counting_job(1, []), trigger=Trigger("manual", h.clock.now_ms(), requested_by="ops")).outcome \
        is Outcome.RAN
    assert tick(h, at(1)).outcome is Outcome.SKIPPED_INTERVAL
    RuleToggles(h.dynamodb, h.tables["leases"]).record(HOURLY.name, False, at(1, 30))  # disabled 01:30 to 02:30
    RuleToggles(h.dynamodb, h.tables["leases"]).record(HOURLY.name, True, at(2, 30))
    # THEN the audit of (00:47, 02:57] counts no missed tick: 01:00 the gate, 02:00 disabled
    assert audits.at(at(3)) == {HOURLY.name: 0}


def test_an_audit_that_failed_is_made_up_by_the_next(h, clock):
    start = clock.now_ms()
    at = lambda hours, minutes=0: start + hours * HOUR + minutes * MINUTE  # noqa: E731
    audits = Audits(h)
    audits.at(at(0, 45))
    # the 01:15 audit fails after its window was read (its metrics may or may not have gone out)
    h.clock.set(at(1, 15))

    def failing(ctx):
        for batch in audits.job(ctx):  # its one batch (a LastBatch) as an ordinary one: the crash comes after it
            yield dict(batch)
        raise RuntimeError("the auditor crashed")

    with pytest.raises(RuntimeError):
        h.tick(AUDITOR_SPEC, failing, trigger=Trigger("scheduled", at(1, 15)))
    # THEN 01:30 judges again from the 00:45 audit's end: 01:00 (never delivered) is counted
    assert audits.at(at(1, 30)) == {HOURLY.name: 1}


def record(run_id, tick_at, outcome):
    return RunRecord(run_id, outcome, "scheduled", tick_at, tick_at + 1000, None)


@pytest.mark.parametrize(
    "own, expected_since",
    [
        ([], 10 * HOUR - AUDIT_SETTLE_MS - 15 * MINUTE),  # the first audit: one interval
        ([record("a", 9 * HOUR, RunState.RAN), record("b", 9 * HOUR + 15 * MINUTE, RunState.RAN)],
         9 * HOUR + 15 * MINUTE - AUDIT_SETTLE_MS),  # the last complete audit's until
        ([record("a", 9 * HOUR, RunState.RAN), record("b", 9 * HOUR + 15 * MINUTE, RunState.FAILED)],
         9 * HOUR - AUDIT_SETTLE_MS),  # a failed audit does not count as done
        ([record("a", 9 * HOUR, RunState.DIED)], 9 * HOUR - AUDIT_SETTLE_MS - 15 * MINUTE),  # only failed ones
        ([record("old", 10 * HOUR - 3 * MAX_AUDIT_SPAN_MS, RunState.RAN)],
         10 * HOUR - AUDIT_SETTLE_MS - MAX_AUDIT_SPAN_MS),  # never more than a day back
    ],
)
def test_the_audit_window_starts_where_the_last_complete_audit_ended(own, expected_since):
    window = audit_window(10 * HOUR, [*own, record("me", 10 * HOUR, RunState.RUNNING)], "me", 15 * MINUTE)
    assert window == AuditWindow(expected_since, 10 * HOUR - AUDIT_SETTLE_MS)


def test_the_emitted_metric_carries_the_audited_jobs_own_dimensions(capsys, monkeypatch):
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "audit")  # the auditor's own service must not leak into it
    audited = CATALOG.job("clean_dpop_proofs")
    cloudwatch_emitter("jobfence-stage")(audited, 2)
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.strip()]
    directive = line["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "jobfence-stage"
    assert [m["Name"] for m in directive["Metrics"]] == [MISSED_METRIC]
    assert (line[MISSED_METRIC], line["service"], line["job"]) == ([2.0], "commerce", "clean_dpop_proofs")
    assert sorted(directive["Dimensions"][0]) == ["job", "service"]


def test_the_catalog_auditor_audits_every_other_job_and_an_unknown_name_is_refused():
    assert set(AUDITOR.audits) == {j.name for j in JOBS} == set(CATALOG.jobs) - {AUDITOR.name}
    with pytest.raises(CatalogError, match=r"audits 'nope', which is not another registered job"):
        Registry(tables=(), jobs=[HOURLY, spec("auditor", audits=("nope",))])
    with pytest.raises(CatalogError, match=r"audits 'auditor'"):
        Registry(tables=(), jobs=[spec("auditor", audits=("auditor",))])


CATCHING_UP = spec("catching_up", catch_up=CatchUp.ONCE, catch_up_window_s=6 * 3600)
CATCH_UP_AUDITOR = spec("auditor", schedule="rate(15 minutes)", interval_s=900, timeout_s=60,
                        audits=(CATCHING_UP.name,))


def test_the_auditor_asks_a_catch_up_job_to_run_once_for_its_missed_tick_until_a_run_made_up_for_it(h, clock):
    start = clock.now_ms()
    at = lambda hours, minutes=0: start + hours * HOUR + minutes * MINUTE  # noqa: E731
    lost: list[dict] = []

    def flaky_invoke(s, event):  # the first request is lost (Lambda throttled it)
        if not lost:
            lost.append(event)
            raise ClientError({"Error": {"Code": "TooManyRequestsException", "Message": "rate"}}, "Invoke")
        audits.invoked.append((s.name, event))

    audits = Audits(h, CATCHING_UP, flaky_invoke)
    assert tick(h, at(1), job_spec=CATCHING_UP).outcome is Outcome.RAN
    assert audits.at(at(1, 15), CATCH_UP_AUDITOR) == {CATCHING_UP.name: 0} and audits.invoked == []
    # 02:00 and 03:00 never delivered: the 03:15 audit counts both and asks for one run, for 03:00; the ask is lost
    assert audits.at(at(3, 15), CATCH_UP_AUDITOR) == {CATCHING_UP.name: 2}
    assert lost == [catch_up_event(at(3), requested_by="auditor")] and audits.invoked == []
    failed = [line for line in h.logs() if line.get("message") == "catch-up request failed"]
    assert [(f["audited_job"], f["tick"], f["error_kind"]) for f in failed] == [(CATCHING_UP.name, at(3), "throttled")]
    # 03:30: nothing new is missed, but the catch-up is still due: asked again
    assert audits.at(at(3, 30), CATCH_UP_AUDITOR) == {CATCHING_UP.name: 0}
    assert audits.invoked == [(CATCHING_UP.name, catch_up_event(at(3), requested_by="auditor"))]
    # the job's function receives it (the real trigger parser and runner) and runs once
    h.clock.set(at(3, 31))
    event = audits.invoked[0][1]
    assert h.tick(CATCHING_UP, counting_job(1, []), trigger=parse_trigger(event, h.clock)).outcome is Outcome.RAN
    # 03:45: made up for: no more asks; the metric counts nothing again
    assert audits.at(at(3, 45), CATCH_UP_AUDITOR) == {CATCHING_UP.name: 0} and len(audits.invoked) == 1
    rows = sorted(h.runs.recent(CATCH_UP_AUDITOR.name), key=lambda r: r["started_at"])
    assert [(r["summary"].get("catch_ups"), r["summary"].get("catch_ups_failed")) for r in rows] == [
        (0, 0), (0, 1), (1, 0), (0, 0)]


def test_a_job_without_catch_up_is_never_asked(h, clock):
    start = clock.now_ms()
    audits = Audits(h)
    audits.at(start + 15 * MINUTE)
    assert audits.at(start + 2 * HOUR + 15 * MINUTE) == {HOURLY.name: 2} and audits.invoked == []
