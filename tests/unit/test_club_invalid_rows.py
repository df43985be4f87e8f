"""`InvalidRows` and the bounded forms of `UnknownRowState`: a poison club row is logged and counted once a run."""

from __future__ import annotations

import enum

import pytest

from jobs.club.stores.states import MAX_SHOWN, RowRead, RowRef, UnknownRowState, state_of
from jobs.club.sweep import InvalidRows


class _Colour(str, enum.Enum):
    RED = "red"


class _Logger:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict]] = []

    def warning(self, message: str, extra: dict) -> None:
        self.lines.append((message, extra))


def _read(value: object, key: str = "k-1") -> RowRead[_Colour]:
    return RowRead(value, lambda v: state_of(_Colour, v, RowRef("club_things", key), "colour"))


def test_a_row_met_again_in_a_later_batch_is_logged_and_counted_once():
    logger = _Logger()
    invalid = InvalidRows(logger, "job")  # type: ignore[arg-type]
    assert list(invalid.views([_read("red"), _read("blue"), _read("red")])) == [_Colour.RED, _Colour.RED]
    assert invalid.taken() == 1
    assert list(invalid.views([_read("blue"), _read("green", "k-2")])) == []  # the next batch reads k-1 again
    assert invalid.taken() == 1 and invalid.taken() == 0
    assert [extra["key"] for _, extra in logger.lines] == ["k-1", "k-2"]
    assert logger.lines[0][1] == {"job": "job", "table": "club_things", "key": "k-1", "attribute": "colour", "value": "blue"}


@pytest.mark.parametrize(
    ("value", "shown"),
    [("teleported", "teleported"), ("Jane Doe", "<text of 8 characters>"), ("x" * 25, "<text of 25 characters>"),
     (7, "<int>"), (None, "<NoneType>")],
)
def test_the_bad_value_is_shown_only_when_shaped_like_a_state(value, shown):
    with pytest.raises(UnknownRowState) as raised:
        _read(value).view()
    assert raised.value.value == shown and shown in str(raised.value)


def test_a_key_is_shown_bounded_and_plain():
    with pytest.raises(UnknownRowState) as raised:
        _read("blue", "a b\n" + "k" * 200).view()
    assert raised.value.key.startswith("a?b?k") and len(raised.value.key) == MAX_SHOWN
