"""Receipt email authentication: SES verdicts and the sender allowlist (jobs.club.email_auth)."""

from __future__ import annotations

from jobs.club.email_auth import MailVerdicts, SenderAllowlist, quarantine_reason
from tests.unit.test_club_email_receipts import GOOD

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
    assert quarantine_reason("no headers at all", MailVerdicts.passed(), SHOP) == "not exactly one From address"


def test_an_empty_allowlist_accepts_nobody():
    assert quarantine_reason(GOOD, MailVerdicts.passed(), SenderAllowlist("")) == "sender not on the receipt allowlist"
