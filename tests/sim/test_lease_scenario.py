"""The lease scenario of `make demo`, shortened, on a moto server: invariants 1-4 hold."""

from __future__ import annotations

import dataclasses

import pytest

from ops.invariants import check_lease_invariants
from ops.scenario import run_scenario

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def report(moto_server):
    # GIVEN a moto server the jobs' pynamodb stores also reach (they read AWS_ENDPOINT_URL)
    mp = pytest.MonkeyPatch()
    mp.setenv("AWS_ENDPOINT_URL", moto_server)
    from ops.emulator import EmulatorSession

    try:
        # WHEN both retention jobs are driven over six simulated hours with every injected fault
        yield run_scenario(EmulatorSession(moto_server, "us-east-1"), seed_value=3, scale=0)
    finally:
        mp.undo()


def test_every_lease_invariant_holds(report):
    # THEN invariants 1-4 pass on the stored rows
    assert [(c.number, c.ok) for c in report.checks] == [(1, True), (2, True), (3, True), (4, True)], report.checks


def test_the_scenario_exercised_each_fault(report):
    outcomes = [(o.label, o.outcome, o.died) for o in report.observations]
    # THEN the pair had one winner, the dead holder blocked the retry, the duplicates skipped
    pair = sorted(o.outcome for o in report.observations if o.label == "concurrent")
    assert pair[0] == "ran" and pair[1].startswith("skipped_")
    assert ("tick", None, True) in outcomes
    assert ("retry", "skipped_leased", False) in outcomes
    assert [o.outcome for o in report.observations if o.label == "duplicate"] == ["skipped_interval"] * 2
    assert all(o.tables_changed is False for o in report.observations if o.label == "duplicate")
    # AND the run after the dead holder took over with the next fence, recording the dead run `died`
    dpop = sorted((r for r in report.runs if r["job"] == "clean_dpop_proofs"), key=lambda r: r["started_at"])
    assert [r["fence"] for r in dpop] == list(range(1, 8))  # every term has its row, the dead one's too
    died, = (r for r in dpop if r["outcome"] == "died")
    successor = next(r for r in dpop if r["fence"] == died["fence"] + 1)
    assert died["finished_at"] < successor["started_at"]  # it ended when its term expired
    # AND the jobs did their work: no expired row is left
    assert report.remaining_expired == {"dpop_proofs": 0, "conversations": 0}


def test_the_checks_can_fail(report):
    # GIVEN the same report with two overlapping terms and a skip that wrote
    runs = [dict(r) for r in report.runs]
    first, second = sorted((r for r in runs if r["job"] == "clean_conversations"), key=lambda r: r["started_at"])[:2]
    second["started_at"] = first["started_at"]
    observations = [dataclasses.replace(o) for o in report.observations]
    skipped = next(o for o in observations if o.outcome == "skipped_interval")
    skipped.writes = 1
    # WHEN judged again
    checks = check_lease_invariants(observations, runs, [], [], 0)
    # THEN invariants 1 and 3 fail, naming what broke
    assert not checks[0].ok and "overlap" in checks[0].detail
    assert not checks[2].ok and "write request" in checks[2].detail
