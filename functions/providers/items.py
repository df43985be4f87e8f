"""The item-provider port: one idempotent call per work item (seed 003's generation and publish steps).

Both listings pipelines call a provider the same way: `POST {base}{path}` with
the item's tenant and input under one field, an `Idempotency-Key` per item, and
a short reference back (the provider keeps the generated text or the published
listing, so item rows stay small). A retry after a lost reply sends the same key
and gets the same reference, so it never pays or publishes twice.

The two providers are two configurations (`ItemEndpoint`) of one port:

    GENERATOR   POST /v1/generations  {"tenant", "input": {...}}    -> {"id": "gen_000001"}
    PUBLISHER   POST /v1/listings     {"tenant", "listing": {...}}  -> {"id": "pub_000001"}

`HttpItemProvider` is the real adapter (the providers' one HTTP client); `providers.items_fake`
holds the offline fake (the local runtime serves a loopback stub of the API
itself: an adapter knows nothing of the tooling that tests it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from providers.errors import ProviderError


@dataclass(frozen=True)
class ItemEndpoint:
    """One configuration of the port: which API a provider is and how its answers are named."""

    name: str  # the catalog's provider name (PROVIDER_<NAME>_URL) and the name in error messages
    path: str  # the create call's path
    field: str  # the request field that carries the item's input
    prefix: str  # the prefix of the references the provider hands out


GENERATOR = ItemEndpoint("generator", "/v1/generations", "input", "gen")
PUBLISHER = ItemEndpoint("publisher", "/v1/listings", "listing", "pub")


@dataclass(frozen=True)
class ItemRequest:
    """One item's call: the tenant, the per-item idempotency key and the item's input."""

    tenant: str
    idempotency_key: str
    payload: Mapping[str, Any]


class ItemProvider(Protocol):
    """The port: act on one item (or return the reference of the earlier identical call)."""

    endpoint: ItemEndpoint

    def call(self, request: ItemRequest, timeout_s: float) -> str:
        """The provider's reference for this item; a `ProviderError` (`providers.errors`) when it fails."""
        ...


class HttpItemProvider:
    """Real adapter: `POST {base}{endpoint.path}` with an Idempotency-Key header, over the one HTTP client."""

    def __init__(self, endpoint: ItemEndpoint, base_url: str) -> None:
        from providers.http import HttpClient  # here: a function that only names the port's types loads no HTTP

        self.endpoint = endpoint
        self._http = HttpClient(endpoint.name, base_url)

    def call(self, request: ItemRequest, timeout_s: float) -> str:
        answer = self._http.call(
            "POST",
            self.endpoint.path,
            payload={"tenant": request.tenant, self.endpoint.field: dict(request.payload)},
            headers={"Idempotency-Key": request.idempotency_key},
            timeout_s=timeout_s,
        )
        try:
            return str(answer["id"])
        except KeyError:
            raise ProviderError(f"{self.endpoint.name}: answer has no id", provider=self.endpoint.name) from None
