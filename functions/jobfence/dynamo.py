"""The one place that classifies AWS errors, and the one way a store writes and reads DynamoDB items.

Binding a model to its table is `jobfence.binding`'s.

**Classifying.** Every error a boto3 client or pynamodb raises reaches the
stores as one of three shapes: a botocore `ClientError` (the service answered
with an error), a botocore `BotoCoreError` (no answer: the connection failed,
or the reply was lost and surfaced as a read timeout; it has no `response`),
or a pynamodb exception wrapping either in `.cause`. `classify` reduces all of
them to one `ErrorKind`, and `error_code` to one short code, so no store reads
`exc.response` or pynamodb's `cause_response_code` (which raises
`AttributeError` on a read timeout) itself.

What each kind means for a write that raised it:

    CONDITION_FAILED      not applied: our own condition refused it (old image attached)
    TRANSACTION_CANCELED  not applied: one of the items refused (see cancellation reasons)
    THROTTLED             not applied: retry later
    UNAVAILABLE           unknown: a 5xx may come after the write was applied
    REPLY_LOST            unknown: the request was sent and no reply came back
    CONNECTION            not applied: no connection was made
    REJECTED              not applied: a bad request, a missing table, no permission (a bug
                          or a deployment problem; retrying does not help)
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, NoReturn, TypeVar

from boto3.dynamodb.types import TypeDeserializer
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
    ResponseStreamingError,
)
from pynamodb.exceptions import DoesNotExist, PynamoDBException

from jobfence.errors import ErrorKind, JobfenceError, StoreError, bounded

T = TypeVar("T")

SAFE_ERROR_CHARS = 300  # an error text `safe_error` gives (a run row's, a log line's), at most

# Our own retries of a transient error, on top of botocore's (which already backed off).
TRANSIENT_ATTEMPTS = 3

# DynamoDB error codes, named once.
CONDITIONAL_CHECK_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"
TRANSACTION_CONFLICT = "TransactionConflictException"
TRANSACTION_IN_PROGRESS = "TransactionInProgressException"
IDEMPOTENT_PARAMETER_MISMATCH = "IdempotentParameterMismatchException"
# A cancellation reason's code (inside TransactionCanceledException) for a refused condition.
REASON_CONDITION_FAILED = "ConditionalCheckFailed"
REASON_TRANSACTION_CONFLICT = "TransactionConflict"
ALL_OLD = "ALL_OLD"  # every write asks for the item that refused it
MAX_ENTRIES = 100  # TransactWriteItems takes at most 100 entries

THROTTLING_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "Throttling",
        "ThrottledException",
        "TooManyRequestsException",
        TRANSACTION_CONFLICT,  # another transaction holds an item: nothing applied, retry
        TRANSACTION_IN_PROGRESS,  # the same client token is still being applied: retry
    }
)
UNAVAILABLE_CODES = frozenset(
    {"InternalServerError", "InternalFailure", "ServiceUnavailable", "ServiceUnavailableException", "InternalError"}
)


def root_cause(exc: BaseException) -> BaseException:
    """The botocore error inside a pynamodb exception (or `exc` itself)."""
    seen = 0
    while isinstance(exc, PynamoDBException) and exc.cause is not None and seen < 5:
        exc = exc.cause
        seen += 1
    return exc


def error_code(exc: BaseException) -> str:
    """A short, safe code for any AWS error: the service's code, or the botocore class name."""
    cause = root_cause(exc)
    if isinstance(cause, ClientError):
        response = getattr(cause, "response", None) or {}
        return str((response.get("Error") or {}).get("Code") or "Unknown")[:64]
    return type(cause).__name__


def classify(exc: BaseException) -> ErrorKind:
    """The kind of any boto3, botocore or pynamodb error."""
    cause = root_cause(exc)
    if isinstance(cause, ClientError):
        code = error_code(cause)
        if code == CONDITIONAL_CHECK_FAILED:
            return ErrorKind.CONDITION_FAILED
        if code == TRANSACTION_CANCELED:
            reasons = cancellation_codes(cause)
            if reasons and all(r in ("None", REASON_CONDITION_FAILED) for r in reasons):
                return ErrorKind.TRANSACTION_CANCELED
            if any(
                r in ("ThrottlingError", "ProvisionedThroughputExceeded", REASON_TRANSACTION_CONFLICT) for r in reasons
            ):
                return ErrorKind.THROTTLED
            return ErrorKind.TRANSACTION_CANCELED
        if code in THROTTLING_CODES:
            return ErrorKind.THROTTLED
        status = ((getattr(cause, "response", None) or {}).get("ResponseMetadata") or {}).get("HTTPStatusCode")
        if code in UNAVAILABLE_CODES or (isinstance(status, int) and status >= 500):
            return ErrorKind.UNAVAILABLE
        return ErrorKind.REJECTED
    if isinstance(cause, (ReadTimeoutError, ConnectionClosedError, ResponseStreamingError)):
        return ErrorKind.REPLY_LOST
    if isinstance(cause, (EndpointConnectionError, ConnectTimeoutError)):
        return ErrorKind.CONNECTION
    if isinstance(cause, BotoCoreError):
        return ErrorKind.REPLY_LOST  # no answer of any kind: assume the request may have been applied
    return ErrorKind.REJECTED


def is_aws_error(exc: BaseException) -> bool:
    """Whether `exc` came from a boto3/botocore/pynamodb call (and so `classify` applies)."""
    return isinstance(exc, (ClientError, BotoCoreError, PynamoDBException))


def safe_error(exc: BaseException) -> str:
    """Class and message, bounded, and only where the message is known to be safe.

    Our own errors are written never to carry payloads, and an AWS error is
    reduced to its code. Any other exception may quote whatever it was handed
    (a provider's response body, a customer's field), so only its class is kept.
    """
    name = type(exc).__name__
    if isinstance(exc, JobfenceError):
        text = f"{name}: {exc}"
    elif is_aws_error(exc):
        text = f"{name}: {error_code(exc)}"
    else:
        text = name
    return bounded(text, SAFE_ERROR_CHARS)


def retry_transient(
    call: Callable[[], T], attempts: int = TRANSIENT_ATTEMPTS, retried: list[ErrorKind] | None = None
) -> T:
    """`call()`, called again (at most `attempts` times in all) while it raises a transient AWS error.

    The one retry policy, for reads and (through `write` and `Transaction`) every write: the same
    request sent again. botocore has already retried with backoff beneath this, so there is no
    sleep here. The last error is raised as it is. `retried` collects the kind of every error that
    was retried (whether an earlier try may have been applied: `may_have_applied`).
    """
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if attempt == attempts or not is_aws_error(exc) or not classify(exc).transient:
                raise
            if retried is not None:
                retried.append(classify(exc))
    raise AssertionError("unreachable")  # pragma: no cover


def may_have_applied(final: BaseException, retried: Sequence[ErrorKind]) -> bool:
    """Whether an earlier try of a call that ended in `final` may have been applied.

    True when `retry_transient` retried an error that may follow an applied
    write, or when botocore re-sent the request beneath it (it does not say
    why, so any re-send counts).
    """
    if any(kind.maybe_applied for kind in retried):
        return True
    response = getattr(root_cause(final), "response", None) or {}
    return int((response.get("ResponseMetadata") or {}).get("RetryAttempts") or 0) > 0


def went_unanswered(final: BaseException, retried: Sequence[ErrorKind]) -> bool:
    """Whether a write's every try ended in a transient error while one of them may have been applied."""
    if not is_aws_error(final) or not classify(final).transient:
        return False
    return classify(final).maybe_applied or may_have_applied(final, retried)


def store_error(exc: BaseException, what: str, retried: Sequence[ErrorKind] = ()) -> StoreError:
    """The `StoreError` for an AWS error: its code, its kind, and whether the write may have landed."""
    return StoreError(f"{what} failed: {error_code(exc)}", classify(exc), unanswered=went_unanswered(exc, retried))


def raise_store_error(exc: Exception, what: str) -> NoReturn:
    """Raise `StoreError` naming an AWS error's code and kind (`from exc`); any other exception as it is."""
    if not is_aws_error(exc):
        raise exc
    raise store_error(exc, what) from exc


# -- the one conditional write ------------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    """A conditional write that was applied: `item` is what it asked back (`ReturnValues`), read; `{}` if none.

    `earlier` is set when this call's own earlier try was applied and its reply lost: the
    refusal that followed was recognised as ours (`ours`), and `item` is the image it returned.
    """

    item: dict[str, Any] = field(default_factory=dict)
    earlier: bool = False

    @property
    def applied(self) -> bool:
        return True

    def or_raise(self) -> Applied:
        """This outcome (for a write whose refusal is an error: `Refused.or_raise`)."""
        return self


@dataclass(frozen=True)
class Refused:
    """A conditional write its condition refused: nothing of it was applied.

    `item` is what the condition saw (the old image DynamoDB returned, else one consistent
    read), read; `{}` when there is no item. `index` is the refused entry of a transaction in
    the order the caller added them (0 for a single write). `maybe_ours` is set when an earlier
    try of this very call may have been applied (a 5xx or a lost reply was retried): the item
    may show our own write, taken over since. `entries` is every entry of a transaction its
    condition refused, by index, with its item (DynamoDB reports each one): `index` and `item`
    are the first of them; `raw` the same items as DynamoDB sent them, for a store that reads one
    with its pynamodb model (`Model.from_raw_data`).
    """

    item: dict[str, Any]
    index: int = 0
    maybe_ours: bool = False
    what: str = "a write"
    entries: Mapping[int, dict[str, Any]] = field(default_factory=dict)
    raw: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def applied(self) -> bool:
        return False

    def or_raise(self) -> Applied:
        """For a write whose refusal is an error (a create that finds its row, an update of a missing one):
        a `StoreError` of kind CONDITION_FAILED naming the write."""
        raise StoreError(f"{self.what} was refused by its condition", ErrorKind.CONDITION_FAILED)


Ours = Callable[[Mapping[str, Any]], bool]
"""Recognises our own earlier write in a refusal's item (a retried write whose first try was applied)."""


def write(
    client: Any,
    operation: str,
    request: Mapping[str, Any],
    what: str,
    *,
    ours: Ours | None = None,
    key: Mapping[str, Any] | None = None,
) -> Applied | Refused:
    """Send one (conditional) `put_item`, `update_item` or `delete_item` and say what came of it.

    Every write of every store goes through here (or `Transaction`): it asks for the old image
    with a refusal, retries a transient error (`retry_transient`: the same request again) and
    reads a refusal so that a retry is never misjudged:
    - applied: `Applied`;
    - refused: `Refused` with the item the condition saw; when a try before the refusal may have
      been applied, the refusal may be our own write's, so `ours(item)` decides (`Applied` with
      `earlier`), and without `ours` it is a `StoreError` with `unanswered` (nobody can tell);
    - any other error: a `StoreError` of its kind (`unanswered` when every try failed and one
      may have landed: only a read of the item tells).
    Anything that is not an AWS error is raised as it is. `key` is the item's key when the
    request does not name it (a put).
    """
    sent = {**request, "ReturnValuesOnConditionCheckFailure": ALL_OLD} if "ConditionExpression" in request else request
    retried: list[ErrorKind] = []
    try:
        reply = retry_transient(lambda: getattr(client, operation)(**sent), retried=retried)
    except Exception as exc:
        if not is_aws_error(exc):
            raise
        if classify(exc) is not ErrorKind.CONDITION_FAILED:
            raise store_error(exc, what, retried) from exc
        image = _old_image(exc)
        if image is None:  # some implementations (dynalite) never return it: the item as it is now
            at = key or sent["Key"]
            with aws_call(what):
                image = client.get_item(TableName=sent["TableName"], Key=at, ConsistentRead=True).get("Item")
        seen = deserialized(image)
        maybe_ours = may_have_applied(exc, retried)
        if ours is not None and ours(seen):
            return Applied(seen, earlier=True)
        if maybe_ours and ours is None:  # nobody can tell whether the refusal is our own earlier try's
            lost = next((kind for kind in reversed(retried) if kind.maybe_applied), ErrorKind.REPLY_LOST)
            raise StoreError(
                f"{what} failed: {lost.value}, then refused: it may have been applied", lost, unanswered=True
            ) from exc
        return Refused(seen, maybe_ours=maybe_ours, what=what)
    return Applied(deserialized(reply.get("Attributes")))


def caller_reads(seen: Mapping[str, Any]) -> bool:
    """`ours` for a write whose caller reads every refusal itself (a refusal is returned, never an error): it
    re-applies (a refusal is someone else's), a refusal changes nothing, or the caller's reading of the item
    covers our own earlier copy."""
    return False


def _old_image(exc: BaseException) -> Mapping[str, Any] | None:
    """The item DynamoDB returned with a refused condition (`ReturnValuesOnConditionCheckFailure`), low-level."""
    item = (getattr(root_cause(exc), "response", None) or {}).get("Item")
    return item if isinstance(item, Mapping) else None


def _client_of(model: Any) -> Any:
    """The client `model` sends through (`jobfence.binding.client_of`), imported here on use: a store that passes a
    bound model has loaded the binding already, and a function that only classifies AWS errors (the signing key
    rotation, the secrets provider) then never loads it, nor pynamodb's models (docs/benchmarks.md, "Cold start")."""
    from jobfence.binding import client_of

    return client_of(model)


def update_row(
    row: Any,
    actions: Sequence[Any],
    condition: Any,
    what: str,
    *,
    ours: Ours | None = None,
    returns: Literal["ALL_NEW"] | None = None,
) -> Applied | Refused:
    """`write` of one pynamodb update: `row` names the item (a key-only instance is enough).

    `returns="ALL_NEW"` asks for the updated item (`Applied.item`): it costs no read unit.
    """
    request = row.get_update_kwargs_from_instance(actions=list(actions), condition=condition)
    if returns is not None:
        request = {**request, "ReturnValues": returns}
    return write(_client_of(type(row)), "update_item", request, what, ours=ours)


def put_row(row: Any, condition: Any, what: str, *, ours: Ours | None = None) -> Applied | Refused:
    """`write` of one pynamodb put of `row`."""
    request = row.get_save_kwargs_from_instance(condition=condition)
    model = type(row)
    names = [n for n, a in model.get_attributes().items() if a.is_hash_key or a.is_range_key]
    key = {a.attr_name: request["Item"][a.attr_name] for n, a in model.get_attributes().items() if n in names}
    return write(_client_of(model), "put_item", request, what, ours=ours, key=key)


def delete_row(row: Any, condition: Any, what: str, *, ours: Ours | None = None) -> Applied | Refused:
    """`write` of one pynamodb delete of `row`'s item."""
    request = row.get_delete_kwargs_from_instance(condition=condition)
    return write(_client_of(type(row)), "delete_item", request, what, ours=ours)


@contextmanager
def aws_call(what: str) -> Iterator[None]:
    """Turn any boto3/botocore/pynamodb error raised inside into `raise_store_error(exc, what)`.

    pynamodb's `DoesNotExist` (a missing row, not an error) passes through.
    """
    try:
        yield
    except DoesNotExist:
        raise
    except (ClientError, BotoCoreError, PynamoDBException) as exc:
        raise_store_error(exc, what)


def each_row(results: Iterable[T], what: str) -> Iterator[T]:
    """Every row of a pynamodb query, scan or batch_get, each page's error classified like every other (`aws_call`).

    pynamodb's reads of many rows are lazy: each page is a call made while the
    result is iterated, so an error surfaces in the caller's loop, not where
    the query was built. Iterate `each_row(model.query(...), what)` instead.
    """
    with aws_call(what):
        yield from results


def one_page(result: Any, what: str) -> tuple[list[Any], dict[str, Any] | None]:
    """The rows of one query or scan made with `limit`, and the key to resume after them (None at the end)."""
    found = list(each_row(result, what))
    return found, result.last_evaluated_key


def get_row(model: Any, *key: Any, what: str) -> Any | None:
    """One strongly consistent read of a pynamodb row: the row, or None when there is none.

    The one way a store reads a row by key: an error is classified like every
    other (`aws_call`), never a raw `GetError`.
    """
    try:
        with aws_call(what):
            return model.get(*key, consistent_read=True)
    except DoesNotExist:
        return None


_deserializer = TypeDeserializer()


def deserialized(item: Mapping[str, Any] | None) -> dict[str, Any]:
    """A low-level DynamoDB item deserialized in full: whole numbers as int, others as float, maps recursively.

    The one reader of a low-level item (a reply's attributes, an old image, a raw query's rows): every store,
    the run rows and the operator tooling read wire items through it.
    """
    return {k: _plain_number(_deserializer.deserialize(v)) for k, v in (item or {}).items()}


def _plain_number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain_number(v) for k, v in value.items()}
    return value


def cancellation_reasons(exc: BaseException) -> list[dict[str, Any]]:
    """The per-item reasons of a cancelled transaction (low-level dicts, in item order): the one reader of them."""
    cause = root_cause(exc)
    response = getattr(cause, "response", None) or {}
    reasons = response.get("CancellationReasons") or []
    return [dict(r) if isinstance(r, Mapping) else {} for r in reasons]


def cancellation_codes(exc: BaseException) -> list[str]:
    """The codes of `cancellation_reasons` ("None" where an item was not the cause)."""
    return [str(r.get("Code", "None")) for r in cancellation_reasons(exc)]


class Transaction:
    """One TransactWriteItems of conditional entries, in the order the caller adds them.

    Entries come from pynamodb rows through pynamodb's public request builders
    (`condition_check`, `save`, `update`, `delete`, as on pynamodb's `TransactWrite`),
    or as a low-level entry (`add_entry`: the lease check). Every conditional entry asks
    for the old image with a refusal. The transaction carries its own ClientRequestToken (drawn once,
    or the caller's `token`), so a retry of a transient error (`retry_transient`) is the
    same request under the same token, which DynamoDB applies at most once. `commit` says
    what came of it: `Applied`, `Refused` (the first entry whose condition failed, counted
    in the caller's order, with its item), or a `StoreError`.
    """

    def __init__(self, client: Any, what: str, token: str | None = None, max_entries: int = MAX_ENTRIES) -> None:
        self._client = client
        self._what = what
        self._token = token or uuid.uuid4().hex
        self._max = max_entries
        self._entries: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def add_entry(self, kind: str, body: Mapping[str, Any]) -> None:
        """A low-level entry: `kind` is "ConditionCheck", "Put", "Update" or "Delete"."""
        if len(self._entries) >= self._max:
            raise ValueError(f"a transaction takes at most {self._max} entries")
        asked = {"ReturnValuesOnConditionCheckFailure": ALL_OLD} if "ConditionExpression" in body else {}
        self._entries.append({kind: {**body, **asked}})

    def condition_check(self, model_cls: Any, hash_key: Any, range_key: Any = None, condition: Any = None) -> None:
        """Check the item at `hash_key`/`range_key` under `condition`."""
        body = model_cls.get_operation_kwargs_from_class(hash_key, range_key=range_key, condition=condition)
        self.add_entry("ConditionCheck", body)

    def save(self, row: Any, condition: Any = None) -> None:
        """Put `row` under `condition`."""
        self.add_entry("Put", row.get_save_kwargs_from_instance(condition=condition))

    def update(self, row: Any, actions: Sequence[Any], condition: Any = None) -> None:
        """Update `row`'s item (a key-only instance is enough) with `actions` under `condition`."""
        self.add_entry("Update", row.get_update_kwargs_from_instance(actions=list(actions), condition=condition))

    def delete(self, row: Any, condition: Any = None) -> None:
        """Delete `row`'s item under `condition`."""
        self.add_entry("Delete", row.get_delete_kwargs_from_instance(condition=condition))

    def commit(self) -> Applied | Refused:
        """Send the transaction (nothing when it is empty) and say what came of it."""
        if not self._entries:
            return Applied()
        request = {"TransactItems": self._entries, "ClientRequestToken": self._token}
        retried: list[ErrorKind] = []
        try:
            retry_transient(lambda: self._client.transact_write_items(**request), retried=retried)
        except Exception as exc:
            if not is_aws_error(exc):
                raise
            reasons = cancellation_reasons(exc) if classify(exc) is ErrorKind.TRANSACTION_CANCELED else []
            raw = {
                i: dict(reason.get("Item") or {})
                for i, reason in enumerate(reasons)
                if reason.get("Code") == REASON_CONDITION_FAILED
            }
            if not raw:
                raise store_error(exc, self._what, retried) from exc
            refused = {i: deserialized(item) for i, item in raw.items()}
            first = min(refused)
            return Refused(refused[first], first, may_have_applied(exc, retried), self._what, refused, raw)
        return Applied()
