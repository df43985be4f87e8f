"""Scripted AWS faults through botocore's own event hooks (deterministic, no sleeps).

    faults = ScriptedFaults(client)                       # a boto3 client, or a store's (`store.clients()`)
    faults.script("TransactWriteItems", 2, Fault.LOST_REPLY)   # the 2nd such call is applied, its reply lost
    faults.script("UpdateItem", 1, Fault.THROTTLE, times=3)    # the next 3 UpdateItems are throttled, not applied

LOST_REPLY lets the request reach the service and raises `ConnectionClosedError`
after it (what a dropped connection looks like: applied, unanswered).
THROTTLE answers before sending with `ProvisionedThroughputExceededException`
(never applied); a short-circuited answer skips botocore's own retries, so the
caller sees exactly the scripted faults.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ConnectionClosedError


class Fault(enum.Enum):
    LOST_REPLY = "lost_reply"  # applied by the service, the reply never arrives
    THROTTLE = "throttle"  # refused before it is applied


@dataclass
class _Rule:
    operation: str
    first: int  # 1-based index of the first call of `operation` it hits
    fault: Fault
    times: int


class _Http:
    status_code = 400
    headers: dict[str, str] = {}
    content = b""


@dataclass
class ScriptedFaults:
    """Injects the scripted faults into one botocore client; `seen` counts calls per operation."""

    client: Any
    rules: list[_Rule] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    fired: list[tuple[str, int, Fault]] = field(default_factory=list)

    def __post_init__(self) -> None:
        events = self.client.meta.events
        events.register_first("before-call.dynamodb.*", self._before)
        events.register_first("after-call.dynamodb.*", self._after)

    def script(self, operation: str, nth: int, fault: Fault, times: int = 1) -> "ScriptedFaults":
        self.rules.append(_Rule(operation, nth, fault, times))
        return self

    def detach(self) -> None:
        events = self.client.meta.events
        events.unregister("before-call.dynamodb.*", self._before)
        events.unregister("after-call.dynamodb.*", self._after)

    def _hit(self, name: str, index: int, fault: Fault) -> bool:
        for rule in self.rules:
            if rule.operation == name and rule.fault is fault and rule.first <= index < rule.first + rule.times:
                self.fired.append((name, index, fault))
                return True
        return False

    def _before(self, model: Any, **_: Any):
        self.seen[model.name] = self.seen.get(model.name, 0) + 1
        if self._hit(model.name, self.seen[model.name], Fault.THROTTLE):
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "scripted throttle"}
            return _Http(), {"Error": error, "ResponseMetadata": {"HTTPStatusCode": 400}}
        return None

    def _after(self, model: Any, **_: Any) -> None:
        if self._hit(model.name, self.seen.get(model.name, 0), Fault.LOST_REPLY):
            raise ConnectionClosedError(endpoint_url="scripted-lost-reply")
