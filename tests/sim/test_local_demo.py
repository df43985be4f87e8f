"""What a newcomer reads from `make demo`: a line per simulated hour, whole job names, a logs path that exists."""

from __future__ import annotations

import io
import pathlib

from rich.console import Console

from ops.day import HOUR, DayReport
from ops.demo import LiveView, print_logs, print_report
from ops.invariants import Check, Observation
from jobfence_ops.runtime.runtime import Tick
from jobfence_ops.runtime.workers import Invocation

LONG = "capture_abandoned_deferred_payments_of_the_day"


def _plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=80, force_terminal=False, color_system=None), out


def test_a_progress_line_per_simulated_hour_when_the_output_is_not_a_terminal():
    # GIVEN the plain view of a 3-hour day whose 00:00 is known
    view = LiveView(runtime=None, hours=3)
    view.day_start = 10 * HOUR
    lines: list[str] = []
    view.on_hour = lines.append
    # WHEN a 5-minute job ticks through the day
    for at in range(10 * HOUR + 5 * 60_000, 13 * HOUR + 1, 5 * 60_000):
        view.tick(Tick("rule", "five_minute_job", at, True, Invocation("f", "ok", payload={"outcome": "ran"})))
    view.finish(13 * HOUR)
    # THEN one line per simulated hour, in order, with the ticks so far
    assert [line[:5] for line in lines] == ["01:00", "02:00", "03:00"]
    assert "hour 3 of 3" in lines[-1] and "ran=36" in lines[-1]


def test_job_names_are_never_cut_in_the_report():
    # GIVEN a report with a long job name, printed on an 80-column plain console
    console, out = _plain_console()
    report = DayReport(
        observations=[Observation(at_ms=0, job=LONG, label="tick", outcome="ran")],
        checks=[Check(1, "at most one unexpired holder per job", True, "ok")],
        runs=[{"job": LONG, "outcome": "ran", "summary": {"captured": 12, "scanned": 12, "deleted": 3}}],
        batches=[], killed_workers=0, log_dir=pathlib.Path("/nonexistent"),
    )
    print_report(console, report)
    # THEN the name is printed whole
    assert LONG in out.getvalue()


def test_the_logs_path_is_printed_only_when_it_still_exists(tmp_path):
    console, out = _plain_console()
    print_logs(console, tmp_path / "gone")
    assert "function logs" not in out.getvalue()
    (tmp_path / "logs").mkdir()
    print_logs(console, tmp_path / "logs")
    assert f"function logs: {tmp_path / 'logs'}" in out.getvalue().replace("\n", "")
