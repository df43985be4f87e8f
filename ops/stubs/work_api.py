"""A loopback stub of the item-provider port's API (`providers.items`): both listings providers share it.

    POST <path>   body {"tenant": ..., <field>: {...}}, header Idempotency-Key
                  -> 201 {"id": "<prefix>_<n>"}; the same key answers the same id again (no second effect)
                  -> 422 when the input says {"reject": true} (a permanent refusal)
                  -> 503 for the next n calls after `fail_next(n)` (a transient failure)

It counts what happened so a demo or test can check that duplicate deliveries
caused no duplicate side effect: `created` (distinct keys acted on) and
`requests` (every call, retries included). It never logs or keeps the input.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ops.stubs.server import LoopbackStub, QuietHandler
from providers.items import ItemEndpoint


class IdempotentApiStub(LoopbackStub):
    """Thread-safe state, inspected directly by the driver."""

    endpoint: ItemEndpoint  # which configuration of the item-provider port this stub serves

    def __init__(self, clock: Any = None) -> None:
        self._clock = clock
        self.ids: dict[str, str] = {}  # idempotency key -> id
        self.requests = 0
        self.rejected = 0
        self._fail = 0
        self._lock = threading.Lock()
        self.name = self.endpoint.name

    @property
    def created(self) -> int:
        with self._lock:
            return len(self.ids)

    def fail_next(self, count: int = 1) -> None:
        """Answer the next `count` calls with 503."""
        with self._lock:
            self._fail += count

    def handle(self, path: str, key: str | None, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.requests += 1
            if path != self.endpoint.path:
                return 404, {"error": "not_found"}
            if not key:
                return 400, {"error": "idempotency_key_required"}
            if self._fail > 0:
                self._fail -= 1
                return 503, {"error": "unavailable"}
            if key in self.ids:
                return 200, {"id": self.ids[key]}
            if isinstance(body.get(self.endpoint.field), dict) and body[self.endpoint.field].get("reject"):
                self.rejected += 1
                return 422, {"error": "rejected"}
            self.ids[key] = f"{self.endpoint.prefix}_{len(self.ids) + 1:06d}"
            return 201, {"id": self.ids[key]}

    def handler_class(self) -> type[QuietHandler]:
        stub = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                try:
                    body = json.loads(self.read_body() or b"{}")
                except json.JSONDecodeError:
                    body = {}
                status, answer = stub.handle(self.path, self.headers.get("Idempotency-Key"), body)
                self.reply_json(status, answer)

        return Handler
