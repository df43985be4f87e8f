"""`retry_email_intake`: delivery, back-off, the attempts cap and its kept reason, others unaffected."""

from __future__ import annotations

from tests.functional.club.club_harness import club  # noqa: F401 - the fixture

from jobs.club.email_jobs import ATTEMPTS_CAP, backoff_ms
from jobs.club.email_auth import MailVerdicts
from jobs.club.stores.email_intake import EmailIntakeStore, IntakeStatus
from jobs.club.stores.receipts import ReceiptStore
from tests.support import Rows
from tests.unit.test_club_email_receipts import GOOD


def _stores(club):
    return (EmailIntakeStore(club.tables["club_email_intake"], club.clock),
            ReceiptStore(club.tables["club_receipts"], club.clock))


def test_a_good_email_becomes_a_receipt_and_a_malformed_one_ends_dead_after_the_cap(club):
    # GIVEN one good receipt email and one malformed one, both due now
    intake, receipts = _stores(club)
    intake.put("good", GOOD, MailVerdicts.passed())
    intake.put("bad", "From: shop@photoclub.example\nSubject: hi\n\nno receipt here", MailVerdicts.passed())
    # WHEN the job runs
    first = club.run("retry_email_intake")
    # THEN the good one is delivered (its receipt recorded) and the bad one backs off
    assert first["summary"]["delivered"] == 1 and first["summary"]["retried"] == 1
    good = intake.get("good")
    assert (good.status, good.receipt_id, good.attempts) == (IntakeStatus.DELIVERED.value, "R-1001", 1)
    assert [r.receipt_id for r in receipts.for_member("m-2")] == ["R-1001"]
    bad = intake.get("bad")
    assert bad.status == IntakeStatus.PENDING.value and bad.attempts == 1
    assert bad.next_attempt_at == club.clock.now_ms() + backoff_ms(1)
    assert "missing header" in bad.last_error
    # WHEN ticks keep coming every 5 minutes, long enough for every back-off (5+10+20+40 min)
    for _ in range(20):
        club.clock.advance(minutes=5)
        club.run("retry_email_intake")
    # THEN the bad record is dead after exactly the cap of attempts, with the reason kept
    bad = intake.get("bad")
    assert (bad.status, bad.attempts) == (IntakeStatus.DEAD.value, ATTEMPTS_CAP)
    assert "missing header(s): Date, Message-ID" in bad.last_error
    assert "retry_shard" not in Rows(club.dynamodb, club.tables).get("club_email_intake", "bad")  # out of the index
    # and the delivered record was never touched again
    assert intake.get("good").attempts == 1


def test_a_record_is_not_retried_before_its_back_off(club):
    intake, _ = _stores(club)
    intake.put("bad", "From: shop@photoclub.example\n\ngarbage", MailVerdicts.passed())
    club.run("retry_email_intake")
    club.clock.advance(minutes=4)  # under the 5-minute back-off, and a tick that passes the 0.9 gate
    club.clock.advance(seconds=30)
    club.run("retry_email_intake")
    assert intake.get("bad").attempts == 1


def test_backoff_doubles_and_is_capped():
    assert [backoff_ms(n) // 60_000 for n in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert backoff_ms(30) == 6 * 3_600_000


def test_a_repeated_run_does_not_deliver_twice(club):
    intake, receipts = _stores(club)
    intake.put("good", GOOD, MailVerdicts.passed())
    club.run("retry_email_intake")
    club.clock.advance(minutes=5)
    again = club.run("retry_email_intake")
    assert again["summary"].get("delivered", 0) == 0
    assert intake.get("good").attempts == 1


def test_an_unauthenticated_or_unlisted_email_is_quarantined_with_its_reason_never_a_receipt(club):
    from jobs.club.email_auth import MailVerdicts

    intake, receipts = _stores(club)
    # GIVEN a well-formed receipt that failed DKIM/DMARC, one with no verdicts, and one from another sender
    failed = MailVerdicts.from_ses_receipt({"spfVerdict": {"status": "PASS"}, "dkimVerdict": {"status": "FAIL"},
                                            "dmarcVerdict": {"status": "FAIL"}})
    intake.put("forged", GOOD, failed)
    intake.put("unverified", GOOD, MailVerdicts())
    intake.put("stranger", GOOD.replace("shop@photoclub.example", "shop@evil.example"), MailVerdicts.passed())
    # WHEN the job runs (and runs again later)
    first = club.run("retry_email_intake")
    club.clock.advance(hours=1)
    club.run("retry_email_intake")
    # THEN none became a receipt: each is quarantined once, raw kept, with a reason that never echoes the sender
    assert first["summary"]["quarantined"] == 3 and first["summary"]["delivered"] == 0
    assert receipts.for_member("m-2") == []
    reasons = {}
    for intake_id in ("forged", "unverified", "stranger"):
        row = intake.get(intake_id)
        assert row.status is IntakeStatus.QUARANTINED and row.raw  # a typed view, not the store's model
        assert "retry_shard" not in Rows(club.dynamodb, club.tables).get("club_email_intake", intake_id)
        assert row.attempts == 0  # never parsed, never retried
        reasons[intake_id] = row.last_error
    assert reasons == {"forged": "not authenticated: DKIM FAIL, DMARC FAIL",
                       "unverified": "not authenticated: SPF MISSING, DKIM MISSING, DMARC MISSING",
                       "stranger": "sender not on the receipt allowlist"}
