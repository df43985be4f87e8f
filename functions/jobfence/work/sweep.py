"""The reclaimer's reads: which batches are open, and their stale live items.

The sweep reads what exists. Per pipeline it reads the open-batch index once
(`open_batches`): no open batch means no live item (a live item's batch is
always open: the producer opens the row before it puts items, finalize needs
every row terminal, and retry_failed reopens the row in the transaction that
reopens items), so nothing else is read. Otherwise it learns each open
batch's item-shard count (fixed when the row is created, so a warm reclaimer
keeps it: `ShardCounts`) and queries only the reclaim-index shards those
batches use (`stale_items`), a 12-item batch's one rather than the whole ring.

Both indexes are eventually consistent: an entry a sweep does not see yet is
minutes younger than any stale limit, and the next sweep sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from jobfence.dynamo import aws_call
from jobfence.work.keys import (
    MAX_SHARDS,
    RECLAIM_SHARDS,
    BatchRef,
    ItemKey,
    ItemStatus,
    OpenBatch,
    OpenBatches,
)

if TYPE_CHECKING:
    from jobfence.work.store import WorkStore

OPEN_READ_LIMIT = 5_000  # open batches one sweep reads per pipeline; past it, every index shard is swept
BATCH_GET_KEYS = 100  # BatchGetItem takes at most 100 keys


class ShardCounts:
    """Batches' item-shard counts, kept while the process is warm (a count never changes), bounded."""

    MAX_BATCHES = 10_000

    def __init__(self) -> None:
        self._counts: dict[BatchRef, int] = {}

    def get(self, ref: BatchRef) -> int | None:
        return self._counts.get(ref)

    def put(self, ref: BatchRef, shards: int) -> None:
        if len(self._counts) >= self.MAX_BATCHES and ref not in self._counts:
            self._counts.clear()  # forgetting costs a read each, never a wrong answer
        self._counts[ref] = shards


def open_batches(store: WorkStore, kind: str, scoped: Callable[[str], WorkStore] | None = None) -> OpenBatches:
    """The pipeline's open batches (oldest heartbeat first) and the reclaim-index shards they use.

    One Query of the open index (keys only); then, for the batches whose
    count this process has not seen, one BatchGetItem per 100 (the count
    alone), stopping once the shards cover the whole ring. With `scoped`, the
    batch rows are read per tenant through `scoped(tenant)` (its session's
    store, `jobfence.tenants`); only the keys-only index is read as `store`.
    """
    batches = store._batches
    with aws_call(f"reading the open {kind} batches"):
        rows = list(batches.by_open.query(kind, limit=OPEN_READ_LIMIT + 1))
    found = tuple(OpenBatch(BatchRef(r.tenant, r.batch_id), int(r.updated_at)) for r in rows[:OPEN_READ_LIMIT])
    if len(rows) > OPEN_READ_LIMIT:
        return OpenBatches(kind, found, tuple(range(RECLAIM_SHARDS)))
    shards: set[int] = set()
    unknown: dict[str, list[BatchRef]] = {}  # by tenant (one tenant's only, with `scoped`)
    for batch in found:
        count = store.shard_counts.get(batch.ref)
        if count is None:
            unknown.setdefault(batch.ref.tenant if scoped else "", []).append(batch.ref)
        else:
            shards |= batch.ref.reclaim_shards(count)
    chunks = [
        (t, refs[i : i + BATCH_GET_KEYS]) for t, refs in unknown.items() for i in range(0, len(refs), BATCH_GET_KEYS)
    ]
    for tenant, chunk in chunks:
        if len(shards) == RECLAIM_SHARDS:
            break
        rows_of = scoped(tenant)._batches if scoped is not None else batches
        with aws_call(f"reading the shard counts of open {kind} batches"):
            got = {
                BatchRef(r.tenant, r.batch_id): int(r.shards) if r.shards is not None else MAX_SHARDS
                for r in rows_of.batch_get(
                    [(ref.tenant, ref.batch_id) for ref in chunk], attributes_to_get=["tenant", "batch_id", "shards"]
                )
            }
        for ref in chunk:
            count = got.get(ref, MAX_SHARDS)  # a row not returned (gone meanwhile): assume the most
            if ref in got:
                store.shard_counts.put(ref, count)
            shards |= ref.reclaim_shards(count)
    return OpenBatches(kind, found, tuple(sorted(shards)))


def stale_items(
    store: WorkStore,
    kind: str,
    status: ItemStatus,
    cutoff: int,
    limit: int,
    shards: Sequence[int],
    cursor: tuple[int, Any] | None = None,
) -> tuple[list[tuple[ItemKey, int]], tuple[int, Any] | None]:
    """One page: up to `limit` (key, updated_at) of live items with `updated_at < cutoff` in `shards`.

    Reads the sparse index only, shard by shard in ascending order (`shards`
    as `open_batches` gave them); `cursor` (a shard and where its query
    stopped) continues where the previous page stopped, None when every
    shard is exhausted.
    """
    todo = sorted(s for s in set(shards) if cursor is None or s >= cursor[0])
    start = cursor[1] if cursor is not None and todo and todo[0] == cursor[0] else None
    out: list[tuple[ItemKey, int]] = []
    items = store._items
    with aws_call(f"reading stale {status.value} items"):
        while todo and len(out) < limit:
            pages = items.by_reclaim.query(
                f"{kind}#{status.value}#{todo[0]}",
                items.updated_at < cutoff,
                limit=limit - len(out),
                last_evaluated_key=start,
            )
            for row in pages:
                out.append((ItemKey.of_row(row.batch_key, row.item_id), int(row.updated_at)))
            start = pages.last_evaluated_key
            if start is None:
                todo.pop(0)
    return out, ((todo[0], start) if todo else None)
