"""The test kit for job authors: run a job on moto under a frozen clock, and under the fault simulator.

    from jobfence.testing import JobHarness, simulate

`JobHarness(session, registry, job, clock)` creates only the tables the job's
catalog entry names (with the leases and runs tables), builds the job with its
own factory and runs ticks through the real `ScheduledRunner` inside the
entry's grant and its fence (a write to a catalog table outside `ctx.transaction()`
fails the tick, naming the call: `fenced_writes_only`); a `Tick` asserts the
outcome, the run row and the summary agree.
`simulate(registry, job, setup=..., invariant=...)` runs the job under the
fault simulator for each seed (`DEFAULT_SEEDS`: 20), its fence checked on every
call, and returns a `SimulationReport` whose failing seeds carry their trace
(`seeds=[n]` replays one); `simulate(registry, reclaim_job, pipelines=...)`
runs a per-item pipeline around its reclaim job, checking the work invariants.

The pytest plugin (`jobfence.testing.plugin`; `pytest_plugins =
["jobfence.testing.plugin"]` in a conftest) gives the fixtures `clock`, `aws`,
`dynamodb`, `lambda_context`, `jobfence_catalog` and `job_harness`. Names load on first use, so
importing the kit loads neither moto nor the simulator.
"""

from jobfence.exports import on_demand, public_names

_MODULES = {
    "jobfence.testing.faults": "DEFAULT_SEEDS SeedFailure SimulationReport simulate",
    "jobfence.testing.fence": "UnfencedWrite fenced_writes_only",
    "jobfence.testing.grants": "another_party within_grant",
    "jobfence.testing.harness": "CountedMetrics JobHarness LambdaContext RunRow Tick aws_session rule_arn_of",
    "jobfence.testing.tables": "CatalogTables create_tables table_request",
}
__getattr__ = on_demand(__name__, _MODULES)
__all__ = public_names(_MODULES)
