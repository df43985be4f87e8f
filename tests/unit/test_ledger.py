"""The run ledger: each expected tick of an hourly job labelled from the run rows the real runner wrote on moto.

The clock is a FrozenClock moved by the test; a tick is the runner run with a
scheduled trigger whose `scheduled_at` is the event's time (whole seconds).
"""

from __future__ import annotations

import pytest

from jobfence.errors import ErrorKind
from jobfence.errors import StoreError
from jobfence.ledger import DELIVERY_TOLERANCE_MS, TickLabel, Toggle, build_ledger, enabled_at
from jobfence.lease_toggles import MAX_TOGGLES, RuleHistory, RuleToggles
from jobfence.scheduled import Outcome
from jobfence.triggers import Trigger
from ops.bench.capacity import item_size
from tests.aws_faults import Faults, throttled
from tests.runner_support import Harness, counting_job, spec
from tests.support import create_catalog_tables

HOUR = 3_600_000
MINUTE = 60_000
JOB = spec(lease_ttl_s=90 * 60)  # hourly, gate 0.9 h; a dead holder's term outlives the next tick


class IsolateDeath(BaseException):
    """The process vanished mid-run: nothing is released or recorded by it."""


def dying_job(ctx):
    yield {"done": 1}
    raise IsolateDeath()


@pytest.fixture
def h(dynamodb, clock):
    return Harness(dynamodb, create_catalog_tables(dynamodb, ["leases", "runs"]), clock)


@pytest.fixture
def toggles(h):
    return RuleToggles(h.dynamodb, h.tables["leases"])


def deliver(h, tick_at, delay_ms=0, job=None, event_time=None):
    """EventBridge delivers the tick of `tick_at` `delay_ms` late; its event's time is `event_time` (default the tick)."""
    h.clock.set(tick_at + delay_ms)
    trigger = Trigger("scheduled", (tick_at if event_time is None else event_time) // 1000 * 1000)
    return h.tick(JOB, job or counting_job(1, []), trigger=trigger)


def ledger(h, toggles, since, until):
    return build_ledger(JOB.name, JOB.schedule, h.runs, toggles.read(JOB.name), since, until,
                        JOB.interval_s * 1000, JOB.lease_ttl_s * 1000)


def test_every_tick_of_a_day_with_every_fault_is_labelled(h, toggles, clock):
    start = clock.now_ms()  # 2026-01-01T00:00Z
    at = lambda hours: start + hours * HOUR  # noqa: E731
    # 01:00 delivered 40 s late: it ran
    assert deliver(h, at(1), 40_000).outcome is Outcome.RAN
    # 02:00 delivered twice (EventBridge is at-least-once): one run, one skip that writes nothing
    assert deliver(h, at(2)).outcome is Outcome.RAN
    assert deliver(h, at(2), 5_000).outcome is Outcome.SKIPPED_INTERVAL
    # 03:00 never delivered
    # 04:00 its isolate is killed mid-run: the term (90 min) stays until 05:30
    with pytest.raises(IsolateDeath):
        deliver(h, at(4), job=dying_job)
    # 05:00 meets the dead holder's live lease
    assert deliver(h, at(5)).outcome is Outcome.SKIPPED_LEASED
    # 06:00 takes over (the dead run is recorded died) and runs
    assert deliver(h, at(6)).outcome is Outcome.RAN
    # 06:30 .. 08:30 the operator disabled the rule: 07:00 and 08:00 are never sent
    toggles.record(JOB.name, False, at(6) + 30 * MINUTE)
    toggles.record(JOB.name, True, at(8) + 30 * MINUTE)
    assert deliver(h, at(9)).outcome is Outcome.RAN
    # 09:55 a manual run (past the 09:00 run's gate); the 10:00 tick is inside its gate
    clock.set(at(9) + 55 * MINUTE)
    manual = h.tick(JOB, counting_job(1, []), trigger=Trigger("manual", clock.now_ms(), requested_by="jane"))
    assert manual.outcome is Outcome.RAN
    assert deliver(h, at(10)).outcome is Outcome.SKIPPED_INTERVAL
    # 11:00 a job that raised
    def failing(ctx):
        yield {"done": 1}
        raise RuntimeError("the job's own error")
    with pytest.raises(RuntimeError):  # the job's own error reaches Lambda (its row is finished failed first)
        deliver(h, at(11), job=failing)
    clock.set(at(11) + 30 * MINUTE)

    book = ledger(h, toggles, start, clock.now_ms())

    labels = [(e.tick_at, e.label) for e in book.entries]
    assert labels == [
        (at(1), TickLabel.RAN),
        (at(2), TickLabel.RAN),
        (at(3), TickLabel.MISSED),
        (at(4), TickLabel.DIED),
        (at(5), TickLabel.SKIPPED_LEASED),
        (at(6), TickLabel.RAN),
        (at(7), TickLabel.DISABLED),
        (at(8), TickLabel.DISABLED),
        (at(9), TickLabel.RAN),
        (at(10), TickLabel.SKIPPED_INTERVAL),
        (at(11), TickLabel.FAILED),
    ]
    by_tick = {e.tick_at: e for e in book.entries}
    rows = {r["started_at"]: r["run_id"] for r in h.runs.recent(JOB.name)}
    assert by_tick[at(5)].run_id == rows[at(4)]  # the dead run held the lease at 05:00
    assert by_tick[at(10)].run_id == manual.run_id  # the manual run held the gate
    assert by_tick[at(2)].duplicates == 0  # the duplicate delivery wrote nothing
    assert book.missed == 1 and book.counts()[TickLabel.DISABLED] == 2


@pytest.mark.parametrize(("late_ms", "label"), [(DELIVERY_TOLERANCE_MS - 1000, TickLabel.RAN),
                                                (DELIVERY_TOLERANCE_MS, TickLabel.MISSED)])
def test_a_run_answers_a_tick_only_inside_the_delivery_tolerance(h, toggles, clock, late_ms, label):
    # GIVEN an event whose time is late_ms after the tick (the last whole second inside, or exactly at, the tolerance)
    tick = clock.now_ms() + HOUR
    assert deliver(h, tick, late_ms, event_time=tick + late_ms).outcome is Outcome.RAN
    # THEN it is the tick's run only inside the tolerance; past it the tick was missed
    (entry,) = ledger(h, toggles, tick - 1, tick + 10 * MINUTE).entries
    assert entry.label is label


def test_a_duplicate_tick_that_ran_twice_is_one_entry_with_a_duplicate(h, toggles, clock):
    # GIVEN a job without a gate: a second delivery after the first finished runs again
    ungated = spec(interval_s=None)
    tick = clock.now_ms() + HOUR
    for delay in (0, 20_000):
        clock.set(tick + delay)
        assert h.tick(ungated, counting_job(1, []), trigger=Trigger("scheduled", tick)).outcome is Outcome.RAN
    book = build_ledger(ungated.name, ungated.schedule, h.runs, (), tick - 1, tick + MINUTE, None, HOUR)
    (entry,) = book.entries
    assert (entry.label, entry.duplicates) == (TickLabel.RAN, 1)


def test_a_run_still_going_is_running_and_holds_the_lease(h, toggles, clock):
    tick = clock.now_ms() + HOUR
    seen = []

    def slow(ctx):
        # WHEN the ledger is read while the run is still going
        seen.append(ledger(h, toggles, tick - 1, tick + MINUTE))
        yield {"done": 1}

    deliver(h, tick, job=slow)
    (entry,) = seen[0].entries
    assert entry.label is TickLabel.RUNNING


def test_a_toggle_record_is_idempotent_and_bounded(h, toggles, clock):
    now = clock.now_ms()
    toggles.record(JOB.name, False, now)
    toggles.record(JOB.name, False, now)  # a re-sent copy
    assert toggles.read(JOB.name) == (Toggle(now, False),)
    for i in range(1, MAX_TOGGLES + 5):
        toggles.record(JOB.name, i % 2 == 0, now + i)
    kept = toggles.read(JOB.name)
    assert len(kept) == MAX_TOGGLES and kept[0].at_ms == now + 5  # MAX_TOGGLES + 5 recorded: the 5 oldest were dropped
    # AND beside a full term and its predecessor's copy the lease item stays under 1 KB: a lease write is 1 WCU
    for hours in (1, 3):
        deliver(h, now + hours * HOUR)
    item = h.dynamodb.get_item(TableName=h.tables["leases"], Key={"job": {"S": JOB.name}})["Item"]
    assert "prev_run_id" in item and item_size(item) < 1024, item_size(item)
    last = now + MAX_TOGGLES + 4  # the last toggle (i even: enabled); the one before it disabled
    assert enabled_at(kept, last + 1) and not enabled_at(kept, last)  # a toggle at the very instant is taken as after it


def test_a_rule_found_disabled_counts_from_when_it_was_first_seen(h, toggles, clock):
    # GIVEN a rule a deploy disabled (no record), seen twice by `status`
    first = clock.now_ms() + 90 * MINUTE
    assert toggles.seen(JOB.name, False, first) is True
    assert toggles.seen(JOB.name, False, first + HOUR) is False  # already recorded: the first sighting stands
    # THEN the ticks before the first sighting are missed, from it disabled
    book = ledger(h, toggles, clock.now_ms(), first + 2 * HOUR)
    assert [e.label for e in book.entries] == [TickLabel.MISSED, TickLabel.DISABLED, TickLabel.DISABLED]


def test_the_toggles_live_beside_the_lease_and_do_not_disturb_it(h, toggles, clock):
    # GIVEN a job whose first ever write is a toggle (the lease item is created by it)
    toggles.record(JOB.name, True, clock.now_ms())
    # THEN the runner still acquires the lease with fence 1
    assert deliver(h, clock.now_ms() + HOUR).outcome is Outcome.RAN
    assert h.leases.read(JOB.name)["fence"] == 1


def test_a_throttled_read_is_retried_then_classified(h, toggles, dynamodb, clock):
    # GIVEN the runs table throttles one read: the range query is repeated and the ledger is read
    deliver(h, clock.now_ms() + HOUR)
    faults = Faults(dynamodb)
    faults.refused_before("Query", throttled("Query"))
    assert [e.label for e in ledger(h, toggles, clock.now_ms() - HOUR, clock.now_ms()).entries] == [TickLabel.RAN]
    # WHEN it throttles every try THEN a StoreError names the kind, never a raw botocore error
    faults.refused_before("Query", lambda: throttled("Query"), times=100)
    with pytest.raises(StoreError) as caught:
        ledger(h, toggles, clock.now_ms() - HOUR, clock.now_ms())
    assert caught.value.kind is ErrorKind.THROTTLED


def test_a_rate_schedule_keeps_the_phase_of_its_rule(h, toggles, clock):
    # GIVEN rate(5 minutes) from a rule created at 00:02 (its ticks at :02, :07, ...): the 00:12 tick dropped
    every5 = spec(schedule="rate(5 minutes)", interval_s=None)
    created = clock.now_ms() + 2 * MINUTE
    for n in (1, 2, 4):
        tick = created + n * 5 * MINUTE
        clock.set(tick + 3_000)
        assert h.tick(every5, counting_job(1, []), trigger=Trigger("scheduled", tick)).outcome is Outcome.RAN
    # WHEN the ledger from 00:03 is read (off the phase; the rule's creation time is nowhere to be read)
    book = build_ledger(every5.name, every5.schedule, h.runs, (), created + MINUTE, created + 20 * MINUTE, None, HOUR)
    # THEN the ticks are the rule's own, labelled
    assert [(e.tick_at - created, e.label) for e in book.entries] == [
        (5 * MINUTE, TickLabel.RAN), (10 * MINUTE, TickLabel.RAN), (15 * MINUTE, TickLabel.MISSED),
        (20 * MINUTE, TickLabel.RAN)]


class _Throttling:
    """The DynamoDB client, except that each BatchGetItem leaves its last key unprocessed (as a throttled table does)."""

    def __init__(self, client, rounds_left: int) -> None:
        self._client, self.rounds_left, self.calls = client, rounds_left, []

    def __getattr__(self, name):
        return getattr(self._client, name)

    def batch_get_item(self, RequestItems):
        (table, asked), = RequestItems.items()
        self.calls.append(len(asked["Keys"]))
        if self.rounds_left == 0:
            return self._client.batch_get_item(RequestItems=RequestItems)
        self.rounds_left -= 1
        kept, left = asked["Keys"][:-1], asked["Keys"][-1:]
        answer = {"Responses": {table: []}}
        if kept:
            answer = self._client.batch_get_item(RequestItems={table: {**asked, "Keys": kept}})
        return {**answer, "UnprocessedKeys": {table: {**asked, "Keys": left}}}


def test_the_histories_of_many_jobs_are_one_read_and_the_unprocessed_keys_are_asked_again(h, toggles, clock):
    # GIVEN 150 jobs, the first 120 with a recorded creation, the even ones among them with a toggle
    now = clock.now_ms()
    jobs = [f"job_{i:03d}" for i in range(150)]
    for i, job in enumerate(jobs[:120]):
        toggles.record_created(job, now + i)
        if i % 2 == 0:
            toggles.record(job, False, now + 1000 + i)
    # WHEN the auditor reads them all through a table that leaves one key unprocessed per call, twice
    throttled = _Throttling(h.dynamodb, rounds_left=2)
    found = RuleToggles(throttled, h.tables["leases"]).histories(jobs)
    # THEN two batches of keys (100 + 50), the first asked again for its unprocessed keys; every job answered
    assert throttled.calls == [100, 1, 1, 50]
    assert list(found) == jobs
    for i, job in enumerate(jobs):
        assert found[job] == toggles.history(job)
        if i < 120:
            assert found[job].created_at == now + i
            assert found[job].toggles == ((Toggle(now + 1000 + i, False),) if i % 2 == 0 else ())
        else:
            assert found[job] == RuleHistory((), None)


def test_keys_still_unprocessed_after_every_round_are_a_store_error(h, toggles):
    throttled = _Throttling(h.dynamodb, rounds_left=10**6)
    with pytest.raises(StoreError, match="keys unprocessed after 5 rounds") as failed:
        RuleToggles(throttled, h.tables["leases"]).histories(["a", "b", "c"])
    assert failed.value.kind is ErrorKind.THROTTLED


class UnreadRuns:
    """A run store that must not be read: the range has no tick of a cron() schedule to label."""

    def started_between(self, job, since_ms, until_ms):
        raise AssertionError(f"{job}'s runs read for ({since_ms}, {until_ms}]")


def test_a_cron_schedule_with_no_tick_in_the_range_reads_no_run(h, clock):
    start = clock.now_ms()  # 2026-01-01T00:00Z
    daily = "cron(0 3 * * ? *)"
    book = build_ledger("daily", daily, UnreadRuns(), (), start + 4 * HOUR, start + 4 * HOUR + 15 * MINUTE, None, HOUR)
    assert book.entries == () and book.missed == 0
    # a range that holds 03:00 reads the runs and labels the tick (here: nothing ran, so it was missed)
    book = build_ledger("daily", daily, h.runs, (), start + 2 * HOUR, start + 4 * HOUR, None, HOUR)
    assert [(e.tick_at, e.label) for e in book.entries] == [(start + 3 * HOUR, TickLabel.MISSED)]
    with pytest.raises(AssertionError, match="runs read"):
        build_ledger("daily", daily, UnreadRuns(), (), start + 2 * HOUR, start + 4 * HOUR, None, HOUR)
