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
from typing import Any, Mapping

from jobfence.registry import Overlap
from jobfence.scheduled import ScheduledRunner
from jobfence.triggers import Trigger
from ops.sim.families.lease import LambdaContext, LeaseFamily
from ops.sim.faults import FaultKind
from ops.sim.kernel import START_MS, Actor
from ops.sim.world import MARGIN_MS, World

SPACING_MS = 20_000
SHORT_TIMEOUT_MS = 60_000


class BufferOneFamily(LeaseFamily):
    name = "lease_buffer_one"

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
        world.data["spec"] = dataclasses.replace(world.data["spec"], overlap=Overlap.BUFFER_ONE, interval_s=None)
        n = 0
        for tick in range(3):
            at = START_MS + tick * SPACING_MS
            for _ in range(world.rng.randint(1, 2)):
                fail_at = None
                if world.plan.on(FaultKind.JOB_FAILURE) and world.rng.random() < 0.3:
                    fail_at = world.rng.randrange(3)
                timeout_ms = SHORT_TIMEOUT_MS if world.rng.random() < 0.4 else world.data["spec"].timeout_s * 1000
                name = f"tick{tick}.{n}"
                n += 1
                world.data["watch"].tick(world.spawn(name, self._timed_tick(world, at, fail_at, timeout_ms),
                                                     at=at + world.rng.randrange(3_000)))

    def _timed_tick(self, world: World, scheduled_at: int, fail_at: int | None, timeout_ms: int):
        def run(actor: Actor) -> Any:
            spec = world.data["spec"]
            job = self._job(world, actor.clock, actor, fail_at)
            context = LambdaContext(actor.name, actor.clock, timeout_ms)
            return self._runner(world, actor.clock).run(spec, job, Trigger("scheduled", scheduled_at), context)

        return run

    def _runner(self, world: World, clock: Any) -> ScheduledRunner:
        runner = world.runner(clock)
        runner._invoke_self = lambda event: self._hand_over(world, event)  # noqa: SLF001 - the sim's own Lambda
        return runner

    def _hand_over(self, world: World, event: Mapping[str, Any]) -> None:
        """The async invoke: one delivery, sometimes two, each a fresh Lambda with the buffered trigger."""
        handed = world.data.setdefault("handed", 0)
        for copy in range(1 + (world.rng.random() < 0.3)):
            world.data["handed"] = handed + 1
            name = f"handover{handed}.{copy}"
            world.data["watch"].tick(world.spawn(name, self._buffered(world, int(event["tick"]))))

    def _buffered(self, world: World, tick: int):
        def run(actor: Actor) -> Any:
            spec = world.data["spec"]
            job = self._job(world, actor.clock, actor, None)
            context = LambdaContext(actor.name, actor.clock, spec.timeout_s * 1000)
            return self._runner(world, actor.clock).run(spec, job, Trigger("buffered", tick), context)

        return run

    def check(self, world: World) -> None:
        super().check(world)
        served = Counter(int(r["scheduled_at"]) for r in world.scan("runs") if r.get("trigger") == "buffered")
        for tick, runs in served.items():
            if runs > 1:
                world.violate(0, f"B1: the pending request of tick {tick - START_MS} ms was served {runs} times")
        lease = (world.scan("leases") or [{}])[0]
        if lease.get("pending_tick") is not None:
            world.violate(0, f"B2: a pending request ({lease['pending_tick'] - START_MS} ms) is left after the clean tick")
