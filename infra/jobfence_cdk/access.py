"""Environment and grants of a function, derived from its catalog entry.

`CatalogResources` holds the stack's tables, queues and secrets by logical
name. For a job or queue spec it gives the environment (the variable names
are `jobfence.config` constants, shared with the runtime) and the grants:

- leases and runs: a scheduled function may touch only its own job's items
  (IAM condition `dynamodb:LeadingKeys` = job name), with only the actions the
  lease and run stores use; the missed-run auditor may also get the lease items
  and query the run rows of the jobs it `audits`, under LeadingKeys = those jobs;
- domain tables: one action per declared verb (`jobfence.registry.ACCESS_VERBS`:
  "query+delete", "get+update", "read+scan", ...; Scan only where a store scans), on the
  table and its catalog indexes by name (the CDK helpers grant `index/*`, stream reads,
  DescribeTable and Scan, which nothing here needs);
- a table keyed by job (the club outbox): the same actions, only under
  `dynamodb:LeadingKeys` = the job's own name, so a job reads and writes only its own rows;
- a tenant-scoped table (the listings' batches, items and quota, `TableSpec.tenant_scoped`): nothing
  on the table to the function's role (only Query on its keys-only indexes, when it declares a query); the
  same actions go to a *tenant role* of the function's own, which only that role may assume, tagging the
  session `tenant` (and no other tag), and which may touch an item only where every partition key of the
  request is the tag or starts with the tag and '#' (`TENANT_LEADING_KEYS`); its ARN is `TENANT_ROLE_ARN`
  (`jobfence.tenants`, docs/security.md "Tenant isolation");
- queues: send only, and a worker never gets send on its own queue unless it lists it;
  secrets: read only, and only for the entries that list them (each secret's resource
  policy also denies every other principal: `infra/jobfence_cdk/secrets.py`).

Secrets are passed as their fixed names (literals, never references), so a
deploy into an emulator that skips Secret resources keeps the variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sqs as sqs

from jobfence.config import (
    DEFAULT_PREFIX,
    ENV_JOB_NAME,
    ENV_LEASES_TABLE,
    ENV_METRICS_NAMESPACE,
    ENV_RUNS_TABLE,
    ENV_TENANT_ROLE,
    PROVIDER_DEFAULT_URLS,
    config_env,
    provider_env,
    queue_env,
    secret_env,
    secret_name,
    table_env,
)
from jobfence.core_access import core_access
from jobfence.registry import (
    ACCESS_VERBS,
    LEASES_TABLE,
    RUNS_TABLE,
    JobSpec,
    QueueSpec,
    access_actions,
)
from jobfence.tenants import TENANT_TAG
from jobfence_cdk.validation import providers_of

# Every partition key of a tenant session's request: its tenant's own rows (batch and quota rows), or rows keyed
# tenant#... (items, tallies, in-flight holds). '#' never occurs in a tenant id, and STS refuses '*', '?', '#'
# and '$' in a tag value, so the tag can neither reach another tenant's prefix nor widen the pattern.
PRINCIPAL_TENANT = "${aws:PrincipalTag/" + TENANT_TAG + "}"
TENANT_LEADING_KEYS = (PRINCIPAL_TENANT, PRINCIPAL_TENANT + "#*")
TENANT_CONDITIONS = {
    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": list(TENANT_LEADING_KEYS)},
    # ForAllValues is vacuously true for a request without partition keys: require them
    "Null": {"dynamodb:LeadingKeys": "false"},
}
# Who may assume a tenant role: its own function, naming exactly one session tag, `tenant`, not empty.
TENANT_TRUST_CONDITIONS = {
    "StringLike": {f"aws:RequestTag/{TENANT_TAG}": "?*"},
    "ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]},
}


# Only key-bearing actions are granted under the LeadingKeys condition: ForAllValues is
# vacuously true for a request without a partition key (Scan), so the registry refuses "scan"
# on a job-keyed table and `actions_of` would drop it anyway.
def actions_of(access: str, keyed_by_job: bool = False) -> tuple[str, ...]:
    """The DynamoDB actions of a declared access (key-bearing ones only for a job-keyed table)."""
    actions = access_actions(access)
    if keyed_by_job:
        actions = tuple(a for a in actions if a != ACCESS_VERBS["scan"])
    return actions


@dataclass
class CatalogResources:
    """The stack's tables (created or existing: grants name the table's ARN either way), queues and secrets by
    logical name."""

    tables: dict[str, dynamodb.ITable] = field(default_factory=dict)
    indexes: dict[str, tuple[str, ...]] = field(default_factory=dict)  # table -> its index names
    keyed_by_job: frozenset[str] = frozenset()  # tables whose partition key is the job
    tenant_scoped: frozenset[str] = frozenset()  # tables reached only through a tenant role
    prefix: str = DEFAULT_PREFIX  # the stage: secret names are "<prefix>/<logical>"
    readers: dict[str, list[iam.IRole]] = field(default_factory=dict)  # secret -> roles granted it
    queues: dict[str, sqs.IQueue] = field(default_factory=dict)
    secrets: dict[str, secretsmanager.ISecret] = field(default_factory=dict)

    def environment(self, spec: JobSpec | QueueSpec) -> dict[str, str]:
        """Every variable the spec's function reads (see `jobfence.config`)."""
        env = {
            "POWERTOOLS_SERVICE_NAME": spec.subsystem,
            ENV_METRICS_NAMESPACE: self.prefix,  # the stage: its alarms count only its own runs
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
            env[secret_env(name)] = secret_name(name, self.prefix)
        for name, value in sorted(getattr(spec, "config", {}).items()):
            env[config_env(name)] = value
        for name in providers_of(spec):
            env[provider_env(name)] = PROVIDER_DEFAULT_URLS[name]
        return env

    def grant(self, grantee: iam.IGrantable, spec: JobSpec | QueueSpec) -> None:
        """Grant exactly what the spec declares, and for a job its own lease and run items."""
        if isinstance(spec, JobSpec):
            for core in core_access():
                self._grant_own_items(grantee, self.tables[core.table], access_actions(core.own), spec.name)
                if spec.audits:  # the auditor: read only, only the audited jobs' items
                    self._grant_own_items(grantee, self.tables[core.table], access_actions(core.audit), *spec.audits)
        tenant_statements: list[iam.PolicyStatement] = []
        for name, access in sorted(spec.tables.items()):
            table = self.tables[name]
            if name in self.tenant_scoped:
                tenant_statements.append(
                    iam.PolicyStatement(
                        actions=list(actions_of(access, keyed_by_job=True)),
                        resources=[table.table_arn],
                        conditions=TENANT_CONDITIONS,
                    )
                )
                indexes = self.indexes.get(name, ())
                if indexes and ACCESS_VERBS["query"] in actions_of(access):  # keys only: ids, never a payload
                    grantee.grant_principal.add_to_principal_policy(
                        iam.PolicyStatement(
                            actions=[ACCESS_VERBS["query"]],
                            resources=[f"{table.table_arn}/index/{index}" for index in indexes],
                        )
                    )
                continue
            if name in self.keyed_by_job and isinstance(spec, JobSpec):
                self._grant_own_items(grantee, table, actions_of(access, keyed_by_job=True), spec.name)
                continue
            grantee.grant_principal.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=list(actions_of(access)),
                    resources=[table.table_arn]
                    + [f"{table.table_arn}/index/{index}" for index in self.indexes.get(name, ())],
                )
            )
        if tenant_statements:
            self._tenant_role(grantee, tenant_statements)
        for name in sorted(spec.queues):
            self.queues[name].grant_send_messages(grantee)
        for name in sorted(spec.secrets):
            self.secrets[name].grant_read(grantee)
            if isinstance(grantee, lambda_.Function) and grantee.role is not None:
                self.readers.setdefault(name, []).append(grantee.role)

    @staticmethod
    def _tenant_role(grantee: iam.IGrantable, statements: list[iam.PolicyStatement]) -> iam.Role:
        """The function's tenant role: assumable by the function's role alone, with the `tenant` session tag."""
        if not isinstance(grantee, lambda_.Function) or grantee.role is None:
            raise TypeError("a tenant-scoped table is granted to a function with a role of its own")
        own = grantee.role
        role = iam.Role(
            grantee,
            "TenantRole",
            assumed_by=iam.ArnPrincipal(own.role_arn).with_conditions(TENANT_TRUST_CONDITIONS).with_session_tags(),
            description="one tenant's rows of the tenant-scoped tables, under the session tag tenant",
            max_session_duration=Duration.hours(1),
        )
        for statement in statements:
            role.add_to_policy(statement)
        own.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["sts:AssumeRole", "sts:TagSession"],
                resources=[role.role_arn],
                conditions=TENANT_TRUST_CONDITIONS,
            )
        )
        grantee.add_environment(ENV_TENANT_ROLE, role.role_arn)
        return role

    @staticmethod
    def _grant_own_items(grantee: iam.IGrantable, table: dynamodb.ITable, actions, *jobs: str) -> None:
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                actions=list(actions),
                resources=[table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": list(jobs)}},
            )
        )
