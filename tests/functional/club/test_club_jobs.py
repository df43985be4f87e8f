"""The seven club jobs through the real runner on moto: what each changes, and that a repeat changes nothing."""

from __future__ import annotations

from tests.functional.club.club_harness import club  # noqa: F401 - the fixture

import pytest

from jobs.club.events import EventType
from jobs.club.stores.boards import DARKROOM_SCHEDULE, DARKROOM_STATS
from jobs.club.stores.memberships import Access, MembershipStatus
from jobs.club.stores.photo_requests import RequestStatus
from jobs.club.stores.reminders import ReminderState
from jobs.club.stores.schedule import DARKROOM, STUDIO, StudioSlot
from jobs.club.stores.states import UnknownRowState
from jobfence.testing.tables import created_tables
from tests.support import Rows
from ops.seeds.club import GUILD, ROLE_DARKROOM, ROLE_MEMBER, SCHEDULE_CHANNEL, seed, user

SEVEN = (
    "expire_memberships",
    "reconcile_membership_roles",
    "sweep_darkroom_schedule",
    "sweep_studio_schedule",
    "sync_darkroom_stats",
    "send_equipment_reminders",
    "expire_photographer_requests",
)


def _kinds(events):
    return sorted((e.type.value, tuple(sorted(e.payload.model_dump().values()))) for e in events)


def test_expire_memberships_expires_only_ended_ones_and_removes_their_roles(club):
    # GIVEN m-1 ended an hour ago with the member role applied; m-2 and m-3 are active
    s = seed(club.tables, club.clock)
    # WHEN the job runs
    result = club.run("expire_memberships")
    # THEN only m-1 expired, lost access and its recorded roles, and one role_remove event went out
    assert result["outcome"] == "ran" and result["summary"]["expired"] == 1
    m1 = s["memberships"].get("m-1")
    assert (m1.status, m1.access, m1.roles) == (MembershipStatus.EXPIRED, Access.NONE, ())
    assert "active_shard" not in Rows(club.dynamodb, club.tables).get("club_memberships", "m-1")  # out of the index
    assert s["memberships"].get("m-2").status == MembershipStatus.ACTIVE.value
    events = club.events()
    assert [(e.type, e.payload.user_id, e.payload.role_id) for e in events] == [(EventType.ROLE_REMOVE, user(1), ROLE_MEMBER)]


def test_reconcile_emits_only_the_differences(club):
    # GIVEN m-2's receipts grant two roles it does not have; m-3 already has exactly its granted role;
    # m-1 holds a role that no receipt grants
    s = seed(club.tables, club.clock)
    # WHEN reconciliation runs
    result = club.run("reconcile_membership_roles")
    # THEN m-2 gets two role_add events, m-1 one role_remove, m-3 (matching) nothing
    events = club.events()
    assert sorted((e.type, e.payload.user_id, e.payload.role_id) for e in events) == sorted([
        (EventType.ROLE_ADD, user(2), ROLE_MEMBER),
        (EventType.ROLE_ADD, user(2), ROLE_DARKROOM),
        (EventType.ROLE_REMOVE, user(1), ROLE_MEMBER),
    ])
    assert result["summary"]["changed"] == 2 and result["summary"]["matched"] == 1
    assert sorted(s["memberships"].get("m-2").roles) == sorted([ROLE_MEMBER, ROLE_DARKROOM])


def test_reconcile_emits_nothing_when_roles_already_match(club):
    # GIVEN only members whose applied roles equal what their receipts grant
    s = seed(club.tables, club.clock)
    for member in ("m-1", "m-2"):
        Rows(club.dynamodb, club.tables).delete("club_memberships", member)
    # WHEN reconciliation runs
    result = club.run("reconcile_membership_roles")
    # THEN nothing is changed and no event is sent
    assert result["summary"]["matched"] == 1 and result["summary"]["changed"] == 0
    assert club.events() == []


def test_reconcile_removes_roles_of_an_expired_membership(club):
    # GIVEN an expired membership that still has a role recorded (e.g. expired by an operator)
    s = seed(club.tables, club.clock)
    Rows(club.dynamodb, club.tables).set("club_memberships", ("m-3",), status=MembershipStatus.EXPIRED.value)
    # WHEN reconciliation runs
    club.run("reconcile_membership_roles")
    # THEN the role is removed
    removes = [e for e in club.events() if e.type is EventType.ROLE_REMOVE and e.payload.user_id == user(3)]
    assert [e.payload.role_id for e in removes] == [ROLE_MEMBER]
    assert list(s["memberships"].get("m-3").roles) == []


def test_darkroom_sweep_applies_due_changes_once_and_edits_the_schedule_message(club):
    # GIVEN two due darkroom changes and one upcoming
    s = seed(club.tables, club.clock)
    # WHEN the sweep runs
    result = club.run("sweep_darkroom_schedule")
    # THEN both due changes are applied, the upcoming one is not, and the schedule message is edited
    statuses = {e.entry_id: e.status for e in (r.view() for r in s["schedule"].entries(DARKROOM))}
    assert statuses == {"d-1": "applied", "d-2": "applied", "d-3": "pending"}
    assert result["summary"]["applied"] == 2 and result["summary"]["board"] == "published"
    (event,) = club.events()
    assert event.type is EventType.MESSAGE_EDIT and event.payload.channel_id == SCHEDULE_CHANNEL
    assert "Booked: film night" in event.payload.content and "Closed for maintenance" in event.payload.content


def test_studio_sweep_moves_slots_forward_and_posts_each_change(club):
    s = seed(club.tables, club.clock)
    result = club.run("sweep_studio_schedule")
    statuses = {e.entry_id: e.status for e in (r.view() for r in s["schedule"].entries(STUDIO))}
    assert statuses == {"s-1": StudioSlot.PAST, "s-2": StudioSlot.CURRENT, "s-3": StudioSlot.UPCOMING}
    assert all(type(status) is StudioSlot for status in statuses.values())  # a typed view: a studio entry's own enum
    assert result["summary"]["moved"] == 2
    contents = sorted(e.payload.content.split(" (")[0] for e in club.events())
    assert contents == ["Studio: Portrait session has ended", "Studio: Product shoot is on now"]


def test_darkroom_stats_recount_and_edit_only_when_totals_change(club):
    # GIVEN the darkroom sweep has applied two bookings (2 h by m-2, 3 h by m-3)
    s = seed(club.tables, club.clock)
    club.run("sweep_darkroom_schedule")
    club.drain_queue()
    # WHEN the stats sync runs
    result = club.run("sync_darkroom_stats")
    # THEN the totals are recalculated and the stats message is edited
    assert result["summary"]["board"] == "published"
    assert s["boards"].get(DARKROOM_STATS).totals == {"hours": 5, "members": 2, "sessions": 2}
    (event,) = club.events()
    assert "Sessions: 2" in event.payload.content and "Hours booked: 5" in event.payload.content


def test_equipment_reminders_notify_due_recipients_and_cancel_returned_items(club):
    s = seed(club.tables, club.clock)
    result = club.run("send_equipment_reminders")
    states = {r: s["reminders"].get(r).state for r in ("r-1", "r-2", "r-3", "r-4")}
    assert states == {"r-1": "sent", "r-2": "sent", "r-3": "cancelled", "r-4": "pending"}
    assert result["summary"]["claimed"] == 2 and result["summary"]["cancelled"] == 1
    events = club.events()
    assert sorted(e.payload.user_id for e in events) == sorted([user(2), user(9)])
    assert all(e.type is EventType.DIRECT_NOTIFICATION for e in events)
    staff = next(e for e in events if e.payload.user_id == user(9))
    assert "Equipment reminder" in staff.payload.content
    assert result["summary"]["skipped"] == 0  # every member of the outcome enum is counted, zeros included


def test_a_club_row_in_an_unknown_state_is_a_clear_error_naming_its_table_and_key(club):
    # GIVEN a due reminder whose state no code writes
    s = seed(club.tables, club.clock)
    rows = Rows(club.dynamodb, club.tables)
    rows.set("club_equipment_reminders", ("r-1",), state="teleported")
    # WHEN the store reads it THEN the error names the table, the key and the attribute, never a guess at the state
    # (what the jobs do with such a row: tests/functional/club/test_club_poison_rows.py)
    with pytest.raises(UnknownRowState, match=r"club_equipment_reminders r-1 is in an unknown state \(state = teleported\)"):
        s["reminders"].get("r-1")
    assert rows.get("club_equipment_reminders", "r-1")["state"] == "teleported"


def test_a_return_asked_again_keeps_the_time_it_was_first_applied(club):
    # GIVEN L-2 returned (the seed); its member's client lost the reply and asks again a minute later
    s = seed(club.tables, club.clock)
    first = s["loans"].get("L-2").returned_at
    club.clock.advance(minutes=1)
    s["loans"].mark_returned("L-2")
    # THEN the return stays when it was first applied (the simulator's club invariant 37, seed 66)
    assert s["loans"].get("L-2").returned_at == first


def test_an_item_returned_between_the_read_and_the_send_is_not_reminded(club, monkeypatch):
    # GIVEN L-1's two due reminders, and its member's return applied just after the job read the loan
    from jobfence.testing.grants import another_party
    from jobs.club.stores.loans import LoanStore

    s = seed(club.tables, club.clock)
    read = LoanStore.get

    def read_then_returned(self, loan_id):
        row = read(self, loan_id)
        if loan_id == "L-1" and row is not None and row.returned_at is None:
            with another_party():  # the member's client, not the job
                s["loans"].mark_returned("L-1")
        return row

    monkeypatch.setattr(LoanStore, "get", read_then_returned)
    # WHEN the job runs
    club.run("send_equipment_reminders")
    # THEN no reminder of the returned item is sent: the first, read before the return, is refused by
    # the loan's check (was sent before the check), the second, read after it, is cancelled
    assert [s["reminders"].get(r).state for r in ("r-1", "r-2")] == ["pending", "cancelled"]
    assert club.events() == []
    # THEN the next run cancels the first
    monkeypatch.undo()
    club.clock.advance(minutes=30)
    club.run("send_equipment_reminders")
    assert [s["reminders"].get(r).state for r in ("r-1", "r-2")] == ["cancelled", "cancelled"]
    assert club.events() == []


def test_expire_photographer_requests_only_expires_overdue_open_ones(club):
    s = seed(club.tables, club.clock)
    result = club.run("expire_photographer_requests")
    p1, p2 = s["requests"].get("p-1"), s["requests"].get("p-2")
    assert (p1.status, p1.public_status, p1.discord_status) == (RequestStatus.EXPIRED.value, "closed", "marked_expired")
    assert p2.status == RequestStatus.OPEN.value
    assert result["summary"]["expired"] == 1
    (event,) = club.events()
    assert event.type is EventType.MESSAGE_EDIT and "expired" in event.payload.content


@pytest.mark.parametrize("job", SEVEN)
def test_a_repeated_run_changes_nothing_and_sends_nothing(club, job):
    # GIVEN a club where the job has work, and one run has done it
    s = seed(club.tables, club.clock)
    if job == "sync_darkroom_stats":
        club.run("sweep_darkroom_schedule")
    first = club.run(job)
    assert first["outcome"] == "ran"
    club.drain_queue()
    before = _snapshot(club)
    # WHEN the next tick runs the job again (and a duplicate delivery of that tick arrives too)
    club.clock.advance(minutes=30)
    again = club.run(job)
    duplicate = club.run(job)
    # THEN the second run changes no record and sends no event; the duplicate tick is skipped with no write
    assert again["outcome"] == "ran"
    assert duplicate["outcome"] == "skipped_interval"
    assert club.events() == []
    assert _snapshot(club) == before


def _snapshot(club):
    """Every club row except the bookkeeping attributes of the runner itself."""
    rows = {}
    for name, physical in created_tables(club.tables).items():  # a table not made yet holds no rows
        if not name.startswith("club_"):
            continue
        items = club.dynamodb.scan(TableName=physical, ConsistentRead=True)["Items"]
        if items:  # (a table first made by the second run is as empty as it was)
            rows[name] = sorted(repr(sorted(i.items())) for i in items)
    return rows


def test_every_seeded_job_changes_something(club):
    # The demo's promise: on the seed data, each of the seven jobs has work.
    seed(club.tables, club.clock)
    club.run("sweep_darkroom_schedule")
    for job in SEVEN:
        if job == "sweep_darkroom_schedule":
            continue
        result = club.run(job)
        changed = sum(v for k, v in result["summary"].items() if k in ("expired", "changed", "applied", "moved", "claimed"))
        assert changed or result["summary"].get("board") == "published", (job, result)


def test_a_board_without_a_message_is_reported_not_invented(club):
    s = seed(club.tables, club.clock)
    Rows(club.dynamodb, club.tables).delete("club_boards", DARKROOM_SCHEDULE)
    result = club.run("sweep_darkroom_schedule")
    assert result["summary"]["board"] == "board_missing"
    assert club.events() == []


def test_guild_of_role_events_comes_from_the_membership(club):
    seed(club.tables, club.clock)
    club.run("reconcile_membership_roles")
    assert {e.payload.guild_id for e in club.events()} == {GUILD}
