"""The listings pipelines' stores and wake-up queues, as the reclaimer, the operator's tools and a worker build them.

Only the work store and the SQS adapter: a function that does not run a pipeline's items (the reclaimer) loads
neither the worker nor the providers (`jobs.listings.pipelines` builds a worker; docs/benchmarks.md, "Cold start").
"""

from __future__ import annotations

from typing import Any

from jobfence.clock import Clock
from jobfence.config import Settings
from jobfence.quota import QuotaStore
from jobfence.work import WorkStore
from jobfence.work.sqs import SqsWakeups
from jobs.listings.catalog import BATCHES_TABLE, ITEMS_TABLE, PIPELINES, QUOTA_TABLE


def build_store(settings: Settings, clock: Clock) -> WorkStore:
    """The work store over the listings batch and item tables, with the quota table."""
    quota = QuotaStore(settings.table(QUOTA_TABLE), clock)
    return WorkStore(settings.table(BATCHES_TABLE), settings.table(ITEMS_TABLE), quota, clock)


def build_wakeups(settings: Settings, sqs: Any) -> dict[str, SqsWakeups]:
    """The wake-up queue of every pipeline this function was granted."""
    return {
        kind: SqsWakeups(sqs, settings.queue(pipeline.queue))
        for kind, pipeline in PIPELINES.items()
        if pipeline.queue in settings.queues
    }
