"""The client side of the background local runtime: start it, stop it, talk to it.

`up` starts `python -m jobfence_ops.local.daemon DIR` in its own session (it outlives
the command), in the app's directory and with its catalog (`jobfence_ops.app`), and waits until it has written DIR/state.json; `down` asks it to
stop. `LocalControl` is the control API of a running daemon.
"""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from jobfence_ops.app import APP_ENV, App
from jobfence_ops.runtime.template import package_parents
from jobfence_ops.runtime.topology import Topology
from jobfence_ops.runtime.workers import Invocation

STATE_FILE = "state.json"  # written by the daemon (mode 0600) once it serves; removed when it stops
TOKEN_HEADER = "X-Jobfence-Token"
DEFAULT_DIR = pathlib.Path(".jobfence") / "local"  # under the app's directory
START_TIMEOUT_S = 600  # a first start synthesizes the CDK app; later ones reuse the cached assembly
STOP_TIMEOUT_S = 30
POLL_S = 0.25  # waiting for another process (the daemon) to write its state file or exit
INVOKE_TIMEOUT_S = 960  # longer than any function's timeout


class LocalError(RuntimeError):
    """The local runtime is not up, did not start, or refused a request; the message says which."""


@dataclass(frozen=True)
class LocalState:
    pid: int
    control_url: str
    token: str
    endpoint: str
    region: str
    stack: str
    now_ms: int
    start_ms: int
    log_dir: str


class LocalControl:
    """The control API of the running daemon whose state file is in `directory`."""

    def __init__(self, directory: pathlib.Path = DEFAULT_DIR) -> None:
        self.directory = directory
        path = directory / STATE_FILE
        if not path.is_file():
            raise LocalError("the local runtime is not up: start it with `jobfence local up`")
        saved = json.loads(path.read_text())
        self.pid = int(saved["pid"])
        self._token = saved["token"]
        url = saved["control_url"].removeprefix("http://")
        self._host, _, port = url.partition(":")
        self._port = int(port)

    def _request(
        self, method: str, path: str, body: Any = None, timeout: float | None = 60
    ) -> http.client.HTTPResponse:
        connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        data = json.dumps(body).encode() if body is not None else None
        headers = {TOKEN_HEADER: self._token, "Content-Type": "application/json"}
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
        except OSError as exc:
            raise LocalError(
                f"the local runtime (pid {self.pid}) does not answer: {exc}; `jobfence local down` then `up`"
            ) from None
        if response.status != 200:
            try:
                message = json.loads(response.read()).get("error")
            except ValueError:
                message = None
            raise LocalError(message or f"the local runtime answered HTTP {response.status}")
        return response

    def _call(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        return json.loads(self._request(method, path, body, timeout).read())

    def state(self) -> LocalState:
        return LocalState(**self._call("GET", "/state"))

    def topology(self) -> Topology:
        return Topology.from_plain(self._call("GET", "/topology"))

    def invoke(self, function: str, event: Any) -> Invocation:
        out = self._call("POST", "/invoke", {"function": function, "event": event}, timeout=INVOKE_TIMEOUT_S)
        return Invocation(
            out["function"],
            out["status"],
            payload=out["payload"],
            error_type=out["error_type"],
            error_message=out["error_message"],
            cold=out["cold"],
            wall_ms=out["wall_ms"],
        )

    def advance(self, ms: int) -> Iterator[dict[str, Any]]:
        """Move simulated time; yields the daemon's progress, event and done messages as they come."""
        response = self._request("POST", "/advance", {"ms": ms}, timeout=None)  # as long as the simulation takes
        for line in response:
            message = json.loads(line)
            if message.get("type") == "error":
                raise LocalError(message["error"])
            yield message

    def kill_worker(self, function: str | None = None) -> str:
        return self._call("POST", "/kill-worker", {"function": function})["function"]

    def stop(self) -> None:
        self._call("POST", "/stop", {})


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(directory: pathlib.Path = DEFAULT_DIR) -> LocalControl | None:
    """The control of a daemon that answers, or None (a stale state file is removed)."""
    try:
        control = LocalControl(directory)
    except LocalError:
        return None
    try:
        control.state()
    except LocalError:
        if not _alive(control.pid):
            (directory / STATE_FILE).unlink(missing_ok=True)
            return None
        raise
    return control


def up(directory: pathlib.Path, app: App, on_wait: Callable[[float], None] | None = None) -> tuple[LocalControl, bool]:
    """Start the daemon of `app` unless one is running; (its control, True if started now)."""
    existing = running(directory)
    if existing is not None:
        return existing, False
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "daemon.log"
    # the daemon imports this very tooling, runtime and constructs (wherever they are installed) and runs the app
    parents = package_parents(("jobfence_ops", "jobfence", "jobfence_cdk"))
    path = os.pathsep.join(p for p in (*parents, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, APP_ENV: app.spec, "PYTHONPATH": path}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "jobfence_ops.local.daemon", str(directory)],
            cwd=app.root,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = time.monotonic()
    while not (directory / STATE_FILE).is_file():
        if process.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-12:])
            raise LocalError(f"the local runtime exited with status {process.returncode} while starting:\n{tail}")
        elapsed = time.monotonic() - started
        if elapsed > START_TIMEOUT_S:
            process.terminate()
            raise LocalError(f"the local runtime did not start within {START_TIMEOUT_S}s (log: {log_path})")
        if on_wait:
            on_wait(elapsed)
        time.sleep(POLL_S)
    return LocalControl(directory), True


def down(directory: pathlib.Path = DEFAULT_DIR) -> bool:
    """Stop the daemon; False when none was running."""
    control = running(directory)
    if control is None:
        return False
    control.stop()
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(control.pid) and (directory / STATE_FILE).is_file():
        if time.monotonic() > deadline:
            os.kill(control.pid, signal.SIGTERM)  # the daemon this state file names, started by `up`
            break
        time.sleep(POLL_S)
    return True
