"""The CLI's command handlers: call `jobfence_ops.commands`, print tables (or `--json`), return the exit status."""

from __future__ import annotations

import argparse
import pathlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

from jobfence_ops.app import App
from jobfence_ops.audit import Audited, Operator, operator_of
from jobfence_ops.commands import actions, batches, jobs, run_search, stall, switches
from jobfence_ops.commands import invoke as invoking
from jobfence_ops.commands.cost import job_costs
from jobfence_ops.commands.jobs import JobResult
from jobfence_ops.console.access import Access, detect
from jobfence_ops.console.server import serve
from jobfence_ops.local import control as local_control
from jobfence_ops.render import ago, cost_text, pairs, plain, print_json, table, when

Handler = Callable[[Any, argparse.Namespace, Console], int]


def who(target: Any, args: argparse.Namespace) -> Operator:
    """The operator of this command: the caller identity (STS, or `local:<login>`), with `--as` as a label."""
    return operator_of(target, args.requested_by)


def unaudited(console: Console, done: Iterable[Audited[Any]]) -> int:
    """Say each audit entry that could not be written (the action's own result is printed already): 1 if any."""
    missed = [d for d in done if not d.audit.written]
    for d in missed:
        entry = d.audit.entry
        console.print(
            f"audit: the entry for {entry.action} {entry.subject} was NOT written ({d.audit.error})", markup=False
        )
    return 1 if missed else 0


def as_json(console: Console, args: argparse.Namespace, value: Any) -> bool:
    """Print `value` as JSON when `--json` was asked for (then the table is skipped)."""
    if args.json:
        print_json(console, value)
    return bool(args.json)


# -- jobs ---------------------------------------------------------------------------------------


def status(target: Any, args: argparse.Namespace, console: Console) -> int:
    report = jobs.status(target)
    if as_json(console, args, report):
        return 0
    now = report.now_ms
    console.print(f"target: {target.name}   now: {when(now)}", markup=False)
    t = table(
        "jobs",
        "job",
        "rule",
        "next tick",
        "lease",
        "last run",
        "missed 24h",
        "error",
        names=[j.job for j in report.jobs],
    )
    for job in report.jobs:
        last = job.last_run
        lease = f"{job.holder} (fence {job.fence}) {ago(job.expires_at, now)}" if job.holder else "free"
        t.add_row(
            job.job,
            (job.rule_state or "-").lower(),
            ago(job.next_tick_at, now),
            lease,
            f"{last.outcome or '-'} {ago(last.started_at, now)}" if last else "-",
            "-" if job.missed_last_day is None else str(job.missed_last_day),
            (last.error or "") if last else "",
        )
    console.print(t)
    if report.stale_items is not None:
        console.print("stale live items: " + pairs(report.stale_items), markup=False)
    q = table("queues", "queue", "visible", "in flight", names=[d.queue for d in report.queues])
    for depth in report.queues:
        q.add_row(depth.queue, str(depth.visible), str(depth.in_flight))
    console.print(q)
    if report.workers:
        w = table("queue workers", "function", "mapping", names=[x.function for x in report.workers])
        for worker in report.workers:
            w.add_row(worker.function, f"{worker.state}{' (paused)' if worker.paused else ''}")
        console.print(w)
    stopped = report.stopped
    if stopped:
        console.print(f"STOPPED: {stopped.describe()} (`jobfence enable --all` resumes everything)", markup=False)
    return 0


def runs(target: Any, args: argparse.Namespace, console: Console) -> int:
    found = run_search.parse_filter(target.clock.now_ms(), args.outcome, args.since, args.until, args.who)
    rows = run_search.search_runs(target, args.job, found, args.limit)
    if as_json(console, args, rows):
        return 0
    t = table(
        f"runs of {args.job} (newest first)",
        "started",
        "trigger",
        "outcome",
        "duration ms",
        "fence",
        "summary",
        "error",
        "by",
        "cost",
        names=[when(0)],
    )
    for row in rows:
        by = " ".join(x for x in (row.requested_by, f"({row.caller})" if row.caller else None) if x)
        t.add_row(
            when(row.started_at),
            row.trigger or "-",
            row.outcome or "-",
            str(row.duration_ms if row.duration_ms is not None else "-"),
            str(row.fence if row.fence is not None else "-"),
            pairs(row.summary),
            row.error or "",
            by,
            cost_text(row.cost),
        )
    console.print(t)
    return 0


def cost(target: Any, args: argparse.Namespace, console: Console) -> int:
    now = target.clock.now_ms()
    report = job_costs(target, now - args.since, now)
    if as_json(console, args, {**plain(report), "dollars": report.dollars, "runs": report.runs}):
        return 0
    t = table(
        f"cost of the runs started since {when(report.since_ms)} UTC (on-demand prices of {report.prices_as_of})",
        "job",
        "runs",
        "WRU / RRU (+ index)",
        "requests",
        "dollars",
        names=[j.job for j in report.jobs],
    )
    for j in report.jobs:
        uncosted = f" ({j.runs - j.costed} without)" if j.costed < j.runs else ""
        u = j.units
        index = f" (+{u.index_write:g} / {u.index_read:g})" if u.index_write or u.index_read else ""
        t.add_row(
            j.job, f"{j.runs}{uncosted}", f"{u.write:g} / {u.read:g}{index}", str(j.requests), f"${j.dollars:.6f}"
        )
    t.add_row("total", str(report.runs), "", "", f"${report.dollars:.6f}")
    console.print(t)
    return 0


def ledger(target: Any, args: argparse.Namespace, console: Console) -> int:
    now = target.clock.now_ms()
    book = jobs.job_ledger(target, args.job, now - args.since, now, look=True)
    if as_json(console, args, book):
        return 0
    t = table(
        f"ledger of {args.job} ({book.schedule}, UTC, oldest first)",
        "tick",
        "label",
        "run",
        "duplicates",
        "made up by",
        names=[when(0)],
    )
    for entry in book.entries:
        t.add_row(
            when(entry.tick_at),
            entry.label.value,
            entry.run_id or "-",
            str(entry.duplicates or ""),
            entry.made_up_by or "",
        )
    console.print(t)
    console.print(
        f"{len(book.entries)} expected tick(s): "
        + (", ".join(f"{k.value}={v}" for k, v in sorted(book.counts().items(), key=lambda kv: kv[0].value)) or "none"),
        markup=False,
    )
    return 0


def sweep_runs(target: Any, args: argparse.Namespace, console: Console) -> int:
    result = jobs.sweep_runs(target)
    if as_json(console, args, result):
        return 0
    console.print(f"{result.jobs} job(s) looked at, {result.died} run(s) recorded died", markup=False)
    return 0


def _result_line(r: JobResult) -> str:
    mark = "ok  " if r.passed else "FAIL"
    tail = f"  {pairs(r.summary)}" if r.summary else ""
    error = f"  {r.error}" if r.error else ""
    return f"{mark} {r.job}  {r.outcome or r.status}  {r.wall_ms} ms{tail}{error}"


def _results(console: Console, args: argparse.Namespace, results: Any) -> int:
    passed = failed = 0
    for r in results:  # printed as each one finishes
        passed, failed = passed + r.passed, failed + (not r.passed)
        if args.json:
            print_json(console, r)
        else:
            console.print(_result_line(r), markup=False, highlight=False, soft_wrap=True)
    if args.json:
        print_json(console, {"passed": passed, "failed": failed})
    else:
        console.print(f"passed: {passed}  failed: {failed}", markup=False)
    return 0 if failed == 0 else 1


def run(target: Any, args: argparse.Namespace, console: Console) -> int:
    done = actions.run_now(target, who(target, args), args.job)
    return _results(console, args, [done.value]) | unaudited(console, [done])


def run_all(target: Any, args: argparse.Namespace, console: Console) -> int:
    done: list[Audited[JobResult]] = []

    def each() -> Any:
        for d in actions.run_all(target, who(target, args)):
            done.append(d)
            yield d.value

    return _results(console, args, each()) | unaudited(console, done)


# -- batches ------------------------------------------------------------------------------------


def batch(target: Any, args: argparse.Namespace, console: Console) -> int:
    return {"show": _batch_show, "list": _batch_list, "submit": _batch_submit}[args.batch_command](
        target, args, console
    )


def _batch_show(target: Any, args: argparse.Namespace, console: Console) -> int:
    report = batches.batch(target, args.ref)
    findings = stall.why(target, report)
    if as_json(console, args, {**plain(report), "counts": report.counts(), "why": plain(findings)}):
        return 0
    b = report.batch
    head = table(
        f"batch {b.tenant}/{b.batch_id}",
        "kind",
        "status",
        "total",
        "completed",
        "failed",
        "updated",
        "finalized",
        "retries",
    )
    head.add_row(
        b.kind,
        b.status.value,
        str(b.total),
        str(b.completed),
        str(b.failed),
        when(b.updated_at),
        when(b.finalized_at),
        str(b.retries),
    )
    console.print(head)
    items = table(
        "items (by updated_at)",
        "item",
        "status",
        "attempts",
        "error",
        "updated",
        names=[i.item_id for i in report.items],
    )
    for item in report.items:
        items.add_row(item.item_id, item.status.value, str(item.attempts), item.error or "", when(item.updated_at))
    console.print(items)
    console.print("items by status: " + ", ".join(f"{k}={v}" for k, v in report.counts().items()), markup=False)
    console.print(f"cost (its items, as last recounted): {cost_text(b.cost)}", markup=False)
    for finding in findings:  # why it is not done (blocking first): docs/operations.md, "A batch that stalls"
        console.print(f"why: [{finding.severity.value}] {finding.says}", markup=False)
    return 0


def _batch_list(target: Any, args: argparse.Namespace, console: Console) -> int:
    rows = batches.batches(target, args.tenant, args.limit)
    if as_json(console, args, rows):
        return 0
    t = table(
        "batches (newest first)",
        "batch",
        "kind",
        "status",
        "total",
        "completed",
        "failed",
        "created",
        "created by",
        names=[str(b.ref) for b in rows],
    )
    for b in rows:
        t.add_row(
            str(b.ref),
            b.kind,
            b.status.value,
            str(b.total),
            str(b.completed),
            str(b.failed),
            when(b.created_at),
            b.created_by,
        )
    console.print(t)
    return 0


def _batch_submit(target: Any, args: argparse.Namespace, console: Console) -> int:
    operator = who(target, args)
    done: list[Audited[Any]] = []
    if args.grant_quota:
        done.append(actions.grant_quota(target, operator, args.ref.tenant, args.grant_quota))
    submitted = actions.submit(target, operator, args.ref, args.kind, args.items)
    done.append(submitted)
    result = submitted.value
    if not as_json(console, args, result):
        verb = "created" if result.created else "resumed"
        console.print(
            f"{verb} batch {result.ref} ({args.kind}): {result.rows_written} item row(s) written, "
            f"{result.enqueued} wake-up(s) sent",
            markup=False,
        )
    return unaudited(console, done)


def quota(target: Any, args: argparse.Namespace, console: Console) -> int:
    granted = actions.grant_quota(target, who(target, args), args.tenant, args.grant) if args.grant else None
    balance = granted.value if granted else batches.quota(target, args.tenant)
    if not as_json(console, args, balance):
        console.print(
            f"{balance.tenant}: limit {balance.limit}, available {balance.available}, "
            f"reserved {balance.reserved}, refunded {balance.refunded}",
            markup=False,
        )
    return unaudited(console, [granted] if granted else [])


def retry_failed(target: Any, args: argparse.Namespace, console: Console) -> int:
    done = actions.retry_failed(target, who(target, args), args.ref)
    counts = done.value
    if not as_json(console, args, counts):
        console.print(
            f"retried {counts.retried} item(s); {counts.skipped_quota} left failed (quota); "
            f"{counts.unsent} wake-up(s) not sent (reclaim re-drives them)",
            markup=False,
        )
    return unaudited(console, [done])


def cancel(target: Any, args: argparse.Namespace, console: Console) -> int:
    done = actions.cancel(target, who(target, args), args.ref)
    if not as_json(console, args, done.value):
        console.print(batches.cancel_summary(done.value), markup=False, soft_wrap=True)
    return unaudited(console, [done])


# -- switches and invoke ------------------------------------------------------------------------


def _print_switches(console: Console, args: argparse.Namespace, changes: list[switches.Switch]) -> int:
    if as_json(console, args, changes):
        return 0
    t = table(None, "name", "kind", "resource", "state", names=[c.name for c in changes])
    for c in changes:
        t.add_row(c.name, c.kind, c.resource, c.state)
    console.print(t)
    return 0


def switch(enabled: bool) -> Handler:
    def handler(target: Any, args: argparse.Namespace, console: Console) -> int:
        operator = who(target, args)
        switched = (
            actions.set_everything(target, operator, enabled)
            if args.all
            else actions.set_rule(target, operator, args.job, enabled)
        )
        changes = switched.value
        code = _print_switches(console, args, changes) | unaudited(console, [switched])
        if not getattr(args, "catch_up", False):
            return code
        # after the rules are on again: each re-enabled job's last missed or disabled tick, once
        caught = [actions.catch_up(target, operator, c.name) for c in changes if c.kind == "rule"]
        results = [c.value for c in caught]
        for r in results:
            if as_json(console, args, r):
                continue
            if r.tick is None:
                console.print(f"catch-up {r.job}: nothing due in the last {r.window_s // 3600}h", markup=False)
            else:
                assert r.run is not None  # a due tick is run
                console.print(
                    f"catch-up {r.job} for the tick of {when(r.tick)}: {_result_line(r.run)}",
                    markup=False,
                    highlight=False,
                    soft_wrap=True,
                )
        return (0 if all(r.passed for r in results) else 1) | code | unaudited(console, caught)

    return handler


def workers(enabled: bool) -> Handler:
    def handler(target: Any, args: argparse.Namespace, console: Console) -> int:
        done = actions.set_workers(target, who(target, args), enabled)
        return _print_switches(console, args, done.value) | unaudited(console, [done])

    return handler


def invoke(target: Any, args: argparse.Namespace, console: Console) -> int:
    result = invoking.invoke(target, args.function, args.event)
    if args.json:
        print_json(console, result.as_dict())
        return 0 if result.ok else 1
    if result.ok:
        console.print_json(data=result.payload, default=str)
        return 0
    console.print(f"{result.status} {result.error_type}: {result.error_message}", markup=False)
    return 1


def console(target: Any, args: argparse.Namespace, out: Console) -> int:
    access = Access(False, "started with --read-only") if args.read_only else detect(target)
    return serve(target, args.port, access, console=out, proxy_header=args.trusted_proxy_header)


# -- the background local runtime ---------------------------------------------------------------


def local(args: argparse.Namespace, directory: pathlib.Path, console: Console, app: App | None) -> int:
    if args.local_command == "up":
        assert app is not None  # the CLI found it (`jobfence_ops.app`) before `local up`
        started = time.monotonic()
        with console.status("starting the local runtime (deploy into moto; the first start also synthesizes) ..."):
            control, fresh = local_control.up(directory, app)
        state = control.state()
        verb = "started" if fresh else "already up"
        console.print(
            f"local runtime {verb} in {time.monotonic() - started:.1f}s: emulator {state.endpoint}, "
            f"simulated now {when(state.now_ms)}; commands take --local",
            markup=False,
        )
        return 0
    if args.local_command == "down":
        stopped = local_control.down(directory)
        console.print("local runtime stopped" if stopped else "no local runtime was running", markup=False)
        return 0
    control = local_control.LocalControl(directory)
    if args.local_command == "kill-worker":
        name = control.kill_worker(args.function)
        console.print(f"{name}: its next delivery is SIGKILLed mid-batch (advance time to see it)", markup=False)
        return 0
    return _advance(control, args.duration, console)


def _advance(control: local_control.LocalControl, ms: int, console: Console) -> int:
    hours = ms / 3_600_000
    done: dict[str, Any] = {}
    with Progress(
        TextColumn("simulated {task.fields[now]}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("advance", total=ms, now="")
        for message in control.advance(ms):
            kind = message["type"]
            if kind == "progress":
                progress.update(task, completed=message["now_ms"] - message["start_ms"], now=when(message["now_ms"]))
            elif kind == "event":
                progress.console.print(f"{when(message['at_ms'])}  {message['text']}", markup=False, highlight=False)
            elif kind == "done":
                done = message
    console.print(
        f"advanced {hours:g} h to {when(done.get('now_ms'))}: {pairs(done.get('totals', {})) or 'nothing happened'}",
        markup=False,
    )
    return 0
