"""The Reclaimer: the maintenance agent that heals a queue nobody is watching (seed 003).

It runs as a registered scheduled job under its own lease (see
`jobs/listings/reclaim.py`); each page of its sweep is one bounded batch of the
job generator, so the runner renews the lease between pages. Per pipeline:

    running items with updated_at < now - item stale     (a worker died mid-item)
        attempts < cap -> pending + error "reclaimed ...", wake-up re-sent
        attempts = cap -> failed, quota refunded (one transaction)
    pending items with updated_at < now - pending stale  (the wake-up was lost)
        -> updated_at bumped, wake-up re-sent (at most once per pending-stale period)
    open batches with updated_at < now - batch stale     (nobody rolled them up)
        -> a roll-up tally newer than that is the batch's heartbeat: copied to its row;
           otherwise finalize from the item rows (recount), heartbeat if still live

Each limit is waited the time budget (70 s) longer (`Timing.running_cutoff` and the
others; docs/guarantees.md, "The time budget"): `updated_at` is another actor's clock,
read when its request was built, so a row is moved only once its last write is at
least the limit old in true time.

Per pipeline, the open-batch index (`by_open`) is read once
(`BatchStore.open_batches`): with no open batch nothing else is read (a live
item's batch is always open); otherwise the item partitions of each open batch
are queried, filtered to its stale live rows (`ItemStore.stale_items`, through
the batch's tenant's store), and the stale open batches are taken from the
same index read. So a sweep's reads grow with the rows of open batches, never
with the table's finished ones, and an item's writes carry no index entry
(docs/benchmarks.md, "Cost per million items"). Every write re-checks
status, `updated_at` and attempts in its condition, so an item that completed
(or was claimed, or re-enqueued) after the sweep's read is never overwritten;
that is also why the writes are not fenced with the lease: a paused reclaimer's
late write can only apply to a row still exactly as it saw it, which is a row
any reclaimer would move the same way. Automation never resets attempts.

A store error (throttling, a lost reply, a 5xx: classified in `jobfence.dynamo`)
fails only the item, page or batch it hit: it is logged and counted as
`errors`, and the sweep goes on; the next run retries what it left.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields, replace

from aws_lambda_powertools import Logger

from jobfence.clock import Clock
from jobfence.dynamo import safe_error
from jobfence.errors import JobfenceError
from jobfence.work import (
    BatchDelta,
    BatchRef,
    BatchStatus,
    ItemKey,
    ItemStatus,
    OpenBatch,
    OpenBatches,
    StaleCutoffs,
    StaleItem,
    StaleVerdict,
    Tallies,
    Timing,
    Wakeups,
    WorkStore,
)

DEFAULT_PAGE_SIZE = 100
DEFAULT_MAX_PAGES = 50  # pages of stale items per pipeline in one run; the next run continues


@dataclass(frozen=True)
class ReclaimPipeline:
    """One pipeline the reclaimer looks after: its kind, timing and wake-up queue."""

    kind: str
    timing: Timing
    wakeups: Wakeups


@dataclass(frozen=True)
class ReclaimCounts:
    """What one page of a sweep did (or a whole sweep: pages add up). Its `summary()` lands in the run row."""

    stale_running: int = 0  # running rows past item-stale that the page read
    stale_pending: int = 0  # pending rows past pending-stale that the page read
    requeued: int = 0  # moved to pending (or bumped) and woken
    failed: int = 0  # failed at the attempts cap, quota refunded
    changed: int = 0  # moved on between the index read and the write: left alone
    unsent: int = 0  # wake-ups that could not be sent (the next pending sweep re-sends them)
    errors: int = 0  # store errors: the item, page or batch is left for the next run
    batches_swept: int = 0  # open batches past batch-stale that the page read
    batches_finalized: int = 0  # of those, finalized from their rows

    def __add__(self, other: ReclaimCounts) -> ReclaimCounts:
        return ReclaimCounts(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def summary(self) -> dict[str, int]:
        """The counts as a run row's batch summary (field name -> count)."""
        return asdict(self)


class Reclaimer:
    """Resume stale items and finalize abandoned batches, in bounded pages."""

    def __init__(
        self,
        store: WorkStore,
        pipelines: Mapping[str, ReclaimPipeline],
        clock: Clock,
        logger: Logger,
        page_size: int = DEFAULT_PAGE_SIZE,
        max_pages: int = DEFAULT_MAX_PAGES,
        scopes: Callable[[str], WorkStore] | None = None,
    ) -> None:
        self._store = store  # the keys-only open index; every tenant's rows too when there are no `scopes`
        self._scopes = scopes  # per tenant: its session's store (`jobfence.tenants`)
        self._pipelines = dict(pipelines)
        self._clock = clock
        self._logger = logger
        self._page_size = page_size
        self._max_pages = max_pages
        self._tallies = Tallies()  # the reclaimer rolls up the items it fails, as a writer of its own

    def _tenant(self, tenant: str) -> WorkStore:
        """The store of one tenant's rows (a `JobfenceError` when its session cannot be had)."""
        return self._store if self._scopes is None else self._scopes(tenant)

    def run_once(self) -> ReclaimCounts:
        """One whole sweep; the summed counts of its pages."""
        return sum(self.pages(), ReclaimCounts())

    def job_batches(self) -> Iterator[dict[str, int]]:
        """The sweep as a scheduled job's batches: each page's counts as its summary."""
        return (page.summary() for page in self.pages())

    def pages(self) -> Iterator[ReclaimCounts]:
        """The sweep as bounded pages, each yielding its counts (a scheduled job's batches)."""
        for pipeline in self._pipelines.values():
            try:
                scoped = None if self._scopes is None else (lambda tenant: self._tenant(tenant).batches)
                open_batches = self._store.batches.open_batches(pipeline.kind, scoped)
            except JobfenceError as exc:
                self._logger.warning(
                    "reading open batches failed", extra={"kind": pipeline.kind, "reason": safe_error(exc)}
                )
                yield ReclaimCounts(errors=1)
                continue
            # no open batch: no live item either (its batch would be open), so nothing else to read
            yield from self._items(pipeline, open_batches)
            yield from self._batches(pipeline, open_batches)

    # -- items ------------------------------------------------------------------------------

    def _items(self, pipeline: ReclaimPipeline, open_batches: OpenBatches) -> Iterator[ReclaimCounts]:
        """The stale live items of the open batches, `page_size` to a page, at most `max_pages` pages."""
        timing = pipeline.timing
        now = self._clock.now_ms()
        # fixed for the run (rows we bump never qualify again); the time budget longer than the limit
        cutoffs = StaleCutoffs(running=timing.running_cutoff(now), pending=timing.pending_cutoff(now))
        pages, page, read = 0, [], 0  # pages yielded; stale items of this page; batches read since the last page
        for batch in open_batches.batches:
            read += 1
            try:
                for stale in self._stale_of(batch, cutoffs):
                    page.append(stale)
                    if len(page) == self._page_size:
                        yield self._reclaim_page(pipeline, page)
                        pages, page, read = pages + 1, [], 0
                        if pages == self._max_pages:
                            return
            except JobfenceError as exc:
                self._logger.warning(
                    "reading stale items failed",
                    extra={"tenant": batch.ref.tenant, "batch": batch.ref.batch_id, "reason": safe_error(exc)},
                )
                yield ReclaimCounts(errors=1)
            if read >= self._page_size:  # a page's worth of batches read: a page, so the runner renews its lease
                yield self._reclaim_page(pipeline, page)
                pages, page, read = pages + 1, [], 0
                if pages == self._max_pages:
                    return
        if page:
            yield self._reclaim_page(pipeline, page)

    def _stale_of(self, batch: OpenBatch, cutoffs: StaleCutoffs) -> Iterator[StaleItem]:
        """The batch's stale live items, read through its tenant's store."""
        return self._tenant(batch.ref.tenant).items.stale_items(batch, cutoffs)

    def _reclaim_page(self, pipeline: ReclaimPipeline, rows: list[StaleItem]) -> ReclaimCounts:
        timing = pipeline.timing
        tally = {"requeued": 0, "failed": 0, "changed": 0, "unsent": 0, "errors": 0}
        wake: list[ItemKey] = []
        failed_by_batch: dict[BatchRef, int] = {}
        for stale in rows:
            key, status, seen = stale.key, stale.status, stale.updated_at
            if status is ItemStatus.RUNNING:
                error = f"reclaimed: running for over {timing.item_stale_s} s without an outcome (worker stopped)"
            else:
                error = f"reclaimed: pending for over {timing.pending_stale_s} s without a worker (wake-up lost)"
            try:
                store = self._tenant(key.tenant)
                verdict = store.items.requeue_stale(key, status, seen, timing.attempts_cap, error)
                failed = False
                if verdict is StaleVerdict.CAPPED:
                    capped_error = f"{error}; attempts cap {timing.attempts_cap} reached"
                    failed = store.items.fail_stale(key, status, seen, capped_error)
            except JobfenceError as exc:
                self._logger.warning("reclaiming an item failed", extra={"reason": safe_error(exc), **key.log_ids()})
                tally["errors"] += 1
                continue
            outcome = "failed" if failed else "changed" if verdict is StaleVerdict.CAPPED else verdict.value
            tally[outcome] += 1
            if verdict is StaleVerdict.REQUEUED:
                wake.append(key)
            elif failed:
                failed_by_batch[key.batch] = failed_by_batch.get(key.batch, 0) + 1
            self._logger.info("reclaim", extra={"outcome": outcome, "from_status": status.value, **key.log_ids()})
        if wake:
            # a wake-up that cannot be sent leaves a pending row: the next pending sweep re-sends it
            tally["unsent"] = len(pipeline.wakeups.send(wake))
        for ref, failed_items in failed_by_batch.items():
            rollup = self._tallies.add(ref, BatchDelta(failed=failed_items))  # kept if the write fails
            try:
                store = self._tenant(ref.tenant)
                store.rollups.write(ref, rollup)
                row = store.batches.batch(ref)
                if (
                    row is not None
                    and row.status is BatchStatus.OPEN
                    and (row.completed + row.failed >= row.total or row.cancel_requested)
                ):
                    store.batches.finalize(ref, seen=row)
            except JobfenceError as exc:
                # counters are only a hint: the batch-stale sweep finalizes from the rows
                self._logger.warning(
                    "roll-up failed", extra={"tenant": ref.tenant, "batch": ref.batch_id, "reason": safe_error(exc)}
                )
                tally["errors"] += 1
        running = sum(1 for stale in rows if stale.status is ItemStatus.RUNNING)
        return ReclaimCounts(stale_running=running, stale_pending=len(rows) - running, **tally)

    # -- batches ----------------------------------------------------------------------------

    def _batches(self, pipeline: ReclaimPipeline, open_batches: OpenBatches) -> Iterator[ReclaimCounts]:
        cutoff = pipeline.timing.batch_cutoff(self._clock.now_ms())  # the time budget longer than batch-stale
        # the open read is oldest first; a batch heartbeated since is seen by finalize's own read
        stale = [b.ref for b in open_batches.batches if b.updated_at < cutoff]
        for start in range(0, min(len(stale), self._max_pages * self._page_size), self._page_size):
            refs = stale[start : start + self._page_size]
            counts = ReclaimCounts(batches_swept=len(refs))
            for ref in refs:
                try:
                    row = self._tenant(ref.tenant).batches.finalize(ref, heartbeat=True, stale_before=cutoff)
                except JobfenceError as exc:
                    self._logger.warning(
                        "finalizing a batch failed",
                        extra={"tenant": ref.tenant, "batch": ref.batch_id, "reason": safe_error(exc)},
                    )
                    counts = replace(counts, errors=counts.errors + 1)
                    continue
                if row is not None and row.status.final:
                    counts = replace(counts, batches_finalized=counts.batches_finalized + 1)
                self._logger.info(
                    "reclaim batch",
                    extra={
                        "tenant": ref.tenant,
                        "batch": ref.batch_id,
                        "status": row.status.value if row else "missing",
                    },
                )
            yield counts
