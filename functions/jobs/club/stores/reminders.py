"""Store of equipment reminders (`club_equipment_reminders`): who to remind of which loan, when.

    reminder_id (key) | loan_id | due_at | recipient_kind | recipient_user_id | state | due_shard | sent_at | sent_by

`due_shard` exists only while the reminder is pending: the sparse index
`due_reminders` (due_shard, due_at) finds due reminders without reading sent
ones. The send is claimed by the conditional update pending -> sent, in the
same transaction as its notification event, so exactly one run ever sends it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, index
from jobfence.dynamo import get_row, put_row
from jobfence.transaction import Write, update_write
from jobs.club.catalog import DUE_INDEX_SPEC
from jobs.club.stores.due import due_rows, shard_of
from jobs.club.stores.states import RowRef, state_of


class ReminderState(str, enum.Enum):
    """Lifecycle of one reminder."""

    PENDING = "pending"  # created with the loan; waits for due_at
    SENT = "sent"  # claimed by send_equipment_reminders together with its notification event; terminal
    CANCELLED = "cancelled"  # set by send_equipment_reminders when the item came back first; terminal


class Recipient(str, enum.Enum):
    MEMBER = "member"
    STAFF = "staff"


class _Reminder(Model):
    class Meta:
        table_name = "unbound"

    reminder_id = UnicodeAttribute(hash_key=True)
    loan_id = UnicodeAttribute()
    due_at = NumberAttribute()
    recipient_kind = UnicodeAttribute()
    recipient_user_id = UnicodeAttribute()
    state = UnicodeAttribute()
    due_shard = UnicodeAttribute(null=True)
    sent_at = NumberAttribute(null=True)
    sent_by = UnicodeAttribute(null=True)
    due_reminders = index(DUE_INDEX_SPEC)


@dataclass(frozen=True)
class Reminder:
    """One reminder as read, built by the store from its row."""

    reminder_id: str
    loan_id: str
    due_at: int
    recipient_kind: Recipient
    recipient_user_id: str
    state: ReminderState


def _reminder(row: _Reminder) -> Reminder:
    where = RowRef("club_equipment_reminders", row.reminder_id)
    return Reminder(
        reminder_id=row.reminder_id,
        loan_id=row.loan_id,
        due_at=int(row.due_at),
        recipient_kind=state_of(Recipient, row.recipient_kind, where, "recipient_kind"),
        recipient_user_id=row.recipient_user_id,
        state=state_of(ReminderState, row.state, where, "state"),
    )


class ReminderStore(ModelStore):
    """Find due reminders and build the claim of each send."""

    _model_class = _Reminder

    def put(self, reminder_id: str, loan_id: str, due_at: int, recipient: Recipient, recipient_user_id: str) -> None:
        put_row(
            self._model(
                reminder_id,
                loan_id=loan_id,
                due_at=due_at,
                recipient_kind=Recipient(recipient).value,
                recipient_user_id=recipient_user_id,
                state=ReminderState.PENDING.value,
                due_shard=shard_of(reminder_id),
            ),
            None,
            f"recording reminder {reminder_id}",
        )

    def get(self, reminder_id: str) -> Reminder | None:
        row = get_row(self._model, reminder_id, what="reading a row of reminders")
        return None if row is None else _reminder(row)

    def due(self, now_ms: int, limit: int) -> list[str]:
        """Ids of pending reminders due now (from the sparse index; may be stale)."""
        return [r.reminder_id for r in due_rows(self._model.due_reminders, self._model.due_at, now_ms, limit)]

    def finish_op(self, reminder_id: str, to: ReminderState, run_id: str) -> Write:
        """Claim a due pending reminder for `to` (sent or cancelled); refused if anyone claimed it first."""
        m = self._model
        now = self._clock.now_ms()
        actions = [m.state.set(to.value), m.sent_at.set(now), m.sent_by.set(run_id), m.due_shard.remove()]
        condition = (m.state == ReminderState.PENDING.value) & (m.due_at <= now)
        return update_write(m(reminder_id), actions, condition)
