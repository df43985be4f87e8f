"""Durable batches: list, look at (rows first), submit from a JSON-lines file, retry failed items, cancel.

Every operation is bound to the deployed tables and queues of the functions
that were granted them (the workers and the reclaim job), read from their
environments, so the operator touches exactly what the system uses.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

from aws_lambda_powertools import Logger

from jobfence.config import Settings, table_env
from jobfence.errors import StoreError
from jobfence.quota_balance import QuotaBalance
from jobfence.work import (
    MAX_ITEMS_PER_BATCH,
    BatchOperations,
    BatchRef,
    BatchReport,
    BatchRow,
    CancelResult,
    ItemInput,
    ItemStatus,
    Producer,
    RetryResult,
    StaleCutoffs,
    SubmitResult,
    WorkStore,
)
from jobfence_ops.app import AppError, Batches
from jobfence_ops.render import when
from jobfence_ops.targets import OperatorError, Target

MAX_SUBMIT_FILE_BYTES = 64 * 1024 * 1024


def parse_ref(text: str) -> BatchRef:
    """`TENANT/BATCH`, validated (raises ValueError with a one-line reason)."""
    if "/" not in text:
        raise ValueError(f"a batch is written tenant/batch, got {text!r}")
    try:
        return BatchRef.parse(text)
    except ValueError:
        raise ValueError(
            f"{text!r}: a tenant and a batch id are 1-64 of A-Z a-z 0-9 _ . : -, starting with a letter or digit"
        ) from None


def read_items(path: pathlib.Path) -> list[ItemInput]:
    """Items from a JSON-lines file: one object per line, `{"id": ..., "input": {...}}` or just the input.

    Raises ValueError naming the first bad line; a line without an id gets `item-<line number>`.
    """
    if not path.is_file():
        raise ValueError(f"no file {str(path)!r}")
    if path.stat().st_size > MAX_SUBMIT_FILE_BYTES:
        raise ValueError(f"{path} is over {MAX_SUBMIT_FILE_BYTES // 1024 // 1024} MiB")
    items: list[ItemInput] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise ValueError(f"{path}:{number}: an item is a JSON object")
        if "input" in value:
            item_id, payload = value.get("id", f"item-{number:05d}"), value["input"]
        else:
            item_id, payload = f"item-{number:05d}", value
        if not isinstance(item_id, str) or not isinstance(payload, dict):
            raise ValueError(f"{path}:{number}: `id` is a string and `input` an object")
        items.append(ItemInput(item_id, payload))
        if len(items) > MAX_ITEMS_PER_BATCH:
            raise ValueError(f"{path}: a batch has at most {MAX_ITEMS_PER_BATCH} items")
    if not items:
        raise ValueError(f"{path}: no items")
    return items


def _batches(target: Target) -> Batches:
    """The app's durable batches (OperatorError when it declares none)."""
    try:
        return target.app.require_batches()
    except AppError as exc:
        raise OperatorError(str(exc)) from None


def work_settings(target: Target) -> Settings:
    """The work tables and queues, from the functions that were granted them (workers, reclaim)."""
    app = _batches(target)
    merged: dict[str, str] = {}
    for function in target.topology.functions.values():
        env = function.environment
        if table_env(app.batches_table) in env and table_env(app.items_table) in env:
            merged.update({k: v for k, v in env.items() if k.startswith(("TABLE_", "QUEUE_"))})
    if not merged:
        raise OperatorError("no deployed function has the batch and item tables")
    return Settings.from_environ(merged)


def reclaim_jobs(target: Target) -> list[str]:
    """The jobs whose function holds the batch and item tables: the app's reclaimers."""
    app = _batches(target)
    needs = {table_env(app.batches_table), table_env(app.items_table)}
    return sorted(f.job for f in target.topology.functions.values() if f.job and needs <= set(f.environment))


def work_resources(target: Target) -> tuple[list[str], list[str]]:
    """The physical work tables and the queue URLs (or names) a retry writes to and wakes."""
    settings = work_settings(target)
    return sorted(set(settings.tables.values())), sorted(set(settings.queues.values()))


def work_store(target: Target) -> WorkStore:
    """The durable-batches store bound to the deployed tables."""
    return _batches(target).build_store(work_settings(target), target.clock)


def _parts(target: Target) -> tuple[WorkStore, dict[str, Any], Logger]:
    app, settings = _batches(target), work_settings(target)
    wakeups = dict(app.build_wakeups(settings, target.session.client("sqs")))
    return app.build_store(settings, target.clock), wakeups, Logger(service="operator", level="WARNING")


def _operations(target: Target) -> BatchOperations:
    return BatchOperations(*_parts(target))


def producer(target: Target) -> Producer:
    """The durable-batches producer (store and wake-up queues) bound to the deployed resources."""
    return Producer(*_parts(target), tolerated_failure_pct=_batches(target).tolerated_failure_pct)


def stale_item_counts(target: Target) -> dict[str, int] | None:
    """Live items per pipeline and status whose `updated_at` is older than that pipeline's stale limit
    (None: the app has no durable batches, or none is deployed)."""
    if target.app.batches is None:
        return None
    try:
        store = work_store(target)
    except OperatorError:
        return None
    now = target.clock.now_ms()
    counts = {}
    for kind, pipeline in target.app.batches.pipelines.items():
        timing = pipeline.timing
        cutoffs = StaleCutoffs(running=timing.running_cutoff(now), pending=timing.pending_cutoff(now))
        by_status = {ItemStatus.RUNNING: 0, ItemStatus.PENDING: 0}
        for batch in store.batches.open_batches(kind).batches:  # as the reclaimer reads them: the open batches' items
            for stale in store.items.stale_items(batch, cutoffs):
                by_status[stale.status] += 1
        counts.update({f"{kind}/{status.value}": n for status, n in by_status.items()})
    return counts


def batch(target: Target, ref: BatchRef) -> BatchReport:
    """Rows first: the batch row, then its item rows (status, attempts, error, updated_at)."""
    report = _operations(target).describe_batch(ref)
    if report is None:
        raise OperatorError(f"no batch {ref}")
    return report


def batches(target: Target, tenant: str | None = None, limit: int = 50) -> list[BatchRow]:
    """Batch rows (counters and status), newest first: one tenant's, or any tenant's."""
    rows = work_store(target).batches.list_batches(tenant, limit)
    return sorted(rows, key=lambda b: b.created_at, reverse=True)


def submit(target: Target, ref: BatchRef, kind: str, items: list[ItemInput], created_by: str) -> SubmitResult:
    """Create the batch and wake a worker per item (repeating it resumes, never duplicates)."""
    pipelines = _batches(target).pipelines
    if kind not in pipelines:
        raise OperatorError(f"no pipeline {kind!r}; pipelines: {', '.join(sorted(pipelines))}")
    try:
        return producer(target).submit(ref, kind, items, created_by)
    except (ValueError, StoreError) as exc:
        raise OperatorError(str(exc)) from None


def retry_failed(target: Target, ref: BatchRef, requested_by: str) -> RetryResult:
    """Reset the batch's failed items (a fresh attempts budget, quota re-reserved) and wake them."""
    try:
        return _operations(target).retry_failed(ref, requested_by)
    except (ValueError, StoreError) as exc:
        raise OperatorError(str(exc)) from None


def cancel(target: Target, ref: BatchRef, requested_by: str) -> CancelResult:
    """Cancel the batch: its pending items end cancelled (quota refunded once), running ones finish."""
    try:
        return _operations(target).cancel(ref, requested_by)
    except (ValueError, StoreError) as exc:
        raise OperatorError(str(exc)) from None


def cancel_summary(result: CancelResult) -> str:
    """What a cancel has done, in one line (the CLI's output and the console's result)."""
    asked = "" if result.recorded_now else f" (asked first by {result.requested_by} at {when(result.requested_at)})"
    return (
        f"batch {result.ref} {result.status.value}{asked}: cancelled {result.cancelled} item(s), "
        f"refunded {result.refunded} unit(s), {result.running} still running"
    )


def grant_quota(target: Target, tenant: str, units: int) -> QuotaBalance:
    """Give a tenant more actions (the balance after the grant)."""
    try:
        return work_store(target).quota.grant(tenant, units)
    except (ValueError, StoreError) as exc:
        raise OperatorError(str(exc)) from None


def quota(target: Target, tenant: str) -> QuotaBalance:
    """A tenant's books: limit, available, reserved, refunded."""
    return work_store(target).quota.balance(tenant)
