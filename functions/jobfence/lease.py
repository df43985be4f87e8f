"""The fenced job lease: every DynamoDB expression of the leases table lives here.

One item per job:

    job (key) | holder | lease_id | fence | acquired_at | renewed_at | expires_at | last_started_at

Timeline of one term (times in epoch ms; ttl = the function timeout + 60 s by default):

    t0        acquire   holder=A, lease_id=L1, fence=n+1, expires_at=t0+ttl, last_started_at=t0
    t0+5m     renew     condition lease_id=L1 -> expires_at=t0+5m+ttl          (before batch 2)
    ...                 A trusts its term until renewed_at + ttl - margin only
    t0+9m     release   condition lease_id=L1 -> REMOVE holder, lease_id, expires_at
                        (fence and last_started_at stay: "no holder" means released)

If A dies instead, the item keeps holder=A until expires_at; the first acquire
after that takes over with fence n+2 and a new lease_id, and every renew,
release or fenced write of A is rejected by DynamoDB itself because it is
conditioned on lease_id=L1.

Acquire folds the interval gate (seed 001) into the same conditional write,
and `peek` is the cheap eventually consistent pre-gate: it may let a tick
through that the conditional write then refuses, never the other way round.
Every write here may be applied with its reply lost and then sent again (by
botocore, or by `jobfence.dynamo.write` here). Each is built so the second copy is
harmless and its refusal is read from the item it saw:

    acquire   the lease_id is drawn before the call, so a re-sent acquire that is
              refused and sees lease_id = ours is our own term: success. A copy
              sent after a later acquire is refused (acquired_at only grows). A
              refusal after an earlier try may have been applied names the term
              that try would have made (`LeaseRefused.unanswered`), or raises
              `TermOvertaken` when the item's copy shows it was taken over. When
              every try ends unanswered (lost replies, 5xx), one consistent read
              finds the term if one of them was applied.
    renew     conditioned on lease_id only: the re-sent copy succeeds again.
    release   refused and the item shows our fence with no holder, or the next
              fence taken while our term was still live (only possible after our
              release): our release landed.

The item a refusal saw is the old image DynamoDB returns with it; where an
implementation returns none (dynalite), one consistent read classifies it.
The item also carries the rule's recorded enable/disable toggles
(`rule_toggles`, written by the lease store's `jobfence.lease_toggles.RuleToggles`; no write here
reads or removes them).

A catch-up or buffered run for a past tick T adds one condition to the same
acquire (docs/guarantees.md): a catch-up `acquired_at < T - TICK_SLACK_MS` (no
term started since T; a release keeps `acquired_at`), a buffered hand-over
`pending_tick = T` (its request is still there). Every acquire removes
`pending_tick`: the new term serves the one request a `buffer_one` tick left
with `request_pending` when it met a live holder, which the holder's release
reads back (ALL_OLD); a hand-over sets `served_tick = T`: a late copy of T never asks again.

The lease item also names the run holding the term (`run_id`), and an acquire
copies the term it replaces into `prev_holder`, `prev_run_id`,
`prev_acquired_at`, `prev_expires_at` (DynamoDB reads every operand from the
item before the update). A replaced term that still had a holder was never
released: the runner records its run as `died` (`Lease.predecessor`). The copy
lives on the item, so even a re-sent acquire that only sees its own term
learns it.

A copy stays *unsettled* (`prev_holder` names a holder) until its run is
recorded; then `settle` clears `prev_holder`. An acquire is refused while the
copy it would overwrite is unsettled (`PredecessorUnrecorded`): the caller
records that run, settles, and acquires again. So a chain of crashes (a runner
dies after its acquire, before recording the term it replaced, and the next one
dies the same way) loses no term: every copy is recorded before it is replaced.

What an item (or a refusal's old image) says, the term's types and the gate's
arithmetic are read in `jobfence.lease_item`; this module writes.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jobfence.capacity import meter_client
from jobfence.clock import Clock
from jobfence.dynamo import Applied, caller_reads, deserialized, raise_store_error, write
from jobfence.errors import LeaseLost, Skip, StoreError, TermOvertaken
from jobfence.lease_item import (
    NONE,
    PENDING,
    SERVED,
    TICK_SLACK_MS,
    LeaseState,
    Pending,
    Term,
    acquire_refusal,
    gate_cutoff,
    lease_state,
    pending_refusal,
    predecessor_term,
    started_since,
    unreleased_term,
)
from jobfence.transaction import FencedTransaction

# -- the conditions and updates of the leases table, each a named part (the contract, in DynamoDB's words) --------

_NAMES = {  # the attribute names the expressions use (#name -> attribute)
    "#holder": "holder",
    "#exp": "expires_at",
    "#acquired": "acquired_at",
    "#started": "last_started_at",
    "#prev": "prev_holder",
    "#pending": PENDING,
}
_TOKEN = re.compile(r"[#:]\w+")

# acquire: the lease is free (never held, released, or the holder's term ran out) ...
FREE = "(attribute_not_exists(#holder) OR #exp < :now)"
# ... the copy this write overwrites is settled (its run recorded, or it named no run), so no unreleased term is
# forgotten ...
PREVIOUS_SETTLED = "(attribute_not_exists(#prev) OR #prev = :none OR prev_run_id = :none)"
# ... and no term was taken after this request was made: a copy re-sent (or delivered) late, after a pause past the
# term it asked for, never makes a second, already expired term of the same run
NOT_ACQUIRED_SINCE_SENT = "(attribute_not_exists(#acquired) OR #acquired <= :now)"
# the interval gate (seed 001): the last start is at or before the cutoff
GATE_OPEN = "(attribute_not_exists(#started) OR #started <= :cutoff)"
# a catch-up: no term started since the tick it stands in for
NO_TERM_SINCE_TICK = "(attribute_not_exists(#acquired) OR #acquired < :since)"
# a buffered hand-over: its pending request is still on the item
STILL_PENDING = "#pending = :pending"
# renew, release and every fenced write: the term is ours
OUR_TERM = "lease_id = :lease_id"
# request_pending: a holder whose term has not run out, that started before the tick (else it is this tick's run),
# and the tick was not served already
LIVE_HOLDER = "attribute_exists(#holder) AND #exp >= :now"
HOLDER_STARTED_BEFORE_TICK = "#acquired < :since"
TICK_NOT_SERVED = f"NOT {SERVED} >= :tick"

# the new term, and the term it replaces copied from the old item (operands read it before the update): an unreleased
# one died; kept on the item so a re-sent copy of the acquire still sees it
NEW_TERM = (
    "#holder = :holder, lease_id = :lease_id, run_id = :run_id, #acquired = :now, renewed_at = :now, #exp = :exp,"
    " ttl_ms = :ttl"
)
PREVIOUS_COPIED = (
    "#prev = if_not_exists(#holder, :none), prev_run_id = if_not_exists(run_id, :none),"
    " prev_acquired_at = if_not_exists(#acquired, :zero), prev_expires_at = if_not_exists(#exp, :zero)"
)
START_STAMPED = "#started = :now"
PENDING_SERVED = f"{SERVED} = :pending"


def new_id() -> str:
    """A fresh random id (the default id source; the simulator injects a seeded one)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Lease:
    """One holder's term on one job."""

    job: str
    holder: str
    lease_id: str
    fence: int
    acquired_at: int
    renewed_at: int
    expires_at: int
    ttl_ms: int
    run_id: str | None = None  # the run holding this term (None for a bare acquire)
    predecessor: Term | None = None  # set on acquire: the term this one took over unreleased

    def trusted_until(self, safety_margin_ms: int) -> int:
        """After this instant the holder must not start new work (the trust window)."""
        return self.renewed_at + self.ttl_ms - safety_margin_ms


class LeaseStore:
    """Acquire, renew, release and fence writes on the leases table."""

    def __init__(self, client: Any, table_name: str, clock: Clock, ids: Callable[[], str] = new_id) -> None:
        self._client = meter_client(client)  # its calls count toward the run's units (`jobfence.capacity`)
        self._table = table_name
        self._clock = clock
        self._ids = ids

    # -- pre-gate ---------------------------------------------------------------------------

    def peek(self, job: str) -> LeaseState:
        """One eventually consistent read, no write. Racy on purpose; acquire is the authority."""
        try:
            item = self._client.get_item(TableName=self._table, Key=_key(job), ConsistentRead=False).get("Item")
        except Exception as exc:
            raise_store_error(exc, f"reading the lease of {job!r}")
        return lease_state(item)

    @staticmethod
    def would_skip(
        state: LeaseState,
        now_ms: int,
        interval_ms: int | None,
        since_tick: int | None = None,
        pending_tick: int | None = None,
    ) -> Skip | None:
        """The skip the pre-gate predicts for this state, or None to go on and acquire.

        `since_tick` / `pending_tick`: a catch-up's / hand-over's tick, served once a term started since / its
        request is gone.
        """
        if since_tick is not None and started_since(state.acquired_at, since_tick):
            return Skip.SERVED
        if pending_tick is not None and state.pending_tick != pending_tick:
            return Skip.SERVED
        if state.holder and state.expires_at is not None and state.expires_at >= now_ms:
            return Skip.LEASED
        if (
            interval_ms
            and state.last_started_at is not None
            and state.last_started_at > gate_cutoff(now_ms, interval_ms)
        ):
            return Skip.INTERVAL
        return None

    def read(self, job: str) -> dict[str, Any]:
        """The lease item, strongly consistent, as plain values (`{}` if the job never ran)."""
        try:
            item = self._client.get_item(TableName=self._table, Key=_key(job), ConsistentRead=True).get("Item")
        except Exception as exc:
            raise_store_error(exc, f"reading the lease of {job!r}")
        return deserialized(item)

    # -- term -------------------------------------------------------------------------------

    def acquire(
        self,
        job: str,
        holder: str,
        ttl_ms: int,
        interval_ms: int | None = None,
        run_id: str | None = None,
        since_tick: int | None = None,
        pending_tick: int | None = None,
    ) -> Lease:
        """Take the lease (and pass the interval gate) in one conditional write.

        Raises `LeaseHeld` or `IntervalNotElapsed`, classified from the item the
        refusal saw, or `PredecessorUnrecorded` when the lease is free but the
        copy of the term before it is not yet settled. A refusal that shows our own lease_id is our own earlier
        copy of this write (applied, reply lost): the term is ours. On success
        `Lease.predecessor` is the term taken over unreleased, if any. `since_tick` /
        `pending_tick`: a catch-up / hand-over (module docstring); refused so, `RequestServed`.
        """
        now = self._clock.now_ms()
        lease_id = self._ids()  # drawn once: every copy of this write carries it
        values = {
            ":holder": _s(holder),
            ":lease_id": _s(lease_id),
            ":run_id": _s(run_id or NONE),
            ":now": _n(now),
            ":exp": _n(now + ttl_ms),
            ":ttl": _n(ttl_ms),
            ":one": _n(1),
            ":none": _s(NONE),
            ":zero": _n(0),
        }
        conditions = [FREE, PREVIOUS_SETTLED, NOT_ACQUIRED_SINCE_SENT]
        sets = [NEW_TERM, PREVIOUS_COPIED]
        if interval_ms:
            values[":cutoff"] = _n(gate_cutoff(now, interval_ms))
            conditions.append(GATE_OPEN)
            sets.append(START_STAMPED)  # stamped before the run
        if since_tick is not None:  # a catch-up: no term started since the tick it stands in for
            values[":since"] = _n(since_tick - TICK_SLACK_MS)
            conditions.append(NO_TERM_SINCE_TICK)
        if pending_tick is not None:  # a hand-over: only while its request is there, and recorded served
            values[":pending"] = _n(pending_tick)
            conditions.append(STILL_PENDING)
            sets.append(PENDING_SERVED)
        # every acquire removes the pending request: the new term serves it
        request = self._request(
            job,
            f"SET {', '.join(sets)} REMOVE #pending ADD fence :one",
            " AND ".join(conditions),
            values,
            ReturnValues="ALL_NEW",
        )
        doing = f"acquiring the lease of {job!r}"
        try:  # a refusal showing our own lease_id is our own acquire, applied before its reply was lost
            outcome = write(
                self._client, "update_item", request, doing, ours=lambda seen: seen.get("lease_id") == lease_id
            )
        except StoreError as unanswered:
            if not unanswered.unanswered:
                raise
            try:  # no answer, and a try may have been applied: one consistent read says if it was
                seen = deserialized(self._consistent_item(job))
            except Exception:  # noqa: BLE001 - the acquire's own error is the one to report
                raise unanswered from None
            if seen.get("lease_id") == lease_id:
                return _lease(seen)
            self._raise_if_overtaken(job, seen, run_id, holder, now, ttl_ms)
            raise  # no term of ours is held
        if isinstance(outcome, Applied):
            return _lease(outcome.item)
        seen = outcome.item
        self._raise_if_overtaken(job, seen, run_id, holder, now, ttl_ms)
        refusal = acquire_refusal(job, seen, now, interval_ms, since_tick, pending_tick)
        if run_id and outcome.maybe_ours:  # it may also have been taken over and recorded since: the runner looks
            refusal.unanswered = Term(job, run_id, holder, 0, now, now + ttl_ms)
        raise refusal from None

    @staticmethod
    def _raise_if_overtaken(
        job: str, seen: Mapping[str, Any], run_id: str | None, holder: str, now: int, ttl_ms: int
    ) -> None:
        """`TermOvertaken` when our own acquire was applied and taken over (expired) before its retry saw it."""
        if run_id and seen.get("prev_run_id") == run_id:
            raise TermOvertaken(job, Term(job, run_id, holder, int(seen["fence"]) - 1, now, now + ttl_ms)) from None

    def renew(self, lease: Lease) -> Lease:
        """Extend this term. Conditioned on the term only, so a retried renewal still succeeds."""
        now = self._clock.now_ms()
        request = self._request(
            lease.job,
            "SET renewed_at = :now, expires_at = :exp",
            OUR_TERM,
            {":now": _n(now), ":exp": _n(now + lease.ttl_ms), ":lease_id": _s(lease.lease_id)},
            ReturnValues="ALL_NEW",
        )
        # a renewal re-applies, so its refusal is never its own earlier try: another term's
        outcome = write(self._client, "update_item", request, f"renewing the lease of {lease.job!r}", ours=caller_reads)
        if not isinstance(outcome, Applied):
            raise LeaseLost(lease.job, lease.lease_id, outcome.item)
        return _lease(outcome.item)

    def release(self, lease: Lease) -> int | None:
        """End this term. The item stays: it carries the fence and the gate stamp.

        Returns the tick of a pending request on the item (read from ALL_OLD: no extra read), or None.
        """
        request = self._request(
            lease.job,
            "REMOVE holder, lease_id, expires_at",
            OUR_TERM,
            {":lease_id": _s(lease.lease_id)},
            ReturnValues="ALL_OLD",
        )
        landed = functools.partial(_release_landed, lease)
        outcome = write(self._client, "update_item", request, f"releasing the lease of {lease.job!r}", ours=landed)
        if not isinstance(outcome, Applied):
            raise LeaseLost(lease.job, lease.lease_id, outcome.item)
        return outcome.item.get(PENDING)  # ALL_OLD, or (our own release landed earlier) the item as it is now

    def request_pending(self, job: str, tick_ms: int, interval_ms: int | None) -> Pending:
        """A `buffer_one` tick met a live holder: record one pending request on the lease item.

        One conditional write, idempotent (a copy sets the same earliest request); a refusal reads the item.
        """
        now = self._clock.now_ms()
        values = {":now": _n(now), ":tick": _n(tick_ms), ":since": _n(tick_ms - TICK_SLACK_MS)}
        conditions = [LIVE_HOLDER, HOLDER_STARTED_BEFORE_TICK, TICK_NOT_SERVED]
        if interval_ms:  # and the gate would have let the tick run
            values[":cutoff"] = _n(gate_cutoff(tick_ms, interval_ms))
            conditions.append(GATE_OPEN)
        request = self._request(job, "SET #pending = if_not_exists(#pending, :tick)", " AND ".join(conditions), values)
        outcome = write(
            self._client, "update_item", request, f"recording a pending request on {job!r}", ours=caller_reads
        )
        return Pending.RECORDED if isinstance(outcome, Applied) else pending_refusal(outcome.item, tick_ms, now)

    def settle(self, term: Term) -> None:
        """Mark the `prev_*` copy of `term` settled: its run is recorded (`died`, or finished).

        Conditioned on the copy naming this run, so a re-sent copy succeeds again.
        A refusal means a later acquire replaced the copy, which it can only do
        once the copy was settled: nothing to do.
        """
        request = self._request(
            term.job, "SET #prev = :none", "prev_run_id = :run_id", {":none": _s(NONE), ":run_id": _s(term.run_id)}
        )
        write(self._client, "update_item", request, f"settling a replaced term of {term.job!r}", ours=caller_reads)

    # -- fenced writes ----------------------------------------------------------------------

    def fence_check(self, lease: Lease) -> dict[str, Any]:
        """The `ConditionCheck` entry (its body) that makes a transaction valid only inside this live term."""
        return {
            "TableName": self._table,
            "Key": _key(lease.job),
            "ConditionExpression": f"{OUR_TERM} AND expires_at > :now",
            "ExpressionAttributeValues": {
                ":lease_id": {"S": lease.lease_id},
                ":now": {"N": str(self._clock.now_ms())},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def transaction(self, lease: Lease) -> FencedTransaction:
        """A pynamodb transaction whose first entry is `fence_check(lease)`: it commits only inside this term.

        Use it as a context manager (it commits on a clean exit); see `jobfence.transaction`.
        """
        return FencedTransaction(lease.job, lease.lease_id, self.fence_check(lease), self._client)

    # -- reading (operators, the dead-run sweep) --------------------------------------------

    def all(self) -> list[dict[str, Any]]:
        """Every lease item (one per job ever run). For the operator CLI; the table is tiny."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self._table, "ConsistentRead": True}
        while True:
            try:
                page = self._client.scan(**kwargs)
            except Exception as exc:
                raise_store_error(exc, "listing the leases")
            items.extend(deserialized(i) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return sorted(items, key=lambda i: i["job"])
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _request(
        self, job: str, update: str, condition: str, values: Mapping[str, Any], **options: Any
    ) -> dict[str, Any]:
        """An UpdateItem of `job`'s item whose refusal returns the item it saw; it names exactly the
        attribute names and values its expressions use (DynamoDB refuses an unused one)."""
        used = set(_TOKEN.findall(f"{update} {condition}"))
        names = {k: v for k, v in _NAMES.items() if k in used}
        return dict(
            TableName=self._table,
            Key=_key(job),
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeValues={k: v for k, v in values.items() if k in used},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
            **({"ExpressionAttributeNames": names} if names else {}),
            **options,
        )

    def _consistent_item(self, job: str) -> Mapping[str, Any] | None:
        return self._client.get_item(TableName=self._table, Key=_key(job), ConsistentRead=True).get("Item")


def _release_landed(lease: Lease, seen: Mapping[str, Any]) -> bool:
    """Whether a refused release finds our own earlier copy applied.

    Our fence with no holder: nobody acquired since. The next fence, taken at an
    instant our term was still live: that acquire's condition (no holder, or
    expired) can only have held because our release had landed.
    """
    fence = int(seen.get("fence", -1))
    if fence == lease.fence:
        return not seen.get("lease_id")
    return fence == lease.fence + 1 and int(seen.get("acquired_at", lease.expires_at)) < lease.expires_at


def _key(job: str) -> dict[str, Any]:
    return {"job": _s(job)}


def _s(text: str) -> dict[str, str]:
    return {"S": text}


def _n(number: int) -> dict[str, str]:
    return {"N": str(number)}


def _lease(plain: Mapping[str, Any]) -> Lease:
    return Lease(
        job=plain["job"],
        holder=plain["holder"],
        lease_id=plain["lease_id"],
        fence=int(plain["fence"]),
        acquired_at=int(plain["acquired_at"]),
        renewed_at=int(plain["renewed_at"]),
        expires_at=int(plain["expires_at"]),
        ttl_ms=int(plain["ttl_ms"]),
        run_id=None if plain.get("run_id", NONE) == NONE else str(plain["run_id"]),
        predecessor=predecessor_term(plain),
    )


__all__ = [  # the term's types and the item's readings live in `jobfence.lease_item`, importable here too
    "Lease",
    "LeaseState",
    "LeaseStore",
    "Pending",
    "Term",
    "gate_cutoff",
    "new_id",
    "predecessor_term",
    "started_since",
    "unreleased_term",
]
