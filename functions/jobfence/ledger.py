"""The run ledger: every expected tick of a job in a time range, and what became of it.

Expected ticks come from the job's schedule expression (`jobfence.schedule`,
EventBridge semantics, UTC). What became of each is derived from the run rows
(`RunStore.started_between`, one range query on the sort key) and the rule's
recorded toggles alone: a skipped tick writes nothing, so a skip is inferred
from the run that caused it. For each tick `t`, first match wins:

    ran | failed | lease_lost | died | running
                      a non-manual run answered it: its `scheduled_at` (the event's
                      time, whole seconds) falls in [t - 1 s, t + tolerance); the
                      label is that run's outcome. More runs in the same window
                      (a duplicate delivery run twice) are counted as duplicates.
    disabled          the rule was disabled at t (the CLI's enable/disable record each
                      toggle; a rule found disabled with no record counts from when it
                      was first seen so)
    skipped_leased    a run held the lease at t: it started before t and its row's
                      finished_at is at or after t (or it has none yet)
    skipped_interval  the interval gate: a run started after `gate_cutoff(t, interval)`,
                      that is within 0.9 x interval before t
    missed            none of these: no invocation happened (EventBridge never delivered
                      it, or the function never got as far as the lease)

A run that stands in for a past tick (a `catch_up` run, or a `buffered` run of
the buffer_one overlap policy; its row's `scheduled_at` is that tick) answers
no tick itself: the tick keeps the label of what happened at its time
(`missed`, `disabled`, `skipped_leased`), and its entry names the run that made
up for it (`made_up_by`). Like any run, it can hold the lease or the gate at a
later tick.

DELIVERY_TOLERANCE_MS is how late a tick's run may start and still be the
tick's: EventBridge delivers a scheduled event within about a minute of its
time, and an async invoke may wait in Lambda's queue (throttling) a little
longer. It is capped below the gap to the next tick, so one run never answers
two ticks. It is defined in `jobfence.triggers`, which refuses a Scheduled Event
delivered later than that: such a run would answer no tick.

The toggles are recorded on the job's lease item by the lease store
(`jobfence.lease_toggles.RuleToggles`), which reads them back as a `RuleHistory`.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from jobfence.lease import gate_cutoff
from jobfence.registry import JobSpec
from jobfence.runs import RunState, RunStore
from jobfence.schedule import Schedule
from jobfence.triggers import DELIVERY_TOLERANCE_MS  # also the latest a Scheduled Event is accepted after its time

SCHEDULED_AT_SLACK_MS = 1000  # the event's `time` has whole seconds; a tick may not
MANUAL_TRIGGER = "manual"
SCHEDULED_TRIGGER = "scheduled"
MAKE_UP_TRIGGERS = ("catch_up", "buffered")  # runs for a past tick: they make up for it, they do not answer it


class TickLabel(str, enum.Enum):
    """What became of one expected tick."""

    RAN = "ran"
    FAILED = "failed"
    LEASE_LOST = "lease_lost"
    DIED = "died"
    RUNNING = "running"
    SKIPPED_LEASED = "skipped_leased"
    SKIPPED_INTERVAL = "skipped_interval"
    DISABLED = "disabled"
    MISSED = "missed"


_OUTCOME_LABEL = {
    RunState.RAN: TickLabel.RAN,
    RunState.FAILED: TickLabel.FAILED,
    RunState.LEASE_LOST: TickLabel.LEASE_LOST,
    RunState.DIED: TickLabel.DIED,
    RunState.RUNNING: TickLabel.RUNNING,
}


@dataclass(frozen=True)
class RunRecord:
    """What the ledger reads of one run row."""

    run_id: str
    outcome: RunState
    trigger: str
    scheduled_at: int
    started_at: int
    finished_at: int | None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> RunRecord:
        started = int(row["started_at"])
        return cls(
            run_id=str(row.get("run_id", "")),
            outcome=RunState(row.get("outcome", RunState.RUNNING.value)),
            trigger=str(row.get("trigger", "")),
            scheduled_at=int(row.get("scheduled_at", started)),
            started_at=started,
            finished_at=None if row.get("finished_at") is None else int(row["finished_at"]),
        )

    @property
    def tick_at(self) -> int:
        """The tick this run says it answered: the event's time; else (a `died` row without its start) its start."""
        return self.scheduled_at if self.trigger == SCHEDULED_TRIGGER else self.started_at


@dataclass(frozen=True)
class Toggle:
    """One recorded change of a job's rule: enabled or disabled from `at_ms` on."""

    at_ms: int
    enabled: bool


@dataclass(frozen=True)
class LedgerEntry:
    """One expected tick: its label, and the run that answered it (or that held the lease or the gate)."""

    tick_at: int
    label: TickLabel
    run_id: str | None = None
    duplicates: int = 0  # further runs that answered the same tick (a duplicate delivery run twice)
    made_up_by: str | None = None  # the catch-up or buffered run that ran later for this tick


@dataclass(frozen=True)
class Ledger:
    """A job's expected ticks in (since, until], each labelled."""

    job: str
    schedule: str
    since_ms: int
    until_ms: int
    entries: tuple[LedgerEntry, ...]

    def counts(self) -> dict[TickLabel, int]:
        return dict(Counter(e.label for e in self.entries))

    @property
    def missed(self) -> int:
        return sum(1 for e in self.entries if e.label is TickLabel.MISSED)


def label_ticks(
    ticks: Sequence[int],
    next_tick: int,
    runs: Iterable[RunRecord],
    toggles: Sequence[Toggle],
    interval_ms: int | None,
) -> tuple[LedgerEntry, ...]:
    """Label each tick (ascending) from the runs and toggles; `next_tick` is the tick after the last.

    Sorted lists and bisection: O((ticks + runs) log runs), so a month of a
    one-minute schedule is labelled in well under a second.
    """
    by_start = sorted(runs, key=lambda r: (r.started_at, r.run_id))
    starts = [r.started_at for r in by_start]
    # the latest end among the runs started so far (None, still running, counts as never): no holder below it
    reach, latest = [], -1
    for r in by_start:
        latest = max(latest, _NEVER if r.finished_at is None else r.finished_at)
        reach.append(latest)
    answering = sorted(
        (r for r in by_start if r.trigger not in (MANUAL_TRIGGER, *MAKE_UP_TRIGGERS)),
        key=lambda r: (r.tick_at, r.started_at),
    )
    answer_at = [r.tick_at for r in answering]
    making_up = sorted(
        (r for r in by_start if r.trigger in MAKE_UP_TRIGGERS), key=lambda r: (r.scheduled_at, r.started_at)
    )
    make_up_at = [r.scheduled_at for r in making_up]
    claimed: set[str] = set()
    entries = []
    for i, t in enumerate(ticks):
        following = ticks[i + 1] if i + 1 < len(ticks) else next_tick
        window_end = t + min(DELIVERY_TOLERANCE_MS, following - t - SCHEDULED_AT_SLACK_MS)
        low, high = bisect_left(answer_at, t - SCHEDULED_AT_SLACK_MS), bisect_left(answer_at, window_end)
        answers = [r for r in answering[low:high] if r.run_id not in claimed]
        claimed.update(r.run_id for r in answers)
        if answers:
            entries.append(LedgerEntry(t, _OUTCOME_LABEL[answers[0].outcome], answers[0].run_id, len(answers) - 1))
            continue
        low, high = bisect_left(make_up_at, t - SCHEDULED_AT_SLACK_MS), bisect_left(make_up_at, window_end)
        made_up = next((r.run_id for r in making_up[low:high]), None)
        entries.append(replace(_unanswered(t, by_start, starts, reach, toggles, interval_ms), made_up_by=made_up))
    return tuple(entries)


def _unanswered(
    t: int,
    by_start: list[RunRecord],
    starts: list[int],
    reach: list[int],
    toggles: Sequence[Toggle],
    interval_ms: int | None,
) -> LedgerEntry:
    """The label of a tick no run answered: disabled, skipped (by the lease's holder or the gate), or missed."""
    if not enabled_at(toggles, t):
        return LedgerEntry(t, TickLabel.DISABLED)
    n = bisect_left(starts, t)  # runs started strictly before t
    holder = _holder(by_start, reach, n, t)
    if holder is not None:
        return LedgerEntry(t, TickLabel.SKIPPED_LEASED, holder.run_id)
    if interval_ms and n and starts[n - 1] > gate_cutoff(t, interval_ms):
        return LedgerEntry(t, TickLabel.SKIPPED_INTERVAL, by_start[n - 1].run_id)
    return LedgerEntry(t, TickLabel.MISSED)


_NEVER = 2**63  # a run row not finished yet holds the lease for as long as the ledger can see


def _holder(by_start: list[RunRecord], reach: list[int], n: int, t: int) -> RunRecord | None:
    """The latest of the first n runs whose [started_at, finished_at] covers t, if any."""
    if n == 0 or reach[n - 1] < t:
        return None
    for j in range(n - 1, -1, -1):  # only reached when some run covers t: runs rarely overlap (the lease)
        finished = by_start[j].finished_at
        if finished is None or finished >= t:
            return by_start[j]
    return None  # pragma: no cover - reach says one does


def enabled_at(toggles: Sequence[Toggle], t: int) -> bool:
    """The rule's state when its tick of instant t fired: by the latest toggle strictly before t.

    Enabled before the first toggle. A toggle at the very instant of a tick is
    taken as after it (the embedded runtime fires an instant's ticks before its
    driver acts; on a real account the same millisecond is a coin toss either way).
    """
    state = True
    for toggle in sorted(toggles, key=lambda x: x.at_ms):
        if toggle.at_ms >= t:
            break
        state = toggle.enabled
    return state


def build_ledger(
    job: str,
    expression: str,
    runs: RunStore,
    toggles: Sequence[Toggle],
    since_ms: int,
    until_ms: int,
    interval_ms: int | None,
    lookback_ms: int,
) -> Ledger:
    """The ledger of `job` over (since, until]: one range query of its runs, from `lookback_ms` earlier.

    `lookback_ms` reaches the runs that held the lease or the gate at the first
    ticks (the longer of the lease ttl and the interval). For rate(), EventBridge
    counts from the rule's creation, which its API does not return: the phase
    is taken from the latest scheduled run read (without one, from `since`).
    A cron() schedule with no tick in (since, until] has nothing to label: no read.
    """
    schedule = Schedule(expression, since_ms)
    period = schedule.period_ms()
    if period is None and not schedule.fires_between(since_ms, until_ms):
        return Ledger(job, expression, since_ms, until_ms, ())
    rows = [
        RunRecord.of(r) for r in runs.started_between(job, since_ms - lookback_ms, until_ms + DELIVERY_TOLERANCE_MS)
    ]
    scheduled = [r.scheduled_at for r in rows if r.trigger == SCHEDULED_TRIGGER]
    if period is not None and scheduled:  # the same phase, moved back to at or before `since`
        schedule = Schedule(expression, since_ms - (since_ms - scheduled[-1]) % period)
    ticks = schedule.fires_between(since_ms, until_ms)
    next_tick = schedule.next_after(ticks[-1] if ticks else until_ms)
    return Ledger(job, expression, since_ms, until_ms, label_ticks(ticks, next_tick, rows, toggles, interval_ms))


def ledger_of(spec: JobSpec, runs: RunStore, toggles: Sequence[Toggle], since_ms: int, until_ms: int) -> Ledger:
    """`build_ledger` for a catalog job: its schedule and gate, and a lookback of its lease ttl or its interval."""
    interval_ms = spec.interval_ms
    lookback_ms = max(spec.lease_ttl_ms, interval_ms or 0)
    return build_ledger(spec.name, spec.schedule, runs, toggles, since_ms, until_ms, interval_ms, lookback_ms)
