"""Resuming a pending account operation: only on an explicit request, never in a scheduled job.

Seed 000: account email and deletion provider work and notification delivery
do not run in cron. A pending operation resumes only through the customer's
explicit retry on the signed-out status page or the operator recovery
endpoint, both of which call `resume_account_operation(account, requested_by)`.

Authority is checked here, per operation: a customer may resume only their own
account's operation; an operator needs the `account_recovery` role. The
provider call carries the operation id as idempotency key, so a retry after a
lost answer is harmless; the account row is then completed under the condition
that the same operation is still pending, and the notice is sent last, with
the same key.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from jobfence.errors import JobfenceError
from jobs.commerce.accounts import AccountStore, OperationKind
from providers.accounts import AccountNotifier, AccountProvider
from providers.errors import ProviderError

RECOVERY_ROLE = "account_recovery"


class RequesterKind(str, enum.Enum):
    CUSTOMER = "customer"  # the signed-out status page's retry button
    OPERATOR = "operator"  # the operator recovery endpoint


@dataclass(frozen=True)
class Requester:
    """Who asks, as authenticated by the API (subject = account id for customers)."""

    kind: RequesterKind
    subject: str
    roles: frozenset[str] = field(default_factory=frozenset)


class NotAuthorized(JobfenceError):
    """The requester may not resume this account's operation."""


class NothingPending(JobfenceError):
    """The account has no pending operation (already completed, or never requested)."""


class AccountOperationFailed(JobfenceError):
    """The provider failed; the operation stays pending for another explicit retry."""


class AccountOperations:
    """The explicit-request path for account operations (the API composes it; no job does)."""

    def __init__(self, accounts: AccountStore, provider: AccountProvider, notifier: AccountNotifier) -> None:
        self._accounts = accounts
        self._provider = provider
        self._notifier = notifier

    def resume_account_operation(self, account: str, requested_by: Requester) -> str:
        """Resume `account`'s pending operation for `requested_by`; return the kind completed."""
        self._authorize(account, requested_by)
        row = self._accounts.get(account)
        pending = row.pending_operation if row is not None else None
        if pending is None:
            raise NothingPending(f"account {account} has no pending operation")
        kind = OperationKind(pending.kind)
        op_id = pending.operation_id
        self._accounts.note_attempt(account, op_id, int(pending.attempts or 0))
        try:
            if kind is OperationKind.DELETION:
                self._provider.delete_account(account, idempotency_key=op_id)
            else:
                self._provider.change_email(account, pending.new_email, idempotency_key=op_id)
        except ProviderError as exc:
            raise AccountOperationFailed(f"account {account}: {kind.value} is still pending") from exc
        if kind is OperationKind.DELETION:
            self._accounts.complete_deletion(account, op_id)
        else:
            self._accounts.complete_email_change(account, op_id, pending.new_email)
        self._notifier.notify(account, f"{kind.value}_completed", idempotency_key=op_id)
        return kind.value

    @staticmethod
    def _authorize(account: str, requested_by: Requester) -> None:
        if requested_by.kind is RequesterKind.CUSTOMER and requested_by.subject == account:
            return
        if requested_by.kind is RequesterKind.OPERATOR and RECOVERY_ROLE in requested_by.roles:
            return
        raise NotAuthorized(f"{requested_by.kind.value} {requested_by.subject} may not resume account {account}")
