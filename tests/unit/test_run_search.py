"""Searching a job's runs (`jobfence_ops.commands.run_search`): the console's job page and `jobfence runs`.

GIVEN the operator's text WHEN parsed THEN a filter, or a one-line error naming the field and what it takes
(the bad value quoted, cut short); GIVEN a filter THEN exactly the runs it names match.
"""

from __future__ import annotations

import datetime as dt

import pytest

from jobfence_ops.commands.jobs import RunView
from jobfence_ops.commands.run_search import RunFilter, parse_filter
from jobfence_ops.targets import OperatorError

NOW = int(dt.datetime(2026, 1, 2, 12, 0, tzinfo=dt.UTC).timestamp() * 1000)
HOUR = 3_600_000


def run(outcome: str, hours_ago: float, who: str | None = None, caller: str | None = None) -> RunView:
    return RunView("clean", f"r-{outcome}-{hours_ago}", outcome, "manual" if who else "scheduled",
                   int(NOW - hours_ago * HOUR), None, 1, "h", 1, requested_by=who, caller=caller)


RUNS = [run("ran", 1, "Gina", "arn:aws:sts::1:assumed-role/ops/gina"), run("failed", 3), run("died", 30),
        run("skipped_interval", 2, "ivo"), run("ran", 50)]


def matching(f: RunFilter) -> list[str]:
    return [r.run_id for r in RUNS if f.matches(r)]


def test_a_filter_by_outcome_time_and_who():
    assert matching(parse_filter(NOW, outcome="ran")) == ["r-ran-1", "r-ran-50"]
    assert matching(parse_filter(NOW, outcome="skipped")) == ["r-skipped_interval-2"]
    assert matching(parse_filter(NOW, since="6h")) == ["r-ran-1", "r-failed-3", "r-skipped_interval-2"]
    assert matching(parse_filter(NOW, since="2026-01-01T00:00", until="2026-01-02T09:30")) == [
        "r-failed-3", "r-died-30"]
    assert matching(parse_filter(NOW, who="GINA")) == ["r-ran-1"]
    assert matching(parse_filter(NOW, who="assumed-role/ops")) == ["r-ran-1"]  # a part of the caller's ARN
    assert matching(parse_filter(NOW, outcome="ran", since="1d", who="gina")) == ["r-ran-1"]
    assert parse_filter(NOW, outcome="", since=" ", until=None, who="").empty


@pytest.mark.parametrize("fields, message", [
    ({"outcome": "exploded"}, "outcome: one of running, ran, lease_lost, failed, died, skipped, skipped_interval, "
                              "skipped_leased, skipped_served; got 'exploded'"),
    ({"since": "yesterday"}, "since: a UTC time like 2026-01-01T03:00 or a span like 30m, 6h, 2d; got 'yesterday'"),
    ({"until": "x" * 500}, "until: a UTC time like 2026-01-01T03:00 or a span like 30m, 6h, 2d; got '"
                           + "x" * 40 + "...'"),
    ({"since": "1h", "until": "2h"}, "since: must be before until"),
    ({"who": "w" * 129}, "who: at most 128 characters"),
])
def test_bad_input_is_a_one_line_error_naming_the_field(fields, message):
    with pytest.raises(OperatorError) as refused:
        parse_filter(NOW, **fields)
    assert str(refused.value) == message and "\n" not in message
