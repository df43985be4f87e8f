"""`simulate`: a job under the fault simulator for N seeds, judged by the author's own invariant.

    report = simulate(CATALOG, "clean_reports", seeds=range(20), setup=seed_reports, invariant=each_report_once)
    report.assert_ok()      # else: the failing seeds, each with its first violations

Each seed is a replayable run (the operator's `sim` campaigns are the same machinery): the
job's ticks are delivered more than once, AWS calls crash before or after they
apply, replies are lost, actors pause past the lease TTL, clocks skew, the job
raises in a batch. The lease and run-row guarantees (docs/guarantees.md) are
checked on every run; `invariant(snapshot)` checks the job's own tables once a
clean tick after all of that has run (it raises AssertionError when they are wrong).

The simulator is the kit's own (`jobfence.testing.sim`: it imports no app and
no operator tooling); it runs on moto, which the `jobfence[testing]` extra
requires, and is imported on the first call only, so importing the kit stays light.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from jobfence.registry import Registry
from jobfence.scheduled import JobDeps

SIMULATOR_MISSING = (
    "simulate() runs jobfence's fault simulator (`jobfence.testing.sim`) on moto, which the runtime "
    "does not require: install the extra jobfence[testing]"
)


@dataclass(frozen=True)
class SeedFailure:
    """A seed whose run broke an invariant: replay it with the same arguments and `seeds=[seed]`."""

    seed: int
    violations: tuple[str, ...]
    faults: tuple[str, ...]  # the fault kinds injected in that run


@dataclass(frozen=True)
class SimulationReport:
    """What the seeds came to."""

    job: str
    seeds: int
    failures: tuple[SeedFailure, ...]
    faults: frozenset[str]  # every fault kind injected in at least one run

    @property
    def ok(self) -> bool:
        """No seed broke an invariant."""
        return not self.failures

    def assert_ok(self) -> SimulationReport:
        """Raise AssertionError naming the failing seeds and their first violations."""
        lines = [
            f"seed {f.seed} (faults: {', '.join(f.faults) or 'none'}): {'; '.join(f.violations[:3])}"
            for f in self.failures[:5]
        ]
        assert self.ok, f"{self.job}: {len(self.failures)} of {self.seeds} seeds broke an invariant:\n" + "\n".join(
            lines
        )
        return self


def simulate(
    registry: Registry,
    job: str,
    seeds: Iterable[int] = range(20),
    *,
    setup: Callable[[JobDeps], None] | None = None,
    invariant: Callable[[Any], None] | None = None,
    factory: Callable[[JobDeps], Any] | None = None,
) -> SimulationReport:
    """Run `job` of `registry` under faults for each seed.

    `setup(deps)`: the job's data, written before the first tick with the job's
    own deps (no fault is injected into it). `invariant(snapshot)`: raises
    AssertionError when `snapshot.rows(table)` shows the job's tables wrong.
    `factory`: builds the job instead of its catalog entry's (e.g. with a
    smaller batch, so a run has several batches and renewals).
    """
    if importlib.util.find_spec("moto") is None:
        raise ModuleNotFoundError(SIMULATOR_MISSING, name="moto")
    from jobfence.testing.sim.job import CatalogJobFamily
    from jobfence.testing.sim.world import run_seed

    family = CatalogJobFamily(registry, job, setup=setup, invariant=invariant, factory=factory)
    ran, failures, faults = 0, list[SeedFailure](), set[str]()
    for seed in seeds:
        report = run_seed(family, seed)
        ran += 1
        injected = tuple(sorted(kind.value for kind in report.injected))
        faults.update(injected)
        if not report.ok:
            failures.append(
                SeedFailure(seed, tuple(f"invariant {v.number}: {v.text}" for v in report.violations), injected)
            )
    return SimulationReport(job, ran, tuple(failures), frozenset(faults))
