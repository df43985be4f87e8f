"""Another team operates its app with the wheels alone: `jobfence status`, `ledger`, `local up` and the console
on examples/invoices (its catalog, not this repository's), from the three wheels `make dist` builds.

The wheels are installed into a throwaway directory (offline, without dependencies: the venv has them) that is
the only thing on PYTHONPATH; the example is copied out of the repository, so nothing of this checkout (its
`functions/`, its `jobs`, its `infra/`) can be found. The app is found as its own pyproject.toml names it
(`[tool.jobfence] app`), the command is the installed `jobfence` script.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.wheels import build_wheels

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "invoices"
PROJECTS = [ROOT / "packages" / "jobfence", ROOT / "packages" / "jobfence-cdk", ROOT]
JOB = "mark_overdue_invoices"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> tuple[pathlib.Path, dict[str, str], list[str]]:
    """(the app's copy, the environment with only the wheels on the path, the `jobfence` command)."""
    base = tmp_path_factory.mktemp("outside")
    dist, site, app = base / "dist", base / "site", base / "invoices"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build_wheels(dist, PROJECTS)
    subprocess.run([*pip, "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
                    *map(str, sorted(dist.glob("*.whl")))], check=True, capture_output=True)
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__", ".jobfence", "cdk.out"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "JOBFENCE_APP")}
    env.update(PYTHONPATH=str(site), JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", AWS_DEFAULT_REGION="us-east-1",
               JOBFENCE_LOCAL_DIR=str(base / "local"))
    return app, env, [sys.executable, str(site / "bin" / "jobfence")]


def run(command: list[str], app: pathlib.Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=app, env=env, capture_output=True, text=True, timeout=600)


def test_status_and_ledger_of_the_example_from_the_wheels(outside):
    app, env, jobfence = outside
    # WHEN the team asks for status and the ledger of a runtime that ran two simulated hours
    status = run([*jobfence, "status", "--embedded", "--advance-hours", "2", "--json"], app, env)
    # THEN its one job is there (its app's stack prefix), ran, with nothing missed
    assert status.returncode == 0, status.stdout[-2000:] + status.stderr[-2000:]
    jobs = {row["job"]: row for row in json.loads(status.stdout)["jobs"]}
    assert set(jobs) == {JOB}
    assert jobs[JOB]["rule"] == f"invoices-{JOB}"
    assert jobs[JOB]["last_run"]["outcome"] == "ran"
    ledger = run([*jobfence, "ledger", JOB, "--embedded", "--advance-hours", "2", "--json"], app, env)
    assert ledger.returncode == 0, ledger.stdout[-2000:] + ledger.stderr[-2000:]
    labels = [tick["label"] for tick in json.loads(ledger.stdout)["entries"]]
    assert labels == ["ran", "ran"]
    # AND a job of this repository is not this app's
    other = run([*jobfence, "runs", "reclaim_listings", "--embedded"], app, env)
    assert other.returncode == 2 and f"jobs: {JOB}" in other.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_local_up_and_the_console_of_the_example_from_the_wheels(outside):
    app, env, jobfence = outside
    up = run([*jobfence, "local", "up"], app, env)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    console = None
    try:
        assert run([*jobfence, "local", "advance", "1h"], app, env).returncode == 0
        status = run([*jobfence, "status", "--local", "--json"], app, env)
        assert status.returncode == 0, status.stderr[-2000:]
        assert json.loads(status.stdout)["jobs"][0]["last_run"]["outcome"] == "ran"
        # WHEN the console serves this runtime
        port = free_port()
        console = subprocess.Popen([*jobfence, "console", "--local", "--read-only", "--port", str(port)], cwd=app,
                                   env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        page = ""
        for _ in range(200):  # its start: polled, at most 20 s
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    page = response.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        # THEN its jobs page lists the app's job
        assert JOB in page, page[-2000:]
    finally:
        if console is not None:
            console.terminate()
            console.wait(timeout=30)
        down = run([*jobfence, "local", "down"], app, env)
        assert down.returncode == 0, down.stderr[-2000:]
