"""`python -m ops demo`: the scenario on a fresh emulator, printed tick by tick, then judged."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from ops.emulator import Emulator, point_process_at
from ops.invariants import Observation
from ops.scenario import ScenarioReport, run_scenario


def _describe(obs: Observation) -> str:
    if obs.died:
        return "[magenta]isolate died mid-run (lease kept)[/]"
    if obs.raised:
        return f"[red]failed[/] ({obs.error})"
    colour = {"ran": "green", "skipped_leased": "yellow", "skipped_interval": "yellow"}.get(obs.outcome or "", "red")
    extra = f" deleted={obs.summary.get('deleted')}" if obs.outcome == "ran" else f" writes={obs.writes} refused={obs.refused_writes}"
    return f"[{colour}]{obs.outcome}[/]{extra}"


def print_report(console: Console, report: ScenarioReport) -> None:
    """Runs by outcome per job, rows left, and the invariant verdicts."""
    table = Table(title="runs by outcome (runs table) and invocations by outcome (driver)")
    table.add_column("job")
    table.add_column("rows: outcome=count")
    table.add_column("invocations: outcome=count")
    for job in sorted({o.job for o in report.observations}):
        rows = Counter(r["outcome"] for r in report.runs if r["job"] == job)
        seen = Counter("died" if o.died else (o.outcome or "raised") for o in report.observations if o.job == job)
        table.add_row(job, ", ".join(f"{k}={v}" for k, v in sorted(rows.items())), ", ".join(f"{k}={v}" for k, v in sorted(seen.items())))
    console.print(table)
    console.print(f"seeded rows: {report.seeded}; expired rows left at the end: {report.remaining_expired}")
    for check in report.checks:
        mark = "[green]PASS[/]" if check.ok else "[red]FAIL[/]"
        console.print(f"{mark} invariant {check.number}: {check.title} — {check.detail}")


def demo(seed: int = 7, hours: float | None = None, live: bool = True, console: Console | None = None) -> int:
    """Run the scenario; 0 when every invariant holds, 1 otherwise."""
    console = console or Console()
    with Emulator() as emulator:
        console.print(f"moto server on {emulator.endpoint}")
        point_process_at(emulator)  # the jobs' pynamodb stores build clients from the environment

        def on_tick(title: str, batch: list[Observation]) -> None:
            for obs in batch:
                console.print(f"{title}  {obs.job:<20} {obs.label:<10} {_describe(obs)}")

        report = run_scenario(emulator.session(), seed_value=seed, on_tick=on_tick)
    print_report(console, report)
    return 0 if report.ok else 1
