"""Search one job's runs by outcome, time range and who asked: the console's job page and `jobfence runs`.

A `RunFilter` is parsed from the operator's text (a GET form's query parameters, the CLI's options) once,
with a bounded one-line error on bad input, and applied to the job's latest SEARCH_ROWS run rows.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from jobfence.runs import RunState
from jobfence_ops.commands.jobs import LEDGER_ROWS, RunView, runs
from jobfence_ops.targets import OperatorError, Target

SEARCH_ROWS = LEDGER_ROWS  # the latest rows a search reads (said on the page: older runs are not searched)
SKIPPED = ("skipped_interval", "skipped_leased", "skipped_served")
OUTCOMES = (*(s.value for s in RunState), "skipped", *SKIPPED)  # `skipped`: any of the skipped ones
MAX_WHO = 128
MAX_SHOWN = 40  # a bad value is quoted up to this many characters
_SPAN = re.compile(r"(\d{1,4})([mhd])")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}
TIME_FORMATS = ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d")


@dataclass(frozen=True)
class RunFilter:
    """Which runs to show; every part optional (None: any). Times in ms since the epoch, UTC."""

    outcome: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    who: str | None = None  # a part of the operator's name or of the caller's ARN, any case

    @property
    def empty(self) -> bool:
        return self == RunFilter()

    def matches(self, run: RunView) -> bool:
        if self.outcome == "skipped":
            if not (run.outcome or "").startswith("skipped"):
                return False
        elif self.outcome is not None and run.outcome != self.outcome:
            return False
        started = run.started_at or 0
        if self.since_ms is not None and started < self.since_ms:
            return False
        if self.until_ms is not None and started > self.until_ms:
            return False
        if self.who is not None:
            needle = self.who.lower()
            return any(needle in (text or "").lower() for text in (run.requested_by, run.caller))
        return True


def parse_filter(
    now_ms: int,
    outcome: str | None = None,
    since: str | None = None,
    until: str | None = None,
    who: str | None = None,
) -> RunFilter:
    """A filter from the operator's text; blank parts are absent. OperatorError (one line) on bad input.

    `since` and `until`: a UTC time (2026-01-01T03:00, 2026-01-01 03:00:00, 2026-01-01) or a span back from
    now (30m, 6h, 2d)."""
    outcome = (outcome or "").strip() or None
    if outcome is not None and outcome not in OUTCOMES:
        raise OperatorError(f"outcome: one of {', '.join(OUTCOMES)}; got {_quoted(outcome)}")
    since_ms = parse_time("since", since, now_ms)
    until_ms = parse_time("until", until, now_ms)
    if since_ms is not None and until_ms is not None and since_ms > until_ms:
        raise OperatorError("since: must be before until")
    who = (who or "").strip() or None
    if who is not None and len(who) > MAX_WHO:
        raise OperatorError(f"who: at most {MAX_WHO} characters")
    return RunFilter(outcome, since_ms, until_ms, who)


def parse_time(name: str, text: str | None, now_ms: int) -> int | None:
    """`text` as ms since the epoch: a UTC time or a span back from now; None when blank."""
    text = (text or "").strip()
    if not text:
        return None
    span = _SPAN.fullmatch(text)
    if span:
        return now_ms - int(span.group(1)) * _UNIT_MS[span.group(2)]
    for form in TIME_FORMATS:
        try:
            parsed = dt.datetime.strptime(text, form).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
        return int(parsed.timestamp() * 1000)
    raise OperatorError(f"{name}: a UTC time like 2026-01-01T03:00 or a span like 30m, 6h, 2d; got {_quoted(text)}")


def _quoted(text: str) -> str:
    return repr(text[:MAX_SHOWN] + ("..." if len(text) > MAX_SHOWN else ""))


def search_runs(target: Target, job: str, run_filter: RunFilter, limit: int) -> list[RunView]:
    """The job's runs that match, newest first, among its latest SEARCH_ROWS (at most `limit`)."""
    if run_filter.empty:
        return runs(target, job, limit)
    return [r for r in runs(target, job, SEARCH_ROWS) if run_filter.matches(r)][:limit]
