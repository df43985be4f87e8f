"""The lease suite on two DynamoDB implementations: moto (in-process) and dynalite (over HTTP).

A test module opts in with

    from tests.backends import backend, dynamodb, pytest_generate_tests, tables  # noqa: F401

and its `dynamodb` and `tables` then come from each backend in turn. A test
marked `@pytest.mark.transactions` runs on moto only: dynalite has no
TransactWriteItems (a limit of that implementation, not of the code).
"""

from __future__ import annotations

import os
import pathlib
import subprocess

import boto3
import pytest

from tests.support import create_catalog_tables

ROOT = pathlib.Path(__file__).resolve().parents[1]
BACKENDS = ("moto", "dynalite")
# dynalite's own server, listening on a port the OS picks and printing it (its CLI cannot take port 0)
_LAUNCH = (
    "const server = require('dynalite')({createTableMs: 0, deleteTableMs: 0, updateTableMs: 0});"
    "server.listen(0, '127.0.0.1', () => console.log(server.address().port));"
)


class Dynalite:
    """A dynalite process on loopback, in memory; stopped (its data gone) on exit."""

    def __init__(self) -> None:
        self.endpoint: str | None = None
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> "Dynalite":
        if not (ROOT / "node_modules" / "dynalite").is_dir():
            raise RuntimeError("dynalite is missing from node_modules: run `npm ci` (it is a devDependency)")
        self._process = subprocess.Popen(
            ["node", "-e", _LAUNCH], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self._process.stdout.readline().strip()  # blocks until it listens (or exits)
        if not line.isdigit():
            self._process.kill()
            raise RuntimeError(f"dynalite did not start: {line or self._process.stderr.read()[:500]}")
        self.endpoint = f"http://127.0.0.1:{line}"
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=10)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" in metafunc.fixturenames:
        moto_only = metafunc.definition.get_closest_marker("transactions") is not None
        metafunc.parametrize("backend", ["moto"] if moto_only else list(BACKENDS), indirect=True)


@pytest.fixture
def backend(request) -> str:
    return request.param


@pytest.fixture
def dynamodb(backend, request):
    """A DynamoDB client of the backend under test."""
    if backend == "moto":
        return request.getfixturevalue("aws").client("dynamodb")
    return boto3.client(
        "dynamodb",
        endpoint_url=request.getfixturevalue("dynalite"),
        region_name=os.environ["AWS_DEFAULT_REGION"],
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )


@pytest.fixture
def tables(dynamodb) -> dict[str, str]:
    """The leases and runs tables, fresh for the test (unique names: dynalite lives for the session), active.

    dynalite answers CreateTable with CREATING and activates the table a moment later (moto at once):
    on a loaded machine a first write could still find no table.
    """
    made = create_catalog_tables(dynamodb, names={"leases", "runs"})
    for physical in made.values():
        for _ in range(200):  # each a request: the loop waits on dynalite, not on a timer
            if dynamodb.describe_table(TableName=physical)["Table"]["TableStatus"] == "ACTIVE":
                break
        else:
            raise RuntimeError(f"table {physical} never became active")
    return made


def peer_client(dynamodb):
    """Another client of the same backend (another Lambda's), without the test's fault hooks."""
    return boto3.client(
        "dynamodb",
        endpoint_url=dynamodb.meta.endpoint_url,
        region_name=dynamodb.meta.region_name,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
