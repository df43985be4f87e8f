"""Deterministic AWS faults on one botocore client, through its own event hooks.

    faults = Faults(client)
    faults.reply_lost("UpdateItem", when=releases)             # applied; the reply surfaces as ReadTimeoutError
    faults.resent("UpdateItem", when=acquires)                 # applied; botocore sends the same request again
    faults.refused_before("PutItem", throttled(), times=2)     # not applied: raised before the request is sent
    faults.without_old_image("UpdateItem")                     # a refusal without its old image (like dynalite)
    faults.paused("UpdateItem", then=other_actor_runs)         # before the request leaves, another actor runs

`when` picks calls by their API parameters; `times` bounds how often a fault fires.
Every fault is counted in `faults.fired`, so a test can assert it really happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from botocore.exceptions import ClientError, ReadTimeoutError

Match = Callable[[Mapping[str, Any]], bool]


def throttled(operation: str = "UpdateItem") -> ClientError:
    """The error botocore raises once its own retries of a throttled call are exhausted."""
    response = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"},
                "ResponseMetadata": {"HTTPStatusCode": 400}}
    return ClientError(response, operation)  # type: ignore[arg-type]


def read_timeout() -> ReadTimeoutError:
    return ReadTimeoutError(endpoint_url="https://dynamodb")


def any_call(_params: Mapping[str, Any]) -> bool:
    return True


def acquires(params: Mapping[str, Any]) -> bool:
    return "ADD fence" in str(params.get("UpdateExpression", ""))


def releases(params: Mapping[str, Any]) -> bool:
    return str(params.get("UpdateExpression", "")).startswith("REMOVE holder")


def renewals(params: Mapping[str, Any]) -> bool:
    return str(params.get("UpdateExpression", "")).startswith("SET renewed_at")


def run_finishes(params: Mapping[str, Any]) -> bool:
    return "run_key" in str(params.get("Key", "")) and ":final" in params.get("ExpressionAttributeValues", {})


@dataclass
class _Rule:
    kind: str  # before | after | resend | no_image | pause
    operation: str
    when: Match
    error: Callable[[], BaseException] | None
    times: int


class Faults:
    """Faults for the calls of the given clients (their own hooks: other clients are untouched)."""

    def __init__(self, client: Any, *more: Any) -> None:
        self._rules: list[_Rule] = []
        self.fired: list[tuple[str, str]] = []
        self.sent: list[tuple[str, Mapping[str, Any]]] = []  # (operation, API parameters) of every call
        for one in {id(c): c for c in (client, *more)}.values():
            events = one.meta.events
            events.register("before-parameter-build.dynamodb", self._tag)
            events.register("before-call.dynamodb", self._before)
            events.register("after-call.dynamodb", self._after)
            events.register("needs-retry.dynamodb", self._needs_retry)

    def refused_before(self, operation: str, error: BaseException | Callable[[], BaseException], when: Match = any_call, times: int = 1) -> None:
        """The call is not applied: `error` is raised before the request leaves."""
        self._add("before", operation, when, error, times)

    def reply_lost(self, operation: str, when: Match = any_call, times: int = 1, error: Callable[[], BaseException] = read_timeout) -> None:
        """The call is applied; its reply is lost and surfaces as `error` (botocore gave up)."""
        self._add("after", operation, when, error, times)

    def resent(self, operation: str, when: Match = any_call, times: int = 1) -> None:
        """The call is applied; its reply is lost and botocore sends the same request again."""
        self._add("resend", operation, when, None, times)

    def without_old_image(self, operation: str, when: Match = any_call, times: int = 10**9) -> None:
        """A refused condition comes back without the old image (as from dynalite)."""
        self._add("no_image", operation, when, None, times)

    def paused(self, operation: str, then: Callable[[], None], when: Match = any_call, times: int = 1) -> None:
        """The caller pauses before the request leaves while `then` runs (another actor's steps); then it is sent.

        `then` may raise (a crash before the call): the call is then not applied.
        """
        self._add("pause", operation, when, then, times)

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.fired if k == kind)

    # -- hooks ------------------------------------------------------------------------------

    def _add(self, kind: str, operation: str, when: Match, error: Any, times: int) -> None:
        factory = error if callable(error) and not isinstance(error, BaseException) else (lambda e=error: e)
        self._rules.append(_Rule(kind, operation, when, factory if error is not None else None, times))

    def _tag(self, params: Mapping[str, Any], model: Any, context: dict, **_: Any) -> None:
        # which rules match this call, decided once on its API parameters
        self.sent.append((model.name, dict(params)))
        context["faults"] = [r for r in self._rules if r.operation == model.name and r.when(params)]

    def _take(self, context: Mapping[str, Any], kind: str) -> _Rule | None:
        for rule in context.get("faults", []):
            if rule.kind == kind and rule.times > 0:
                rule.times -= 1
                self.fired.append((kind, rule.operation))
                return rule
        return None

    def _before(self, model: Any, context: dict, **_: Any) -> None:
        pause = self._take(context, "pause")
        if pause is not None and pause.error is not None:
            pause.error()  # the other actor's steps (its callback), not an error of this call
        rule = self._take(context, "before")
        if rule is not None and rule.error is not None:
            raise rule.error()

    def _after(self, http_response: Any, parsed: dict, model: Any, context: dict, **_: Any) -> None:
        if parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException" and "Item" in parsed:
            if self._take(context, "no_image"):
                parsed.pop("Item")
        if http_response.status_code < 300:
            rule = self._take(context, "after")
            if rule is not None and rule.error is not None:
                raise rule.error()

    def _needs_retry(self, attempts: int, response: Any, request_dict: Mapping[str, Any], **kwargs: Any) -> int | None:
        context = request_dict.get("context", {})
        if response is not None and response[0].status_code < 300 and self._take(context, "resend"):
            return 0  # re-send now, exactly as botocore does after a lost reply
        return None
