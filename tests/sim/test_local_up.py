"""`jobfence local up` starts the background runtime in a process of its own; `local down` stops it.

Real processes throughout (the CLI and the daemon), on the cached synthesis:
the daemon outlives the `up` command and answers later commands.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

pytestmark = pytest.mark.server

ROOT = pathlib.Path(__file__).resolve().parents[2]


def jobfence(directory: pathlib.Path, *argv: str) -> subprocess.CompletedProcess:
    # this checkout's tooling, runtime and constructs, whatever the venv has installed
    checkout = os.pathsep.join(str(p) for p in (ROOT, ROOT / "functions", ROOT / "infra"))
    env = {**os.environ, "JOBFENCE_LOCAL_DIR": str(directory), "PYTHONPATH": checkout}
    return subprocess.run([sys.executable, "-m", "jobfence_ops", *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_up_keeps_a_runtime_running_that_later_commands_use_and_down_stops(tmp_path):
    up = jobfence(tmp_path, "local", "up")
    assert up.returncode == 0 and "local runtime started" in up.stdout, up.stdout + up.stderr
    state = json.loads((tmp_path / "state.json").read_text())
    try:
        # THEN a second `up` finds it, and a later command reads its state
        again = jobfence(tmp_path, "local", "up")
        assert again.returncode == 0 and "already up" in again.stdout
        status = jobfence(tmp_path, "status", "--local", "--json")
        assert status.returncode == 0, status.stderr
        assert len(json.loads(status.stdout)["jobs"]) >= 1
    finally:
        down = jobfence(tmp_path, "local", "down")
    # AND `down` stopped the daemon and removed its state file
    assert down.returncode == 0 and "local runtime stopped" in down.stdout
    assert not (tmp_path / "state.json").exists()
    host, port = state["control_url"].removeprefix("http://").split(":")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5)
    after = jobfence(tmp_path, "status", "--local")
    assert after.returncode == 2 and after.stderr.startswith("jobfence: error: the local runtime is not up")


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_console_says_the_runtime_is_down_and_follows_it_after_a_new_up(tmp_path, aws_environment_kept):
    # GIVEN the console served over a background runtime (as `jobfence console --local` serves it)
    from jobfence_ops.console.server import ConsoleApp, ConsoleServer
    from jobfence_ops.local.control import LocalControl
    from jobfence_ops.targets import LocalTarget

    assert jobfence(tmp_path, "local", "up").returncode == 0
    server = None
    try:
        server = ConsoleServer(ConsoleApp(LocalTarget(LocalControl(tmp_path)))).start()
        status, page = get(server.url + "/")
        assert status == 200 and "clean_conversations" in page
        # WHEN the runtime goes down, THEN every page says so (503), clearly, and reloads itself
        assert jobfence(tmp_path, "local", "down").returncode == 0
        status, page = get(server.url + "/")
        assert status == 503 and "the local runtime is not up: start it with `jobfence local up`" in page
        assert 'http-equiv="refresh"' in page
        # WHEN a new runtime is up (new token, emulator and clock), THEN the same console shows it
        assert jobfence(tmp_path, "local", "up").returncode == 0
        status, page = get(server.url + "/")
        assert status == 200 and "clean_conversations" in page, page[-2000:]
        new_endpoint = json.loads((tmp_path / "state.json").read_text())["endpoint"]
        assert new_endpoint in page  # the navigation names the runtime it reads
    finally:
        if server is not None:
            server.stop()
        jobfence(tmp_path, "local", "down")
