"""Synthesis-time checks of the catalog: refuse what cannot be deployed safely.

The runtime registry already validates every entry at import; synthesis runs
the same validation again on whatever catalog it is handed (so a catalog
object that bypassed `Registry` is still refused), and adds the checks only
infrastructure cares about: handler and entry modules exist in the code
asset (the app's functions directory, which it passes in), names fit AWS
resource names, providers have a known base URL.
Every message names the offending entry.
"""

from __future__ import annotations

import pathlib
import re
from collections.abc import Iterable
from typing import Any

from jobfence.config import PROVIDER_DEFAULT_URLS
from jobfence.registry import CORE_TABLES, CatalogError, JobSpec, QueueSpec, Registry
from jobfence_cdk.schedule import tick_interval_s

SCHEDULED_HANDLER = "handlers.scheduled.handler"

# Lambda function names allow 64 characters; the longest name we derive is "<prefix>-<name>-worker".
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_MAX_DERIVED_NAME = 64
# A stage prefix names the stack, every physical resource and the secrets ("<prefix>/<logical>").
_PREFIX = re.compile(r"^[a-z][a-z0-9-]{0,23}$")


def deployable(
    catalog: Any, prefix: str, functions_dir: pathlib.Path, scheduled_handler: str = SCHEDULED_HANDLER
) -> Registry:
    """Re-validate `catalog` (anything with tables/jobs/queues mappings) and return it as a Registry.

    Every handler (`scheduled_handler` for the jobs, "module.function") and job entry module must exist
    under `functions_dir` (the code asset).

    Raises `CatalogError` naming the entry when something cannot be deployed.
    """
    if not _PREFIX.match(prefix):
        raise CatalogError(f"prefix {prefix[:40]!r}: expected 1-24 of a-z 0-9 - starting with a letter")
    core = {t.name for t in CORE_TABLES}
    registry = Registry(
        tables=[t for t in catalog.tables.values() if t.name not in core],
        jobs=list(catalog.jobs.values()),
        queues=list(catalog.queues.values()),
    )
    for job in registry.jobs.values():
        _check_names(f"catalog entry {job.name!r}", job.name, prefix)
        _check_module(functions_dir, f"catalog entry {job.name!r}", "handler", scheduled_handler.rpartition(".")[0])
        _check_module(functions_dir, f"catalog entry {job.name!r}", "entry", job.entry.partition(":")[0])
        _check_providers(f"catalog entry {job.name!r}", job.providers)
        tick_interval_s(job)  # the schedule must be evaluable: monitoring derives its alarm window from it
    for queue in registry.queues.values():
        _check_names(f"queue entry {queue.name!r}", queue.name, prefix)
        _check_module(functions_dir, f"queue entry {queue.name!r}", "handler", queue.handler.rpartition(".")[0])
        _check_providers(f"queue entry {queue.name!r}", providers_of(queue))
    for table in registry.tables.values():
        _check_names(f"table {table.name!r}", table.name, prefix)
    # A job and a queue of one name would derive the same "<prefix>-<name>-dlq" queue and alarms.
    for name in sorted(set(registry.jobs) & set(registry.queues)):
        raise CatalogError(f"catalog entry {name!r}: a job and a queue cannot share a name")
    return registry


def providers_of(spec: JobSpec | QueueSpec) -> tuple[str, ...]:
    """The external providers a job or queue worker calls (queues may not declare any)."""
    return tuple(getattr(spec, "providers", ()) or ())


def handler_file(handler: str, functions_dir: pathlib.Path) -> pathlib.Path:
    """The file under `functions_dir` that defines a handler string like "handlers.scheduled.handler"."""
    return module_file(handler.rpartition(".")[0], functions_dir)


def module_file(module: str, functions_dir: pathlib.Path) -> pathlib.Path:
    """The file under `functions_dir` of a dotted module name (module.py or package/__init__.py)."""
    base = pathlib.Path(functions_dir).joinpath(*module.split("."))
    return base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"


def _check_module(functions_dir: pathlib.Path, where: str, what: str, module: str) -> None:
    if not module or not module_file(module, functions_dir).is_file():
        raise CatalogError(
            f"{where}: {what} module {module!r} does not exist under {pathlib.Path(functions_dir).name}/"
        )


def _check_names(where: str, name: str, prefix: str) -> None:
    if not _NAME.match(name):
        raise CatalogError(f"{where}: name must be lower_snake_case to derive AWS resource names")
    if len(f"{prefix}-{name}-worker") > _MAX_DERIVED_NAME:
        raise CatalogError(f"{where}: name is too long for AWS resource names with prefix {prefix!r}")


def _check_providers(where: str, providers: Iterable[str]) -> None:
    for provider in providers:
        if provider not in PROVIDER_DEFAULT_URLS:
            raise CatalogError(f"{where}: provider {provider!r} has no base URL in PROVIDER_DEFAULT_URLS")
