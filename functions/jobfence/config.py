"""Environment contract of every function, validated once at cold start.

The variable names are constants shared by `infra/jobfence_cdk/` (which sets them) and the
runtime (which reads them), so the two cannot drift apart. A missing or bad
variable raises `SettingsError` naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from jobfence.errors import SettingsError

ENV_JOB_NAME = "JOB_NAME"
ENV_LEASES_TABLE = "LEASES_TABLE"
ENV_RUNS_TABLE = "RUNS_TABLE"
ENV_TABLE_PREFIX = "TABLE_"
ENV_QUEUE_PREFIX = "QUEUE_"
ENV_SECRET_PREFIX = "SECRET_"
ENV_PROVIDER_PREFIX = "PROVIDER_"
ENV_CONFIG_PREFIX = "CONFIG_"  # a catalog entry's static settings (JobSpec.config)
ENV_FUNCTION_PREFIX = "FUNCTION_"  # another job's function this one may invoke (the auditor's catch-ups), by job name
ENV_WORKER_QUEUE = "WORKER_QUEUE"  # a queue worker's own queue (catalog name): selects its pipeline
ENV_RULE_ARN = "RULE_ARN"  # a scheduled function's own EventBridge rule: the only source of its ticks
# arn:<partition>:events:<region>:<account>:rule/<name> (a rule on the default bus: the only kind a job has)
RULE_ARN_PATTERN = r"^arn:aws[a-z-]*:events:[a-z0-9-]{1,32}:[0-9]{12}:rule/[A-Za-z0-9._-]{1,64}$"

# The role a function assumes, tagged with one tenant, to reach that tenant's rows of the tenant-scoped tables
# (`jobfence.tenants`); set by infra on every function granted such a table. Unset: the function's own role.
ENV_TENANT_ROLE = "TENANT_ROLE_ARN"
TENANT_ROLE_ARN_PATTERN = r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$"

# Real base URLs of the external HTTP APIs; the local runtime points these at loopback stubs.
PROVIDER_DEFAULT_URLS = {
    "paypal": "https://api-m.paypal.com",
    "discord": "https://discord.com/api/v10",
    # seed 003's providers are not named by the write-up: reserved .example hosts until a deploy sets real ones
    "generator": "https://listing-generator.example/api",
    "publisher": "https://marketplace.example/api",
}
DEFAULT_PREFIX = "jobfence"  # the stage prefix (CDK context `prefix`) of the stack and every physical name

METRICS_NAMESPACE = DEFAULT_PREFIX  # the default stage's; a stage's functions get their prefix in ENV_METRICS_NAMESPACE
ENV_METRICS_NAMESPACE = "POWERTOOLS_METRICS_NAMESPACE"


def metrics_namespace(environ: Mapping[str, str]) -> str:
    """The stage's metric namespace (its prefix), so two stages' alarms never count each other's runs."""
    return environ.get(ENV_METRICS_NAMESPACE) or METRICS_NAMESPACE


def table_env(logical_name: str) -> str:
    """Environment variable that carries the physical name of a logical table."""
    return ENV_TABLE_PREFIX + logical_name.upper()


def queue_env(logical_name: str) -> str:
    """Environment variable that carries the URL of a logical queue."""
    return ENV_QUEUE_PREFIX + logical_name.upper()


def secret_env(logical_name: str) -> str:
    """Environment variable that carries the name (not the value) of a logical secret."""
    return ENV_SECRET_PREFIX + logical_name.upper()


def config_env(name: str) -> str:
    """Environment variable that carries one of a catalog entry's static settings."""
    return ENV_CONFIG_PREFIX + name.upper()


def function_env(job: str) -> str:
    """Environment variable that carries the function name of a job this function may invoke."""
    return ENV_FUNCTION_PREFIX + job.upper()


def provider_env(name: str) -> str:
    """Environment variable that carries the base URL of an external provider's API."""
    return f"{ENV_PROVIDER_PREFIX}{name.upper()}_URL"


def secret_name(logical_name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The fixed Secrets Manager name of a logical secret in the stage `prefix` ("<prefix>/<logical>").

    Names are fixed (not generated), so environment variables carry literals, not references.
    """
    return f"{prefix}/{logical_name}"


def _granted(names: Mapping[str, str], name: str, env: str, lacks: str) -> str:
    """`names[name]`, or a `SettingsError` naming the unset variable (`lacks`: what the function then has not)."""
    try:
        return names[name]
    except KeyError:
        raise SettingsError(f"{env} is not set: this function {lacks}") from None


def _prefixed(environ: Mapping[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix) :].lower(): v for k, v in environ.items() if k.startswith(prefix) and v}


class Settings(BaseModel):
    """What every function reads from its environment (jobfence-cdk sets it from the catalog entry).

    Built once at cold start by `from_environ`; each lookup of a name the function was not given raises
    `SettingsError` naming the variable, so a missing grant fails at the first use, not as a bare `KeyError`.
    """

    # each model's validator is built on its first use: a function validates one kind of environment
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore", defer_build=True)

    tables: dict[str, str] = Field(default_factory=dict)
    """Logical table name -> physical name, from `TABLE_<NAME>` (`table(name)`)."""
    queues: dict[str, str] = Field(default_factory=dict)
    """Logical queue name -> URL, from `QUEUE_<NAME>` (`queue(name)`)."""
    secrets: dict[str, str] = Field(default_factory=dict)
    """Logical secret name -> the secret's name (not its value), from `SECRET_<NAME>` (`secret(name)`)."""
    providers: dict[str, str] = Field(default_factory=dict)
    """External API name -> base URL, from `PROVIDER_<NAME>_URL` (`provider_url(name)`)."""
    config: dict[str, str] = Field(default_factory=dict)
    """The entry's static settings (`JobSpec.config`), from `CONFIG_<NAME>` (`setting(name)`)."""
    functions: dict[str, str] = Field(default_factory=dict)
    """Job name -> the function of another job this one may invoke, from `FUNCTION_<NAME>` (`function(job)`)."""
    tenant_role_arn: str | None = Field(default=None, alias=ENV_TENANT_ROLE, pattern=TENANT_ROLE_ARN_PATTERN)
    """The tenant-scoped role (`ENV_TENANT_ROLE`): None when the function reaches its tables as itself."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Self:
        """Validate the environment; raise `SettingsError` naming what is wrong."""
        data: dict[str, Any] = dict(environ)
        data["tables"] = _prefixed(environ, ENV_TABLE_PREFIX)
        data["queues"] = _prefixed(environ, ENV_QUEUE_PREFIX)
        data["secrets"] = _prefixed(environ, ENV_SECRET_PREFIX)
        data["config"] = _prefixed(environ, ENV_CONFIG_PREFIX)
        data["functions"] = _prefixed(environ, ENV_FUNCTION_PREFIX)
        data["providers"] = {
            k[len(ENV_PROVIDER_PREFIX) : -len("_URL")].lower(): v
            for k, v in environ.items()
            if k.startswith(ENV_PROVIDER_PREFIX) and k.endswith("_URL") and v
        }
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                name = ".".join(str(p) for p in err["loc"]) or "environment"
                problems.append(f"{name}: {err['msg']}")
            raise SettingsError("invalid function environment: " + "; ".join(problems)) from None

    def table(self, logical_name: str) -> str:
        """Physical name of a logical table this function was granted."""
        return _granted(self.tables, logical_name, table_env(logical_name), f"has no table {logical_name!r}")

    def queue(self, logical_name: str) -> str:
        """URL of a logical queue this function was granted."""
        return _granted(self.queues, logical_name, queue_env(logical_name), f"has no queue {logical_name!r}")

    def secret(self, logical_name: str) -> str:
        """Name of a logical secret this function may read."""
        return _granted(self.secrets, logical_name, secret_env(logical_name), f"has no secret {logical_name!r}")

    def setting(self, name: str) -> str:
        """One of the entry's static settings (`JobSpec.config`)."""
        return _granted(self.config, name, config_env(name), f"has no setting {name!r}")

    def function(self, job: str) -> str:
        """Name of another job's function this function may invoke."""
        return _granted(self.functions, job, function_env(job), f"may not invoke job {job!r}")

    def provider_url(self, name: str) -> str:
        """Base URL of an external provider this function calls."""
        return _granted(self.providers, name, provider_env(name), f"calls no provider {name!r}")


class ScheduledSettings(Settings):
    """Environment of a scheduled-job function: the job it runs, the core tables, its own rule.

    The runner's handler builds it at cold start (`ScheduledSettings.from_environ(os.environ)`) and gives it
    to the job's factory as `JobDeps.settings`; a test gets the same from `JobHarness.deps()`.
    """

    job_name: str = Field(alias=ENV_JOB_NAME, min_length=1)
    """The catalog job this function runs (`JOB_NAME`, lower_snake_case): one not in the catalog fails closed."""
    leases_table: str = Field(alias=ENV_LEASES_TABLE, min_length=3)
    """The physical name of the leases table (`LEASES_TABLE`)."""
    runs_table: str = Field(alias=ENV_RUNS_TABLE, min_length=3)
    """The physical name of the runs table (`RUNS_TABLE`)."""
    rule_arn: str | None = Field(default=None, alias=ENV_RULE_ARN, pattern=RULE_ARN_PATTERN)
    """The function's own EventBridge rule (`RULE_ARN`, set by jobfence-cdk): a Scheduled Event must name it and
    its account. Without it every Scheduled Event is refused (`jobfence.triggers`); manual, catch-up and
    buffered triggers still run."""

    @field_validator("job_name")
    @classmethod
    def _job_name_shape(cls, value: str) -> str:
        if not value.replace("_", "").isalnum() or value.lower() != value:
            raise ValueError("must be a lower_snake_case job name")
        return value


class WorkerSettings(Settings):
    """Environment of a queue-worker function: which catalog queue it consumes.

    `WORKER_QUEUE` names it. Without it, a worker granted exactly one queue
    consumes that one (its own queue is always in its environment); anything
    else fails closed. A message never chooses.
    """

    worker_queue: str | None = Field(default=None, alias=ENV_WORKER_QUEUE, min_length=1)

    @property
    def own_queue(self) -> str:
        if self.worker_queue:
            return self.worker_queue
        if len(self.queues) == 1:
            return next(iter(self.queues))
        raise SettingsError(f"{ENV_WORKER_QUEUE} is not set and this worker was granted {len(self.queues)} queues")
