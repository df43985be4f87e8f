"""Store of financial operations: charges and returns, with retry state and a stable idempotency key.

    operation_id (key) | account_id | order_id | kind | target_ref | amount_cents | currency
    | initiator | idempotency_key | status | attempts | due_at | result_ref | last_error
    | created_at | updated_at | claimed_at | claimed_by (run id of the recovery run that claimed it)

`idempotency_key` is fixed when the operation is created, namespaced by who
initiated it (`buyer:<op>`, `cancel:<order>`, `operator:<op>`), and every retry
sends that same key, so the provider answers a repeat with the first result.

Timeline of one operation (the sparse index `by_due` (status, due_at) holds
only non-terminal rows, so recovery reads grow with open work, not history):

    t0          created       status=pending, due_at=t0+15 min (the request path is still working on it)
    (pending)   request path  may void it or amend its amount (both need status = pending; they refresh
                              updated_at)
    t0+15 min   recovery      claim: pending|retry_scheduled -> in_progress, conditioned on the status,
                              attempts and updated_at it read (a change since refuses it: no provider
                              call), due_at = claim time; then the provider call with the stable key
                  ok ──────► succeeded        (due_at removed: leaves the index)
                  already captured under another key ─► succeeded (reconciled)
                  declined / not capturable ─► failed   (due_at removed)
                  unknown (timeout, lost reply) ─► retry_scheduled, attempts+1, due_at=now+backoff;
                              the next claim re-sends the same key, which the provider answers with
                              its first result. No attempts cap: an operation whose money may have
                              moved is never given up as failed (operators watch `attempts`)
                  crash or store error between claim and settle ─► stays in_progress; every
                              recovery run first resumes in_progress rows with the same key
    (account deleted)  a charge recovery never sent (attempts = 0, not in_progress) ─► voided, no
                              provider call

The request path's changes need `pending`, so once recovery has claimed an
operation its target, amount and key are frozen: every provider call of
recovery acts on the row as it claimed it. Every settlement is conditioned on
the status and attempts the caller read (in_progress after a claim), so two
overlapping runs cannot both apply an outcome.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, index
from jobfence.dynamo import each_row, get_row, put_row, update_row
from jobfence.errors import StoreError
from jobfence.transaction import Write, save_write, update_write
from jobs.commerce.catalog import OPERATIONS_BY_ACCOUNT as BY_ACCOUNT
from jobs.commerce.catalog import OPERATIONS_BY_DUE as BY_DUE

PENDING_GRACE_MS = 15 * 60_000  # the request path owns a fresh operation this long
RETRY_BASE_MS = 5 * 60_000
RETRY_MAX_MS = 6 * 3_600_000


class OperationKind(str, enum.Enum):
    """What an operation does at the provider."""

    CHARGE = "charge"  # capture an approved order
    RETURN = "return"  # refund (part of) a capture


class OperationStatus(str, enum.Enum):
    """Where an operation is. Terminal: succeeded, failed, voided."""

    PENDING = (
        "pending"  # created by the request path (which may void or amend it); recovery claims it after the grace period
    )
    IN_PROGRESS = (
        "in_progress"  # recovery claimed it (frozen) and calls the provider; recovery settles it, now or later
    )
    RETRY_SCHEDULED = (
        "retry_scheduled"  # recovery's call had an unknown outcome; recovery claims it again at due_at, same key
    )
    SUCCEEDED = "succeeded"  # terminal: the provider confirmed it (request path or recovery)
    FAILED = "failed"  # terminal: declined / not capturable / attempts cap (recovery); only operators act on it
    VOIDED = "voided"  # terminal: recovery dropped a deleted account's uncaptured charge (no money moved)


TERMINAL = frozenset({OperationStatus.SUCCEEDED, OperationStatus.FAILED, OperationStatus.VOIDED})


def retry_delay_ms(attempts: int) -> int:
    """Back-off before the next attempt: 5 min doubling, at most 6 h."""
    return min(RETRY_BASE_MS * 2 ** max(attempts - 1, 0), RETRY_MAX_MS)


class _Operation(Model):
    class Meta:
        table_name = "unbound"

    operation_id = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    order_id = UnicodeAttribute(null=True)
    kind = UnicodeAttribute()
    target_ref = UnicodeAttribute(null=True)
    amount_cents = NumberAttribute()
    currency = UnicodeAttribute()
    initiator = UnicodeAttribute()
    idempotency_key = UnicodeAttribute()
    status = UnicodeAttribute()
    attempts = NumberAttribute(default=0)
    due_at = NumberAttribute(null=True)
    result_ref = UnicodeAttribute(null=True)
    last_error = UnicodeAttribute(null=True)
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    claimed_at = NumberAttribute(null=True)
    claimed_by = UnicodeAttribute(null=True)
    by_due = index(BY_DUE)
    by_account = index(BY_ACCOUNT)


class UnknownOperationState(StoreError):
    """An operation row whose status is not an `OperationStatus` (bad data; the row is left as it is)."""


@dataclass(frozen=True)
class Operation:
    """One operation as read (what recovery decides on), built by the store from its row."""

    operation_id: str
    account_id: str
    order_id: str | None
    kind: OperationKind | None  # None: a kind this code does not know (recovery settles it `failed`, invalid)
    target_ref: str | None
    amount_cents: int
    currency: str
    idempotency_key: str
    status: OperationStatus
    attempts: int  # provider calls recorded so far
    due_at: int | None  # absent once terminal (the row has left the `by_due` index)
    result_ref: str | None
    updated_at: int


def _operation(row: _Operation) -> Operation:
    try:
        status = OperationStatus(row.status)
    except ValueError:
        raise UnknownOperationState(f"operation {row.operation_id} is in an unknown state") from None
    try:
        kind: OperationKind | None = OperationKind(row.kind)
    except ValueError:
        kind = None
    return Operation(
        operation_id=row.operation_id,
        account_id=row.account_id,
        order_id=row.order_id,
        kind=kind,
        target_ref=row.target_ref,
        amount_cents=int(row.amount_cents),
        currency=row.currency,
        idempotency_key=row.idempotency_key,
        status=status,
        attempts=int(row.attempts or 0),
        due_at=None if row.due_at is None else int(row.due_at),
        result_ref=row.result_ref,
        updated_at=int(row.updated_at),
    )


def idempotency_key(initiator: str, operation_id: str) -> str:
    """The stable key of an operation, namespaced by who initiated it."""
    return f"{initiator}:{operation_id}"


class FinancialOperationStore(ModelStore):
    """Create operations, find due ones, settle them conditionally."""

    _model_class = _Operation

    def _new_row(
        self,
        operation_id: str,
        account_id: str,
        kind: OperationKind,
        target_ref: str | None,
        amount_cents: int,
        currency: str,
        initiator: str,
        order_id: str | None,
    ) -> _Operation:
        """The row of a new pending operation (absent attributes left out)."""
        now = self._clock.now_ms()
        item = {
            "operation_id": operation_id,
            "account_id": account_id,
            "order_id": order_id,
            "kind": kind.value,
            "target_ref": target_ref,
            "amount_cents": amount_cents,
            "currency": currency,
            "initiator": initiator,
            "idempotency_key": idempotency_key(initiator, operation_id),
            "status": OperationStatus.PENDING.value,
            "attempts": 0,
            "due_at": now + PENDING_GRACE_MS,
            "created_at": now,
            "updated_at": now,
        }
        return self._model(**{k: v for k, v in item.items() if v is not None})

    def create(
        self,
        operation_id: str,
        account_id: str,
        kind: OperationKind,
        target_ref: str | None,
        amount_cents: int,
        currency: str,
        initiator: str,
        order_id: str | None = None,
    ) -> bool:
        """Record a new pending operation; False if that id already exists (idempotent)."""
        row = self._new_row(operation_id, account_id, kind, target_ref, amount_cents, currency, initiator, order_id)
        return put_row(row, self._model.operation_id.does_not_exist(), f"creating operation {operation_id}").applied

    def create_op(
        self,
        operation_id: str,
        account_id: str,
        kind: OperationKind,
        target_ref: str | None,
        amount_cents: int,
        currency: str,
        initiator: str,
        order_id: str | None = None,
    ) -> Write:
        """A fenced `Write` creating a pending operation unless that id exists."""
        row = self._new_row(operation_id, account_id, kind, target_ref, amount_cents, currency, initiator, order_id)
        return save_write(row, self._model.operation_id.does_not_exist())

    def get(self, operation_id: str) -> Operation | None:
        """One operation, or None; `UnknownOperationState` for a status outside the enum."""
        row = get_row(self._model, operation_id, what="reading a row of financial_operations")
        return None if row is None else _operation(row)

    def due(self, status: OperationStatus, now: int, limit: int) -> list[Operation]:
        """Up to `limit` operations in `status` whose due time has come (oldest due first)."""
        query = self._model.by_due.query(status.value, self._model.due_at <= now, limit=limit)
        return [_operation(row) for row in each_row(query, f"querying {status.value} operations due")]

    def of_account(self, account_id: str, limit: int) -> list[Operation]:
        """Up to `limit` operations of one account (for deleted-account recovery).

        `UnknownOperationState` when one of them has a status outside the enum.
        """
        return [
            _operation(row)
            for row in each_row(
                self._model.by_account.query(account_id, limit=limit),
                f"querying the operations of account {account_id}",
            )
        ]

    def claim_op(self, row: Operation, run_id: str) -> Write:
        """A fenced `Write`: pending|retry_scheduled -> in_progress, only if nobody changed it since `row` was read.

        Conditioned on the status, attempts and `updated_at` read, so a request-path change
        after the read (a void, an amended amount) refuses it and the provider is not called.
        `due_at` becomes the claim time (the row stays in the sparse index, where a later run
        resumes it if this one dies); `claimed_by` lets a retried claim whose reply was lost
        recognise itself in the old image.
        """
        m = self._model
        now = self._clock.now_ms()
        actions = [
            m.status.set(OperationStatus.IN_PROGRESS.value),
            m.claimed_by.set(run_id),
            m.claimed_at.set(now),
            m.updated_at.set(now),
            m.due_at.set(now),
        ]
        condition = (m.status == row.status.value) & (m.attempts == row.attempts) & (m.updated_at == row.updated_at)
        return update_write(m(row.operation_id), actions, condition)

    def settle_op(
        self,
        row: Operation,
        status: OperationStatus,
        *,
        attempted: bool,
        claimed: bool = False,
        result_ref: str | None = None,
        error: str | None = None,
    ) -> Write:
        """A fenced `Write` moving an operation on, only if nobody moved it since `row` was read.

        `claimed`: the caller claimed `row` (so it is now `in_progress`, whatever status was read).
        `attempted` counts a provider call in `attempts`.
        """
        m = self._model
        now = self._clock.now_ms()
        attempts = row.attempts + (1 if attempted else 0)
        actions = [m.status.set(status.value), m.updated_at.set(now), m.attempts.set(attempts)]
        if status is OperationStatus.RETRY_SCHEDULED:
            actions.append(m.due_at.set(now + retry_delay_ms(attempts)))
        if result_ref is not None:
            actions.append(m.result_ref.set(result_ref))
        if error is not None:
            actions.append(m.last_error.set(error[:200]))
        if status in TERMINAL:
            actions.append(m.due_at.remove())  # terminal rows leave the sparse index
        seen_status = OperationStatus.IN_PROGRESS if claimed else row.status
        condition = (m.status == seen_status.value) & (m.attempts == row.attempts)
        return update_write(m(row.operation_id), actions, condition)

    # -- the request path's changes (unfenced: it holds no job lease) ------------------------

    def void(self, operation_id: str) -> bool:
        """The request path (or an operator) withdraws an operation recovery has not claimed: pending -> voided.

        False if it is not `pending` any more (recovery claimed it: its provider call may be under way).
        """
        model = self._model
        return self._request_change(
            operation_id,
            [
                model.status.set(OperationStatus.VOIDED.value),
                model.due_at.remove(),
            ],
            "voiding",
        )

    def amend_amount(self, operation_id: str, amount_cents: int) -> bool:
        """The request path changes the amount of an operation recovery has not claimed (still `pending`).

        False if recovery claimed it already: the amount its provider call uses is frozen.
        """
        model = self._model
        # the request path is working on it again: recovery leaves it alone for another grace period
        due = self._clock.now_ms() + PENDING_GRACE_MS
        return self._request_change(
            operation_id, [model.amount_cents.set(amount_cents), model.due_at.set(due)], "amending"
        )

    def _request_change(self, operation_id: str, actions: list[Any], what: str) -> bool:
        model = self._model
        return update_row(
            model(operation_id),
            [*actions, model.updated_at.set(self._clock.now_ms())],
            model.status == OperationStatus.PENDING.value,
            f"{what} operation {operation_id}",
        ).applied
