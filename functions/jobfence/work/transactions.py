"""The work store's multi-item transactions: claiming items and reopening failed ones.

Both move item rows and the tenant's quota row together in one
TransactWriteItems, so a unit of quota is reserved exactly when an item takes
it. A refused condition comes back with the row (ALL_OLD); the plan is
corrected from that old image and tried again, at most `CLAIM_ROUNDS` times.

Claim of one item (conditions re-check exactly what the consistent read saw):

    read      BatchGetItem (consistent): status, attempts, updated_at, tenant, quota, payload
    write     pending -> running, attempts + 1, claim_token = T, updated_at = now
              condition: still pending & same attempts & same updated_at & same tenant & same quota
              (+ quota reserved in the same transaction when the item holds none)
    exhausted pending -> failed "quota exhausted" when the tenant has no unit left
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from pynamodb.exceptions import PynamoDBException, TransactWriteError
from pynamodb.transactions import TransactWrite

from jobfence.errors import StoreError
from jobfence.quota import available_in
from jobfence.runs import safe_error
from jobfence.work.keys import (
    CLAIM_ROUNDS,
    BatchRef,
    Claim,
    ClaimState,
    ItemKey,
    ItemStatus,
    QuotaHold,
    bounded_error,
    reclaim_key,
)

if TYPE_CHECKING:
    from jobfence.work.store import WorkStore


@dataclass(frozen=True)
class ReopenResult:
    """What reopening a batch's failed items did: the items reopened and those the quota could not cover."""

    retried: list[ItemKey]
    skipped_quota: int


@dataclass
class _ClaimOp:
    key: ItemKey | None
    tenant_quota: str | None
    add_to: Callable[[TransactWrite], None]


@dataclass
class _ClaimPlan:
    ops: list[_ClaimOp] = field(default_factory=list)
    results: dict[ItemKey, Claim] = field(default_factory=dict)

    def claim(self, store: "WorkStore", key: ItemKey, row: Any, kind: str, reserve: bool, now: int) -> None:
        m = store.items
        token = uuid.uuid4().hex
        still_pending = m.status == ItemStatus.PENDING.value
        same_attempts = m.attempts == int(row.attempts or 0)
        same_update = m.updated_at == int(row.updated_at)
        same_tenant = m.tenant == key.tenant
        same_quota = (m.quota == row.quota) if row.quota else m.quota.does_not_exist()
        condition = still_pending & same_attempts & same_update & same_tenant & same_quota
        actions = [
            m.status.set(ItemStatus.RUNNING.value),
            m.claim_token.set(token),
            m.updated_at.set(now),
            m.attempts.add(1),
            m.reclaim_key.set(reclaim_key(kind, ItemStatus.RUNNING, key)),
        ]
        if reserve:
            actions += [m.quota.set(QuotaHold.RESERVED.value), m.quota_reservations.add(1)]
        target = m(key.batch.batch_key, key.item_id)
        self.ops.append(
            _ClaimOp(key, None, lambda tx: tx.update(target, actions=actions, condition=condition, return_values="ALL_OLD"))
        )
        self.results[key] = Claim(
            key,
            ClaimState.CLAIMED,
            token=token,
            attempts=int(row.attempts or 0) + 1,
            payload=json.loads(row.payload),
        )

    def exhaust(self, store: "WorkStore", key: ItemKey, row: Any, now: int) -> None:
        m = store.items
        still_pending = m.status == ItemStatus.PENDING.value
        same_update = m.updated_at == int(row.updated_at)
        same_tenant = m.tenant == key.tenant
        holds_nothing = ~(m.quota == QuotaHold.RESERVED.value)
        condition = still_pending & same_update & same_tenant & holds_nothing
        actions = [
            m.status.set(ItemStatus.FAILED.value),
            m.error.set("quota exhausted: the tenant has no units left (retry_failed re-reserves)"),
            m.updated_at.set(now),
            m.reclaim_key.remove(),
        ]
        target = m(key.batch.batch_key, key.item_id)
        self.ops.append(
            _ClaimOp(key, None, lambda tx: tx.update(target, actions=actions, condition=condition, return_values="ALL_OLD"))
        )
        self.results[key] = Claim(key, ClaimState.QUOTA_EXHAUSTED, reason="quota exhausted")

    def reserve(self, store: "WorkStore", tenant: str, units: int) -> None:
        self.ops.append(_ClaimOp(None, tenant, lambda tx: store.quota.reserve_in(tx, tenant, units)))


def claim_items(store: "WorkStore", keys: Sequence[ItemKey], kind: str, attempts_cap: int) -> dict[ItemKey, Claim]:
    """Claim up to 100 distinct items in one transaction, reserving quota for those without.

    One consistent BatchGetItem reads the rows (the worker needs their input,
    and a transaction returns nothing), then one TransactWriteItems moves every
    claimable row pending -> running under a condition that re-checks exactly
    what was read, together with one quota Update per tenant. A refused
    condition comes back with the row (ALL_OLD), so the plan is corrected
    and retried without a re-read.
    """
    if len(set(keys)) != len(keys):
        raise ValueError("claim takes distinct keys")
    rows: dict[ItemKey, Any] = {}
    if keys:
        try:
            found = list(store.items.batch_get([(k.batch.batch_key, k.item_id) for k in keys], consistent_read=True))
        except PynamoDBException as exc:
            raise StoreError(f"reading items to claim failed: {safe_error(exc)}") from exc
        by_id = {(r.batch_key, r.item_id): r for r in found}
        for k in keys:
            row = by_id.get((k.batch.batch_key, k.item_id))
            if row is not None and row.tenant == k.tenant:
                rows[k] = row
    out: dict[ItemKey, Claim] = {}
    for k in keys:
        if k not in rows:
            out[k] = Claim(k, ClaimState.NOT_FOUND, reason="no such item for this tenant and batch")
    quota_left: dict[str, int | None] = {}  # None: not known yet, try all
    for _ in range(CLAIM_ROUNDS):
        plan = _plan_claims(store, rows, out, kind, attempts_cap, quota_left)
        if not plan.ops:
            return out
        try:
            with store.transaction() as tx:
                for op in plan.ops:
                    op.add_to(tx)
        except TransactWriteError as exc:
            if exc.cause_response_code != "TransactionCanceledException":
                raise StoreError(f"claim transaction failed: {exc.cause_response_code}") from exc
            _read_refusals(store, exc, plan, rows, quota_left)
            continue
        out.update(plan.results)
        return out
    for k in rows:
        out.setdefault(k, Claim(k, ClaimState.CONTENDED, reason=f"claim lost {CLAIM_ROUNDS} rounds to races"))
    return out


def _plan_claims(
    store: "WorkStore",
    rows: dict[ItemKey, Any],
    out: dict[ItemKey, Claim],
    kind: str,
    attempts_cap: int,
    quota_left: dict[str, int | None],
) -> _ClaimPlan:
    now = store.now_ms()
    plan = _ClaimPlan()
    wanting: dict[str, list[ItemKey]] = {}
    for key, row in sorted(rows.items(), key=lambda kv: int(kv[1].seq)):
        if key in out:
            continue
        status = ItemStatus(row.status)
        if row.kind != kind:
            out[key] = Claim(key, ClaimState.WRONG_PIPELINE, reason=f"item belongs to the {row.kind} pipeline")
        elif status is not ItemStatus.PENDING:
            out[key] = Claim(key, ClaimState.DUPLICATE, reason=f"item is {status.value}")
        elif int(row.attempts or 0) >= attempts_cap:
            out[key] = Claim(key, ClaimState.DUPLICATE, reason="attempts cap reached")
        elif row.quota == QuotaHold.RESERVED.value:
            plan.claim(store, key, row, kind, reserve=False, now=now)
        else:
            wanting.setdefault(key.tenant, []).append(key)
    for tenant, wanted in wanting.items():
        left = quota_left.get(tenant)
        granted = wanted if left is None else wanted[: max(left, 0)]
        for key in wanted[len(granted):]:
            plan.exhaust(store, key, rows[key], now=now)
        if granted:
            plan.reserve(store, tenant, len(granted))
            for key in granted:
                plan.claim(store, key, rows[key], kind, reserve=True, now=now)
    return plan


def _read_refusals(
    store: "WorkStore", exc: TransactWriteError, plan: _ClaimPlan, rows: dict[ItemKey, Any],
    quota_left: dict[str, int | None],
) -> None:
    for op, reason in zip(plan.ops, exc.cancellation_reasons):
        if reason is None or reason.code != "ConditionalCheckFailed":
            continue  # TransactionConflict or collateral: the next round tries again
        if op.tenant_quota is not None:
            quota_left[op.tenant_quota] = available_in(reason.raw_item)
        elif op.key is not None:
            if not reason.raw_item:
                rows.pop(op.key, None)  # deleted meanwhile: reported as not found next round
                continue
            rows[op.key] = store.items.from_raw_data(reason.raw_item)


def reopen_failed(store: "WorkStore", ref: BatchRef, kind: str, requested_by: str, chunk: int = 50) -> ReopenResult:
    """Reset failed items to pending with a fresh attempts budget, re-reserving their quota.

    Per chunk: one transaction with the tenant's quota reservation and every
    item's reset (condition: still failed exactly as read). Items the quota
    cannot cover stay failed. Only this operator action ever resets a budget.
    """
    m = store.items
    failed = [m.get(ref.batch_key, r.item_id, consistent_read=True)
              for r in store.item_rows(ref) if r.status is ItemStatus.FAILED]
    retried: list[ItemKey] = []
    skipped = 0
    for start in range(0, len(failed), chunk):
        part = failed[start:start + chunk]
        for _ in range(CLAIM_ROUNDS):
            if not part:
                break
            now = store.now_ms()
            try:
                with store.transaction() as tx:
                    store.quota.reserve_in(tx, ref.tenant, len(part))
                    for row in part:
                        key = ItemKey(ref.tenant, ref.batch_id, row.item_id)
                        still_failed = m.status == ItemStatus.FAILED.value
                        same_update = m.updated_at == int(row.updated_at)
                        tx.update(
                            m(ref.batch_key, row.item_id),
                            actions=[
                                m.status.set(ItemStatus.PENDING.value),
                                m.attempts.set(0),
                                m.updated_at.set(now),
                                m.error.set(bounded_error(f"retry requested by {requested_by}; last error: {row.error}")),
                                m.quota.set(QuotaHold.RESERVED.value),
                                m.quota_reservations.add(1),
                                m.reclaim_key.set(reclaim_key(kind, ItemStatus.PENDING, key)),
                            ],
                            condition=still_failed & same_update,
                            return_values="ALL_OLD",
                        )
            except TransactWriteError as exc:
                if exc.cause_response_code != "TransactionCanceledException":
                    raise StoreError(f"retrying failed items failed: {exc.cause_response_code}") from exc
                reasons = exc.cancellation_reasons
                quota_reason = reasons[0] if reasons else None
                if quota_reason is not None and quota_reason.code == "ConditionalCheckFailed":
                    left = available_in(quota_reason.raw_item)
                    skipped += len(part) - max(left, 0)
                    part = part[: max(left, 0)]
                changed = {
                    row.item_id
                    for row, reason in zip(part, reasons[1:])
                    if reason is not None and reason.code == "ConditionalCheckFailed"
                }
                part = [row for row in part if row.item_id not in changed]
                continue
            retried += [ItemKey(ref.tenant, ref.batch_id, row.item_id) for row in part]
            break
    return ReopenResult(retried=retried, skipped_quota=skipped)
