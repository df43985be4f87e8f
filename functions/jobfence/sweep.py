"""The operator's sweep of dead runs (`jobfence sweep-runs`): every term that ended unreleased marked `died`.

Run by the operator's tooling, never by a function's tick (each acquire marks the run it replaces), so no
function loads it (docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.lease import LeaseStore, predecessor_term, unreleased_term
from jobfence.runs import RunStore


@dataclass(frozen=True)
class SweepResult:
    """One pass of the dead-run sweep."""

    jobs: int
    died: int


def sweep_dead_runs(leases: LeaseStore, runs: RunStore, now_ms: int) -> SweepResult:
    """Mark `died` the run of every term that ended unreleased, where no acquire did it.

    Per lease item (one per job, a tiny table): its current term if it
    expired unreleased (the job was not ticked again: disabled, or its rule
    deleted), and the term its last acquire replaced unreleased (in case that
    acquire's own `died` write failed), whose copy it then settles. Both
    writes are idempotent (`mark_died` is refused by a finished row), so the
    sweep can run any time.
    """
    died = 0
    items = leases.all()
    for item in items:
        current, replaced = unreleased_term(item, now_ms), predecessor_term(item)
        if current is not None and runs.mark_died(current, now_ms):
            died += 1
        if replaced is not None:
            died += runs.mark_died(replaced, now_ms)
            leases.settle(replaced)
    return SweepResult(jobs=len(items), died=died)
