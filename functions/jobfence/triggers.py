"""The two event shapes a scheduled function accepts, and nothing else.

- an EventBridge Scheduled Event (parsed with the Powertools parser), or
- a manual trigger `{"trigger": "manual", "requested_by": "<who>", "caller": "<IAM principal ARN>"}` from an
  operator (`caller` optional; `requested_by` any printable name, kept exactly as written).

Neither can choose the job: that comes from the function's own `JOB_NAME`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from jobfence.clock import Clock
from jobfence.errors import InvalidEvent

SCHEDULED_DETAIL_TYPE = "Scheduled Event"
SCHEDULED_SOURCE = "aws.events"
REQUESTED_BY_MAX = 128
_PRINTABLE = r"^\x00-\x1f\x7f-\x9f\u2028\u2029"  # (negated) C0 and C1 controls and the Unicode line breaks
REQUESTED_BY_PATTERN = rf"^[{_PRINTABLE}]*[^\s{_PRINTABLE[1:]}][{_PRINTABLE}]*$"  # printable, not only spaces
CALLER_MAX = 256


class ManualTrigger(BaseModel):
    """An operator's request to run the job now, through the same gate and lease as a tick."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["manual"]
    # any printable name ("Jane Doe", "jane@example.com"), kept as written; no control character (log lines stay one line)
    requested_by: str = Field(min_length=1, max_length=REQUESTED_BY_MAX, pattern=REQUESTED_BY_PATTERN)
    # the caller's identity as the operator's tool resolved it (the IAM principal's ARN from STS)
    caller: str | None = Field(default=None, min_length=1, max_length=CALLER_MAX, pattern=r"^[A-Za-z0-9:/@._+=,-]+$")


@dataclass(frozen=True)
class Trigger:
    """Why this run was asked for."""

    kind: Literal["scheduled", "manual"]
    scheduled_at: int  # epoch ms: the tick's nominal time, or the request time
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


def parse_trigger(event: Any, clock: Clock) -> Trigger:
    """Turn a raw event into a `Trigger`, or raise `InvalidEvent` saying what is wrong."""
    if not isinstance(event, dict):
        raise InvalidEvent(f"event must be a JSON object, got {type(event).__name__}")
    if "trigger" in event:
        try:
            manual = ManualTrigger.model_validate(event)
        except ValidationError as exc:
            raise InvalidEvent(f"invalid manual trigger: {_describe(exc)}") from None
        return Trigger(kind="manual", scheduled_at=clock.now_ms(), requested_by=manual.requested_by, caller=manual.caller)
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
