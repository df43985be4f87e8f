"""Catalog tables created directly in an emulator (tests, the lease scenario, benchmarks).

The deployed system gets its tables from the CDK template; this creates the
same keys and indexes straight from the catalog's `TableSpec`s, for runs that
need tables without a stack.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterable

from jobfence.registry import TableSpec


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


def create_catalog_tables(client: Any, names: Iterable[str] | None = None, suffix: str | None = None) -> dict[str, str]:
    """Create the catalog's tables (all, or the named ones); return logical -> physical."""
    from jobs.catalog import CATALOG

    wanted = set(names) if names is not None else None
    created = {}
    for name, spec in CATALOG.tables.items():
        if wanted is None or name in wanted:
            physical = f"jobfence-{name}-{suffix or uuid.uuid4().hex[:6]}"
            client.create_table(**table_request(physical, spec))
            created[name] = physical
    return created
