"""The worker: process one SQS batch of wake-ups for one pipeline.

claim all (a conditional update each) -> read each claimed batch's cancel (a claim that
came after it is cancelled unrun) -> run every claimed item at once, each bounded
by the per-item timeout -> write each outcome to its row as it lands ->
one roll-up per batch (this container's own tally row, its heartbeat) -> finalize
when the tallies say done.

Every read and write of a tenant's rows goes through that tenant's scope
(`TenantScope`: its store and gate): with `scopes`, each tenant's are built over
its own tenant-scoped session (`jobfence.tenants`), so a claim, an outcome or a
roll-up of tenant A is never sent with B's credentials, and a transaction never
spans two tenants.

Each claimed item's attempt has a meter (`jobfence.capacity`): its share of
the shared calls (the tenant's claims, split evenly among the items it
claimed; the batch's cancel read, split evenly among that batch's claims),
the DynamoDB calls of its own provider call (measured in the item's own pool
thread) and whatever its outcome write sent before it; the outcome write adds
that to the item row (`ItemStore.complete`, `release`, `fail`,
`cancel_claimed`). The outcome write's own units, the in-flight gate's calls
and the roll-ups are not on any item (nothing can record a write's units in
that write; the rest is the round's, not an item's).

A message is acknowledged when its item row settled it (or never will be
settled by this message: a duplicate, a lost claim); it becomes a batch item
failure, so SQS redelivers it, when only a redelivery can make progress.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools import Logger

import jobfence.work.transactions  # noqa: F401 (the claim's code: every worker tick claims, so it loads at init)
from jobfence.capacity import Meter, Units, measure
from jobfence.dynamo import safe_error
from jobfence.errors import InvalidEvent, JobfenceError, bounded
from jobfence.work.claims import Claim, ClaimState, Perform, WorkRequest, parse_wakeup
from jobfence.work.fairness import TenantGate, new_owner
from jobfence.work.keys import (
    BatchDelta,
    BatchRef,
    BatchStatus,
    ItemKey,
    PermanentFailure,
    Tallies,
    cancel_reason,
)
from jobfence.work.store import WorkStore
from jobfence.work.timing import Timing
from jobfence.work.wakeups import Wakeups

MAX_LOGGED_CHARS = 300  # a message id or a reason in a log line, at most


class MessageFailed(JobfenceError):
    """This SQS message becomes a batch item failure (SQS redelivers it, then dead-letters it)."""


class Attempt(enum.Enum):
    """How one provider call came out (before its row is written)."""

    SUCCEEDED = "succeeded"  # returned a result reference
    REJECTED = "rejected"  # PermanentFailure: fail the item now
    ERRORED = "errored"  # any other error or the per-item timeout: retry while attempts are left


class Tally(str, enum.Enum):
    """The counters of one round (emitted as metrics, one per name)."""

    COMPLETED = "completed"
    FAILED = "failed"
    RETRIED = "retried"
    DUPLICATE = "duplicate"
    CLAIM_LOST = "claim_lost"
    MESSAGE_FAILURES = "message_failures"
    ROLLUPS = "rollups"
    DEFERRED = "deferred"  # its tenant was at its in-flight cap: woken again later, the row untouched
    CANCELLED = "cancelled"  # claimed after its batch was cancelled: cancelled unrun, its unit refunded


@dataclass(frozen=True)
class MessageOutcome:
    ok: bool
    reason: str


@dataclass
class RoundResult:
    """Per-message outcomes of one SQS batch, and counts for metrics."""

    outcomes: dict[str, MessageOutcome] = field(default_factory=dict)
    counts: dict[Tally, int] = field(default_factory=dict)

    def count(self, tally: Tally, n: int = 1) -> None:
        self.counts[tally] = self.counts.get(tally, 0) + n

    def settle(self, record: Any) -> str:
        """Powertools record handler: raise for a message that must be redelivered."""
        message_id = record["messageId"] if isinstance(record, Mapping) else record.message_id
        outcome = self.outcomes.get(message_id)
        if outcome is None:
            raise MessageFailed("message was not part of this round")
        if not outcome.ok:
            raise MessageFailed(outcome.reason)
        return outcome.reason


@dataclass(frozen=True)
class TenantScope:
    """What a worker touches one tenant's rows through: its store and its in-flight gate (None: no cap)."""

    store: WorkStore
    gate: TenantGate | None = None


@dataclass
class _Round:
    """The state of one `process` call."""

    result: RoundResult = field(default_factory=RoundResult)
    message_of: dict[ItemKey, str] = field(default_factory=dict)
    deltas: dict[BatchRef, BatchDelta] = field(default_factory=dict)
    retry: list[Claim] = field(default_factory=list)
    meters: dict[ItemKey, Meter] = field(default_factory=dict)  # each claimed item's attempt (`_share`)

    def meter(self, key: ItemKey) -> Meter:
        return self.meters.setdefault(key, Meter())

    def share(self, spent: Meter, keys: Sequence[ItemKey]) -> None:
        """Split `spent` evenly among the meters of `keys` (requests as whole numbers, the first ones one more)."""
        if not keys:
            return
        n, u = len(keys), spent.units
        part = Units(u.read / n, u.write / n, u.index_read / n, u.index_write / n)
        for i, key in enumerate(keys):
            meter = self.meter(key)
            meter.units = meter.units + part
            meter.requests += spent.requests // n + (1 if i < spent.requests % n else 0)

    def delta(self, ref: BatchRef) -> BatchDelta:
        return self.deltas.setdefault(ref, BatchDelta())


class Worker:
    """Process one SQS batch of wake-ups for one pipeline (the function's own, never the message's)."""

    def __init__(
        self,
        store: WorkStore,
        kind: str,
        timing: Timing,
        perform: Perform,
        wakeups: Wakeups,
        logger: Logger,
        deadline_margin_ms: int = 20_000,
        gate: TenantGate | None = None,
        defer_delay_s: int = 30,
        scopes: Callable[[str], TenantScope] | None = None,
    ) -> None:
        self._store = store
        self.kind = kind
        self.timing = timing
        self._perform = perform
        self._wakeups = wakeups
        self._logger = logger
        self._margin = deadline_margin_ms
        self._gate = gate  # the pipeline's per-tenant in-flight cap (None: no cap)
        self._defer_delay_s = defer_delay_s
        self._tallies = Tallies()  # this container's roll-ups, kept across invocations
        # per tenant: its store and gate (a tenant-scoped session's); None: `store` and `gate` for every tenant
        self._scopes = scopes

    def _scope(self, tenant: str) -> TenantScope:
        """The tenant's store and gate; a `JobfenceError` when its session cannot be had."""
        if self._scopes is None:
            return TenantScope(self._store, self._gate)
        return self._scopes(tenant)

    def process(self, records: Sequence[Mapping[str, Any]], remaining_ms: int | None = None) -> RoundResult:
        """Claim, run and record every item the records wake; never raises for one bad message."""
        rnd = _Round()
        for record in records:
            message_id = str(record.get("messageId", ""))
            try:
                key = parse_wakeup(str(record.get("body", "")))
            except InvalidEvent as exc:
                self._reject(rnd, message_id, str(exc), "malformed")
                continue
            if key in rnd.message_of:
                self._ack(rnd, message_id, key, "duplicate in this delivery", Tally.DUPLICATE)
                continue
            rnd.message_of[key] = message_id
        owner = new_owner()
        keys = self._admit(rnd, owner)
        try:
            self._claim_and_run(rnd, keys, remaining_ms)
        finally:
            self._release(keys, owner)
        return rnd.result

    def _claim_and_run(self, rnd: _Round, keys: list[ItemKey], remaining_ms: int | None) -> None:
        if not keys:
            return
        claims: dict[ItemKey, Claim] = {}
        for tenant_keys in _by_tenant(keys).values():  # each tenant's claims under its session
            try:
                with measure() as spent:
                    got = self._scope(tenant_keys[0].tenant).store.items.claim(
                        tenant_keys, self.kind, self.timing.attempts_cap
                    )
                claims.update(got)
                rnd.share(spent, [k for k, c in got.items() if c.state is ClaimState.CLAIMED])
            except JobfenceError as exc:
                for key in tenant_keys:
                    self._reject(rnd, rnd.message_of[key], f"claim error: {safe_error(exc)}", "claim_error", key)
        claimed: list[Claim] = []
        for key, claim in claims.items():
            message_id = rnd.message_of[key]
            if claim.state is ClaimState.CLAIMED:
                claimed.append(claim)
                rnd.delta(key.batch)
            elif claim.state is ClaimState.DUPLICATE:
                self._ack(rnd, message_id, key, f"claim refused: {claim.reason}", Tally.DUPLICATE)
            elif claim.state is ClaimState.QUOTA_EXHAUSTED:
                rnd.delta(key.batch).failed += 1
                self._ack(rnd, message_id, key, "failed: quota exhausted", Tally.FAILED)
            elif claim.state is ClaimState.ERRORED:
                self._reject(rnd, message_id, f"claim error: {claim.reason}", claim.state.value, key)
            else:
                self._reject(rnd, message_id, f"claim refused: {claim.reason}", claim.state.value, key)
        claimed = self._unless_cancelled(claimed, rnd)
        if claimed:
            self._run(claimed, remaining_ms, rnd)
        self._wake_retries(rnd)
        for ref, delta in rnd.deltas.items():
            self._roll_up(ref, delta, rnd.result)

    def _unless_cancelled(self, claimed: list[Claim], rnd: _Round) -> list[Claim]:
        """The claims to run: those of a batch whose cancel was recorded are cancelled unrun (`jobfence.work.cancel`).

        The batch's cancel is read after the claims (a consistent
        read), so a claim applied after the cancel was recorded always sees
        it; a claim applied before it runs. A claim whose batch cannot be read
        is not run: released for another attempt later.
        """
        keep: list[Claim] = []
        by_batch: dict[BatchRef, list[Claim]] = {}
        for claim in claimed:
            by_batch.setdefault(claim.key.batch, []).append(claim)
        for ref, claims in by_batch.items():
            try:
                store = self._scope(ref.tenant).store
                with measure() as spent:
                    cancelled_by = store.batches.recorded_cancel(ref)
                rnd.share(spent, [claim.key for claim in claims])
            except JobfenceError as exc:
                for claim in claims:
                    self._record(claim, Attempt.ERRORED, f"not run: reading its batch failed: {safe_error(exc)}", rnd)
                continue
            if cancelled_by is None:
                keep += claims
                continue
            for claim in claims:
                message_id = rnd.message_of[claim.key]
                try:
                    with measure(into=rnd.meter(claim.key)) as spent:
                        done = store.items.cancel_claimed(claim, cancel_reason(cancelled_by), spent)
                except JobfenceError as exc:  # the row still says running: the reclaimer requeues it
                    self._reject(rnd, message_id, f"cancelling failed: {safe_error(exc)}", "write_error", claim.key)
                    continue
                if done:
                    self._ack(rnd, message_id, claim.key, "cancelled: its batch was cancelled", Tally.CANCELLED)
                else:
                    self._ack(rnd, message_id, claim.key, "claim lost before it was cancelled", Tally.CLAIM_LOST)
        return keep

    # -- the in-flight cap (jobfence.work.fairness) ---------------------------------------------

    def _admit(self, rnd: _Round, owner: str) -> list[ItemKey]:
        """The keys this round may claim; wake the others again later (their rows stay pending)."""
        admitted: list[ItemKey] = []
        deferred: list[ItemKey] = []
        for tenant, keys in _by_tenant(list(rnd.message_of)).items():
            try:
                gate = self._scope(tenant).gate
                if gate is None:
                    admitted.extend(keys)
                    continue
                admission = gate.admit(keys, owner)
            except JobfenceError as exc:
                for key in keys:
                    self._reject(rnd, rnd.message_of[key], f"in-flight cap error: {safe_error(exc)}", "gate_error", key)
                continue
            admitted.extend(admission.admitted)
            deferred.extend(admission.deferred)
        if deferred:
            unsent = set(self._wakeups.send(deferred, delay_s=self._defer_delay_s))
            for key in deferred:
                if key in unsent:  # a redelivery of this very message tries again
                    self._reject(rnd, rnd.message_of[key], "deferred wake-up could not be sent", "wake_error", key)
                else:
                    self._ack(
                        rnd,
                        rnd.message_of[key],
                        key,
                        "deferred: the tenant is at its in-flight cap",
                        Tally.DEFERRED,
                        log=False,
                    )
        return admitted

    def _release(self, keys: list[ItemKey], owner: str) -> None:
        for tenant, tenant_keys in _by_tenant(keys).items():
            try:
                gate = self._scope(tenant).gate
                if gate is not None:
                    gate.release(tenant_keys, owner)
            except JobfenceError as exc:
                # the holds expire on their own (item-stale); the round's outcomes are already written
                self._logger.warning("in-flight holds not released", extra={"reason": safe_error(exc)})

    # -- running ----------------------------------------------------------------------------

    def _run(self, claimed: list[Claim], remaining_ms: int | None, rnd: _Round) -> None:
        timeout_s = float(self.timing.per_item_timeout_s)
        if remaining_ms is not None:
            # leave time to write the timeout rows before Lambda itself stops us
            timeout_s = max(1.0, min(timeout_s, (remaining_ms - self._margin) / 1000))
        pool = ThreadPoolExecutor(max_workers=len(claimed), thread_name_prefix="item")
        futures: dict[Future[str], Claim] = {}
        for claim in claimed:
            request = WorkRequest(claim.key, self.kind, claim.attempts, claim.payload)
            futures[pool.submit(self._measured, rnd.meter(claim.key), request, timeout_s)] = claim
        settled: set[Future[str]] = set()
        try:
            for future in _as_completed(futures, timeout_s):
                settled.add(future)
                claim = futures[future]
                error = future.exception()
                if error is None:
                    self._record(claim, Attempt.SUCCEEDED, future.result(), rnd)
                elif isinstance(error, PermanentFailure):
                    self._record(claim, Attempt.REJECTED, safe_error(error), rnd)
                else:
                    self._record(claim, Attempt.ERRORED, safe_error(error), rnd)
        finally:
            for future, claim in futures.items():
                if future not in settled:
                    # the row is the only trace of a timeout (seed 003, US-1552)
                    reason = f"timed out after {timeout_s:g} s (per-item limit)"
                    self._record(claim, Attempt.ERRORED, reason, rnd)
            pool.shutdown(wait=False, cancel_futures=True)

    def _measured(self, meter: Meter, request: WorkRequest, timeout_s: float) -> str:
        """The provider call, in its pool thread, counted on its item's meter (a new thread has no open meter)."""
        with measure(into=meter):
            return self._perform(request, timeout_s)

    def _record(self, claim: Claim, attempt: Attempt, detail: str, rnd: _Round) -> None:
        with measure(into=rnd.meter(claim.key)) as spent:
            self._record_spent(claim, attempt, detail, rnd, spent)

    def _record_spent(self, claim: Claim, attempt: Attempt, detail: str, rnd: _Round, spent: Meter) -> None:
        message_id = rnd.message_of[claim.key]
        delta = rnd.delta(claim.key.batch)
        try:
            store = self._scope(claim.key.tenant).store
            if attempt is Attempt.SUCCEEDED:
                if store.items.complete(claim, str(detail), spent):
                    delta.completed += 1
                    self._ack(rnd, message_id, claim.key, "completed", Tally.COMPLETED, log=False)
                    return
            elif attempt is Attempt.REJECTED or claim.attempts >= self.timing.attempts_cap:
                if store.items.fail(claim, detail, spent):
                    delta.failed += 1
                    self._ack(rnd, message_id, claim.key, f"failed at attempt {claim.attempts}: {detail}", Tally.FAILED)
                    return
            else:
                if store.items.release(claim, detail, spent):
                    rnd.retry.append(claim)
                    self._ack(
                        rnd,
                        message_id,
                        claim.key,
                        f"attempt {claim.attempts} failed, will retry: {detail}",
                        Tally.RETRIED,
                    )
                    return
        except JobfenceError as exc:
            # the row still says running: reclaim picks it up after item-stale
            self._reject(rnd, message_id, f"writing the outcome failed: {safe_error(exc)}", "write_error", claim.key)
            return
        # the claim token no longer matches: the reclaimer (or an operator) moved the row on
        self._ack(rnd, message_id, claim.key, "claim lost before the outcome was written", Tally.CLAIM_LOST)

    def _wake_retries(self, rnd: _Round) -> None:
        by_delay: dict[int, list[ItemKey]] = {}
        for claim in rnd.retry:
            by_delay.setdefault(self.timing.retry_delay(claim.attempts), []).append(claim.key)
        for delay, keys in by_delay.items():
            for key in self._wakeups.send(keys, delay_s=delay):
                # the item is pending: a redelivery of this very message claims it again
                self._reject(rnd, rnd.message_of[key], "retry wake-up could not be sent", "wake_error", key)

    def _roll_up(self, ref: BatchRef, delta: BatchDelta, result: RoundResult) -> None:
        rollup = self._tallies.add(ref, delta)  # kept even if the write (or the tenant's session) fails
        try:
            store = self._scope(ref.tenant).store
            store.rollups.write(ref, rollup)
            row = store.batches.batch(ref)
            result.count(Tally.ROLLUPS)
            if (
                row is not None
                and row.status is BatchStatus.OPEN
                and (
                    row.completed + row.failed >= row.total
                    or row.over_threshold
                    or (row.cancel_requested and (delta.completed or delta.failed))
                )
            ):
                # maybe done, or the batch crossed its failure threshold (the recount decides and fails its
                # pending items), or an item that was running when the batch was cancelled finished (the
                # recount cancels what is pending and may finalize it; claims cancelled unrun never recount,
                # so a cancelled batch of 10,000 items is not recounted per SQS batch): recount
                row = store.batches.finalize(ref, seen=row)
            if row is None or row.status.final:
                self._tallies.forget(ref)
        except JobfenceError as exc:
            # counters are only a hint: the reclaimer finalizes a quiet batch from its rows
            self._logger.warning(
                "roll-up failed", extra={"tenant": ref.tenant, "batch": ref.batch_id, "reason": safe_error(exc)}
            )

    # -- message outcomes ---------------------------------------------------------------------

    def _ack(self, rnd: _Round, message_id: str, key: ItemKey, reason: str, tally: Tally, log: bool = True) -> None:
        rnd.result.outcomes[message_id] = MessageOutcome(True, reason)
        rnd.result.count(tally)
        if log:
            self._logger.info("item", extra={"outcome": tally.value, "reason": reason, **key.log_ids()})

    def _reject(self, rnd: _Round, message_id: str, reason: str, why: str, key: ItemKey | None = None) -> None:
        """`why` names the refusal in the log line (malformed, claim_error, not_found, ...)."""
        rnd.result.outcomes[message_id] = MessageOutcome(False, reason)
        rnd.result.count(Tally.MESSAGE_FAILURES)
        self._logger.warning(
            "message failed",
            extra={
                "outcome": why,
                "reason": bounded(reason, MAX_LOGGED_CHARS),
                # SQS's ids are 36 characters; a forged event's may be any size: the log line stays bounded
                "message_id": bounded(message_id, MAX_LOGGED_CHARS),
                **(key.log_ids() if key else {}),
            },
        )


def _by_tenant(keys: Iterable[ItemKey]) -> dict[str, list[ItemKey]]:
    """`keys` grouped by tenant, in the order the tenants first appear."""
    out: dict[str, list[ItemKey]] = {}
    for key in keys:
        out.setdefault(key.tenant, []).append(key)
    return out


def _as_completed(futures: Iterable[Future[str]], timeout_s: float) -> Iterator[Future[str]]:
    """Futures as they finish, until `timeout_s` after the first call (all items started together)."""
    try:
        yield from as_completed(list(futures), timeout=timeout_s)
    except TimeoutError:
        return
