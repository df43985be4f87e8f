"""Low-level `TransactWriteItems` entries, so a store can hand its conditional writes to a fenced transaction.

A store module owns every expression of its table; when a write must be
rejected after the job's lease was lost, the store returns entries built here
and the job passes them to `RunContext.fenced_write`, which puts the lease
check first. Values are plain Python (ints, strings, dicts) and are serialized
here, so no store repeats DynamoDB's type tags.
"""

from __future__ import annotations

from typing import Any, Mapping

from boto3.dynamodb.types import TypeSerializer

_serializer = TypeSerializer()


def _values(values: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _serializer.serialize(value) for name, value in values.items()}


def update(
    table: str,
    key: Mapping[str, Any],
    expression: str,
    condition: str,
    values: Mapping[str, Any] | None = None,
    names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An `Update` entry; ALL_OLD on a refused condition, so callers see the competing row."""
    entry: dict[str, Any] = {
        "TableName": table,
        "Key": _values(key),
        "UpdateExpression": expression,
        "ConditionExpression": condition,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if values:
        entry["ExpressionAttributeValues"] = _values(values)
    if names:
        entry["ExpressionAttributeNames"] = dict(names)
    return {"Update": entry}


def put(table: str, item: Mapping[str, Any], condition: str, names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A conditional `Put` entry."""
    entry: dict[str, Any] = {
        "TableName": table,
        "Item": _values({k: v for k, v in item.items() if v is not None}),
        "ConditionExpression": condition,
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
    if names:
        entry["ExpressionAttributeNames"] = dict(names)
    return {"Put": entry}
