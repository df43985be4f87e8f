"""The app the operator tooling works on: its catalog, its directory, and what its local runtime and batch
commands need from it.

The CLI, the console and the local runtime know no application of their own. They find the app, first
match wins:

1. `--app MODULE:ATTR` on the command line (`jobfence --app invoices.catalog:CATALOG status`);
2. the environment variable `JOBFENCE_APP` (same form);
3. `app = "MODULE:ATTR"` under `[tool.jobfence]` in the `pyproject.toml` of the working directory or the
   nearest parent that has one;
4. `"jobfence:app": "MODULE:ATTR"` in the `context` of the `cdk.json` found the same way.

`ATTR` names the app's catalog (a `jobfence.Registry`). The app's directory is where the file was found
(the working directory for 1 and 2); its `functions` directory (`[tool.jobfence] functions`, default
`functions`) is put first on `sys.path`, so `MODULE` imports as the app's Lambda functions import it.
Two optional keys of `[tool.jobfence]` name operator hooks of the app, each `MODULE:ATTR`:
`batches` (a `Batches`: the `batch`, `quota` and `retry-failed` commands), `local` (a `LocalHooks`:
the local runtime's provider stubs and the first values of generated secrets) and `commands` (a mapping of
name to `AppCommand`: the app's own CLI commands). An app without them runs every other command.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobfence.registry import Registry

APP_ENV = "JOBFENCE_APP"
CONTEXT_KEY = "jobfence:app"
MAX_SPEC_CHARS = 200  # a spec is echoed in errors: bounded


class AppError(RuntimeError):
    """The app could not be found or loaded; the message says where the tooling looked and what is wrong."""


@dataclass(frozen=True)
class Batches:
    """What the batch commands need from an app with durable batches (this repository: `ops.this_app`)."""

    pipelines: Mapping[str, Any]  # kind -> the app's pipeline (its `queue` and `timing`)
    items_table: str  # logical catalog names
    batches_table: str
    build_store: Callable[[Any, Any], Any]  # (settings, clock) -> jobfence.work.WorkStore
    build_wakeups: Callable[[Any, Any], Mapping[str, Any]]  # (settings, sqs client) -> kind -> wake-ups
    tolerated_failure_pct: Mapping[str, float | None]  # kind -> the share of failed items a batch tolerates
    default_kind: str


@dataclass(frozen=True)
class LocalHooks:
    """What the local runtime needs from an app with providers or generated secrets."""

    stubs: str | None = None  # a package whose module `<provider>` starts a loopback stub of that provider
    # a fresh secret seeder per runtime: logical secret name -> its first value, or None for the default
    secret_values: Callable[[], Callable[[str], str | None]] | None = None


@dataclass(frozen=True)
class AppCommand:
    """A CLI command of the app's own (this repository's: demo, sim, rotate-signing-key)."""

    help: str
    arguments: Callable[[argparse.ArgumentParser], None]  # adds its arguments to its subparser
    # (parsed arguments, the console to print to, the target: None unless `on_target`) -> exit status
    run: Callable[[argparse.Namespace, Any, Any], int]
    on_target: bool = False  # takes the target options (--local, --embedded, --profile ...) and runs on one


@dataclass(frozen=True)
class App:
    catalog: Registry
    root: pathlib.Path  # the app's directory: app.py, cdk.json, functions/
    spec: str  # MODULE:ATTR of the catalog
    batches: Batches | None = None
    local: LocalHooks = field(default_factory=LocalHooks)
    commands: Mapping[str, AppCommand] = field(default_factory=dict)

    def require_batches(self) -> Batches:
        if self.batches is None:
            raise AppError(
                f"the app {self.spec} declares no durable batches ([tool.jobfence] batches = 'MODULE:ATTR' in its "
                "pyproject.toml)"
            )
        return self.batches


def _find(start: pathlib.Path) -> tuple[pathlib.Path, dict[str, Any]] | None:
    """The nearest directory from `start` up with jobfence settings, and those settings."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                settings = tomllib.loads(pyproject.read_text()).get("tool", {}).get("jobfence")
            except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise AppError(f"{pyproject}: not valid TOML ({exc})") from None
            if isinstance(settings, dict) and settings.get("app"):
                return folder, settings
        cdk = folder / "cdk.json"
        if cdk.is_file():
            try:
                context = json.loads(cdk.read_text()).get("context", {})
            except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
                raise AppError(f"{cdk}: not valid JSON ({exc})") from None
            if isinstance(context, dict) and context.get(CONTEXT_KEY):
                return folder, {"app": context[CONTEXT_KEY]}
    return None


def _attribute(spec: str, what: str) -> Any:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr.isidentifier():
        raise AppError(f"{what} {spec[:MAX_SPEC_CHARS]!r} is not MODULE:ATTR (like invoices.catalog:CATALOG)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppError(f"{what} {spec[:MAX_SPEC_CHARS]!r}: cannot import {module_name!r} ({exc})") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise AppError(f"{what} {spec[:MAX_SPEC_CHARS]!r}: {module_name} has no {attr!r}") from None


def load_app(spec: str | None = None, start: pathlib.Path | None = None) -> App:
    """Find and load the app (the order is in the module's docstring); AppError says why not."""
    here = (start or pathlib.Path.cwd()).resolve()
    found = _find(here)
    spec = spec or os.environ.get(APP_ENV) or None
    if spec is None:
        if found is None:
            raise AppError(
                f"no jobfence app found from {here}: pass --app MODULE:ATTR, set {APP_ENV}, or add "
                "[tool.jobfence] app = 'MODULE:ATTR' to the app's pyproject.toml"
            )
        root, settings = found
        spec = str(settings["app"])
    else:
        root, settings = found if found is not None else (here, {})
    functions = root / str(settings.get("functions", "functions"))
    if functions.is_dir() and str(functions) not in sys.path:
        sys.path.insert(0, str(functions))
    if str(root) not in sys.path:
        sys.path.append(str(root))  # the app's own operator hooks (this repository's `ops.this_app`)
    catalog = _attribute(spec, "app")
    if not isinstance(catalog, Registry):
        raise AppError(f"app {spec[:MAX_SPEC_CHARS]!r} is a {type(catalog).__name__}, not a jobfence Registry")
    batches = _attribute(str(settings["batches"]), "batches") if settings.get("batches") else None
    if batches is not None and not isinstance(batches, Batches):
        raise AppError(f"batches {settings['batches']!r} is a {type(batches).__name__}, not a jobfence_ops.app.Batches")
    local = _attribute(str(settings["local"]), "local") if settings.get("local") else LocalHooks()
    if not isinstance(local, LocalHooks):
        raise AppError(f"local {settings['local']!r} is a {type(local).__name__}, not a jobfence_ops.app.LocalHooks")
    commands = _attribute(str(settings["commands"]), "commands") if settings.get("commands") else {}
    if not isinstance(commands, Mapping) or not all(isinstance(c, AppCommand) for c in commands.values()):
        raise AppError(f"commands {settings['commands']!r} is not a mapping of name to jobfence_ops.app.AppCommand")
    return App(catalog=catalog, root=root, spec=spec, batches=batches, local=local, commands=commands)


_DEFAULT: dict[pathlib.Path, App] = {}


def default_app() -> App:
    """The app found from the working directory (loaded once per directory)."""
    here = pathlib.Path.cwd().resolve()
    if here not in _DEFAULT:
        _DEFAULT[here] = load_app(start=here)
    return _DEFAULT[here]
