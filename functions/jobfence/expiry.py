"""Live expiry and an index on expiry, shared by every table whose rows expire.

Readers never trust that deletion has caught up (nor that a restored backup
holds no stale rows): `is_live(row, now)` is applied on every read. Deletion
jobs find expired rows through the sparse keys-only GSI `by_expiry`
(partition `expiry_shard`, sort `expires_at`), querying `expires_at <= now` in
each shard, so their cost grows with expired rows only, never with live ones.
A few shards spread the write load of the index across partitions.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Any

from pynamodb.indexes import GlobalSecondaryIndex

from jobfence.batch import LastBatch
from jobfence.binding import index
from jobfence.dynamo import each_row
from jobfence.indexes import EXPIRY_INDEX_SPEC, EXPIRY_SHARDS


def expiry_index() -> GlobalSecondaryIndex[Any]:
    """A model's keys-only index on (expiry_shard, expires_at): the catalog's `EXPIRY_INDEX_SPEC`, declared once."""
    return index(EXPIRY_INDEX_SPEC)


def expiry_shard(key: str) -> str:
    """The shard a row's expiry entry lives in (stable for a key)."""
    return str(zlib.crc32(key.encode()) % EXPIRY_SHARDS)


def is_live(row: Any, now_ms: int) -> bool:
    """True while the row has not expired. Apply on every read."""
    expires_at = getattr(row, "expires_at", None)
    return expires_at is None or int(expires_at) > now_ms


def expired(model: Any, now_ms: int, limit: int) -> Iterator[Any]:
    """Up to `limit` expired rows (keys only), oldest expiry first within each shard."""
    remaining = limit
    for shard in range(EXPIRY_SHARDS):
        if remaining <= 0:
            return
        query = model.by_expiry.query(str(shard), model.expires_at <= now_ms, limit=remaining)
        for row in each_row(query, f"querying expired rows of {model.Meta.table_name}"):
            yield row
            remaining -= 1
            if remaining <= 0:
                return


def deletion_batches(
    delete_expired: Callable[[int], int], batch: int, max_batches: int, counter: str
) -> Iterator[dict[str, int] | LastBatch]:
    """A retention job's batches: `delete_expired(batch)` until a short batch, at most `max_batches` times.

    Each yield is one bounded batch (`{counter: rows deleted}`), so the runner renews
    the lease between them and a huge backlog spreads over several runs; the
    short one, or the last allowed, is a `LastBatch`.
    """
    for n in range(1, max_batches + 1):
        deleted = delete_expired(batch)
        if deleted < batch or n == max_batches:
            yield LastBatch({counter: deleted})
            return
        yield {counter: deleted}
