"""The jobfence CDK app: one stack composed of constructs derived from the catalog.

`JobfenceStack` composes; each construct module owns one concern (tables,
scheduled jobs, work queues, secrets, the health API, monitoring) and exposes
its resources as attributes. Nothing here is specific to one job: every rule,
function, environment variable, grant and alarm comes from `jobs.catalog.CATALOG`.
"""

from infra.stack import JobfenceStack

__all__ = ["JobfenceStack"]
