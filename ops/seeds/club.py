"""Club seed data that makes every one of the seven club jobs change something (tests and the demo)."""

from __future__ import annotations

from typing import Any

from jobs.club.stores.boards import DARKROOM_SCHEDULE, DARKROOM_STATS, STUDIO_SCHEDULE, BoardStore
from jobs.club.stores.loans import LoanStore
from jobs.club.stores.memberships import MembershipStore
from jobs.club.stores.photo_requests import PhotoRequestStore
from jobs.club.stores.receipts import Receipt, ReceiptStore
from jobs.club.stores.reminders import Recipient, ReminderStore
from jobs.club.stores.schedule import DARKROOM, STUDIO, ScheduleStore

GUILD = "100000000000000001"
ROLE_MEMBER = "110000000000000001"
ROLE_DARKROOM = "110000000000000002"
SCHEDULE_CHANNEL = "120000000000000001"
STATS_CHANNEL = "120000000000000002"
STUDIO_CHANNEL = "120000000000000003"
REQUESTS_CHANNEL = "120000000000000004"
MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR
DEFAULT_MESSAGE_IDS = {
    "schedule": "140000000000000001",
    "stats": "140000000000000002",
    "request": "140000000000000003",
    "request_2": "140000000000000004",
}


def existing_messages(message_ids: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(channel, message id) of the messages the seed's boards and requests point at."""
    ids = message_ids or DEFAULT_MESSAGE_IDS
    return [
        (SCHEDULE_CHANNEL, ids["schedule"]),
        (STATS_CHANNEL, ids["stats"]),
        (REQUESTS_CHANNEL, ids["request"]),
        (REQUESTS_CHANNEL, ids["request_2"]),
    ]


def user(n: int) -> str:
    return str(130000000000000000 + n)


def stores(tables: dict[str, str], clock) -> dict[str, Any]:
    return {
        "memberships": MembershipStore(tables["club_memberships"], clock),
        "receipts": ReceiptStore(tables["club_receipts"], clock),
        "schedule": ScheduleStore(tables["club_schedule"], clock),
        "boards": BoardStore(tables["club_boards"], clock),
        "loans": LoanStore(tables["club_equipment_loans"], clock),
        "reminders": ReminderStore(tables["club_equipment_reminders"], clock),
        "requests": PhotoRequestStore(tables["club_photo_requests"], clock),
    }


def seed(tables: dict[str, str], clock, message_ids: dict[str, str] | None = None) -> dict[str, Any]:
    """A club where each job has work: ended memberships, role drift, due changes, slots, reminders, requests."""
    now = clock.now_ms()
    s = stores(tables, clock)
    ids = message_ids or DEFAULT_MESSAGE_IDS
    # memberships: m-1 ended with a role applied; m-2 active, receipt grants a role not yet applied;
    # m-3 active and already matching.
    s["memberships"].put("m-1", GUILD, user(1), ends_at=now - HOUR, roles=[ROLE_MEMBER])
    s["memberships"].put("m-2", GUILD, user(2), ends_at=now + 30 * DAY)
    s["memberships"].put("m-3", GUILD, user(3), ends_at=now + 30 * DAY, roles=[ROLE_MEMBER])
    s["receipts"].put(Receipt("R-2", "m-2", ROLE_MEMBER, now - DAY, now + 300 * DAY))
    s["receipts"].put(Receipt("R-2b", "m-2", ROLE_DARKROOM, now - DAY, now + 300 * DAY))
    s["receipts"].put(Receipt("R-3", "m-3", ROLE_MEMBER, now - DAY, now + 300 * DAY))
    # darkroom: one change due, one booking applied earlier, one upcoming
    s["schedule"].add(DARKROOM, "d-1", now - 10 * MINUTE, "Open for members", member_id="m-2", hours=2)
    s["schedule"].add(DARKROOM, "d-2", now - 5 * MINUTE, "Booked: film night", member_id="m-3", hours=3)
    s["schedule"].add(DARKROOM, "d-3", now + DAY, "Closed for maintenance")
    # studio: one slot ended, one running, one later
    s["schedule"].add(STUDIO, "s-1", now - 3 * HOUR, "Portrait session", ends_at=now - HOUR)
    s["schedule"].add(STUDIO, "s-2", now - 10 * MINUTE, "Product shoot", ends_at=now + HOUR)
    s["schedule"].add(STUDIO, "s-3", now + DAY, "Open studio", ends_at=now + DAY + 2 * HOUR)
    s["boards"].put(DARKROOM_SCHEDULE, SCHEDULE_CHANNEL, ids["schedule"])
    s["boards"].put(DARKROOM_STATS, STATS_CHANNEL, ids["stats"])
    s["boards"].put(STUDIO_SCHEDULE, STUDIO_CHANNEL)
    # equipment: a due member reminder, a due staff reminder, one whose item came back, one not yet due
    s["loans"].put("L-1", "m-2", "Hasselblad 500C/M", now + DAY)
    s["loans"].put("L-2", "m-3", "Light meter", now + DAY)
    s["loans"].mark_returned("L-2")
    s["reminders"].put("r-1", "L-1", now - MINUTE, Recipient.MEMBER, user(2))
    s["reminders"].put("r-2", "L-1", now - MINUTE, Recipient.STAFF, user(9))
    s["reminders"].put("r-3", "L-2", now - MINUTE, Recipient.MEMBER, user(3))
    s["reminders"].put("r-4", "L-1", now + 2 * DAY, Recipient.MEMBER, user(2))
    # photographer requests: one overdue, one still open
    s["requests"].put("p-1", "Headshots for the exhibition", now - MINUTE, REQUESTS_CHANNEL, ids["request"])
    s["requests"].put("p-2", "Event coverage", now + 7 * DAY, REQUESTS_CHANNEL, ids["request_2"])
    return s


GOOD_RECEIPT_EMAIL = """\
From: Club Shop <shop@photoclub.example>
To: intake@photoclub.example
Subject: Your receipt R-2001
Date: Thu, 01 Jan 2026 10:00:00 +0000
Message-ID: <r-2001@photoclub.example>
MIME-Version: 1.0
Content-Type: text/plain; charset="utf-8"

Thanks for joining!

Receipt-Id: R-2001
Member-Id: m-3
Role-Id: 110000000000000002
Valid-From: 2026-01-01T00:00:00Z
Valid-Until: 2027-01-01T00:00:00Z
"""
MALFORMED_EMAIL = "From: shop@photoclub.example\nSubject: hi\n\nno receipt here"
# A receipt that fails DKIM (forged or altered on the way): quarantined, never a receipt.
UNAUTHENTIC_VERDICTS = {
    "spfVerdict": {"status": "PASS"},
    "dkimVerdict": {"status": "FAIL"},
    "dmarcVerdict": {"status": "FAIL"},
}


def seed_for_runtime(tables: dict[str, str], clock, discord: Any | None) -> dict[str, int]:
    """The club seed in the deployed tables; the messages it edits are created in the Discord stub."""
    if "club_memberships" not in tables:
        return {}
    ids = dict(DEFAULT_MESSAGE_IDS)
    if discord is not None:
        for channel, message_id in existing_messages(ids):
            discord.add_message(channel, "seeded by the demo", message_id=message_id)
    seed(tables, clock, ids)
    counts = {"club_jobs_with_work": 7}
    if "club_email_intake" in tables:
        from jobs.club.email_auth import MailVerdicts
        from jobs.club.stores.email_intake import EmailIntakeStore

        intake = EmailIntakeStore(tables["club_email_intake"], clock)
        intake.put("intake-good", GOOD_RECEIPT_EMAIL, MailVerdicts.passed())
        intake.put("intake-malformed", MALFORMED_EMAIL, MailVerdicts.passed())
        intake.put("intake-unauthentic", GOOD_RECEIPT_EMAIL, MailVerdicts.from_ses_receipt(UNAUTHENTIC_VERDICTS))
        counts["email_intake"] = 3
    return counts
