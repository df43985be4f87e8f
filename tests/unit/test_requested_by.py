"""Who ran it: a manual run's `requested_by` (exactly as given) and caller identity on its row and outcome log line."""

from __future__ import annotations

import pytest

from jobfence.errors import InvalidEvent
from jobfence.scheduled import Outcome
from jobfence.triggers import Trigger, parse_trigger
from tests.runner_support import Harness, counting_job, spec
from tests.support import create_catalog_tables

CALLER = "arn:aws:sts::123456789012:assumed-role/ops-admin/jane"


@pytest.fixture
def h(dynamodb, clock):
    return Harness(dynamodb, create_catalog_tables(dynamodb, ["leases", "runs"]), clock)


@pytest.mark.parametrize("name", ["Jane Doe", "jane@example.com", "Zoë O'Brien-Smith", "x" * 128])
def test_a_manual_trigger_keeps_the_name_exactly_as_written(clock, name):
    trigger = parse_trigger({"trigger": "manual", "requested_by": name, "caller": CALLER}, clock)
    assert (trigger.kind, trigger.requested_by, trigger.caller) == ("manual", name, CALLER)


@pytest.mark.parametrize("event", [
    {"trigger": "manual", "requested_by": "Jane\nDoe"},  # a control character would break a log line
    {"trigger": "manual", "requested_by": "Jane\u2028Doe"},  # so would a Unicode line separator
    {"trigger": "manual", "requested_by": "   "},
    {"trigger": "manual", "requested_by": "x" * 129},
    {"trigger": "manual", "requested_by": "jane", "caller": "arn with spaces"},
])
def test_a_name_that_cannot_be_recorded_as_written_is_refused_not_rewritten(clock, event):
    with pytest.raises(InvalidEvent, match="invalid manual trigger"):
        parse_trigger(event, clock)


def test_the_run_row_and_the_log_line_of_a_manual_run_say_who_ran_it(h):
    # WHEN Jane runs the job by hand
    manual = Trigger("manual", h.clock.now_ms(), requested_by="Jane Doe", caller=CALLER)
    result = h.tick(spec(), counting_job(1, []), trigger=manual)
    # THEN its row and its log line carry her name as written and the caller's identity
    assert result.outcome is Outcome.RAN
    (row,) = h.rows()
    assert (row["trigger"], row["requested_by"], row["caller"]) == ("manual", "Jane Doe", CALLER)
    (line,) = [entry for entry in h.logs() if entry.get("message") == "scheduled_job"]
    assert (line["requested_by"], line["caller"], line["run_id"]) == ("Jane Doe", CALLER, result.run_id)
    # AND the next tick's line (same warm logger) does not inherit them
    h.clock.advance(hours=1)
    h.tick(spec(), counting_job(1, []))
    last = [entry for entry in h.logs() if entry.get("message") == "scheduled_job"][-1]
    assert "requested_by" not in last and "caller" not in last
    newest = h.rows()[0]
    assert newest["trigger"] == "scheduled" and "requested_by" not in newest


def test_a_skipped_manual_run_still_logs_who_asked(h):
    h.tick(spec(), counting_job(1, []))
    # WHEN Jane asks again inside the interval gate: nothing is written, the line says who asked
    manual = Trigger("manual", h.clock.now_ms(), requested_by="Jane Doe", caller=CALLER)
    assert h.tick(spec(), counting_job(1, []), trigger=manual).outcome is Outcome.SKIPPED_INTERVAL
    last = [entry for entry in h.logs() if entry.get("message") == "scheduled_job"][-1]
    assert (last["outcome"], last["requested_by"]) == ("skipped_interval", "Jane Doe")
