"""The offline fakes of the account ports (`providers.accounts`): idempotent by key, every call counted."""

from __future__ import annotations

import threading

from providers.errors import ProviderAmbiguous


class FakeAccountProvider:
    """In-memory account provider: idempotent by key, counts calls, can fail the next n calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.deleted: set[str] = set()
        self.emails: dict[str, str] = {}
        self._done: set[str] = set()
        self._fail = 0
        self._lock = threading.Lock()

    def fail_next(self, n: int = 1) -> None:
        with self._lock:
            self._fail += n

    def change_email(self, account_id: str, new_email: str, idempotency_key: str) -> None:
        self._call("change_email", account_id, idempotency_key)
        self.emails[account_id] = new_email

    def delete_account(self, account_id: str, idempotency_key: str) -> None:
        self._call("delete_account", account_id, idempotency_key)
        self.deleted.add(account_id)

    def _call(self, what: str, account_id: str, key: str) -> None:
        with self._lock:
            self.calls.append((what, account_id, key))
            if self._fail:
                self._fail -= 1
                raise ProviderAmbiguous(f"accounts: failed for {account_id}", provider="accounts")
            self._done.add(key)


class FakeAccountNotifier:
    """In-memory notifier: delivers a key once, counts calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.delivered: dict[str, tuple[str, str]] = {}

    def notify(self, account_id: str, notice: str, idempotency_key: str) -> None:
        self.calls.append((account_id, notice, idempotency_key))
        self.delivered.setdefault(idempotency_key, (account_id, notice))
