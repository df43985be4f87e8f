"""One scheduled job under faults: duplicate and later ticks, run by the real runner, judged on its terms.

A scenario (a simulator family) of one catalog job, built by its own factory,
run by the real `ScheduledRunner` on the real `LeaseStore` and `RunStore`.
Around each batch the simulator adds one fenced write of an audit row (the
batch's fence and index) through `RunContext.transaction()`: the proof that a
holder was live when it started that batch.

Actors: ticks at t0, t0 + interval and t0 + 2 x interval, each fired one to
three times at once (duplicate EventBridge deliveries). A tick may be told to
fail in one of its batches (the job's own error).

Checked: 1-4, 12 and 13 through `jobfence.testing.sim.terms.TermWatch`; besides, on every
applied write, 1: an audit row is written only under the lease's current fence
(a holder whose term was taken over writes nothing fenced); on every write sent,
2: the job writes its catalog tables only in `ctx.transaction()` (the kit's
fence, `jobfence.testing.fence`: a breach fails every seed that makes that
write, naming the call); and liveness: a clean tick after every term ended
runs, and then the subclass's `_done`.

Subclasses: `jobfence.testing.sim.job` (any job of any catalog, for `jobfence.testing.simulate`)
and an operator's families over its own catalog (this repository's `ops.sim.families.lease`).
Nothing here imports an app: the subclass names its catalog (`registry`) and job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from jobfence.config import ScheduledSettings, config_env, table_env
from jobfence.registry import JobSpec, Registry
from jobfence.scheduled import JobDeps, load_job
from jobfence.testing.fence import UnfencedWrite, breach_message, watching_writes
from jobfence.testing.sim.faults import AWS_CALL_FAULTS, PAUSES, TIME_FAULTS, FaultKind
from jobfence.testing.sim.kernel import START_MS, Actor, SkewedClock
from jobfence.testing.sim.markers import marker_write
from jobfence.testing.sim.terms import TermWatch
from jobfence.testing.sim.world import MARGIN_MS, World
from jobfence.triggers import Trigger
from jobfence.work.timing import Timing


class SimJobError(Exception):
    """The job's own error (a bug or a bad row in the job, not the store)."""


class LambdaContext:
    """The Lambda context of one invocation: its request id and remaining time on its clock."""

    def __init__(self, request_id: str, clock: Any, timeout_ms: int) -> None:
        self.aws_request_id = request_id
        self._clock = clock
        self._deadline = clock.now_ms() + timeout_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline - self._clock.now_ms())


def clean_tick(world: World, runner: Any, spec: Any, job: Any, clock: Any, what: str = "the clean tick") -> Any:
    """One fault-free scheduled tick of `job` on `clock`: the liveness check a scheduled family ends with.

    A raise, or an outcome other than `ran`, is violation 0 naming `what`. Returns the run's result,
    or None when the tick raised.
    """
    try:
        result = runner.run(
            spec, job, Trigger("scheduled", clock.now_ms()), LambdaContext("clean-tick", clock, spec.timeout_s * 1000)
        )
    except Exception as exc:  # noqa: BLE001 - judged, not raised
        world.violate(0, f"liveness: {what} raised {type(exc).__name__}: {exc}")
        return None
    if result.outcome.value != "ran":
        world.violate(0, f"liveness: {what} came to {result.outcome.value}")
    return result


class ScheduledJobScenario:
    """The scenario of one scheduled job under faults; a subclass says which job, its data and its liveness."""

    name: str
    tables: tuple[str, ...]
    registry: Registry  # the catalog the job and its tables are in
    kinds = (*AWS_CALL_FAULTS, *TIME_FAULTS, *PAUSES, FaultKind.CLOCK_SKEW, FaultKind.JOB_FAILURE)
    call_rates = (0.1, 0.15, 0.2)  # a run makes about 50 calls

    def pause_ms(self, world: World, kind: FaultKind) -> int:
        """Past the TTL (and often past the interval, so a later tick takes over); the stale limits
        of a work pipeline (its default `Timing`) are shorter pauses here."""
        spec = world.data["spec"]
        if kind is FaultKind.PAUSE_TTL:
            return spec.lease_ttl_s * 1000 + world.rng.randrange((spec.interval_s or 3600) * 1000)
        timing = Timing()
        limit = timing.item_stale_s if kind is FaultKind.PAUSE_ITEM_STALE else timing.batch_stale_s
        return limit * 1000 + world.rng.randrange(1, 300_000)

    # -- setup ----------------------------------------------------------------------------

    def setup(self, world: World) -> None:
        spec = self._spec()
        world.data["spec"] = spec
        audit = f"sim-audit-{world.kernel.seed}"
        world.wire.dynamodb.create_table(
            TableName=audit,
            KeySchema=[{"AttributeName": "slot", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "slot", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        world.tables["audit"] = audit
        world.wire.tables[audit] = "audit"
        self._seed(world, SkewedClock(world.kernel.clock))
        self._watch_fence(world, spec)
        world.data["watch"] = TermWatch(world)
        world.wire.on_write.append(lambda w: self._on_write(world, w))
        self._spawn_ticks(world, (spec.interval_s or 3600) * 1000)

    def _watch_fence(self, world: World, spec: JobSpec) -> None:
        """From here to the run's end, a write to one of the job's tables outside `ctx.transaction()` (and not
        declared `JobSpec.unfenced`) is a violation of 2, once per call: seen when it is sent, on every seed,
        whether or not a fault then shows what it costs (`jobfence.testing.fence`)."""
        seen: set[UnfencedWrite] = set()

        def breach(write: UnfencedWrite) -> None:
            if write not in seen:
                seen.add(write)
                world.violate(2, breach_message(spec.name, [write]))

        tables = {name: world.tables[name] for name in ("leases", *spec.tables)}
        stack = contextlib.ExitStack()
        stack.enter_context(watching_writes(tables, spec.unfenced, breach))
        world.cleanups.append(stack.close)

    # -- what is particular to the job ----------------------------------------------------

    def _spec(self) -> JobSpec:
        """The job's catalog entry."""
        raise NotImplementedError

    def _seed(self, world: World, clock: Any) -> None:
        """The job's data before the first tick (written by the driver: no fault)."""

    def _deps(self, world: World, clock: Any) -> JobDeps:
        """What the job's factory is given: the environment infra would set (its own tables) on `clock`."""
        spec = world.data["spec"]
        environ = {"JOB_NAME": spec.name, "LEASES_TABLE": world.tables["leases"], "RUNS_TABLE": world.tables["runs"]}
        environ.update({table_env(name): world.tables[name] for name in spec.tables})
        environ.update({config_env(name): value for name, value in spec.config.items()})
        settings = ScheduledSettings.from_environ(environ)
        return JobDeps(settings, spec, clock, world.wire.boto3, world.wire.dynamodb, world.logger)

    def _build(self, deps: JobDeps) -> Any:
        return load_job(deps.spec)(deps)

    def _done(self, world: World) -> None:
        """Liveness after the clean tick ran: the job's work is done (violations through `world.violate`)."""

    # -- ticks ----------------------------------------------------------------------------

    copies = 3  # deliveries of one tick at most
    fail_rate = 0.6  # share of ticks told to fail in a batch, where job failures are on

    def _spawn_ticks(self, world: World, spacing_ms: int) -> None:
        """Three ticks `spacing_ms` apart, each delivered one to `copies` times at once."""
        n = 0
        for tick in range(3):
            at = START_MS + tick * spacing_ms
            for _ in range(world.rng.randint(1, self.copies)):
                fail_at = None
                if world.plan.on(FaultKind.JOB_FAILURE) and world.rng.random() < self.fail_rate:
                    fail_at = world.rng.randrange(3)
                name = f"tick{tick}.{n}"
                n += 1
                world.data["watch"].tick(
                    world.spawn(name, self._tick(world, at, fail_at), at=at + world.rng.randrange(3_000))
                )

    def _job(self, world: World, clock: Any, actor: Actor | None, fail_at: int | None) -> Callable[[Any], Any]:
        real = self._build(self._deps(world, clock))
        audit = world.tables["audit"]

        def job(ctx: Any) -> Iterator[dict[str, Any]]:
            return world.data["watch"].guard(actor, batches_of(ctx))

        def batches_of(ctx: Any) -> Iterator[dict[str, Any]]:
            batches = iter(real(ctx))
            index = 0
            while True:
                slot = f"{ctx.lease.fence}:{index}"
                with ctx.transaction() as tx:
                    marker_write(audit, slot=slot)(tx)
                if fail_at == index:
                    if actor is not None:
                        world.wire.count(FaultKind.JOB_FAILURE, actor, f"the job raises in batch {index}")
                    raise SimJobError(f"batch {index} failed")
                try:
                    counts = next(batches)
                except StopIteration:
                    return
                index += 1
                yield counts

        return job

    def _tick(self, world: World, scheduled_at: int, fail_at: int | None) -> Callable[[Actor], Any]:
        return self._invocation(world, Trigger("scheduled", scheduled_at), fail_at)

    def _invocation(
        self, world: World, trigger: Trigger, fail_at: int | None, timeout_ms: int | None = None
    ) -> Callable[[Actor], Any]:
        """One Lambda invocation of the job's function with `trigger` (the job's timeout unless given)."""

        def run(actor: Actor) -> Any:
            spec = world.data["spec"]
            job = self._job(world, actor.clock, actor, fail_at)
            context = LambdaContext(actor.name, actor.clock, timeout_ms or spec.timeout_s * 1000)
            return self._runner(world, actor.clock).run(spec, job, trigger, context)

        return run

    def _runner(self, world: World, clock: Any) -> Any:
        return world.runner(clock)

    # -- checks on every applied write ------------------------------------------------------

    def _on_write(self, world: World, write: Any) -> None:
        for change in write.changes:
            if change.table == "audit" and change.after is not None:
                fence = int(str(change.after["slot"]).split(":")[0])
                live = (world.scan("leases") or [{}])[0]
                if int(live.get("fence", -1)) != fence:
                    world.violate(
                        1, f"{write.actor} wrote under fence {fence} while the lease is at fence {live.get('fence')}"
                    )

    # -- liveness -------------------------------------------------------------------------

    def settle(self, world: World) -> None:
        spec = world.data["spec"]
        lease = (world.scan("leases") or [{}])[0]
        interval_ms = (spec.interval_s or 3600) * 1000
        ready = max(int(lease.get("expires_at", 0)), int(lease.get("last_started_at", 0)) + interval_ms) + 1_000
        world.kernel.clock.set(max(world.kernel.clock.now_ms(), ready + MARGIN_MS))
        clock = SkewedClock(world.kernel.clock)
        result = clean_tick(
            world,
            self._runner(world, clock),
            spec,
            self._job(world, clock, None, None),
            clock,
            "the clean tick after every term ended",
        )
        if result is not None and result.outcome.value == "ran":
            self._done(world)

    # -- end checks -----------------------------------------------------------------------

    def check(self, world: World) -> None:
        world.data["watch"].check()
