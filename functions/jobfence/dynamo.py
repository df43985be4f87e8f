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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from decimal import Decimal
from typing import Any, NoReturn, TypeVar

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

from jobfence.errors import ErrorKind, StoreError

T = TypeVar("T")

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


def old_image(exc: BaseException) -> dict[str, Any] | None:
    """The item DynamoDB returned with a refused condition (`ReturnValuesOnConditionCheckFailure`), low-level."""
    cause = root_cause(exc)
    response = getattr(cause, "response", None) or {}
    item = response.get("Item")
    return dict(item) if isinstance(item, Mapping) else None


def retry_transient(
    call: Callable[[], T], attempts: int = TRANSIENT_ATTEMPTS, retried: list[ErrorKind] | None = None
) -> T:
    """`call()`, called again (at most `attempts` times in all) while it raises a transient AWS error.

    Only for an idempotent call: the same request sent again, whose refusal
    after an earlier attempt was applied the caller reads from the old image
    (see `refused_item`). botocore has already retried with backoff beneath
    this, so there is no sleep here. The last error is raised as it is.
    `retried` collects the kind of every error that was retried (a caller
    asks whether an earlier try may have been applied: `may_have_applied`).
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
    """Whether a write's every try ended in a transient error while one of them may have been applied.

    Its outcome is unknown: only a read of the item tells (`retry_transient`'s `retried`).
    """
    if not is_aws_error(final) or not classify(final).transient:
        return False
    return classify(final).maybe_applied or may_have_applied(final, retried)


def refused_item(exc: BaseException, read: Callable[[], Mapping[str, Any] | None]) -> dict[str, Any]:
    """The item a refused condition saw: the old image DynamoDB returned, else one consistent read.

    DynamoDB returns the old image when asked (`ReturnValuesOnConditionCheckFailure`);
    some implementations (dynalite) never do. Reading the item right after the
    refusal classifies it from the item as it is now, which is what the old
    image would have shown unless another write came in between: callers
    decide from it only what stays true afterwards (whose term it is, whether
    our own write is there). `{}` when there is no item.
    """
    image = old_image(exc)
    if image is None:
        image = dict(read() or {})
    return image


def raise_store_error(exc: Exception, what: str) -> NoReturn:
    """Raise `StoreError` naming an AWS error's code and kind (`from exc`); any other exception as it is."""
    if not is_aws_error(exc):
        raise exc
    raise StoreError(f"{what} failed: {error_code(exc)}", classify(exc)) from exc


def raise_unless_refused(exc: Exception, what: str) -> None:
    """Return only when `exc` is a refused condition (the caller reads the old image); else `raise_store_error`."""
    if not (is_aws_error(exc) and classify(exc) is ErrorKind.CONDITION_FAILED):
        raise_store_error(exc, what)


def update_if(row: Any, actions: Sequence[Any], condition: Any, what: str) -> bool:
    """One conditional pynamodb update: True if applied, False if its condition was refused.

    For an unfenced write of a request path (it holds no job lease); any other
    error is a `StoreError` naming its code (`raise_store_error`).
    """
    try:
        row.update(actions=list(actions), condition=condition)
    except Exception as exc:
        raise_unless_refused(exc, what)
        return False
    return True


def update_or_refusal(row: Any, actions: Sequence[Any], condition: Any, what: str) -> dict[str, Any] | None:
    """One conditional pynamodb update: None if applied, else the item that refused it (deserialized).

    For an unfenced write whose refusal must be read (was it our own earlier
    copy?): the update asks for the old image, which pynamodb's `Model.update`
    cannot, so the expression pynamodb builds is sent on the model's own
    botocore client. Without an image (dynalite), one consistent read
    (`refused_item`); `{}` when there is no item. Any other error is a
    `StoreError` (`raise_store_error`).
    """
    model = type(row)
    kwargs = row.get_update_kwargs_from_instance(
        actions=list(actions), condition=condition, return_values_on_condition_failure="ALL_OLD"
    )
    try:
        model._get_connection().connection.client.update_item(**kwargs)
    except Exception as exc:
        raise_unless_refused(exc, what)
        key = kwargs["Key"]

        def read() -> Mapping[str, Any] | None:
            with aws_call(what):
                return (
                    model._get_connection()
                    .connection.client.get_item(TableName=kwargs["TableName"], Key=key, ConsistentRead=True)
                    .get("Item")
                )

        return deserialized(refused_item(exc, read))
    return None


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


def plain(item: Mapping[str, Any] | None) -> dict[str, Any]:
    """A low-level DynamoDB item (an old image) as plain Python values: numbers as int, other values as sent."""
    out: dict[str, Any] = {}
    for name, value in (item or {}).items():
        ((kind, raw),) = value.items()
        out[name] = int(raw) if kind == "N" else raw
    return out


_deserializer = TypeDeserializer()


def deserialized(item: Mapping[str, Any] | None) -> dict[str, Any]:
    """A low-level DynamoDB item deserialized in full: whole numbers as int, others as float, maps recursively.

    The one reading of a wire item for the run rows and the operator tooling (`plain` keeps values as sent).
    """
    return {k: _plain_number(_deserializer.deserialize(v)) for k, v in (item or {}).items()}


def _plain_number(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dict):
        return {k: _plain_number(v) for k, v in value.items()}
    return value


def cancellation_reasons(exc: BaseException) -> list[dict[str, Any]]:
    """The per-item reasons of a cancelled transaction (low-level dicts, in item order).

    pynamodb re-raises a transaction's error with only `Error` left in its
    `response`, and keeps the reasons (with their old images) on the error as
    `cancellation_reasons` objects; both spellings come out the same here.
    """
    cause = root_cause(exc)
    kept = getattr(cause, "cancellation_reasons", None)
    if kept:
        return [
            {"Code": r.code, "Message": r.message, **({"Item": r.raw_item} if r.raw_item else {})}
            if r
            else {"Code": "None"}
            for r in kept
        ]
    response = getattr(cause, "response", None) or {}
    reasons = response.get("CancellationReasons") or []
    return [dict(r) if isinstance(r, Mapping) else {} for r in reasons]


def cancellation_codes(exc: BaseException) -> list[str]:
    """The codes of `cancellation_reasons` ("None" where an item was not the cause)."""
    return [str(r.get("Code", "None")) for r in cancellation_reasons(exc)]
