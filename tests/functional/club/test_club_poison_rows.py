"""A club row in a state no code writes (a poison record) through the real runner on moto: the job leaves it as
it is, counts it `invalid`, logs its table and key once, and goes on with every other row; the tick runs."""

from __future__ import annotations

from tests.functional.club.club_harness import club  # noqa: F401 - the fixture

import logging

from jobs.club.email_auth import MailVerdicts
from jobs.club.events import EventType
from jobs.club.stores.due import shard_of
from jobs.club.stores.email_intake import EmailIntakeStore, IntakeStatus
from jobs.club.stores.memberships import Access, MembershipStatus
from jobs.club.stores.photo_requests import RequestStatus
from jobs.club.stores.reminders import ReminderState
from jobs.club.stores.schedule import DARKROOM, entry_key
from jobfence.expiry import expiry_shard
from tests.support import Rows
from tests.unit.test_club_email_receipts import GOOD
from ops.seeds.club import GUILD, ROLE_DARKROOM, ROLE_MEMBER, SCHEDULE_CHANNEL, seed, user

HOUR = 3_600_000
PRIVATE = "Jane Doe, 12 Elm St"  # what a bad state value may hold: never in a log line


def _warnings(caplog, table: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno == logging.WARNING and getattr(r, "table", None) == table]


def _logged_once_and_bounded(caplog, table: str, key: str) -> None:
    (line,) = _warnings(caplog, table)  # once a run, naming the table and the key
    assert (line.key, line.table) == (key, table)
    assert all(PRIVATE not in r.getMessage() and PRIVATE not in str(vars(r)) for r in caplog.records)


def _poison_membership(club, now: int) -> dict:
    # ended and in the active index like m-1, but with a status no code writes
    item = {
        "member_id": "m-9", "guild_id": GUILD, "discord_user_id": user(9), "status": PRIVATE, "access": "member",
        "ends_at": now - HOUR, "roles": [ROLE_MEMBER], "roles_version": 0, "active_shard": shard_of("m-9"),
    }
    Rows(club.dynamodb, club.tables).put("club_memberships", **item)
    return item


def test_expire_memberships_passes_over_a_membership_in_an_unknown_state(club, caplog):
    # GIVEN the seed (m-1 ended) and m-9, ended too, whose status no code writes
    s = seed(club.tables, club.clock)
    poison = _poison_membership(club, club.clock.now_ms())
    # WHEN the job runs
    caplog.set_level(logging.WARNING)
    result = club.run("expire_memberships")
    # THEN the tick ran: m-1 expired with its event, m-9 is untouched and counted invalid, logged by table and key
    assert result["outcome"] == "ran"
    assert (result["summary"]["expired"], result["summary"]["invalid"]) == (1, 1)
    m1 = s["memberships"].get("m-1")
    assert (m1.status, m1.access) == (MembershipStatus.EXPIRED, Access.NONE)
    assert Rows(club.dynamodb, club.tables).get("club_memberships", "m-9") == poison
    assert [(e.type, e.payload.user_id) for e in club.events()] == [(EventType.ROLE_REMOVE, user(1))]
    _logged_once_and_bounded(caplog, "club_memberships", "m-9")
    assert _warnings(caplog, "club_memberships")[0].value == f"<text of {len(PRIVATE)} characters>"


def test_reconcile_goes_on_with_the_rest_of_a_page_that_holds_a_membership_in_an_unknown_state(club, caplog):
    # GIVEN the seed's three members (two to change, one matching) and m-9 in the same scan page
    seed(club.tables, club.clock)
    poison = _poison_membership(club, club.clock.now_ms())
    # WHEN reconciliation runs
    caplog.set_level(logging.WARNING)
    result = club.run("reconcile_membership_roles")
    # THEN the other rows of the page are reconciled as ever, m-9 is counted, logged and left as it is
    assert result["outcome"] == "ran"
    summary = result["summary"]
    assert (summary["members"], summary["changed"], summary["matched"], summary["invalid"]) == (4, 2, 1, 1)
    assert sorted((e.type, e.payload.user_id, e.payload.role_id) for e in club.events()) == sorted([
        (EventType.ROLE_ADD, user(2), ROLE_MEMBER),
        (EventType.ROLE_ADD, user(2), ROLE_DARKROOM),
        (EventType.ROLE_REMOVE, user(1), ROLE_MEMBER),
    ])
    assert Rows(club.dynamodb, club.tables).get("club_memberships", "m-9") == poison
    _logged_once_and_bounded(caplog, "club_memberships", "m-9")


def test_equipment_reminders_pass_over_a_reminder_in_an_unknown_state(club, caplog):
    # GIVEN the seed's due reminders, of which r-1 now has a state no code writes (still in the due index)
    s = seed(club.tables, club.clock)
    rows = Rows(club.dynamodb, club.tables)
    rows.set("club_equipment_reminders", ("r-1",), state="teleported")
    before = rows.get("club_equipment_reminders", "r-1")
    # WHEN the job runs
    caplog.set_level(logging.WARNING)
    result = club.run("send_equipment_reminders")
    # THEN r-2 is sent and r-3 cancelled as ever; r-1 is counted, logged (its bad value is state-shaped) and untouched
    assert result["outcome"] == "ran"
    summary = result["summary"]
    assert (summary["claimed"], summary["cancelled"], summary["invalid"]) == (1, 1, 1)
    assert s["reminders"].get("r-2").state is ReminderState.SENT
    assert s["reminders"].get("r-3").state is ReminderState.CANCELLED
    assert rows.get("club_equipment_reminders", "r-1") == before
    assert [e.payload.user_id for e in club.events()] == [user(9)]
    _logged_once_and_bounded(caplog, "club_equipment_reminders", "r-1")
    line = _warnings(caplog, "club_equipment_reminders")[0]
    assert (line.attribute, line.value) == ("state", "teleported")


def test_photographer_requests_pass_over_a_request_in_an_unknown_state(club):
    # GIVEN the seed's overdue p-1 and an overdue p-9 whose Discord status no code writes
    s = seed(club.tables, club.clock)
    now = club.clock.now_ms()
    poison = {
        "request_id": "p-9", "title": "x", "status": "open", "expires_at": now - HOUR, "expiry_shard": expiry_shard("p-9"),
        "public_status": "listed", "discord_status": "melted", "channel_id": "1", "message_id": "2",
    }
    Rows(club.dynamodb, club.tables).put("club_photo_requests", **poison)
    # WHEN the job runs
    result = club.run("expire_photographer_requests")
    # THEN p-1 expired, p-9 is counted and untouched
    assert result["outcome"] == "ran" and (result["summary"]["expired"], result["summary"]["invalid"]) == (1, 1)
    assert s["requests"].get("p-1").status is RequestStatus.EXPIRED
    assert Rows(club.dynamodb, club.tables).get("club_photo_requests", "p-9") == poison


def test_email_intake_passes_over_a_record_in_an_unknown_state(club, caplog):
    # GIVEN a good due email and a due record whose status no code writes
    intake = EmailIntakeStore(club.tables["club_email_intake"], club.clock)
    intake.put("good", GOOD, MailVerdicts.passed())
    now = club.clock.now_ms()
    poison = {
        "intake_id": "lost", "raw": PRIVATE, "status": "limbo", "attempts": 0, "next_attempt_at": now,
        "retry_shard": shard_of("lost"), "received_at": now,
    }
    Rows(club.dynamodb, club.tables).put("club_email_intake", **poison)
    # WHEN the job runs
    caplog.set_level(logging.WARNING)
    result = club.run("retry_email_intake")
    # THEN the good one is delivered, the other counted, logged (never its email) and untouched
    assert result["outcome"] == "ran"
    assert (result["summary"]["delivered"], result["summary"]["invalid"]) == (1, 1)
    assert intake.get("good").status is IntakeStatus.DELIVERED
    assert Rows(club.dynamodb, club.tables).get("club_email_intake", "lost") == poison
    _logged_once_and_bounded(caplog, "club_email_intake", "lost")


def test_darkroom_jobs_pass_over_an_entry_in_an_unknown_state(club):
    # GIVEN the seed's darkroom (two due changes, one upcoming) and an upcoming entry whose status no code writes
    seed(club.tables, club.clock)
    now = club.clock.now_ms()
    key = entry_key(now + 2 * 24 * HOUR, "d-9")
    poison = {"space": DARKROOM, "entry_key": key, "entry_id": "d-9", "label": "x", "starts_at": now + 48 * HOUR,
              "status": "haunted", "member_id": "m-2", "hours": 5}
    rows = Rows(club.dynamodb, club.tables)
    rows.put("club_schedule", **poison)
    # WHEN the sweep runs THEN both due changes are applied and the board is published without d-9, counted
    swept = club.run("sweep_darkroom_schedule")
    assert swept["outcome"] == "ran"
    assert (swept["summary"]["applied"], swept["summary"]["board"], swept["summary"]["invalid"]) == (2, "published", 1)
    (edit,) = club.events()
    assert edit.payload.channel_id == SCHEDULE_CHANNEL and "Closed for maintenance" in edit.payload.content
    # WHEN the stats are recounted THEN d-9 is not counted in the totals but as invalid
    stats = club.run("sync_darkroom_stats")
    assert stats["outcome"] == "ran" and (stats["summary"]["read"], stats["summary"]["invalid"]) == (3, 1)
    (edit,) = club.events()
    assert "Hours booked: 5" in edit.payload.content  # 2 h + 3 h, never the poison entry's 5 more
    assert rows.get("club_schedule", DARKROOM, key) == poison
