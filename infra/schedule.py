"""The longest gap between two ticks of an EventBridge schedule expression.

Monitoring needs it for the "no `ran` within two intervals" alarm. `rate(...)` is exact; `cron(...)` is evaluated with
croniter over the next ticks (EventBridge's `?` and year field are dropped;
its day-of-week numbering is shifted to cron's, which matters only for which
day, not for the gaps between days).
"""

from __future__ import annotations

import datetime as dt
import re

from croniter import croniter

from jobfence.registry import CatalogError, JobSpec

_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}
_DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
# A fixed start keeps synthesis deterministic (the template must not change with the date).
_START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
_TICKS = 400


def tick_interval_s(job: JobSpec) -> int:
    """How long a healthy job may go between two `ran` outcomes.

    The longer of its interval gate (ticks inside the gate skip) and the longest
    gap between its scheduled ticks (a gate shorter than the schedule changes nothing).
    """
    return max(job.interval_s or 0, schedule_gap_s(job))


def schedule_gap_s(job: JobSpec) -> int:
    """The longest gap between two scheduled ticks of the job's expression."""
    rate = _RATE.match(job.schedule)
    if rate:
        return int(rate.group(1)) * _UNIT_S[rate.group(2).rstrip("s")]
    return _longest_cron_gap(job)


def _longest_cron_gap(job: JobSpec) -> int:
    fields = job.schedule.removeprefix("cron(").removesuffix(")").split()
    if len(fields) != 6:
        raise CatalogError(f"catalog entry {job.name!r}: cron {job.schedule!r} needs six fields")
    minute, hour, dom, month, dow, _year = (f.replace("?", "*") for f in fields)
    dow = _cron_days(dow)
    try:
        ticks = croniter(" ".join([minute, hour, dom, month, dow]), _START)
        times = [ticks.get_next(float) for _ in range(_TICKS)]
    except (ValueError, KeyError) as exc:
        raise CatalogError(f"catalog entry {job.name!r}: cannot evaluate cron {job.schedule!r}: {exc}") from exc
    return int(max(b - a for a, b in zip(times, times[1:])))


def _cron_days(dow: str) -> str:
    """EventBridge numbers days 1-7 from Sunday; cron 0-6. Names are the same."""
    def shift(match: re.Match) -> str:
        return str((int(match.group(0)) - 1) % 7)

    if any(name in dow.upper() for name in _DAYS):
        return dow
    return re.sub(r"\d+", shift, dow) if dow not in ("*", "?") and "#" not in dow else dow
