"""Catalog entries of the commerce API (seeds 000 and 001): its tables and jobs."""

from jobfence.expiry import EXPIRY_INDEX_SPEC
from jobfence.registry import JobSpec, TableSpec

SUBSYSTEM = "commerce"
HOURLY = "cron(0 * * * ? *)"  # seed 000: 0 * * * *

TABLES = (
    TableSpec(
        name="dpop_proofs",
        subsystem=SUBSYSTEM,
        partition_key=("jti", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="shared DPoP replay record, one row per proof id",
    ),
    TableSpec(
        name="conversations",
        subsystem=SUBSYSTEM,
        partition_key=("conversation_id", "S"),
        ttl_attribute="ttl",
        indexes=(EXPIRY_INDEX_SPEC,),
        description="customer conversations with an expiry",
    ),
)

JOBS = (
    JobSpec(
        name="clean_conversations",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.retention:build_clean_conversations",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=120,
        tables={"conversations": "read_write"},
        description="one bounded deletion of at most 100 expired conversations",
    ),
    JobSpec(
        name="clean_dpop_proofs",
        subsystem=SUBSYSTEM,
        entry="jobs.commerce.retention:build_clean_dpop_proofs",
        schedule=HOURLY,
        interval_s=3600,
        timeout_s=600,
        tables={"dpop_proofs": "read_write"},
        description="delete expired DPoP proofs, 1,000 a batch, at most 100 batches",
    ),
)
