"""What a producer is handed: one item's id and input (`jobfence.work.producer`). Only a producer makes them,
so nothing else loads this module (docs/benchmarks.md, "Cold start")."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ItemInput:
    """One item handed to the producer: its id and its (bounded, never logged) input."""

    item_id: str
    payload: Mapping[str, Any]
