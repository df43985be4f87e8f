"""The two event shapes a scheduled function accepts, and nothing else.

- an EventBridge Scheduled Event (parsed with the Powertools parser), or
- a manual trigger `{"trigger": "manual", "requested_by": "<who>"}` from an operator.

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


class ManualTrigger(BaseModel):
    """An operator's request to run the job now, through the same gate and lease as a tick."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["manual"]
    requested_by: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9@._:/+=-]+$")


@dataclass(frozen=True)
class Trigger:
    """Why this run was asked for."""

    kind: Literal["scheduled", "manual"]
    scheduled_at: int  # epoch ms: the tick's nominal time, or the request time
    requested_by: str | None = None
    event_id: str | None = None


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
        return Trigger(kind="manual", scheduled_at=clock.now_ms(), requested_by=manual.requested_by)
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
