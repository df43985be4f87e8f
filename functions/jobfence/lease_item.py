"""The lease item, read: a term's types and what an item (or the old image a refusal returned) says.

`jobfence.lease.LeaseStore` writes the item; everything that reads one lives
here: the pre-gate's `LeaseState`, the `Term` a dead holder left
(`unreleased_term`, `predecessor_term`), why an acquire or a pending-request
write was refused (`acquire_refusal`, `pending_refusal`). Nothing here talks
to AWS. The names a caller uses are also importable from `jobfence.lease`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobfence.dynamo import deserialized
from jobfence.errors import IntervalNotElapsed, LeaseHeld, LeaseRefused, PredecessorUnrecorded, RequestServed
from jobfence.registry import INTERVAL_TOLERANCE
from jobfence.term import Term

NONE = "-"  # "no such attribute" inside a copied value (an empty string is not valid everywhere)
TICK_SLACK_MS = 1000  # a scheduled event's `time` has whole seconds: a run started this early still answers its tick
PENDING = "pending_tick"  # the one pending request of a buffer_one job (epoch ms of the tick that asked)
SERVED = "served_tick"  # the latest tick whose pending request a term was acquired to serve


@dataclass(frozen=True)
class LeaseState:
    """What the pre-gate read saw (possibly stale)."""

    holder: str | None
    expires_at: int | None
    last_started_at: int | None
    fence: int
    acquired_at: int | None = None  # the latest term's start (kept after its release)
    pending_tick: int | None = None  # a buffer_one tick's pending request


class Pending(str, enum.Enum):
    """What a `buffer_one` tick's pending-request write came to (read from the item it saw)."""

    RECORDED = "recorded"  # the item holds a pending request for this tick (ours, or a duplicate's)
    LEASE_FREE = "lease_free"  # no live holder: the tick acquires instead
    GATED = "gated"  # the holder started less than 0.9 x interval before the tick: skipped_interval
    SERVED = "served"  # the holder started at or after the tick (it is this tick's run): skipped_leased


def started_since(acquired_at: int | None, tick_ms: int) -> bool:
    """Whether a term that started at `acquired_at` started at or after the tick (with the event's slack)."""
    return acquired_at is not None and acquired_at >= tick_ms - TICK_SLACK_MS


def gate_cutoff(now_ms: int, interval_ms: int) -> int:
    """A job may start again when its last start is at or before this instant."""
    return now_ms - int(interval_ms * INTERVAL_TOLERANCE)


def unreleased_term(item: Mapping[str, Any], now_ms: int) -> Term | None:
    """The term a (plain) lease item shows expired without a release, if it names its run."""
    term = held_term(item)
    return term if term is not None and term.expires_at < now_ms else None


def acquire_refusal(
    job: str,
    seen: Mapping[str, Any],
    now: int,
    interval_ms: int | None,
    since_tick: int | None = None,
    pending_tick: int | None = None,
) -> LeaseRefused:
    """Why an acquire was refused, from the item the refusal saw (not our own term)."""
    if since_tick is not None and started_since(seen.get("acquired_at"), since_tick):
        return RequestServed(job, since_tick, seen)
    if pending_tick is not None and seen.get(PENDING) != pending_tick:
        return RequestServed(job, pending_tick, seen)
    if seen.get("holder") and int(seen.get("expires_at", 0)) >= now:
        return LeaseHeld(job, seen)
    if interval_ms and int(seen.get("last_started_at", -1)) > gate_cutoff(now, interval_ms):
        return IntervalNotElapsed(job, seen)
    unsettled = predecessor_term(seen)
    if unsettled is not None:
        return PredecessorUnrecorded(job, unsettled)
    return LeaseHeld(job, seen)  # held when refused; released since


def pending_refusal(seen: Mapping[str, Any], tick_ms: int, now: int) -> Pending:
    """Why a pending-request write was refused, from the item it saw.

    With no live holder the tick acquires even if a request (maybe our own copy) is there:
    the holder may have died before serving it, and an acquire consumes it (served once).
    """
    if started_since(seen.get("acquired_at"), tick_ms) or int(seen.get(SERVED, -1)) >= tick_ms:
        return Pending.SERVED  # a term started since the tick (it is this tick's run), or served its request
    if not seen.get("holder") or int(seen.get("expires_at", 0)) < now:
        return Pending.LEASE_FREE
    return Pending.GATED


def held_term(item: Mapping[str, Any]) -> Term | None:
    """The current term of a lease item, if it is held and names its run (expired or not)."""
    if not item.get("holder") or item.get("run_id", NONE) == NONE:
        return None
    return Term(
        job=str(item["job"]),
        run_id=str(item["run_id"]),
        holder=str(item["holder"]),
        fence=int(item.get("fence", 0)),
        acquired_at=int(item.get("acquired_at", 0)),
        expires_at=int(item.get("expires_at", 0)),
    )


def predecessor_term(item: Mapping[str, Any]) -> Term | None:
    """The term a (plain) lease item's last acquire replaced without a release (its `prev_*` copy), if it named
    its run."""
    if item.get("prev_holder", NONE) == NONE or item.get("prev_run_id", NONE) == NONE:
        return None
    return Term(
        job=str(item["job"]),
        run_id=str(item["prev_run_id"]),
        holder=str(item["prev_holder"]),
        fence=int(item.get("fence", 1)) - 1,
        acquired_at=int(item.get("prev_acquired_at", 0)),
        expires_at=int(item.get("prev_expires_at", 0)),
    )


def lease_state(item: Mapping[str, Any] | None) -> LeaseState:
    seen = deserialized(item)
    return LeaseState(
        holder=seen.get("holder"),
        expires_at=seen.get("expires_at"),
        last_started_at=seen.get("last_started_at"),
        fence=int(seen.get("fence", 0)),
        acquired_at=seen.get("acquired_at"),
        pending_tick=seen.get(PENDING),
    )
