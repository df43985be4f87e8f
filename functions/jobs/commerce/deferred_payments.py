"""Store of deferred payment intents (seed 001): approved PayPal orders not captured yet.

    intent_id (key) | sale_ref (PayPal order id) | account_id | amount_cents | currency | status
    | updated_at | created_at | captured_by | capture_ref | capture_attempts | last_error
    | claimed_at | claimed_by (run id of the safety net run that claimed it)
    | upsell_ids (the request ids of the upsells added, a string set)

Checkout leaves an intent `deferred` so a post-purchase upsell can be added
before anything is charged; every accepted upsell patch refreshes `updated_at`.
An upsell adds to the amount, so it carries its own request id: the patch is
refused once that id is in `upsell_ids`, and a re-sent copy (a lost reply that
botocore re-sends, or the buyer's client asking again) is read as applied from
the refusal's old image instead of adding twice.
So "not updated for 20 minutes" means "this buyer is not in the upsell flow any
more", and the safety net finds those through the index `by_status_updated`
(status, updated_at): `status = deferred AND updated_at < cutoff`, a bounded
query, never a scan. A failed capture attempt never touches `updated_at`
(it is the buyer's activity signal, not ours).

The safety net claims an intent before it calls the provider (timeline):

    deferred ──claim: status = deferred AND updated_at = <the value it read>──► capturing
        (a buyer's upsell after the read changed updated_at: the claim is refused, nothing is captured;
         a buyer's upsell after the claim is refused: patches need status = deferred)
    capturing ──provider captured under safetynet:<id>──► captured (captured_by = safetynet)
    capturing ──provider: captured under another key──► captured (captured_by = buyer)
    capturing ──decline / not capturable──► capture_failed
    capturing ──outcome unknown (timeout, lost reply, crash) or refused for now (credentials)──►
        stays capturing, `capture_attempts` + 1; every later tick calls the provider again with
        the same key, which answers with the first result. There is no attempts cap here: an
        intent whose capture may have happened is never given up as failed (operators watch
        `capture_attempts` and the error log instead)

So money only moves on an amount the buyer can no longer change, and at most
once per order (one key per initiator, the provider's own state machine between them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, index
from jobfence.dynamo import get_row, one_page, put_row, update_row
from jobfence.errors import StoreError
from jobfence.transaction import Write, update_write
from jobs.commerce.catalog import DEFERRED_BY_STATUS_UPDATED as BY_STATUS_UPDATED


class DeferredStatus(str, enum.Enum):
    """Lifecycle of a deferred intent."""

    DEFERRED = (
        "deferred"  # checkout approved it uncaptured; the buyer's final capture or the safety net's claim moves it on
    )
    CAPTURING = (
        "capturing"  # the safety net claimed it (amount frozen); the safety net settles it, this tick or a later one
    )
    CAPTURED = "captured"  # terminal: captured by the buyer's path or the safety net (captured_by says which)
    CAPTURE_FAILED = "capture_failed"  # terminal: the provider refused the capture for good; operators follow up


class Initiator(str, enum.Enum):
    """Who captured: also the namespace of the idempotency key (seed 001)."""

    BUYER = "buyer"
    SAFETY_NET = "safetynet"


def capture_key(initiator: Initiator, intent_id: str) -> str:
    """`buyer:<id>` or `safetynet:<id>`: distinct keys, so a race fails on the provider's state machine."""
    return f"{initiator.value}:{intent_id}"


class _Intent(Model):
    class Meta:
        table_name = "unbound"

    intent_id = UnicodeAttribute(hash_key=True)
    sale_ref = UnicodeAttribute(null=True)
    account_id = UnicodeAttribute(null=True)
    amount_cents = NumberAttribute()
    currency = UnicodeAttribute()
    status = UnicodeAttribute()
    created_at = NumberAttribute()
    updated_at = NumberAttribute()
    captured_by = UnicodeAttribute(null=True)
    capture_ref = UnicodeAttribute(null=True)
    capture_attempts = NumberAttribute(default=0)
    last_error = UnicodeAttribute(null=True)
    claimed_at = NumberAttribute(null=True)
    claimed_by = UnicodeAttribute(null=True)
    upsell_ids = UnicodeSetAttribute(null=True)
    captured_cents = NumberAttribute(null=True)  # what PayPal captured (an upsell it never got: below amount_cents)
    by_status_updated = index(BY_STATUS_UPDATED)


class UnknownIntentState(StoreError):
    """An intent row whose status or `captured_by` is outside its enum (bad data; the row is left as it is)."""


@dataclass(frozen=True)
class DeferredIntent:
    """One intent as read (what the safety net decides on), built by the store from its row."""

    intent_id: str
    sale_ref: str | None
    account_id: str | None
    amount_cents: int  # what the buyer approved, upsells included
    currency: str
    status: DeferredStatus
    updated_at: int  # the buyer's activity stamp (a claim is conditioned on it)
    captured_by: Initiator | None
    capture_ref: str | None
    capture_attempts: int
    captured_cents: int | None  # what PayPal captured (an upsell it never got: below amount_cents)
    last_error: str | None
    upsell_ids: frozenset[str]


def _intent(row: _Intent) -> DeferredIntent:
    try:
        status = DeferredStatus(row.status)
        captured_by = None if row.captured_by is None else Initiator(row.captured_by)
    except ValueError:
        raise UnknownIntentState(f"intent {row.intent_id} is in an unknown state") from None
    return DeferredIntent(
        intent_id=row.intent_id,
        sale_ref=row.sale_ref,
        account_id=row.account_id,
        amount_cents=int(row.amount_cents),
        currency=row.currency,
        status=status,
        updated_at=int(row.updated_at),
        captured_by=captured_by,
        capture_ref=row.capture_ref,
        capture_attempts=int(row.capture_attempts or 0),
        captured_cents=None if row.captured_cents is None else int(row.captured_cents),
        last_error=row.last_error,
        upsell_ids=frozenset(row.upsell_ids or ()),
    )


def _page(page: tuple[list[_Intent], dict[str, Any] | None]) -> tuple[list[DeferredIntent], dict[str, Any] | None]:
    rows, cursor = page
    return [_intent(row) for row in rows], cursor


class DeferredPaymentStore(ModelStore):
    """Deferred intents: create, patch upsells, find stale ones, record captures."""

    _model_class = _Intent

    def create(
        self,
        intent_id: str,
        sale_ref: str | None,
        amount_cents: int,
        currency: str = "EUR",
        account_id: str | None = None,
    ) -> None:
        """Checkout approved the order and deferred its capture."""
        now = self._clock.now_ms()
        put_row(
            self._model(
                intent_id,
                sale_ref=sale_ref,
                account_id=account_id,
                amount_cents=amount_cents,
                currency=currency,
                status=DeferredStatus.DEFERRED.value,
                created_at=now,
                updated_at=now,
                capture_attempts=0,
            ),
            self._model.intent_id.does_not_exist(),
            f"creating intent {intent_id}",
        ).or_raise()

    def get(self, intent_id: str) -> DeferredIntent | None:
        """One intent, or None; `UnknownIntentState` for a status outside the enum."""
        row = get_row(self._model, intent_id, what="reading a row of deferred_payments")
        return None if row is None else _intent(row)

    def patch_upsell(self, intent_id: str, add_cents: int, upsell_id: str) -> bool:
        """An accepted upsell: add to the amount and refresh `updated_at` (only while deferred), once per `upsell_id`.

        `upsell_id` names this upsell (the buyer's request id): a copy of the
        same request, re-sent after a lost reply or retried by the buyer's
        client, is refused by its own first application and returns True
        without adding again. False: the intent is no longer deferred (claimed
        or captured) and this upsell was never added.
        """
        model = self._model
        return update_row(
            model(intent_id),
            [
                model.amount_cents.add(add_cents),
                model.upsell_ids.add({upsell_id}),
                model.updated_at.set(self._clock.now_ms()),
            ],
            (model.status == DeferredStatus.DEFERRED.value) & ~model.upsell_ids.contains(upsell_id),
            f"patching intent {intent_id}",
            ours=lambda seen: upsell_id in (seen.get("upsell_ids") or ()),  # this upsell is on it: added once
        ).applied

    def stale_deferred(
        self, cutoff: int, limit: int, after: dict[str, Any] | None = None
    ) -> tuple[list[DeferredIntent], dict[str, Any] | None]:
        """Up to `limit` intents still deferred and untouched since before `cutoff`, and a cursor."""
        return _page(
            one_page(
                self._model.by_status_updated.query(
                    DeferredStatus.DEFERRED.value,
                    self._model.updated_at < cutoff,
                    limit=limit,
                    last_evaluated_key=after,
                ),
                "querying stale deferred intents",
            )
        )

    def capturing(
        self, limit: int, after: dict[str, Any] | None = None
    ) -> tuple[list[DeferredIntent], dict[str, Any] | None]:
        """Up to `limit` intents left `capturing` by an earlier attempt (unknown outcome, crash), and a cursor."""
        return _page(
            one_page(
                self._model.by_status_updated.query(
                    DeferredStatus.CAPTURING.value, limit=limit, last_evaluated_key=after
                ),
                "querying capturing intents",
            )
        )

    def claim_op(self, row: DeferredIntent, run_id: str) -> Write:
        """A fenced `Write`: deferred -> capturing, only if nobody touched the intent since `row` was read.

        `updated_at` is left alone (the buyer's signal); `claimed_by` lets a retried claim whose
        reply was lost recognise itself in the old image.
        """
        m = self._model
        return self._from_deferred_as_read(
            row, DeferredStatus.CAPTURING, [m.claimed_at.set(self._clock.now_ms()), m.claimed_by.set(run_id)]
        )

    def _from_deferred_as_read(self, row: DeferredIntent, to: DeferredStatus, also: list[Any]) -> Write:
        """An update out of `deferred`, conditioned on the `updated_at` read (a buyer's change since refuses it)."""
        m = self._model
        condition = (m.status == DeferredStatus.DEFERRED.value) & (m.updated_at == row.updated_at)
        return update_write(m(row.intent_id), [m.status.set(to.value), *also], condition)

    def captured_op(
        self, row: DeferredIntent, by: Initiator, capture_ref: str | None, captured_cents: int | None = None
    ) -> Write:
        """A fenced `Write`: capturing -> captured (by whom, and the amount PayPal says it captured), only if
        still ours to settle."""
        m = self._model
        actions = [
            m.status.set(DeferredStatus.CAPTURED.value),
            m.captured_by.set(by.value),
            m.updated_at.set(self._clock.now_ms()),
        ]
        if capture_ref:
            actions.append(m.capture_ref.set(capture_ref))
        if captured_cents is not None:
            actions.append(m.captured_cents.set(captured_cents))
        return update_write(m(row.intent_id), actions, m.status == DeferredStatus.CAPTURING.value)

    def failed_attempt_op(self, row: DeferredIntent, error: str, terminal: bool) -> Write:
        """A fenced `Write` counting a failed or unknown capture attempt of a claimed intent.

        It stays `capturing` (retried with the same key next tick) unless `terminal`
        (`capture_failed`). The condition includes the attempts count read, so a
        retried write whose first reply was lost is refused rather than counted twice.
        `updated_at` is left alone: it is the buyer's activity signal.
        """
        m = self._model
        attempts = row.capture_attempts + 1
        status = DeferredStatus.CAPTURE_FAILED if terminal else DeferredStatus.CAPTURING
        actions = [m.status.set(status.value), m.capture_attempts.set(attempts), m.last_error.set(error[:200])]
        condition = (m.status == DeferredStatus.CAPTURING.value) & (
            (m.capture_attempts == attempts - 1) | m.capture_attempts.does_not_exist()
        )
        return update_write(m(row.intent_id), actions, condition)

    def invalid_op(self, row: DeferredIntent, error: str) -> Write:
        """A fenced `Write`: a deferred intent that can never be captured (no sale reference) -> capture_failed."""
        return self._from_deferred_as_read(
            row, DeferredStatus.CAPTURE_FAILED, [self._model.last_error.set(error[:200])]
        )

    def mark_captured(self, intent_id: str, by: Initiator, capture_ref: str | None) -> bool:
        """The buyer's own path records its capture (unfenced: it holds no job lease).

        Also from `capturing`: the buyer's capture may win at the provider while the safety net
        holds the claim; the safety net then meets `AlreadyCaptured` and finds it settled.
        """
        model = self._model
        actions = [
            model.status.set(DeferredStatus.CAPTURED.value),
            model.captured_by.set(by.value),
            model.updated_at.set(self._clock.now_ms()),
        ]
        if capture_ref:
            actions.append(model.capture_ref.set(capture_ref))
        return update_row(
            model(intent_id),
            actions,
            model.status.is_in(DeferredStatus.DEFERRED.value, DeferredStatus.CAPTURING.value),
            f"recording capture of {intent_id}",
        ).applied
