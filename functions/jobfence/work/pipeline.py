"""WorkerPipeline: what an app supplies for the worker of one queue (`jobfence.handler.worker_handler`).

Data and factories only, so a catalog or a pipelines module can name its pipelines without loading the
work store: each factory is called once, at the worker function's cold start, with the function's
validated settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobfence.clock import Clock
    from jobfence.config import Settings
    from jobfence.work.claims import Perform
    from jobfence.work.fairness import TenantGate
    from jobfence.work.store import WorkStore
    from jobfence.work.timing import Timing
    from jobfence.work.wakeups import Wakeups


@dataclass(frozen=True)
class WorkerPipeline:
    """The pipeline a worker of one queue runs: its kind and timing, and how its parts are built.

    `store(settings, clock)`: the work store over the function's batches, items and quota tables.
    `perform(settings)`: the item step, one provider call per item (the real adapter, at the URL or with
    the secret the function was configured with; a test passes its own step to `worker_handler` instead).
    `wakeups(sqs, queue_url)`: the wake-up adapter the worker re-sends delayed retries and deferrals through,
    on the function's own queue. `gate(settings, clock)`: the per-tenant in-flight cap, or None for none.
    """

    kind: str
    timing: Timing
    store: Callable[[Settings, Clock], WorkStore]
    perform: Callable[[Settings], Perform]
    wakeups: Callable[[Any, str], Wakeups]
    gate: Callable[[Settings, Clock], TenantGate | None] | None = None
    defer_delay_s: int = 30  # how long a wake-up deferred by the gate waits (SQS DelaySeconds)
