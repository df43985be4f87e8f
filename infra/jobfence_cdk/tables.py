"""One DynamoDB table per catalog `TableSpec` (the core leases and runs included).

On-demand, point-in-time recovery, AWS-managed KMS encryption, deletion
protection (and retained when the stack drops it), the TTL attribute where rows
expire and every global secondary index of the spec.
Physical names are "<prefix>-<logical>" so the runbook can name them.

A table the app already has is passed in instead (`existing`: logical name -> an `ITable`, e.g.
`Table.from_table_name(...)` or a `Table` of the app's own stack): nothing is created for it, and the
functions get its name and grants on its ARN, as for a created one. A `Table` of the same app is checked
against its spec's keys; an imported one cannot be read at synthesis, so the app vouches for its keys,
indexes and TTL attribute (the spec's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import CfnOutput, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from jobfence.registry import CatalogError, Registry, TableSpec

_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
_PROJECTIONS = {"ALL": dynamodb.ProjectionType.ALL, "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY}


def _attribute(key: tuple[str, str]) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=key[0], type=_TYPES[key[1]])


class CatalogTables(Construct):
    """Attributes: `tables` (logical name -> the table, created or passed in), `created` (those created here)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        catalog: Registry,
        prefix: str,
        existing: Mapping[str, dynamodb.ITable] | None = None,
    ) -> None:
        existing = dict(existing or {})
        check_existing(catalog, existing)
        super().__init__(scope, construct_id)
        self.created: dict[str, dynamodb.Table] = {
            name: self._table(spec, prefix) for name, spec in sorted(catalog.tables.items()) if name not in existing
        }
        self.tables: dict[str, dynamodb.ITable] = {**self.created, **existing}
        for name, table in sorted(existing.items()):
            spec = catalog.tables[name]
            CfnOutput(self, f"{pascal(name)}Name", value=table.table_name, description=spec.description or name)

    def _table(self, spec: TableSpec, prefix: str) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            pascal(spec.name),
            table_name=f"{prefix}-{spec.name}",
            partition_key=_attribute(spec.partition_key),
            sort_key=_attribute(spec.sort_key) if spec.sort_key else None,
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            time_to_live_attribute=spec.ttl_attribute,
            # Rows are the system's state (leases, runs, batches): never dropped by a stack change (RETAIN),
            # nor by a DeleteTable call from anyone (deletion protection: turn it off first, on purpose).
            removal_policy=RemovalPolicy.RETAIN,
            deletion_protection=True,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition_key),
                sort_key=_attribute(index.sort_key) if index.sort_key else None,
                projection_type=_PROJECTIONS[index.projection],
            )
        CfnOutput(self, f"{pascal(spec.name)}Name", value=table.table_name, description=spec.description or spec.name)
        return table


def check_existing(catalog: Registry, existing: Mapping[str, dynamodb.ITable]) -> None:
    """Refuse an existing table the catalog does not declare, or a `Table` whose keys are not its spec's."""
    for name, table in sorted(existing.items()):
        if name not in catalog.tables:
            raise CatalogError(
                f"existing table {name!r}: the catalog declares no such table ({sorted(catalog.tables)})"
            )
        if not isinstance(table, dynamodb.Table):
            continue  # imported: its schema is not known at synthesis
        spec, schema = catalog.tables[name], table.schema_v2()
        keys = (_key(schema.partition_keys), _key(schema.sort_keys))
        if keys != (spec.partition_key, spec.sort_key):
            raise CatalogError(
                f"existing table {name!r}: its keys {keys} are not the spec's {(spec.partition_key, spec.sort_key)}"
            )


def _key(attributes: Sequence[dynamodb.Attribute]) -> tuple[str, str] | tuple[tuple[str, str], ...] | None:
    """A table's key as a spec writes it: (name, "S"|"N"), None without one (several: a multi-attribute key)."""
    codes = {kind: code for code, kind in _TYPES.items()}
    found = tuple((a.name, codes.get(a.type, str(a.type))) for a in attributes)
    return found[0] if len(found) == 1 else (found or None)


def pascal(name: str) -> str:
    """A construct id for a snake_case catalog name ("clean_runs" -> "CleanRuns")."""
    return "".join(part.capitalize() for part in name.split("_"))
