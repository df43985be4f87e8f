"""The deterministic scheduler: actors, one AWS call at a time, in an order drawn from a seed.

Every actor (a runner, a worker, the producer, the reclaimer, an operator) is
a thread running the real code. It runs only while the scheduler has granted
it a turn; at its next AWS call the botocore hook (`jobfence.testing.sim.wire`) hands the
turn back and blocks it. So exactly one thread ever touches moto, and which
actor goes next, by how much the simulated time moves between two calls, and
which fault a call draws all come from one `random.Random(seed)`:

    scheduler ── grant(A) ──► A runs until its next AWS call ── yield ──► scheduler
        │ picks among ready actors (seeded), advances true time 0..2 s
        │ parks paused actors until their wake-up time, jumps time when all wait
        ▼
    every actor ended (or the step budget ran out: a livelock is a violation)

Time: one true clock (`FrozenClock`) moved only by the scheduler; each actor
sees it through its own `SkewedClock` (a fixed offset up to half the safety
margin either way, so two actors differ by at most the margin).

An actor that crashes is stopped with `Crash`, a BaseException the code under
test does not catch; any further AWS call of a crashed actor (from a `finally`)
raises `Crash` again without reaching AWS, as a dead process makes no calls.
"""

from __future__ import annotations

import enum
import random
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jobfence.clock import FrozenClock

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
MAX_STEP_MS = 2_000
MAX_STEPS = 20_000


class Crash(BaseException):
    """The actor's process died (raised inside the actor's thread; nothing under test catches it)."""


class SimAbort(Exception):
    """The run cannot go on (a livelock, an actor stuck); reported as a violation."""


class ActorState(str, enum.Enum):
    NEW = "new"
    READY = "ready"
    RUNNING = "running"
    DONE = "done"


class SkewedClock:
    """An actor's view of the true clock: a fixed offset (its skew)."""

    def __init__(self, true_clock: FrozenClock, skew_ms: int = 0) -> None:
        self._true = true_clock
        self.skew_ms = skew_ms

    def now_ms(self) -> int:
        return self._true.now_ms() + self.skew_ms


@dataclass
class Actor:
    """One simulated process."""

    name: str
    fn: Callable[[Actor], Any]
    clock: SkewedClock
    faulty: bool
    start_at: int
    state: ActorState = ActorState.NEW
    park_until: int = 0
    result: Any = None
    error: BaseException | None = None
    crashed: bool = False
    kill: bool = False
    writes: int = 0  # writes DynamoDB applied for this actor
    calls: int = 0
    faults: list[str] = field(default_factory=list)
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    thread: threading.Thread | None = None
    attempt: int = 0  # attempt number of the AWS call in flight (botocore retries)
    call_fault: Any = None  # the fault drawn for the call in flight
    call_started: int = 0  # true time the call in flight was built (its times read): a write's age is from here
    streak: dict[str, int] = field(default_factory=dict)  # operation -> its next calls whose replies are all lost
    spared: frozenset[Any] = frozenset()  # fault kinds this actor never draws


class Kernel:
    """The seeded scheduler and the trace of one run."""

    def __init__(self, seed: int, echo: Callable[[str], None] | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = FrozenClock(START_MS)
        self.actors: list[Actor] = []
        self.trace: list[str] = []
        self.echo = echo  # receives each trace line as it is noted (a replay shows them live)
        self._by_thread: dict[int, Actor] = {}
        self._back = threading.Semaphore(0)
        self.steps = 0

    # -- actors ---------------------------------------------------------------------------

    def spawn(
        self,
        name: str,
        fn: Callable[[Actor], Any],
        *,
        at: int | None = None,
        skew_ms: int = 0,
        faulty: bool = True,
        spared: frozenset[Any] = frozenset(),
    ) -> Actor:
        """An actor that starts at true time `at` (default: now); it never draws the fault kinds `spared`."""
        actor = Actor(
            name, fn, SkewedClock(self.clock, skew_ms), faulty, self.clock.now_ms() if at is None else at, spared=spared
        )
        self.actors.append(actor)
        return actor

    def current(self) -> Actor | None:
        """The actor whose thread is calling (None for the driver's own thread)."""
        return self._by_thread.get(threading.get_ident())

    def yield_turn(self, actor: Actor) -> None:
        """Hand the turn back to the scheduler and wait for the next grant."""
        self._back.release()
        actor.go.acquire()
        if actor.kill:
            actor.crashed = True
            raise Crash(f"{actor.name} stopped by the scheduler")

    def park(self, actor: Actor, ms: int) -> None:
        """Pause `actor` for `ms` of true time while the others run."""
        actor.park_until = self.clock.now_ms() + ms
        self.yield_turn(actor)

    def note(self, actor: Actor | None, text: str) -> None:
        t = (self.clock.now_ms() - START_MS) / 1000
        line = f"{t:>10.3f}s {actor.name if actor else '-':<12} {text}"
        self.trace.append(line)
        if self.echo is not None:
            self.echo(line)

    # -- the loop -------------------------------------------------------------------------

    def run(self, max_steps: int = MAX_STEPS) -> None:
        """Grant turns until every actor has ended."""
        while True:
            now = self.clock.now_ms()
            live = [a for a in self.actors if a.state is not ActorState.DONE]
            if not live:
                return
            ready = [a for a in live if a.start_at <= now and a.park_until <= now]
            if not ready:
                self.clock.set(min(max(a.start_at, a.park_until) for a in live))
                continue
            actor = self.rng.choice(ready)
            self.clock.advance(ms=self.rng.randrange(MAX_STEP_MS))
            self._grant(actor)
            self.steps += 1
            if self.steps > max_steps:
                self._stop_all()
                raise SimAbort(f"no progress after {max_steps} steps (livelock)")

    def _grant(self, actor: Actor) -> None:
        if actor.state is ActorState.NEW:
            actor.state = ActorState.RUNNING
            actor.thread = threading.Thread(target=self._main, args=(actor,), name=f"sim-{actor.name}", daemon=True)
            actor.thread.start()
        else:
            actor.go.release()
        self._back.acquire()

    def _main(self, actor: Actor) -> None:
        self._by_thread[threading.get_ident()] = actor
        try:
            actor.result = actor.fn(actor)
            self.note(actor, f"ended: {_short(actor.result)}")
        except Crash:
            actor.crashed = True
            self.note(actor, "crashed")
        except BaseException as exc:  # noqa: BLE001 - recorded and judged by the checks
            actor.error = exc
            self.note(actor, f"raised {type(exc).__name__}: {str(exc)[:120]}")
        finally:
            actor.state = ActorState.DONE
            self._by_thread.pop(threading.get_ident(), None)
            self._back.release()

    def _stop_all(self) -> None:
        for actor in self.actors:
            if actor.state is ActorState.RUNNING:
                actor.kill = True
                actor.go.release()
                self._back.acquire()
            actor.state = ActorState.DONE


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 140 else text[:139] + "…"


class SeededUuids:
    """uuid4 from the run's own generator, so ids (lease ids, claim tokens, client tokens) replay."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(f"uuid-{seed}")

    def __call__(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)
