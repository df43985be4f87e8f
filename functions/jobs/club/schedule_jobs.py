"""Schedule jobs of seed 002: the darkroom sweep, the studio sweep and the darkroom stats sync.

Every entry moves by a conditional transition from the status it was read in,
and every board publish is conditioned on the board version it read, so a
repeated run applies nothing twice and republishes nothing unchanged. An
entry in a status no code writes is passed over (counted `invalid`, logged,
left as it is) and the others go on.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass

from aws_lambda_powertools import Logger

from jobfence.batch import LastBatch
from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import ChangeLog, build_changelog, commit_plain
from jobs.club.events import Event, EventType, nonce_for
from jobs.club.stores.boards import DARKROOM_SCHEDULE, DARKROOM_STATS, STUDIO_SCHEDULE, BoardStore, content_hash
from jobs.club.stores.schedule import DARKROOM, DarkroomChange, ScheduleStore, StudioSlot
from jobs.club.sweep import InvalidRows

BATCH = 25
MAX_BATCHES = 20
STATS_PAGE = 200
UPCOMING_SHOWN = 5


class BoardOutcome(enum.Enum):
    """What a job did to its board (`board` in the run row)."""

    PUBLISHED = "published"  # the new content and its edit event, in one transaction over the version read
    UNCHANGED = "unchanged"  # the content is what was last published: nothing to edit
    CONFLICT = "conflict"  # another run published over the version read first
    BOARD_MISSING = "board_missing"  # no board or no message to edit: reported, never invented


@dataclass(frozen=True)
class StudioCounts:
    """One batch of `sweep_studio_schedule` (every field in the run row)."""

    moved: int  # slots moved on (upcoming -> current -> past), each with its post saved
    conflicts: int  # moved by someone else since the read
    events: int  # events sent by this batch's flush
    unpublished: int  # moves without a studio board to post to (reported, never invented)
    invalid: int  # slots in an unknown state (`InvalidRows`): logged, left as they are

    def summary(self) -> dict[str, int]:
        return asdict(self)


def _when(epoch_ms: int) -> str:
    return f"<t:{epoch_ms // 1000}:f>"  # Discord renders this in each reader's time zone


def publish_board(
    boards: BoardStore,
    changes: ChangeLog,
    ctx: RunContext,
    board_id: str,
    content: str,
    totals: Mapping[str, float] | None = None,
) -> BoardOutcome:
    """Edit a board's message when its content changed; return what happened."""
    board = boards.get(board_id)
    if board is None or not board.message_id:
        return BoardOutcome.BOARD_MISSING
    if board.content_hash == content_hash(content):
        return BoardOutcome.UNCHANGED
    nonce = nonce_for(ctx.job, board_id, board.version + 1)
    event = Event.build(
        EventType.MESSAGE_EDIT, nonce, channel_id=board.channel_id, message_id=board.message_id, content=content
    )
    published = changes.commit(ctx, [boards.publish_op(board, content, totals)], [event])
    return BoardOutcome.PUBLISHED if published else BoardOutcome.CONFLICT


def render_darkroom(schedule: ScheduleStore, now: int, invalid: InvalidRows) -> str:
    current = schedule.latest(DARKROOM, now, DarkroomChange.APPLIED)
    lines = [f"**Darkroom**: {current.label if current else 'no status yet'}"]
    upcoming = list(invalid.views(schedule.upcoming(DARKROOM, now, UPCOMING_SHOWN)))  # known states only
    if upcoming:
        lines.append("Next:")
        lines += [f"- {_when(e.starts_at)} {e.label}" for e in upcoming]
    return "\n".join(lines)


def sweep_darkroom_schedule(
    schedule: ScheduleStore, boards: BoardStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int | str]]:
    """Apply due darkroom changes once each, then update the schedule message."""
    invalid = InvalidRows(logger, ctx.job)
    sent = changes.flush(ctx)
    for _ in range(MAX_BATCHES):
        due = schedule.started(DARKROOM, ctx.now_ms(), (DarkroomChange.PENDING,), BATCH)
        rows = list(invalid.views(due))
        applied = sum(1 for row in rows if commit_plain(ctx, [schedule.transition_op(row, DarkroomChange.APPLIED)]))
        yield {"applied": applied, "skipped": len(rows) - applied, "invalid": invalid.taken()}
        if len(due) < BATCH or applied == 0:
            break
    content = render_darkroom(schedule, ctx.now_ms(), invalid)
    board = publish_board(boards, changes, ctx, DARKROOM_SCHEDULE, content)
    yield LastBatch({"board": board.value, "events": sent + changes.flush(ctx), "invalid": invalid.taken()})


def sweep_studio_schedule(
    schedule: ScheduleStore, boards: BoardStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int | str]]:
    """Move started studio slots to current and ended ones to past; post each change to the studio channel."""
    invalid = InvalidRows(logger, ctx.job)
    sent = changes.flush(ctx)
    board = boards.get(STUDIO_SCHEDULE)
    for n in range(1, MAX_BATCHES + 1):
        now = ctx.now_ms()
        rows = schedule.to_advance(now, BATCH)
        moved = conflicts = 0
        for row in invalid.views(rows):
            ended = row.ends_at is not None and row.ends_at <= now
            target = StudioSlot.PAST if ended else StudioSlot.CURRENT
            if target is row.status:
                continue  # running and not over yet
            events = []
            if board is not None:
                text = f"Studio: {row.label} {'has ended' if ended else 'is on now'} ({_when(row.starts_at)})"
                events.append(
                    Event.build(
                        EventType.MESSAGE_POST,
                        nonce_for(ctx.job, row.entry_key, target.value),
                        channel_id=board.channel_id,
                        content=text,
                    )
                )
            if changes.commit(ctx, [schedule.transition_op(row, target)], events):
                moved += 1
            else:
                conflicts += 1
        sent += changes.flush(ctx)
        counts = StudioCounts(moved, conflicts, sent, 0 if board else moved, invalid.taken()).summary()
        if len(rows) < BATCH or moved == 0 or n == MAX_BATCHES:
            yield LastBatch(counts)
            return
        yield counts
        sent = 0


def sync_darkroom_stats(
    schedule: ScheduleStore, boards: BoardStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int | str]]:
    """Recount the darkroom totals from the schedule rows and update the stats message when they changed."""
    invalid = InvalidRows(logger, ctx.job)
    sent = changes.flush(ctx)
    sessions = 0
    hours = 0.0
    members: set[str] = set()
    read = 0
    for row in invalid.views(schedule.entries(DARKROOM)):  # an entry in an unknown state is not counted
        read += 1
        if row.status is DarkroomChange.APPLIED and row.member_id:
            sessions += 1
            hours += float(row.hours or 0)
            members.add(row.member_id)
        if read % STATS_PAGE == 0:
            yield {"read": STATS_PAGE}  # a checkpoint: the runner renews the lease before the next page
    totals = {"sessions": sessions, "hours": round(hours, 2), "members": len(members)}
    content = (
        f"**Darkroom stats**\nSessions: {totals['sessions']}\nHours booked: {totals['hours']:g}\n"
        f"Members: {totals['members']}"
    )
    board = publish_board(boards, changes, ctx, DARKROOM_STATS, content, totals)
    events = sent + changes.flush(ctx)
    yield LastBatch({"read": read % STATS_PAGE, "board": board.value, "events": events, "invalid": invalid.taken()})


def _stores(deps: JobDeps) -> tuple[ScheduleStore, BoardStore, ChangeLog]:
    return (
        ScheduleStore(deps.settings.table("club_schedule"), deps.clock),
        BoardStore(deps.settings.table("club_boards"), deps.clock),
        build_changelog(deps),
    )


def build_sweep_darkroom_schedule(deps: JobDeps):
    schedule, boards, changes = _stores(deps)
    return lambda ctx: sweep_darkroom_schedule(schedule, boards, changes, ctx, deps.logger)


def build_sweep_studio_schedule(deps: JobDeps):
    schedule, boards, changes = _stores(deps)
    return lambda ctx: sweep_studio_schedule(schedule, boards, changes, ctx, deps.logger)


def build_sync_darkroom_stats(deps: JobDeps):
    schedule, boards, changes = _stores(deps)
    return lambda ctx: sync_darkroom_stats(schedule, boards, changes, ctx, deps.logger)
