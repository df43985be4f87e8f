"""A loopback stub of an idempotent JSON "create" API: the shape both listings providers share.

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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class IdempotentApiStub:
    """Thread-safe state, inspected directly by the driver."""

    path = "/v1/things"
    field = "input"
    prefix = "thing"

    def __init__(self, clock: Any = None) -> None:
        self._clock = clock
        self.ids: dict[str, str] = {}  # idempotency key -> id
        self.requests = 0
        self.rejected = 0
        self._fail = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

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
            if path != self.path:
                return 404, {"error": "not_found"}
            if not key:
                return 400, {"error": "idempotency_key_required"}
            if self._fail > 0:
                self._fail -= 1
                return 503, {"error": "unavailable"}
            if key in self.ids:
                return 200, {"id": self.ids[key]}
            if isinstance(body.get(self.field), dict) and body[self.field].get("reject"):
                self.rejected += 1
                return 422, {"error": "rejected"}
            self.ids[key] = f"{self.prefix}_{len(self.ids) + 1:06d}"
            return 201, {"id": self.ids[key]}

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve on loopback (a free port by default); the base URL."""
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    body = {}
                status, answer = stub.handle(self.path, self.headers.get("Idempotency-Key"), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:  # requests carry tenant input: never logged
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"{self.prefix}-stub", daemon=True)
        self._thread.start()
        address = self._server.server_address
        return f"http://{address[0]}:{address[1]}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
