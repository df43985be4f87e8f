"""Test support shared by every test package: sample events, catalog tables,
request counting, a Lambda context stub. Import as `from tests.support import ...`
(a module named conftest is ambiguous once several test folders have one)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

import boto3
from boto3.dynamodb.types import TypeSerializer
from pynamodb.signals import pre_dynamodb_send

from jobfence.dynamo import deserialized
from jobfence.registry import TableSpec
from jobfence.testing.harness import aws_session
from jobfence.testing.harness import LambdaContext  # noqa: F401 (the kit's, imported from here by older tests)
from jobfence.testing.tables import CatalogTables as KitTables
from jobfence.testing.tables import create_tables, table_request
from jobs.catalog import CATALOG

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"


def load_event(name: str) -> dict:
    """A sample event from `events/` (the same files the operator CLI invokes with)."""
    return json.loads((EVENTS / f"{name}.json").read_text())


def delivered_now(event: dict, now_ms: int | None = None) -> dict:
    """A sample Scheduled Event as its rule delivers it now (`time` moved to `now_ms`, default the wall clock).

    A function accepts a tick only within the delivery tolerance of its clock (`jobfence.triggers`):
    the samples' fixed time is for a frozen clock.
    """
    import datetime as dt

    from jobfence.clock import SystemClock

    at = SystemClock().now_ms() if now_ms is None else now_ms
    return {**event, "time": dt.datetime.fromtimestamp(at // 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}


def documented_bounds(job: str) -> str:
    """The row of the job tables in docs/jobs.md that names `job` (its schedule, grants and batch bounds)."""
    for line in (ROOT / "docs" / "jobs.md").read_text().splitlines():
        if line.startswith(f"| `{job}` |"):
            return line
    raise AssertionError(f"docs/jobs.md has no row for {job}")


def create_table(client, physical_name: str, spec: TableSpec) -> str:
    """Create a table exactly as the catalog describes it (keys and indexes)."""
    client.create_table(**table_request(physical_name, spec))
    return physical_name


def create_catalog_tables(client, names=None) -> dict[str, str]:
    """Create the catalog's tables (all, or the named ones); return logical -> physical."""
    return create_tables(client, CATALOG, names)


class CatalogTables(KitTables):
    """This application's catalog tables in moto, each created when first asked for (`jobfence.testing.tables`)."""

    def __init__(self, client) -> None:
        super().__init__(client, CATALOG)


class ServerSession:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._session = aws_session(os.environ["AWS_DEFAULT_REGION"])  # the test kit's: one shared data loader

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



# -- club event signing keys -------------------------------------------------------------------

SAMPLE_SIGNING_SEED = bytes(range(32))  # the private key events/discord_batch.json is signed with (tests only)


def signing_pair(seed: bytes | None = None):
    """A `KeyPair` (jobs.club.signing): fixed for a given 32-byte seed, random without one."""
    from jobs.club.signing import new_key_pair

    return new_key_pair(seed)


TEST_SIGNER = "test_job"  # a signer the tests' grants allow every event type, in the guild "1"


def grants_for_tests() -> dict:
    """The worker's table (the catalog's) plus `TEST_SIGNER`, allowed every type in guild "1"."""
    from jobs.club.events import EventType
    from jobs.club.signers import SignerGrant, grants_from_catalog

    return {**grants_from_catalog(), TEST_SIGNER: SignerGrant.of((t.value for t in EventType), ("1",))}


def signing_keys(clock, seed: bytes | None = None, signer: str = TEST_SIGNER):
    """(`signer`'s signing keys, keyrings of every signer of `grants_for_tests` over this one pair's verify secret,
    the MemorySecrets holding both). Tests of who may sign as whom build distinct pairs (test_club_signers)."""
    from jobs.club.signers import SignerKeyrings
    from jobs.club.signing import SigningKeys, VerifyKeyring
    from providers.secrets import MemorySecrets

    pair = signing_pair(seed)
    secrets = MemorySecrets({"signing": pair.signing_value, "verify": pair.verify_value})
    keyrings = SignerKeyrings({name: VerifyKeyring(secrets, "verify", clock) for name in grants_for_tests()})
    return SigningKeys(secrets, "signing", signer), keyrings, secrets


def drive_powertools_cache(monkeypatch, clock) -> None:
    """Make Powertools' parameter cache read `clock` instead of the wall clock (its expiry is `datetime.now()`),
    so a test advances time past `max_age` instead of sleeping."""
    import datetime as real

    from aws_lambda_powertools.utilities.parameters import base

    class _ClockDatetime(real.datetime):
        @classmethod
        def now(cls, tz=None):
            return real.datetime.fromtimestamp(clock.now_ms() / 1000, tz)

    monkeypatch.setattr(base, "datetime", _ClockDatetime)


@contextlib.contextmanager
def dynamodb_operations() -> Iterator[list[str]]:
    """The DynamoDB operations every pynamodb model sends inside the block (pynamodb's own signal)."""
    sent: list[str] = []

    def record(sender: object, operation_name: str, table_name: str, req_uuid: str) -> None:
        sent.append(operation_name)

    pre_dynamodb_send.connect(record)
    try:
        yield sent
    finally:
        pre_dynamodb_send.disconnect(record)


@dataclass(frozen=True)
class Rows:
    """Rows of the catalog tables, read and changed on the wire as an operator would.

    A store's pynamodb model stays private to its store; a test checks what
    landed in a table (or plays another writer) with the boto3 client on the
    physical table instead. Values come back plain (numbers as int).
    """

    dynamodb: Any
    tables: Mapping[str, str]

    def get(self, name: str, *key: object) -> dict[str, Any] | None:
        """One row of catalog table `name` (strongly consistent), or None."""
        item = self.dynamodb.get_item(TableName=self.tables[name], Key=self._key(name, key), ConsistentRead=True).get("Item")
        return deserialized(item) if item is not None else None

    def count(self, name: str, partition: object = None) -> int:
        """Rows of catalog table `name` (all, or one partition's), strongly consistent."""
        kwargs: dict[str, Any] = {"TableName": self.tables[name], "Select": "COUNT", "ConsistentRead": True}
        call = self.dynamodb.scan
        if partition is not None:
            kwargs.update(KeyConditionExpression="#pk = :pk",
                          ExpressionAttributeNames={"#pk": CATALOG.tables[name].partition_key[0]},
                          ExpressionAttributeValues={":pk": _serializer.serialize(partition)})
            call = self.dynamodb.query
        total = 0
        while True:
            page = call(**kwargs)
            total += page["Count"]
            if "LastEvaluatedKey" not in page:
                return total
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def set(self, name: str, key: tuple, **values: object) -> None:
        """Overwrite attributes of one row (as the request path or another writer would)."""
        self.dynamodb.update_item(
            TableName=self.tables[name], Key=self._key(name, key),
            UpdateExpression="SET " + ", ".join(f"#a{i} = :v{i}" for i in range(len(values))),
            ExpressionAttributeNames={f"#a{i}": k for i, k in enumerate(values)},
            ExpressionAttributeValues={f":v{i}": _serializer.serialize(v) for i, v in enumerate(values.values())},
        )

    def put(self, name: str, **item: object) -> None:
        """Write one whole row of catalog table `name` as given (a record no store would write: bad data)."""
        self.dynamodb.put_item(TableName=self.tables[name], Item={k: _serializer.serialize(v) for k, v in item.items()})

    def delete(self, name: str, *key: object) -> None:
        self.dynamodb.delete_item(TableName=self.tables[name], Key=self._key(name, key))

    @staticmethod
    def _key(name: str, key: tuple) -> dict[str, Any]:
        spec = CATALOG.tables[name]
        names = [spec.partition_key[0]] + ([spec.sort_key[0]] if spec.sort_key else [])
        if len(key) != len(names):
            raise ValueError(f"table {name} is keyed by {names}, got {len(key)} value(s)")
        return {k: _serializer.serialize(v) for k, v in zip(names, key)}


_serializer = TypeSerializer()


class CountingSession:
    """A boto3 session that records the service of every client made from it."""

    def __init__(self) -> None:
        self.made: list[str] = []
        self._session = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")

    def client(self, service: str, **kwargs):
        self.made.append(service)
        return self._session.client(service, **kwargs)
