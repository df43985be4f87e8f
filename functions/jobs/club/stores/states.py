"""A club row's state attribute as its enum, or a clear error naming the row (never its data).

Every club store builds its row views through `state_of`, so a row whose state
is outside its enum (bad data: no code writes one) is one error type, left as
it is in the table.
"""

from __future__ import annotations

import enum
from typing import TypeVar

from jobfence.errors import StoreError

E = TypeVar("E", bound=enum.Enum)


class UnknownRowState(StoreError):
    """A club row whose state attribute is not a member of its enum (the row is left as it is)."""


def state_of(states: type[E], value: object, row: str) -> E:
    """`states(value)`, or `UnknownRowState` naming `row` (a table and a key, never the value)."""
    try:
        return states(value)
    except ValueError:
        raise UnknownRowState(f"{row} is in an unknown state") from None
