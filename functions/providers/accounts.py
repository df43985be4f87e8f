"""Ports for account work that only explicit requests may do: the account provider and notices.

`AccountProvider` changes a customer's email and deletes the account at the
identity provider; `AccountNotifier` tells the customer it happened. Both carry
the operation id as idempotency key. No scheduled job is given either port
(seed 000: account provider work and notification delivery never run in cron);
`jobs.commerce.account_operations.resume_account_operation` is their only caller.

A failed call raises the providers' one vocabulary (`providers.errors`); the
offline fakes (`providers.accounts_fake`) model idempotency (a repeated key returns the
first result) and count every call, so tests can prove who called them.
"""

from __future__ import annotations

from typing import Protocol


class AccountProvider(Protocol):
    def change_email(self, account_id: str, new_email: str, idempotency_key: str) -> None: ...

    def delete_account(self, account_id: str, idempotency_key: str) -> None: ...


class AccountNotifier(Protocol):
    def notify(self, account_id: str, notice: str, idempotency_key: str) -> None: ...
