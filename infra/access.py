"""Environment and grants of a function, derived from its catalog entry.

`CatalogResources` holds the stack's tables, queues and secrets by logical
name. For a job or queue spec it gives the environment (the variable names
are `jobfence.config` constants, shared with the runtime) and the grants:

- leases and runs: a scheduled function may touch only its own job's items
  (IAM condition `dynamodb:LeadingKeys` = job name), with only the actions the
  lease and run stores use;
- domain tables: the data actions of `grant_read_data` / `grant_read_write_data` by declared
  access, on the table and its catalog indexes by name (the CDK helpers grant `index/*` and
  stream reads, which nothing here uses and cdk-nag rightly flags as a wildcard);
- queues: send only; secrets: read only, and only for the entries that list them.

Secrets are passed as their fixed names (literals, never references), so a
deploy into an emulator that skips Secret resources keeps the variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs

from jobfence.config import (
    ENV_JOB_NAME,
    ENV_LEASES_TABLE,
    ENV_RUNS_TABLE,
    METRICS_NAMESPACE,
    PROVIDER_DEFAULT_URLS,
    provider_env,
    queue_env,
    secret_env,
    secret_name,
    table_env,
)
from jobfence.registry import LEASES_TABLE, RUNS_TABLE, JobSpec, QueueSpec
from infra.validation import providers_of

# Only key-bearing actions are granted under the LeadingKeys condition: ForAllValues is
# vacuously true for a request without a partition key (Scan), so Scan must never be added here.
# What the lease store (peek, acquire, renew, release, fence check) and the run store
# (start = put, finish and died = update, a read after a refusal without old image, recent)
# call on the core tables; a fenced write adds ConditionCheckItem.
LEASE_ACTIONS = ("dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem")
RUN_ACTIONS = ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query", "dynamodb:UpdateItem")
READ_ACTIONS = (
    "dynamodb:BatchGetItem", "dynamodb:ConditionCheckItem", "dynamodb:DescribeTable",
    "dynamodb:GetItem", "dynamodb:Query", "dynamodb:Scan",
)
WRITE_ACTIONS = ("dynamodb:BatchWriteItem", "dynamodb:DeleteItem", "dynamodb:PutItem", "dynamodb:UpdateItem")


@dataclass
class CatalogResources:
    """The stack's tables, queues and secrets by logical name."""

    tables: dict[str, dynamodb.Table] = field(default_factory=dict)
    indexes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> its index names
    queues: dict[str, sqs.IQueue] = field(default_factory=dict)
    secrets: dict[str, secretsmanager.ISecret] = field(default_factory=dict)

    def environment(self, spec: JobSpec | QueueSpec) -> dict[str, str]:
        """Every variable the spec's function reads (see `jobfence.config`)."""
        env = {
            "POWERTOOLS_SERVICE_NAME": spec.subsystem,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        }
        if isinstance(spec, JobSpec):
            env[ENV_JOB_NAME] = spec.name
            env[ENV_LEASES_TABLE] = self.tables[LEASES_TABLE.name].table_name
            env[ENV_RUNS_TABLE] = self.tables[RUNS_TABLE.name].table_name
        for name in spec.tables:
            env[table_env(name)] = self.tables[name].table_name
        for name in spec.queues:
            env[queue_env(name)] = self.queues[name].queue_url
        for name in spec.secrets:
            env[secret_env(name)] = secret_name(name)
        for name in providers_of(spec):
            env[provider_env(name)] = PROVIDER_DEFAULT_URLS[name]
        return env

    def grant(self, grantee: iam.IGrantable, spec: JobSpec | QueueSpec) -> None:
        """Grant exactly what the spec declares, and for a job its own lease and run items."""
        if isinstance(spec, JobSpec):
            self._grant_own_items(grantee, self.tables[LEASES_TABLE.name], LEASE_ACTIONS, spec.name)
            self._grant_own_items(grantee, self.tables[RUNS_TABLE.name], RUN_ACTIONS, spec.name)
        for name, access in sorted(spec.tables.items()):
            table = self.tables[name]
            actions = READ_ACTIONS if access == "read" else READ_ACTIONS + WRITE_ACTIONS
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(actions),
                    resources=[table.table_arn]
                    + [f"{table.table_arn}/index/{index}" for index in self.indexes.get(name, ())],
                )
            )
        for name in sorted(spec.queues):
            self.queues[name].grant_send_messages(grantee)
        for name in sorted(spec.secrets):
            self.secrets[name].grant_read(grantee)

    @staticmethod
    def _grant_own_items(grantee: iam.IGrantable, table: dynamodb.Table, actions, job: str) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(actions),
                resources=[table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [job]}},
            )
        )
