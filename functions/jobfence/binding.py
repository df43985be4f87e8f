"""Binding pynamodb models to tables, in the caller's region and with the caller's credentials.

Store modules declare their pynamodb model once, unbound. The handler's cold start calls
`bind(Model, settings.table("name"))`, which returns a fresh subclass (with fresh index objects, so
two bindings never share state) whose Meta names the physical table. Nothing binds a table name at
import time. Inside `bound_to(session)` its Meta also names the session's region, so a store's
requests go where the caller's other clients go, whatever the process's environment says.
Every botocore session of the process (pynamodb's, one per bound model and thread, and
`new_session`'s) shares one data loader: the service models and endpoint rules are parsed once, not
once per model.

One DynamoDB client per region and credentials: inside `bound_to(session, dynamodb)` every model bound with
the process's own credentials sends through `dynamodb`, the function's own client (`dynamodb_client`), and
inside `bound_with(credentials)` the models bound share one client signing with those credentials, made at
the first bind; never one tenant's client for another's models. pynamodb would otherwise make a session and
a client per bound model on its first call (about 10 ms of CPU each on the bench machine, up to 12 in a
first tick: docs/benchmarks.md, "Cold start"). A model bound outside both still gets pynamodb's own client, as
before. What a store's writes and reads then do with AWS's errors is `jobfence.dynamo`'s.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar, cast

import botocore.config
import botocore.session
import pynamodb.connection.base
from pynamodb.attributes import BinaryAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, Index, KeysOnlyProjection
from pynamodb.models import Model
from pynamodb.settings import get_settings_value

from jobfence.capacity import meter_client, meter_session
from jobfence.clock import Clock
from jobfence.errors import SettingsError
from jobfence.registry import IndexSpec

if TYPE_CHECKING:  # made by the functions that assume a tenant's role (`jobfence.tenants`), which load it
    from jobfence.credentials import Credentials

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
        """The botocore clients this store sends its requests through (one: its model's, maybe shared)."""
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


def client_config() -> botocore.config.Config:
    """The configuration pynamodb gives its own clients (its settings: timeouts, pool, standard retries with
    1 + `max_retry_attempts` attempts), for the one client its models share; botocore's parameter validation
    stays on (pynamodb turns it off), since the same client sends the hand-built requests of `jobfence.lease`
    and `jobfence.runs`."""
    retries = get_settings_value("retry_configuration")
    if retries == "LEGACY":
        retries = {"total_max_attempts": 1 + int(get_settings_value("max_retry_attempts")), "mode": "standard"}
    return botocore.config.Config(
        connect_timeout=get_settings_value("connect_timeout_seconds"),
        read_timeout=get_settings_value("read_timeout_seconds"),
        max_pool_connections=get_settings_value("max_pool_connections"),
        retries=None if retries == "UNSET" else retries,
    )


def dynamodb_client(session: Any) -> Any:
    """The function's one DynamoDB client, made from `session` (a boto3 session) with `client_config`: what a
    handler passes to `bound_to` and to the stores that take a client. A session without a region is a
    `SettingsError`."""
    client = session.client("dynamodb", region_name=_region_of(session), config=client_config())
    return meter_client(client)  # its calls count toward a run's or an item's units (`jobfence.capacity`)


def _region_of(session: Any) -> str:
    region = getattr(session, "region_name", None)
    if not region:
        raise SettingsError("the session has no region: give it one, boto3.Session(region_name=...)")
    return str(region)


def _same_client(model: Any, client: Any) -> None:
    """Make the bound model's pynamodb connection send through `client` (made now: no client of its own)."""
    table = model._get_connection()  # pynamodb's TableConnection: its schema, no client yet
    table.connection._client = client


class _CredentialClients:
    """The DynamoDB clients signing with one set of credentials: one per (region, endpoint), made on first ask."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials
        self._clients: dict[tuple[str | None, str | None], Any] = {}

    def client(self, region: str | None, host: str | None) -> Any:
        key = (region, host)
        if key not in self._clients:
            session = new_session()
            session.set_credentials(
                self.credentials.access_key_id, self.credentials.secret_access_key, self.credentials.session_token
            )
            self._clients[key] = session.create_client("dynamodb", region, endpoint_url=host, config=client_config())
        return self._clients[key]


_binding_credentials: contextvars.ContextVar[_CredentialClients | None] = contextvars.ContextVar(
    "jobfence_binding_credentials", default=None
)


@contextmanager
def bound_with(credentials: Credentials) -> Iterator[None]:
    """Every model `bind` binds inside signs with `credentials` (a tenant's session), not the process's role.

    A store built inside (`WorkStore`, `QuotaStore`, `TenantGate`, ...) is that session's store: each of its
    models (and so its transactions, which send on a model's client) carries the credentials in its Meta, so no
    request it sends is signed with anything else; all of them send through one client, made with those
    credentials at the first bind inside (one per region and endpoint). Outside, `bind` binds with the
    process's own credentials.
    """
    token = _binding_credentials.set(_CredentialClients(credentials))
    try:
        yield
    finally:
        _binding_credentials.reset(token)


_binding_region: contextvars.ContextVar[str | None] = contextvars.ContextVar("jobfence_binding_region", default=None)
_binding_client: contextvars.ContextVar[Any] = contextvars.ContextVar("jobfence_binding_client", default=None)


@contextmanager
def bound_to(session: Any, dynamodb: Any = None) -> Iterator[None]:
    """Every model `bind` binds inside (every store built inside) sends its requests to `session`'s region.

    `session` is the boto3 session the caller's other clients come from (Lambda's, or a test's on moto):
    a store built inside it never reads the region from the process's environment (`AWS_DEFAULT_REGION`),
    which outside Lambda may be unset or another one. A session without a region is a `SettingsError`.
    With `dynamodb` (a DynamoDB client of `session`: the function's own, `dynamodb_client`), every model bound
    inside with the process's credentials sends through it, instead of pynamodb making a client per model on
    its first call (inside `bound_with`, the tenant's own client instead); one in another region is a
    `SettingsError`.
    """
    region = _region_of(session)
    if dynamodb is not None and dynamodb.meta.region_name != region:
        raise SettingsError(f"the DynamoDB client is in {dynamodb.meta.region_name!r}, the session in {region!r}")
    token = _binding_region.set(region)
    client_token = _binding_client.set(dynamodb)
    try:
        yield
    finally:
        _binding_client.reset(client_token)
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
    credentials of `bound_with`, if inside them), sending through the one client of those (see the module)."""
    meta_class = cast(type, model.Meta)  # a class at run time; pynamodb types it by its attributes (MetaProtocol)
    attrs: dict[str, Any] = {"table_name": table_name}
    region = _binding_region.get()
    if region is not None:
        attrs["region"] = region
    clients = _binding_credentials.get()
    if clients is not None:
        credentials = clients.credentials
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
    bound = type(model.__name__, (model,), namespace)
    host = getattr(meta, "host", None)
    if clients is not None:
        _same_client(bound, clients.client(region, host))
    elif (shared := _binding_client.get()) is not None and host in (None, shared.meta.endpoint_url):
        _same_client(bound, shared)
    return bound  # type: ignore[return-value]  # a subclass of `model`


def client_of(model: Any) -> Any:
    """The botocore DynamoDB client a bound model sends its requests through (the one reach into pynamodb's
    connection): `jobfence.dynamo` sends a model's conditional writes on it, `ModelStore.clients` names it."""
    return model._get_connection().connection.client
