"""The operator's batch cancel under faults, and invariant 17 (`jobfence.work.cancel`).

The pipeline scenario (`jobfence.testing.sim.pipeline`) spawns one canceller: at a random
instant (half the time in the first two minutes, while the batches are submitted and worked,
else in the faulty hour) it cancels one of the batches (the one the operator's retry-failed
aims at, half the time, so the two race), and in some runs asks again a while later (a re-sent
or repeated cancel, or one continuing a cancel that crashed).

Invariant 17, checked on every applied write:
    - the cancel recorded on a batch row is never changed or removed afterwards (the first asker kept);
    - no item completes after its batch's cancel was recorded unless it was already running then
      (under the very claim it was running under when the cancel was applied);
    - no failed item of a cancelled batch is reopened (retry-failed refuses it);
    - a batch whose row records a cancel finalizes `cancelled`, and only such a batch does.
And at the end (after the fault-free sweeps): every batch whose row records a cancel is `cancelled`,
with its `cancelled` counter equal to its rows. Quota conservation (every unit consumed by a
completed item or refunded exactly once, the books equal to the item rows) is invariant 7 of
`jobfence.testing.sim.batch_checks`, which counts cancelled items as it counts failed ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobfence.errors import JobfenceError
from jobfence.testing.sim.kernel import Actor
from jobfence.testing.sim.world import World
from jobfence.work import BatchRef

CANCELLER = "canceller"
INVARIANT = 17
RESEND_RATE = 0.5  # runs in which the canceller asks again later
RESEND_WITHIN_MS = 900_000


@dataclass
class _Recorded:
    """A batch's cancel as the watch saw it applied: when, and the claims running at that instant."""

    at: int
    running: frozenset[str]  # claim tokens of its items running when the cancel was applied
    late_claims: int = 0  # claims applied after it (each must end cancelled unrun)


@dataclass
class CancelWatch:
    """Invariant 17 over the applied writes of one run's batches and items tables."""

    batches: str  # the logical names of the work tables
    items: str
    recorded: dict[tuple[str, str], _Recorded] = field(default_factory=dict)

    def canceller(self, world: World, ref: BatchRef, operations: Callable[[Actor], Any]) -> Callable[[Actor], Any]:
        """The operator's cancel of `ref` (`operations(actor)` builds its `BatchOperations`), sometimes asked again."""
        again = world.rng.random() < RESEND_RATE
        later = world.rng.randrange(1, RESEND_WITHIN_MS)

        def run(actor: Actor) -> Any:
            ops = operations(actor)
            try:
                result = ops.cancel(ref, CANCELLER)
            except JobfenceError:  # a store error, or a batch already final: asked again below, when drawn
                result = None
            if again:
                world.kernel.park(actor, later)
                result = ops.cancel(ref, CANCELLER)
            return result

        return run

    def on_write(self, world: World, write: Any) -> None:
        for change in write.changes:
            before, after = change.before or {}, change.after or {}
            if change.table == self.batches and "#" not in str((after or before).get("tenant", "#")):
                self._batch(world, write, before, after)
            elif change.table == self.items and after:
                self._item(world, write, before, after)

    def _batch(self, world: World, write: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
        ref = (str((after or before).get("tenant")), str((after or before).get("batch_id")))
        was, now = before.get("cancel_requested_at"), after.get("cancel_requested_at")
        if was is None and now is not None:
            running = frozenset(
                str(i.get("claim_token"))
                for i in world.scan(self.items)
                if (i.get("tenant"), i.get("batch_id")) == ref and i.get("status") == "running"
            )
            self.recorded[ref] = _Recorded(write.at, running)
        elif was is not None and (now != was or after.get("cancel_requested_by") != before.get("cancel_requested_by")):
            world.violate(INVARIANT, f"{write.actor} changed the cancel recorded on batch {'/'.join(ref)}")
        final = ("finalized", "failed_threshold", "cancelled")
        finalized_now = after.get("status") in final and before.get("status") not in final
        if finalized_now and (after.get("status") == "cancelled") != (now is not None):
            world.violate(
                INVARIANT,
                f"{write.actor} finalized batch {'/'.join(ref)} {after.get('status')}, "
                f"its row {'records' if now is not None else 'records no'} cancel",
            )

    def _item(self, world: World, write: Any, before: dict[str, Any], after: dict[str, Any]) -> None:
        cancel = self.recorded.get((str(after.get("tenant")), str(after.get("batch_id"))))
        if cancel is None:
            return
        name = f"{after.get('tenant')}/{after.get('batch_id')}/{after.get('item_id')}"
        status, was = after.get("status"), before.get("status")
        if status == "running" and was != "running":
            cancel.late_claims += 1
        if status == "completed" and was != "completed" and str(after.get("claim_token")) not in cancel.running:
            world.violate(INVARIANT, f"{write.actor} completed {name}, claimed after its batch's cancel was recorded")
        if was == "failed" and status != "failed":
            world.violate(INVARIANT, f"{write.actor} moved failed {name} of a cancelled batch to {status}")

    def check(self, world: World) -> None:
        """At the end: every batch whose cancel was recorded is `cancelled`, its counter equal to its rows."""
        rows = {(b.get("tenant"), b.get("batch_id")): b for b in world.scan(self.batches)}
        items = world.scan(self.items)
        for ref in self.recorded:
            row = rows.get(ref) or {}
            cancelled = sum(
                1 for i in items if (i.get("tenant"), i.get("batch_id")) == ref and i.get("status") == "cancelled"
            )
            if row.get("status") != "cancelled" or int(row.get("cancelled") or 0) != cancelled:
                world.violate(
                    INVARIANT,
                    f"batch {'/'.join(ref)} was cancelled but ended {row.get('status')} with "
                    f"cancelled={row.get('cancelled')}, rows say {cancelled}",
                )
        world.data["cancelled_items"] = sum(1 for i in items if i.get("status") == "cancelled")
        world.data["cancelled_batches"] = len(self.recorded)
