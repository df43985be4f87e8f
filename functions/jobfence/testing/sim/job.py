"""Any catalog job under the lease family's faults, judged by its author's own invariants.

`jobfence.testing.simulate` runs this family: the job named in a catalog (the
application's or a job author's own `Registry`), built by its own factory (or
the factory the test passes), on fresh tables of only what its entry names.
Everything else is the scheduled-job scenario's (`jobfence.testing.sim.scheduled`): three ticks,
each delivered one to three times at once, AWS call faults, pauses past the
lease TTL, clock skew, the job told to fail in a batch; an audit row written
through `RunContext.transaction()` around each batch; invariants 1-4, 12 and
13 on the lease and run rows; and liveness: a clean tick after every term
ended must run.

The author supplies what only they know:
    setup(deps)        the job's data before the first tick (its own stores on `deps.settings.table(...)`)
    invariant(snapshot) raises AssertionError when the job's tables are wrong once the clean tick ran
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jobfence.registry import JobSpec, Registry
from jobfence.scheduled import JobDeps
from jobfence.testing.sim.scheduled import ScheduledJobScenario
from jobfence.testing.sim.world import World


class Snapshot:
    """The simulated tables as they stand (read from moto's backend: no call, no fault), by logical name."""

    def __init__(self, world: World) -> None:
        self._world = world

    def rows(self, table: str) -> list[dict[str, Any]]:
        """Every row of one of the job's tables (or `runs`, `leases`), values plain (numbers as int)."""
        if table not in self._world.tables:
            raise KeyError(f"{table!r} is not a table of this simulation: {sorted(self._world.tables)}")
        return self._world.scan(table)


class CatalogJobFamily(ScheduledJobScenario):
    """The lease family's scenario for `job` of `registry`, with the author's setup and invariant."""

    def __init__(
        self,
        registry: Registry,
        job: str,
        *,
        setup: Callable[[JobDeps], None] | None = None,
        invariant: Callable[[Snapshot], None] | None = None,
        factory: Callable[[JobDeps], Any] | None = None,
    ) -> None:
        self.registry = registry
        self.spec = registry.job(job)
        self.name = f"job:{job}"
        self.tables = ("leases", "runs", *self.spec.tables)
        self._setup = setup
        self._invariant = invariant
        self._factory = factory

    def _spec(self) -> JobSpec:
        return self.spec

    def _seed(self, world: World, clock: Any) -> None:
        if self._setup is not None:
            self._setup(self._deps(world, clock))

    def _build(self, deps: JobDeps) -> Any:
        return self._factory(deps) if self._factory is not None else super()._build(deps)

    def _done(self, world: World) -> None:
        if self._invariant is None:
            return
        try:
            self._invariant(Snapshot(world))
        except AssertionError as exc:
            world.violate(0, f"the job's invariant: {' '.join(str(exc).split())[:300] or 'AssertionError'}")
