"""The CLI checks its arguments before anything starts: one line on stderr, exit status 2."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from jobfence_ops.cli import duration_ms, main

BAD = [
    (["runs", "no_such_job"], "argument job: unknown job 'no_such_job'; jobs: audit_missed_runs, capture_abandoned_deferred"),
    (["runs", "clean_dpop_proofs", "--limit", "-5"], "argument --limit: between 1 and 1000, got -5"),
    (["batch", "no-slash"], "a batch is written tenant/batch, got 'no-slash'"),
    (["retry-failed", "t/"], "argument TENANT/BATCH:"),
    (["run", "nope"], "unknown job 'nope'"),
    (["disable"], "one of the arguments job --all is required"),
    (["enable", "clean_dpop_proofs", "--all"], "not allowed with argument"),
    (["invoke", "clean_dpop_proofs", "no_such_event"], "no event file 'no_such_event'"),
    (["ledger", "clean_dpop_proofs", "--since", "yesterday"], "argument --since: a duration is like 2h, 30m"),
    (["ledger", "nope"], "unknown job 'nope'"),
    (["ledger", "clean_dpop_proofs", "--since", "32d"], "argument --since: at most 31d, got '32d'"),
    (["--as", "   ", "run", "clean_dpop_proofs"], "argument --as: a name to record is 1..128 printable characters"),
    (["run", "clean_dpop_proofs", "--as", "Jane\x07Doe"], "argument --as: a name to record is 1..128 printable characters"),
    (["local", "advance", "2x"], "a duration is like 2h, 30m, 1h30m, 90s or 1d; got '2x'"),
    (["batch", "submit", "t/b", "/no/such/file.jsonl"], "no file '/no/such/file.jsonl'"),
    (["rotate-signing-key"], "the following arguments are required: job"),
    (["rotate-signing-key", "retry_email_intake", "--revoke"],
     "'retry_email_intake' has no event signing key; jobs with one: expire_memberships"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_a_bad_argument_is_one_line_and_exit_2_before_anything_starts(argv, message, capsys):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("jobfence: error: ") and err.count("\n") == 1 and message in err, err


def test_a_jsonl_file_with_a_bad_line_names_the_line(tmp_path, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text('{"title": "ok"}\n{"title": \n')
    with pytest.raises(SystemExit):
        main(["batch", "submit", "t/b", str(items)])
    assert f"{items}:2: not JSON" in capsys.readouterr().err


def test_without_a_running_local_runtime_a_local_command_says_how_to_start_one(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBFENCE_LOCAL_DIR", str(tmp_path))
    out = io.StringIO()
    code = main(["status", "--local"], console=Console(file=out, width=200))
    assert code == 2
    assert out.getvalue() == "jobfence: error: the local runtime is not up: start it with `jobfence local up`\n"


@pytest.mark.parametrize("text,ms", [("2h", 7_200_000), ("30m", 1_800_000), ("1h30m", 5_400_000), ("90s", 90_000), ("1d", 86_400_000), ("0.5h", 1_800_000)])
def test_durations(text, ms):
    assert duration_ms(text) == ms
