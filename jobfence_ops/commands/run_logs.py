"""One run's log lines, wherever the target keeps them (the console's run page).

- The local runtime (embedded or `jobfence local up`): each function's isolates write their stdout and
  stderr to `<runtime>/logs/<function>.log` (`jobfence_ops.runtime.worker`), every invocation's JSON lines
  carrying its `function_request_id` (Powertools). The run's own line (`run_id`) names the request; the
  lines of that request are the run's. Read from the file's tail (TAIL_BYTES) and at most MAX_LINES: a
  long-lived runtime's log never makes a page slow.
- AWS: the CloudWatch Logs Insights query `jobs.log_query` (the run's lines in the job's log group), started
  for the run's time window and read back after a bounded wait (`INSIGHTS_POLLS` x `INSIGHTS_POLL_S`); the
  query text is returned with the results, so the operator can run it again in the AWS console.
"""

from __future__ import annotations

import json
import os
import pathlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from jobfence.dynamo import error_code
from jobfence_ops.commands.jobs import RunView, check_job, log_query
from jobfence_ops.targets import EmbeddedTarget, LocalTarget, Target

TAIL_BYTES = 2 * 1024 * 1024  # the part of a function's local log read for one run (its newest)
MAX_LINES = 200  # a run's lines shown at most
MAX_FIELD_CHARS = 500  # a field's value shown at most (a stack trace is cut)
INSIGHTS_POLLS = 10  # get_query_results calls before the page says the query is still running
INSIGHTS_POLL_S = 1.0
WINDOW_S = 300  # the Insights query reaches this far before the run started and after it finished
SHOWN_FIRST = ("@timestamp", "timestamp", "level", "message")  # a line's columns; its other fields follow
HIDDEN = frozenset({"@ptr", "location", "function_arn", "function_memory_size", "cold_start", "service"})


@dataclass(frozen=True)
class LogLine:
    """One log line: when, how severe, what, and its other fields (name, value) as they came."""

    at: str
    level: str
    message: str
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunLogs:
    """A run's log lines and where they came from; `note` says why there are none or fewer than all."""

    source: str
    lines: tuple[LogLine, ...]
    query: str | None = None  # the run's Logs Insights query: the one run (AWS), or the one to run once deployed
    note: str | None = None
    complete: bool = True  # False: the query failed or is still running (a later read may find more)


def run_logs(target: Target, run: RunView, sleep: Callable[[float], None] = time.sleep) -> RunLogs:
    """The run's log lines: the local runtime's log file, or a Logs Insights query in AWS."""
    function = check_job(target, run.job).name
    folder = local_log_dir(target)
    if folder is not None:
        found = local_lines(folder / f"{function}.log", run.run_id or "")
        return replace(found, query=log_query(run))  # what finds its line once deployed
    return insights_lines(target.session.client("logs"), function, run, target.clock.now_ms(), sleep)


def local_log_dir(target: Target) -> pathlib.Path | None:
    """Where a local runtime's functions write their logs; None for a deployed stack."""
    if isinstance(target, EmbeddedTarget):
        return target.runtime.log_dir
    if isinstance(target, LocalTarget):
        return pathlib.Path(target.control.state().log_dir)
    return None


def local_lines(path: pathlib.Path, run_id: str, tail_bytes: int = TAIL_BYTES, limit: int = MAX_LINES) -> RunLogs:
    """The lines of the invocation(s) that wrote `run_id`, from the tail of one function's log file."""
    source = f"local runtime: {path.name} (its last {tail_bytes // 1024} KiB)"
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(0, size - tail_bytes))
            text = log.read().decode(errors="replace")
    except FileNotFoundError:
        return RunLogs(source, (), note="the function has not written a log line on this runtime")
    parsed = [_json(line) for line in text.splitlines()]
    requests = {p.get("function_request_id") for p in parsed if p and p.get("run_id") == run_id} - {None}
    if not requests:
        return RunLogs(source, (), note=f"no line names run {run_id} (older lines are past the tail read)")
    lines = [_line(p) for p in parsed if p and p.get("function_request_id") in requests]
    note = f"the first {limit} of {len(lines)} line(s)" if len(lines) > limit else None
    return RunLogs(source, tuple(lines[:limit]), note=note)


def _json(text: str) -> dict[str, Any] | None:
    if not text.startswith("{"):
        return None  # a print or a traceback outside the structured logger: it names no request
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _line(fields: Mapping[str, Any]) -> LogLine:
    def text(value: Any) -> str:
        shown = value if isinstance(value, str) else json.dumps(value, default=str)
        return shown[:MAX_FIELD_CHARS]

    at = fields.get("@timestamp", fields.get("timestamp", ""))
    rest = tuple((k, text(v)) for k, v in fields.items() if k not in SHOWN_FIRST and k not in HIDDEN)
    return LogLine(text(at), text(fields.get("level", "")), text(fields.get("message", "")), rest)


def insights_lines(
    logs: Any,
    function: str,
    run: RunView,
    now_ms: int,
    sleep: Callable[[float], None] = time.sleep,
    polls: int = INSIGHTS_POLLS,
) -> RunLogs:
    """Start the run's Insights query on the function's log group; read its results within `polls` polls."""
    group = f"/aws/lambda/{function}"
    query = log_query(run)
    source = f"CloudWatch Logs Insights: {group}"
    started = (run.started_at or now_ms - 86_400_000) // 1000 - WINDOW_S
    finished = (run.finished_at or now_ms) // 1000 + WINDOW_S
    try:
        query_id = logs.start_query(
            logGroupName=group, startTime=started, endTime=finished, queryString=query, limit=MAX_LINES
        )["queryId"]
        for n in range(polls):
            answer = logs.get_query_results(queryId=query_id)
            status = answer.get("status")
            if status == "Complete":
                rows = [{f["field"]: f.get("value", "") for f in row} for row in answer.get("results", [])]
                note = None if rows else "the query found no line of this run (Logs may take a minute to ingest)"
                return RunLogs(source, tuple(_line(r) for r in rows[:MAX_LINES]), query, note)
            if status in ("Failed", "Cancelled", "Timeout", "Unknown"):
                return RunLogs(source, (), query, f"the query ended {status}", complete=False)
            if n + 1 < polls:
                sleep(INSIGHTS_POLL_S)
    except (ClientError, BotoCoreError) as exc:
        return RunLogs(source, (), query, f"CloudWatch Logs answered {error_code(exc)}", complete=False)
    note = f"the query is still running after {polls} reads (id {query_id}): reload"
    return RunLogs(source, (), query, note, complete=False)


class LogCache:
    """A deployed run's log lines by (job, run id), once its query completed and the run finished: a live run
    page reads them once, not one Insights query per refresh. A local runtime's are read afresh (a file's tail).
    The oldest go first past `size`."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._kept: OrderedDict[tuple[str, str], RunLogs] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, target: Target, run: RunView, sleep: Callable[[float], None] = time.sleep) -> RunLogs:
        key = (run.job, run.run_id or "")
        with self._lock:
            if key in self._kept:
                return self._kept[key]
        logs = run_logs(target, run, sleep)
        if logs.source.startswith("CloudWatch") and run.finished_at is not None and logs.complete:
            with self._lock:
                self._kept[key] = logs
                while len(self._kept) > self.size:
                    self._kept.popitem(last=False)
        return logs
