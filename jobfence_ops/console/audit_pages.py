"""The console's audit views: the /audit page (newest first, filtered) and the entries shown on a run, job or
batch page. Every value is escaped; the filter is a GET form (no action, nothing written)."""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from urllib.parse import quote

from jobfence_ops.audit import AuditEntry
from jobfence_ops.console.pages import rows
from jobfence_ops.render import when

ACTIONS = (
    "run now",
    "disable",
    "enable",
    "catch up",
    "stop everything",
    "resume everything",
    "pause workers",
    "resume workers",
    "retry failed",
    "cancel",
    "submit",
    "grant quota",
)


def subject_link(subject: str) -> str:
    """A subject linked to its page: a job's runs, a batch's rows; `everything` and `workers` as text."""
    kind, _, name = subject.partition(":")
    if kind == "job" and name:
        return f"<a href='/jobs/{quote(name)}'>{escape(subject)}</a>"
    if kind == "batch" and "/" in name:
        tenant, _, batch = name.partition("/")
        return f"<a href='/batches/{quote(tenant)}/{quote(batch)}'>{escape(subject)}</a>"
    return escape(subject)


def _who(entry: AuditEntry) -> str:
    caller = f"<br><span class='muted caller'>via {escape(entry.caller)}</span>" if entry.caller != entry.actor else ""
    label = f"<br><span class='muted label'>as {escape(entry.label)!r}</span>" if entry.label else ""
    return f"<span class='actor'>{escape(entry.actor)}</span>{caller}{label}"


def _result(entry: AuditEntry) -> str:
    run = ""
    if entry.run_id and entry.subject.startswith("job:"):
        job = entry.subject.removeprefix("job:")
        run = (
            f" <a class='run' href='/jobs/{quote(job)}/runs/{quote(entry.run_id)}'>run {escape(entry.run_id[:12])}</a>"
        )
    css = "bad" if entry.result.startswith("error") else "muted" if entry.result.startswith("not run") else ""
    return f"<span class='result {css}'>{escape(entry.result)}</span>{run}"


def table(entries: Iterable[AuditEntry], table_id: str = "audit", empty: str = "no action recorded") -> str:
    """The entries as a table, in the order given (newest first)."""
    return rows(
        ["when", "who", "action", "on", "result", "from"],
        [
            [
                escape(when(e.at)),
                _who(e),
                f"<span class='action'>{escape(e.action)}</span>",
                subject_link(e.subject),
                _result(e),
                escape(e.source),
            ]
            for e in entries
        ],
        table_id,
        empty=empty,
    )


def audit_page(entries: list[AuditEntry], actor: str, action: str, subject: str, limit: int) -> str:
    """Every recorded action, newest first; a GET form filters by actor (a part of it), action and subject."""
    options = "".join(
        f"<option value='{escape(a)}'{' selected' if a == action else ''}>{escape(a)}</option>" for a in ACTIONS
    )
    form = (
        "<form method='get' id='audit-filter' class='act'>"
        f"<input name='actor' value='{escape(actor)}' placeholder='who (a part of it)' aria-label='actor'>"
        f"<select name='action' aria-label='action'><option value=''>any action</option>{options}</select>"
        f"<input name='subject' value='{escape(subject)}' placeholder='job:NAME or batch:T/B' aria-label='subject'>"
        "<button>filter</button></form>"
    )
    note = f"<p class='muted'>the newest {limit} matching entries</p>" if len(entries) >= limit else ""
    return form + table(entries) + note


def section(title: str, entries: list[AuditEntry] | None, why_none: str | None = None) -> str:
    """A page's audit section (a run's, a job's, a batch's); `why_none`: the entries could not be read."""
    if entries is None:
        return f"<h2>{escape(title)}</h2><p class='bad' id='audit-unread'>{escape(why_none or 'not read')}</p>"
    return f"<h2>{escape(title)}</h2>" + table(entries, "audit", empty="no action recorded")
