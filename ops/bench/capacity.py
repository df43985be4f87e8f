"""DynamoDB item size, the base of capacity units computed from DynamoDB's on-demand rules.

moto's own ConsumedCapacity figures are not faithful, so the benchmarks size
items themselves: attribute name lengths plus value sizes (numbers take about
half their digits plus one byte).
"""

from __future__ import annotations

import math
from typing import Any


def item_size(item: dict[str, Any] | None) -> int:
    """Size in bytes of a low-level DynamoDB item."""
    size = 0
    for name, value in (item or {}).items():
        ((kind, raw),) = value.items()
        size += len(name.encode())
        if kind == "N":
            size += math.ceil(len(raw.lstrip("-").replace(".", "")) / 2) + 1
        elif kind == "S":
            size += len(raw.encode())
        else:
            size += len(str(raw).encode())
    return size


def cost_table(rows: list[tuple[str, tuple[int, int, float, float]]]) -> list[str]:
    """A Markdown table of (operation, (requests, write requests, RCU, WCU)) rows."""
    lines = ["| operation | requests | write requests | RCU | WCU |", "|---|---:|---:|---:|---:|"]
    lines += [
        f"| {name} | {requests:g} | {writes:g} | {rcu:g} | {wcu:g} |" for name, (requests, writes, rcu, wcu) in rows
    ]
    return lines
