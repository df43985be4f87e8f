"""moto's server on a free loopback port: the AWS the local runtime talks to.

Everything local (the demo, the operator CLI's embedded mode, the sim tests)
reaches AWS through real HTTP against this server, so wire behaviour
(conditional writes, transactions, concurrent requests) is moto's, not a mock's.

One correction to moto: DynamoDB applies each request to an item atomically,
so two conditional writes racing for one lease item are serialized and exactly
one wins. moto's threaded server does not guarantee that (two threads can both
evaluate a condition against the old item and both write: seen here as two
winners of one lease). The server below keeps moto's threaded HTTP front but
lets one request at a time into moto, which is the behaviour races are about.

And one correction to werkzeug's development server: it closes the connection
after every response (it cannot drain a request body it did not read), so every
request paid a TCP connect, a new server thread and a 10 ms drain wait. The
handler below reads each request's body whole before moto sees it, answers
with a Content-Length and keeps the connection open (HTTP/1.1), so botocore's
connection pools reuse their connections as they do against AWS.

The server also takes `jobfence_ops.moto_fast`'s two shortcuts in moto's DynamoDB path
(the same responses, about half the work per request).
"""

from __future__ import annotations

import io
import logging
import os
import re
import threading
import traceback
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import boto3
from werkzeug.serving import ThreadedWSGIServer, make_server

from jobfence_ops import moto_fast

REGION = "us-east-1"
# moto accepts any credentials; fixed fake ones keep a developer's real profile out of local runs.
FAKE_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


_INVOKE_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")
# (function name, invocation type, request body) -> (status line, headers, body)
InvokeHandler = Callable[[str, str, bytes], tuple[str, list[tuple[str, str]], bytes]]


class _Invokes:
    """WSGI middleware: Lambda's Invoke goes to `handler` (the local runtime's isolates) when one is set.

    moto's own Lambda backend runs a function in Docker, which is not here: it
    printed `error running docker` and ran nothing. The runtime's handler runs
    the function in its isolate (RequestResponse) or queues it for the driver
    to run at the current simulated instant (Event), as Lambda's async queue does.
    """

    def __init__(self, app: Any) -> None:
        self._app = app
        self.handler: InvokeHandler | None = None

    def __call__(self, environ: dict, start_response: Any) -> Any:
        match = _INVOKE_PATH.match(environ.get("PATH_INFO", ""))
        if self.handler is None or match is None or environ.get("REQUEST_METHOD") != "POST":
            return self._app(environ, start_response)
        name = unquote(match["name"])
        if name.startswith("arn:"):  # arn:aws:lambda:region:account:function:name[:qualifier]
            name = name.split(":")[6]
        body = environ["wsgi.input"].read()
        status, headers, payload = self.handler(
            name, environ.get("HTTP_X_AMZ_INVOCATION_TYPE", "RequestResponse"), body
        )
        start_response(status, headers)
        return [payload]


def _host_cached(dispatcher: type) -> type:
    """moto's dispatcher, remembering which backend serves a host.

    moto looks the backend of a request's host up anew for every request:
    a listing of its package folder and a stat of each of its ~200 entries, then
    its URL patterns in turn (about a third of a GetItem's time in the server).
    The answer depends on the host alone (moto's folders and patterns do not
    change while it runs), so it is kept per host.
    """

    class HostCachedDispatcher(dispatcher):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._backend_of: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:
            if host not in self._backend_of:  # called under moto's dispatcher lock
                self._backend_of[host] = super().get_backend_for_host(host)
            return self._backend_of[host]

    return HostCachedDispatcher


class _Serialized:
    """WSGI middleware: one request inside moto at a time."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        with self._lock:
            # materialize the body inside the lock: backend state is read while producing it
            return list(self._app(environ, start_response))


IDLE_CONNECTION_S = 600  # a kept-alive connection idle this long is closed (its thread ends); clients reconnect
_NO_BODY_STATUSES = (204, 304)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length"}


def _keep_alive_handler(base: type) -> type:
    """moto's request handler (werkzeug's, with moto's header spelling) answering on a kept-alive connection."""

    class KeepAliveHandler(base):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # a response's headers and body leave at once, never 40 ms apart
        timeout = IDLE_CONNECTION_S
        accepted = 0  # connections accepted (the wire test reads it: one per client connection, not per request)

        def setup(self) -> None:
            type(self).accepted += 1
            super().setup()

        def run_wsgi(self) -> None:
            environ = self.make_environ()
            if self.headers.get("Expect", "").lower().strip() == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            # the whole body now: the next request's line follows it on this connection
            body = (
                environ["wsgi.input"].read()
                if environ.get("wsgi.input_terminated")
                else self.rfile.read(int(self.headers.get("Content-Length") or 0))
            )
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            environ.pop("wsgi.input_terminated", None)
            reply: list[Any] = []

            def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                reply[:] = [status, headers]
                return lambda data: None  # the write() callable: moto never uses it

            try:
                chunks = self.server.app(environ, start_response)
                data = b"".join(chunks)
                if hasattr(chunks, "close"):
                    chunks.close()
                status, headers = reply
            except Exception:  # noqa: BLE001 - a server error is the client's 500, as werkzeug answered it
                status, headers, data = (
                    "500 INTERNAL SERVER ERROR",
                    [("Content-Type", "text/plain")],
                    traceback.format_exc().encode(),
                )
                self.close_connection = True
            code = int(status.split(" ", 1)[0])
            head = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in headers if k.lower() not in _HOP_BY_HOP]
            if self.command == "HEAD":  # no body, and the length moto stated for the resource
                head += [f"{k}: {v}" for k, v in headers if k.lower() == "content-length"]
                data = b""
            elif code not in _NO_BODY_STATUSES and not 100 <= code < 200:
                head.append(f"Content-Length: {len(data)}")
            else:
                data = b""
            if self.close_connection:
                head.append("Connection: close")
            self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)

        def log_request(self, *args: Any) -> None:  # one line per request otherwise
            pass

        def log_error(self, *args: Any) -> None:  # an idle connection timing out is not an error
            pass

    return KeepAliveHandler


class SerializedMotoServer:
    """moto's WSGI app behind `_Serialized`, served by a threaded werkzeug server on kept-alive connections."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from moto.moto_server.threaded_moto_server import MotoRequestHandler
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        moto_fast.install()
        self.invokes = _Invokes(_Serialized(_host_cached(DomainDispatcherApplication)(create_backend_app)))
        app = self.invokes  # outside the lock: an invocation's own requests reach moto while it runs
        self.handler = _keep_alive_handler(MotoRequestHandler)
        server = make_server(host, port, app, threaded=True, request_handler=self.handler)
        assert isinstance(server, ThreadedWSGIServer)
        self._server = server
        # kept-alive connections hold their threads until the client closes them: stop must not wait for those
        self._server.block_on_close = False
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)
        self.host, self.port = host, self._server.port

    def start(self) -> None:
        self._thread.start()

    def get_host_and_port(self) -> tuple[str, int]:
        return self.host, self.port

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class Emulator:
    """One moto server, started on a free port, and sessions that talk to it."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self.endpoint: str | None = None
        self._session: EmulatorSession | None = None
        self._server: SerializedMotoServer | None = None

    def start(self) -> Emulator:
        """Start the server (port 0: the OS picks a free loopback port)."""
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
        # moto warns about every CloudFormation resource type it does not model (queue policies, ...)
        logging.getLogger("moto").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", category=UserWarning, module=r"moto\..*")
        self._server = SerializedMotoServer("127.0.0.1", 0)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    @property
    def handler(self) -> Any:
        """The server's request handler class (its `accepted` counts the connections the server took)."""
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        return self._server.handler

    def route_invokes(self, handler: InvokeHandler | None) -> None:
        """Lambda's Invoke of any function goes to `handler` (None: back to moto's Lambda backend)."""
        if self._server is None:
            raise RuntimeError("the emulator is not started")
        self._server.invokes.handler = handler

    def stop(self) -> None:
        """Stop the server; its state is gone."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def detach_sqs_event_sources(self, account: str) -> None:
        """Switch off moto's own SQS-to-Lambda delivery for every queue of the server.

        moto delivers to a mapped function itself on every SendMessage (through Docker,
        which is not here): it would receive the messages with a real-time visibility and
        hide them from the local runtime's poller. The server runs in this process, so its
        queues are switched off from that path; the mappings themselves stay
        (ListEventSourceMappings and UpdateEventSourceMapping are unchanged).
        """
        from moto.sqs.models import sqs_backends  # moto's backends load with the server, not with the CLI

        for queue in sqs_backends[account][self.region].queues.values():
            queue.lambda_event_source_mappings.clear()

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def session(self) -> EmulatorSession:
        """A session whose clients all talk to this emulator."""
        if self.endpoint is None:
            raise RuntimeError("the emulator is not started")
        if self._session is None or self._session.endpoint != self.endpoint:
            self._session = EmulatorSession(self.endpoint, self.region)
        return self._session

    def environment(self) -> dict[str, str]:
        """Environment variables that point boto3 (and pynamodb) in a child process at the emulator."""
        return environment_for(str(self.endpoint), self.region)


class EmulatorSession:
    """A boto3 session whose clients all carry the emulator's endpoint."""

    def __init__(self, endpoint: str, region: str) -> None:
        self.endpoint = endpoint
        self.region_name = region
        self._session = boto3.Session(region_name=region, **FAKE_CREDENTIALS)
        self._clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def client(self, name: str, **kwargs):
        """A client of the emulator; plain ones are cached (creating one costs ~0.1-0.5 s, they are thread-safe)."""
        kwargs.setdefault("endpoint_url", self.endpoint)
        if set(kwargs) != {"endpoint_url"}:
            return self._session.client(name, **kwargs)
        with self._lock:
            if name not in self._clients:
                self._clients[name] = self._session.client(name, **kwargs)
            return self._clients[name]

    def fresh_client(self, name: str):
        """A client of its own (for per-invocation event hooks, which a shared client would mix up)."""
        return self._session.client(name, endpoint_url=self.endpoint)

    def resource(self, name: str, **kwargs):
        kwargs.setdefault("endpoint_url", self.endpoint)
        return self._session.resource(name, **kwargs)


def point_process_at(emulator: Emulator) -> None:
    """Point this process's default boto3/pynamodb clients at the emulator (see `point_process_at_endpoint`)."""
    point_process_at_endpoint(str(emulator.endpoint), emulator.region)


def point_process_at_endpoint(endpoint: str, region: str = REGION) -> None:
    """Point this process's default boto3/pynamodb clients at an emulator's endpoint.

    pynamodb builds its own botocore clients from the environment, so the
    endpoint has to be in `os.environ` (botocore honours AWS_ENDPOINT_URL).
    """
    os.environ.update(environment_for(endpoint, region))
    os.environ.pop("AWS_PROFILE", None)


def environment_for(endpoint: str, region: str = REGION) -> dict[str, str]:
    """Environment variables that point boto3 (and pynamodb) at an emulator."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"],
    }
