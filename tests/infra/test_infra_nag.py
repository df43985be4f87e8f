"""cdk-nag: the AwsSolutions and Serverless packs find nothing unacknowledged, and every
acknowledgement carries a reason."""

from __future__ import annotations

import pathlib
import re
from collections import Counter


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


SECURITY_DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "security.md"
ACKNOWLEDGEMENTS = "## cdk-nag acknowledgements that remain"


def test_the_security_doc_states_the_acknowledgements_the_app_has(synthesized):
    """Issue 29, low: docs/security.md said 85 acknowledgements where the app had 89. The total and each rule's
    count in its table are read back and compared with the real catalog's synthesis."""
    suppressed = Counter(s["ruleName"].split("[")[0] for r in synthesized.nag_report["pluginReports"]
                         for s in r.get("suppressedViolations", []))
    section = SECURITY_DOC.read_text().split(ACKNOWLEDGEMENTS, 1)[1].split("\n## ", 1)[0]
    intro, _, table = section.partition("\n| rule |")
    (total,) = re.findall(r"\*\*(\d+)\*\*", intro)
    assert int(total) == sum(suppressed.values()), (total, dict(suppressed))
    stated: dict[str, int] = {}
    for row in table.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        rules = re.findall(r"`([\w]+-[\w]+)`", cells[0]) if row.startswith("| `") else []
        if not rules:
            continue
        (numbers,) = re.findall(r"\((\d+(?:, \d+)*)[:)]", cells[1])
        counts = [int(n) for n in numbers.split(", ")]
        assert len(counts) == len(rules), row
        stated.update(zip(rules, counts, strict=True))
    # THEN every rule acknowledged (by rule, whatever finding: "AwsSolutions-IAM5[Resource::*]") is in the table with
    # its count, and a rule of the table no longer found says 0
    assert {rule: n for rule, n in stated.items() if n} == dict(suppressed)
