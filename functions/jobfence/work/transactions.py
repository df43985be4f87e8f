"""The item store's claims and its multi-item transactions (claiming items without a unit, reopening failed ones).

`jobfence.work.items.ItemStore` lends them its bound model, its transactions, its quota store and
its clock (`ItemTable`); nothing else calls them.

Claim of an item born holding its quota unit (the producer reserved it with
the put: nearly every item), one conditional UpdateItem, no read, no other row:

    write     pending -> running, attempts + 1, claim_token = T, updated_at = now
              condition: pending & this tenant & this pipeline & attempts < cap & quota reserved
              returns the new row (ALL_NEW: its input and attempts); a refusal returns the old
              one (ALL_OLD), which says why: gone, another tenant's or pipeline's, not pending,
              at the cap, or holding no unit (claimed below instead)

A re-sent claim whose first try was applied is refused by it; the old image
carries this claim's token, so it is ours and stands (`jobfence.dynamo.write`).

The others move item rows and the tenant's quota row together in one
TransactWriteItems, so a unit of quota is reserved exactly when an item takes
it. A refused condition comes back with the row (ALL_OLD); the plan is
corrected from that old image and tried again, at most `CLAIM_ROUNDS` times.

Claim of an item holding no unit (conditions re-check exactly what the consistent read saw):

    read      BatchGetItem (consistent): status, attempts, updated_at, tenant, quota, payload
    write     pending -> running, attempts + 1, claim_token = T, updated_at = now
              condition: still pending & same attempts & same updated_at & same tenant & same quota
              (+ quota reserved in the same transaction)
    exhausted pending -> failed "quota exhausted" when the tenant has no unit left

A lost reply. Each plan is sent with its own ClientRequestToken, so a re-send
of the very same plan (botocore's retry, or ours after a surfaced timeout or
throttle) is applied at most once by DynamoDB within its 10-minute window.
Where that idempotency is missing (past the window, or an implementation
without it, such as moto), the re-send is refused by the rows it already
moved, and their old images carry this plan's claim tokens: the transaction
was ours and applied, so the claims stand. The same holds for reopening, whose
items carry the reopening's nonce.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobfence.dynamo import Refused, Transaction, aws_call, update_row
from jobfence.errors import StoreError
from jobfence.quota import available_in
from jobfence.work.claims import Claim, ClaimState
from jobfence.work.keys import (
    CLAIM_ROUNDS,
    BatchRow,
    ItemKey,
    ItemRow,
    ItemStatus,
    QuotaHold,
    bounded_error,
    cancelled_error,
)
from jobfence.work.table import ItemTable


@dataclass(frozen=True)
class ReopenResult:
    """What reopening a batch's failed items did: the items reopened and those the quota could not cover."""

    retried: list[ItemKey]
    skipped_quota: int


@dataclass
class _ClaimOp:
    key: ItemKey | None
    tenant_quota: str | None
    add_to: Callable[[Transaction], None]


@dataclass
class _ClaimPlan:
    ops: list[_ClaimOp] = field(default_factory=list)
    results: dict[ItemKey, Claim] = field(default_factory=dict)
    token: str = field(default_factory=lambda: uuid.uuid4().hex)  # ClientRequestToken of this plan

    def applied_before(self, refused: Refused) -> bool:
        """A refusal whose old image already holds one of this plan's claim tokens: the plan was applied."""
        for i, image in refused.entries.items():
            op = self.ops[i] if i < len(self.ops) else None
            claim = self.results.get(op.key) if op is not None and op.key is not None else None
            if claim is not None and claim.token is not None and image.get("claim_token") == claim.token:
                return True
        return False

    def claim(self, table: ItemTable, key: ItemKey, row: Any, kind: str, reserve: bool, now: int) -> None:
        m = table.model
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
        ]
        if reserve:
            actions += [m.quota.set(QuotaHold.RESERVED.value), m.quota_reservations.add(1)]
        target = m(key.partition, key.item_id)
        self.ops.append(_ClaimOp(key, None, lambda tx: tx.update(target, actions=actions, condition=condition)))
        self.results[key] = Claim(
            key,
            ClaimState.CLAIMED,
            token=token,
            attempts=int(row.attempts or 0) + 1,
            payload=json.loads(row.payload),
        )

    def exhaust(self, table: ItemTable, key: ItemKey, row: Any, now: int) -> None:
        m = table.model
        still_pending = m.status == ItemStatus.PENDING.value
        same_update = m.updated_at == int(row.updated_at)
        same_tenant = m.tenant == key.tenant
        holds_nothing = ~(m.quota == QuotaHold.RESERVED.value)
        condition = still_pending & same_update & same_tenant & holds_nothing
        actions = [
            m.status.set(ItemStatus.FAILED.value),
            m.error.set("quota exhausted: the tenant has no units left (retry_failed re-reserves)"),
            m.updated_at.set(now),
        ]
        target = m(key.partition, key.item_id)
        self.ops.append(_ClaimOp(key, None, lambda tx: tx.update(target, actions=actions, condition=condition)))
        self.results[key] = Claim(key, ClaimState.QUOTA_EXHAUSTED, reason="quota exhausted")

    def reserve(self, table: ItemTable, tenant: str, units: int, now: int) -> None:
        self.ops.append(_ClaimOp(None, tenant, lambda tx: table.quota.reserve_in(tx, tenant, units, now)))


def claim_items(table: ItemTable, keys: Sequence[ItemKey], kind: str, attempts_cap: int) -> dict[ItemKey, Claim]:
    """Claim distinct items: each one holding its unit by one conditional update, the others in one transaction.

    A store error leaves the keys it hit `ERRORED` (their messages come back);
    after an error that is not transient (access denied, a missing table) the
    keys not yet tried are not sent and are `ERRORED` with it.
    """
    if len(set(keys)) != len(keys):
        raise ValueError("claim takes distinct keys")
    out: dict[ItemKey, Claim] = {}
    unreserved: list[ItemKey] = []
    stopped: StoreError | None = None

    def errored(keys: Sequence[ItemKey], exc: StoreError) -> None:
        out.update({k: Claim(k, ClaimState.ERRORED, reason=bounded_error(str(exc))) for k in keys})

    for key in keys:
        if stopped is not None:
            errored([key], stopped)
            continue
        try:
            claim = _claim_reserved(table, key, kind, attempts_cap)
        except StoreError as exc:
            errored([key], exc)
            stopped = exc if exc.kind is None or not exc.kind.transient else None
            continue
        if claim is None:
            unreserved.append(key)
        else:
            out[key] = claim
    if unreserved and stopped is not None:
        errored(unreserved, stopped)
    elif unreserved:
        try:
            out.update(claim_in_transaction(table, unreserved, kind, attempts_cap))
        except StoreError as exc:
            errored(unreserved, exc)
    return out


def _claim_reserved(table: ItemTable, key: ItemKey, kind: str, attempts_cap: int) -> Claim | None:
    """Claim one item that holds its unit by one conditional update; None when it holds none (claim it in a transaction)."""
    m = table.model
    token = uuid.uuid4().hex
    condition = (
        (m.status == ItemStatus.PENDING.value)
        & (m.tenant == key.tenant)
        & (m.kind == kind)
        & (m.attempts < attempts_cap)
        & (m.quota == QuotaHold.RESERVED.value)
    )
    actions = [
        m.status.set(ItemStatus.RUNNING.value),
        m.claim_token.set(token),
        m.updated_at.set(table.clock.now_ms()),
        m.attempts.add(1),
    ]
    outcome = update_row(
        m(key.partition, key.item_id),
        actions,
        condition,
        "claiming an item",
        ours=lambda image: image.get("claim_token") == token and image.get("status") == ItemStatus.RUNNING.value,
        returns="ALL_NEW",
    )
    row = outcome.item
    if outcome.applied:
        return Claim(
            key, ClaimState.CLAIMED, token=token, attempts=int(row["attempts"]), payload=json.loads(row["payload"])
        )
    if not row or row.get("tenant") != key.tenant:
        return Claim(key, ClaimState.NOT_FOUND, reason="no such item for this tenant and batch")
    if row.get("kind") != kind:
        return Claim(key, ClaimState.WRONG_PIPELINE, reason=f"item belongs to the {row.get('kind')} pipeline")
    if row.get("status") != ItemStatus.PENDING.value:
        return Claim(key, ClaimState.DUPLICATE, reason=f"item is {row.get('status')}")
    if int(row.get("attempts") or 0) >= attempts_cap:
        return Claim(key, ClaimState.DUPLICATE, reason="attempts cap reached")
    return None  # pending, holding no unit: it reserves one in the claim transaction


def claim_in_transaction(
    table: ItemTable, keys: Sequence[ItemKey], kind: str, attempts_cap: int
) -> dict[ItemKey, Claim]:
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
        with aws_call("reading items to claim"):
            found = list(table.model.batch_get([(k.partition, k.item_id) for k in keys], consistent_read=True))
        by_id = {(r.batch_key, r.item_id): r for r in found}
        for k in keys:
            row = by_id.get((k.partition, k.item_id))
            if row is not None and row.tenant == k.tenant:
                rows[k] = row
    out: dict[ItemKey, Claim] = {}
    for k in keys:
        if k not in rows:
            out[k] = Claim(k, ClaimState.NOT_FOUND, reason="no such item for this tenant and batch")
    quota_left: dict[str, int | None] = {}  # None: not known yet, try all
    plan: _ClaimPlan | None = None
    unknown: StoreError | None = None  # the last error that left the outcome unknown
    for _ in range(CLAIM_ROUNDS):
        if plan is None:
            plan = _plan_claims(table, rows, out, kind, attempts_cap, quota_left)
            if not plan.ops:
                return out
        tx = table.transaction(plan.token)
        for op in plan.ops:
            op.add_to(tx)
        try:
            outcome = tx.commit()
        except StoreError as exc:
            if exc.kind is None or not exc.kind.transient:
                raise
            # not applied, or applied with its reply lost: send the very same plan (same token) again
            unknown = exc if exc.unanswered else unknown
            continue
        if isinstance(outcome, Refused):
            if plan.applied_before(outcome):
                break  # our own earlier send was applied; this re-send was refused by it
            _read_refusals(table, outcome, plan, rows, quota_left)
            plan, unknown = None, None
            continue
        break
    else:
        if unknown is not None:
            # the claims may stand with nobody running them: the reclaimer requeues them after item-stale
            raise unknown
        for k in rows:
            out.setdefault(k, Claim(k, ClaimState.CONTENDED, reason=f"claim lost {CLAIM_ROUNDS} rounds to races"))
        return out
    assert plan is not None  # the loop breaks only after sending a plan
    out.update(plan.results)
    return out


def _plan_claims(
    table: ItemTable,
    rows: dict[ItemKey, Any],
    out: dict[ItemKey, Claim],
    kind: str,
    attempts_cap: int,
    quota_left: dict[str, int | None],
) -> _ClaimPlan:
    now = table.clock.now_ms()
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
            plan.claim(table, key, row, kind, reserve=False, now=now)
        else:
            wanting.setdefault(key.tenant, []).append(key)
    for tenant, wanted in wanting.items():
        left = quota_left.get(tenant)
        granted = wanted if left is None else wanted[: max(left, 0)]
        for key in wanted[len(granted) :]:
            plan.exhaust(table, key, rows[key], now=now)
        if granted:
            plan.reserve(table, tenant, len(granted), now)
            for key in granted:
                plan.claim(table, key, rows[key], kind, reserve=True, now=now)
    return plan


def _read_refusals(
    table: ItemTable,
    refused: Refused,
    plan: _ClaimPlan,
    rows: dict[ItemKey, Any],
    quota_left: dict[str, int | None],
) -> None:
    for i, image in refused.entries.items():  # another entry (a conflict, collateral): the next round tries again
        op = plan.ops[i] if i < len(plan.ops) else None
        if op is None:
            continue
        if op.tenant_quota is not None:
            quota_left[op.tenant_quota] = available_in(image)
        elif op.key is not None:
            if not image:
                rows.pop(op.key, None)  # deleted meanwhile: reported as not found next round
                continue
            rows[op.key] = table.model.from_raw_data(refused.raw[i])


def reopen_failed(
    table: ItemTable,
    batch: BatchRow,
    rows: Sequence[ItemRow],
    requested_by: str,
    reopen_batch_in: Callable[[Transaction, int, int], None],
    chunk: int = 48,
) -> ReopenResult:
    """Reset the failed ones of the batch's item `rows` to pending with a fresh attempts budget, re-reserving quota.

    Per chunk: one transaction with the tenant's quota reservation, the batch
    row's reopening (the batch store's `reopen_batch_in(tx, items, now)`:
    status open, `reopened` + k, so a finalize racing it is refused;
    condition: no cancel recorded, so a cancel racing it wins or comes after)
    and every item's reset (condition: still failed exactly as read; the item carries the transaction's nonce as its `claim_token`, so a
    re-sent transaction refused by its own first application is recognised).
    Items the quota cannot cover stay failed. Only this operator action ever
    resets a budget.
    """
    m = table.model
    ref = batch.ref
    with aws_call(f"reading the failed items of batch {ref}"):
        failed = [
            m.get(r.key.partition, r.item_id, consistent_read=True) for r in rows if r.status is ItemStatus.FAILED
        ]
    retried: list[ItemKey] = []
    skipped = 0
    for start in range(0, len(failed), chunk):
        part = failed[start : start + chunk]
        now, nonce = 0, ""  # a new nonce (and time) per plan; a re-send after a transient error keeps both
        for _ in range(CLAIM_ROUNDS):
            if not part:
                break
            if not nonce:
                now, nonce = table.clock.now_ms(), uuid.uuid4().hex
            tx = table.transaction(nonce)
            table.quota.reserve_in(tx, ref.tenant, len(part), now)
            reopen_batch_in(tx, len(part), now)
            for row in part:
                key = ItemKey.of_row(row.batch_key, row.item_id)
                still_failed = m.status == ItemStatus.FAILED.value
                same_update = m.updated_at == int(row.updated_at)
                tx.update(
                    m(key.partition, row.item_id),
                    actions=[
                        m.status.set(ItemStatus.PENDING.value),
                        m.attempts.set(0),
                        m.updated_at.set(now),
                        m.error.set(bounded_error(f"retry requested by {requested_by}; last error: {row.error}")),
                        m.quota.set(QuotaHold.RESERVED.value),
                        m.quota_reservations.add(1),
                        m.claim_token.set(nonce),
                    ],
                    condition=still_failed & same_update,
                )
            try:
                outcome = tx.commit()
            except StoreError as exc:
                if exc.kind is not None and exc.kind.transient:
                    continue  # a re-send is refused by its own application, recognised below
                raise
            if isinstance(outcome, Refused):
                # entries: 0 the quota, 1 the batch row, then the items in `part`'s order
                items = {i - 2: image for i, image in outcome.entries.items() if i >= 2}
                if any(image.get("claim_token") == nonce for image in items.values()):
                    retried += [ItemKey.of_row(row.batch_key, row.item_id) for row in part]
                    break
                if 1 in outcome.entries:  # a cancel was recorded meanwhile
                    raise StoreError(cancelled_error(ref, outcome.entries[1].get("cancel_requested_by")))
                part = [row for i, row in enumerate(part) if i not in items]
                if 0 in outcome.entries:
                    left = max(available_in(outcome.entries[0]), 0)
                    skipped += max(len(part) - left, 0)
                    part = part[:left]
                nonce = ""
                continue
            retried += [ItemKey.of_row(row.batch_key, row.item_id) for row in part]
            break
    return ReopenResult(retried=retried, skipped_quota=skipped)
