"""`send_equipment_reminders` (seed 002): claim each due reminder's send, then notify its recipient.

The claim is the conditional update pending -> sent of the reminder row,
committed in the same fenced transaction as its notification event and a
check that the loan is still out: a reminder another run already claimed
refuses the update, so that run saves no event and can never send it. A
reminder whose item came back first is cancelled instead, with no event; one
whose item came back between the read and the claim is refused by the check
(nothing saved) and cancelled by the next run.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping

from aws_lambda_powertools import Logger

from jobfence.scheduled import JobDeps, RunContext
from jobs.club.changes import ChangeLog, build_changelog
from jobs.club.events import Event, EventType, nonce_for
from jobs.club.stores.loans import Loan, LoanStore
from jobs.club.stores.reminders import Recipient, ReminderState, ReminderStore
from jobs.club.sweep import InvalidRows, sweep

BATCH = 25
MAX_BATCHES = 40


class ReminderOutcome(enum.Enum):
    """What one due reminder came to."""

    CLAIMED = "claimed"  # claimed for this run with its notification event (sent by the flush)
    CANCELLED = "cancelled"  # its item came back first: no notification
    SKIPPED = "skipped"  # a stale index entry, claimed by another run first, or its item came back since the read


def reminder_text(recipient_kind: Recipient, loan: Loan) -> str:
    due = f"<t:{loan.due_back_at // 1000}:f>"
    if recipient_kind is Recipient.STAFF:
        return f"Equipment reminder: {loan.item} (loan {loan.loan_id}) is due back {due}."
    return f"Reminder: please return {loan.item} by {due}."


def send_equipment_reminders(
    reminders: ReminderStore, loans: LoanStore, changes: ChangeLog, ctx: RunContext, logger: Logger
) -> Iterator[Mapping[str, int]]:
    """Notify the member or staff member of each due reminder, exactly once."""

    def handle(reminder_id: str, now: int) -> ReminderOutcome | None:
        row = reminders.get(reminder_id)
        if row is None or row.state is not ReminderState.PENDING or row.due_at > now:
            return ReminderOutcome.SKIPPED
        loan = loans.get(row.loan_id)
        if loan is None or loan.returned_at is not None:
            op = reminders.finish_op(reminder_id, ReminderState.CANCELLED, ctx.run_id)
            return ReminderOutcome.CANCELLED if changes.commit(ctx, [op]) else None  # another run cancelled it
        event = Event.build(
            EventType.DIRECT_NOTIFICATION,
            nonce_for(ctx.job, reminder_id),
            user_id=row.recipient_user_id,
            content=reminder_text(row.recipient_kind, loan),
        )
        claim = reminders.finish_op(reminder_id, ReminderState.SENT, ctx.run_id)
        if changes.commit(ctx, [claim, loans.still_out_op(row.loan_id)], [event]):
            return ReminderOutcome.CLAIMED
        # claimed by another run first (that run sends it, we never do), or the item came back since we
        # read it: nothing saved, and the next run cancels the reminder
        return ReminderOutcome.SKIPPED

    progress = {ReminderOutcome.CLAIMED, ReminderOutcome.CANCELLED}
    invalid = InvalidRows(logger, ctx.job)
    return sweep(changes, ctx, invalid, reminders.due, handle, ReminderOutcome, progress, BATCH, MAX_BATCHES)


def build_send_equipment_reminders(deps: JobDeps):
    reminders = ReminderStore(deps.settings.table("club_equipment_reminders"), deps.clock)
    loans = LoanStore(deps.settings.table("club_equipment_loans"), deps.clock)
    changes = build_changelog(deps)
    return lambda ctx: send_equipment_reminders(reminders, loans, changes, ctx, deps.logger)
