"""The marketplace publisher port: publish a listing (seed 003's publish pipeline).

Publishing twice is a visible duplicate, so the port takes an idempotency key
per item and the fake models the marketplace's idempotency: the same key always
returns the same listing id and never creates a second listing.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from providers.http import post_json
from providers.scripted import Behaviour, ScriptedCalls


@dataclass(frozen=True)
class PublishRequest:
    tenant: str
    idempotency_key: str
    payload: Mapping[str, Any]


class Publisher(Protocol):
    def publish(self, request: PublishRequest, timeout_s: float) -> str:
        """Publish (or find the already published) listing; the marketplace's listing id."""
        ...


class FakeMarketplace:
    """Offline marketplace: listings by idempotency key, with scripted failures."""

    def __init__(self) -> None:
        self.calls = ScriptedCalls()
        self._listings: dict[str, str] = {}
        self._lock = threading.Lock()

    def script(self, idempotency_key: str, behaviour: Behaviour, times: int = 0) -> None:
        self.calls.script(idempotency_key, behaviour, times)

    def publish(self, request: PublishRequest, timeout_s: float) -> str:
        self.calls.enter(request.idempotency_key, "publisher")
        with self._lock:
            if request.idempotency_key not in self._listings:
                self._listings[request.idempotency_key] = f"mkt_{len(self._listings) + 1:06d}"
            return self._listings[request.idempotency_key]

    def published(self) -> int:
        """Listings live on the marketplace (one per item, however often it was retried)."""
        with self._lock:
            return len(self._listings)


class HttpPublisher:
    """Real adapter: `POST {base}/v1/listings` with an Idempotency-Key header."""

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/")

    def publish(self, request: PublishRequest, timeout_s: float) -> str:
        body = json.dumps({"tenant": request.tenant, "listing": dict(request.payload)}).encode()
        return post_json(f"{self._base}/v1/listings", body, request.idempotency_key, timeout_s, "publisher")["id"]
