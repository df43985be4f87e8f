"""How long a job may go between two `ran` outcomes (the not-running alarm's interval)."""

from __future__ import annotations

import pytest

from jobfence_cdk.schedule import tick_interval_s
from jobfence.registry import CatalogError, JobSpec


def _job(schedule: str, interval_s: int | None = None) -> JobSpec:
    return JobSpec(name="probe", subsystem="probe", entry="m:f", schedule=schedule, interval_s=interval_s)


@pytest.mark.parametrize(
    ("schedule", "interval_s", "expected"),
    [
        ("rate(5 minutes)", None, 300),
        ("rate(1 day)", None, 86400),
        ("cron(0 * * * ? *)", None, 3600),
        ("cron(0/30 * * * ? *)", None, 1800),
        ("cron(15 3 * * ? *)", None, 86400),
        ("cron(0 9 ? * MON-FRI *)", None, 3 * 86400),  # Friday 09:00 -> Monday 09:00
        ("cron(0 12 ? * 2-6 *)", None, 3 * 86400),  # EventBridge 2-6 = Monday..Friday
        ("cron(0 * * * ? *)", 6 * 3600, 6 * 3600),  # a gate longer than the schedule: ticks inside it skip
        ("cron(0/30 * * * ? *)", 600, 1800),  # a gate shorter than the schedule changes nothing
    ],
)
def test_interval_is_the_longer_of_the_gate_and_the_longest_schedule_gap(schedule, interval_s, expected):
    assert tick_interval_s(_job(schedule, interval_s)) == expected


def test_an_unevaluable_cron_is_refused_naming_the_entry():
    with pytest.raises(CatalogError, match="'probe'"):
        tick_interval_s(_job("cron(0 * * *)"))
