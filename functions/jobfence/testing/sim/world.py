"""One run of one family: the kernel, the wire, the tables, the verdicts, and how a seed is run.

run_seed(family, seed)
    patch uuid4 (seeded), the worker's thread pool (inline), pynamodb's client (shared session)
    draw the fault plan from the seed
    create only the family's tables (fresh names), let the family seed data and spawn actors
    kernel.run()            the faulty phase: every applied write is checked as it lands
    family.settle(world)    fault-free sweeps: liveness within a bounded number of them
    family.check(world)     the invariants over the final tables and the applied-write record
    drop the tables
"""

from __future__ import annotations

import contextlib
import io
import logging
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from aws_lambda_powertools import Logger

from jobfence.dynamo import deserialized
from jobfence.lease import LeaseStore
from jobfence.registry import JobSpec, Registry
from jobfence.runs import RunStore
from jobfence.scheduled import ScheduledRunner
from jobfence.testing.sim.faults import DEFAULT_CALL_RATES, PROVIDER_FAULTS, FaultKind, FaultPlan
from jobfence.testing.sim.kernel import START_MS, Actor, Crash, Kernel, SeededUuids, SimAbort
from jobfence.testing.sim.wire import REGION, Wire
from jobfence.testing.tables import create_tables

MARGIN_MS = 60_000  # the runner's safety margin: actors' clocks differ by at most this


def clean_tick_after(spec: JobSpec, since_ms: int) -> int:
    """When a clean tick must run: every term taken by `since_ms` has expired and the gate has opened."""
    return since_ms + max(spec.lease_ttl_ms, (spec.interval_s or 0) * 1000) + MARGIN_MS


@dataclass(frozen=True)
class Violation:
    """One broken invariant (0: the run itself went wrong; 13: an error escaped unclassified)."""

    number: int
    text: str


@dataclass(frozen=True)
class RunReport:
    """What one seed came to."""

    family: str
    seed: int
    violations: tuple[Violation, ...]
    injected: frozenset[FaultKind]
    steps: int
    writes: int
    trace: tuple[str, ...] = ()
    limits: tuple[Violation, ...] = ()  # breaches only a fault beyond the time budget can cause

    @property
    def ok(self) -> bool:
        return not self.violations


class Family(Protocol):
    """A family of scenarios (lease, work, listings, and the domain families registered later)."""

    # read-only (properties): a family's class attributes are read, never set, by the simulator
    @property
    def name(self) -> str: ...
    @property
    def tables(self) -> tuple[str, ...]: ...  # catalog tables it needs (created fresh per run)
    @property
    def registry(self) -> Registry: ...  # the catalog those tables (and its jobs) are in
    @property
    def kinds(self) -> tuple[FaultKind, ...]: ...  # fault kinds that apply to it

    # optional: call_rates, the per-call fault rates a run draws from (default DEFAULT_CALL_RATES)

    def pause_ms(self, world: World, kind: FaultKind) -> int: ...
    def setup(self, world: World) -> None: ...
    def settle(self, world: World) -> None: ...
    def check(self, world: World) -> None: ...


class NullMetrics:
    """Powertools Metrics' add_metric, discarded (the runner counts; the sim does not publish)."""

    def add_metric(self, **_: Any) -> None:
        return None


class _Sink(io.StringIO):
    pass


_LOG_SINK = _Sink()
LOGGER = Logger(service="jobfence-sim", logger_handler=logging.StreamHandler(_LOG_SINK))


@dataclass
class World:
    """Everything a family's setup, actors and checks share in one run."""

    kernel: Kernel
    wire: Wire
    plan: FaultPlan
    tables: dict[str, str]
    violations: list[Violation] = field(default_factory=list)
    limits: list[Violation] = field(default_factory=list)  # breaches beyond the time budget (`limit`)
    data: dict[str, Any] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    @property
    def rng(self) -> random.Random:
        return self.kernel.rng

    @property
    def logger(self) -> Logger:
        return LOGGER

    def violate(self, number: int, text: str) -> None:
        self.violations.append(Violation(number, text))
        self.kernel.note(None, f"VIOLATION {number}: {text}")

    def skew(self) -> int:
        """An actor's clock offset: up to half the margin either way when skew is on."""
        if not self.plan.on(FaultKind.CLOCK_SKEW):
            return 0
        skew = self.rng.randrange(-MARGIN_MS // 2, MARGIN_MS // 2 + 1)
        if skew:
            self.wire.injected[FaultKind.CLOCK_SKEW] = self.wire.injected.get(FaultKind.CLOCK_SKEW, 0) + 1
        return skew

    def spawn(
        self,
        name: str,
        fn: Callable[[Actor], Any],
        at: int | None = None,
        faulty: bool = True,
        spared: frozenset[FaultKind] = frozenset(),
    ) -> Actor:
        return self.kernel.spawn(name, fn, at=at, skew_ms=self.skew(), faulty=faulty, spared=spared)

    def limit(self, number: int, text: str) -> None:
        """A breach of invariant `number` that only a fault beyond the stated time budget can cause:
        reported as the fault model's limit (docs/guarantees.md, "The time budget"), not a violation."""
        self.limits.append(Violation(number, text))
        self.kernel.note(None, f"LIMIT {number}: {text}")

    def provider_fault(self, actor: Actor | None, what: str, rate: float | None = None) -> FaultKind | None:
        """The provider fault drawn for `actor`'s call (`what` names it in the trace), or None.

        A crashed actor's call never happens (`Crash`); the driver and fault-free actors draw nothing.
        `rate` replaces the plan's provider rate for this call.
        """
        if actor is None or not actor.faulty:
            return None
        if actor.crashed:
            raise Crash("dead")
        fault = self.plan.one_of(self.rng, PROVIDER_FAULTS, self.plan.provider_rate if rate is None else rate)
        if fault is not None:
            self.wire.count(fault, actor, what)
        return fault

    def runner(self, clock: Any, invoke_self: Callable[[Any], None] | None = None) -> ScheduledRunner:
        """The real runner on the run's leases and runs tables, on an actor's clock (every family ticks with it).

        `invoke_self`: the function's async invoke of itself (a buffer_one hand-over), where a family models it.
        """
        dynamodb = self.wire.dynamodb
        return ScheduledRunner(
            LeaseStore(dynamodb, self.tables["leases"], clock),
            RunStore(dynamodb, self.tables["runs"]),
            clock,
            self.logger,
            NullMetrics(),  # type: ignore[arg-type]  # add_metric is all it calls
            safety_margin_ms=MARGIN_MS,
            invoke_self=invoke_self,
        )

    def scan(self, logical: str) -> list[dict[str, Any]]:
        """Every item of a table, read from moto's backend (no call, no fault)."""
        table = self.wire._backend.get_table(self.tables[logical])  # noqa: SLF001 - the sim owns the wire
        return [deserialized(i.to_json()["Attributes"]) for i in table.all_items()]

    def logs(self) -> str:
        return _LOG_SINK.getvalue()


# -- patches that make a run a pure function of its seed --------------------------------------


class SimTimeout(Exception):
    """A provider call that outlived the per-item timeout (the worker never sees it finish)."""


class InlineExecutor:
    """The worker's thread pool, run inline in the actor's thread (deterministic, one thread at a time)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        return None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        try:
            future.set_result(fn(*args))
        except Crash:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the worker as the future's error
            future.set_exception(exc)
        return future

    def shutdown(self, *_: Any, **__: Any) -> None:
        return None


def inline_as_completed(futures: Any, _timeout_s: float) -> Iterator[Future[Any]]:
    """Futures in submission order; one whose call timed out never completes."""
    for future in list(futures):
        if not isinstance(future.exception(), SimTimeout):
            yield future


@contextlib.contextmanager
def patched(seed: int) -> Iterator[None]:
    """uuid4 seeded; the worker's pool inline. Restored afterwards."""
    from jobfence.work import Worker

    worker_module = sys.modules[Worker.__module__]
    saved = [(uuid, "uuid4", uuid.uuid4)]
    for name, value in (("ThreadPoolExecutor", InlineExecutor), ("_as_completed", inline_as_completed)):
        if hasattr(worker_module, name):
            saved.append((worker_module, name, getattr(worker_module, name)))
            setattr(worker_module, name, value)
    uuid.uuid4 = SeededUuids(seed)
    _LOG_SINK.seek(0)
    _LOG_SINK.truncate()
    try:
        yield
    finally:
        for owner, attr, original in saved:
            setattr(owner, attr, original)


def run_seed(family: Family, seed: int, echo: Callable[[str], None] | None = None) -> RunReport:
    """Run one seed of one family; never raises for a violation (it is in the report)."""
    with patched(seed):
        kernel = Kernel(seed, echo=echo)
        plan = FaultPlan.draw(kernel.rng, family.kinds, call_rates=getattr(family, "call_rates", DEFAULT_CALL_RATES))
        world_ref: list[World] = []
        wire = Wire(kernel, plan, lambda kind: family.pause_ms(world_ref[0], kind))
        with wire.active():
            tables = create_tables(wire.dynamodb, family.registry, family.tables, suffix=f"sim{seed}")
            wire.tables = {physical: logical for logical, physical in tables.items()}
            world = World(kernel, wire, plan, tables)
            world_ref.append(world)
            kernel.note(None, f"seed {seed} family {family.name} faults {sorted(k.value for k in plan.enabled)}")
            try:
                family.setup(world)
                try:
                    kernel.run()
                except SimAbort as exc:
                    world.violate(0, str(exc))
                family.settle(world)
                family.check(world)
            except Exception as exc:  # noqa: BLE001 - a crash of the harness is a failed run, not a hang
                world.violate(0, f"harness error {type(exc).__name__}: {exc}")
            finally:
                for cleanup in world.cleanups:
                    cleanup()
                for physical in tables.values():
                    with contextlib.suppress(Exception):
                        wire._backend.delete_table(physical)  # noqa: SLF001
    injected = frozenset(wire.injected)
    return RunReport(
        family.name,
        seed,
        tuple(world.violations),
        injected,
        kernel.steps,
        len(wire.writes),
        tuple(kernel.trace),
        tuple(world.limits),
    )


__all__ = ["REGION", "START_MS", "Family", "NullMetrics", "RunReport", "SimTimeout", "Violation", "World", "run_seed"]
