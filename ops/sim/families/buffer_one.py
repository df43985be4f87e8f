"""The lease family under the buffer_one overlap policy: ticks that meet a live holder, hand-overs.

The job, runner, audit rows and faults of `ops.sim.families.lease`, with the
job's overlap policy `buffer_one` and no interval gate, and its three ticks
20 s apart (a run takes about a minute of simulated time), so later ticks meet
the live holder and record a pending request on the lease item. Each tick's
Lambda gets either the job's timeout or 60 s (drawn per tick): with 60 s the
holder is short of time when it finishes and hands the request over, by the
async invoke of its own function, here an actor spawned with the buffered
trigger (sometimes twice: an async invoke may be delivered more than once).

Checked, besides the lease family's invariants (`TermWatch` admits the pending
request write from any tick, and judges a holder's run once more by its row):
  B1 a pending request is served at most once: one buffered run row per tick
  B2 after the clean tick, no pending request is left (its acquire consumed it)
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping
from typing import Any

from jobfence.registry import Overlap
from jobfence.scheduled import ScheduledRunner
from jobfence.testing.sim.kernel import START_MS
from jobfence.testing.sim.world import MARGIN_MS, World
from jobfence.triggers import Trigger
from ops.sim.families.lease import LeaseFamily

SPACING_MS = 20_000
SHORT_TIMEOUT_MS = 60_000


class BufferOneFamily(LeaseFamily):
    name = "lease_buffer_one"
    copies = 2
    fail_rate = 0.3

    def setup(self, world: World) -> None:
        super().setup(world)
        world.data["spec"] = dataclasses.replace(world.data["spec"], overlap=Overlap.BUFFER_ONE, interval_s=None)

    def settle(self, world: World) -> None:
        """The lease family's clean tick, once every term ended on every actor's clock.

        With no gate there is no stamp to wait out: the clean tick waits for the
        last acquire plus the margin (an acquirer's clock may run ahead of true time).
        """
        lease = (world.scan("leases") or [{}])[0]
        ended = max(int(lease.get("acquired_at", 0)), int(lease.get("expires_at", 0))) + MARGIN_MS + 1_000
        world.kernel.clock.set(max(world.kernel.clock.now_ms(), ended))
        super().settle(world)

    def _spawn_ticks(self, world: World, spacing_ms: int) -> None:
        super()._spawn_ticks(world, SPACING_MS)

    def _tick(self, world: World, scheduled_at: int, fail_at: int | None):
        timeout_ms = SHORT_TIMEOUT_MS if world.rng.random() < 0.4 else None
        return self._invocation(world, Trigger("scheduled", scheduled_at), fail_at, timeout_ms)

    def _runner(self, world: World, clock: Any) -> ScheduledRunner:
        return world.runner(clock, invoke_self=lambda event: self._hand_over(world, event))

    def _hand_over(self, world: World, event: Mapping[str, Any]) -> None:
        """The async invoke: one delivery, sometimes two, each a fresh Lambda with the buffered trigger."""
        handed = world.data.setdefault("handed", 0)
        for copy in range(1 + (world.rng.random() < 0.3)):
            world.data["handed"] = handed + 1
            name = f"handover{handed}.{copy}"
            delivery = self._invocation(world, Trigger("buffered", int(event["tick"])), None)
            world.data["watch"].tick(world.spawn(name, delivery))

    def check(self, world: World) -> None:
        super().check(world)
        served = Counter(int(r["scheduled_at"]) for r in world.scan("runs") if r.get("trigger") == "buffered")
        for tick, runs in served.items():
            if runs > 1:
                world.violate(0, f"B1: the pending request of tick {tick - START_MS} ms was served {runs} times")
        lease = (world.scan("leases") or [{}])[0]
        if lease.get("pending_tick") is not None:
            world.violate(
                0, f"B2: a pending request ({lease['pending_tick'] - START_MS} ms) is left after the clean tick"
            )
