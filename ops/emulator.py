"""moto's server on a free loopback port: the AWS the local runtime talks to.

Everything local (the demo, the operator CLI's embedded mode, the sim tests)
reaches AWS through real HTTP against this server, so wire behaviour
(conditional writes, transactions, concurrent requests) is moto's, not a mock's.
"""

from __future__ import annotations

import logging
import os

import boto3
from moto.server import ThreadedMotoServer

REGION = "us-east-1"
# moto accepts any credentials; fixed fake ones keep a developer's real profile out of local runs.
FAKE_CREDENTIALS = {"aws_access_key_id": "local", "aws_secret_access_key": "local"}


class Emulator:
    """One moto server, started on a free port, and sessions that talk to it."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self.endpoint: str | None = None
        self._server: ThreadedMotoServer | None = None

    def start(self) -> "Emulator":
        """Start the server (port 0: the OS picks a free loopback port)."""
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        """Stop the server; its state is gone."""
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "Emulator":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def session(self) -> "EmulatorSession":
        """A session whose clients all talk to this emulator."""
        if self.endpoint is None:
            raise RuntimeError("the emulator is not started")
        return EmulatorSession(self.endpoint, self.region)

    def environment(self) -> dict[str, str]:
        """Environment variables that point boto3 (and pynamodb) in a child process at the emulator."""
        return {
            "AWS_ENDPOINT_URL": str(self.endpoint),
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ACCESS_KEY_ID": FAKE_CREDENTIALS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": FAKE_CREDENTIALS["aws_secret_access_key"],
        }


class EmulatorSession:
    """A boto3 session whose clients all carry the emulator's endpoint."""

    def __init__(self, endpoint: str, region: str) -> None:
        self.endpoint = endpoint
        self.region_name = region
        self._session = boto3.Session(region_name=region, **FAKE_CREDENTIALS)

    def client(self, name: str, **kwargs):
        kwargs.setdefault("endpoint_url", self.endpoint)
        return self._session.client(name, **kwargs)

    def resource(self, name: str, **kwargs):
        kwargs.setdefault("endpoint_url", self.endpoint)
        return self._session.resource(name, **kwargs)


def point_process_at(emulator: Emulator) -> None:
    """Point this process's default boto3/pynamodb clients at the emulator.

    pynamodb builds its own botocore clients from the environment, so the
    endpoint has to be in `os.environ` (botocore honours AWS_ENDPOINT_URL).
    """
    os.environ.update(emulator.environment())
    os.environ.pop("AWS_PROFILE", None)
