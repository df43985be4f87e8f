"""`simulate`: a job, or a pipeline, under the fault simulator for N seeds, judged by the author's own invariant.

    report = simulate(CATALOG, "clean_reports", setup=seed_reports, invariant=each_report_once)
    report.assert_ok()      # else: the failing seeds, each with its first violations, and the first one's trace

    simulate(CATALOG, "reclaim_thumbnails", pipelines=PIPELINES).assert_ok()   # a per-item pipeline

Each seed is a replayable run (the operator's `sim` campaigns are the same machinery). A scheduled
job's ticks are delivered more than once, AWS calls crash before or after they apply, replies are
lost, actors pause past the lease TTL, clocks skew, the job raises in a batch. The lease and run-row
guarantees (docs/guarantees.md) are checked on every run, and so is the fence: a write of the job to
one of its catalog tables outside `ctx.transaction()` (and not declared `JobSpec.unfenced`) fails
every seed that makes it, naming the call (`jobfence.testing.fence`), whether or not a fault shows
its cost in that seed. `invariant(snapshot)` checks the job's own tables once a clean tick after
all of that has run (it raises AssertionError when they are wrong).

With `pipelines` (queue -> `WorkerPipeline`, what `worker_handler` takes), `job` is the pipeline's
reclaim job, and each seed runs the pipelines of the queues it re-drives
(`jobfence.testing.sim.pipeline`): a producer submits a batch per tenant (two tenants sharing batch
and item ids, one often short of quota) and its client repeats the submit, two workers per pipeline
process the wake-ups with a simulated provider in place of the item step (idempotent per key; it
fails before or after acting, times out, refuses one input for good), the reclaim job ticks under its
lease, an operator retries the failed items; SQS delivers late, twice or forged. Checked: the work
invariants 5-11, 14 and 16 on every write and at the end, the reclaim ticks' lease terms, and
liveness (every item terminal, every batch final, after bounded clean sweeps).

`DEFAULT_SEEDS` is 20: a fence breach fails every seed by itself (one would do), and 20 seeds inject
every fault kind of the scheduled-job scenario at least once (the kit's own test job sees all 15 by
seed 10); a seed of a small job costs about 0.2 s, of a pipeline 0.5 to 2 s. A failing seed keeps
its trace (`SeedFailure.trace`: the calls, faults and violations up to its first violation, at most
`TRACE_LINES` of them: the last before it and the last of the actors it names); `assert_ok` prints the
first one's, and `seeds=[n]` with the same arguments replays seed n, trace and all.

The simulator is the kit's own (`jobfence.testing.sim`: it imports no app and
no operator tooling); it runs on moto, which the `jobfence[testing]` extra
requires, and is imported on the first call only, so importing the kit stays light.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jobfence.registry import Registry
from jobfence.scheduled import JobDeps

if TYPE_CHECKING:
    from jobfence.work.pipeline import WorkerPipeline

SIMULATOR_MISSING = (
    "simulate() runs jobfence's fault simulator (`jobfence.testing.sim`) on moto, which the runtime "
    "does not require: install the extra jobfence[testing]"
)


DEFAULT_SEEDS = range(20)
"""The seeds `simulate` runs unless given others: a fence breach fails every one of them, and together they
inject every fault kind of the scheduled-job scenario at least once (the kit's own test job sees all 15 by seed 10)."""
TRACE_LINES = 80  # lines of a failing seed's trace kept, up to its first violation (`_bounded_trace`)


@dataclass(frozen=True)
class SeedFailure:
    """A seed whose run broke an invariant: `simulate` with the same arguments and `seeds=[seed]` replays it."""

    seed: int
    violations: tuple[str, ...]
    faults: tuple[str, ...]  # the fault kinds injected in that run
    trace: tuple[str, ...] = ()  # its calls, faults, violations up to the first violation (bounded)

    def replay(self) -> str:
        """How to replay it, and its trace."""
        lines = "\n".join(f"    {line}" for line in self.trace)
        return (
            f"replay seed {self.seed}: the same simulate(...) call with seeds=[{self.seed}]; its trace "
            f"(true time, actor, call or fault), up to its first violation:\n{lines}"
        )


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
        """Raise AssertionError naming the failing seeds, their first violations, and how to replay the first."""
        if self.ok:
            return self
        lines = [
            f"seed {f.seed} (faults: {', '.join(f.faults) or 'none'}): {'; '.join(f.violations[:3])}"
            for f in self.failures[:5]
        ]
        raise AssertionError(
            f"{self.job}: {len(self.failures)} of {self.seeds} seeds broke an invariant:\n"
            + "\n".join(lines)
            + "\n"
            + self.failures[0].replay()
        )


def _actor(line: str) -> str:
    """The actor of a trace line (`<time>s <actor> <what>`; "-" for the simulator's own notes)."""
    parts = line.split(None, 2)
    return parts[1] if len(parts) > 1 else ""


def _bounded_trace(trace: tuple[str, ...]) -> tuple[str, ...]:
    """The trace up to its first violation, at most `TRACE_LINES` of it besides the run's header line: the
    last lines before the violation, and the last lines of the actors it names (a violation judged at the
    end, such as an actor's error, is about that actor's calls, long before)."""
    end = next((n for n, line in enumerate(trace) if " VIOLATION " in line), len(trace) - 1)
    head, body = trace[:1], trace[1 : end + 1]
    if len(body) <= TRACE_LINES:
        return (*head, *body)
    half = TRACE_LINES // 2
    named = {a for a in map(_actor, body) if a not in ("", "-") and re.search(rf"\b{re.escape(a)}\b", body[-1])}
    keep = set(range(len(body) - half, len(body)))
    keep.update([n for n, line in enumerate(body) if _actor(line) in named][-half:])
    whose = f" and of {', '.join(sorted(named))}" if named else ""
    note = f"... {len(body) - len(keep)} of {len(body)} lines left out: these are the last before it{whose}"
    return (*head, note, *(body[n] for n in sorted(keep)))


def simulate(
    registry: Registry,
    job: str,
    seeds: Iterable[int] = DEFAULT_SEEDS,
    *,
    setup: Callable[[JobDeps], None] | None = None,
    invariant: Callable[[Any], None] | None = None,
    factory: Callable[[JobDeps], Any] | None = None,
    pipelines: Mapping[str, WorkerPipeline] | Callable[[str], WorkerPipeline] | None = None,
) -> SimulationReport:
    """Run `job` of `registry` (or, with `pipelines`, the pipelines its reclaim job re-drives) under faults for each seed.

    `setup(deps)`: the job's data, written before the first tick with the job's
    own deps (no fault is injected into it). `invariant(snapshot)`: raises
    AssertionError when `snapshot.rows(table)` shows the tables wrong (a job's: after the
    clean tick; a pipeline's: once every batch is final). `factory`: builds the job instead of its
    catalog entry's (e.g. with a smaller batch, so a run has several batches and renewals).
    `pipelines`: the queue name -> `WorkerPipeline` mapping (or function) the worker handler takes;
    `job` is then the reclaim job (its catalog entry names the queues), and `setup` and `factory` do
    not apply (a `ValueError`); the provider is simulated in place of each pipeline's item step.

    Checked on every seed besides: a scheduled job's lease and run-row guarantees and its fence (a write
    to its catalog tables outside `ctx.transaction()`, not declared `JobSpec.unfenced`, fails every seed
    that makes it, naming the call); a pipeline's work invariants. A failing seed carries its bounded
    trace (`SeedFailure.trace`); `assert_ok()` prints the first one's; `seeds=[n]` replays seed n.
    """
    if pipelines is not None and (setup is not None or factory is not None):
        raise ValueError(
            "simulate(..., pipelines=...) submits its own batches and builds the reclaim job by its "
            "catalog entry: setup and factory are for a scheduled job"
        )
    if importlib.util.find_spec("moto") is None:
        raise ModuleNotFoundError(SIMULATOR_MISSING, name="moto")
    from jobfence.testing.sim.job import CatalogJobFamily
    from jobfence.testing.sim.pipeline import PipelineScenario
    from jobfence.testing.sim.world import Family, run_seed

    family: Family
    if pipelines is not None:
        family = PipelineScenario(registry, job, pipelines, invariant=invariant)
    else:
        family = CatalogJobFamily(registry, job, setup=setup, invariant=invariant, factory=factory)
    ran, failures, faults = 0, list[SeedFailure](), set[str]()
    for seed in seeds:
        report = run_seed(family, seed)
        ran += 1
        injected = tuple(sorted(kind.value for kind in report.injected))
        faults.update(injected)
        if not report.ok:
            violations = tuple(f"invariant {v.number}: {v.text}" for v in report.violations)
            failures.append(SeedFailure(seed, violations, injected, _bounded_trace(report.trace)))
    return SimulationReport(job, ran, tuple(failures), frozenset(faults))
