"""The catch-up policy: `catchup.due` over a ledger (pure), the catalog's validation, the catch-up event."""

from __future__ import annotations

import pytest

from jobfence.catchup import due
from jobfence.errors import InvalidEvent
from jobfence.ledger import DELIVERY_TOLERANCE_MS, LedgerEntry, TickLabel, Toggle, label_ticks
from jobfence.registry import CatalogError, CatchUp, Overlap, Registry
from jobfence.triggers import catch_up_event, parse_trigger
from tests.runner_support import spec

HOUR = 3_600_000
T0 = 1_800_000_000_000 // HOUR * HOUR  # a whole hour
ONCE = spec(catch_up=CatchUp.ONCE, catch_up_window_s=6 * 3600)
L = TickLabel


def book(*labels, made_up=None):
    """Hourly entries from T0 with these labels; `made_up` = {index: run id}."""
    return [LedgerEntry(T0 + i * HOUR, label, made_up_by=(made_up or {}).get(i)) for i, label in enumerate(labels)]


def after(hours, minutes=5):
    return T0 + hours * HOUR + minutes * 60_000


def test_several_missed_ticks_give_one_catch_up_for_the_last_of_them():
    entries = book(L.RAN, L.MISSED, L.MISSED, L.MISSED)
    assert due(ONCE, entries, after(3)) == T0 + 3 * HOUR


def test_none_policy_never_catches_up():
    assert due(spec(), book(L.RAN, L.MISSED), after(1)) is None


def test_a_run_since_the_gap_answers_it():
    # a later tick ran, was skipped by a holder, or gated: a run started after the missed tick
    for later in (L.RAN, L.FAILED, L.DIED, L.RUNNING, L.SKIPPED_LEASED, L.SKIPPED_INTERVAL):
        assert due(ONCE, book(L.RAN, L.MISSED, later), after(2)) is None, later


def test_a_gap_already_made_up_is_not_caught_up_again():
    assert due(ONCE, book(L.RAN, L.MISSED, L.MISSED, made_up={2: "r1"}), after(2)) is None


def test_a_gap_older_than_the_window_is_left_to_the_next_tick():
    entries = book(L.RAN, L.MISSED)
    assert due(ONCE, entries, T0 + HOUR + 6 * HOUR - 1) == T0 + HOUR
    assert due(ONCE, entries, T0 + HOUR + 6 * HOUR + 1) is None


def test_a_tick_inside_its_delivery_tolerance_is_not_missed_yet():
    entries = book(L.RAN, L.MISSED)
    assert due(ONCE, entries, T0 + HOUR + DELIVERY_TOLERANCE_MS - 1) is None
    assert due(ONCE, entries, T0 + HOUR + DELIVERY_TOLERANCE_MS) == T0 + HOUR


def test_a_younger_tick_that_already_ran_answers_an_older_gap():
    # 01:00 missed; 02:00 ran 30 s after its tick, inside its tolerance: a run since 01:00
    assert due(ONCE, book(L.RAN, L.MISSED, L.RAN), T0 + 2 * HOUR + 30_000) is None


def test_a_rule_still_disabled_is_not_caught_up():
    entries = book(L.RAN, L.DISABLED, L.DISABLED)
    # without toggles: the last tick says the rule is off
    assert due(ONCE, entries, after(2)) is None
    # with them: disabled at 00:30 and still off; then re-enabled at 02:10 -> the last disabled tick
    off = [Toggle(T0 + 30 * 60_000, False)]
    assert due(ONCE, entries, after(2, 10), toggles=off) is None
    on = [*off, Toggle(after(2, 10), True)]
    assert due(ONCE, entries, after(2, 10), toggles=on) == T0 + 2 * HOUR


def test_due_over_a_ledger_labelled_from_runs():
    # GIVEN run rows: 00:00 ran; 01:00 and 02:00 never delivered; a catch-up for 02:00 ran at 02:20
    from jobfence.ledger import RunRecord
    from jobfence.runs import RunState

    ran = RunRecord("r0", RunState.RAN, "scheduled", T0, T0 + 5_000, T0 + 60_000)
    ticks = [T0, T0 + HOUR, T0 + 2 * HOUR]
    before = label_ticks(ticks, T0 + 3 * HOUR, [ran], (), HOUR)
    assert [e.label for e in before] == [L.RAN, L.MISSED, L.MISSED]
    assert due(ONCE, before, after(2, 10)) == T0 + 2 * HOUR
    caught = RunRecord("c1", RunState.RAN, "catch_up", T0 + 2 * HOUR, after(2, 20), after(2, 21))
    # WHEN the catch-up ran THEN the ticks keep their labels, the last names its catch-up, nothing is due
    later = label_ticks(ticks, T0 + 3 * HOUR, [ran, caught], (), HOUR)
    assert [e.label for e in later] == [L.RAN, L.MISSED, L.MISSED]
    assert [e.made_up_by for e in later] == [None, None, "c1"]
    assert due(ONCE, later, after(2, 30)) is None
    # AND the catch-up run answers no later tick: 03:00 is gated by it (it started 40 min before), not "ran"
    third = label_ticks([*ticks, T0 + 3 * HOUR], T0 + 4 * HOUR, [ran, caught], (), HOUR)
    assert third[-1].label is L.SKIPPED_INTERVAL and third[-1].run_id == "c1"


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(catch_up="sometimes"), "catch_up 'sometimes' is not one of none, once"),
        (dict(catch_up=CatchUp.ONCE), "catch_up 'once' needs catch_up_window_s"),
        (dict(catch_up=CatchUp.ONCE, catch_up_window_s=0), "needs catch_up_window_s"),
        (dict(catch_up=CatchUp.ONCE, catch_up_window_s=40 * 86400), "needs catch_up_window_s"),
        (dict(catch_up=CatchUp.ONCE, catch_up_window_s=True), "needs catch_up_window_s"),
        (dict(catch_up_window_s=3600), "catch_up_window_s is set but catch_up is 'none'"),
        (dict(overlap="queue_all"), "overlap 'queue_all' is not one of skip, buffer_one"),
    ],
)
def test_the_catalog_refuses_a_bad_policy_naming_the_entry(fields, message):
    with pytest.raises(CatalogError, match=message) as refused:
        Registry([], [spec(**fields)])
    assert "catalog entry 'job_a'" in str(refused.value)


def test_the_catalog_accepts_both_policies():
    registry = Registry([], [spec(catch_up="once", catch_up_window_s=3600, overlap="buffer_one")])
    job = registry.job("job_a")
    assert job.catch_up == CatchUp.ONCE and job.overlap == Overlap.BUFFER_ONE


def test_the_catch_up_event_is_parsed_strictly(clock):
    trigger = parse_trigger(catch_up_event(clock.now_ms() - HOUR, "auditor"), clock)
    assert (trigger.kind, trigger.scheduled_at, trigger.requested_by) == ("catch_up", clock.now_ms() - HOUR, "auditor")
    bad = [
        {"trigger": "catch_up", "tick": clock.now_ms()},  # who asked is required
        {"trigger": "catch_up", "tick": "1800000000000", "requested_by": "a"},  # not an integer
        {"trigger": "catch_up", "tick": -1, "requested_by": "a"},
        {"trigger": "catch_up", "tick": clock.now_ms() + 2 * HOUR, "requested_by": "a"},  # in the future
        {"trigger": "catch_up", "tick": clock.now_ms(), "requested_by": "a", "job": "other"},  # no field picks a job
        {"trigger": "buffered", "tick": clock.now_ms(), "requested_by": "a"},
        {"trigger": "rerun", "tick": clock.now_ms()},
    ]
    for event in bad:
        with pytest.raises(InvalidEvent, match="invalid (catch-up|buffered|request) trigger"):
            parse_trigger(event, clock)
