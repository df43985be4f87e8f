"""Binding pynamodb models to tables, in the caller's region and with the caller's credentials.

Store modules declare their pynamodb model once, unbound. The handler's cold start calls
`bind(Model, settings.table("name"))`, which returns a fresh subclass (with fresh index objects, so
two bindings never share state) whose Meta names the physical table. Nothing binds a table name at
import time. Inside `bound_to(session)` its Meta also names the session's region, so a store's
requests go where the caller's other clients go, whatever the process's environment says.
Every botocore session of the process (pynamodb's, one per bound model and thread, and
`new_session`'s) shares one data loader: the service models and endpoint rules are parsed once, not
once per model. What a store's writes and reads then do with AWS's errors is `jobfence.dynamo`'s.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import botocore.session
import pynamodb.connection.base
from pynamodb.attributes import BinaryAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, Index, KeysOnlyProjection
from pynamodb.models import Model

from jobfence.capacity import meter_session
from jobfence.clock import Clock
from jobfence.errors import SettingsError
from jobfence.registry import IndexSpec

M = TypeVar("M", bound=type[Model])


_KEY_ATTRIBUTES = {"S": UnicodeAttribute, "N": NumberAttribute, "B": BinaryAttribute}


def index(spec: IndexSpec) -> GlobalSecondaryIndex[Any]:
    """The pynamodb index a model declares for the catalog's `IndexSpec` (the index's one declaration).

    Use it as a model's class attribute (`by_due = index(BY_DUE)`); `bind` gives each
    bound model its own instance, as for a hand-written index class.
    """
    projection = AllProjection() if spec.projection == "ALL" else KeysOnlyProjection()
    namespace: dict[str, Any] = {"Meta": type("Meta", (), {"index_name": spec.name, "projection": projection})}
    name, kind = spec.partition_key
    namespace[name] = _KEY_ATTRIBUTES[kind](hash_key=True)
    if spec.sort_key:
        name, kind = spec.sort_key
        namespace[name] = _KEY_ATTRIBUTES[kind](range_key=True)
    title = "".join(part.title() for part in spec.name.split("_"))
    return type(f"_{title}Index", (GlobalSecondaryIndex,), namespace)()


class ModelStore:
    """A store over pynamodb models bound to its tables; the models stay private to the store (`_model`).

    A store of one table names its model class `_model_class`; the constructor binds it to the physical table.
    Callers use the store's methods. `clients()` is for the benches and tests
    that meter a store's requests or inject faults into them, never for a write.
    """

    _model_class: type[Model]
    _model: Any

    def __init__(self, table_name: str, clock: Clock) -> None:
        self._model = bind(self._model_class, table_name)
        self._clock = clock

    def clients(self) -> list[Any]:
        """The botocore clients this store sends its requests through."""
        return [client_of(self._model)]


_data_loader: Any = None
_data_loader_lock = threading.Lock()


def new_session(env_vars: Any = None) -> botocore.session.Session:
    """A fresh botocore session that reads botocore's data (service models, endpoint rules) through the
    process's one loader.

    A new session parses those JSON files again (about 0.1 CPU-second for DynamoDB, on every cold start
    per bound model, since pynamodb gives each model's connection a session of its own). The loader only
    caches those read-only files, as it does for all clients of one session: credentials, configuration
    and event hooks stay each session's own.
    """
    global _data_loader
    session = meter_session(botocore.session.get_session(env_vars))  # its calls count (`jobfence.capacity`)
    with _data_loader_lock:
        if _data_loader is None:
            _data_loader = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _data_loader)
    return session


# pynamodb's connections take their session from this module attribute (`Connection.session`).
pynamodb.connection.base.get_session = new_session


@dataclass(frozen=True)
class Credentials:
    """Temporary AWS credentials (an STS session's): what a model bound under `bound_with` signs its requests with."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_ms: int  # when STS says they expire (epoch ms)

    def __repr__(self) -> str:  # never the secret in a log line or a traceback
        return f"Credentials(access_key_id={self.access_key_id!r}, expires_ms={self.expires_ms})"


_binding_credentials: contextvars.ContextVar[Credentials | None] = contextvars.ContextVar(
    "jobfence_binding_credentials", default=None
)


@contextmanager
def bound_with(credentials: Credentials) -> Iterator[None]:
    """Every model `bind` binds inside signs with `credentials` (a tenant's session), not the process's role.

    A store built inside (`WorkStore`, `QuotaStore`, `TenantGate`, ...) is that session's store: each of its
    models, and its transaction connection (`credentials_of`), carries the credentials in its Meta, so no
    request it sends is signed with anything else. Outside, `bind` binds with the process's own credentials.
    """
    token = _binding_credentials.set(credentials)
    try:
        yield
    finally:
        _binding_credentials.reset(token)


_binding_region: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobfence_binding_region", default=None)


@contextmanager
def bound_to(session: Any) -> Iterator[None]:
    """Every model `bind` binds inside (every store built inside) sends its requests to `session`'s region.

    `session` is the boto3 session the caller's other clients come from (Lambda's, or a test's on moto):
    a store built inside it never reads the region from the process's environment (`AWS_DEFAULT_REGION`),
    which outside Lambda may be unset or another one. A session without a region is a `SettingsError`.
    """
    region = getattr(session, "region_name", None)
    if not region:
        raise SettingsError("the session has no region: give it one, boto3.Session(region_name=...)")
    token = _binding_region.set(region)
    try:
        yield
    finally:
        _binding_region.reset(token)


def credentials_of(model: Any) -> dict[str, Any]:
    """The credential keywords of a bound model's Meta (for a pynamodb `Connection` beside it), or none."""
    meta = model.Meta
    return {
        name: getattr(meta, name, None)
        for name in ("aws_access_key_id", "aws_secret_access_key", "aws_session_token")
        if getattr(meta, name, None)
    }


def bind(model: M, table_name: str) -> M:
    """A subclass of `model` bound to `table_name` (in the region of `bound_to`'s session and signing with the
    credentials of `bound_with`, if inside them)."""
    meta_class = cast(type, model.Meta)  # a class at run time; pynamodb types it by its attributes (MetaProtocol)
    attrs: dict[str, Any] = {"table_name": table_name}
    region = _binding_region.get()
    if region is not None:
        attrs["region"] = region
    credentials = _binding_credentials.get()
    if credentials is not None:
        attrs.update(
            aws_access_key_id=credentials.access_key_id,
            aws_secret_access_key=credentials.secret_access_key,
            aws_session_token=credentials.session_token,
        )
    meta = type("Meta", (meta_class,), attrs)
    namespace: dict[str, object] = {"Meta": meta, "__module__": model.__module__}
    for klass in reversed(model.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Index):
                namespace[name] = type(value)()
    return type(model.__name__, (model,), namespace)  # type: ignore[return-value]  # a subclass of `model`


def client_of(model: Any) -> Any:
    """The botocore DynamoDB client a bound model sends its requests through (the one reach into pynamodb's
    connection): `jobfence.dynamo` sends a model's conditional writes on it, `ModelStore.clients` names it."""
    return model._get_connection().connection.client
