"""What each job's runs cost over a time range: `jobfence cost --since 1d` (issue 33 item 2).

Read from the run rows, which carry their DynamoDB units, requests and dollar estimate
(`jobfence.capacity`, prices of `jobfence.prices`): one range query per job on the runs
table's sort key. A run row from before costs were kept counts as a run without a cost.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.capacity import Cost, Units
from jobfence.prices import PRICES_AS_OF
from jobfence.runs import RunStore
from jobfence_ops.commands.jobs import core_tables
from jobfence_ops.targets import Target


@dataclass(frozen=True)
class JobCost:
    """One job's runs started in the range, and what those that recorded a cost cost in all."""

    job: str
    runs: int
    costed: int  # runs whose row carries a cost
    units: Units
    requests: int
    dollars: float


@dataclass(frozen=True)
class CostReport:
    """Every job's cost over [since, until], the total, and the date of the prices the estimates used."""

    since_ms: int
    until_ms: int
    jobs: tuple[JobCost, ...]
    prices_as_of: str = PRICES_AS_OF

    @property
    def dollars(self) -> float:
        return sum(j.dollars for j in self.jobs)

    @property
    def runs(self) -> int:
        return sum(j.runs for j in self.jobs)


def job_costs(target: Target, since_ms: int, until_ms: int) -> CostReport:
    """Every catalog job's runs started in [since, until], their units and cost summed per job."""
    _, runs_table = core_tables(target)
    store = RunStore(target.session.client("dynamodb"), runs_table)
    out = []
    for job in sorted(target.app.catalog.jobs):
        rows = store.started_between(job, since_ms, until_ms)
        costs = [c for c in (Cost.of_fields(r) for r in rows) if c is not None]
        total = sum(costs, Cost())
        out.append(JobCost(job, len(rows), len(costs), total.units, total.requests, total.dollars))
    return CostReport(since_ms, until_ms, tuple(out))
