"""Per-tenant quota of paid actions (AI generations, marketplace publishes).

One row per tenant; every DynamoDB expression of the quota table lives here.

    tenant (key) | limit | available | reserved | refunded | updated_at | applied_ids | applied_ids_prev

`available` is what may still be reserved; `reserved` and `refunded` only ever
grow, so the books can be checked at any time (invariant 7, docs/guarantees.md):

    used = limit - available = reserved - refunded

A reservation is never a write of its own: it is one `Update` inside the
transaction that also puts the item rows it pays for (the producer), or, for a
row born without a unit, claims it, or `retry_failed` reopens it
(`jobfence.work`), so an item holds a reservation if and only if the counter
moved (docs/guarantees.md, "When quota is reserved"). A refund is likewise
one `Update` in the transaction that fails the item terminally and marks its
reservation refunded, so it happens exactly once.

    grant k     G in no applied-id set      ADD limit k, available k, applied_ids {G}  (jobfence.once)
    reserve k   condition available >= k    ADD available -k, reserved k
    refund 1    (no condition)              ADD available 1, refunded 1

A grant is one UpdateItem (it creates the row on the first grant) carrying its
grant id G (the caller's request id, or a fresh one): a copy re-sent after a
lost reply, or asked again with the same id, is refused by its own first
application even after newer grants (G is in the row's applied ids), and read
as applied from the refusal's old image, so a grant is counted once.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute, UnicodeSetAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore
from jobfence.dynamo import Transaction, get_row
from jobfence.once import update_once

if TYPE_CHECKING:  # loaded by the method that returns it
    from jobfence.quota_balance import QuotaBalance


class _Quota(Model):
    class Meta:
        table_name = "unbound"

    tenant = UnicodeAttribute(hash_key=True)
    limit = NumberAttribute()
    available = NumberAttribute()
    reserved = NumberAttribute(default=0)
    refunded = NumberAttribute(default=0)
    updated_at = NumberAttribute()
    applied_ids = UnicodeSetAttribute(null=True)  # the grants applied (jobfence.once)
    applied_ids_prev = UnicodeSetAttribute(null=True)


class QuotaStore(ModelStore):
    """Grant, reserve (inside a caller's transaction), refund and read quota."""

    _model_class = _Quota

    @property
    def table_name(self) -> str:
        """The physical name of the quota table this store writes."""
        return self._model.Meta.table_name

    def grant(self, tenant: str, units: int, grant_id: str | None = None) -> QuotaBalance:
        """Give a tenant `units` more actions (creating its row on first grant), once per `grant_id`.

        `grant_id` names the request (a fresh one if None): asked again with the same id, or
        re-sent late, the grant is not applied twice.
        """
        if units <= 0:
            raise ValueError("a grant is a positive number of units")
        q = self._model
        update_once(
            q(tenant),
            [
                q.limit.add(units),
                q.available.add(units),
                q.reserved.add(0),  # creates the books' counters on the first grant
                q.refunded.add(0),
                q.updated_at.set(self._clock.now_ms()),
            ],
            None,
            grant_id or uuid.uuid4().hex,
            "granting quota",
        )
        return self.balance(tenant)

    def balance(self, tenant: str) -> QuotaBalance:
        """The tenant's books (a strongly consistent read); all zero if never granted."""
        from jobfence.quota_balance import QuotaBalance

        row = get_row(self._model, tenant, what="reading quota")
        if row is None:
            return QuotaBalance(tenant, 0, 0, 0, 0)
        return QuotaBalance(tenant, int(row.limit), int(row.available), int(row.reserved), int(row.refunded))

    # -- transaction parts (the caller owns the transaction) ---------------------------------

    def reserve_in(self, tx: Transaction, tenant: str, units: int, now_ms: int | None = None) -> None:
        """Add "reserve `units` for `tenant`" to `tx`; it cancels the transaction if too few are left.

        The refusal carries the quota row (ALL_OLD), whose `available` says how
        many could still be reserved. A caller that re-sends its transaction
        under the same ClientRequestToken passes the plan's `now_ms`, so the
        re-send's parameters are identical (DynamoDB refuses a token reused
        with other parameters).
        """
        tx.update(
            self._model(tenant),
            actions=[
                self._model.available.add(-units),
                self._model.reserved.add(units),
                self._model.updated_at.set(self._clock.now_ms() if now_ms is None else now_ms),
            ],
            condition=self._model.available >= units,
        )

    def refund_in(self, tx: Transaction, tenant: str, units: int = 1) -> None:
        """Add "give back `units`" to `tx` (the caller's item condition makes it exactly-once)."""
        tx.update(
            self._model(tenant),
            actions=[
                self._model.available.add(units),
                self._model.refunded.add(units),
                self._model.updated_at.set(self._clock.now_ms()),
            ],
            condition=self._model.tenant.exists(),
        )


def available_in(item: Mapping[str, Any] | None) -> int:
    """`available` of a quota row returned with a refusal (`Refused.item`; 0 when the tenant has no row)."""
    return int((item or {}).get("available") or 0)
