"""EventBridge schedule expressions, with croniter doing the cron work: the one evaluator.

The local runtime fires its rules by it, the run ledger (`jobfence.ledger`)
derives a job's expected ticks from it, and monitoring (`infra/jobfence_cdk/schedule.py`)
takes the longest gap between ticks from it. Times are epoch ms, UTC.

EventBridge cron has six fields, `cron(minutes hours day-of-month month
day-of-week year)`, with `?` for "no value" in one of the day fields and
day-of-week counted 1-7 from Sunday. croniter speaks classic five-field cron
(day-of-week 0-6 from Sunday), so `adapt_cron` only translates: `?` becomes
`*`, numeric day-of-week values shift down by one, and the year field is applied
as a filter on croniter's results. `rate(n unit)` fires every n units from the
rule's creation.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise

from croniter import croniter

_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_CRON = re.compile(r"^cron\((.+)\)$")
_UNIT_MS = {"minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_MAX_YEAR_SKIPS = 100_000


class ScheduleError(ValueError):
    """An expression EventBridge would refuse, or one this runtime cannot fire."""


@dataclass(frozen=True)
class Schedule:
    """When a rule fires: `next_after(t)` is the first fire time strictly after `t`."""

    expression: str
    anchor_ms: int  # rate(): the rule's creation instant

    def next_after(self, t_ms: int) -> int:
        period = self.period_ms()
        if period is not None:
            elapsed = max(0, t_ms - self.anchor_ms)
            return self.anchor_ms + (elapsed // period + 1) * period
        return _cron_next_after(self.expression, t_ms)

    def fires_between(self, after_ms: int, until_ms: int) -> list[int]:
        """Fire times in (after, until]."""
        out = []
        t = self.next_after(after_ms)
        while t <= until_ms:
            out.append(t)
            t = self.next_after(t)
        return out

    def period_ms(self) -> int | None:
        """A rate()'s fixed period; None for cron(...)."""
        rate = _RATE.match(self.expression)
        if not rate:
            return None
        if int(rate.group(1)) <= 0:
            raise ScheduleError(f"{self.expression}: the rate must be positive")
        return int(rate.group(1)) * _UNIT_MS[rate.group(2).rstrip("s")]

    def longest_gap_ms(self, ticks: int) -> int:
        """The longest gap between two consecutive fires among the next `ticks` after the anchor."""
        period = self.period_ms()
        if period is not None:
            return period
        times = [self.next_after(self.anchor_ms)]
        for _ in range(ticks - 1):
            times.append(self.next_after(times[-1]))
        return max(b - a for a, b in pairwise(times))


# A fixed start keeps a gap deterministic (a synthesized template must not change with the date).
GAP_START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
GAP_TICKS = 400


def healthy_gap_ms(expression: str, interval_s: int | None) -> int:
    """How long a healthy job may go between two `ran` outcomes.

    The longer of its interval gate (ticks inside the gate skip) and the longest
    gap between its scheduled ticks over `GAP_TICKS` fires from a fixed start (a
    gate shorter than the schedule changes nothing). Monitoring's alarm periods
    and the missed-run auditor's window both use it. Raises `ScheduleError`.
    """
    return max((interval_s or 0) * 1000, Schedule(expression, GAP_START_MS).longest_gap_ms(GAP_TICKS))


@functools.lru_cache(maxsize=4096)
def _cron_next_after(expression: str, t_ms: int) -> int:
    """A cron expression's first fire strictly after `t_ms` (kept: the runtime, the ledger and the auditor ask again)."""
    cron, years = adapt_cron(expression)
    it = croniter(cron, datetime.fromtimestamp(t_ms / 1000, tz=UTC))
    for _ in range(_MAX_YEAR_SKIPS):
        fire = it.get_next(datetime)
        if years is None or fire.year in years:
            return int(fire.timestamp() * 1000)
    raise ScheduleError(f"{expression}: no fire time in the years it names")


@functools.lru_cache(maxsize=256)
def adapt_cron(expression: str) -> tuple[str, frozenset[int] | None]:
    """EventBridge `cron(...)` -> (five-field croniter expression, years it is limited to or None)."""
    match = _CRON.match(expression.strip())
    if not match:
        raise ScheduleError(f"{expression!r} is neither cron(...) nor rate(n minute|minutes|hour|hours|day|days)")
    fields = match.group(1).split()
    if len(fields) != 6:
        raise ScheduleError(
            f"{expression!r}: EventBridge cron has 6 fields (minutes hours day-of-month month day-of-week year)"
        )
    minutes, hours, dom, month, dow, year = fields
    if (dom == "?") == (dow == "?"):
        raise ScheduleError(f"{expression!r}: exactly one of day-of-month and day-of-week must be '?'")
    if "W" in dom:
        raise ScheduleError(f"{expression!r}: the W (nearest weekday) option is not supported locally")
    cron = " ".join([minutes, hours, "*" if dom == "?" else dom, month, "*" if dow == "?" else _shift_dow(dow)])
    if not croniter.is_valid(cron):
        raise ScheduleError(f"{expression!r}: not a valid cron expression")
    return cron, _years(year, expression)


def _shift_dow(dow: str) -> str:
    # EventBridge counts Sunday as 1; croniter as 0. Names (MON-FRI) need no shift.
    def shift(m: re.Match[str]) -> str:
        value = int(m.group(0))
        if not 1 <= value <= 7:
            raise ScheduleError(f"day-of-week {value} is outside 1-7")
        return str(value - 1)

    if dow.endswith("L") and dow[:-1].isdigit():  # last <weekday> of the month: croniter writes it L<n>
        return "L" + _shift_dow(dow[:-1])
    head, sep, nth = dow.partition("#")
    step_base, slash, step = head.partition("/")
    return re.sub(r"\d+", shift, step_base) + slash + step + sep + nth


def _years(field: str, expression: str) -> frozenset[int] | None:
    if field == "*":
        return None
    years: set[int] = set()
    for part in field.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ScheduleError(f"{expression!r}: year field {field!r} is not supported locally")
        years.update(range(int(low), int(high or low) + 1))
    return frozenset(years)
