"""The console's views of runs beyond their row: a run's log lines, and the job page's search form.

Rendered on the server like the rest of `pages`; every value escaped.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from urllib.parse import quote

from jobfence_ops.commands.run_logs import RunLogs
from jobfence_ops.commands.run_search import OUTCOMES, SEARCH_ROWS
from jobfence_ops.console.pages import outcome, rows
from jobfence_ops.render import pairs

FILTER_FIELDS = ("outcome", "since", "until", "who")  # the job page's query parameters (a GET form)


def logs_section(logs: RunLogs) -> str:
    """The run's log lines, where they came from, why there are fewer than all, and its Insights query."""
    lines = rows(
        ["at", "level", "message", "fields"],
        [
            [
                escape(line.at),
                outcome(line.level.lower()) if line.level else "",
                escape(line.message),
                escape(pairs(dict(line.fields))),
            ]
            for line in logs.lines
        ],
        "logs",
        empty="no log line",
    )
    note = f"<p class='muted' id='logs-note'>{escape(logs.note)}</p>" if logs.note else ""
    query = (
        f"<h3>Its Logs Insights query (the job's log group)</h3><pre id='query'>{escape(logs.query)}</pre>"
        if logs.query
        else ""
    )
    return (
        f"<h2>Its log lines</h2><p class='muted' id='logs-source'>{escape(logs.source)}</p>"
        f"{note}<div class='logs'>{lines}</div>{query}"
    )


def filter_form(job: str, values: Mapping[str, str], error: str | None, shown: int) -> str:
    """A GET form over the job's runs (outcome, since, until, who), as given back; a bad value's one-line error."""
    options = "".join(
        f"<option{' selected' if values.get('outcome') == o else ''}>{escape(o)}</option>" for o in ("", *OUTCOMES)
    )

    def field(name: str, hint: str) -> str:
        value = escape(values.get(name, ""))
        return (
            f"<label>{name} <input name='{name}' value='{value}' placeholder='{escape(hint)}' maxlength='128'></label>"
        )

    searched = any(values.get(k) for k in FILTER_FIELDS)
    summary = (
        f"<span class='muted' id='search-count'>{shown} match(es) among the latest {SEARCH_ROWS} runs · "
        f"<a href='/jobs/{quote(job)}'>clear</a></span>"
        if searched and not error
        else ""
    )
    problem = f"<p class='bad' id='search-error'>{escape(error)}</p>" if error else ""
    return (
        f"<form class='filter' id='search' method='get' action='/jobs/{quote(job)}'>"
        f"<label>outcome <select name='outcome'>{options}</select></label>"
        + field("since", "6h or 2026-01-01T03:00")
        + field("until", "UTC time or span")
        + field("who", "name or ARN part")
        + f"<button type='submit'>search</button>{summary}</form>{problem}"
    )
