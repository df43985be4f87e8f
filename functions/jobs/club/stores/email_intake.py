"""Store of email intake records (`club_email_intake`): raw receipt emails waiting to be delivered.

    intake_id (key) | raw | spf | dkim | dmarc | status | attempts | next_attempt_at | retry_shard
    | last_error | receipt_id | received_at | finished_at

`spf`, `dkim`, `dmarc` are the receiving server's verdicts, stored with the
email; a record lacking them is quarantined like a failed one.

`retry_shard` exists only while the record is pending: the sparse index
`retry_due` (retry_shard, next_attempt_at) lists the records whose next attempt
is due. Every transition is conditioned on the status and attempt count read,
so a repeated or concurrent run moves a record once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, index
from jobfence.dynamo import get_row, put_row
from jobfence.transaction import Write, update_write
from jobs.club.catalog import RETRY_INDEX_SPEC
from jobs.club.email_auth import MISSING, MailVerdicts
from jobs.club.stores.due import due_rows, shard_of
from jobs.club.stores.states import RowRef, state_of

MAX_ERROR_CHARS = 300


class IntakeStatus(str, enum.Enum):
    """Lifecycle of an intake record."""

    PENDING = "pending"  # stored by the Email Worker; retried by retry_email_intake with back-off
    DELIVERED = "delivered"  # set by retry_email_intake once its receipt is recorded; terminal
    DEAD = "dead"  # set by retry_email_intake when the attempts cap is reached; terminal, reason kept
    QUARANTINED = "quarantined"  # set by retry_email_intake when the email is not authentic; terminal, kept


class _Intake(Model):
    class Meta:
        table_name = "unbound"

    intake_id = UnicodeAttribute(hash_key=True)
    raw = UnicodeAttribute()
    spf = UnicodeAttribute(null=True)
    dkim = UnicodeAttribute(null=True)
    dmarc = UnicodeAttribute(null=True)
    status = UnicodeAttribute()
    attempts = NumberAttribute(default=0)
    next_attempt_at = NumberAttribute()
    retry_shard = UnicodeAttribute(null=True)
    last_error = UnicodeAttribute(null=True)
    receipt_id = UnicodeAttribute(null=True)
    received_at = NumberAttribute()
    finished_at = NumberAttribute(null=True)
    retry_due = index(RETRY_INDEX_SPEC)


@dataclass(frozen=True)
class EmailIntake:
    """One intake record as read, built by the store from its row."""

    intake_id: str
    raw: str
    verdicts: MailVerdicts  # the receiving server's, MISSING where none was stored
    status: IntakeStatus
    attempts: int  # parse attempts so far (every transition is conditioned on the count read)
    next_attempt_at: int
    last_error: str | None
    receipt_id: str | None


def _intake(row: _Intake) -> EmailIntake:
    return EmailIntake(
        intake_id=row.intake_id,
        raw=row.raw,
        verdicts=MailVerdicts(row.spf or MISSING, row.dkim or MISSING, row.dmarc or MISSING),
        status=state_of(IntakeStatus, row.status, RowRef("club_email_intake", row.intake_id), "status"),
        attempts=int(row.attempts or 0),
        next_attempt_at=int(row.next_attempt_at),
        last_error=row.last_error,
        receipt_id=row.receipt_id,
    )


class EmailIntakeStore(ModelStore):
    """Store intake records, find due ones, build their transitions."""

    _model_class = _Intake

    def put(self, intake_id: str, raw: str, verdicts: MailVerdicts) -> None:
        """Store a received email and its authentication verdicts for its first attempt now."""
        now = self._clock.now_ms()
        put_row(
            self._model(
                intake_id,
                raw=raw,
                spf=verdicts.spf,
                dkim=verdicts.dkim,
                dmarc=verdicts.dmarc,
                status=IntakeStatus.PENDING.value,
                attempts=0,
                next_attempt_at=now,
                retry_shard=shard_of(intake_id),
                received_at=now,
            ),
            self._model.intake_id.does_not_exist(),
            f"storing intake {intake_id}",
        ).or_raise()

    def get(self, intake_id: str) -> EmailIntake | None:
        row = get_row(self._model, intake_id, what="reading a row of email_intake")
        return None if row is None else _intake(row)

    def due(self, now_ms: int, limit: int) -> list[str]:
        """Ids of pending records whose next attempt is due (from the sparse index; may be stale)."""
        return [r.intake_id for r in due_rows(self._model.retry_due, self._model.next_attempt_at, now_ms, limit)]

    def _guard(self, row: EmailIntake, now_ms: int):
        m = self._model
        return (m.status == IntakeStatus.PENDING.value) & (m.attempts == row.attempts) & (m.next_attempt_at <= now_ms)

    def delivered_op(self, row: EmailIntake, receipt_id: str, now_ms: int) -> Write:
        m = self._model
        actions = [
            m.status.set(IntakeStatus.DELIVERED.value),
            m.attempts.set(row.attempts + 1),
            m.receipt_id.set(receipt_id),
            m.finished_at.set(now_ms),
            m.retry_shard.remove(),
        ]
        return update_write(m(row.intake_id), actions, self._guard(row, now_ms))

    def retry_op(self, row: EmailIntake, error: str, next_attempt_at: int, now_ms: int) -> Write:
        m = self._model
        actions = [
            m.attempts.set(row.attempts + 1),
            m.next_attempt_at.set(next_attempt_at),
            m.last_error.set(error[:MAX_ERROR_CHARS]),
        ]
        return update_write(m(row.intake_id), actions, self._guard(row, now_ms))

    def quarantined_op(self, row: EmailIntake, reason: str, now_ms: int) -> Write:
        """Terminal, without an attempt: the email is kept with the reason and never parsed."""
        m = self._model
        actions = [
            m.status.set(IntakeStatus.QUARANTINED.value),
            m.last_error.set(reason[:MAX_ERROR_CHARS]),
            m.finished_at.set(now_ms),
            m.retry_shard.remove(),
        ]
        return update_write(m(row.intake_id), actions, self._guard(row, now_ms))

    def dead_op(self, row: EmailIntake, error: str, now_ms: int) -> Write:
        m = self._model
        actions = [
            m.status.set(IntakeStatus.DEAD.value),
            m.attempts.set(row.attempts + 1),
            m.last_error.set(error[:MAX_ERROR_CHARS]),
            m.finished_at.set(now_ms),
            m.retry_shard.remove(),
        ]
        return update_write(m(row.intake_id), actions, self._guard(row, now_ms))
