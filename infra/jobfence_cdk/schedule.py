"""The longest gap between two ticks of a catalog job's schedule, for the alarms.

Monitoring needs it for the "no `ran` within two intervals" alarm. The
expression is evaluated by `jobfence.schedule` (the one evaluator of
EventBridge expressions: the local runtime fires by it, the run ledger
derives expected ticks from it), over the next ticks from a fixed start.
"""

from __future__ import annotations

from jobfence.registry import CatalogError, JobSpec
from jobfence.schedule import ScheduleError, healthy_gap_ms


def tick_interval_s(job: JobSpec) -> int:
    """How long a healthy job may go between two `ran` outcomes (`jobfence.schedule.healthy_gap_ms`)."""
    try:
        return healthy_gap_ms(job.schedule, job.interval_s) // 1000
    except ScheduleError as exc:
        raise CatalogError(f"catalog entry {job.name!r}: {exc}") from exc  # the error names the expression
