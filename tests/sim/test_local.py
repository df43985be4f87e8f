"""The background local runtime's control API, driven through the CLI with `--local`.

The daemon here serves the session's shared runtime from a thread (the same
`Daemon` that `python -m jobfence_ops.local.daemon` runs in its own process), so the
commands chain against one state: submit a batch, kill a worker, advance time,
watch the batch recover, all as separate CLI invocations.
"""

from __future__ import annotations

import json

import pytest

from tests.sim.chained import cli

pytestmark = pytest.mark.server


def test_commands_chain_against_the_running_runtime(local_dir, runtime, tmp_path):
    # GIVEN a batch of 12 submitted through the CLI with quota for 10, and the generation worker
    # armed to die mid-batch on its next delivery
    tenant = f"local-{runtime.clock.now_ms()}"
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"id": f"i-{n:02d}", "input": {"title": f"t{n}"}}) + "\n" for n in range(12)))
    code, out = cli("--local", "--as", "dana", "batch", "submit", f"{tenant}/b", str(items), "--grant-quota", "10")
    assert code == 0 and "12 wake-up(s) sent" in out, out
    code, out = cli("local", "kill-worker")
    assert code == 0 and "listing_generation-worker" in out, out
    # WHEN simulated time advances through the control API
    code, out = cli("local", "advance", "2h")
    # THEN the kill is reported as it happens, with progress and the totals of the advance
    assert code == 0 and "died mid-batch" in out and "advanced 2 h" in out and "tick ran=" in out, out
    # AND a later command sees the same state: the killed items recovered (visibility timeout,
    # reclaim), two failed for quota
    code, out = cli("batch", f"{tenant}/b", "--local", "--json")
    report = json.loads(out)
    assert report["counts"] == {"pending": 0, "running": 0, "completed": 10, "failed": 2, "cancelled": 0}, report["counts"]
    assert report["batch"]["status"] == "finalized"
    # WHEN the tenant gets two more actions and the failed items are retried
    code, out = cli("--local", "quota", tenant, "--grant", "2", "--json")
    assert code == 0 and json.loads(out)["available"] == 2, out
    code, out = cli("--local", "--as", "dana", "retry-failed", f"{tenant}/b")
    assert code == 0 and "retried 2 item(s)" in out, out
    assert cli("local", "advance", "30m")[0] == 0
    # THEN every item completed
    report = json.loads(cli("batch", f"{tenant}/b", "--local", "--json")[1])
    assert report["counts"]["completed"] == 12 and report["batch"]["retried_by"] == "dana"
    # AND status reads the runtime's simulated now
    code, out = cli("status", "--local", "--json")
    assert json.loads(out)["now_ms"] == runtime.clock.now_ms()


def test_disable_all_then_advance_fires_nothing_until_enable_all(local_dir, runtime):
    assert cli("--local", "disable", "--all")[0] == 0
    try:
        code, out = cli("local", "advance", "1h")
        assert code == 0 and "tick not fired (rule disabled)=" in out and "tick ran" not in out, out
    finally:
        assert cli("--local", "enable", "--all")[0] == 0
    code, out = cli("local", "advance", "1h")
    assert "tick ran=" in out and "not fired" not in out, out


def test_run_all_invokes_every_job_at_once_through_the_control_api(local_dir, runtime):
    # 16 connections at once: the control server's listen backlog takes them all (its default of 5
    # reset some under load: "Connection reset by peer" for two jobs)
    code, out = cli("run-all", "--local")
    lines = out.strip().splitlines()
    assert code == 0 and lines[-1] == f"passed: {len(runtime.topology.job_functions())}  failed: 0", out


def test_the_control_api_refuses_a_request_without_its_token(local_dir):
    import http.client

    state = json.loads((local_dir / "state.json").read_text())
    host, port = state["control_url"].removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    connection.request("POST", "/invoke", body=b'{"function": "x"}')
    assert connection.getresponse().status == 403
    assert oct((local_dir / "state.json").stat().st_mode & 0o777) == "0o600"
