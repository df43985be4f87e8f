"""`python -m jobfence_ops demo`: the day scenario on a fresh embedded runtime, shown live, then judged.

A live view (rich) while the day runs: the simulated time, ticks by outcome
per job, queue depths and the latest events. Then a report per job (runs by
outcome, from the runs table) and per batch (items by status, from the item
rows), then the the invariants of docs/guarantees.md. Exit status 1 when any invariant fails.
"""

from __future__ import annotations

import pathlib
import shutil
import time
from collections import Counter, deque
from collections.abc import Callable

from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from jobfence_ops.app import load_app
from jobfence_ops.emulator import point_process_at
from jobfence_ops.runtime.runtime import LocalRuntime, Tick
from ops.day import HOUR, SHORT, DayConfig, DayReport, DayScenario

# The demo's work folder (function logs): kept after the run so the path it prints can be opened; emptied at each start.
REPOSITORY = pathlib.Path(__file__).resolve().parents[1]  # the demo runs this repository's app, from anywhere
DEMO_DIR = REPOSITORY / ".jobfence" / "demo"


class LiveView:
    """What the terminal shows while the day runs."""

    def __init__(self, runtime: LocalRuntime, hours: float) -> None:
        self.rt = runtime
        self.hours = hours
        self.ticks: dict[str, Counter] = {}
        self.events: deque[str] = deque(maxlen=8)
        self.deliveries: Counter[str] = Counter()
        self.day_start: int | None = None  # the scenario's 00:00, once it is set
        self.on_hour: Callable[[str], None] | None = (
            None  # called with each full simulated hour reached (the plain output's progress line)
        )
        self._hours_done = 0
        self._started = time.monotonic()

    def tick(self, tick: Tick) -> None:
        self._hours_before(tick.at_ms)  # a tick after an hour's end: that hour (its last instant's ticks too) is done
        if tick.job is None:
            return
        inv = tick.invocation
        if not tick.fired:
            label = "not fired (rule disabled)"
        elif inv is None:
            label = "?"
        elif inv.ok:
            label = str((inv.payload or {}).get("outcome", "ok"))
        else:
            label = inv.status
        self.ticks.setdefault(tick.job, Counter())[label] += 1

    def event(self, line: str) -> None:
        self.events.append(line)

    def _hours_before(self, at_ms: int) -> None:
        if self.day_start is None or self.on_hour is None:
            return
        while at_ms > self.day_start + (self._hours_done + 1) * HOUR and self._hours_done + 1 <= self.hours:
            self._hours_done += 1
            self.on_hour(self.progress_line(self._hours_done))

    def finish(self, end_ms: int) -> None:
        """The day is over at `end_ms`: the progress lines of the hours not printed yet."""
        self._hours_before(end_ms + 1)

    def progress_line(self, hour: int) -> str:
        """One line per simulated hour: where the day is, the ticks so far by outcome, the real time taken."""
        totals: Counter = Counter()
        for counts in self.ticks.values():
            totals.update(counts)
        outcomes = ", ".join(f"{k}={v}" for k, v in sorted(totals.items()))
        return f"{hour:02d}:00  simulated hour {hour} of {self.hours:g} done ({time.monotonic() - self._started:.0f}s): ticks {outcomes}"

    def render(self) -> Panel:
        elapsed_h = (self.rt.clock.now_ms() - self.rt.start_ms) / 3_600_000
        table = Table(expand=True)
        table.add_column("job", no_wrap=True, min_width=max(map(len, self.ticks), default=3))
        table.add_column("ticks by outcome")
        for job in sorted(self.ticks):
            table.add_row(job, ", ".join(f"{k}={v}" for k, v in sorted(self.ticks[job].items())))
        poller = self.rt.poller
        in_flight = len(poller.in_flight)
        lines = "\n".join(self.events) or "-"
        bar = int(30 * min(1.0, elapsed_h / self.hours))
        header = (
            f"simulated {elapsed_h:5.2f} h / {self.hours:g} h  [{'#' * bar}{'.' * (30 - bar)}]   "
            f"SQS in flight: {in_flight}"
        )
        # plain Text: the progress bar's brackets and the events' text are not rich markup
        return Panel(
            Group(Text(header), table, Panel(Text(lines), title="events")),
            title="jobfence: a simulated day on the embedded runtime",
        )


def print_report(console: Console, report: DayReport) -> None:
    """Runs by outcome per job, items by status per batch, the invariant verdicts."""
    jobs = Table(title="runs by outcome (runs table)", title_justify="left")
    names = {obs.job for obs in report.observations} | {row["job"] for row in report.runs}
    jobs.add_column("job", no_wrap=True, min_width=max(map(len, names), default=3))  # a job's name is never cut
    jobs.add_column("runs")
    jobs.add_column("invocations seen by the driver")
    jobs.add_column("summary totals")
    seen: dict[str, Counter] = {}
    for obs in report.observations:
        seen.setdefault(obs.job, Counter())["died" if obs.died else (obs.outcome or "error")] += 1
    rows = report.runs_by_outcome()
    totals = report.summary_totals()
    for job in sorted(set(rows) | set(seen)):
        jobs.add_row(
            job,
            ", ".join(f"{k}={v}" for k, v in sorted(rows.get(job, {}).items())),
            ", ".join(f"{k}={v}" for k, v in sorted(seen.get(job, {}).items())),
            ", ".join(f"{k}={v}" for k, v in sorted(totals.get(job, {}).items()) if v),
        )
    console.print(jobs)
    if report.batches:
        batches = Table(title="batches (item rows by status)", title_justify="left")
        for column in ("batch", "items", "by status", "batch row"):
            batches.add_column(column)
        for b in report.batches:
            batches.add_row(
                b.ref,
                str(b.items),
                ", ".join(f"{k}={v}" for k, v in b.by_status.items()),
                ", ".join(f"{k}={v}" for k, v in b.batch_row.items()),
            )
        console.print(batches)
        console.print(
            "SQS deliveries by invocation status: "
            + ", ".join(f"{k}={v}" for k, v in sorted(report.deliveries.items()))
        )
    else:
        console.print("batches: none (no generation worker is deployed in this checkout)")
    for check in report.checks:
        mark = "[green]PASS[/]" if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} invariant {check.number}: {check.title} — {check.detail}")


def run_day(runtime: LocalRuntime, config: DayConfig, seed: int, view: LiveView | None = None) -> DayReport:
    """The scenario on a started runtime (tests call this with the short config)."""
    point_process_at(runtime.emulator)  # the driver's own pynamodb stores (seeding, reports)
    scenario = DayScenario(runtime, config, seed, on_event=view.event if view else None)
    if view is not None:
        view.day_start = scenario.start_ms
        runtime.on_tick = view.tick
    return scenario.run()


def demo(
    seed: int = 7, hours: float | None = None, live: bool = True, console: Console | None = None, short: bool = False
) -> int:
    """Run the day on a fresh runtime; 0 when every invariant holds, 1 otherwise."""
    console = console or Console()
    config = SHORT if short else DayConfig()
    if hours is not None:
        config = DayConfig(**{**config.__dict__, "hours": hours})
    started = time.monotonic()
    console.print("starting the embedded runtime: cdk synth, deploy into moto's CloudFormation ...")
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    DEMO_DIR.mkdir(parents=True)
    runtime = LocalRuntime.start(workdir=DEMO_DIR, app=load_app(start=REPOSITORY))
    try:
        top = runtime.topology
        console.print(
            f"moto on {runtime.emulator.endpoint}: {len(top.functions)} functions, {len(top.rules)} rules, "
            f"{len(top.mappings)} SQS event source(s), stubs: {', '.join(sorted(runtime.providers.stubs)) or 'none'} "
            f"({time.monotonic() - started:.0f}s)"
        )
        view = LiveView(runtime, config.hours)
        if live and console.is_terminal:
            with Live(view.render(), console=console, refresh_per_second=4) as screen:
                view.event = _refreshing(view.event, screen, view)  # type: ignore[method-assign]  # redrawn per line
                view.tick = _refreshing(view.tick, screen, view)  # type: ignore[method-assign]
                report = run_day(runtime, config, seed, view)
        else:
            view.event = _echo(view.event, console)  # type: ignore[method-assign]  # printed per line
            view.on_hour = lambda line: console.print(line, markup=False, highlight=False)
            report = run_day(runtime, config, seed, view)
            view.finish(report.end_ms)
        print_report(console, report)
    finally:
        runtime.stop()
    print_logs(console, report.log_dir)
    console.print(f"finished in {time.monotonic() - started:.0f}s (seed {seed})")
    return 0 if report.ok else 1


def print_logs(console: Console, log_dir: pathlib.Path) -> None:
    """The function logs' folder, when it is still there after the runtime stopped (a temporary one is gone)."""
    if log_dir.is_dir():
        console.print(f"function logs: {log_dir}", markup=False, highlight=False)


def _refreshing(callback, screen: Live, view: LiveView):
    def wrapped(*args):
        callback(*args)
        screen.update(view.render())

    return wrapped


def _echo(callback, console: Console):
    def wrapped(line: str) -> None:
        callback(line)
        console.print(line)

    return wrapped
