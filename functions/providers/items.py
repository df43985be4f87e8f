"""The item-provider port: one idempotent call per work item (seed 003's generation and publish steps).

Both listings pipelines call a provider the same way: `POST {base}{path}` with
the item's tenant and input under one field, an `Idempotency-Key` per item, and
a short reference back (the provider keeps the generated text or the published
listing, so item rows stay small). A retry after a lost reply sends the same key
and gets the same reference, so it never pays or publishes twice.

The two providers are two configurations (`ItemEndpoint`) of one port:

    GENERATOR   POST /v1/generations  {"tenant", "input": {...}}    -> {"id": "gen_000001"}
    PUBLISHER   POST /v1/listings     {"tenant", "listing": {...}}  -> {"id": "pub_000001"}

`HttpItemProvider` is the real adapter (stdlib only); `providers.items_fake`
holds the offline fake (the local runtime serves a loopback stub of the API
itself: an adapter knows nothing of the tooling that tests it).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from providers.errors import ProviderError, ProviderRejected, ProviderTimeout


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
        """The provider's reference for this item; `ProviderError`, `ProviderTimeout` or `ProviderRejected`."""
        ...


class HttpItemProvider:
    """Real adapter: `POST {base}{endpoint.path}` with an Idempotency-Key header."""

    def __init__(self, endpoint: ItemEndpoint, base_url: str) -> None:
        self.endpoint = endpoint
        self._base = base_url.rstrip("/")

    def call(self, request: ItemRequest, timeout_s: float) -> str:
        body = json.dumps({"tenant": request.tenant, self.endpoint.field: dict(request.payload)}).encode()
        return self._post(body, request.idempotency_key, timeout_s)["id"]

    def _post(self, body: bytes, idempotency_key: str, timeout_s: float) -> dict[str, Any]:
        what = self.endpoint.name
        req = urllib.request.Request(
            f"{self._base}{self.endpoint.path}",
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": idempotency_key},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 - URL from configuration
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # status only: bodies may echo the input
            if 400 <= exc.code < 500 and exc.code not in (408, 409, 429):
                raise ProviderRejected(f"{what}: refused ({exc.code})") from None
            raise ProviderError(f"{what}: failed ({exc.code})") from None
        except TimeoutError:
            raise ProviderTimeout(f"{what}: no answer within {timeout_s:g} s") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ProviderError(f"{what}: unreachable ({type(exc).__name__})") from None
