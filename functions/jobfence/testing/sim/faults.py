"""The fault model of the simulator: what can go wrong, and how often, in one seeded run.

Every kind below is injected through the botocore event hooks of `jobfence.testing.sim.wire`
(AWS calls), the simulated queue (`jobfence.testing.sim.queue`), the simulated provider
(`jobfence.testing.sim.queue`) or the scheduler (pauses, skew). A run enables a seeded
subset of kinds (`FaultPlan.draw`); each call of a faulty actor then draws at
most one fault among the enabled kinds that apply to it.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field


class FaultKind(str, enum.Enum):
    """One kind of weather. The value is what the trace and the campaign report print."""

    CRASH_BEFORE = "crash_before"  # the actor's process dies before the call reaches AWS
    CRASH_AFTER = "crash_after"  # the call is applied, then the process dies before the reply
    REPLY_LOST_RESENT = "reply_lost_resent"  # applied, reply lost, botocore re-sends it
    REPLY_LOST_SURFACED = "reply_lost_surfaced"  # applied, reply lost, ReadTimeoutError after every retry
    THROTTLED = "throttled"  # ProvisionedThroughputExceeded on every attempt (retries exhausted)
    UNAVAILABLE = "unavailable"  # 500 on every attempt; the first may have been applied
    TRANSACTION_CONFLICT = "transaction_conflict"  # TransactionConflict on every attempt
    PAUSE_TTL = "pause_ttl"  # the actor stops between two calls for longer than the lease TTL
    PAUSE_ITEM_STALE = "pause_item_stale"  # ... longer than the item-stale limit
    PAUSE_BATCH_STALE = "pause_batch_stale"  # ... longer than the batch-stale limit
    CLOCK_SKEW = "clock_skew"  # actors' clocks differ by up to the safety margin
    DUPLICATE_DELIVERY = "duplicate_delivery"  # an SQS message is delivered to two receivers
    LATE_DELIVERY = "late_delivery"  # an acknowledged message comes back after the stale limits
    FORGED_DELIVERY = "forged_delivery"  # a wake-up naming another tenant's keys
    PROVIDER_CRASH_BEFORE = "provider_crash_before"  # the provider call fails before acting
    PROVIDER_CRASH_AFTER = "provider_crash_after"  # the provider acts, then the call fails
    PROVIDER_TIMEOUT = "provider_timeout"  # the provider acts (or not) past the per-item timeout
    JOB_FAILURE = "job_failure"  # the scheduled job itself raises in one of its batches
    REQUEST_LATE = "request_late"  # built (its times read) now, applied up to the request-age budget later
    REQUEST_LATE_BEYOND = "request_late_beyond"  # ... applied later than the request-age budget (outside it)
    REPLY_LOST_STREAK = "reply_lost_streak"  # this call and the caller's own next retries of it: every reply lost


AWS_CALL_FAULTS = (
    FaultKind.CRASH_BEFORE,
    FaultKind.CRASH_AFTER,
    FaultKind.REPLY_LOST_RESENT,
    FaultKind.REPLY_LOST_SURFACED,
    FaultKind.THROTTLED,
    FaultKind.UNAVAILABLE,
    FaultKind.TRANSACTION_CONFLICT,
)
# A request applied later than it was built, inside the time budget and beyond it (docs/guarantees.md,
# "The time budget"); several lost replies in a row on one write (the caller's retries included).
LATE_REQUESTS = (FaultKind.REQUEST_LATE, FaultKind.REQUEST_LATE_BEYOND)
TIME_FAULTS = (*LATE_REQUESTS, FaultKind.REPLY_LOST_STREAK)
CRASHES = (FaultKind.CRASH_BEFORE, FaultKind.CRASH_AFTER)
PAUSES = (FaultKind.PAUSE_TTL, FaultKind.PAUSE_ITEM_STALE, FaultKind.PAUSE_BATCH_STALE)
DELIVERY_FAULTS = (FaultKind.DUPLICATE_DELIVERY, FaultKind.LATE_DELIVERY, FaultKind.FORGED_DELIVERY)
PROVIDER_FAULTS = (FaultKind.PROVIDER_CRASH_BEFORE, FaultKind.PROVIDER_CRASH_AFTER, FaultKind.PROVIDER_TIMEOUT)
DEFAULT_CALL_RATES = (0.04, 0.08, 0.12)
WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
# Calls a TransactionConflict can refuse: single-item writes and transactions (a BatchWriteItem
# that meets a transaction reports its items unprocessed instead).
CONFLICT_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "TransactGetItems"})


@dataclass
class FaultPlan:
    """Which kinds are on in this run and how often a call draws one."""

    enabled: frozenset[FaultKind] = field(default_factory=frozenset)
    call_rate: float = 0.0  # chance that one AWS call of a faulty actor draws a fault
    delivery_rate: float = 0.0  # chance per delivered message of a delivery fault
    provider_rate: float = 0.0  # chance per provider call of a provider fault
    drawn: set[FaultKind] = field(default_factory=set)  # kinds drawn so far in this run

    @classmethod
    def draw(
        cls,
        rng: random.Random,
        kinds: tuple[FaultKind, ...],
        share: float = 0.8,
        call_rates: tuple[float, ...] = DEFAULT_CALL_RATES,
    ) -> FaultPlan:
        """Enable each applicable kind with probability `share`; rates vary per run.

        A family with few calls a run passes higher `call_rates`, so that each kind it
        enables is injected in most of its runs.
        """
        enabled = frozenset(k for k in kinds if rng.random() < share)
        return cls(
            enabled=enabled,
            call_rate=rng.choice(call_rates),
            delivery_rate=rng.choice((0.3, 0.5)),
            provider_rate=rng.choice((0.4, 0.6)),
        )

    @classmethod
    def none(cls) -> FaultPlan:
        return cls()

    def on(self, kind: FaultKind) -> bool:
        return kind in self.enabled

    def call_fault(
        self, rng: random.Random, op: str, service: str, spared: frozenset[FaultKind] = frozenset()
    ) -> FaultKind | None:
        """At most one fault for one AWS call (drawn in the calling actor's turn), none of `spared`."""
        if not self.enabled or rng.random() >= self.call_rate:
            return None
        choices = [k for k in (*AWS_CALL_FAULTS, *TIME_FAULTS, *PAUSES) if k in self.enabled and k not in spared]
        if service != "dynamodb":
            choices = [k for k in choices if k not in TIME_FAULTS]
        if service != "dynamodb" or op not in CONFLICT_OPS:
            choices = [k for k in choices if k is not FaultKind.TRANSACTION_CONFLICT]
        elif FaultKind.TRANSACTION_CONFLICT in choices and rng.random() < 0.4:
            choices = [FaultKind.TRANSACTION_CONFLICT]  # only some calls can conflict: even the odds
        return self._pick(rng, choices)

    def one_of(self, rng: random.Random, kinds: tuple[FaultKind, ...], rate: float) -> FaultKind | None:
        choices = [k for k in kinds if k in self.enabled]
        if not choices or rng.random() >= rate:
            return None
        return self._pick(rng, choices)

    def _pick(self, rng: random.Random, choices: list[FaultKind]) -> FaultKind | None:
        """A kind not drawn yet in this run if one applies, so every enabled kind gets its turn."""
        if not choices:
            return None
        fresh = [k for k in choices if k not in self.drawn]
        kind = rng.choice(fresh or choices)
        self.drawn.add(kind)
        return kind
