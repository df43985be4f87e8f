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

A Scheduled Event is a tick only when it is the function's own rule's (docs/security.md, "Authenticated
ticks"): its `account` is the account of the function's rule, its `resources` are exactly that rule's ARN
(`RULE_ARN`, which jobfence-cdk sets; without it every Scheduled Event is refused), and its `time` is at
most `SKEW_BUDGET_MS` ahead of the function's clock and at most `DELIVERY_TOLERANCE_MS` behind it. A
later delivery would answer no tick of the ledger (`jobfence.ledger`), and the auditor's catch-up, sent
once that tolerance has passed, stands in for the tick instead: accepting it too could run the tick twice.

Every refusal's message is bounded (`ERROR_MAX` characters; each echoed value much less): an event of
any size gives an error of a few hundred characters.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ValidationError

from jobfence.clock import SKEW_BUDGET_MS, Clock
from jobfence.config import RULE_ARN_PATTERN
from jobfence.errors import InvalidEvent, bounded

SCHEDULED_DETAIL_TYPE = "Scheduled Event"
SCHEDULED_SOURCE = "aws.events"
TICK_SKEW_MS = SKEW_BUDGET_MS  # a tick may be this far ahead of our clock (another clock wrote it), never further
# a tick's run may start this late (EventBridge's ~1 min, plus Lambda's queue): the ledger's window of a tick's
# answer, and the latest a Scheduled Event is accepted after its `time`
DELIVERY_TOLERANCE_MS = 2 * 60_000
ERROR_MAX = 512  # an InvalidEvent's message, at most
ECHO_MAX = 64  # one echoed value (a field name, a source, a time), at most


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
    """The first errors of a validation, each field name bounded (an unknown field's name is input)."""
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(bounded(p, ECHO_MAX) for p in err["loc"]) or "event"
        parts.append(f"{where}: {bounded(err['msg'], ECHO_MAX * 2)}")
    return "; ".join(parts)


def _invalid(message: str) -> InvalidEvent:
    return InvalidEvent(bounded(message, ERROR_MAX))


def _request(event: dict[str, Any], clock: Clock) -> Trigger:
    """A manual, catch-up or buffered trigger (the `trigger` field says which), strictly."""
    from jobfence.trigger_requests import CatchUpTrigger, ManualTrigger, request_validator

    kind = event.get("trigger") if isinstance(event.get("trigger"), str) else None
    try:
        request = request_validator().validate_python(event)
    except ValidationError as exc:
        named = kind.replace("_", "-") if kind in ("manual", "catch_up", "buffered") else "request"
        raise _invalid(f"invalid {named} trigger: {_describe(exc)}") from None
    now = clock.now_ms()
    if isinstance(request, ManualTrigger):
        return Trigger(kind="manual", scheduled_at=now, requested_by=request.requested_by, caller=request.caller)
    if request.tick > now + TICK_SKEW_MS:
        named = request.trigger.replace("_", "-")
        raise _invalid(f"invalid {named} trigger: tick {bounded(request.tick, ECHO_MAX)} is in the future")
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


def scheduled_event(rule_arn: str, at_ms: int, event_id: str | None = None) -> dict[str, Any]:
    """The Scheduled Event EventBridge sends the target of rule `rule_arn` for its tick at `at_ms` (whole seconds).

    Its `account` and `region` are the rule's own (from the ARN), as on a real account.
    """
    parts = rule_arn.split(":")
    if len(parts) < 6 or not re.match(RULE_ARN_PATTERN, rule_arn):
        raise ValueError(f"not a rule ARN: {bounded(rule_arn, ECHO_MAX * 2)!r}")
    when = dt.datetime.fromtimestamp(at_ms // 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "version": "0",
        "id": event_id or str(uuid.uuid4()),
        "detail-type": SCHEDULED_DETAIL_TYPE,
        "source": SCHEDULED_SOURCE,
        "account": parts[4],
        "time": when,
        "region": parts[3],
        "resources": [rule_arn],
        "detail": {},
    }


def _scheduled(event: dict[str, Any], clock: Clock, rule_arn: str | None) -> Trigger:
    """A Scheduled Event of the function's own rule and account, within the delivery tolerance of now."""
    try:
        scheduled = parse(event=event, model=EventBridgeModel)
    except ValidationError as exc:
        raise _invalid(f"invalid EventBridge event: {_describe(exc)}") from None
    except Exception as exc:  # the parser wraps some failures in its own error type
        raise _invalid(f"invalid EventBridge event: {type(exc).__name__}") from None
    if scheduled.detail_type != SCHEDULED_DETAIL_TYPE or scheduled.source != SCHEDULED_SOURCE:
        raise _invalid(
            f"EventBridge event must be source={SCHEDULED_SOURCE!r} detail-type={SCHEDULED_DETAIL_TYPE!r}, "
            f"got source={bounded(scheduled.source, ECHO_MAX)!r} detail-type={bounded(scheduled.detail_type, ECHO_MAX)!r}"
        )
    if rule_arn is None:
        raise _invalid("Scheduled Event refused: this function has no RULE_ARN, so no tick can be its rule's")
    account = rule_arn.split(":")[4]
    if scheduled.account != account:
        raise _invalid(f"Scheduled Event refused: account {bounded(scheduled.account, ECHO_MAX)!r} is not {account!r}")
    if list(scheduled.resources) != [rule_arn]:
        named = ", ".join(repr(bounded(r, ECHO_MAX * 2)) for r in scheduled.resources[:2])
        more = f" (+{len(scheduled.resources) - 2})" if len(scheduled.resources) > 2 else ""
        raise _invalid(f"Scheduled Event refused: resources [{named}{more}] are not [{rule_arn!r}]")
    at = int(scheduled.time.timestamp() * 1000)
    now = clock.now_ms()
    if at > now + SKEW_BUDGET_MS or at < now - DELIVERY_TOLERANCE_MS:
        raise _invalid(
            f"Scheduled Event refused: time {scheduled.time.isoformat()[:ECHO_MAX]} is {(at - now) // 1000} s from now, "
            f"outside [-{DELIVERY_TOLERANCE_MS // 1000} s, +{SKEW_BUDGET_MS // 1000} s]"
        )
    return Trigger(kind="scheduled", scheduled_at=at, event_id=scheduled.id)


def parse_trigger(event: Any, clock: Clock, rule_arn: str | None = None) -> Trigger:
    """Turn a raw event into a `Trigger`, or raise `InvalidEvent` saying (bounded) what is wrong.

    `rule_arn` is the function's own rule (`ScheduledSettings.rule_arn`): a Scheduled Event is accepted
    only from it (its account, its ARN as the only resource) and only within the delivery tolerance of
    now; without it, none is.
    """
    if not isinstance(event, dict):
        raise _invalid(f"event must be a JSON object, got {type(event).__name__}")
    if "trigger" in event:
        return _request(event, clock)
    if "detail-type" in event or "source" in event:
        return _scheduled(event, clock, rule_arn)
    keys = sorted(bounded(k, ECHO_MAX) for k in event)[:10]
    raise _invalid(
        "event is neither an EventBridge Scheduled Event (source, detail-type, time, ...) "
        'nor a manual trigger {"trigger": "manual", "requested_by": ...}; '
        f"top-level keys were {keys}"
    )
