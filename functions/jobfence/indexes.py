"""The index specs of the runtime's shared stores, as data (no pynamodb).

The catalog declares every table's indexes (`jobs/*/catalog.py`), and a
catalog must import without loading a store: a function imports only its own
job's module and the stores that job uses (docs/benchmarks.md, cold start).
So the specs live here, and the stores (`jobfence.expiry`, `jobfence.work.batches`,
the club's due indexes) build their pynamodb indexes from the same names.
"""

from __future__ import annotations

from jobfence.registry import IndexSpec

EXPIRY_INDEX = "by_expiry"
EXPIRY_SHARDS = 4
EXPIRY_INDEX_SPEC = IndexSpec(
    name=EXPIRY_INDEX,
    partition_key=("expiry_shard", "S"),
    sort_key=("expires_at", "N"),
    projection="KEYS_ONLY",
)

OPEN_INDEX = "by_open"
OPEN_INDEX_SPEC = IndexSpec(
    name=OPEN_INDEX, partition_key=("open_key", "S"), sort_key=("updated_at", "N"), projection="KEYS_ONLY"
)
"""The sparse index of a pipeline's batches table (`TableSpec(indexes=(OPEN_INDEX_SPEC,))`): only open batches
carry its key, so the reclaimer finds the batches it may have to finalize without a scan."""


def due_index_spec(name: str, shard_attr: str, due_attr: str) -> IndexSpec:
    """A sparse keys-only "due" index: rows waiting for a job, sharded, sorted by their due time."""
    return IndexSpec(name=name, partition_key=(shard_attr, "S"), sort_key=(due_attr, "N"), projection="KEYS_ONLY")
