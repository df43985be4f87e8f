"""`jobfence console`: a small web console over a target, on localhost (stdlib http.server).

Read-mostly: jobs (schedule, next tick, lease, last run, the last day's runs
by outcome), one job's runs, one run's row and its log query, batches with
progress bars and their item rows by status. Four actions, each a POST with
a CSRF token (form field and SameSite cookie), a ticked confirmation and the
operator's name, written to the audit stream: run now, retry failed items,
disable and enable a job's rule. A read-only console renders no button and
refuses every POST. A page of an open batch refreshes itself.
"""

from __future__ import annotations

import secrets
import threading
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, quote, unquote, urlsplit

from rich.console import Console

from ops.commands import batches, jobs, switches
from ops.commands.batches import parse_ref
from ops.console import pages
from ops.targets import OperatorError, Target

HOST = "127.0.0.1"
CSRF_COOKIE = "jobfence_csrf"
MAX_FORM_BYTES = 8 * 1024
BATCH_REFRESH_S = 3


class Refused(Exception):
    """A request the console refuses (bad token, read-only, unconfirmed); HTTP status and reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class ConsoleApp:
    """Routes and actions over one target; `audit(line)` receives every action taken."""

    def __init__(self, target: Target, read_only: bool = False, audit: Callable[[str], None] = print) -> None:
        self.target = target
        self.read_only = read_only
        self.csrf = secrets.token_urlsafe(24)
        self.audit = audit

    def _page(self, title: str, body: str, flash: str | None = None, refresh_s: int | None = None) -> str:
        return pages.page(title, body, target=self.target.name, now_ms=self.target.clock.now_ms(), flash=flash, refresh_s=refresh_s)

    # -- reads ---------------------------------------------------------------------------------

    def get(self, path: str, query: dict[str, str]) -> str:
        self.target.refresh()
        parts = [unquote(p) for p in path.strip("/").split("/") if p]
        flash = query.get("msg")
        if not parts:
            report = jobs.status(self.target)
            ledgers = {j.job: jobs.last_day(self.target, j.job) for j in report.jobs}
            return self._page("Jobs", pages.jobs_page(report, ledgers, self.csrf, self.read_only), flash)
        if parts[0] == "jobs" and len(parts) == 2:
            runs = jobs.runs(self.target, parts[1], 50)
            return self._page(f"Runs of {parts[1]}", pages.job_page(parts[1], runs, self.target.clock.now_ms(), self.csrf, self.read_only), flash)
        if parts[0] == "jobs" and len(parts) == 4 and parts[2] == "runs":
            run = jobs.find_run(self.target, parts[1], parts[3])
            return self._page(f"Run {parts[3]}", pages.run_page(run, jobs.log_query(run)), flash)
        if parts[0] == "batches" and len(parts) == 1:
            tenant = query.get("tenant") or None
            return self._page("Batches", pages.batches_page(batches.batches(self.target, tenant), tenant), flash)
        if parts[0] == "batches" and len(parts) == 3:
            report = batches.batch(self.target, _ref(f"{parts[1]}/{parts[2]}"))
            live = report.batch.status.value == "open"
            return self._page(f"Batch {report.batch.ref}", pages.batch_page(report, self.csrf, self.read_only), flash,
                              refresh_s=BATCH_REFRESH_S if live else None)
        raise Refused(404, f"no page {path}")

    # -- actions -------------------------------------------------------------------------------

    def post(self, path: str, form: dict[str, str], cookie_token: str | None) -> str:
        """Do one action; returns where to go next (a page with the result as its flash line)."""
        if self.read_only:
            raise Refused(403, "this console is read-only")
        if not (secrets.compare_digest(form.get("csrf", ""), self.csrf) and secrets.compare_digest(cookie_token or "", self.csrf)):
            raise Refused(403, "missing or stale form token: reload the page")
        if form.get("confirm") != "yes":
            raise Refused(400, "tick the confirmation first")
        who = form.get("who", "").strip()
        if not who or len(who) > 128:
            raise Refused(400, "say who you are (1..128 characters)")
        self.target.refresh()
        if path == "/actions/run":
            job = form.get("job", "")
            result = jobs.run(self.target, job, who)
            message = f"{who} ran {job}: {result.outcome or result.status}" + (f" ({result.error})" if result.error else "")
            back = f"/jobs/{quote(job)}"
        elif path in ("/actions/disable", "/actions/enable"):
            job = form.get("job", "")
            enabled = path.endswith("enable")
            changes = switches.set_rules(self.target, enabled, job)
            message = f"{who} {'enabled' if enabled else 'disabled'} {job}: rule {', '.join(c.state for c in changes)}"
            back = "/"
        elif path == "/actions/retry":
            ref = _ref(form.get("batch", ""))
            counts = batches.retry_failed(self.target, ref, who)
            message = f"{who} retried {counts.retried} failed item(s) of {ref}; {counts.skipped_quota} left failed (quota)"
            back = f"/batches/{quote(ref.tenant)}/{quote(ref.batch_id)}"
        else:
            raise Refused(404, f"no action {path}")
        self.audit(f"audit: {message}")
        return f"{back}?msg={quote(message)}"


def _ref(text: str) -> Any:
    try:
        return parse_ref(text)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None


def _handler(app: ConsoleApp, port_of: Callable[[], int]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # actions are audited; page views are not worth a line
            pass

        def _send(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Cache-Control", "no-store")
            self.send_header("X-Frame-Options", "DENY")
            self.send_header("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'")
            # SameSite=Strict: another site's form cannot send it, so a forged POST has no matching cookie
            self.send_header("Set-Cookie", f"{CSRF_COOKIE}={app.csrf}; Path=/; HttpOnly; SameSite=Strict")
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _local_host(self) -> bool:
            # a page on another name that resolves here (DNS rebinding) gets nothing
            host = (self.headers.get("Host") or "").lower()
            return host in (f"127.0.0.1:{port_of()}", f"localhost:{port_of()}")

        def _error(self, status: int, reason: str) -> None:
            self._send(status, pages.page("Error", f"<p class='bad' id='error'>{pages.escape(reason)}</p>",
                                          target=app.target.name, now_ms=app.target.clock.now_ms()))

        def do_GET(self) -> None:
            if not self._local_host():
                return self._error(403, "unknown host")
            url = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(url.query).items()}
            try:
                self._send(200, app.get(url.path, query))
            except Refused as exc:
                self._error(exc.status, str(exc))
            except OperatorError as exc:
                self._error(404, str(exc))

        def do_POST(self) -> None:
            if not self._local_host():
                return self._error(403, "unknown host")
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_FORM_BYTES:
                return self._error(413, "form too large")
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode(errors="replace")).items()}
            cookie = SimpleCookie(self.headers.get("Cookie") or "").get(CSRF_COOKIE)
            try:
                location = app.post(urlsplit(self.path).path, form, cookie.value if cookie else None)
            except Refused as exc:
                return self._error(exc.status, str(exc))
            except OperatorError as exc:
                return self._error(400, str(exc))
            self.send_response(303)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


class _HTTPServer(ThreadingHTTPServer):
    request_queue_size = 64  # a browser opens several connections at once (the default backlog is 5)
    daemon_threads = True


class ConsoleServer:
    """The console on 127.0.0.1 (port 0: a free one), served from a thread."""

    def __init__(self, app: ConsoleApp, port: int = 0) -> None:
        self.app = app
        self.httpd = _HTTPServer((HOST, port), _handler(app, lambda: self.port))
        self.port = self.httpd.server_port
        self.url = f"http://{HOST}:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="console", daemon=True)

    def start(self) -> "ConsoleServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=10)


def serve(target: Target, port: int, read_only: bool, console: Console) -> int:
    """Serve until interrupted (Ctrl-C)."""
    app = ConsoleApp(target, read_only, audit=lambda line: console.print(line, markup=False))
    server = ConsoleServer(app, port)
    mode = "read-only" if read_only else "actions need a confirmation and your name"
    console.print(f"jobfence console on {server.url} ({target.name}; {mode}); Ctrl-C stops it", markup=False)
    try:
        server.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0
