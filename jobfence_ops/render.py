"""Rendering the operator's typed results: terminal tables that never cut a name, and JSON.

Every column folds (wraps inside its cell) instead of ending in an ellipsis,
and the first column (a job, batch or function name) never wraps: at 80
columns a table grows taller, never shorter of a name.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from jobfence.capacity import Cost


def plain(value: Any) -> Any:
    """A JSON-ready copy: dataclasses as objects, enums as their values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    return value


def print_json(console: Console, value: Any) -> None:
    """One JSON document on one line (for scripts: `jq`, line-by-line readers)."""
    console.file.write(json.dumps(plain(value), sort_keys=True, default=str) + "\n")
    console.file.flush()


def table(title: str | None, *columns: str, names: Iterable[str] = ()) -> Table:
    """A table whose first column fits its longest name; the others fold."""
    out = Table(title=title, title_justify="left")
    width = max((len(n) for n in names), default=0)
    for i, column in enumerate(columns):
        if i == 0:
            out.add_column(column, no_wrap=True, min_width=max(width, len(column)))
        else:
            out.add_column(column, overflow="fold")
    return out


def when(ms: int | None, now: int | None = None) -> str:
    """An epoch-ms instant as UTC, with its distance from `now` when given."""
    if ms is None:
        return "-"
    text = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    if now is not None:
        delta = (ms - now) // 1000
        text += f" ({'in ' if delta >= 0 else ''}{_span(abs(delta))}{'' if delta >= 0 else ' ago'})"
    return text


def ago(ms: int | None, now: int) -> str:
    """`in 5m` or `3h02m ago`: short enough for an 80-column table."""
    if ms is None:
        return "-"
    delta = (ms - now) // 1000
    return f"in {_span(delta)}" if delta > 0 else f"{_span(-delta)} ago"


def _span(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"


def pairs(values: Mapping[str, Any]) -> str:
    """`k=v, k=v` in key order (summaries, counts): whole, never cut."""
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def cost_text(cost: Cost | None) -> str:
    """What a run or batch cost, as one short line: dollars, then write and read units (indexes apart), requests."""
    if cost is None:
        return "-"
    u = cost.units
    index = f" (+{u.index_write:g} / {u.index_read:g} index)" if u.index_write or u.index_read else ""
    return f"${cost.dollars:.7f}: {u.write:g} WRU / {u.read:g} RRU{index}, {cost.requests} requests"
