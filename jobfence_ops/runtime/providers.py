"""Secrets and provider stubs that the emulator does not give the functions by itself.

- Secrets: every `SECRET_<LOGICAL>` a function's environment names (and every
  secret its catalog entry lists) is created in the emulator's Secrets Manager
  under `jobfence.config.secret_name(logical)`, and the variable is set if the
  deployment dropped it.
- Providers: for every `PROVIDER_<NAME>_URL` a function's environment carries
  (and every provider its catalog entry lists), a loopback stub from the
  app's stub package (`LocalHooks.stubs` in `jobfence_ops.app`; this repository's is
  `ops/stubs`), module `<name>`, is started once and the variable points at it. A stub
  module either defines `start_local(clock) -> (stub, base_url, secret_value)`
  or a `<Name>Stub(clock)` class with `start() -> base_url` and `stop()`; the
  secrets the provider's adapter reads (`<NAME>_SECRET` in `providers/<name>.py`,
  or a `SECRETS` tuple in the stub module, or a secret named after the
  provider) are filled from the stub's `client_id` and `client_secret`, so the
  real adapter authenticates against the stub.
"""

from __future__ import annotations

import importlib
import json
import secrets as token_source
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jobfence.config import (
    ENV_PROVIDER_PREFIX,
    ENV_SECRET_PREFIX,
    provider_env,
    secret_env,
    secret_name,
)
from jobfence_ops.app import App


@dataclass
class StartedStub:
    name: str
    stub: Any
    base_url: str
    secret_value: str | None = None
    secrets: tuple[str, ...] = ()  # logical secrets that hold this provider's credentials


def _provider_secrets(name: str, stub_module: Any) -> tuple[str, ...]:
    """The secrets a stub's value fills: the stub module's `SECRETS` (a provider adapter names no app's secret)."""
    return tuple(getattr(stub_module, "SECRETS", ()) or ()) or (name,)


@dataclass
class LocalProviders:
    """Stubs started for this runtime and the secrets created in the emulator, for one app."""

    app: App
    stubs: dict[str, StartedStub] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)  # logical -> secret name
    missing_stubs: set[str] = field(default_factory=set)
    # the app's seeder of first secret values (this repository's: each club job's signing pair), one per runtime
    _seed: Callable[[str], str | None] | None = None

    def __post_init__(self) -> None:
        if self.app.local.secret_values is not None:
            self._seed = self.app.local.secret_values()

    def generated_value(self, logical: str) -> str:
        """The value a secret without a provider stub starts with: the app's seed, else random text."""
        seeded = self._seed(logical) if self._seed is not None else None
        return seeded if seeded is not None else json.dumps({"value": token_source.token_hex(16)})

    def stop(self) -> None:
        for started in self.stubs.values():
            stop = getattr(started.stub, "stop", None)
            if stop:
                stop()
        self.stubs.clear()


def _catalog_spec(app: App, environment: Mapping[str, str]) -> Any:
    job = environment.get("JOB_NAME")
    if job:
        return app.catalog.jobs.get(job)
    queue = environment.get("WORKER_QUEUE")  # a queue worker's own catalog queue
    return app.catalog.queues.get(queue) if queue else None


def start_stub(app: App, name: str, clock: Any) -> StartedStub | None:
    """Start the app's stub of provider `name` on loopback, or None when the app has none."""
    if app.local.stubs is None:
        return None
    try:
        module = importlib.import_module(f"{app.local.stubs}.{name}")
    except ModuleNotFoundError:
        return None
    if hasattr(module, "start_local"):
        stub, url, secret = module.start_local(clock)
        return StartedStub(name, stub, url, secret, _provider_secrets(name, module))
    classes = [
        v
        for k, v in vars(module).items()
        if k.endswith("Stub") and isinstance(v, type) and hasattr(v, "start") and v.__module__ == module.__name__
    ]
    if not classes:
        return None
    stub = classes[0](clock)
    url = stub.start()
    secret = None
    if hasattr(stub, "client_id") and hasattr(stub, "client_secret"):
        secret = json.dumps({"client_id": stub.client_id, "client_secret": stub.client_secret})
    return StartedStub(name, stub, url, secret, _provider_secrets(name, module))


def complete_environments(
    session: Any, environments: Mapping[str, Mapping[str, str]], clock: Any, providers: LocalProviders
) -> dict[str, dict[str, str]]:
    """function -> variables to add or override: secrets created, provider URLs pointed at stubs."""
    sm = session.client("secretsmanager")
    extra: dict[str, dict[str, str]] = {}
    for function, env in environments.items():
        spec = _catalog_spec(providers.app, env)
        add: dict[str, str] = {}
        provider_names = {
            k[len(ENV_PROVIDER_PREFIX) : -len("_URL")].lower()
            for k in env
            if k.startswith(ENV_PROVIDER_PREFIX) and k.endswith("_URL")
        }
        provider_names |= set(getattr(spec, "providers", ()) or ())
        for name in sorted(provider_names):
            if name not in providers.stubs and name not in providers.missing_stubs:
                started = start_stub(providers.app, name, clock)
                if started is None:
                    providers.missing_stubs.add(name)
                else:
                    providers.stubs[name] = started
            if name in providers.stubs:
                add[provider_env(name)] = providers.stubs[name].base_url
        secret_names = {k[len(ENV_SECRET_PREFIX) :].lower() for k in env if k.startswith(ENV_SECRET_PREFIX)}
        secret_names |= set(getattr(spec, "secrets", ()) or ())
        owners = {}
        for name in provider_names:
            started = providers.stubs.get(name)
            for logical in started.secrets if started and started.secret_value else ():
                owners[logical] = started
                secret_names.add(logical)
        for logical in sorted(secret_names):
            name = env.get(secret_env(logical)) or secret_name(logical)
            if logical not in providers.secrets:
                stub = owners.get(logical)
                value = stub.secret_value if stub else providers.generated_value(logical)
                try:
                    sm.create_secret(Name=name, SecretString=value)
                except sm.exceptions.ResourceExistsException:
                    sm.put_secret_value(SecretId=name, SecretString=value)
                providers.secrets[logical] = name
            add.setdefault(secret_env(logical), name)
        extra[function] = add
    return extra
