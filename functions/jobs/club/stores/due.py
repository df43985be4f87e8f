"""Sparse "due" indexes shared by the club tables.

A row that waits for a job carries a shard attribute (set while it waits,
removed by the conditional update that handles it) and a due time. The index
is sparse, so a job's reads grow with due rows only. Reads from an index are
eventually consistent: every handler re-reads the row consistently and its
update repeats the due condition, so a stale index entry changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jobfence.dynamo import each_row
from jobfence.expiry import EXPIRY_SHARDS, expiry_shard

SHARDS = EXPIRY_SHARDS


def shard_of(key: str) -> str:
    """The shard of a row's due entry (stable for a key)."""
    return expiry_shard(key)


def due_rows(index: Any, due_attr: Any, now_ms: int, limit: int) -> Iterator[Any]:
    """Up to `limit` index entries due at `now_ms`, earliest first within each shard."""
    remaining = limit
    for shard in range(SHARDS):
        if remaining <= 0:
            return
        query = index.query(str(shard), due_attr <= now_ms, limit=remaining)
        for row in each_row(query, f"querying the due index {index.Meta.index_name}"):
            yield row
            remaining -= 1
            if remaining <= 0:
                return
