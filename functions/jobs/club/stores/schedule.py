"""Store of the darkroom and studio schedules (`club_schedule`).

    space (key: "darkroom" | "studio") | entry_key (sort: zero-padded starts_at "#" entry_id)
    | entry_id | label | starts_at | ends_at | status | member_id | hours | changed_at

Darkroom entries are timed changes ("open for members from 18:00") that the
sweep applies once when due. Studio entries are slots that the sweep moves
forward (upcoming -> current -> past) as time passes. Sorting by start time in
the key lets both sweeps read only what has started.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import each_row, put_row
from jobfence.transaction import Write, update_write
from jobs.club.stores.states import RowRead, RowRef, reads, state_of

DARKROOM = "darkroom"
STUDIO = "studio"


class DarkroomChange(str, enum.Enum):
    """A timed darkroom change."""

    PENDING = "pending"  # created by staff; waits for its start time
    APPLIED = "applied"  # set once by sweep_darkroom_schedule when due; terminal


class StudioSlot(str, enum.Enum):
    """A studio slot as time moves past it."""

    UPCOMING = "upcoming"  # created by staff
    CURRENT = "current"  # set by sweep_studio_schedule once starts_at has passed
    PAST = "past"  # set by sweep_studio_schedule once ends_at has passed; terminal


EntryStatus = DarkroomChange | StudioSlot  # a darkroom entry's is a DarkroomChange, a studio entry's a StudioSlot


def entry_key(starts_at: int, entry_id: str) -> str:
    return f"{starts_at:013d}#{entry_id}"


class _Entry(Model):
    class Meta:
        table_name = "unbound"

    space = UnicodeAttribute(hash_key=True)
    entry_key = UnicodeAttribute(range_key=True)
    entry_id = UnicodeAttribute()
    label = UnicodeAttribute()
    starts_at = NumberAttribute()
    ends_at = NumberAttribute(null=True)
    status = UnicodeAttribute()
    member_id = UnicodeAttribute(null=True)
    hours = NumberAttribute(null=True)
    changed_at = NumberAttribute(null=True)


@dataclass(frozen=True)
class ScheduleEntry:
    """One schedule entry as read, built by the store from its row."""

    space: str
    entry_key: str
    entry_id: str
    label: str
    starts_at: int
    ends_at: int | None
    status: EntryStatus
    member_id: str | None
    hours: float | None


def _entry(row: _Entry) -> ScheduleEntry:
    states: type[DarkroomChange] | type[StudioSlot] = DarkroomChange if row.space == DARKROOM else StudioSlot
    return ScheduleEntry(
        space=row.space,
        entry_key=row.entry_key,
        entry_id=row.entry_id,
        label=row.label,
        starts_at=int(row.starts_at),
        ends_at=None if row.ends_at is None else int(row.ends_at),
        status=state_of(states, row.status, RowRef("club_schedule", f"{row.space}/{row.entry_key}"), "status"),
        member_id=row.member_id,
        hours=None if row.hours is None else float(row.hours),
    )


class ScheduleStore(ModelStore):
    """Read schedule entries by start time and build their conditional transitions."""

    _model_class = _Entry

    def add(
        self,
        space: str,
        entry_id: str,
        starts_at: int,
        label: str,
        *,
        ends_at: int | None = None,
        member_id: str | None = None,
        hours: float | None = None,
    ) -> None:
        """Create an entry in its first state (seed data, staff tools)."""
        status = DarkroomChange.PENDING if space == DARKROOM else StudioSlot.UPCOMING
        put_row(
            self._model(
                space,
                entry_key(starts_at, entry_id),
                entry_id=entry_id,
                label=label,
                starts_at=starts_at,
                ends_at=ends_at,
                status=status.value,
                member_id=member_id,
                hours=hours,
            ),
            None,
            f"adding schedule entry {entry_id}",
        )

    def started(
        self, space: str, now_ms: int, statuses: tuple[EntryStatus, ...], limit: int
    ) -> list[RowRead[ScheduleEntry]]:
        """Up to `limit` entries that started at or before now and are in one of `statuses` (a read each)."""
        m = self._model
        condition = m.status.is_in(*(status.value for status in statuses))
        query = m.query(
            space,
            m.entry_key <= f"{now_ms:013d}#\uffff",
            filter_condition=condition,
            consistent_read=True,
            limit=limit,
            page_size=max(limit, 25),
        )
        return reads(list(each_row(query, f"querying started {space} entries")), _entry)

    def to_advance(self, now_ms: int, limit: int) -> list[RowRead[ScheduleEntry]]:
        """Up to `limit` studio slots that must move: started but upcoming, or current but ended (a read each)."""
        m = self._model
        condition = (m.status == StudioSlot.UPCOMING.value) | (
            (m.status == StudioSlot.CURRENT.value) & (m.ends_at <= now_ms)
        )
        query = m.query(
            STUDIO,
            m.entry_key <= f"{now_ms:013d}#\uffff",
            filter_condition=condition,
            consistent_read=True,
            limit=limit,
            page_size=max(limit, 25),
        )
        return reads(list(each_row(query, "querying studio slots to advance")), _entry)

    def entries(self, space: str) -> Iterator[RowRead[ScheduleEntry]]:
        """Every entry of a space, in start order, a read each (pages through the partition)."""
        query = self._model.query(space, consistent_read=True, page_size=200)
        return (RowRead(row, _entry) for row in each_row(query, f"reading the {space} schedule"))

    def latest(self, space: str, now_ms: int, status: EntryStatus) -> ScheduleEntry | None:
        """The entry in `status` that started last at or before now (the filter names a known state)."""
        m = self._model
        query = m.query(
            space,
            m.entry_key <= f"{now_ms:013d}#\uffff",
            filter_condition=m.status == status.value,
            scan_index_forward=False,
            consistent_read=True,
            limit=1,
        )
        for row in each_row(query, f"querying the latest {space} entry"):
            return _entry(row)
        return None

    def upcoming(self, space: str, now_ms: int, limit: int) -> list[RowRead[ScheduleEntry]]:
        """Up to `limit` entries that start after now, in any status (a read each)."""
        m = self._model
        query = m.query(space, m.entry_key > f"{now_ms:013d}#\uffff", consistent_read=True, limit=limit)
        return reads(list(each_row(query, f"querying upcoming {space} entries")), _entry)

    def transition_op(self, row: ScheduleEntry, to: EntryStatus) -> Write:
        """Move an entry from the status it was read in to `to` (refused if it moved meanwhile)."""
        m = self._model
        actions = [m.status.set(to.value), m.changed_at.set(self._clock.now_ms())]
        condition = m.status == row.status.value
        return update_write(m(row.space, row.entry_key), actions, condition)
