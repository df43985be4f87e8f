"""A loopback HTTP proxy in front of the moto server that loses replies on a real socket.

For a request its rule picks, the proxy forwards the request (moto applies it)
and then closes the client's connection without sending the reply: the client
sees exactly what a lost reply looks like on the wire (botocore's
`ConnectionClosedError`), re-sends the request itself if its retries allow,
or surfaces the error. Every other request and reply passes through unchanged.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import urlsplit

# (operation, request body) -> whether to lose this reply
Rule = Callable[[str, str], bool]

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass
class _Drop:
    rule: Rule
    times: int


@dataclass
class DroppingProxy:
    """Forward everything to `upstream`; lose the replies the armed rules pick."""

    upstream: str
    dropped: list[str] = field(default_factory=list)  # operations whose reply was lost, in order

    def __post_init__(self) -> None:
        self._drops: list[_Drop] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target", "")
                operation = target.rsplit(".", 1)[-1]
                status, headers, reply = proxy._forward(self.command, self.path, dict(self.headers), body)
                if proxy._should_drop(operation, body.decode("utf-8", "replace")):
                    self.close_connection = True  # applied upstream; the reply never comes back
                    return
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST

            def log_message(self, *args: object) -> None:  # quiet
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="dropping-proxy", daemon=True)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def lose_reply(self, rule: Rule, times: int = 1) -> None:
        """Lose the reply of the next `times` requests that `rule` picks (after they were applied)."""
        with self._lock:
            self._drops.append(_Drop(rule, times))

    def start(self) -> "DroppingProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _should_drop(self, operation: str, body: str) -> bool:
        with self._lock:
            for drop in self._drops:
                if drop.times > 0 and drop.rule(operation, body):
                    drop.times -= 1
                    self.dropped.append(operation)
                    return True
        return False

    def _forward(self, method: str, path: str, headers: dict, body: bytes) -> tuple[int, list, bytes]:
        url = urlsplit(self.upstream)
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers={k: v for k, v in headers.items() if k.lower() != "connection"})
            response = connection.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            connection.close()


def acquire_of(operation: str, body: str) -> bool:
    return operation == "UpdateItem" and "ADD fence" in body


def release_of(operation: str, body: str) -> bool:
    return operation == "UpdateItem" and "REMOVE holder" in body


def run_row_put(operation: str, body: str) -> bool:
    return operation == "PutItem" and '"run_key"' in body
