"""The `reclaim_listings` job: the Reclaimer of both listings pipelines under its own lease.

Each page of the sweep is one batch of the job generator, so the scheduled
runner renews the lease between pages and stops at the trust window; the
summed counts land in the run row.
"""

from __future__ import annotations

from typing import Any

from jobfence.reclaim import Reclaimer, ReclaimPipeline
from jobfence.scheduled import JobDeps, RunContext
from jobfence.tenants import TenantScopes
from jobfence.work import WorkStore
from jobs.listings.catalog import PIPELINES
from jobs.listings.stores import build_store, build_wakeups


def build_reclaim_listings(deps: JobDeps):
    """Job factory (cold start): store, both wake-up queues, the reclaimer.

    With `TENANT_ROLE_ARN` set (as deployed), the job's own role reads only the keys-only indexes; every
    tenant's rows are read and written through that tenant's session (`jobfence.tenants`).
    """
    store = build_store(deps.settings, deps.clock)
    scopes = None
    if deps.settings.tenant_role_arn:

        def tenant_store(tenant: str, credentials: Any) -> WorkStore:
            return build_store(deps.settings, deps.clock)

        scopes = TenantScopes(deps.session.client("sts"), deps.settings.tenant_role_arn, deps.clock, tenant_store)
    wakeups = build_wakeups(deps.settings, deps.session.client("sqs"))
    reclaimer = Reclaimer(
        store,
        {kind: ReclaimPipeline(kind, p.timing, wakeups[kind]) for kind, p in PIPELINES.items()},
        deps.clock,
        deps.logger,
        scopes=scopes,
    )

    def reclaim_listings(ctx: RunContext):
        return reclaimer.job_batches()

    return reclaim_listings
