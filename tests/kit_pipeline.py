"""A job author's own per-item pipeline (as docs/your-first-pipeline.md builds one), for the kit's simulator tests.

`CATALOG` has the three work tables, the wake-up queue and the reclaim job; `PIPELINES` is what the
worker handler takes. `build_reclaim_drops` is the reclaim job's factory. `RAISING_PIPELINES` is the same
pipeline with a defect planted in its wake-up adapter: a throttled SendMessageBatch raises out of the worker
(Lambda would then redeliver its whole SQS batch) instead of returning the keys it could not send.
"""

from __future__ import annotations

from typing import Any, Sequence

from jobfence import JobDeps, JobSpec, QueueSpec, QuotaStore, Reclaimer, Registry, TableSpec, WorkerPipeline
from jobfence.reclaim import ReclaimPipeline
from jobfence.work import OPEN_INDEX_SPEC, SEND_CHUNK, ItemKey, Timing, WorkRequest, WorkStore

KIND = "drop"
TIMING = Timing(per_item_timeout_s=60, item_stale_s=180, pending_stale_s=900, batch_stale_s=900)
WORK_TABLES = {"drop_batches": "get+query+update", "drop_items": "batch_get+get+query+update", "drop_quota": "get+update"}

CATALOG = Registry(
    tables=(
        TableSpec(name="drop_batches", subsystem="kit", partition_key=("tenant", "S"), sort_key=("batch_id", "S"),
                  indexes=(OPEN_INDEX_SPEC,)),
        TableSpec(name="drop_items", subsystem="kit", partition_key=("batch_key", "S"), sort_key=("item_id", "S")),
        TableSpec(name="drop_quota", subsystem="kit", partition_key=("tenant", "S")),
    ),
    jobs=[JobSpec(name="reclaim_drops", subsystem="kit", entry="tests.kit_pipeline:build_reclaim_drops",
                  schedule="rate(5 minutes)", interval_s=300, timeout_s=300,
                  tables={"drop_batches": "get+query+update", "drop_items": "query+update", "drop_quota": "update"},
                  queues=("drop_wakeups",))],
    queues=[QueueSpec(name="drop_wakeups", subsystem="kit", handler="handlers.worker.handler", worker_timeout_s=120,
                      visibility_timeout_s=720, tables=WORK_TABLES, queues=("drop_wakeups",))],
)


def perform(request: WorkRequest, timeout_s: float) -> str:
    return f"drops/{request.key.item_id}"


class SqsWakeups:
    """Wake-ups on SQS, ten to a request; a request that failed returns its keys (the rows stay the truth)."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs, self._url = sqs, queue_url

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        failed: list[ItemKey] = []
        for start in range(0, len(keys), SEND_CHUNK):
            chunk = list(keys[start:start + SEND_CHUNK])
            entries = [{"Id": str(i), "MessageBody": key.body(), "DelaySeconds": min(int(delay_s), 900)}
                       for i, key in enumerate(chunk)]
            try:
                out = self._send(entries)
            except Exception:  # noqa: BLE001 - the caller re-sends later (the reclaimer's pending sweep)
                failed += chunk
                continue
            failed += [chunk[int(f["Id"])] for f in out.get("Failed", [])]
        return failed

    def _send(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        return self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries)


class RaisingWakeups(SqsWakeups):
    """The defect: a throttled or failed SendMessageBatch raises out of `send` (out of the worker and producer)."""

    def send(self, keys: Sequence[ItemKey], delay_s: int = 0) -> list[ItemKey]:
        entries = [{"Id": str(i), "MessageBody": key.body(), "DelaySeconds": min(int(delay_s), 900)}
                   for i, key in enumerate(keys)]
        return [keys[int(f["Id"])] for f in self._send(entries).get("Failed", [])]


def store(settings: Any, clock: Any) -> WorkStore:
    tables = settings.tables
    return WorkStore(tables["drop_batches"], tables["drop_items"], QuotaStore(tables["drop_quota"], clock), clock)


PIPELINES = {"drop_wakeups": WorkerPipeline(kind=KIND, timing=TIMING, store=store, perform=lambda s: perform,
                                            wakeups=SqsWakeups)}
RAISING_PIPELINES = {"drop_wakeups": WorkerPipeline(kind=KIND, timing=TIMING, store=store,
                                                    perform=lambda s: perform, wakeups=RaisingWakeups)}


def build_reclaim_drops(deps: JobDeps):
    wakeups = SqsWakeups(deps.session.client("sqs"), deps.settings.queue("drop_wakeups"))
    sweep = Reclaimer(store(deps.settings, deps.clock), {KIND: ReclaimPipeline(KIND, TIMING, wakeups)}, deps.clock,
                      deps.logger)
    return lambda ctx: sweep.job_batches()
