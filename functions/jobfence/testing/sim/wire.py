"""The wire: botocore event hooks through which every AWS call of a run passes.

One botocore session is shared by every client of the process (boto3 clients
are made from it, and pynamodb's connections are handed one client made from
it), and two handlers are registered on it once:

    before-call    (every service)  a new logical call: reset the attempt count;
                                    SQS calls are answered here by the simulated queue
    before-send    (DynamoDB)       one attempt on the wire: hand the turn back to the
                                    scheduler, draw a fault, then apply the request to
                                    moto's in-process backend (or not), and answer

moto's own `before-send` stubber is switched off for the run and called here
instead, so this module decides whether a request is applied at all, and can
apply it and still lose the reply. botocore's retries are real (its sleeps are
skipped): a reply lost on the first attempt is re-sent by botocore itself.

DynamoDB's client-token idempotency of TransactWriteItems is modelled here
(moto does not): a request whose ClientRequestToken was applied in the last
10 minutes with the same parameters succeeds without being applied again;
with other parameters it is refused (IdempotentParameterMismatchException).

Every applied write is recorded with the before and after image of every item
it changed (read from moto's backend directly) and handed to the run's
invariant checks, in the order DynamoDB applied them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import botocore.endpoint
import botocore.session
from botocore import UNSIGNED
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.core.botocore_stubber import MockRawResponse
from moto.core.models import botocore_stubber
from moto.dynamodb.models import dynamodb_backends
from pynamodb.connection.base import Connection
from pynamodb.settings import get_settings_value

from jobfence.clock import REQUEST_AGE_BUDGET_MS
from jobfence.dynamo import deserialized
from jobfence.testing.sim.faults import LATE_REQUESTS, PAUSES, WRITE_OPS, FaultKind, FaultPlan
from jobfence.testing.sim.kernel import Actor, Crash, Kernel

REGION = "us-east-1"
STREAK = 3  # replies lost in a row by a REPLY_LOST_STREAK: one call and the caller's two retries of it
TOKEN_WINDOW_MS = 10 * 60_000
_TYPE_PREFIX = "com.amazonaws.dynamodb.v20120810#"


@dataclass(frozen=True)
class Change:
    """One item a write changed: its logical table, key, and images (plain values; None: absent)."""

    table: str
    key: tuple[Any, ...]
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True)
class AppliedWrite:
    """A write DynamoDB applied, in application order."""

    seq: int
    at: int  # true time, epoch ms
    actor: str
    op: str
    changes: tuple[Change, ...]
    age_ms: int = 0  # true time from building the request (its times read) to applying it


class _NoSleep(types.ModuleType):
    """botocore.endpoint's `time`, without the sleep between retries (simulated time is ours)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    @staticmethod
    def sleep(_seconds: float) -> None:
        return None


_SESSION: botocore.session.Session | None = None
_ACTIVE: Wire | None = None


def shared_session() -> botocore.session.Session:
    """The process's one botocore session, with the run hooks registered (created once)."""
    global _SESSION
    if _SESSION is None:
        session = botocore.session.get_session()
        session.set_credentials("testing", "testing")
        session.set_config_variable("region", REGION)
        # the run talks to in-process moto only, whatever endpoint the process environment names
        # (the local runtime and its tests point AWS_ENDPOINT_URL at a loopback emulator)
        session.set_config_variable("ignore_configured_endpoint_urls", True)
        session.register("before-parameter-build", _on_params)
        session.register("before-call", _on_call)
        session.register("before-send.dynamodb", _on_send)
        _SESSION = session
    return _SESSION


def _on_params(params: dict[str, Any], model: Any, **_: Any) -> None:
    if _ACTIVE is not None:
        _ACTIVE.params(params, model)


def _on_call(model: Any, **_: Any) -> Any:
    return _ACTIVE.call(model) if _ACTIVE is not None else None


def _on_send(request: Any, **_: Any) -> Any:
    if _ACTIVE is None:
        raise RuntimeError("a simulator client was used outside a run")
    return _ACTIVE.send(request)


class Wire:
    """The hooks' state for one run: faults, the applied-write record, client tokens."""

    def __init__(
        self, kernel: Kernel, plan: FaultPlan, pause_ms: Callable[[FaultKind], int], queue: Any = None
    ) -> None:
        self.kernel = kernel
        self.plan = plan
        self.pause_ms = pause_ms
        self.queue = queue  # the simulated SQS (jobfence.testing.sim.queue.SimQueues)
        self.writes: list[AppliedWrite] = []
        self.on_write: list[Callable[[AppliedWrite], None]] = []
        self.injected: dict[FaultKind, int] = {}
        self.tables: dict[str, str] = {}  # physical -> logical
        self._tokens: dict[str, tuple[str, int]] = {}
        self._backend = dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION]
        self._params: dict[int, dict[str, Any]] = {}  # SQS request parameters by caller (id of its actor)
        session = shared_session()
        self.boto3 = boto3.Session(botocore_session=session)
        # Unsigned: moto in-process checks no signature, and signing is a tenth of a call's cost.
        self.dynamodb = self.boto3.client("dynamodb", config=Config(signature_version=UNSIGNED))
        self.sqs = self.boto3.client("sqs", config=Config(signature_version=UNSIGNED))
        # One client for every pynamodb connection of the run, configured as pynamodb configures its own
        # (standard retries, 1 + max_retry_attempts attempts, no parameter validation).
        self.pynamo_client = session.create_client(
            "dynamodb",
            REGION,
            config=Config(
                signature_version=UNSIGNED,
                parameter_validation=False,
                retries={"total_max_attempts": 1 + int(get_settings_value("max_retry_attempts")), "mode": "standard"},
            ),
        )

    # -- the run --------------------------------------------------------------------------

    @contextlib.contextmanager
    def active(self) -> Iterator[Wire]:
        """Route the hooks to this run; moto's own stubber and botocore's sleeps off meanwhile."""
        global _ACTIVE
        previous_stubber, previous_time = botocore_stubber.enabled, botocore.endpoint.time
        previous_client = Connection.client
        wire = self
        _ACTIVE = self
        botocore_stubber.enabled = False
        botocore.endpoint.time = _NoSleep("time")
        Connection.client = property(lambda _self: wire.pynamo_client)  # type: ignore[assignment,method-assign]
        try:
            yield self
        finally:
            _ACTIVE = None
            botocore_stubber.enabled = previous_stubber
            botocore.endpoint.time = previous_time
            Connection.client = previous_client  # type: ignore[method-assign]

    def count(self, kind: FaultKind, actor: Actor | None, text: str) -> None:
        self.injected[kind] = self.injected.get(kind, 0) + 1
        if actor is not None:
            actor.faults.append(kind.value)
        self.kernel.note(actor, f"FAULT {kind.value}: {text}")

    # -- hooks ----------------------------------------------------------------------------

    def params(self, params: dict[str, Any], model: Any) -> None:
        if model.service_model.service_name == "sqs":
            self._params[id(self.kernel.current())] = dict(params)

    def call(self, model: Any) -> Any:
        actor = self.kernel.current()
        if actor is not None:
            if actor.crashed:
                raise Crash(f"{actor.name} is dead")
            actor.attempt = 0
            actor.call_fault = None
            actor.calls += 1
            actor.call_started = self.kernel.clock.now_ms()
        if model.service_model.service_name != "sqs":
            return None
        return self._sqs(actor, model.name, self._params.pop(id(actor), {}))

    def send(self, request: Any) -> AWSResponse:
        actor = self.kernel.current()
        op = str(request.headers.get("X-Amz-Target", b"")).split(".")[-1].rstrip("'")
        if actor is None or not actor.faulty:
            if actor is not None:
                self._turn(actor)
            return self._dispatch(actor, op, request)
        self._turn(actor)
        attempt = actor.attempt
        actor.attempt += 1
        fault = actor.call_fault
        if attempt == 0:
            fault = actor.call_fault = self._draw(actor, op)
            if fault in PAUSES or fault in LATE_REQUESTS:
                ms = self.pause_ms(fault) if fault in PAUSES else self._late_ms(fault)
                self.count(
                    fault,
                    actor,
                    f"{'paused' if fault in PAUSES else 'applied'} {ms / 1000:.0f} s "
                    f"{'before' if fault in PAUSES else 'late:'} {op}",
                )
                self.kernel.park(actor, ms)
                fault = actor.call_fault = None
            elif fault is not None:
                self.count(fault, actor, op)
        if attempt and fault is not None:
            self.kernel.note(actor, f"{op} attempt {attempt + 1} (botocore retry) under {fault.value}")
        if fault is FaultKind.CRASH_BEFORE:
            actor.crashed = True
            raise Crash(f"{actor.name} died before {op}")
        if fault is FaultKind.CRASH_AFTER:
            self._dispatch(actor, op, request)
            actor.crashed = True
            raise Crash(f"{actor.name} died after {op}")
        if fault is FaultKind.REPLY_LOST_RESENT:
            if attempt == 0:
                self._dispatch(actor, op, request)
                raise ReadTimeoutError(endpoint_url=request.url)
            return self._dispatch(actor, op, request)
        if fault in (FaultKind.REPLY_LOST_SURFACED, FaultKind.REPLY_LOST_STREAK):
            if attempt == 0:
                self._dispatch(actor, op, request)
            raise ReadTimeoutError(endpoint_url=request.url)
        if fault is FaultKind.THROTTLED:
            return _error(request, 400, "ProvisionedThroughputExceededException", "simulated throttling")
        if fault is FaultKind.UNAVAILABLE:
            if attempt == 0 and self.kernel.rng.random() < 0.5:
                self._dispatch(actor, op, request)
            return _error(request, 500, "InternalServerError", "simulated 5xx")
        if fault is FaultKind.TRANSACTION_CONFLICT:
            if op == "TransactWriteItems":
                n = len(json.loads(request.body).get("TransactItems", []))
                reasons = [{"Code": "None"} for _ in range(n)]
                reasons[self.kernel.rng.randrange(n)] = {"Code": "TransactionConflict", "Message": "simulated"}
                return _error(
                    request,
                    400,
                    "TransactionCanceledException",
                    "Transaction cancelled, please refer cancellation reasons for specific reasons",
                    CancellationReasons=reasons,
                )
            return _error(request, 400, "TransactionConflictException", "simulated conflict")
        return self._dispatch(actor, op, request)

    def _draw(self, actor: Actor, op: str) -> FaultKind | None:
        """The fault of a new call: the next of a streak of lost replies on `op`, else a fresh draw."""
        if actor.streak.get(op, 0) > 0:
            actor.streak[op] -= 1
            return FaultKind.REPLY_LOST_STREAK
        fault = self.plan.call_fault(self.kernel.rng, op, "dynamodb", actor.spared)
        if fault is FaultKind.REPLY_LOST_STREAK:
            actor.streak[op] = STREAK - 1  # the caller's own retries of this write lose theirs too
        return fault

    def _late_ms(self, kind: FaultKind) -> int:
        """How late a request is applied: within the request-age budget, or beyond it (up to 12 times)."""
        if kind is FaultKind.REQUEST_LATE:
            return self.kernel.rng.randrange(1_000, REQUEST_AGE_BUDGET_MS // 2 + 1)
        return self.kernel.rng.randrange(REQUEST_AGE_BUDGET_MS + 1, 12 * REQUEST_AGE_BUDGET_MS)

    def _turn(self, actor: Actor) -> None:
        if actor.crashed:
            raise Crash(f"{actor.name} is dead")
        self.kernel.yield_turn(actor)

    # -- applying to moto -----------------------------------------------------------------

    def _dispatch(self, actor: Actor | None, op: str, request: Any) -> AWSResponse:
        body = json.loads(request.body or b"{}")
        who = actor.name if actor else "driver"
        digest = ""  # of a TransactWriteItems with a ClientRequestToken: its replay must be the same request
        if op == "TransactWriteItems" and body.get("ClientRequestToken"):
            token = body["ClientRequestToken"]
            digest = hashlib.sha256(
                json.dumps({k: v for k, v in body.items() if k != "ClientRequestToken"}, sort_keys=True).encode()
            ).hexdigest()
            seen = self._tokens.get(token)
            if seen is not None and self.kernel.clock.now_ms() - seen[1] < TOKEN_WINDOW_MS:
                if seen[0] != digest:
                    return _error(request, 400, "IdempotentParameterMismatchException", "token reused")
                self.kernel.note(actor, f"{op} token replay: success, not applied again")
                return _ok(request, {})
        keys = self._touched(op, body) if op in WRITE_OPS else []
        before = [self._get(table, key) for table, key in keys]
        response = botocore_stubber.process_request(request)
        assert response is not None  # moto's backends answer every DynamoDB and SQS request the sim sends
        status, headers, out = response
        if actor is not None:
            self.kernel.note(actor, f"{op} {self._where(body)} -> {status}{_error_code(status, out)}")
        if op in WRITE_OPS and status == 200:
            if op == "TransactWriteItems" and body.get("ClientRequestToken"):
                self._tokens[body["ClientRequestToken"]] = (digest, self.kernel.clock.now_ms())
            changes = []
            for (table, key), old in zip(keys, before, strict=True):
                new = self._get(table, key)
                if new != old:
                    changes.append(Change(self.tables.get(table, table), _key_tuple(key), old, new))
            if changes:
                if actor is not None:
                    actor.writes += 1
                now = self.kernel.clock.now_ms()
                age = now - actor.call_started if actor is not None and actor.call_started else 0
                write = AppliedWrite(len(self.writes), now, who, op, tuple(changes), age)
                self.writes.append(write)
                for check in self.on_write:
                    check(write)
        return AWSResponse(request.url, status, headers, MockRawResponse(out))

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        try:
            item = self._backend.get_item(table, key)
        except Exception:  # noqa: BLE001 - a missing table reads as a missing item here
            return None
        return deserialized(item.to_json()["Attributes"]) if item is not None else None

    def _touched(self, op: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        out: list[tuple[str, dict[str, Any]]] = []
        if op in ("UpdateItem", "DeleteItem"):
            out.append((body["TableName"], body["Key"]))
        elif op == "PutItem":
            out.append((body["TableName"], self._key_of(body["TableName"], body["Item"])))
        elif op == "TransactWriteItems":
            for entry in body.get("TransactItems", []):
                for kind, part in entry.items():
                    if kind == "Put":
                        out.append((part["TableName"], self._key_of(part["TableName"], part["Item"])))
                    elif kind in ("Update", "Delete"):
                        out.append((part["TableName"], part["Key"]))
        elif op == "BatchWriteItem":
            for table, requests in body.get("RequestItems", {}).items():
                for r in requests:
                    if "PutRequest" in r:
                        out.append((table, self._key_of(table, r["PutRequest"]["Item"])))
                    else:
                        out.append((table, r["DeleteRequest"]["Key"]))
        return out

    def _key_of(self, table: str, item: dict[str, Any]) -> dict[str, Any]:
        try:
            t = self._backend.get_table(table)
        except Exception:  # noqa: BLE001
            return {}
        names = [t.hash_key_attr] + ([t.range_key_attr] if t.range_key_attr else [])
        return {n: item[n] for n in names if n in item}

    def _where(self, body: dict[str, Any]) -> str:
        if "TableName" in body:
            name = self.tables.get(body["TableName"], body["TableName"])
            key = body.get("Key") or {}
            return f"{name}{list(_key_tuple(key)) if key else ''}"
        if "TransactItems" in body:
            return f"[{len(body['TransactItems'])} items]"
        if "RequestItems" in body:
            return ",".join(self.tables.get(t, t) for t in body["RequestItems"])
        return ""

    # -- SQS (answered by the simulated queues) -------------------------------------------

    def _sqs(self, actor: Actor | None, op: str, params: dict[str, Any]) -> Any:
        if self.queue is None or op not in ("SendMessageBatch", "SendMessage"):
            raise RuntimeError(f"the simulator does not model SQS {op}")
        single = op == "SendMessage"  # one message: the same as a batch of one
        if single:
            params = {
                "QueueUrl": params.get("QueueUrl", ""),
                "Entries": [{"Id": "0", "MessageBody": params.get("MessageBody", "")}],
            }
        fault = None
        if actor is not None:
            self._turn(actor)
            if actor.faulty:
                fault = self.plan.call_fault(self.kernel.rng, op, "sqs", actor.spared)
                if fault in PAUSES:
                    ms = self.pause_ms(fault)
                    self.count(fault, actor, f"paused {ms / 1000:.0f} s before {op}")
                    self.kernel.park(actor, ms)
                    fault = None
                elif fault is not None:
                    self.count(fault, actor, op)
        url = params.get("QueueUrl", "")
        if fault is FaultKind.CRASH_BEFORE:
            actor.crashed = True  # type: ignore[union-attr]
            raise Crash("died before SendMessageBatch")
        applied = fault is None or fault in (
            FaultKind.CRASH_AFTER,
            FaultKind.REPLY_LOST_RESENT,
            FaultKind.REPLY_LOST_SURFACED,
        )
        if fault is FaultKind.UNAVAILABLE:
            applied = self.kernel.rng.random() < 0.5
        ids = self.queue.send(url, params.get("Entries", []), actor) if applied else []
        if fault is FaultKind.CRASH_AFTER:
            actor.crashed = True  # type: ignore[union-attr]
            raise Crash("died after SendMessageBatch")
        if fault in (FaultKind.REPLY_LOST_RESENT, FaultKind.REPLY_LOST_SURFACED):
            raise ReadTimeoutError(endpoint_url=url)
        if fault is not None:
            code = {FaultKind.THROTTLED: "RequestThrottled", FaultKind.UNAVAILABLE: "InternalError"}.get(
                fault, "InternalError"
            )
            status = 400 if fault is FaultKind.THROTTLED else 500
            return (
                _Http(status),
                {"Error": {"Code": code, "Message": "simulated"}, "ResponseMetadata": {"HTTPStatusCode": status}},
            )
        if single:
            return (
                _Http(200),
                {
                    "MessageId": ids[0] if ids else "",
                    "MD5OfMessageBody": "",
                    "ResponseMetadata": {"HTTPStatusCode": 200},
                },
            )
        return (
            _Http(200),
            {
                "Successful": [
                    {"Id": e["Id"], "MessageId": m, "MD5OfMessageBody": ""}
                    for e, m in zip(params.get("Entries", []), ids, strict=False)
                ],
                "Failed": [],
                "ResponseMetadata": {"HTTPStatusCode": 200},
            },
        )


class _Http:
    def __init__(self, status: int) -> None:
        self.status_code = status
        self.headers: dict[str, str] = {}
        self.content = b""


def _ok(request: Any, body: dict[str, Any]) -> AWSResponse:
    return AWSResponse(request.url, 200, {"x-amzn-requestid": "sim"}, MockRawResponse(json.dumps(body)))


def _error(request: Any, status: int, code: str, message: str, **extra: Any) -> AWSResponse:
    body = {"__type": _TYPE_PREFIX + code, "message": message, **extra}
    headers = {"x-amzn-requestid": "sim", "Content-Type": "application/x-amz-json-1.0"}
    return AWSResponse(request.url, status, headers, MockRawResponse(json.dumps(body)))


def _error_code(status: int, body: Any) -> str:
    if status < 300:
        return ""
    try:
        return " " + str(json.loads(body).get("__type", "")).split("#")[-1]
    except (ValueError, AttributeError):
        return ""


def _key_tuple(key: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(next(iter(v.values())) for _, v in sorted(key.items()))
