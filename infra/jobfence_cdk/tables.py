"""One DynamoDB table per catalog `TableSpec` (the core leases and runs included).

On-demand, point-in-time recovery, AWS-managed KMS encryption, deletion
protection (and retained when the stack drops it), the TTL attribute where rows
expire and every global secondary index of the spec.
Physical names are "<prefix>-<logical>" so the runbook can name them.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from jobfence.registry import Registry, TableSpec

_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
_PROJECTIONS = {"ALL": dynamodb.ProjectionType.ALL, "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY}


def _attribute(key: tuple[str, str]) -> dynamodb.Attribute:
    return dynamodb.Attribute(name=key[0], type=_TYPES[key[1]])


class CatalogTables(Construct):
    """Attribute `tables`: logical name -> Table."""

    def __init__(self, scope: Construct, construct_id: str, *, catalog: Registry, prefix: str) -> None:
        super().__init__(scope, construct_id)
        self.tables: dict[str, dynamodb.Table] = {
            name: self._table(spec, prefix) for name, spec in sorted(catalog.tables.items())
        }

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


def pascal(name: str) -> str:
    """A construct id for a snake_case catalog name ("clean_runs" -> "CleanRuns")."""
    return "".join(part.capitalize() for part in name.split("_"))
