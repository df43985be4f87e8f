"""Catalog tables created straight in moto (or any emulator) from their `TableSpec`s.

The deployed system gets its tables from the CDK template; a test, the fault
simulator and the benchmarks need the same keys and indexes without a stack.
`CatalogTables` creates each table the first time a test asks for it, so a
test that needs two tables does not pay for the whole catalog.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jobfence.registry import Registry, TableSpec


def table_request(physical: str, spec: TableSpec) -> dict[str, Any]:
    """The CreateTable request of a catalog table (on-demand; keys and indexes as declared)."""
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
    request: dict[str, Any] = {
        "TableName": physical,
        "KeySchema": schema,
        "AttributeDefinitions": [{"AttributeName": k, "AttributeType": t} for k, t in attrs.items()],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        request["GlobalSecondaryIndexes"] = indexes
    return request


def create_tables(
    client: Any, registry: Registry, names: Iterable[str] | None = None, suffix: str | None = None
) -> dict[str, str]:
    """Create the registry's tables (all, or the named ones); return logical -> physical name."""
    wanted = set(names) if names is not None else None
    if wanted is not None and not wanted <= set(registry.tables):
        raise KeyError(f"not catalog tables: {sorted(wanted - set(registry.tables))}")
    created = {}
    _setup.active = True
    try:
        for name, spec in registry.tables.items():
            if wanted is None or name in wanted:
                physical = f"jobfence-{name}-{suffix or uuid.uuid4().hex[:6]}"
                client.create_table(**table_request(physical, spec))
                created[name] = physical
    finally:
        _setup.active = False
    return created


_setup = threading.local()  # set while this thread creates tables (a lazy table can be made in the middle of a tick)


def creating_tables() -> bool:
    """Whether this thread is creating catalog tables now: the test's setup, not its job's calls (`grants`)."""
    return getattr(_setup, "active", False)


class CatalogTables(Mapping[str, str]):
    """A registry's tables in moto, each created when first asked for: logical -> physical name.

    `tables("leases", "runs")` creates those two and returns them; `tables["leases"]`
    creates one on first use. Creating a table costs moto about 14 ms, so a test
    that needs two does not pay for all of them; iterating (handing the whole
    catalog to a handler's environment) creates every table.
    """

    def __init__(self, client: Any, registry: Registry) -> None:
        self._client = client
        self._registry = registry
        self._created: dict[str, str] = {}

    def __call__(self, *names: str) -> dict[str, str]:
        missing = [n for n in names if n not in self._created]
        if missing:
            self._created.update(create_tables(self._client, self._registry, missing))
        return {n: self._created[n] for n in names}

    def __getitem__(self, name: str) -> str:
        if name not in self._registry.tables:
            raise KeyError(name)
        return self(name)[name]

    def created(self) -> dict[str, str]:
        """The tables created so far (reading it creates none)."""
        return dict(self._created)

    def __iter__(self) -> Iterator[str]:
        self(*self._registry.tables)
        return iter(self._registry.tables)

    def __len__(self) -> int:
        return len(self._registry.tables)

    def __contains__(self, name: object) -> bool:
        return name in self._registry.tables


def created_tables(tables: Mapping[str, str]) -> Mapping[str, str]:
    """The tables that exist: a lazy `CatalogTables`' created ones (reading the rest would create them), else all."""
    return tables.created() if isinstance(tables, CatalogTables) else tables
