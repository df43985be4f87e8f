"""The `reclaim_listings` job: the Reclaimer of both listings pipelines under its own lease.

Each page of the sweep is one batch of the job generator, so the scheduled
runner renews the lease between pages and stops at the trust window; the
summed counts land in the run row.
"""

from __future__ import annotations

from jobfence.reclaim import Reclaimer, ReclaimPipeline
from jobfence.scheduled import JobDeps, RunContext
from jobs.listings.pipelines import PIPELINES, build_store, build_wakeups


def build_reclaim_listings(deps: JobDeps):
    """Job factory (cold start): store, both wake-up queues, the reclaimer."""
    store = build_store(deps.settings, deps.clock)
    wakeups = build_wakeups(deps.settings, deps.session.client("sqs"))
    reclaimer = Reclaimer(
        store,
        {kind: ReclaimPipeline(kind, p.timing, wakeups[kind]) for kind, p in PIPELINES.items()},
        deps.clock,
        deps.logger,
    )

    def reclaim_listings(ctx: RunContext):
        return reclaimer.job_batches()

    return reclaim_listings
