"""The operator CLI: `python -m jobfence_ops COMMAND` (installed as `jobfence`).

    local up | down | advance DURATION | kill-worker [FUNCTION]
                                the local runtime kept running in the background
    status                      rule, lease, next tick and last run per job; stale items; queues
    runs JOB [--limit N] [--outcome O] [--since W] [--until W] [--who X]
                                recent runs (or those that match): outcome, duration, error
    ledger JOB [--since 24h]    every expected tick since then and what became of it (ran, skipped_*, missed, ...)
    sweep-runs                  record `died` the runs whose term ended unreleased (no next tick yet)
    cost [--since 1d]           what each job's runs cost: DynamoDB units, requests, dollars
    batch TENANT/BATCH          rows first: the batch row, then its item rows
    batch list [--tenant T]     batch rows with their counters
    batch submit TENANT/BATCH FILE [--kind K] [--grant-quota N]
                                a batch from a JSON-lines file of items
    retry-failed TENANT/BATCH   reset failed items (the only way a budget is reset) and wake them
    cancel TENANT/BATCH         cancel a batch: pending items end cancelled (quota refunded once), running ones finish
    quota TENANT [--grant N]    a tenant's quota books, after granting N more actions
    run JOB / run-all           a manual trigger; run-all prints each job as it finishes
    disable JOB|--all / enable JOB|--all [--catch-up]
                                one job's rule, or every rule and every queue worker
    pause-workers / resume-workers   the queue workers (SQS event source mappings)
    invoke FUNCTION EVENT_FILE  a function (or a job's function) with a sample from events/
    console [--port N] [--read-only] [--trusted-proxy-header H]  the web console on localhost
    new job NAME --subsystem S --schedule EXPR [--root DIR]
                                a new job: its module, catalog entry, test and sample event (docs/your-first-job.md)
    and the app's own commands (`[tool.jobfence] commands`; this repository's: demo, sim, rotate-signing-key)

Targets: a real account (`--profile`, `--region`, `--stack`), the background
local runtime (`--local`), or a fresh in-process one (`--embedded`). Arguments
are checked before anything starts; `--json` prints results for scripts.
Exit status: 0 done, 1 something failed (a job, an invocation, an invariant),
2 the command could not run (one line on stderr says why).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console

from jobfence.errors import JobfenceError
from jobfence.work import BatchRef
from jobfence_ops import cli_output as out
from jobfence_ops.app import App, AppError, load_app
from jobfence_ops.commands import invoke
from jobfence_ops.commands.batches import parse_ref, read_items
from jobfence_ops.commands.jobs import operator_name
from jobfence_ops.console.identity import header_name
from jobfence_ops.emulator import point_process_at
from jobfence_ops.local import control as local
from jobfence_ops.runtime.runtime import LocalRuntime
from jobfence_ops.runtime.template import DeployError
from jobfence_ops.targets import (
    DEFAULT_STACK,
    AwsTarget,
    EmbeddedTarget,
    LocalTarget,
    OperatorError,
    point_process_at_account,
)

MAX_ERROR_CHARS = 2000  # one line, bounded: a service's error text can be long
LOCAL_DIR_ENV = "JOBFENCE_LOCAL_DIR"  # where the background runtime keeps its state (default .jobfence/local)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([dhms])")
_UNIT_MS = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}
LEDGER_MAX_SPAN_DAYS = 31  # run rows are kept 90 days; 31 days of a one-minute schedule label in under a second


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line (`jobfence: error: ...`) and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog.split()[0]}: error: {' '.join(message.split())}\n")


# -- argument types: checked before any target starts -------------------------------------------


def job_names(app: App | None) -> Callable[[str], str]:
    """A job of the app's catalog (without an app, any name: the target's own jobs decide)."""

    def job_name(text: str) -> str:
        if app is not None and text not in app.catalog.jobs:
            raise argparse.ArgumentTypeError(f"unknown job {text[:64]!r}; jobs: {', '.join(sorted(app.catalog.jobs))}")
        return text

    return job_name


def operator(text: str) -> str:
    try:
        return operator_name(text)
    except OperatorError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def proxy_header(text: str) -> str:
    try:
        return header_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def batch_ref(text: str) -> BatchRef:
    try:
        return parse_ref(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def limit(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"between 1 and 1000, got {value}")
    return value


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a positive number, got {value}")
    return value


def duration_ms(text: str) -> int:
    """`2h`, `30m`, `1h30m`, `90s`, `1d` -> milliseconds."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"a duration is like 2h, 30m, 1h30m, 90s or 1d; got {text!r}")
    total = int(sum(float(n) * _UNIT_MS[u] for n, u in parts))
    if total <= 0:
        raise argparse.ArgumentTypeError("a duration is more than zero")
    return total


def ledger_span(text: str) -> int:
    """How far back a ledger reads: a duration of at most LEDGER_MAX_SPAN_DAYS (a month of one-minute ticks)."""
    value = duration_ms(text)
    if value > LEDGER_MAX_SPAN_DAYS * _UNIT_MS["d"]:
        raise argparse.ArgumentTypeError(f"at most {LEDGER_MAX_SPAN_DAYS}d, got {text!r}")
    return value


def event_file(text: str) -> Any:
    try:
        return invoke.load_event(invoke.event_path(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def items_file(text: str) -> list:
    try:
        return read_items(pathlib.Path(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# -- the parser ---------------------------------------------------------------------------------


def _target_options(p: argparse.ArgumentParser, default: Any) -> None:
    """Target and output options; accepted before or after the command (`status --local --json`)."""
    d = (lambda value: value) if default is None else (lambda value: default)
    where = p.add_argument_group("target (a real account unless --local or --embedded)")
    where.add_argument("--profile", default=d(None), help="AWS profile")
    where.add_argument("--region", default=d(None), help="AWS region")
    where.add_argument("--stack", default=d(DEFAULT_STACK), help="CloudFormation stack name (default: jobfence)")
    where.add_argument(
        "--local", action="store_true", default=d(False), help="the background local runtime (`local up`)"
    )
    where.add_argument(
        "--embedded",
        action="store_true",
        default=d(False),
        help="a fresh in-process local runtime (slow: synth and deploy)",
    )
    where.add_argument(
        "--advance-hours", type=float, default=d(0.0), help="with --embedded: let the schedules run this long first"
    )
    p.add_argument(
        "--as",
        dest="requested_by",
        type=operator,
        default=d(None),
        help='a label recorded beside your identity on actions ("Jane Doe"); who acted is always the caller '
        "identity (STS, or local:<login> on the local runtime)",
    )
    p.add_argument("--json", action="store_true", default=d(False), help="machine-readable output")
    p.add_argument(
        "--app",
        default=d(None),
        metavar="MODULE:ATTR",
        help="the app's catalog (default: [tool.jobfence] app in the nearest pyproject.toml, or $JOBFENCE_APP)",
    )


def parser(app: App | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; job names are checked against `app`'s catalog when one is given."""
    job_name = job_names(app)
    kinds = sorted(app.batches.pipelines) if app is not None and app.batches is not None else None
    default_kind = app.batches.default_kind if app is not None and app.batches is not None else None
    p = Parser(prog="jobfence", description="jobfence operator CLI")
    _target_options(p, None)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        c = sub.add_parser(name, help=help, description=help)
        _target_options(c, argparse.SUPPRESS)
        return c

    lp = sub.add_parser("local", help="the local runtime kept running in the background")
    lsub = lp.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    lsub.add_parser("up", help="start it (synth once, cached by a hash of the app's inputs)")
    lsub.add_parser("down", help="stop it")
    a = lsub.add_parser("advance", help="move simulated time (ticks fire, queues deliver)")
    a.add_argument("duration", type=duration_ms, help="2h, 30m, 1h30m, 1d")
    k = lsub.add_parser("kill-worker", help="SIGKILL a queue worker's isolate mid-batch on its next claiming delivery")
    k.add_argument("function", nargs="?", help="a worker function (default: the generation worker)")

    command("status", "rule, lease, next tick and last run per job; stale items; queue depths")
    r = command("runs", "recent runs of a job")
    r.add_argument("job", type=job_name)
    r.add_argument("--limit", type=limit, default=20)
    r.add_argument("--outcome", help="only runs that ended so: ran, failed, died, lease_lost, running, skipped")
    r.add_argument("--since", metavar="WHEN", help="started at or after: a UTC time (2026-01-01T03:00) or a span (6h)")
    r.add_argument("--until", metavar="WHEN", help="started at or before: a UTC time or a span back from now")
    r.add_argument("--who", help="asked for by: a part of the operator's name or the caller's ARN (any case)")
    r = command("ledger", "every expected tick of a job in a time range, and what became of it")
    r.add_argument("job", type=job_name)
    r.add_argument(
        "--since",
        type=ledger_span,
        default=duration_ms("24h"),
        metavar="DURATION",
        help=f"how far back: 24h (default), 30m, 2d, 1h30m; at most {LEDGER_MAX_SPAN_DAYS}d",
    )
    command("sweep-runs", "record `died` the runs whose term ended unreleased (no next tick yet)")
    c = command("cost", "what each job's runs cost: DynamoDB units, requests, dollars (from the run rows)")
    c.add_argument(
        "--since", type=duration_ms, default=duration_ms("24h"), metavar="DURATION", help="how far back: 1d (default)"
    )

    b = command("batch", "durable batches: show TENANT/BATCH (rows first), list, submit")
    bsub = b.add_subparsers(dest="batch_command", required=True, metavar="ACTION")
    s = bsub.add_parser("show", help="the batch row, then its item rows")
    s.add_argument("ref", type=batch_ref, metavar="TENANT/BATCH")
    s = bsub.add_parser("list", help="batch rows with their counters, newest first")
    s.add_argument("--tenant")
    s.add_argument("--limit", type=limit, default=50)
    s = bsub.add_parser("submit", help="a batch from a JSON-lines file of items")
    s.add_argument("ref", type=batch_ref, metavar="TENANT/BATCH")
    s.add_argument(
        "items", type=items_file, metavar="FILE", help='one item a line: {"id": ..., "input": {...}} or the input'
    )
    s.add_argument("--kind", choices=kinds, default=default_kind, help="the pipeline (default: the app's first)")
    s.add_argument("--grant-quota", type=positive, default=None, metavar="N", help="grant the tenant N actions first")
    for sp in bsub.choices.values():
        _target_options(sp, argparse.SUPPRESS)

    q = command("quota", "a tenant's quota books (limit, available, reserved, refunded)")
    q.add_argument("tenant")
    q.add_argument("--grant", type=positive, default=None, metavar="N", help="give the tenant N more actions first")
    r = command("retry-failed", "reset a batch's failed items and wake them")
    r.add_argument("ref", type=batch_ref, metavar="TENANT/BATCH")
    r = command("cancel", "cancel a batch: its pending items end cancelled (quota refunded), running ones finish")
    r.add_argument("ref", type=batch_ref, metavar="TENANT/BATCH")
    r = command("run", "trigger one job now (manual trigger)")
    r.add_argument("job", type=job_name)
    command("run-all", "trigger every scheduled job in parallel; one line per job as it finishes")
    for name in ("disable", "enable"):
        r = command(name, f"{name} one job's rule, or (--all) every rule and every queue worker")
        which = r.add_mutually_exclusive_group(required=True)
        which.add_argument("job", nargs="?", type=job_name)
        which.add_argument("--all", action="store_true", help="every rule and every queue worker")
        if name == "enable":
            r.add_argument(
                "--catch-up",
                action="store_true",
                help="then run each re-enabled job once for its last missed or disabled tick (its "
                "catch-up window, else the last 24h), unless a run started since",
            )
    command("pause-workers", "disable every queue worker's event source mapping (messages wait)")
    command("resume-workers", "enable every queue worker's event source mapping")
    r = command("invoke", "invoke a function with a sample event")
    r.add_argument("function", help="function name, or a job name")
    r.add_argument("event", type=event_file, metavar="EVENT_FILE", help="events/<name>.json by name, or a path")
    c = command("console", "the web console on localhost (read-mostly)")
    c.add_argument("--port", type=int, default=8377)
    c.add_argument("--read-only", action="store_true", help="no buttons: only reads")
    c.add_argument(
        "--trusted-proxy-header",
        type=proxy_header,
        default=None,
        metavar="HEADER",
        help="behind an authenticating proxy that sets HEADER to the signed-in user (e.g. X-Forwarded-User): "
        "each request acts as that user, one without it is refused (docs/security.md)",
    )
    n = sub.add_parser("new", help="scaffold a new job in this app (docs/your-first-job.md)")
    nsub = n.add_subparsers(dest="new_command", required=True, metavar="WHAT")
    j = nsub.add_parser("job", help="a job: its module, catalog entry and table, a test and a sample event")
    j.add_argument("name", help="lower_snake_case job name")
    j.add_argument("--subsystem", required=True, help="its subsystem (functions/jobs/SUBSYSTEM; created if new)")
    j.add_argument("--schedule", required=True, help="an EventBridge expression: 'rate(1 hour)', 'cron(0 3 * * ? *)'")
    j.add_argument("--root", type=pathlib.Path, default=pathlib.Path("."), help="the app's root (default: here)")
    for name, extra in (app.commands if app is not None else {}).items():
        extra.arguments(command(name, extra.help) if extra.on_target else sub.add_parser(name, help=extra.help))
    return p


def _new(args: argparse.Namespace, console: Console) -> int:
    """Write the scaffold of a new job (every check first: a refusal writes nothing)."""
    from jobfence_ops.commands.scaffold import plan_job

    written = plan_job(args.root, args.name, args.subsystem, args.schedule).write()
    console.print(f"job {args.name} ({args.subsystem}, {args.schedule}) scaffolded:", markup=False)
    for path in written:
        console.print(f"  {path}", markup=False)
    # soft_wrap: a command to copy is never broken at the terminal's width
    console.print(f"next: .venv/bin/python -m pytest tests/unit/test_job_{args.name}.py", markup=False, soft_wrap=True)
    console.print("then: make synth", markup=False, soft_wrap=True)
    return 0


def _normalize(argv: list[str]) -> list[str]:
    """`batch TENANT/BATCH` is `batch show TENANT/BATCH`."""
    if "batch" in argv:
        i = argv.index("batch")
        rest = argv[i + 1 :]
        first = next((a for a in rest if not a.startswith("-")), None)
        if first is not None and first not in ("show", "list", "submit"):
            argv = [*argv[: i + 1], "show", *rest]
    return argv


# -- running ------------------------------------------------------------------------------------


def main(
    argv: Sequence[str] | None = None, target: Any = None, console: Console | None = None, errors: Console | None = None
) -> int:
    """Parse, check, run one command; the return value is the exit status.

    Tests pass a `target` (over a shared runtime) and a console (errors go to it too).
    """
    argv = _normalize(list(sys.argv[1:] if argv is None else argv))
    errors = errors or console or Console(stderr=True, highlight=False)
    console = console or Console(highlight=False)
    app, missing = _app(argv, target)
    args = parser(app).parse_args(argv)
    runtime = None
    try:
        if args.command not in APP_FREE_COMMANDS and app is None:
            raise missing or AppError("no app")
        extra = app.commands.get(args.command) if app is not None else None
        if extra is not None and not extra.on_target:
            return extra.run(args, console, None)
        if args.command == "new":
            return _new(args, console)
        if args.command == "local":
            if args.local_command == "up" and app is None:
                raise missing or AppError("no app")
            return out.local(args, _local_dir(app), console, app)
        if args.command in BATCH_COMMANDS:
            (app or target.app).require_batches()  # before any target starts: the app may have no batches
        if target is None:
            assert app is not None
            target, runtime = _target(args, console, app)
        if extra is not None:
            return extra.run(args, console, target)
        return HANDLERS[args.command](target, args, console)
    except (OperatorError, AppError, local.LocalError, DeployError, JobfenceError, ClientError, BotoCoreError) as exc:
        errors.print(f"jobfence: error: {_one_line(exc)}", markup=False, highlight=False, soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        errors.print("jobfence: interrupted", markup=False, soft_wrap=True)
        return 130
    finally:
        if runtime is not None:
            runtime.stop()


# commands that need no app: the scaffold, and the local runtime's controls (`local up` excepted)
APP_FREE_COMMANDS = frozenset({"new", "local"})  # of `local`, `up` alone needs the app


BATCH_COMMANDS = frozenset({"batch", "quota", "retry-failed", "cancel"})


def _app(argv: list[str], target: Any) -> tuple[App | None, AppError | None]:
    """The app (`jobfence_ops.app`): from --app, else found from here; a target passed in (tests) brings its own."""
    if target is not None:
        return target.app, None
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--app", default=None)
    spec = pre.parse_known_args(argv)[0].app
    try:
        return load_app(spec), None
    except AppError as exc:
        return None, exc


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 3] + "..."


def _local_dir(app: App | None) -> pathlib.Path:
    """$JOBFENCE_LOCAL_DIR, else .jobfence/local in the app's directory (or here, without an app)."""
    if os.environ.get(LOCAL_DIR_ENV):
        return pathlib.Path(os.environ[LOCAL_DIR_ENV])
    return (app.root if app is not None else pathlib.Path.cwd()) / local.DEFAULT_DIR


def _target(args: argparse.Namespace, console: Console, app: App) -> tuple[Any, Any]:
    if args.local and args.embedded:
        raise OperatorError("--local and --embedded name two different runtimes: pick one")
    if args.local:
        control = local.LocalControl(_local_dir(app))
        return LocalTarget(control, app), None  # it points this process at the runtime's emulator
    if args.embedded:
        if not args.json:
            console.print("starting a fresh embedded runtime (deploy into moto) ...")
        runtime = LocalRuntime.start(app=app)
        point_process_at(runtime.emulator)
        if args.advance_hours:
            runtime.advance(hours=args.advance_hours)
        return EmbeddedTarget(runtime), runtime
    point_process_at_account(args.profile, args.region)
    return AwsTarget(args.profile, args.region, args.stack, read_only=False, app=app), None


HANDLERS: dict[str, Callable[[Any, argparse.Namespace, Console], int]] = {
    "status": out.status,
    "runs": out.runs,
    "ledger": out.ledger,
    "sweep-runs": out.sweep_runs,
    "cost": out.cost,
    "batch": out.batch,
    "retry-failed": out.retry_failed,
    "cancel": out.cancel,
    "quota": out.quota,
    "run": out.run,
    "run-all": out.run_all,
    "disable": out.switch(False),
    "enable": out.switch(True),
    "pause-workers": out.workers(False),
    "resume-workers": out.workers(True),
    "invoke": out.invoke,
    "console": out.console,
}
