"""The one way a provider stub serves on loopback: start, stop, base URL, `with`, JSON replies.

A stub subclasses `LoopbackStub` and says how to answer a request
(`handler_class`); starting and stopping its threaded HTTP server is written
here once. Handlers never log: requests may carry tenant input or tokens.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackStub:
    """A stub of a provider's HTTP API served on a loopback port by a daemon thread."""

    name = "stub"  # the server thread's name
    url_suffix = ""  # appended to http://host:port in `base_url` (an API prefix)
    _address: tuple[str, int] = ("127.0.0.1", 0)  # a free loopback port unless told otherwise
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class bound to this stub."""
        raise NotImplementedError

    def start(self, host: str | None = None, port: int | None = None) -> str:
        """Serve on loopback (a free port by default); the base URL. Starting twice keeps the first server."""
        if self._server is None:
            address = (host or self._address[0], self._address[1] if port is None else port)
            self._server = ThreadingHTTPServer(address, self.handler_class())
            self._server.daemon_threads = True
            self._thread = threading.Thread(target=self._server.serve_forever, name=f"{self.name}-stub", daemon=True)
            self._thread.start()
        return self.base_url

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"the {self.name} stub is not running")
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else host  # typed for every address family; TCP's is text
        return f"http://{host}:{port}{self.url_suffix}"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that never logs and answers JSON."""

    def reply_json(self, status: int, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        """Send `payload` as JSON (no body when it is None) with `headers`."""
        data = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if payload is not None:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - requests carry input or tokens: never logged
        return
