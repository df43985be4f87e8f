"""The longest gap between two ticks of an EventBridge schedule expression.

Monitoring needs it for the "no `ran` within two intervals" alarm. The
expression is evaluated by `jobfence.schedule` (the one evaluator of
EventBridge expressions: the local runtime fires by it, the run ledger
derives expected ticks from it), over the next ticks from a fixed start.
"""

from __future__ import annotations

import datetime as dt

from jobfence.registry import CatalogError, JobSpec
from jobfence.schedule import Schedule, ScheduleError

# A fixed start keeps synthesis deterministic (the template must not change with the date).
_START_MS = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp() * 1000)
_TICKS = 400


def tick_interval_s(job: JobSpec) -> int:
    """How long a healthy job may go between two `ran` outcomes.

    The longer of its interval gate (ticks inside the gate skip) and the longest
    gap between its scheduled ticks (a gate shorter than the schedule changes nothing).
    """
    return max(job.interval_s or 0, schedule_gap_s(job))


def schedule_gap_s(job: JobSpec) -> int:
    """The longest gap between two scheduled ticks of the job's expression."""
    try:
        return Schedule(job.schedule, _START_MS).longest_gap_ms(_TICKS) // 1000
    except ScheduleError as exc:
        raise CatalogError(f"catalog entry {job.name!r}: {exc}") from exc  # the error names the expression
