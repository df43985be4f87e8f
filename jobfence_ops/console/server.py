"""`jobfence console`: a small web console over a target, on localhost (starlette, served by uvicorn).

Read-mostly: jobs (schedule, next tick, lease, last run, the last day's runs
by outcome), one job's runs, one run's row and its log lines, batches with
progress bars and their item rows by status. Four actions, each a POST with
a CSRF token (form field and SameSite cookie) and a ticked confirmation, each
recorded in the audit table with who acted (the caller identity, never a typed
name: `jobfence_ops.audit`, `identity`): run now, retry failed items, cancel a
batch, disable and enable a job's rule, stop and resume everything. /audit lists the entries. A read-only console renders no button,
says in its header why it is read-only, and refuses every POST. A page of an
The jobs, job, run and batch pages refresh their live parts by themselves (a small
same-origin script, `static/live.js`, that never replaces a form in use; without
script, a refresh link). Pages are rendered on the server (`pages`, `charts`,
`run_views`) with the console's own stylesheet (`static/`): no inline style or
script, no build step.

`ConsoleApp` is the console's logic over one target (pages and actions);
`asgi` wraps it in a starlette application (routes, the host check, a bounded
form parser); `ConsoleServer` runs that under uvicorn on 127.0.0.1 from a
thread (tests), `serve` in the foreground (the CLI).
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qs, quote

import uvicorn
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from jobfence.dynamo import error_code
from jobfence_ops import audit
from jobfence_ops.audit import Audited, Operator, batch_subject, job_subject, operator_of
from jobfence_ops.commands import actions, batches, jobs, run_logs, run_search, stall, switches
from jobfence_ops.commands.batches import parse_ref
from jobfence_ops.console import assets, audit_pages, identity, pages, run_views
from jobfence_ops.console.access import Access
from jobfence_ops.local.control import LocalError
from jobfence_ops.targets import OperatorError, Target

HOST = "127.0.0.1"
LOCAL_NAMES = ["127.0.0.1", "localhost"]  # a page on another name that resolves here (DNS rebinding) gets nothing
CSRF_COOKIE = "jobfence_csrf"
MAX_FORM_BYTES = 8 * 1024
BATCH_REFRESH_S = 3
BACKLOG = 64  # a browser opens several connections at once
DOWN_REFRESH_S = 5  # a page served while the local runtime is down retries this often
CONSOLE = "console"  # the audit entries' source
AUDIT_ROWS = 200  # entries on the audit page
JOB_ENTRIES = 20  # entries on a job's page
MAX_RESULTS = 256  # action results kept for their redirect's page (the oldest go first)
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    # the console's own stylesheet and script only (`static/`): no inline style or script runs on its pages
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; form-action 'self'; "
        "base-uri 'none'; frame-ancestors 'none'"
    ),
}
LIVE_S = 5  # a live page's parts refresh this often (an open batch's: BATCH_REFRESH_S at most)


class Refused(Exception):
    """A request the console refuses (bad token, read-only, unconfirmed); HTTP status and reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class ConsoleApp:
    """Pages and actions over one target; `audit(line)` receives every action taken.

    `access` says whether this console may act and why (`jobfence_ops.console.access`);
    `read_only=True` is the explicit switch and wins over it.
    """

    def __init__(
        self,
        target: Target,
        read_only: bool = False,
        audit: Callable[[str], None] = print,
        access: Access | None = None,
        operator: Operator | None = None,
        proxy_header: str | None = None,
        live_s: int = LIVE_S,
    ) -> None:
        self.target = target
        # who acts: the caller identity of the console's credentials, asked once (`jobfence_ops.audit`); behind an
        # authenticating proxy (`proxy_header`), the user each request's header names (`identity.trusted_proxy`)
        self.operator = operator or operator_of(target)
        self.proxy_header = proxy_header
        self.live_s = live_s
        self.logs = run_logs.LogCache()  # a deployed run's Insights results, so a live run page queries once
        granted = access or Access(True, "actions need a confirmation")
        self.access = Access(False, "started with --read-only") if read_only else granted
        self.csrf = secrets.token_urlsafe(24)
        self.audit = audit
        # what the last actions did, by a random id the redirect carries (`?done=ID`): a page shows only a
        # result this console wrote, never text from the URL
        self._results: OrderedDict[str, str] = OrderedDict()
        self._results_lock = threading.Lock()

    def result(self, done: str | None) -> str | None:
        """The result line of an action this console took, by the id its redirect carried (None: unknown)."""
        if not done:
            return None
        with self._results_lock:
            return self._results.get(done)

    def _remember(self, message: str) -> str:
        done = secrets.token_urlsafe(12)
        with self._results_lock:
            self._results[done] = message
            while len(self._results) > MAX_RESULTS:
                self._results.popitem(last=False)
        return done

    @property
    def read_only(self) -> bool:
        return not self.access.may_act

    @property
    def who(self) -> Operator:
        """Who this request acts as: the proxy's user (trusted-proxy mode), else the console's caller identity."""
        return identity.requester() or self.operator

    def page(
        self,
        title: str,
        body: str,
        flash: str | None = None,
        refresh_s: int | None = None,
        stopped: switches.Stopped | None = None,
        live_s: int | None = None,
    ) -> str:
        """`stopped`: what is switched off, when the page has read it already (else read here, for the banner);
        `live_s`: the page refreshes its live parts this often; `refresh_s`: without script, it reloads."""
        mode = f"read-only: {self.access.reason}" if self.read_only else None
        stopped = stopped if stopped is not None else switches.stopped(self.target)
        return pages.page(
            title,
            body,
            target=self.target.name,
            now_ms=self.target.clock.now_ms(),
            flash=flash,
            refresh_s=refresh_s,
            mode=mode,
            stopped=stopped.describe() if stopped else None,
            identity=self.who.describe(),
            live_s=live_s,
        )

    # -- reads ---------------------------------------------------------------------------------

    def jobs(self, flash: str | None) -> str:
        self.target.refresh()
        report = jobs.status(self.target)
        ledgers = {j.job: jobs.last_day(self.target, j.job) for j in report.jobs}
        body = pages.jobs_page(report, ledgers, self.csrf, self.read_only)
        return self.page("Jobs", body, flash, stopped=report.stopped, live_s=self.live_s)

    def job(self, job: str, flash: str | None, search: Mapping[str, str] | None = None) -> str:
        """`search`: the runs' filter as the job page's form sent it (`run_views.FILTER_FIELDS`)."""
        self.target.refresh()
        now = self.target.clock.now_ms()
        values = {k: v[:256] for k, v in (search or {}).items() if k in run_views.FILTER_FIELDS}
        try:
            run_filter = run_search.parse_filter(now, **values)
        except OperatorError as exc:
            raise Refused(400, f"search: {exc}") from None
        runs = run_search.search_runs(self.target, job, run_filter, 50)
        form = run_views.filter_form(job, values, None, len(runs))
        body = pages.job_page(job, runs, now, self.csrf, self.read_only, search=form)
        entries = self._entries(lambda log: log.about(job_subject(job), 0, now, JOB_ENTRIES))
        body += audit_pages.section("Actions on this job", *entries)
        return self.page(f"Runs of {job}", body, flash, live_s=self.live_s)

    def ledger(self, job: str, span: str) -> str:
        if span not in pages.LEDGER_SPANS:
            raise Refused(400, f"a ledger covers one of {', '.join(pages.LEDGER_SPANS)}")
        self.target.refresh()
        now = self.target.clock.now_ms()
        ledger = jobs.job_ledger(self.target, job, now - pages.LEDGER_SPANS[span], now, look=True)
        return self.page(f"Ledger of {job}", pages.ledger_page(ledger, span, now))

    def run(self, job: str, run_id: str, flash: str | None) -> str:
        self.target.refresh()
        run = jobs.find_run(self.target, job, run_id)
        entries = self._entries(lambda log: audit.near_run(log, run))
        logs = run_views.logs_section(self.logs.get(self.target, run))
        body = pages.run_page(run, logs) + audit_pages.section("Actions on this job near this run", *entries)
        return self.page(f"Run {run_id}", body, flash, live_s=self.live_s)

    def batches(self, tenant: str | None, flash: str | None) -> str:
        self.target.refresh()
        return self.page("Batches", pages.batches_page(batches.batches(self.target, tenant), tenant), flash)

    def batch(self, ref_text: str, flash: str | None) -> str:
        self.target.refresh()
        report = batches.batch(self.target, _ref(ref_text))
        live = report.batch.status.value == "open"
        entries = self._entries(lambda log: log.about(batch_subject(report.batch.ref), 0, self.target.clock.now_ms()))
        stopped = switches.stopped(self.target)  # read once: the banner and why the batch is not done
        return self.page(
            f"Batch {report.batch.ref}",
            pages.batch_page(report, self.csrf, self.read_only)
            + pages.why_section(stall.why(self.target, report, stopped))
            + audit_pages.section("Actions on this batch", *entries),
            flash,
            stopped=stopped,
            refresh_s=BATCH_REFRESH_S if live else None,
            live_s=min(self.live_s, BATCH_REFRESH_S) if live else self.live_s,
        )

    def audit_log(self, actor: str, action: str, subject: str) -> str:
        """Every recorded action, newest first, filtered by actor (a part of it), action and subject."""
        self.target.refresh()
        if len(actor) > 128 or len(subject) > 200 or (action and action not in audit_pages.ACTIONS):
            raise Refused(400, "a filter is a part of a name, one of the actions, and a job:NAME or batch:T/B")
        found = audit.log_of(self.target).recent(
            self.target.clock.now_ms(), AUDIT_ROWS, actor=actor or None, action=action or None, subject=subject or None
        )
        return self.page("Audit", audit_pages.audit_page(found, actor, action, subject, AUDIT_ROWS))

    def _entries(self, read: Callable[[audit.AuditLog], list[audit.AuditEntry]]) -> tuple[Any, str | None]:
        """A page's audit entries, or None and why they could not be read (the page itself is still shown)."""
        try:
            return read(audit.log_of(self.target)), None
        except OperatorError as exc:
            return None, str(exc)
        except (ClientError, BotoCoreError) as exc:
            return None, f"the audit table could not be read: AWS answered {error_code(exc)}"

    # -- actions -------------------------------------------------------------------------------

    def _catch_up(self, changes: list[switches.Switch], who: Operator) -> tuple[str, list[Audited[Any]]]:
        """Each re-enabled job once for its last missed or disabled tick (as `enable --catch-up`)."""
        caught = [actions.catch_up(self.target, who, c.name, CONSOLE) for c in changes if c.kind == "rule"]
        return _catch_up_line([c.value for c in caught]), list(caught)

    def post(self, path: str, form: dict[str, str], cookie_token: str | None) -> str:
        """Do one action; returns where to go next (a page with the result as its flash line)."""
        if self.read_only:
            raise Refused(403, f"this console is read-only: {self.access.reason}")
        if not (
            secrets.compare_digest(form.get("csrf", ""), self.csrf)
            and secrets.compare_digest(cookie_token or "", self.csrf)
        ):
            raise Refused(403, "missing or stale form token: reload the page")
        if form.get("confirm") != "yes":
            raise Refused(400, "tick the confirmation first")
        operator = self.who
        who = operator.describe()
        self.target.refresh()
        done: list[Audited[Any]] = []
        if path == "/actions/run":
            job = form.get("job", "")
            ran = actions.run_now(self.target, operator, job, CONSOLE)
            done.append(ran)
            message = run_message(who, job, ran.value)
            back = f"/jobs/{quote(job)}"
        elif path in ("/actions/disable", "/actions/enable"):
            job = form.get("job", "")
            enabled = path.endswith("enable")
            switched = actions.set_rule(self.target, operator, job, enabled, CONSOLE)
            done.append(switched)
            changes = switched.value
            message = f"{who} {'enabled' if enabled else 'disabled'} {job}: rule {', '.join(c.state for c in changes)}"
            if enabled and form.get("catch_up") == "yes":
                line, caught = self._catch_up(changes, operator)
                message, done = message + line, done + caught
            back = "/"
        elif path in ("/actions/stop-all", "/actions/resume-all"):
            enabled = path.endswith("resume-all")
            switched = actions.set_everything(self.target, operator, enabled, CONSOLE)
            done.append(switched)
            changes = switched.value
            rules = sum(1 for c in changes if c.kind == "rule")
            message = (
                f"{who} {'resumed' if enabled else 'stopped'} everything: {rules} rule(s) "
                f"{'enabled' if enabled else 'disabled'}, {len(changes) - rules} queue worker(s) "
                f"{'resumed' if enabled else 'paused'}"
            )
            if enabled and form.get("catch_up") == "yes":
                line, caught = self._catch_up(changes, operator)
                message, done = message + line, done + caught
            back = "/"
        elif path == "/actions/retry":
            ref = _ref(form.get("batch", ""))
            retried = actions.retry_failed(self.target, operator, ref, CONSOLE)
            done.append(retried)
            counts = retried.value
            message = (
                f"{who} retried {counts.retried} failed item(s) of {ref}; {counts.skipped_quota} left failed (quota)"
            )
            back = f"/batches/{quote(ref.tenant)}/{quote(ref.batch_id)}"
        elif path == "/actions/cancel":
            ref = _ref(form.get("batch", ""))
            cancelled = actions.cancel(self.target, operator, ref, CONSOLE)
            done.append(cancelled)
            message = f"{who} cancelled {ref}: {batches.cancel_summary(cancelled.value)}"
            back = f"/batches/{quote(ref.tenant)}/{quote(ref.batch_id)}"
        else:
            raise Refused(404, f"no action {path}")
        message += "".join(d.note() for d in done)  # a failed audit write is said beside the result
        self.audit(f"audit: {message}")
        return f"{back}?done={self._remember(message)}"


def run_message(who: str, job: str, result: jobs.JobResult) -> str:
    """What a Run now did, in words that cannot read as a run when none happened."""
    outcome = result.outcome or result.status
    if outcome.startswith("skipped"):
        return f"{who} asked to run {job}: {actions.run_result(result)}"
    return f"{who} ran {job}: {outcome}" + (f" ({result.error})" if result.error else "")


def _catch_up_line(results: list[jobs.CatchUpResult]) -> str:
    ran = [r for r in results if r.tick is not None]
    failed = [r.job for r in ran if not r.passed]
    return f"; caught up {len(ran)} job(s)" + (f", failed: {', '.join(failed)}" if failed else "")


def _ref(text: str) -> Any:
    try:
        return parse_ref(text)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None


# -- the starlette application ------------------------------------------------------------------


async def bounded_form(request: Request, limit: int = MAX_FORM_BYTES) -> dict[str, str]:
    """An urlencoded form of at most `limit` bytes (413 past it, read no further); first value per field."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise Refused(413, "form too large")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, "form too large")
    return {k: v[0] for k, v in parse_qs(body.decode(errors="replace")).items()}


def asgi(app: ConsoleApp) -> Starlette:
    """The console as an ASGI application: one route per page, one per action."""

    def html(body: str, status: int = 200) -> HTMLResponse:
        response = HTMLResponse(body, status, headers=SECURITY_HEADERS)
        # SameSite=Strict: another site's form cannot send it, so a forged POST has no matching cookie
        response.set_cookie(CSRF_COOKIE, app.csrf, path="/", httponly=True, samesite="strict")
        return response

    def error(status: int, reason: str) -> HTMLResponse:
        return html(app.page("Error", f"<p class='bad' id='error'>{pages.escape(reason)}</p>"), status)

    def flash(request: Request) -> str | None:
        return app.result(request.query_params.get("done"))

    def jobs_page(request: Request) -> Response:
        return html(app.jobs(flash(request)))

    def job_page(request: Request) -> Response:
        return html(app.job(request.path_params["job"], flash(request), request.query_params))

    def ledger_page(request: Request) -> Response:
        return html(app.ledger(request.path_params["job"], request.query_params.get("since", "24h")))

    def run_page(request: Request) -> Response:
        return html(app.run(request.path_params["job"], request.path_params["run_id"], flash(request)))

    def batches_page(request: Request) -> Response:
        return html(app.batches(request.query_params.get("tenant") or None, flash(request)))

    def batch_page(request: Request) -> Response:
        return html(app.batch(f"{request.path_params['tenant']}/{request.path_params['batch_id']}", flash(request)))

    def audit_page(request: Request) -> Response:
        q = request.query_params
        return html(app.audit_log(q.get("actor", "").strip(), q.get("action", ""), q.get("subject", "").strip()))

    async def action(request: Request) -> Response:
        if app.read_only:  # before reading anything: a read-only console refuses every POST
            raise Refused(403, f"this console is read-only: {app.access.reason}")
        form = await bounded_form(request)
        location = await run_in_threadpool(app.post, request.url.path, form, request.cookies.get(CSRF_COOKIE))
        return RedirectResponse(location, status_code=303)

    async def refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return error(exc.status, str(exc))

    async def operator_error(request: Request, exc: Exception) -> Response:
        return error(400 if request.method == "POST" else 404, str(exc))

    async def runtime_down(request: Request, exc: Exception) -> Response:
        # the local runtime stopped (or restarted and is not up yet): a page that says so and tries again
        body = (
            f"<p class='bad' id='down'>{pages.escape(str(exc))}</p>"
            f"<p class='muted'>This page reloads every {DOWN_REFRESH_S} s and shows the runtime again once it is up.</p>"
        )
        return html(pages.bare("Local runtime down", body, refresh_s=DOWN_REFRESH_S), 503)

    async def aws_error(request: Request, exc: Exception) -> Response:
        # a call AWS refused (a policy the simulator does not read) or failed: its code, never its text
        stopped = "; the action stopped there" if request.method == "POST" else ""
        return error(502, f"AWS answered {error_code(exc)}{stopped}")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405 and request.method == "POST" and app.read_only:
            return error(403, f"this console is read-only: {app.access.reason}")
        return error(exc.status_code, f"no page {request.url.path}" if exc.status_code == 404 else str(exc.detail))

    routes = [
        Route("/", jobs_page, methods=["GET"]),
        Route("/jobs/{job}", job_page, methods=["GET"]),
        Route("/jobs/{job}/ledger", ledger_page, methods=["GET"]),
        Route("/jobs/{job}/runs/{run_id}", run_page, methods=["GET"]),
        Route("/batches", batches_page, methods=["GET"]),
        Route("/batches/{tenant}/{batch_id}", batch_page, methods=["GET"]),
        Route("/audit", audit_page, methods=["GET"]),
        Route("/actions/{action}", action, methods=["POST"]),
        Route("/static/{name}", assets.serve, methods=["GET"]),
    ]
    refuse = lambda reason: HTMLResponse(  # noqa: E731 - the trusted proxy's refusal: a bare page, nothing read
        pages.bare("Refused", f"<p class='bad' id='error'>{pages.escape(reason)}</p>"), 401, headers=SECURITY_HEADERS
    )
    proxy = (
        [Middleware(identity.TrustedProxy, header=app.proxy_header, caller=app.operator.caller, refuse=refuse)]
        if app.proxy_header
        else []
    )
    return Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=LOCAL_NAMES), *proxy],
        exception_handlers={
            Refused: refused,
            OperatorError: operator_error,
            HTTPException: http_error,
            ClientError: aws_error,
            BotoCoreError: aws_error,
            LocalError: runtime_down,
        },
    )


# -- serving ------------------------------------------------------------------------------------


class ConsoleServer:
    """The console under uvicorn on 127.0.0.1 (port 0: a free one), served from a thread."""

    def __init__(self, app: ConsoleApp, port: int = 0) -> None:
        self.app = app
        # bound and listening here, so the port is known and a request sent before uvicorn's loop runs waits in the
        # backlog
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind((HOST, port))
        self.socket.listen(BACKLOG)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://{HOST}:{self.port}"
        config = uvicorn.Config(
            asgi(app),
            lifespan="off",
            log_config=None,
            log_level="warning",
            access_log=False,
            backlog=BACKLOG,
            timeout_graceful_shutdown=2,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="console", daemon=True
        )

    def start(self) -> ConsoleServer:
        self._thread.start()
        return self

    def run(self) -> None:
        """Serve in this thread until interrupted (uvicorn handles Ctrl-C in the main thread)."""
        self.server.run(sockets=[self.socket])

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        self.socket.close()


def serve(target: Target, port: int, access: Access, console: Console, proxy_header: str | None = None) -> int:
    """Serve until interrupted (Ctrl-C); `proxy_header`: behind an authenticating proxy (`identity`)."""
    app = ConsoleApp(
        target, audit=lambda line: console.print(line, markup=False), access=access, proxy_header=proxy_header
    )
    server = ConsoleServer(app, port)
    mode = f"read-only: {access.reason}" if not access.may_act else "actions need a confirmation"
    who = (
        f"each request acts as the user its proxy names in {proxy_header}"
        if proxy_header
        else f"acting as {app.operator.describe()}"
    )
    console.print(f"jobfence console on {server.url} ({target.name}; {mode}; {who}); Ctrl-C stops it", markup=False)
    try:
        server.run()
    except KeyboardInterrupt:  # uvicorn shut down gracefully, then re-raised the Ctrl-C it captured
        pass
    finally:
        server.socket.close()
    return 0
