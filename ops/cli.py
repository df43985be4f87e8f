"""The operator CLI: `python -m ops COMMAND` (installed as `jobfence`).

    status                      leases (holder, expiry), last run per job, stale items, queues
    runs JOB                    recent runs: outcome, duration, error
    sweep-runs                  record `died` the runs whose term ended unreleased (no next tick yet)
    batch TENANT/BATCH          rows first: the batch row, then its item rows
    run JOB                     a manual trigger through the same contract as a tick
    run-all                     every scheduled job in parallel, one line each, then passed/failed
    retry-failed TENANT/BATCH   reset failed items (the only way a budget is reset) and wake them
    disable [JOB] / enable [JOB]  the rules of all jobs, or of one
    invoke FUNCTION EVENT_FILE  a function (or a job's function) with a sample from events/
    demo [--seed N]             the whole scenario on the embedded runtime, then the invariant check

Every command except `demo` works on a real account (`--profile`, `--region`,
`--stack`) or, with `--embedded`, on a fresh embedded runtime (`--advance-hours`
lets its schedules run first). Exit status: 0 done, 1 something failed (a job,
an invocation, an invariant), 2 the command could not run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import json
import os
import pathlib
import sys
from typing import Any, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _bootstrap_path() -> None:
    # functions/ is the Lambda asset root: its packages import as top-level modules there.
    functions = str(ROOT / "functions")
    if functions not in sys.path:
        sys.path.insert(0, functions)
    os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "jobfence")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobfence", description="jobfence operator CLI")
    where = p.add_argument_group("target (a real account unless --embedded)")
    where.add_argument("--profile", help="AWS profile")
    where.add_argument("--region", help="AWS region")
    where.add_argument("--stack", default="jobfence", help="CloudFormation stack name (default: jobfence)")
    where.add_argument("--embedded", action="store_true", help="run on a fresh embedded local runtime")
    where.add_argument("--advance-hours", type=float, default=0, help="with --embedded: let the schedules run this long first")
    p.add_argument("--as", dest="requested_by", default=None, help="operator name recorded on manual runs")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="leases, last runs, stale items, queue depths")
    r = sub.add_parser("runs", help="recent runs of a job")
    r.add_argument("job")
    r.add_argument("--limit", type=int, default=20)
    sub.add_parser("sweep-runs", help="record died the runs whose term ended unreleased")
    b = sub.add_parser("batch", help="a batch and its item rows (rows first)")
    b.add_argument("batch_id", metavar="TENANT/BATCH")
    r = sub.add_parser("run", help="trigger one job now (manual trigger)")
    r.add_argument("job")
    sub.add_parser("run-all", help="trigger every scheduled job in parallel")
    r = sub.add_parser("retry-failed", help="reset a batch's failed items and wake them")
    r.add_argument("batch_id", metavar="TENANT/BATCH")
    for name in ("disable", "enable"):
        r = sub.add_parser(name, help=f"{name} the rules of every job, or of one")
        r.add_argument("job", nargs="?")
    r = sub.add_parser("invoke", help="invoke a function with a sample event")
    r.add_argument("function", help="function name, or a job name")
    r.add_argument("event_file", help="events/<name>.json by name, or a path")
    d = sub.add_parser("demo", help="the whole scenario on the embedded runtime")
    d.add_argument("--seed", type=int, default=7, help="makes a run reproducible")
    d.add_argument("--hours", type=float, default=None, help="simulated hours (default: the full scenario)")
    d.add_argument("--no-live", action="store_true", help="plain output instead of the live view")
    return p


def main(argv: Sequence[str] | None = None, target: Any = None, console: Any = None) -> int:
    """Parse the command line and run one command; the return value is the exit status.

    Tests pass a `target` (an `EmbeddedTarget` over a shared runtime) and a console.
    """
    _bootstrap_path()
    from rich.console import Console

    args = parser().parse_args(argv)
    console = console or Console()
    if args.command == "demo":
        from ops.demo import demo

        return demo(seed=args.seed, hours=args.hours, live=not args.no_live, console=console)
    from ops.operator import OperatorError

    runtime = None
    try:
        if target is None:
            target, runtime = _target(args, console)
        with target.environment():
            return COMMANDS[args.command](target, args, console)
    except OperatorError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    finally:
        if runtime is not None:
            runtime.stop()


def _target(args: argparse.Namespace, console: Any) -> tuple[Any, Any]:
    from ops.operator import AwsTarget, EmbeddedTarget

    if args.embedded:
        from ops.runtime.runtime import LocalRuntime

        console.print("starting the embedded runtime (synth, deploy into moto) ...")
        runtime = LocalRuntime().start()
        if args.advance_hours:
            runtime.advance(hours=args.advance_hours)
        return EmbeddedTarget(runtime), runtime
    return AwsTarget(args.profile, args.region, args.stack), None


def _who(args: argparse.Namespace) -> str:
    if args.requested_by:
        return args.requested_by
    try:
        return getpass.getuser()
    except Exception:  # no login name in a container: still say it was an operator
        return "operator"


def _when(ms: int | None, now: int | None = None) -> str:
    if ms is None:
        return "-"
    text = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    if now is not None:
        delta = (ms - now) // 1000
        text += f" ({'in ' if delta >= 0 else ''}{abs(delta)}s{'' if delta >= 0 else ' ago'})"
    return text


def _table(title: str, *columns: str):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


# -- commands ----------------------------------------------------------------------------------


def cmd_status(target, args, console) -> int:
    from ops.operator import status

    report = status(target)
    console.print(f"target: {target.name}   now: {_when(report.now_ms)}")
    table = _table("jobs", "job", "rule", "holder", "lease expires", "fence", "last run", "outcome", "error")
    for job in report.jobs:
        last = job.last_run or {}
        table.add_row(
            job.job,
            job.rule_state or "-",
            job.holder or "-",
            _when(job.expires_at, report.now_ms) if job.holder else "-",
            str(job.fence if job.fence is not None else "-"),
            _when(last.get("started_at")),
            last.get("outcome", "-"),
            (last.get("error") or "")[:60],
        )
    console.print(table)
    if report.stale_items is not None:
        console.print("stale live items: " + ", ".join(f"{k}={v}" for k, v in sorted(report.stale_items.items())))
    queues = _table("queues", "queue", "visible", "in flight")
    for name, depth in sorted(report.queues.items()):
        queues.add_row(name, str(depth["visible"]), str(depth["in_flight"]))
    console.print(queues)
    return 0


def cmd_runs(target, args, console) -> int:
    from ops.operator import runs

    rows = runs(target, args.job, args.limit)
    table = _table(f"runs of {args.job} (newest first)", "started", "trigger", "outcome", "duration ms", "fence", "summary", "error")
    for row in rows:
        table.add_row(
            _when(row.get("started_at")),
            row.get("trigger", "-"),
            row.get("outcome", "-"),
            str(row.get("duration_ms", "-")),
            str(row.get("fence", "-")),
            json.dumps(row.get("summary", {}), sort_keys=True)[:60],
            (row.get("error") or "")[:80],
        )
    console.print(table)
    return 0


def cmd_sweep_runs(target, args, console) -> int:
    from ops.operator import sweep_runs

    result = sweep_runs(target)
    console.print(f"{result.jobs} job(s) looked at, {result.died} run(s) recorded died")
    return 0


def cmd_batch(target, args, console) -> int:
    from ops.operator import batch

    report = batch(target, args.batch_id)
    b = report.batch
    head = _table(f"batch {b.tenant}/{b.batch_id}", "kind", "status", "total", "completed", "failed", "updated", "finalized", "retries")
    head.add_row(b.kind, b.status.value, str(b.total), str(b.completed), str(b.failed), _when(b.updated_at), _when(b.finalized_at), str(b.retries))
    console.print(head)
    items = _table("items (by updated_at)", "item", "status", "attempts", "error", "updated")
    for item in report.items:
        items.add_row(item.item_id, item.status.value, str(item.attempts), (item.error or "")[:80], _when(item.updated_at))
    console.print(items)
    console.print("items by status: " + ", ".join(f"{k}={v}" for k, v in report.counts().items()))
    return 0


def _print_results(console, results) -> int:
    table = _table("results", "job", "outcome", "status", "duration ms", "summary", "error")
    for r in results:
        colour = "green" if r.passed else "red"
        table.add_row(
            r.job,
            f"[{colour}]{r.outcome or '-'}[/]",
            r.status,
            str(r.duration_ms if r.duration_ms is not None else "-"),
            json.dumps(r.summary, sort_keys=True)[:60],
            (r.error or "")[:100],
        )
    console.print(table)
    passed = sum(1 for r in results if r.passed)
    console.print(f"passed: {passed}  failed: {len(results) - passed}")
    return 0 if passed == len(results) else 1


def cmd_run(target, args, console) -> int:
    from ops.operator import run

    return _print_results(console, [run(target, args.job, _who(args))])


def cmd_run_all(target, args, console) -> int:
    from ops.operator import run_all

    return _print_results(console, run_all(target, _who(args)))


def cmd_retry_failed(target, args, console) -> int:
    from ops.operator import retry_failed

    result = retry_failed(target, args.batch_id, _who(args))
    console.print(
        f"retried {result.retried} item(s); {result.skipped_quota} left failed (quota); "
        f"{result.unsent} wake-up(s) not sent (reclaim re-drives them)"
    )
    return 0


def _cmd_rules(enabled: bool):
    def command(target, args, console) -> int:
        from ops.operator import set_rules

        for change in set_rules(target, enabled, args.job):
            console.print(f"{change.job:<28} {change.rule:<40} {change.state}")
        return 0

    return command


def cmd_invoke(target, args, console) -> int:
    from ops.operator import invoke

    result = invoke(target, args.function, args.event_file)
    if result.ok:
        console.print_json(json.dumps(result.payload, default=str))
        return 0
    console.print(f"[red]{result.status}[/] {result.error_type}: {result.error_message}")
    return 1


COMMANDS = {
    "status": cmd_status,
    "sweep-runs": cmd_sweep_runs,
    "runs": cmd_runs,
    "batch": cmd_batch,
    "run": cmd_run,
    "run-all": cmd_run_all,
    "retry-failed": cmd_retry_failed,
    "disable": _cmd_rules(False),
    "enable": _cmd_rules(True),
    "invoke": cmd_invoke,
}
