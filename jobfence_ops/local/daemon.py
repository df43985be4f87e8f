"""The background local runtime: `python -m jobfence_ops.local.daemon DIR` (started by `jobfence local up`).

It starts a `LocalRuntime` (synth cached by a hash of the app's inputs, deploy
into moto), points this process at its emulator, and serves a small control
API on loopback so that later commands chain against the same state:

    GET  /state          endpoint, region, stack, simulated now
    GET  /topology       what is deployed (read back from the emulator once, at start)
    POST /invoke         {"function", "event"} -> the invocation
    POST /advance        {"ms"} -> JSON lines: progress, notable events, then the totals
    POST /kill-worker    {"function"?} -> the worker whose next delivery that claims is killed mid-batch
    POST /stop           stop the runtime and exit

Every request carries the token written (mode 0600) to DIR/state.json with
the address; the state file disappears when the daemon stops.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jobfence_ops.emulator import point_process_at
from jobfence_ops.local.control import STATE_FILE, TOKEN_HEADER
from jobfence_ops.runtime.runtime import LocalRuntime, Tick
from jobfence_ops.runtime.sqs import Delivery
from jobfence_ops.runtime.workers import Invocation

PROGRESS_STEPS = 48  # progress lines per `advance`
MAX_BODY_BYTES = 1024 * 1024


def kill_after_claims(claims: int) -> list[dict[str, object]]:
    """A worker's fault plan: its isolate dies right after its `claims`-th claim landed (a claim is the only
    UpdateItem of a worker that names `attempts`): mid-batch, between claim and outcome, those items left
    running under a token nobody holds until the reclaim sweep finds them stale."""
    return [{"operation": "UpdateItem", "contains": '"attempts"', "action": "kill", "after": claims}]


KILL_MID_BATCH = kill_after_claims(2)


class ControlServer(ThreadingHTTPServer):
    """`run-all` opens one connection per job at once: a listen backlog for all of them (the default is 5)."""

    request_queue_size = 128
    daemon_threads = True


class ControlError(Exception):
    """A request the daemon refuses; the message goes back to the caller (HTTP 400)."""


def invocation_json(inv: Invocation) -> dict[str, Any]:
    return {
        "function": inv.function,
        "status": inv.status,
        "payload": inv.payload,
        "error_type": inv.error_type,
        "error_message": inv.error_message,
        "cold": inv.cold,
        "wall_ms": inv.wall_ms,
    }


def notable_tick(tick: Tick) -> str | None:
    """A line for a tick worth an operator's eye (a failure, a death, a lost lease), else None."""
    inv = tick.invocation
    if not tick.fired or inv is None:
        return None
    outcome = (inv.payload or {}).get("outcome") if inv.ok and isinstance(inv.payload, dict) else inv.status
    if outcome in ("failed", "lease_lost", "died", "error", "timeout", "init_error"):
        detail = f": {inv.error_type}: {inv.error_message}" if inv.error_type else ""
        return f"{tick.job or tick.rule}: {outcome}{detail}"[:300]
    return None


def notable_delivery(delivery: Delivery) -> str | None:
    status = delivery.invocation.status
    if status == "ok":
        return None
    what = "died mid-batch" if status == "died" else status
    return (
        f"{delivery.function}: an isolate {what} ({delivery.messages} message(s) stay in flight until their "
        "visibility timeout)"
    )


class Daemon:
    """One runtime and the control API over it."""

    def __init__(self, runtime: LocalRuntime, directory: pathlib.Path) -> None:
        self.runtime = runtime
        self.directory = directory
        self.token = secrets.token_urlsafe(24)
        self._advancing = threading.Lock()
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        runtime.on_tick = self._tick
        runtime.poller.on_delivery = self._delivery
        self.server = ControlServer(("127.0.0.1", 0), _handler(self))

    # -- events of an advance ----------------------------------------------------------------

    def _emit(self, message: dict[str, Any]) -> None:
        for listener in list(self._listeners):
            listener(message)

    def _tick(self, tick: Tick) -> None:
        line = notable_tick(tick)
        self._emit({"type": "tick", "fired": tick.fired, "outcome": _outcome(tick.invocation), "at_ms": tick.at_ms})
        if line:
            self._emit({"type": "event", "at_ms": tick.at_ms, "text": line})

    def _delivery(self, delivery: Delivery) -> None:
        line = notable_delivery(delivery)
        self._emit({"type": "delivery", "status": delivery.invocation.status, "messages": delivery.messages})
        if line:
            self._emit({"type": "event", "at_ms": self.runtime.clock.now_ms(), "text": line})

    # -- operations ----------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        rt = self.runtime
        return {
            "pid": os.getpid(),
            "control_url": f"http://127.0.0.1:{self.server.server_port}",
            "token": self.token,
            "endpoint": rt.emulator.endpoint,
            "region": rt.session.region_name,
            "stack": rt.topology.stack_name,
            "now_ms": rt.clock.now_ms(),
            "start_ms": rt.start_ms,
            "log_dir": str(rt.log_dir),
        }

    def advance(self, ms: int, send: Callable[[dict[str, Any]], None]) -> None:
        if not 0 < ms <= 31 * 86_400_000:
            raise ControlError("advance by more than 0 and at most 31 days")
        totals: Counter = Counter()

        def listen(message: dict[str, Any]) -> None:
            if message["type"] == "tick":
                totals[f"tick {message['outcome']}" if message["fired"] else "tick not fired (rule disabled)"] += 1
            elif message["type"] == "delivery":
                totals[f"delivery {message['status']}"] += 1
            elif message["type"] == "event":
                send(message)

        with self._advancing:
            start = self.runtime.clock.now_ms()
            until = start + ms
            self._listeners.append(listen)
            try:
                for step in range(1, PROGRESS_STEPS + 1):
                    self.runtime.advance_to(start + ms * step // PROGRESS_STEPS)
                    send(
                        {
                            "type": "progress",
                            "start_ms": start,
                            "now_ms": self.runtime.clock.now_ms(),
                            "until_ms": until,
                        }
                    )
            finally:
                self._listeners.remove(listen)
        send({"type": "done", "now_ms": self.runtime.clock.now_ms(), "totals": dict(sorted(totals.items()))})

    def kill_worker(self, function: str | None) -> str:
        top = self.runtime.topology
        workers = sorted({top.function_by_arn(m.function_arn).name for m in top.mappings})
        name = function or next((w for w in workers if "generation" in w), workers[0] if workers else None)
        if name not in workers:
            raise ControlError(f"no queue worker {function!r}; workers: {', '.join(workers)}")
        self.runtime.poller.faults[name] = [dict(f) for f in KILL_MID_BATCH]
        return name

    def write_state(self) -> None:
        path = self.directory / STATE_FILE
        scratch = path.with_suffix(".tmp")
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({k: v for k, v in self.state().items() if k != "now_ms"}, out)
        scratch.replace(path)

    def shutdown(self) -> None:
        threading.Thread(target=self.server.shutdown, daemon=True).start()

    def close(self) -> None:
        """Stop serving and hand the runtime's callbacks back (the runtime itself keeps running)."""
        self.server.shutdown()
        self.server.server_close()
        self.runtime.on_tick = None
        self.runtime.poller.on_delivery = None
        (self.directory / STATE_FILE).unlink(missing_ok=True)


def _outcome(inv: Invocation | None) -> str:
    if inv is None:
        return "-"
    if inv.ok and isinstance(inv.payload, dict):
        return str(inv.payload.get("outcome", "ok"))
    return inv.status


def _handler(daemon: Daemon) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # the daemon's log holds the runtime's story, not access lines
            pass

        def _reply(self, status: int, body: Any) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if secrets.compare_digest(self.headers.get(TOKEN_HEADER, ""), daemon.token):
                return True
            self._reply(403, {"error": "bad or missing control token"})
            return False

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY_BYTES:
                raise ControlError("request body too large")
            value = json.loads(self.rfile.read(length) or b"{}")
            if not isinstance(value, dict):
                raise ControlError("a request body is a JSON object")
            return value

        def do_GET(self) -> None:
            if not self._authorized():
                return
            if self.path == "/state":
                self._reply(200, daemon.state())
            elif self.path == "/topology":
                self._reply(200, daemon.runtime.topology.as_plain())
            else:
                self._reply(404, {"error": f"no route {self.path}"})

        def do_POST(self) -> None:
            if not self._authorized():
                return
            try:
                body = self._body()
                if self.path == "/invoke":
                    if not isinstance(body.get("function"), str):
                        raise ControlError("invoke needs a function name")
                    if body["function"] not in daemon.runtime.topology.functions:
                        raise ControlError(f"no function {body['function']!r}")
                    self._reply(200, invocation_json(daemon.runtime.invoke(body["function"], body.get("event"))))
                elif self.path == "/advance":
                    self._stream(lambda send: daemon.advance(int(body.get("ms", 0)), send))
                elif self.path == "/kill-worker":
                    self._reply(200, {"function": daemon.kill_worker(body.get("function"))})
                elif self.path == "/stop":
                    self._reply(200, {"stopping": True})
                    daemon.shutdown()
                else:
                    self._reply(404, {"error": f"no route {self.path}"})
            except (ControlError, ValueError, TypeError) as exc:
                self._reply(400, {"error": str(exc)})

        def _stream(self, run: Callable[[Callable[[dict[str, Any]], None]], None]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True

            def send(message: dict[str, Any]) -> None:
                self.wfile.write(json.dumps(message, default=str).encode() + b"\n")
                self.wfile.flush()

            try:
                run(send)
            except ControlError as exc:
                send({"type": "error", "error": str(exc)})

    return Handler


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    directory = pathlib.Path(args[0])
    directory.mkdir(parents=True, exist_ok=True)
    runtime = LocalRuntime.start()
    try:
        point_process_at(runtime.emulator)  # this process's own stores (operator commands) reach the emulator
        daemon = Daemon(runtime, directory)
        signal.signal(signal.SIGTERM, lambda *_: daemon.shutdown())
        daemon.write_state()
        print(
            f"local runtime up: emulator {runtime.emulator.endpoint}, control {daemon.state()['control_url']}",
            flush=True,
        )
        daemon.server.serve_forever()
        daemon.server.server_close()  # refuse connections from here on
    finally:
        (directory / STATE_FILE).unlink(missing_ok=True)
        runtime.stop()
    print("local runtime stopped", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
