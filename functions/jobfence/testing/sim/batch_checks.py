"""The work invariants 5-9 over a work store's rows: what the demo's end check and every pipeline simulation judge.

`check_batches(store, refs, acts)` reads each batch back through `BatchStore.describe_batch` and the tenants'
quota books through `store.quota.balance`, and returns one `Check` per invariant (docs/guarantees.md,
"Durable batches, quota and reclaim"). It imports no app: the simulator's pipeline scenario
(`jobfence.testing.sim.pipeline`, so `simulate(..., pipelines=...)`) and this repository's demo
(`ops.invariants`) both call it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """One invariant's verdict."""

    number: int
    title: str
    ok: bool
    detail: str


def check_batches(
    store: Any, refs: list[Any], acts: Mapping[str, Mapping[str, str]], cap: int = 5, strict_acts: bool = True
) -> list[Check]:
    """Invariants 5-9 over the rows of `refs` (a `WorkStore`'s batches), shared by the demo and the simulator.

    `acts` is, per provider, what it did for each idempotency key (its result).
    With `strict_acts`, the provider must have acted exactly for the completed
    items; without, it may also have acted for an item that then failed (a
    timeout after acting), but never with another result for a completed one.
    """
    from jobfence.work import TERMINAL, WorkRequest

    p5, p6, p7, p8, p9 = [], [], [], [], []
    tenants: dict[str, tuple[int, int]] = {}
    completed_refs: list[str] = []
    acted: dict[str, str] = {}  # idempotency key -> result, as the demo's batches expect it from the provider
    for ref in refs:
        report = store.batches.describe_batch(ref)
        if report is None:
            p5.append(f"{ref}: no batch row")
            continue
        live = [i for i in report.items if i.status not in TERMINAL]
        if live:
            p5.append(f"{ref}: {len(live)} item(s) still {sorted({i.status.value for i in live})}")
        over = [i.item_id for i in report.items if i.attempts > cap]
        if over:
            p5.append(f"{ref}: attempts over the cap on {over[:3]}")
        counts = report.counts()
        b = report.batch
        if b.status.final and (b.completed, b.failed, b.cancelled) != (
            counts["completed"],
            counts["failed"],
            counts["cancelled"],
        ):
            p6.append(
                f"{ref}: counters completed={b.completed} failed={b.failed} cancelled={b.cancelled}, rows say {counts}"
            )
        if not b.status.final and not live:
            p6.append(f"{ref}: every item is terminal but the batch is {b.status.value}")
        reserved = sum(i.quota_reservations for i in report.items)
        refunded = sum(i.quota_refunds for i in report.items)
        if any(i.quota_refunds > i.quota_reservations for i in report.items):
            p7.append(f"{ref}: an item was refunded more often than it reserved")
        if any(i.status.value == "failed" and i.quota_refunds != i.quota_reservations for i in report.items):
            p7.append(f"{ref}: a failed item's reservation was not refunded exactly once")
        if any(i.status.value == "cancelled" and i.quota_refunds != i.quota_reservations for i in report.items):
            p7.append(f"{ref}: a cancelled item's reservation was not refunded exactly once")
        if any(
            i.status.value == "completed" and i.quota_reservations and i.quota_refunds != i.quota_reservations - 1
            for i in report.items
        ):
            p7.append(f"{ref}: a completed item's reservation was refunded")
        r, f = tenants.get(ref.tenant, (0, 0))
        tenants[ref.tenant] = (r + reserved, f + refunded)
        foreign = [i.item_id for i in report.items if i.tenant != ref.tenant or i.batch_id != ref.batch_id]
        if foreign:
            p8.append(f"{ref}: rows of another tenant or batch in its partition: {foreign[:3]}")
        completed_refs += [i.result_ref for i in report.items if i.status.value == "completed"]
        for i in report.items:
            if i.status.value == "completed":
                acted[WorkRequest(i.key, b.kind, i.attempts, {}).idempotency_key] = i.result_ref
    for tenant, (reserved, refunded) in tenants.items():
        balance = store.quota.balance(tenant)
        if balance.used != balance.reserved - balance.refunded:
            p7.append(f"{tenant}: used {balance.used} != reserved {balance.reserved} - refunded {balance.refunded}")
        if (balance.reserved, balance.refunded) != (reserved, refunded):
            p7.append(f"{tenant}: quota books {balance.reserved}/{balance.refunded} != item rows {reserved}/{refunded}")
    if len(set(completed_refs)) != len(completed_refs):
        p9.append("two completed items share one provider result (a duplicate side effect)")
    prefixes = tuple(f"{ref.tenant}:{ref.batch_id}:" for ref in refs)
    for name, ids in acts.items():  # what the provider did, per idempotency key
        ours = {k: v for k, v in ids.items() if k.startswith(prefixes)}
        if strict_acts and len(ours) != len(acted):
            p9.append(f"{name} stub acted for {len(ours)} item(s), {len(acted)} completed")
        wrong = [k for k, v in acted.items() if ours.get(k) != v]
        if wrong:
            p9.append(f"{name}: {len(wrong)} completed item(s) do not hold the provider's result for their key")
    n = sum(1 for _ in refs)
    return [
        Check(
            5,
            "every item ends completed or failed, attempts never over the cap",
            not p5,
            "; ".join(p5) or f"{n} batch(es): no live item left, attempts <= {cap}",
        ),
        Check(
            6,
            "a finalized batch's counters equal a recount of its rows",
            not p6,
            "; ".join(p6) or f"{n} batch(es) finalized with counters equal to the recount",
        ),
        Check(
            7,
            "quota used = reserved - refunded; each failed item refunded once",
            not p7,
            "; ".join(p7) or f"{len(tenants)} tenant(s): books balance and match the item rows",
        ),
        Check(
            8,
            "no read, claim or write crosses tenants",
            not p8,
            "; ".join(p8) or "every item row sits under its own tenant and batch",
        ),
        Check(
            9,
            "duplicate deliveries cause no duplicate side effect",
            not p9,
            "; ".join(p9) or f"{len(completed_refs)} completed item(s), as many distinct provider results",
        ),
    ]
