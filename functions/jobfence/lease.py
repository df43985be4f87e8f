"""The fenced job lease: every DynamoDB expression of the leases table lives here.

One item per job:

    job (key) | holder | lease_id | fence | acquired_at | renewed_at | expires_at | last_started_at

Timeline of one term (times in epoch ms; ttl = 30 min by default):

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
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from botocore.exceptions import ClientError

from jobfence.clock import Clock
from jobfence.errors import ConditionFailed, IntervalNotElapsed, LeaseHeld, LeaseLost, StoreError
from jobfence.registry import INTERVAL_TOLERANCE

CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"


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

    def trusted_until(self, safety_margin_ms: int) -> int:
        """After this instant the holder must not start new work (the trust window)."""
        return self.renewed_at + self.ttl_ms - safety_margin_ms


@dataclass(frozen=True)
class LeaseState:
    """What the pre-gate read saw (possibly stale)."""

    holder: str | None
    expires_at: int | None
    last_started_at: int | None
    fence: int


def gate_cutoff(now_ms: int, interval_ms: int) -> int:
    """A job may start again when its last start is at or before this instant."""
    return now_ms - int(interval_ms * INTERVAL_TOLERANCE)


class LeaseStore:
    """Acquire, renew, release and fence writes on the leases table."""

    def __init__(self, client: Any, table_name: str, clock: Clock) -> None:
        self._client = client
        self._table = table_name
        self._clock = clock

    # -- pre-gate ---------------------------------------------------------------------------

    def peek(self, job: str) -> LeaseState:
        """One eventually consistent read, no write. Racy on purpose; acquire is the authority."""
        try:
            item = self._client.get_item(TableName=self._table, Key=_key(job), ConsistentRead=False).get("Item")
        except ClientError as exc:
            raise StoreError(f"reading the lease of {job!r} failed: {_code(exc)}") from exc
        return _state(item)

    @staticmethod
    def would_skip(state: LeaseState, now_ms: int, interval_ms: int | None) -> type[Exception] | None:
        """The skip the pre-gate predicts for this state, or None to go on and acquire."""
        if state.holder and state.expires_at is not None and state.expires_at >= now_ms:
            return LeaseHeld
        if interval_ms and state.last_started_at is not None and state.last_started_at > gate_cutoff(now_ms, interval_ms):
            return IntervalNotElapsed
        return None

    # -- term -------------------------------------------------------------------------------

    def acquire(self, job: str, holder: str, ttl_ms: int, interval_ms: int | None = None) -> Lease:
        """Take the lease (and pass the interval gate) in one conditional write.

        Raises `LeaseHeld` or `IntervalNotElapsed`, classified from the competing
        item that DynamoDB returns with the refusal.
        """
        now = self._clock.now_ms()
        lease_id = str(uuid.uuid4())
        names = {"#holder": "holder", "#exp": "expires_at"}
        values: dict[str, Any] = {
            ":holder": {"S": holder},
            ":lease_id": {"S": lease_id},
            ":now": {"N": str(now)},
            ":exp": {"N": str(now + ttl_ms)},
            ":ttl": {"N": str(ttl_ms)},
            ":one": {"N": "1"},
        }
        # free: never held, released, or the holder's term ran out
        condition = "(attribute_not_exists(#holder) OR #exp < :now)"
        update = (
            "SET #holder = :holder, lease_id = :lease_id, acquired_at = :now, renewed_at = :now, "
            "#exp = :exp, ttl_ms = :ttl ADD fence :one"
        )
        if interval_ms:
            # gate: the last start is at least 0.9 x interval ago; stamped before the run
            names["#started"] = "last_started_at"
            values[":cutoff"] = {"N": str(gate_cutoff(now, interval_ms))}
            condition += " AND (attribute_not_exists(#started) OR #started <= :cutoff)"
            update = update.replace(" ADD", ", #started = :now ADD")
        try:
            out = self._client.update_item(
                TableName=self._table,
                Key=_key(job),
                UpdateExpression=update,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if _code(exc) != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"acquiring the lease of {job!r} failed: {_code(exc)}") from exc
            old = _plain(exc.response.get("Item"))
            if old.get("holder") and int(old.get("expires_at", 0)) >= now:
                raise LeaseHeld(job, old) from None
            raise IntervalNotElapsed(job, old) from None
        return _lease(out["Attributes"])

    def renew(self, lease: Lease) -> Lease:
        """Extend this term. Conditioned on the term only, so a retried renewal still succeeds."""
        now = self._clock.now_ms()
        try:
            out = self._client.update_item(
                TableName=self._table,
                Key=_key(lease.job),
                UpdateExpression="SET renewed_at = :now, expires_at = :exp",
                ConditionExpression="lease_id = :lease_id",
                ExpressionAttributeValues={
                    ":now": {"N": str(now)},
                    ":exp": {"N": str(now + lease.ttl_ms)},
                    ":lease_id": {"S": lease.lease_id},
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if _code(exc) == CONDITIONAL_CHECK_FAILED:
                raise LeaseLost(lease.job, lease.lease_id, _plain(exc.response.get("Item"))) from None
            raise StoreError(f"renewing the lease of {lease.job!r} failed: {_code(exc)}") from exc
        return _lease(out["Attributes"])

    def release(self, lease: Lease) -> None:
        """End this term. The item stays: it carries the fence and the gate stamp."""
        try:
            self._client.update_item(
                TableName=self._table,
                Key=_key(lease.job),
                UpdateExpression="REMOVE holder, lease_id, expires_at",
                ConditionExpression="lease_id = :lease_id",
                ExpressionAttributeValues={":lease_id": {"S": lease.lease_id}},
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if _code(exc) != CONDITIONAL_CHECK_FAILED:
                raise StoreError(f"releasing the lease of {lease.job!r} failed: {_code(exc)}") from exc
            old = _plain(exc.response.get("Item"))
            # A retried release whose first response was lost: same fence, nobody holds it.
            if not old.get("lease_id") and int(old.get("fence", -1)) == lease.fence:
                return
            raise LeaseLost(lease.job, lease.lease_id, old) from None

    # -- fenced writes ----------------------------------------------------------------------

    def fence_check(self, lease: Lease) -> dict[str, Any]:
        """The ConditionCheck item that makes a transaction valid only inside this live term."""
        return {
            "ConditionCheck": {
                "TableName": self._table,
                "Key": _key(lease.job),
                "ConditionExpression": "lease_id = :lease_id AND expires_at > :now",
                "ExpressionAttributeValues": {
                    ":lease_id": {"S": lease.lease_id},
                    ":now": {"N": str(self._clock.now_ms())},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }

    def fenced_write(self, lease: Lease, items: Sequence[Mapping[str, Any]]) -> None:
        """Apply `items` (TransactWriteItems entries) only while this term is live.

        Raises `LeaseLost` when the lease check fails, `ConditionFailed` when one of
        the caller's own conditions fails (carrying that item's old image).
        """
        if not 1 <= len(items) <= 99:
            raise ValueError("a fenced write takes 1..99 items (one slot is the lease check)")
        try:
            self._client.transact_write_items(TransactItems=[self.fence_check(lease), *items])
        except ClientError as exc:
            if _code(exc) != TRANSACTION_CANCELED:
                raise StoreError(f"fenced write on {lease.job!r} failed: {_code(exc)}") from exc
            reasons = exc.response.get("CancellationReasons") or []
            for index, reason in enumerate(reasons):
                if reason.get("Code") != "ConditionalCheckFailed":
                    continue
                if index == 0:
                    raise LeaseLost(lease.job, lease.lease_id, _plain(reason.get("Item"))) from None
                raise ConditionFailed(index - 1, _plain(reason.get("Item"))) from None
            codes = ",".join(str(r.get("Code")) for r in reasons)
            raise StoreError(f"fenced write on {lease.job!r} was cancelled: {codes}") from exc

    # -- reading (operators) ----------------------------------------------------------------

    def all(self) -> list[dict[str, Any]]:
        """Every lease item (one per job ever run). For the operator CLI; the table is tiny."""
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self._table}
        while True:
            page = self._client.scan(**kwargs)
            items.extend(_plain(i) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return sorted(items, key=lambda i: i["job"])
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _key(job: str) -> dict[str, Any]:
    return {"job": {"S": job}}


def _code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "Unknown")


def _plain(item: Mapping[str, Any] | None) -> dict[str, Any]:
    """A low-level DynamoDB item as plain Python values (numbers as int)."""
    out: dict[str, Any] = {}
    for name, value in (item or {}).items():
        (kind, raw), = value.items()
        out[name] = int(raw) if kind == "N" else raw
    return out


def _state(item: Mapping[str, Any] | None) -> LeaseState:
    plain = _plain(item)
    return LeaseState(
        holder=plain.get("holder"),
        expires_at=plain.get("expires_at"),
        last_started_at=plain.get("last_started_at"),
        fence=int(plain.get("fence", 0)),
    )


def _lease(attributes: Mapping[str, Any]) -> Lease:
    plain = _plain(attributes)
    return Lease(
        job=plain["job"],
        holder=plain["holder"],
        lease_id=plain["lease_id"],
        fence=int(plain["fence"]),
        acquired_at=int(plain["acquired_at"]),
        renewed_at=int(plain["renewed_at"]),
        expires_at=int(plain["expires_at"]),
        ttl_ms=int(plain["ttl_ms"]),
    )


__all__ = ["Lease", "LeaseState", "LeaseStore", "gate_cutoff"]
