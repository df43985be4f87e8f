"""A club row's state attribute as its enum, or a clear error naming the row (never its data).

Every club store builds its row views through `state_of`, so a row whose state
is outside its enum (bad data: no code writes one) is one error type, left as
it is in the table. A read of one row raises it; a read of many returns one
`RowRead` per row, whose view is built when the job asks for it, so such a row
is that row's error alone and the others of its page are still read
(`jobs.club.sweep.InvalidRows` counts and logs it, and the job goes on).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from jobfence.errors import StoreError

E = TypeVar("E", bound=enum.Enum)
V = TypeVar("V")

MAX_SHOWN = 64  # a key in a message or log line is cut to this many characters
_ENUM_SHAPED = re.compile(r"[a-z0-9_]{1,24}")  # the shape of every state value the code writes
_UNSAFE = re.compile(r"[^A-Za-z0-9._:#/@+-]")


def shown(text: str) -> str:
    """A key as a log line may show it: only plain characters (others `?`), at most `MAX_SHOWN`."""
    safe = _UNSAFE.sub("?", text)
    return safe if len(safe) <= MAX_SHOWN else safe[: MAX_SHOWN - 3] + "..."


def shown_value(value: object) -> str:
    """A bad state value as a log line may show it: itself only if shaped like a state, else its kind and length."""
    if isinstance(value, str):
        return value if _ENUM_SHAPED.fullmatch(value) else f"<text of {len(value)} characters>"
    return f"<{type(value).__name__}>"


@dataclass(frozen=True)
class RowRef:
    """Which club row: its table (the catalog's name) and its key."""

    table: str
    key: str


class UnknownRowState(StoreError):
    """A club row whose state attribute is not a member of its enum (the row is left as it is)."""

    def __init__(self, row: RowRef, attribute: str, value: object) -> None:
        self.table = row.table
        self.key = shown(row.key)
        self.attribute = attribute
        self.value = shown_value(value)  # never the value itself unless it is shaped like a state
        super().__init__(f"{self.table} {self.key} is in an unknown state ({attribute} = {self.value})")


def state_of(states: type[E], value: object, row: RowRef, attribute: str) -> E:
    """`states(value)`, or `UnknownRowState` naming `row`'s table and key and the attribute."""
    try:
        return states(value)
    except ValueError:
        raise UnknownRowState(row, attribute, value) from None


@dataclass(frozen=True)
class RowRead(Generic[V]):
    """One row of a page as read: `view()` builds its view, or raises `UnknownRowState` for this row alone."""

    _row: Any  # the store's private model instance
    _build: Callable[[Any], V]

    def view(self) -> V:
        return self._build(self._row)


def reads(rows: list[Any], build: Callable[[Any], V]) -> list[RowRead[V]]:
    """One `RowRead` per row of a page (nothing is built yet)."""
    return [RowRead(row, build) for row in rows]
