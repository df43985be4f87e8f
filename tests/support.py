"""Test support shared by every test package: sample events, catalog tables,
request counting, a Lambda context stub. Import as `from tests.support import ...`
(a module named conftest is ambiguous once several test folders have one)."""

from __future__ import annotations

import json
import os
import pathlib
import uuid
from dataclasses import dataclass

import boto3

from jobfence.registry import TableSpec

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"


def load_event(name: str) -> dict:
    """A sample event from `events/` (the same files the operator CLI invokes with)."""
    return json.loads((EVENTS / f"{name}.json").read_text())


def create_table(client, physical_name: str, spec: TableSpec) -> str:
    """Create a table exactly as the catalog describes it (keys and indexes)."""
    attrs = {spec.partition_key[0]: spec.partition_key[1]}
    schema = [{"AttributeName": spec.partition_key[0], "KeyType": "HASH"}]
    if spec.sort_key:
        attrs[spec.sort_key[0]] = spec.sort_key[1]
        schema.append({"AttributeName": spec.sort_key[0], "KeyType": "RANGE"})
    indexes = []
    for index in spec.indexes:
        attrs[index.partition_key[0]] = index.partition_key[1]
        key = [{"AttributeName": index.partition_key[0], "KeyType": "HASH"}]
        if index.sort_key:
            attrs[index.sort_key[0]] = index.sort_key[1]
            key.append({"AttributeName": index.sort_key[0], "KeyType": "RANGE"})
        indexes.append({"IndexName": index.name, "KeySchema": key, "Projection": {"ProjectionType": index.projection}})
    kwargs = dict(
        TableName=physical_name,
        KeySchema=schema,
        AttributeDefinitions=[{"AttributeName": k, "AttributeType": t} for k, t in attrs.items()],
        BillingMode="PAY_PER_REQUEST",
    )
    if indexes:
        kwargs["GlobalSecondaryIndexes"] = indexes
    client.create_table(**kwargs)
    return physical_name


def create_catalog_tables(client, names=None) -> dict[str, str]:
    """Create the catalog's tables (all, or the named ones); return logical -> physical."""
    from jobs.catalog import CATALOG

    created = {}
    for name, spec in CATALOG.tables.items():
        if names is None or name in names:
            created[name] = create_table(client, f"{name}-{uuid.uuid4().hex[:6]}", spec)
    return created


@dataclass
class LambdaContext:
    """Enough of the Lambda context for Powertools and the runner."""

    function_name: str = "jobfence-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:jobfence-test"
    aws_request_id: str = "req-0"
    remaining_ms: int = 300_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


class ServerSession:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._session = boto3.Session(region_name=os.environ["AWS_DEFAULT_REGION"])

    def client(self, name: str, **kwargs):
        return self._session.client(name, endpoint_url=self.endpoint, **kwargs)


class RequestCounter:
    """Counts AWS requests per operation through botocore's own event hooks (what went on the wire)."""

    WRITES = {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
    }

    def __init__(self) -> None:
        self.calls: list[str] = []

    def attach(self, client):
        client.meta.events.register("before-call.*.*", self._count)
        return client

    def _count(self, model, **_kwargs):
        self.calls.append(model.name)

    def count(self, operation: str) -> int:
        return self.calls.count(operation)

    @property
    def writes(self) -> int:
        return sum(1 for c in self.calls if c in self.WRITES)

    def reset(self) -> None:
        self.calls.clear()


def request_counter() -> RequestCounter:
    return RequestCounter()

