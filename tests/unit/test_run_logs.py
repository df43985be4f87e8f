"""One run's log lines (`jobfence_ops.commands.run_logs`): the local runtime's log file, a Logs Insights query.

Local: GIVEN a function's log with two invocations interleaved WHEN a run's lines are read THEN the lines of
the request that wrote its run id, and only those, bounded. AWS: GIVEN a fake CloudWatch Logs client WHEN a
run's lines are asked for THEN the run's query on the function's log group over its time window, read back
within a bounded number of polls (no real sleep), its rows as lines; a failure is a note, never an exception.
"""

from __future__ import annotations

import json

from botocore.exceptions import ClientError

from jobfence_ops.commands import run_logs
from jobfence_ops.commands.jobs import RunView, log_query

RUN = RunView(job="clean", run_id="r-1", outcome="ran", trigger="manual", started_at=1_700_000_000_000,
              finished_at=1_700_000_002_000, duration_ms=2000, holder="h", fence=3)


def line(request: str, message: str, **fields) -> str:
    return json.dumps({"level": "INFO", "message": message, "timestamp": "t", "function_request_id": request,
                       **fields})


def test_the_local_lines_are_those_of_the_request_that_wrote_the_run(tmp_path):
    log = tmp_path / "jobfence-clean.log"
    log.write_text("\n".join([
        line("req-a", "deleting expired rows", count=7),
        line("req-b", "another invocation, same function"),
        "Traceback (most recent call last): a print names no request",
        '{"_aws": {"Timestamp": 1}, "ran": [1.0]}',
        line("req-a", "scheduled_job", run_id="r-1", outcome="ran"),
        line("req-b", "scheduled_job", run_id="r-2", outcome="ran"),
    ]) + "\n")
    found = run_logs.local_lines(log, "r-1")
    assert [entry.message for entry in found.lines] == ["deleting expired rows", "scheduled_job"]
    assert dict(found.lines[0].fields)["count"] == "7" and found.note is None
    assert found.source.startswith("local runtime: jobfence-clean.log")


def test_the_local_lines_are_bounded_by_the_tail_read_and_a_count(tmp_path):
    log = tmp_path / "f.log"
    log.write_text("\n".join(line("req-a", f"line {n}", run_id="r-1") for n in range(50)) + "\n")
    found = run_logs.local_lines(log, "r-1", limit=10)
    assert len(found.lines) == 10 and found.note == "the first 10 of 50 line(s)"
    # a tail smaller than the file reads the newest lines only (a partial first line is dropped)
    tail = run_logs.local_lines(log, "r-1", tail_bytes=len(line("req-a", "line 49", run_id="r-1")) * 3)
    assert 1 < len(tail.lines) <= 3 and tail.lines[-1].message == "line 49"


def test_a_run_no_line_names_and_a_log_never_written_say_so(tmp_path):
    (tmp_path / "f.log").write_text(line("req-a", "x", run_id="r-9") + "\n")
    assert run_logs.local_lines(tmp_path / "f.log", "r-1").note.startswith("no line names run r-1")
    assert run_logs.local_lines(tmp_path / "none.log", "r-1").note.startswith("the function has not written")


class FakeLogs:
    """CloudWatch Logs' Insights calls: a query runs for `running` reads, then completes with `rows`."""

    def __init__(self, rows, running=1, fail=None):
        self.rows, self.running, self.fail = rows, running, fail
        self.started: list[dict] = []
        self.reads = 0

    def start_query(self, **kwargs):
        if self.fail:
            raise ClientError({"Error": {"Code": self.fail, "Message": "no"}}, "StartQuery")
        self.started.append(kwargs)
        return {"queryId": "q-1"}

    def get_query_results(self, queryId):
        assert queryId == "q-1"
        self.reads += 1
        if self.reads <= self.running:
            return {"status": "Running", "results": []}
        return {"status": "Complete", "results": [[{"field": k, "value": v} for k, v in row.items()] for row in self.rows]}


def test_an_aws_run_s_lines_are_its_insights_query_s_results_after_a_bounded_wait():
    logs = FakeLogs([{"@timestamp": "2023-11-14 22:13:20.000", "level": "INFO", "message": "scheduled_job",
                      "outcome": "ran", "@ptr": "x"}], running=2)
    waits: list[float] = []
    found = run_logs.insights_lines(logs, "jobfence-clean", RUN, now_ms=RUN.finished_at + 1, sleep=waits.append)
    (started,) = logs.started
    assert started["logGroupName"] == "/aws/lambda/jobfence-clean" and started["queryString"] == log_query(RUN)
    assert started["startTime"] == 1_700_000_000 - run_logs.WINDOW_S
    assert started["endTime"] == 1_700_000_002 + run_logs.WINDOW_S
    assert waits == [run_logs.INSIGHTS_POLL_S] * 2 and logs.reads == 3
    (only,) = found.lines
    assert (only.at, only.level, only.message, only.fields) == (
        "2023-11-14 22:13:20.000", "INFO", "scheduled_job", (("outcome", "ran"),))
    assert found.query == log_query(RUN) and found.complete and found.source.endswith("/aws/lambda/jobfence-clean")


def test_a_query_still_running_after_the_polls_or_refused_is_a_note():
    slow = run_logs.insights_lines(FakeLogs([], running=99), "f", RUN, 0, sleep=lambda s: None, polls=3)
    assert slow.lines == () and not slow.complete
    assert slow.note == "the query is still running after 3 reads (id q-1): reload"
    refused = run_logs.insights_lines(FakeLogs([], fail="AccessDeniedException"), "f", RUN, 0, sleep=lambda s: None)
    assert refused.note == "CloudWatch Logs answered AccessDeniedException" and refused.query == log_query(RUN)


def test_a_finished_deployed_run_s_lines_are_queried_once(monkeypatch):
    calls: list[str] = []

    def fake(target, run, sleep):
        calls.append(run.run_id)
        return run_logs.RunLogs("CloudWatch Logs Insights: g", (), "q")

    monkeypatch.setattr(run_logs, "run_logs", fake)
    cache = run_logs.LogCache(size=1)
    cache.get(None, RUN)
    cache.get(None, RUN)
    assert calls == ["r-1"]
    running = RunView(**{**RUN.__dict__, "run_id": "r-2", "finished_at": None})
    cache.get(None, running)
    cache.get(None, running)
    assert calls == ["r-1", "r-2", "r-2"]  # a running run's lines may grow: read again


def test_the_insights_calls_are_what_the_logs_api_takes_and_a_job_never_invoked_has_no_group(aws):
    # GIVEN moto's CloudWatch Logs (it checks the calls' parameters; it does not filter on JSON fields)
    import boto3

    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_group(logGroupName="/aws/lambda/jobfence-clean")
    # WHEN the run's query is started and read THEN the API accepts it and completes
    found = run_logs.insights_lines(logs, "jobfence-clean", RUN, RUN.finished_at, sleep=lambda s: None)
    assert found.complete and found.query == log_query(RUN)
    # AND a function that never logged (no group yet) is a note, not an error page
    missing = run_logs.insights_lines(logs, "jobfence-never", RUN, RUN.finished_at, sleep=lambda s: None)
    assert missing.note == "CloudWatch Logs answered ResourceNotFoundException" and not missing.complete
