"""The providers' one HTTP client and its one status mapping (providers.http), against a loopback server."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from providers.errors import (
    ProviderAmbiguous,
    ProviderAuthFailed,
    ProviderError,
    ProviderRejected,
    ProviderThrottled,
    ProviderUnavailable,
)
from providers.http import HttpAnswer, HttpClient, status_error


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, ProviderRejected),
        (404, ProviderRejected),
        (422, ProviderRejected),
        (401, ProviderAuthFailed),
        (403, ProviderAuthFailed),
        (408, ProviderAmbiguous),
        (409, ProviderUnavailable),
        (425, ProviderUnavailable),
        (429, ProviderThrottled),
        (500, ProviderAmbiguous),
        (503, ProviderAmbiguous),
    ],
)
def test_each_status_maps_to_one_class_of_the_vocabulary(status, kind):
    error = status_error("acme", HttpAnswer(status, b"", {}), code="E1")
    assert type(error) is kind and error.provider == "acme"
    assert error.status == status


def test_only_what_cannot_have_acted_is_plain_unavailable_and_rejections_are_never_retryable():
    # a caller that retries catches ProviderUnavailable: throttled and ambiguous are in it, a refusal is not
    assert issubclass(ProviderThrottled, ProviderUnavailable) and issubclass(ProviderAmbiguous, ProviderUnavailable)
    assert not issubclass(ProviderRejected, ProviderUnavailable)
    assert not issubclass(ProviderAuthFailed, (ProviderUnavailable, ProviderRejected))


def test_a_429_waits_for_retry_after_or_one_second():
    assert status_error("acme", HttpAnswer(429, b"", {"retry-after": "7"})).retry_after_s == 7.0
    assert status_error("acme", HttpAnswer(429, b"", {"retry-after": "soon"})).retry_after_s == 1.0
    assert status_error("acme", HttpAnswer(429, b"", {}), retry_after_s=2.5).retry_after_s == 2.5


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's name
        length = int(self.headers.get("content-length", 0))
        body = self.rfile.read(length)
        if self.path == "/hang":
            self.server.release.wait(10)  # type: ignore[attr-defined]
            return
        if self.path == "/echo":
            out = b'{"got": %d, "key": "%s"}' % (len(body), self.headers.get("Idempotency-Key", "").encode())
            self.send_response(200)
        elif self.path == "/list":
            out = b"[1, 2]"
            self.send_response(200)
        else:
            out = b'{"message": "the payload echoed: secret"}'
            self.send_response(int(self.path.strip("/")))
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.release = threading.Event()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.release.set()  # type: ignore[attr-defined]
    httpd.shutdown()
    httpd.server_close()


def test_a_json_call_sends_its_payload_and_headers_and_reads_the_answer(server):
    answer = HttpClient("acme", server).call("POST", "/echo", payload={"a": 1}, headers={"Idempotency-Key": "k1"})
    assert answer == {"got": len(b'{"a": 1}'), "key": "k1"}


def test_a_refusal_raises_the_mapped_class_without_the_body(server):
    with pytest.raises(ProviderRejected) as info:
        HttpClient("acme", server).call("POST", "/422", payload={})
    assert info.value.status == 422 and "secret" not in str(info.value)


def test_an_answer_that_is_not_a_json_object_is_a_provider_error(server):
    with pytest.raises(ProviderError, match="not a JSON object"):
        HttpClient("acme", server).call("POST", "/list", payload={})


def test_a_read_timeout_is_ambiguous_the_request_may_have_acted(server):
    with pytest.raises(ProviderAmbiguous, match="no answer within 0.3 s"):
        HttpClient("acme", server).call("POST", "/hang", payload={}, timeout_s=0.3)


def test_a_refused_connection_is_unavailable_and_not_ambiguous():
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ProviderUnavailable) as info:
        HttpClient("acme", f"http://127.0.0.1:{port}").call("POST", "/x", payload={})
    assert type(info.value) is ProviderUnavailable and "unreachable" in str(info.value)
