"""The lease/runner family: duplicate and later ticks of `clean_dpop_proofs` under faults.

The scenario is `jobfence.testing.sim.scheduled.ScheduledJobScenario`; the job is this
application's `clean_dpop_proofs`, its batch size scaled down (2 rows) so one
run has several batches and so several renewals. Liveness: after the clean
tick, every expired proof is deleted and the live ones are kept.
"""

from __future__ import annotations

from typing import Any

from jobfence.registry import JobSpec
from jobfence.testing.sim.kernel import START_MS
from jobfence.testing.sim.scheduled import ScheduledJobScenario
from jobfence.testing.sim.world import World
from jobs.catalog import CATALOG
from jobs.commerce.dpop_proofs import DpopProofStore

JOB = "clean_dpop_proofs"
SIM_BATCH = 2  # rows a batch (the catalog's 1,000 scaled down: several batches per run)
EXPIRED, LIVE = 5, 2


class LeaseFamily(ScheduledJobScenario):
    name = "lease"
    tables = ("leases", "runs", "dpop_proofs")
    registry = CATALOG

    def _spec(self) -> JobSpec:
        return CATALOG.job(JOB)

    def _seed(self, world: World, clock: Any) -> None:
        import jobs.commerce.retention as retention

        saved = retention.DPOP_BATCH
        retention.DPOP_BATCH = SIM_BATCH
        world.cleanups.append(lambda: setattr(retention, "DPOP_BATCH", saved))
        proofs = DpopProofStore(world.tables["dpop_proofs"], clock)
        for i in range(EXPIRED):
            proofs.record(f"old{i}", START_MS - 60_000 * (i + 1))
        for i in range(LIVE):
            proofs.record(f"new{i}", START_MS + 30 * 24 * 3_600_000)

    def _done(self, world: World) -> None:
        proofs = {p["jti"] for p in world.scan("dpop_proofs")}
        if any(f"old{i}" in proofs for i in range(EXPIRED)) or len(proofs) != LIVE:
            world.violate(0, f"liveness: after a clean run the proofs left are {sorted(proofs)}")
