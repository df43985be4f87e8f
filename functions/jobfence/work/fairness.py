"""The per-tenant in-flight cap of a pipeline: at most N of one tenant's items run at once.

A noisy tenant with a 10,000-item backlog must not hold every worker while a
quiet tenant's few items wait behind it. Two parts share that work:

- wake-ups carry the tenant as `MessageGroupId` on the standard queue (SQS fair
  queues), so SQS itself delivers a quiet tenant's messages ahead of a noisy
  tenant's backlog (`jobfence.work.wakeups`);
- this gate, before a worker claims: a tenant's items hold one entry each in a
  *holds* row, and a worker admits an item only while the tenant has fewer than
  `cap` live holds. The rest are deferred: their wake-ups are sent again with a
  delay and the messages acknowledged (the item rows stay pending, untouched).

One row per (tenant, pipeline), in the quota table (keys carry '#', which no
tenant id may, so they never meet a tenant's quota row):

    tenant = T#in_flight#KIND | holds {B#I: OWNER:UNTIL_MS} | version | updated_at

    admit     read (consistent); drop expired holds, add one per item not held yet while
              live < cap; write the whole map   condition version = v (or no row)   ADD version 1
    release   REMOVE holds.h ...    condition holds.h = OWNER:UNTIL (each) ADD version 1

Under the fault model: a hold is written with the round's owner nonce, so an
admit whose reply was lost (re-sent, refused by its own version bump) finds its
holds on the re-read and counts them as admitted; a release refused because a
hold is gone (expired and swept, or its own re-send) re-reads and removes only
what is still ours. A worker that dies holding holds costs the tenant those
slots until they expire: `hold_ms` is the pipeline's item-stale time, after
which the reclaimer re-drives the item anyway. The gate only orders work: the
conditional claim stays the exclusion, so a hold that is lost or doubled can
never run an item twice, only admit one more or one fewer for a while.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pynamodb.attributes import MapAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.models import Model

from jobfence.binding import ModelStore, bind
from jobfence.clock import Clock
from jobfence.dynamo import caller_reads, get_row, update_row
from jobfence.errors import StoreError
from jobfence.work.keys import ItemKey

GATE_ROUNDS = 3  # re-read and re-plan an admit or a release at most this often (races with other workers)


class _Holds(Model):
    class Meta:
        table_name = "unbound"

    tenant = UnicodeAttribute(hash_key=True)  # T#in_flight#KIND
    holds: MapAttribute[str, str] = MapAttribute(default=dict)  # raw map: hold id -> "owner:until_ms"
    version = NumberAttribute(default=0)
    updated_at = NumberAttribute()


@dataclass(frozen=True)
class Admission:
    """Which of a round's items may be claimed now, and which wait for a hold to free."""

    admitted: tuple[ItemKey, ...]
    deferred: tuple[ItemKey, ...]


def hold_id(key: ItemKey) -> str:
    return f"{key.batch_id}#{key.item_id}"


def new_owner() -> str:
    """A nonce naming one worker round's holds."""
    return uuid.uuid4().hex


class TenantGate(ModelStore):
    """At most `cap` of one tenant's items of pipeline `kind` in flight at once."""

    def __init__(self, table_name: str, clock: Clock, kind: str, cap: int, hold_ms: int) -> None:
        if cap < 1:
            raise ValueError("an in-flight cap is at least 1")
        self._model: Any = bind(_Holds, table_name)
        self._clock = clock
        self.kind = kind
        self.cap = cap
        self._hold_ms = hold_ms

    def row_key(self, tenant: str) -> str:
        return f"{tenant}#in_flight#{self.kind}"

    def live_holds(self, tenant: str) -> dict[str, str]:
        """The tenant's holds that have not expired (a strongly consistent read)."""
        holds, _ = self._read(tenant)
        now = self._clock.now_ms()
        return {h: v for h, v in holds.items() if _until(v) > now}

    def admit(self, keys: Sequence[ItemKey], owner: str) -> Admission:
        """Take a hold for as many of `keys` as their tenants' caps allow; raise `StoreError` on a store error."""
        admitted: list[ItemKey] = []
        deferred: list[ItemKey] = []
        by_tenant: dict[str, list[ItemKey]] = {}
        for key in keys:
            by_tenant.setdefault(key.tenant, []).append(key)
        for tenant, group in by_tenant.items():
            ok, wait = self._admit_tenant(tenant, group, owner)
            admitted += ok
            deferred += wait
        return Admission(tuple(admitted), tuple(deferred))

    def release(self, keys: Sequence[ItemKey], owner: str) -> None:
        """Give back `owner`'s holds of `keys` (another round's hold of the same item stays). Raises `StoreError`."""
        by_tenant: dict[str, set[str]] = {}
        for key in keys:
            by_tenant.setdefault(key.tenant, set()).add(hold_id(key))
        for tenant, ids in by_tenant.items():
            self._release_tenant(tenant, ids, owner)

    # -- one tenant ------------------------------------------------------------------------------

    def _read(self, tenant: str) -> tuple[dict[str, str], int | None]:
        row = get_row(self._model, self.row_key(tenant), what="reading in-flight holds")
        if row is None:
            return {}, None
        holds = row.holds.as_dict() if row.holds is not None else {}
        return {str(h): str(v) for h, v in holds.items()}, int(row.version)

    def _admit_tenant(self, tenant: str, keys: list[ItemKey], owner: str) -> tuple[list[ItemKey], list[ItemKey]]:
        m = self._model
        for _ in range(GATE_ROUNDS):
            holds, version = self._read(tenant)
            now = self._clock.now_ms()
            live = {h: v for h, v in holds.items() if _until(v) > now}
            # held already: by us (our own write, re-read), or by another round that woke the same item (a
            # duplicate wake-up): one item, one hold; the claim decides which of the two runs it
            ours = [k for k in keys if hold_id(k) in live]
            rest = [k for k in keys if k not in ours]
            room = max(0, self.cap - len(live))
            take, wait = rest[:room], rest[room:]
            if not take and len(live) == len(holds):
                return ours, wait  # nothing to write: full (or all ours already), nothing expired
            value = f"{owner}:{now + self._hold_ms}"
            new_holds = {**live, **{hold_id(k): value for k in take}}
            unchanged = m.version.does_not_exist() if version is None else (m.version == version)
            # refused: another worker (or our own re-sent write) moved the row; unanswered: it may or may not
            # have been applied. Either way the re-read says which holds are ours
            if not self._changed(
                m(self.row_key(tenant)),
                [m.holds.set(new_holds), m.version.add(1), m.updated_at.set(now)],
                unchanged,
                "taking in-flight holds",
            ):
                continue
            return ours + take, wait
        # raced on every round: what is not ours waits (its wake-up comes back later)
        holds, _ = self._read(tenant)
        now = self._clock.now_ms()
        ours = [k for k in keys if _until(holds.get(hold_id(k), "")) > now]
        return ours, [k for k in keys if k not in ours]

    @staticmethod
    def _changed(row: Any, actions: list[Any], condition: Any, what: str) -> bool:
        """One write of the tenant's row: False when refused or unanswered (the caller re-reads the row)."""
        try:
            return update_row(row, actions, condition, what, ours=caller_reads).applied
        except StoreError as exc:
            if exc.kind is not None and exc.kind.transient:
                return False
            raise

    def _release_tenant(self, tenant: str, ids: set[str], owner: str) -> None:
        m = self._model
        for _ in range(GATE_ROUNDS):
            holds, _ = self._read(tenant)
            mine = {h: holds[h] for h in ids if _owner(holds.get(h)) == owner}
            if not mine:
                return  # already given back (a re-sent release) or expired and swept
            condition = None
            for h, value in mine.items():
                part = m.holds[h] == value
                condition = part if condition is None else condition & part
            # refused or unanswered: a hold of ours is gone (expired and swept, or our re-sent release): re-read
            if not self._changed(
                m(self.row_key(tenant)),
                [*(m.holds[h].remove() for h in mine), m.version.add(1), m.updated_at.set(self._clock.now_ms())],
                condition,
                "releasing in-flight holds",
            ):
                continue
            return
        # raced on every round: the holds expire on their own


def _owner(value: str | None) -> str | None:
    return value.rsplit(":", 1)[0] if value else None


def _until(value: str) -> int:
    """A hold's expiry (ms); 0 for none."""
    try:
        return int(value.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return 0  # a malformed hold is treated as expired, so it never blocks a tenant
