"""The console's server-rendered pages: plain HTML, its own stylesheet and one small script, no build step.

Every value is escaped; every button is a form that needs the CSRF token and a
ticked confirmation (who acts is the caller identity, never a typed name), and no button is
rendered for a read-only console.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from html import escape
from typing import Any
from urllib.parse import quote

from jobfence_ops.console import charts
from jobfence_ops.render import cost_text, pairs, when

STYLESHEET = "/static/console.css"  # the console's own (`static/`), served by it: no inline style
LIVE_SCRIPT = "/static/live.js"  # the live views (`static/live.js`): swaps in the parts of a page that changed
BAD_OUTCOMES = {"failed", "lease_lost", "died", "error", "timeout", "missed"}
QUIET_LABELS = {"disabled", "skipped_interval", "skipped_leased", "running"}
LEDGER_SPANS = {"6h": 6 * 3_600_000, "24h": 24 * 3_600_000, "7d": 7 * 24 * 3_600_000}  # the ledger page's ranges


def page(
    title: str,
    body: str,
    *,
    target: str,
    now_ms: int,
    flash: str | None = None,
    refresh_s: int | None = None,
    mode: str | None = None,
    stopped: str | None = None,
    live_s: int | None = None,
    identity: str | None = None,
) -> str:
    """One page; `mode` (why the console is read-only) is printed under the navigation, `stopped` (what is
    switched off: disabled rules, paused workers) as a banner on every page while anything is; `identity` (who
    acts: the caller identity, or the proxy's user) in the navigation.

    `live_s`: the page refreshes its live parts (`data-live`) this often with the console's script, keeping
    any form in use; `refresh_s`: without script, the page reloads itself this often (a `<noscript>` meta)."""
    you = f" · <span id='identity'>you are {escape(identity)}</span>" if identity else ""
    live = f" data-live-every='{live_s}'" if live_s else ""
    note = f'<p class="flash" id="flash">{escape(flash)}</p>' if flash else ""
    stop = f"<p class='stopped' id='stopped'>STOPPED: {escape(stopped)}</p>" if stopped else ""
    banner = f"<div id='banner' data-live>{stop}</div>"  # a live part: it comes and goes with what is stopped
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{_head(refresh_s, script=bool(live_s))}"
        f"<title>{escape(title)} · jobfence</title></head><body{live}>"
        f"<nav><a href='/'>Jobs</a><a href='/batches'>Batches</a><a href='/audit'>Audit</a>"
        f"<span class='muted' id='now' data-live>{escape(target)} · now {escape(when(now_ms))}</span>"
        f"<span class='muted'>{you}</span>"
        f"<a href='' id='reload'>refresh</a><span class='muted' id='live'></span></nav>"
        + (f"<p class='mode' id='mode'>{escape(mode)}</p>" if mode else "")
        + banner
        + f"<h1>{escape(title)}</h1>{note}{body}</body></html>"
    )


def _head(refresh_s: int | None, script: bool) -> str:
    """The stylesheet, the live script when the page is live, the no-script reload when asked for."""
    meta = f'<noscript><meta http-equiv="refresh" content="{refresh_s}"></noscript>' if refresh_s else ""
    live = f"<script src='{LIVE_SCRIPT}' defer></script>" if script else ""
    return f"<link rel='stylesheet' href='{STYLESHEET}'>{live}{meta}"


def bare(title: str, body: str, refresh_s: int | None = None) -> str:
    """A page that needs nothing from the target (it may be down): the navigation, the title, the body."""
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>{meta}<link rel='stylesheet' href='{STYLESHEET}'>"
        f"<title>{escape(title)} · jobfence</title></head><body><nav><a href='/'>Jobs</a><a href='/batches'>Batches</a>"
        "<a href='/audit'>Audit</a></nav>"
        f"<h1>{escape(title)}</h1>{body}</body></html>"
    )


def rows(
    header: Iterable[str],
    body: Iterable[Iterable[str]],
    table_id: str = "",
    empty: str = "none",
    live_ids: Iterable[str] | None = None,
) -> str:
    """A table whose cells are already HTML (escape values before); without rows, one that says `empty`.

    `live_ids`: an id per row, each row a live part of the page (refreshed on its own, see `page`)."""
    columns = list(header)
    head = "".join(f"<th>{escape(h)}</th>" for h in columns)
    ids = [f" id='{escape(i)}' data-live" for i in live_ids] if live_ids is not None else None
    lines = "".join(
        f"<tr{ids[n] if ids else ''}>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
        for n, row in enumerate(body)
    )
    if not lines:
        lines = f"<tr class='empty'><td colspan='{len(columns)}' class='muted'>{escape(empty)}</td></tr>"
    ident = f" id='{escape(table_id)}'" if table_id else ""
    return f"<div class='scroll'><table{ident}><tr>{head}</tr>{lines}</table></div>"  # a narrow screen scrolls it


def queues_table(queues: Iterable[Any]) -> str:
    """Queues holding messages (a dead-letter queue with any is highlighted); the empty ones folded below."""
    held = [q for q in queues if q.visible or q.in_flight]
    empty = sorted(q.queue for q in queues if not (q.visible or q.in_flight))
    table = rows(
        ["queue", "visible", "in flight"],
        [
            [
                f"<span class='{'bad' if q.queue.endswith('-dlq') else ''}'>{escape(q.queue)}</span>",
                str(q.visible),
                str(q.in_flight),
            ]
            for q in held
        ],
        "queues",
        empty="every queue is empty",
    )
    folded = (
        f"<details id='empty-queues'><summary>{len(empty)} empty queue(s)</summary>"
        f"<p class='muted'>{escape(', '.join(empty))}</p></details>"
        if empty
        else ""
    )
    return table + folded


def outcome(text: str | None) -> str:
    if not text:
        return "-"
    css = "bad" if text in BAD_OUTCOMES else "ok" if text == "ran" else "muted" if text in QUIET_LABELS else ""
    return f"<span class='{css}'>{escape(text)}</span>"


def action(path: str, label: str, fields: Mapping[str, str], csrf: str, read_only: bool, catch_up: bool = False) -> str:
    """A button behind a confirmation and the CSRF token; nothing when read-only.

    `catch_up`: a box to run each re-enabled job once for its last missed or disabled tick too."""
    if read_only:
        return ""
    hidden = "".join(f"<input type='hidden' name='{escape(k)}' value='{escape(v)}'>" for k, v in fields.items())
    box = "<label><input type='checkbox' name='catch_up' value='yes'> catch up</label>" if catch_up else ""
    return (
        f"<form class='act' method='post' action='{escape(path)}'>{hidden}"
        f"<input type='hidden' name='csrf' value='{escape(csrf)}'>"
        f"{box}<label><input type='checkbox' name='confirm' value='yes' required> sure</label>"
        f"<button type='submit'>{escape(label)}</button></form>"
    )


def jobs_page(report: Any, ledgers: Mapping[str, Mapping[str, int]], csrf: str, read_only: bool) -> str:
    now = report.now_ms
    body = []
    for job in report.jobs:
        last = job.last_run
        switch = "disable" if job.rule_state == "ENABLED" else "enable"
        buttons = action("/actions/run", "Run now", {"job": job.job}, csrf, read_only) + (
            action(f"/actions/{switch}", switch.capitalize(), {"job": job.job}, csrf, read_only, switch == "enable")
            if job.rule_state
            else ""
        )
        lease = (
            f"{escape(job.holder)}<br><span class='muted'>until {escape(when(job.expires_at, now))}</span>"
            if job.holder
            else "free"
        )
        body.append(
            [
                f"<a href='/jobs/{quote(job.job)}'>{escape(job.job)}</a>",
                escape(job.schedule or "-"),
                f"<span class='rule{' bad' if job.rule_state and job.rule_state != 'ENABLED' else ''}'>"
                f"{escape(job.rule_state or '-')}</span>",
                escape(when(job.next_tick_at, now)) if job.next_tick_at else "-",
                lease,
                (
                    run_link(last, outcome(last.outcome))
                    + f"<br><span class='muted'>{escape(when(last.started_at, now))}</span>"
                )
                if last
                else "-",
                escape(pairs(ledgers.get(job.job, {}))) or "-",
                missed(job),
                charts.sparkline(job.ticks_last_day),
                buttons,
            ]
        )
    table = rows(
        ["job", "schedule", "rule", "next tick", "lease", "last run", "last 24 h", "missed 24 h", "ticks", ""],
        body,
        "jobs",
        live_ids=[f"job-{j.job}" for j in report.jobs],
    )
    queues = queues_table(report.queues)
    stale = f"<p>stale live items: {escape(pairs(report.stale_items))}</p>" if report.stale_items is not None else ""
    workers = rows(
        ["queue worker", "mapping"],
        [
            [escape(w.function), f"<span class='{'bad' if w.paused else 'ok'}'>{escape(w.state)}</span>"]
            for w in report.workers
        ],
        "workers",
    )
    # the incident switch: every rule and every queue worker in one action (`jobfence disable --all`), and back
    switches = (
        "<div class='switches' id='switches' data-live>"
        + (
            action("/actions/resume-all", "Resume everything", {}, csrf, read_only, catch_up=True)
            if report.stopped
            else action("/actions/stop-all", "Stop everything", {}, csrf, read_only)
        )
        + "</div>"
    )
    rest = f"<div id='jobs-more' data-live>{stale}<h2>Queue workers</h2>{workers}<h2>Queues</h2>{queues}</div>"
    return switches + table + rest


def run_link(run: Any, text: str) -> str:
    """`text` linked to the run's page (who asked for it, its audit entries): plain without a run id."""
    if not run.run_id:
        return text
    return f"<a class='run-link' href='/jobs/{quote(run.job)}/runs/{quote(run.run_id)}'>{text}</a>"


def missed(job: Any) -> str:
    """The job's missed ticks of the last day (from its ledger), linked to the ledger; highlighted when any."""
    if job.missed_last_day is None:
        return "-"
    css = "bad" if job.missed_last_day else "muted"
    return f"<a class='missed {css}' href='/jobs/{quote(job.job)}/ledger'>{job.missed_last_day}</a>"


def job_page(job: str, runs: list[Any], now_ms: int, csrf: str, read_only: bool, search: str = "") -> str:
    """The job's runs, newest first; `search`: the form that filtered them (`run_views.filter_form`), above them."""
    body = [
        [
            f"<a href='/jobs/{quote(job)}/runs/{quote(r.run_id or '-')}'>{escape(when(r.started_at, now_ms))}</a>",
            escape(r.trigger or "-"),
            outcome(r.outcome),
            who_ran(r),
            escape(str(r.duration_ms if r.duration_ms is not None else "-")),
            escape(str(r.fence if r.fence is not None else "-")),
            escape(pairs(r.summary)),
            escape(r.error or ""),
            escape(f"${r.cost.dollars:.7f}" if r.cost else "-"),
        ]
        for r in runs
    ]
    ledger = f"<p><a id='ledger-link' href='/jobs/{quote(job)}/ledger'>every expected tick (the ledger)</a></p>"
    return (
        ledger
        + action("/actions/run", "Run now", {"job": job}, csrf, read_only)
        + search
        + "<div id='runs-live' data-live>"
        + rows(
            ["started", "trigger", "outcome", "who", "duration ms", "fence", "summary", "error", "cost"],
            body,
            "runs",
            empty="no run yet",
        )
        + "</div>"
    )


def who_ran(run: Any) -> str:
    """Who asked for a manual run (as they gave their name) and as whom AWS knew them; `-` for a schedule's."""
    if not run.requested_by and not run.caller:
        return "-"
    caller = f"<br><span class='muted caller'>{escape(run.caller)}</span>" if run.caller else ""
    return f"<span class='who'>{escape(run.requested_by or '?')}</span>{caller}"


def ledger_page(ledger: Any, span: str, now_ms: int) -> str:
    """Every expected tick of the job in the span, oldest first: its label and the run that answered it."""

    def run_link(run_id: str | None) -> str:
        if not run_id:
            return "-"
        return f"<a href='/jobs/{quote(ledger.job)}/runs/{quote(run_id)}'>{escape(run_id[:12])}</a>"

    spans = " ".join(
        f"<a href='/jobs/{quote(ledger.job)}/ledger?since={name}'>{'<b>' + name + '</b>' if name == span else name}</a>"
        for name in LEDGER_SPANS
    )
    counts = pairs({label.value: n for label, n in sorted(ledger.counts().items(), key=lambda kv: kv[0].value)})
    body = [
        [
            f"<span class='tick'>{escape(when(e.tick_at))}</span>",
            f"<span class='label'>{outcome(e.label.value)}</span>",
            run_link(e.run_id),
            str(e.duplicates) if e.duplicates else "",
            run_link(e.made_up_by),
        ]
        for e in ledger.entries
    ]
    return (
        f"<p>{escape(ledger.schedule)} (UTC) · last {spans} · "
        f"<span id='counts'>{len(ledger.entries)} expected tick(s): {escape(counts or 'none')}</span></p>"
        + rows(["tick", "what became of it", "run", "duplicates", "made up by"], body, "ledger", "no tick expected")
    )


def run_page(run: Any, logs: str) -> str:
    """The run's row, then its log lines (`run_views.logs_section`: HTML)."""
    fields = [
        ("job", run.job),
        ("run id", run.run_id),
        ("outcome", run.outcome),
        ("trigger", run.trigger),
        ("requested by", run.requested_by),
        ("caller", run.caller),
        ("started", when(run.started_at)),
        ("finished", when(run.finished_at)),
        ("duration ms", run.duration_ms),
        ("holder", run.holder),
        ("fence", run.fence),
        ("summary", pairs(run.summary)),
        ("error", run.error),
        ("cost", cost_text(run.cost)),
    ]
    table = rows(["field", "value"], [[escape(k), escape(str(v if v is not None else "-"))] for k, v in fields], "run")
    return f"<div id='run-live' data-live>{table}</div><div id='logs-live' data-live>{logs}</div>"


def batches_page(batches: list[Any], tenant: str | None) -> str:
    body = [
        [
            f"<a href='/batches/{quote(b.tenant)}/{quote(b.batch_id)}'>{escape(str(b.ref))}</a>",
            escape(b.kind),
            f"<span class='status'>{escape(b.status.value)}</span>",
            charts.progress(b.completed, b.failed, b.total),
            f"{b.completed} / {b.failed} / {b.total}",
            escape(when(b.created_at)),
            escape(b.created_by),
        ]
        for b in batches
    ]
    filt = (
        f"<form method='get'><input name='tenant' value='{escape(tenant or '')}' placeholder='tenant'>"
        "<button>filter</button></form>"
    )
    return filt + rows(
        ["batch", "kind", "status", "progress", "completed / failed / total", "created", "by"], body, "batches"
    )


def batch_page(report: Any, csrf: str, read_only: bool) -> str:
    b = report.batch
    counts = report.counts()
    head = rows(
        ["kind", "status", "total", "completed", "failed", "updated", "finalized", "retries", "retried by"],
        [
            [
                escape(b.kind),
                f"<span id='status'>{escape(b.status.value)}</span>",
                str(b.total),
                str(b.completed),
                str(b.failed),
                escape(when(b.updated_at)),
                escape(when(b.finalized_at)),
                str(b.retries),
                escape(b.retried_by or "-"),
            ]
        ],
        "batch",
    )
    retry = (
        action("/actions/retry", "Retry failed items", {"batch": str(b.ref)}, csrf, read_only)
        if counts.get("failed")
        else ""
    )
    cancel = (
        action("/actions/cancel", "Cancel batch", {"batch": str(b.ref)}, csrf, read_only)
        if b.status.value == "open"
        else ""
    )
    if b.cancel_requested_by:
        cancel = (
            f"<p id='cancelled-by'>cancel asked by {escape(b.cancel_requested_by)} at "
            f"{escape(when(b.cancel_requested_at))}</p>" + cancel
        )
    sections = []
    for status in ("failed", "running", "pending", "cancelled", "completed"):  # rows first: what went wrong on top
        items = [i for i in report.items if i.status.value == status]
        if not items:
            continue
        sections.append(
            f"<h2>{escape(status)} ({len(items)})</h2>"
            + rows(
                ["item", "attempts", "error", "updated"],
                [
                    [escape(i.item_id), str(i.attempts), escape(i.error or ""), escape(when(i.updated_at))]
                    for i in items
                ],
                f"items-{status}",
            )
        )
    shown = {k: v for k, v in counts.items() if v or k != "cancelled"}  # cancelled only where a cancel ended some
    summary = f"<p id='counts'>{escape(', '.join(f'{k}={v}' for k, v in shown.items()))}</p>"
    summary += f"<p id='cost'>cost (its items, as last recounted): {escape(cost_text(b.cost))}</p>"
    end = b.finalized_at or max([b.updated_at, *(i.updated_at for i in report.items)])
    chart = charts.throughput([(i.updated_at, i.status.value) for i in report.items], b.created_at, end)
    return (
        f"<div id='batch-live' data-live>{head}{charts.progress(b.completed, b.failed, b.total)}{summary}{chart}</div>"
        f"<div id='retry-live' data-live>{retry}{cancel}</div><div id='items-live' data-live>{''.join(sections)}</div>"
    )


def why_section(findings: Iterable[Any]) -> str:
    """Why an open batch is not done (`jobfence_ops.commands.stall`): one line per finding, blocking first."""
    lines = "".join(
        f"<li class='{escape(f.severity.value)}' data-code='{escape(f.code)}'>"
        f"<span class='{'bad' if f.severity.value == 'blocked' else 'muted'}'>{escape(f.severity.value)}</span> "
        f"{escape(f.says)}</li>"
        for f in findings
    )
    return f"<h2>Why is it not done?</h2><ul id='why' data-live>{lines}</ul>"
