"""Catalog entries of the backoffice: its own table and its own hourly ledger cleanup.

The table belongs to subsystem "backoffice", so the registry refuses any
commerce (or other) job or queue that lists it: no other function's role can
read or write it.
"""

from jobfence.indexes import EXPIRY_INDEX_SPEC
from jobfence.registry import JobSpec, TableSpec

SUBSYSTEM = "backoffice"
HOURLY = "cron(0 * * * ? *)"

TABLES = (
    TableSpec(
        name="operator_access_ledger",
        subsystem=SUBSYSTEM,
        partition_key=("entry_id", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="local operator-access ledger (session digests, never sessions) with an expiry",
    ),
)

JOBS = (
    JobSpec(
        name="clean_operator_access_ledger",
        subsystem=SUBSYSTEM,
        entry="jobs.backoffice.ledger_cleanup:build_clean_operator_access_ledger",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=300,
        tables={"operator_access_ledger": "query+batch_write"},  # the expiry index, then batched deletes
        unfenced={"operator_access_ledger": "deletes only expired entries (never extended): any term deletes the same"},
        description="delete expired operator-access ledger entries, 1,000 a batch, at most 20 batches",
    ),
)
