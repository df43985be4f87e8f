"""The event shapes a scheduled function accepts, and nothing else.

- an EventBridge Scheduled Event (parsed with the Powertools parser),
- a manual trigger `{"trigger": "manual", "requested_by": "<who>", "caller": "<IAM principal ARN>"}` from an
  operator (`caller` optional; `requested_by` any printable name, kept exactly as written),
- a catch-up `{"trigger": "catch_up", "tick": <epoch ms>, "requested_by": "<who>", "caller": ...}` for one
  missed or disabled tick (from the auditor, or `jobfence enable JOB --catch-up`): it runs only if no
  run has started since that tick (`jobfence.catchup`), or
- a buffered hand-over `{"trigger": "buffered", "tick": <epoch ms>}`, which a `buffer_one` holder sends
  its own function when it is short of time: it runs only while the lease item still holds the
  pending request of that tick.

None can choose the job: that comes from the function's own `JOB_NAME`. Each is parsed strictly
(unknown fields refused), so a malformed or forged event is an `InvalidEvent`, never a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field, StrictInt, TypeAdapter, ValidationError

from jobfence.clock import Clock
from jobfence.errors import InvalidEvent

SCHEDULED_DETAIL_TYPE = "Scheduled Event"
SCHEDULED_SOURCE = "aws.events"
REQUESTED_BY_MAX = 128
_PRINTABLE = r"^\x00-\x1f\x7f-\x9f\u2028\u2029"  # (negated) C0 and C1 controls and the Unicode line breaks
REQUESTED_BY_PATTERN = rf"^[{_PRINTABLE}]*[^\s{_PRINTABLE[1:]}][{_PRINTABLE}]*$"  # printable, not only spaces
CALLER_MAX = 256
TICK_SKEW_MS = 60_000  # a tick may be this far ahead of our clock (another clock wrote it), never further


class ManualTrigger(BaseModel):
    """An operator's request to run the job now, through the same gate and lease as a tick."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["manual"]
    # any printable name ("Jane Doe", "jane@example.com"), kept as written; no control character
    # (log lines stay one line)
    requested_by: str = Field(min_length=1, max_length=REQUESTED_BY_MAX, pattern=REQUESTED_BY_PATTERN)
    # the caller's identity as the operator's tool resolved it (the IAM principal's ARN from STS)
    caller: str | None = Field(default=None, min_length=1, max_length=CALLER_MAX, pattern=r"^[A-Za-z0-9:/@._+=,-]+$")


class CatchUpTrigger(BaseModel):
    """A request to run once for one missed or disabled tick, unless a run started since it."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["catch_up"]
    tick: StrictInt = Field(gt=0)  # epoch ms of the expected tick being caught up
    requested_by: str = Field(min_length=1, max_length=REQUESTED_BY_MAX, pattern=REQUESTED_BY_PATTERN)
    caller: str | None = Field(default=None, min_length=1, max_length=CALLER_MAX, pattern=r"^[A-Za-z0-9:/@._+=,-]+$")


class BufferedTrigger(BaseModel):
    """A `buffer_one` holder's hand-over: run the tick whose pending request is on the lease item."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["buffered"]
    tick: StrictInt = Field(gt=0)  # epoch ms of the tick that found the holder live


_REQUESTS = TypeAdapter(Annotated[ManualTrigger | CatchUpTrigger | BufferedTrigger, Field(discriminator="trigger")])
TriggerKind = Literal["scheduled", "manual", "catch_up", "buffered"]


@dataclass(frozen=True)
class Trigger:
    """Why this run was asked for."""

    kind: TriggerKind
    # epoch ms: the tick's nominal time (a tick, a catch-up, a buffered tick), or the request time (manual)
    scheduled_at: int
    requested_by: str | None = None
    event_id: str | None = None
    caller: str | None = None  # a manual run's caller identity (IAM principal ARN), as the operator's tool sent it

    def who(self) -> dict[str, str]:
        """A manual run's requester and caller, for its run row and log lines (empty for a tick)."""
        return who_fields(self.requested_by, self.caller)


def who_fields(requested_by: str | None, caller: str | None) -> dict[str, str]:
    """`requested_by` and `caller` where set: the attributes of a run row and the keys of a log line."""
    return {k: v for k, v in (("requested_by", requested_by), ("caller", caller)) if v}


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "event"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _request(event: dict[str, Any], clock: Clock) -> Trigger:
    """A manual, catch-up or buffered trigger (the `trigger` field says which), strictly."""
    kind = event.get("trigger") if isinstance(event.get("trigger"), str) else None
    try:
        request = _REQUESTS.validate_python(event)
    except ValidationError as exc:
        named = kind.replace("_", "-") if kind in ("manual", "catch_up", "buffered") else "request"
        raise InvalidEvent(f"invalid {named} trigger: {_describe(exc)}") from None
    now = clock.now_ms()
    if isinstance(request, ManualTrigger):
        return Trigger(kind="manual", scheduled_at=now, requested_by=request.requested_by, caller=request.caller)
    if request.tick > now + TICK_SKEW_MS:
        raise InvalidEvent(f"invalid {request.trigger.replace('_', '-')} trigger: tick {request.tick} is in the future")
    if isinstance(request, CatchUpTrigger):
        return Trigger(
            kind="catch_up", scheduled_at=request.tick, requested_by=request.requested_by, caller=request.caller
        )
    return Trigger(kind="buffered", scheduled_at=request.tick)


def catch_up_event(tick_ms: int, requested_by: str, caller: str | None = None) -> dict[str, Any]:
    """The catch-up trigger event for one tick (the auditor's and the CLI's)."""
    event: dict[str, Any] = {"trigger": "catch_up", "tick": tick_ms, "requested_by": requested_by}
    if caller:
        event["caller"] = caller
    return event


def buffered_event(tick_ms: int) -> dict[str, Any]:
    """The hand-over event a `buffer_one` holder sends its own function."""
    return {"trigger": "buffered", "tick": tick_ms}


def parse_trigger(event: Any, clock: Clock) -> Trigger:
    """Turn a raw event into a `Trigger`, or raise `InvalidEvent` saying what is wrong."""
    if not isinstance(event, dict):
        raise InvalidEvent(f"event must be a JSON object, got {type(event).__name__}")
    if "trigger" in event:
        return _request(event, clock)
    if "detail-type" in event or "source" in event:
        try:
            scheduled = parse(event=event, model=EventBridgeModel)
        except ValidationError as exc:
            raise InvalidEvent(f"invalid EventBridge event: {_describe(exc)}") from None
        except Exception as exc:  # the parser wraps some failures in its own error type
            raise InvalidEvent(f"invalid EventBridge event: {type(exc).__name__}") from None
        if scheduled.detail_type != SCHEDULED_DETAIL_TYPE or scheduled.source != SCHEDULED_SOURCE:
            raise InvalidEvent(
                f"EventBridge event must be source={SCHEDULED_SOURCE!r} detail-type={SCHEDULED_DETAIL_TYPE!r}, "
                f"got source={scheduled.source!r} detail-type={scheduled.detail_type!r}"
            )
        return Trigger(
            kind="scheduled",
            scheduled_at=int(scheduled.time.timestamp() * 1000),
            event_id=scheduled.id,
        )
    raise InvalidEvent(
        "event is neither an EventBridge Scheduled Event (source, detail-type, time, ...) "
        'nor a manual trigger {"trigger": "manual", "requested_by": ...}; '
        f"top-level keys were {sorted(str(k) for k in event)[:10]}"
    )
