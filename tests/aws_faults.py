"""Deterministic AWS faults on botocore clients, through their own event hooks (the suite's one fault module).

    faults = Faults(client)
    faults.reply_lost("UpdateItem", when=releases)             # applied; the reply surfaces as ReadTimeoutError
    faults.resent("UpdateItem", when=acquires)                 # applied; botocore sends the same request again
    faults.refused_before("PutItem", throttled(), times=2)     # not applied: raised before the request is sent
    faults.without_old_image("UpdateItem")                     # a refusal without its old image (like dynalite)
    faults.paused("UpdateItem", then=other_actor_runs)         # before the request leaves, another actor runs
    faults.reply_lost("PutItem", when=from_call(2), error=connection_closed)  # the 2nd PutItem on: a dropped connection
    faults.detach()                                            # the clients' later calls go through untouched

`client` is a boto3 client or a pynamodb store's (`store.clients()`). `when` picks
calls by their API parameters (or by their rank: `from_call`); `times` bounds how
often a fault fires. Every fault is counted in `faults.fired`, so a test can assert
it really happened. Each method returns the `Faults`, so one line can attach and
script: `faults = Faults(client).resent("PutItem")`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from botocore.exceptions import ClientError, ConnectionClosedError, ReadTimeoutError

Match = Callable[[Mapping[str, Any]], bool]


def throttled(operation: str = "UpdateItem") -> ClientError:
    """The error botocore raises once its own retries of a throttled call are exhausted."""
    response = {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"},
                "ResponseMetadata": {"HTTPStatusCode": 400}}
    return ClientError(response, operation)  # type: ignore[arg-type]


def read_timeout() -> ReadTimeoutError:
    return ReadTimeoutError(endpoint_url="https://dynamodb")


def connection_closed() -> ConnectionClosedError:
    """A dropped connection: the request was applied, its reply never arrived."""
    return ConnectionClosedError(endpoint_url="https://dynamodb")


def any_call(_params: Mapping[str, Any]) -> bool:
    return True


def from_call(nth: int) -> Match:
    """The rule's operation from its `nth` call on (1-based, counted from when the rule is added)."""
    rank = itertools.count(1)
    return lambda _params: next(rank) >= nth


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
        self._clients = list({id(c): c for c in (client, *more)}.values())
        for one in self._clients:
            for event, handler in self._hooks():
                one.meta.events.register(event, handler)

    def detach(self) -> None:
        """Stop injecting: the clients' later calls go through untouched (and are no longer recorded)."""
        for one in self._clients:
            for event, handler in self._hooks():
                one.meta.events.unregister(event, handler)

    def refused_before(self, operation: str, error: BaseException | Callable[[], BaseException], when: Match = any_call, times: int = 1) -> "Faults":
        """The call is not applied: `error` is raised before the request leaves."""
        self._add("before", operation, when, error, times)
        return self

    def reply_lost(self, operation: str, when: Match = any_call, times: int = 1, error: Callable[[], BaseException] = read_timeout,
                   refused_too: bool = False) -> "Faults":
        """The call is applied; its reply is lost and surfaces as `error` (botocore gave up).

        With `refused_too`, a refusal's reply (a failed condition) is lost as well: the caller
        never learns whether any of its tries was applied.
        """
        self._add("after_any" if refused_too else "after", operation, when, error, times)
        return self

    def resent(self, operation: str, when: Match = any_call, times: int = 1) -> "Faults":
        """The call is applied; its reply is lost and botocore sends the same request again."""
        self._add("resend", operation, when, None, times)
        return self

    def without_old_image(self, operation: str, when: Match = any_call, times: int = 10**9) -> "Faults":
        """A refused condition comes back without the old image (as from dynalite)."""
        self._add("no_image", operation, when, None, times)
        return self

    def paused(self, operation: str, then: Callable[[], None], when: Match = any_call, times: int = 1) -> "Faults":
        """The caller pauses before the request leaves while `then` runs (another actor's steps); then it is sent.

        `then` may raise (a crash before the call): the call is then not applied.
        """
        self._add("pause", operation, when, then, times)
        return self

    def count(self, kind: str) -> int:
        return sum(1 for k, _ in self.fired if k == kind)

    # -- hooks ------------------------------------------------------------------------------

    def _hooks(self) -> list[tuple[str, Callable[..., Any]]]:
        return [("before-parameter-build.dynamodb", self._tag), ("before-call.dynamodb", self._before),
                ("after-call.dynamodb", self._after), ("needs-retry.dynamodb", self._needs_retry)]

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
        rule = self._take(context, "after") if http_response.status_code < 300 else None
        rule = rule or self._take(context, "after_any")
        if rule is not None and rule.error is not None:
            raise rule.error()

    def _needs_retry(self, attempts: int, response: Any, request_dict: Mapping[str, Any], **kwargs: Any) -> int | None:
        context = request_dict.get("context", {})
        if response is not None and response[0].status_code < 300 and self._take(context, "resend"):
            return 0  # re-send now, exactly as botocore does after a lost reply
        return None
