"""cdk-nag: the AwsSolutions and Serverless packs find nothing unacknowledged, and every
acknowledgement carries a reason."""

from __future__ import annotations


def test_nag_packs_ran_and_report_no_unacknowledged_finding(each):
    # GIVEN the app synthesized with the packs, as `make synth` does
    # THEN synthesis was not refused ...
    assert each.nag_error is None, each.nag_error
    # ... both packs ran and concluded success with no open violation
    reports = {r["pluginName"]: r for r in each.nag_report["pluginReports"]}
    assert set(reports) == {"AwsSolutions", "Serverless"}
    for report in reports.values():
        assert report["conclusion"] == "success"
        assert report["violations"] == []


def test_every_acknowledged_finding_has_a_one_line_reason(each):
    suppressed = [s for r in each.nag_report["pluginReports"] for s in r.get("suppressedViolations", [])]
    assert suppressed, "expected at least the X-Ray and runtime acknowledgements"
    for finding in suppressed:
        assert finding["reason"].strip() and "\n" not in finding["reason"], finding["ruleName"]
