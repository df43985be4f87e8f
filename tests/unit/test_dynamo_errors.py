"""The one classification of boto3, botocore and pynamodb errors (jobfence.dynamo)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from pynamodb.exceptions import PutError, TransactWriteError, UpdateError

from jobfence.dynamo import Refused, cancellation_codes, classify, error_code, write
from jobfence.errors import ErrorKind


def _client_error(code: str, status: int = 400, **extra: object) -> ClientError:
    response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}, **extra}
    return ClientError(response, "UpdateItem")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (_client_error("ConditionalCheckFailedException"), ErrorKind.CONDITION_FAILED),
        (_client_error("ProvisionedThroughputExceededException"), ErrorKind.THROTTLED),
        (_client_error("ThrottlingException"), ErrorKind.THROTTLED),
        (_client_error("TransactionConflictException"), ErrorKind.THROTTLED),
        (_client_error("InternalServerError", 500), ErrorKind.UNAVAILABLE),
        (_client_error("SomethingNew", 503), ErrorKind.UNAVAILABLE),
        (_client_error("ValidationException"), ErrorKind.REJECTED),
        (_client_error("ResourceNotFoundException"), ErrorKind.REJECTED),
        (ReadTimeoutError(endpoint_url="http://x"), ErrorKind.REPLY_LOST),
        (EndpointConnectionError(endpoint_url="http://x"), ErrorKind.CONNECTION),
    ],
)
def test_every_shape_of_error_has_one_kind(exc: Exception, kind: ErrorKind) -> None:
    assert classify(exc) is kind
    # pynamodb wraps the same error in .cause; the kind does not change
    assert classify(UpdateError("Failed to update item", exc)) is kind


def test_a_read_timeout_inside_pynamodb_is_classified_not_an_attribute_error() -> None:
    """pynamodb's own cause_response_code raises AttributeError here (response is None)."""
    wrapped = PutError("Failed to put item", ReadTimeoutError(endpoint_url="http://x"))
    with pytest.raises(AttributeError):
        _ = wrapped.cause_response_code
    assert error_code(wrapped) == "ReadTimeoutError"
    assert classify(wrapped).maybe_applied and classify(wrapped).transient


def test_refusals_carry_their_old_image_and_cancellation_reasons() -> None:
    refused = _client_error("ConditionalCheckFailedException", Item={"job": {"S": "a"}, "fence": {"N": "3"}})

    class Refusing:  # a client whose update is refused with the item it saw
        def update_item(self, **_: object) -> None:
            raise refused

    seen = write(Refusing(), "update_item", {"TableName": "t", "Key": {}, "ConditionExpression": "x"}, "a write")
    assert isinstance(seen, Refused) and seen.item == {"job": "a", "fence": 3}  # read by `deserialized`
    cancelled = _client_error(
        "TransactionCanceledException",
        CancellationReasons=[{"Code": "None"}, {"Code": "ConditionalCheckFailed", "Item": {"k": {"S": "v"}}}],
    )
    assert classify(TransactWriteError("x", cancelled)) is ErrorKind.TRANSACTION_CANCELED
    assert cancellation_codes(cancelled) == ["None", "ConditionalCheckFailed"]
    conflicted = _client_error("TransactionCanceledException", CancellationReasons=[{"Code": "TransactionConflict"}])
    assert classify(conflicted) is ErrorKind.THROTTLED


def test_only_ambiguous_kinds_may_have_been_applied() -> None:
    assert {k for k in ErrorKind if k.maybe_applied} == {ErrorKind.UNAVAILABLE, ErrorKind.REPLY_LOST}
    assert not ErrorKind.CONDITION_FAILED.transient and not ErrorKind.REJECTED.transient
