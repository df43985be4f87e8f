"""Test support shared by every test package: sample events, catalog tables,
request counting, a Lambda context stub. Import as `from tests.support import ...`
(a module named conftest is ambiguous once several test folders have one)."""

from __future__ import annotations

import json
import os
import pathlib
from dataclasses import dataclass
from typing import Iterator, Mapping

import boto3

from jobfence.registry import TableSpec
from jobs.catalog import CATALOG
from ops import tables as ops_tables
from ops.tables import table_request

ROOT = pathlib.Path(__file__).resolve().parents[1]
EVENTS = ROOT / "events"


def load_event(name: str) -> dict:
    """A sample event from `events/` (the same files the operator CLI invokes with)."""
    return json.loads((EVENTS / f"{name}.json").read_text())


def create_table(client, physical_name: str, spec: TableSpec) -> str:
    """Create a table exactly as the catalog describes it (keys and indexes)."""
    client.create_table(**table_request(physical_name, spec))
    return physical_name


def create_catalog_tables(client, names=None) -> dict[str, str]:
    """Create the catalog's tables (all, or the named ones); return logical -> physical."""
    return ops_tables.create_catalog_tables(client, names)


class CatalogTables(Mapping[str, str]):
    """The catalog's tables in moto, each created when first asked for: logical -> physical name.

    `tables("leases", "runs")` creates those two and returns them; `tables["leases"]`
    creates one on first use. Creating a table costs moto about 14 ms, so a test
    that needs two does not pay for all 26; iterating (handing the whole catalog
    to a handler's environment) creates every table.
    """

    def __init__(self, client) -> None:
        self._client = client
        self._created: dict[str, str] = {}

    def __call__(self, *names: str) -> dict[str, str]:
        unknown = [n for n in names if n not in CATALOG.tables]
        if unknown:
            raise KeyError(f"not catalog tables: {unknown}")
        missing = [n for n in names if n not in self._created]
        if missing:
            self._created.update(create_catalog_tables(self._client, missing))
        return {n: self._created[n] for n in names}

    def __getitem__(self, name: str) -> str:
        if name not in CATALOG.tables:
            raise KeyError(name)
        return self(name)[name]

    def created(self) -> dict[str, str]:
        """The tables created so far (reading it creates none)."""
        return dict(self._created)

    def __iter__(self) -> Iterator[str]:
        self(*CATALOG.tables)
        return iter(CATALOG.tables)

    def __len__(self) -> int:
        return len(CATALOG.tables)

    def __contains__(self, name: object) -> bool:
        return name in CATALOG.tables


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



# -- club event signing keys -------------------------------------------------------------------

SAMPLE_SIGNING_SEED = bytes(range(32))  # the private key events/discord_batch.json is signed with (tests only)


def signing_pair(seed: bytes | None = None):
    """A `KeyPair` (jobs.club.signing): fixed for a given 32-byte seed, random without one."""
    from jobs.club.signing import new_key_pair

    return new_key_pair(seed)


def signing_keys(clock, seed: bytes | None = None):
    """(signer keys, verify keyring, the MemorySecrets holding both) for one pair."""
    from jobs.club.signing import SigningKeys, VerifyKeyring
    from providers.secrets import MemorySecrets

    pair = signing_pair(seed)
    secrets = MemorySecrets({"signing": pair.signing_value, "verify": pair.verify_value})
    return SigningKeys(secrets, "signing"), VerifyKeyring(secrets, "verify", clock), secrets


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
