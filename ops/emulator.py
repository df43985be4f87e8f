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
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from typing import Any

import boto3
from werkzeug.serving import make_server

REGION = "us-east-1"
# moto accepts any credentials; fixed fake ones keep a developer's real profile out of local runs.
FAKE_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


class _Serialized:
    """WSGI middleware: one request inside moto at a time."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        with self._lock:
            # materialize the body inside the lock: backend state is read while producing it
            return list(self._app(environ, start_response))


class SerializedMotoServer:
    """moto's WSGI app behind `_Serialized`, served by a threaded werkzeug server."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from moto.moto_server.threaded_moto_server import MotoRequestHandler
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        app = _Serialized(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler)
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
