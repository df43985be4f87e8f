"""Receipt email authentication: SES verdicts and the sender allowlist (jobs.club.email_auth)."""

from __future__ import annotations

import pytest

from jobs.club.email_auth import MailVerdicts, SenderAllowlist, quarantine_reason
from tests.unit.test_club_email_receipts import GOOD, MULTIPART

SHOP = SenderAllowlist("Shop@PhotoClub.example, billing@photoclub.example")


def test_verdicts_come_from_the_ses_receipt_and_missing_ones_are_not_a_pass():
    receipt = {"spfVerdict": {"status": "PASS"}, "dkimVerdict": {"status": "pass"}, "dmarcVerdict": {}}
    verdicts = MailVerdicts.from_ses_receipt(receipt)
    assert verdicts == MailVerdicts("PASS", "PASS", "MISSING")
    assert verdicts.failures() == ["DMARC MISSING"]
    assert MailVerdicts.from_ses_receipt("not a dict").failures() == ["SPF MISSING", "DKIM MISSING", "DMARC MISSING"]


def test_an_authentic_email_from_the_shop_passes():
    assert quarantine_reason(GOOD, MailVerdicts.passed(), SHOP) is None


def test_each_failed_check_is_named_and_the_sender_is_never_echoed():
    assert quarantine_reason(GOOD, MailVerdicts("PASS", "PASS", "FAIL"), SHOP) == "not authenticated: DMARC FAIL"
    stranger = GOOD.replace("shop@photoclub.example", "x" * 5000 + "@evil.example")
    reason = quarantine_reason(stranger, MailVerdicts.passed(), SHOP)
    assert reason == "sender not on the receipt allowlist"
    two = GOOD.replace("From: Club Shop <shop@photoclub.example>", "From: shop@photoclub.example, a@b.example")
    assert quarantine_reason(two, MailVerdicts.passed(), SHOP) == "not exactly one From address"
    assert quarantine_reason("no headers at all", MailVerdicts.passed(), SHOP) == "not exactly one From header"


def test_an_empty_allowlist_accepts_nobody():
    assert quarantine_reason(GOOD, MailVerdicts.passed(), SenderAllowlist("")) == "sender not on the receipt allowlist"


@pytest.mark.parametrize(
    "second",
    ["From: other@evil.example", "From: Club Shop <shop@photoclub.example>", "from: x@evil.example"],
)
def test_a_second_from_header_is_quarantined_whichever_comes_first(second):
    # the allowlisted From first (what `.get("From")` read), another after it, or the other way round
    after = GOOD.replace("To: intake", second + "\nTo: intake")
    before = second + "\n" + GOOD
    for raw in (after, before):
        assert quarantine_reason(raw, MailVerdicts.passed(), SHOP) == "not exactly one From header"


@pytest.mark.parametrize(
    "raw, defect",
    [
        # a header line without a colon ends the headers: the parser reads the rest as body
        (GOOD.replace("To: intake", "X-Broken header line\nTo: intake"), "MissingHeaderBodySeparatorDefect"),
        (" folded\n" + GOOD, "FirstHeaderLineIsContinuationDefect"),
        (MULTIPART.replace("--b1--\n", ""), "CloseBoundaryNotFoundDefect"),
        # the From header itself: a mailbox and a stray one, or an unclosed comment
        (GOOD.replace("<shop@photoclub.example>", "<shop@photoclub.example> <x@evil.example>"), "InvalidHeaderDefect"),
        (GOOD.replace("Club Shop <shop@photoclub.example>", "shop@photoclub.example (c"), "InvalidHeaderDefect"),
    ],
)
def test_a_message_the_parser_found_defects_in_is_quarantined_naming_them(raw, defect):
    reason = quarantine_reason(raw, MailVerdicts.passed(), SHOP)
    assert reason is not None and reason.startswith("malformed message: ") and defect in reason
    assert "evil" not in reason and len(reason) < 200


def test_the_well_formed_samples_have_no_defect():
    assert quarantine_reason(GOOD, MailVerdicts.passed(), SHOP) is None
    assert quarantine_reason(MULTIPART, MailVerdicts.passed(), SHOP) is None
