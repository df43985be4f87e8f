"""The requests a scheduled function accepts besides a tick: manual, catch-up and buffered triggers
(`jobfence.triggers` says what each means), and the names they record.

A tick, nearly every event a scheduled function gets, needs none of this: `jobfence.triggers` imports it on the
first request, so a function's init defines none of these models (docs/benchmarks.md, "Cold start"). The CLI and
the console validate a requester's name with the same limits.
"""

from __future__ import annotations

import functools
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter

REQUESTED_BY_MAX = 128
# (negated) C0 and C1 controls, the Unicode line breaks, and the bidirectional controls (marks, embeddings,
# overrides, isolates: they make a log line or a table cell read other than it is written)
_PRINTABLE = r"^\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
REQUESTED_BY_PATTERN = rf"^[{_PRINTABLE}]*[^\s{_PRINTABLE[1:]}][{_PRINTABLE}]*$"  # printable, not only spaces
CALLER_MAX = 256
TICK_MAX = 2**53  # epoch ms: far beyond any tick, and an int every JSON reader keeps exact


class ManualTrigger(BaseModel):
    """An operator's request to run the job now, through the same gate and lease as a tick."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use: a tick needs none

    trigger: Literal["manual"]
    # any printable name ("Jane Doe", "jane@example.com"), kept as written; no control character
    # (log lines stay one line)
    requested_by: str = Field(min_length=1, max_length=REQUESTED_BY_MAX, pattern=REQUESTED_BY_PATTERN)
    # the caller's identity as the operator's tool resolved it (the IAM principal's ARN from STS)
    caller: str | None = Field(default=None, min_length=1, max_length=CALLER_MAX, pattern=r"^[A-Za-z0-9:/@._+=,-]+$")


class CatchUpTrigger(BaseModel):
    """A request to run once for one missed or disabled tick, unless a run started since it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use: a tick needs none

    trigger: Literal["catch_up"]
    tick: StrictInt = Field(gt=0, lt=TICK_MAX)  # epoch ms of the expected tick being caught up
    requested_by: str = Field(min_length=1, max_length=REQUESTED_BY_MAX, pattern=REQUESTED_BY_PATTERN)
    caller: str | None = Field(default=None, min_length=1, max_length=CALLER_MAX, pattern=r"^[A-Za-z0-9:/@._+=,-]+$")


class BufferedTrigger(BaseModel):
    """A `buffer_one` holder's hand-over: run the tick whose pending request is on the lease item."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # built on first use: a tick needs none

    trigger: Literal["buffered"]
    tick: StrictInt = Field(gt=0, lt=TICK_MAX)  # epoch ms of the tick that found the holder live


@functools.cache
def request_validator() -> TypeAdapter[ManualTrigger | CatchUpTrigger | BufferedTrigger]:
    """The validator of the requests (manual, catch-up, buffered), built on the first one."""
    return TypeAdapter(Annotated[ManualTrigger | CatchUpTrigger | BufferedTrigger, Field(discriminator="trigger")])
