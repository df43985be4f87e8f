"""Store of customer accounts and their one pending account operation.

    account_id (key) | status | email | display_name | pending_operation {operation_id, kind,
    new_email, requested_at, attempts} | deleted_at | recovery_due

An account operation (email change, deletion) needs the account provider and
sends a notification, so it runs only on an explicit request
(`account_operations.resume_account_operation`), never in a scheduled job.

Deletion removes the personal fields and sets `recovery_due`, which puts the
account in the sparse index `by_recovery` (recovery_due, deleted_at): financial
recovery then settles its payments and redacts its terminal orders, and
clears `recovery_due` when nothing is left, so the index holds open work only.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, index
from jobfence.dynamo import each_row, get_row, one_page, put_row, update_row
from jobfence.errors import StoreError
from jobs.commerce.catalog import ACCOUNTS_BY_RECOVERY as BY_RECOVERY

RECOVERY_DUE = "due"


class AccountStatus(str, enum.Enum):
    """Lifecycle of an account."""

    ACTIVE = "active"  # signed up; a deletion request moves it to deletion_pending
    DELETION_PENDING = "deletion_pending"  # the customer asked; resume_account_operation deletes it at the provider
    DELETED = "deleted"  # terminal: resume_account_operation finished the deletion; personal fields gone


class OperationKind(str, enum.Enum):
    """Account operations that need the account provider."""

    EMAIL_CHANGE = "email_change"
    DELETION = "deletion"


class AccountOperationGone(StoreError):
    """The pending operation was completed or replaced since it was read."""

    def __init__(self, account_id: str) -> None:
        super().__init__(f"account {account_id}: the pending operation is no longer the one requested")


class _PendingOperation(MapAttribute):
    operation_id = UnicodeAttribute()
    kind = UnicodeAttribute()
    new_email = UnicodeAttribute(null=True)
    requested_at = NumberAttribute()
    attempts = NumberAttribute(default=0)


class _Account(Model):
    class Meta:
        table_name = "unbound"

    account_id = UnicodeAttribute(hash_key=True)
    status = UnicodeAttribute()
    email = UnicodeAttribute(null=True)
    display_name = UnicodeAttribute(null=True)
    pending_operation = _PendingOperation(null=True)
    deleted_at = NumberAttribute(null=True)
    recovery_due = UnicodeAttribute(null=True)
    updated_at = NumberAttribute()
    by_recovery = index(BY_RECOVERY)


class AccountStore(ModelStore):
    """Accounts: read, request and complete account operations, track deleted-account recovery."""

    _model_class = _Account

    def create(self, account_id: str, email: str, display_name: str = "") -> None:
        put_row(
            self._model(
                account_id,
                status=AccountStatus.ACTIVE.value,
                email=email,
                display_name=display_name or None,
                updated_at=self._clock.now_ms(),
            ),
            self._model.account_id.does_not_exist(),
            f"creating account {account_id}",
        ).or_raise()

    def get(self, account_id: str) -> Any | None:
        return get_row(self._model, account_id, what="reading a row of accounts")

    def deleted(self, account_ids: Iterable[str]) -> set[str]:
        """The ids, among `account_ids`, of existing accounts that are deleted (one BatchGetItem per 100 ids)."""
        ids = sorted(set(account_ids))
        found = self._model.batch_get(ids, attributes_to_get=["account_id", "status"])
        return {
            row.account_id
            for row in each_row(found, "reading account statuses")
            if row.status == AccountStatus.DELETED.value
        }

    def request_operation(
        self, account_id: str, operation_id: str, kind: OperationKind, new_email: str | None = None
    ) -> None:
        """The API records a pending operation (deletion also moves the account to deletion_pending)."""
        model = self._model
        now = self._clock.now_ms()
        actions = [
            model.pending_operation.set(
                _PendingOperation(
                    operation_id=operation_id, kind=kind.value, new_email=new_email, requested_at=now, attempts=0
                )
            ),
            model.updated_at.set(now),
        ]
        if kind is OperationKind.DELETION:
            actions.append(model.status.set(AccountStatus.DELETION_PENDING.value))
        update_row(
            model(account_id),
            actions,
            model.status.is_in(AccountStatus.ACTIVE.value, AccountStatus.DELETION_PENDING.value),
            f"requesting an operation on account {account_id}",
        ).or_raise()

    def note_attempt(self, account_id: str, operation_id: str, attempts_read: int) -> None:
        """Count one provider attempt of the pending operation, over the count read (`attempts_read`).

        Conditioned on that count, not added: a copy re-sent after a lost reply is
        refused by its own first application and read as counted from the old
        image (so is a concurrent resume of the same operation that counted it
        first); a replaced operation raises `AccountOperationGone`.
        """
        model = self._model

        def ours(seen: Mapping[str, Any]) -> bool:  # our own count, its reply lost, or a later one of this op
            pending = seen.get("pending_operation") or {}
            return pending.get("operation_id") == operation_id and int(pending.get("attempts", 0)) > attempts_read

        counted = update_row(
            model(account_id),
            [model.pending_operation.attempts.set(attempts_read + 1)],
            (model.pending_operation.operation_id == operation_id)
            & (model.pending_operation.attempts == attempts_read),
            f"counting an attempt on account {account_id}",
            ours=ours,
        )
        if not counted.applied:
            raise AccountOperationGone(account_id)

    def complete_email_change(self, account_id: str, operation_id: str, new_email: str) -> None:
        model = self._model
        changed = update_row(
            model(account_id),
            [model.email.set(new_email), model.pending_operation.remove(), model.updated_at.set(self._clock.now_ms())],
            model.pending_operation.operation_id == operation_id,
            f"completing the email change of account {account_id}",
        )
        if not changed.applied:
            raise AccountOperationGone(account_id)

    def complete_deletion(self, account_id: str, operation_id: str) -> None:
        """deletion_pending -> deleted: personal fields removed, deleted-account recovery becomes due."""
        model = self._model
        now = self._clock.now_ms()
        deleted = update_row(
            model(account_id),
            [
                model.status.set(AccountStatus.DELETED.value),
                model.email.remove(),
                model.display_name.remove(),
                model.pending_operation.remove(),
                model.deleted_at.set(now),
                model.recovery_due.set(RECOVERY_DUE),
                model.updated_at.set(now),
            ],
            (model.pending_operation.operation_id == operation_id)
            & (model.status == AccountStatus.DELETION_PENDING.value),
            f"completing the deletion of account {account_id}",
        )
        if not deleted.applied:
            raise AccountOperationGone(account_id)

    def recovery_due(self, limit: int, after: dict[str, Any] | None = None) -> tuple[list[str], dict[str, Any] | None]:
        """Up to `limit` deleted accounts with open recovery, and a cursor for the next page."""
        found, cursor = one_page(
            self._model.by_recovery.query(RECOVERY_DUE, limit=limit, last_evaluated_key=after),
            "querying accounts due for recovery",
        )
        return [row.account_id for row in found], cursor

    def clear_recovery(self, account_id: str) -> bool:
        """Deleted-account recovery is complete: leave the index (False if already cleared)."""
        model = self._model
        return update_row(
            model(account_id),
            [model.recovery_due.remove()],
            model.recovery_due.exists() & (model.status == AccountStatus.DELETED.value),
            f"clearing recovery of account {account_id}",
        ).applied
