"""The listing generator port: listing text from an item's input (seed 003's generation pipeline).

`generate` returns a reference to the generated listing (the provider keeps the
text), so item rows stay small. The idempotency key is per item, so a retry
after a lost response returns the same listing instead of paying twice.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from providers.http import post_json
from providers.scripted import Behaviour, ScriptedCalls


@dataclass(frozen=True)
class GenerationRequest:
    tenant: str
    idempotency_key: str
    payload: Mapping[str, Any]


class Generator(Protocol):
    def generate(self, request: GenerationRequest, timeout_s: float) -> str:
        """Generate (or return the already generated) listing; its reference."""
        ...


class FakeGenerator:
    """Offline generator: a listing per idempotency key, with scripted failures."""

    def __init__(self) -> None:
        self.calls = ScriptedCalls()
        self._listings: dict[str, str] = {}
        self._lock = threading.Lock()

    def script(self, idempotency_key: str, behaviour: Behaviour, times: int = 0) -> None:
        self.calls.script(idempotency_key, behaviour, times)

    def generate(self, request: GenerationRequest, timeout_s: float) -> str:
        self.calls.enter(request.idempotency_key, "generator")
        with self._lock:
            if request.idempotency_key not in self._listings:
                digest = hashlib.sha256(json.dumps(dict(request.payload), sort_keys=True).encode()).hexdigest()[:16]
                self._listings[request.idempotency_key] = f"gen_{digest}"
            return self._listings[request.idempotency_key]

    def generated(self) -> int:
        """Distinct listings generated (a retry of the same item does not make a second one)."""
        with self._lock:
            return len(self._listings)


class HttpGenerator:
    """Real adapter: `POST {base}/v1/generations` with an Idempotency-Key header."""

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/")

    def generate(self, request: GenerationRequest, timeout_s: float) -> str:
        body = json.dumps({"tenant": request.tenant, "input": dict(request.payload)}).encode()
        return post_json(f"{self._base}/v1/generations", body, request.idempotency_key, timeout_s, "generator")["id"]
