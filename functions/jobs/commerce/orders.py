"""Store of orders: their status machine, cancellation, and redaction of personal fields.

    order_id (key) | account_id | status | amount_cents | currency | sale_ref | capture_ref
    | customer_name | customer_email | shipping_address | created_at | updated_at | redacted_at

Indexes: `by_status` (status, updated_at) finds orders waiting in one state
(cancellation_pending) without a scan; `by_account` (account_id, created_at)
lists one account's orders for redaction after the account is deleted.
Redaction removes the personal fields only; amounts and references stay, so
payment records remain intact.
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
from jobfence.transaction import Write, update_write
from jobs.commerce.catalog import ORDERS_BY_ACCOUNT as BY_ACCOUNT
from jobs.commerce.catalog import ORDERS_BY_STATUS as BY_STATUS


class OrderStatus(str, enum.Enum):
    """Where an order is. Terminal: cancelled, fulfilled, refunded."""

    PLACED = "placed"  # checkout created it; the buyer's capture moves it to paid
    PAID = "paid"  # captured; fulfilment moves it to fulfilled, a cancel request to cancellation_pending
    CANCELLATION_PENDING = (
        "cancellation_pending"  # the API accepted a cancel; recover_pending_cancellations completes it
    )
    CANCELLED = "cancelled"  # terminal: recover_pending_cancellations (or the request itself) finished the cancel
    FULFILLED = "fulfilled"  # terminal: fulfilment shipped it
    REFUNDED = "refunded"  # terminal: a full return was paid back


TERMINAL = frozenset({OrderStatus.CANCELLED, OrderStatus.FULFILLED, OrderStatus.REFUNDED})
PERSONAL_FIELDS = ("customer_name", "customer_email", "shipping_address")


class UnknownOrderState(StoreError):
    """An order row whose status is not an `OrderStatus` (bad data; the row is left as it is)."""


class _Order(Model):
    class Meta:
        table_name = "unbound"

    order_id = UnicodeAttribute(hash_key=True)
    account_id = UnicodeAttribute()
    status = UnicodeAttribute()
    amount_cents = NumberAttribute()
    currency = UnicodeAttribute()
    sale_ref = UnicodeAttribute(null=True)
    capture_ref = UnicodeAttribute(null=True)
    customer_name = UnicodeAttribute(null=True)
    customer_email = UnicodeAttribute(null=True)
    shipping_address = UnicodeAttribute(null=True)
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    cancelled_at = NumberAttribute(null=True)
    redacted_at = NumberAttribute(null=True)
    by_status = index(BY_STATUS)
    by_account = index(BY_ACCOUNT)


@dataclass(frozen=True)
class Order:
    """One order as read, built by the store from its row."""

    order_id: str
    account_id: str
    status: OrderStatus | None  # None: a status outside the enum (bad data: `status_of` raises on it)
    amount_cents: int
    currency: str
    sale_ref: str | None
    capture_ref: str | None
    customer_name: str | None
    customer_email: str | None
    shipping_address: str | None
    created_at: int
    updated_at: int
    cancelled_at: int | None
    redacted_at: int | None


def _number(value: float | None) -> int | None:
    return None if value is None else int(value)


def _order(row: _Order) -> Order:
    try:
        status: OrderStatus | None = OrderStatus(row.status)
    except ValueError:
        status = None
    return Order(
        order_id=row.order_id,
        account_id=row.account_id,
        status=status,
        amount_cents=int(row.amount_cents),
        currency=row.currency,
        sale_ref=row.sale_ref,
        capture_ref=row.capture_ref,
        customer_name=row.customer_name,
        customer_email=row.customer_email,
        shipping_address=row.shipping_address,
        created_at=int(row.created_at),
        updated_at=int(row.updated_at),
        cancelled_at=_number(row.cancelled_at),
        redacted_at=_number(row.redacted_at),
    )


def status_of(order: Order) -> OrderStatus:
    """The order's status, or `UnknownOrderState` naming the order (not its data)."""
    if order.status is None:
        raise UnknownOrderState(f"order {order.order_id} is in an unknown state")
    return order.status


class OrderStore(ModelStore):
    """Orders: create, read, find pending cancellations, cancel (fenced), redact."""

    _model_class = _Order

    def create(
        self, order_id: str, account_id: str, amount_cents: int, currency: str, status: str = "placed", **fields: Any
    ) -> None:
        """Write an order (the API's checkout path; also test and demo seeding)."""
        now = self._clock.now_ms()
        row = self._model(
            order_id,
            account_id=account_id,
            status=status,
            amount_cents=amount_cents,
            currency=currency,
            created_at=fields.pop("created_at", now),
            updated_at=fields.pop("updated_at", now),
            **fields,
        )
        put_row(row, None, f"creating order {order_id}")

    def get(self, order_id: str) -> Order | None:
        row = get_row(self._model, order_id, what="reading a row of orders")
        return None if row is None else _order(row)

    def pending_cancellations(self, older_than: int, limit: int) -> list[Order]:
        """Orders waiting in cancellation_pending since before `older_than` (oldest first)."""
        query = self._model.by_status.query(
            OrderStatus.CANCELLATION_PENDING.value, self._model.updated_at < older_than, limit=limit
        )
        return [_order(row) for row in each_row(query, "querying orders pending cancellation")]

    def cancel_op(self, row: Order) -> Write:
        """A fenced `Write`: cancellation_pending -> cancelled, only if still pending."""
        m = self._model
        now = self._clock.now_ms()
        actions = [m.status.set(OrderStatus.CANCELLED.value), m.updated_at.set(now), m.cancelled_at.set(now)]
        return update_write(m(row.order_id), actions, m.status == OrderStatus.CANCELLATION_PENDING.value)

    def of_account(self, account_id: str, limit: int) -> list[Order]:
        """Up to `limit` orders of one account."""
        return [
            _order(row)
            for row in each_row(
                self._model.by_account.query(account_id, limit=limit), f"querying the orders of account {account_id}"
            )
        ]

    def redact(self, row: Order) -> bool:
        """Remove the personal fields of a terminal order; False if already redacted (idempotent).

        Raises `UnknownOrderState` for a status outside the enum, and refuses
        (False) a non-terminal order: its customer may still need the address.
        """
        status = status_of(row)
        if status not in TERMINAL:
            return False
        model = self._model
        return update_row(
            model(row.order_id),
            [model.redacted_at.set(self._clock.now_ms()), *(getattr(model, f).remove() for f in PERSONAL_FIELDS)],
            model.status.is_in(*(s.value for s in TERMINAL)) & model.redacted_at.does_not_exist(),
            f"redacting order {row.order_id}",
        ).applied

    def request_cancellation(self, order_id: str) -> None:
        """The API's cancel request: paid/placed -> cancellation_pending (refreshes updated_at)."""
        model = self._model
        update_row(
            model(order_id),
            [
                model.status.set(OrderStatus.CANCELLATION_PENDING.value),
                model.updated_at.set(self._clock.now_ms()),
            ],
            model.status.is_in(OrderStatus.PLACED.value, OrderStatus.PAID.value),
            f"requesting cancellation of order {order_id}",
        ).or_raise()
