"""The console against a real account's stack, with moto standing in for the account.

`AwsTarget` (the `--profile` path) reads the stack the session's runtime
deployed into moto, with the credentials of an IAM role the operator assumed
through STS. Whether the console may act is IAM's policy simulator's answer
for that role: moto does not implement `SimulatePrincipalPolicy`, so the
decisions come from a recording port where a test needs them, and the real
simulator's failure shows the console falls back to read-only when unsure.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request

import pytest

from jobfence_ops.commands import jobs
from jobfence_ops.console.access import IamSimulator, detect
from jobfence_ops.console.server import CSRF_COOKIE, MAX_FORM_BYTES, ConsoleApp, ConsoleServer
from jobfence_ops.targets import AwsTarget, EmbeddedTarget

pytestmark = pytest.mark.server

TRUST = json.dumps({"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::123456789012:root"}, "Action": "sts:AssumeRole"}]})


class RecordingSimulator:
    """Answers like IAM's simulator: every call allowed except those in `deny`; remembers what it was asked."""

    def __init__(self, deny: frozenset[str] = frozenset()) -> None:
        self.deny = deny
        self.asked: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = []

    def decisions(self, principal_arn, calls, resources):
        self.asked.append((principal_arn, calls, resources))
        return {call: "implicitDeny" if call in self.deny else "allowed" for call in calls}


@pytest.fixture
def account(runtime, monkeypatch, request):
    """An operator role in moto's IAM, assumed through STS: its session credentials are the process's."""
    name = f"operator-{request.node.name[-40:].strip('_')}-{runtime.clock.now_ms() % 100000}"[:64]
    role = runtime.session.client("iam").create_role(RoleName=name, Path="/ops/", AssumeRolePolicyDocument=TRUST)["Role"]
    creds = runtime.session.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="erin")["Credentials"]
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", creds["AccessKeyId"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", creds["SecretAccessKey"])
    monkeypatch.setenv("AWS_SESSION_TOKEN", creds["SessionToken"])
    target = AwsTarget(None, runtime.emulator.region, runtime.topology.stack_name)
    return target, role["Arn"]


def test_the_account_target_reads_the_deployed_stack(account, runtime):
    target, _ = account
    assert sorted(target.topology.job_functions()) == sorted(runtime.topology.job_functions())
    assert target.name.startswith("aws (default credentials")
    report = jobs.status(target)
    assert {j.job for j in report.jobs} == set(runtime.topology.job_functions())
    assert all(j.rule_state in ("ENABLED", "DISABLED") for j in report.jobs if j.schedule)


def test_a_role_allowed_every_call_may_act_and_is_simulated_as_its_role(account, runtime):
    target, role_arn = account
    simulator = RecordingSimulator()
    access = detect(target, simulator)
    assert access.may_act, access.reason
    # the assumed-role session is simulated as the role itself (with its path), for each action's calls
    assert {principal for principal, _, _ in simulator.asked} == {role_arn}
    assert ":role/ops/" in role_arn
    asked = {call: resources for _, calls, resources in simulator.asked for call in calls}
    assert set(asked) >= {"lambda:InvokeFunction", "events:DisableRule", "events:EnableRule", "dynamodb:UpdateItem",
                          "dynamodb:TransactWriteItems", "sqs:SendMessage"}
    # on the deployed resources, not on "*"
    assert runtime.topology.job_rules()["clean_conversations"].arn in asked["events:DisableRule"]
    assert runtime.topology.job_functions()["clean_conversations"].arn in asked["lambda:InvokeFunction"]
    assert all(":dynamodb:" in arn and ":table/" in arn for arn in asked["dynamodb:TransactWriteItems"])
    assert all(arn.startswith("arn:aws:sqs:") for arn in asked["sqs:SendMessage"])


def test_a_role_refused_one_call_gets_a_read_only_console_that_says_why(account, runtime):
    target, role_arn = account
    access = detect(target, RecordingSimulator(deny=frozenset({"events:DisableRule"})))
    assert not access.may_act
    assert access.reason == f"{role_arn} may not events:DisableRule (disable and enable): implicitDeny by IAM's policy simulator"
    audit: list[str] = []
    server = ConsoleServer(ConsoleApp(target, audit=audit.append, access=access)).start()
    try:
        with urllib.request.urlopen(server.url + "/", timeout=30) as response:
            html = response.read().decode()
        assert "read-only: " in html and "may not events:DisableRule" in html
        assert "class='act'" not in html and "clean_conversations" in html
        request = urllib.request.Request(server.url + "/actions/disable", data=b"job=clean_conversations", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 403
    finally:
        server.stop()
    assert audit == []
    events = runtime.session.client("events")
    assert events.describe_rule(Name=runtime.rule_of_job("clean_conversations"))["State"] == "ENABLED"


def test_when_the_simulator_cannot_answer_the_console_is_read_only(account):
    # moto has no SimulatePrincipalPolicy: the real simulator's call fails, and unsure means read-only
    target, _ = account
    access = detect(target, IamSimulator(target.session))
    assert not access.may_act
    assert access.reason.startswith("could not check the caller's permissions (") and "read-only when unsure" in access.reason


def test_a_caller_that_is_neither_a_user_nor_a_role_is_read_only(runtime):
    # moto's own default identity is `arn:aws:sts::...:user/moto`: not a principal the simulator takes
    target = AwsTarget(None, runtime.emulator.region, runtime.topology.stack_name)
    simulator = RecordingSimulator()
    access = detect(target, simulator)
    assert not access.may_act and "neither an IAM user nor an assumed role" in access.reason
    assert simulator.asked == []


def test_the_console_refuses_another_host_name_and_an_oversized_form(runtime):
    server = ConsoleServer(ConsoleApp(EmbeddedTarget(runtime))).start()
    app = server.app

    def status(request: urllib.request.Request) -> int:
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    try:
        # a page on another name that resolves to 127.0.0.1 (DNS rebinding) gets nothing
        rebound = urllib.request.Request(server.url + "/")
        rebound.add_header("Host", f"attacker.example:{server.port}")
        assert status(rebound) == 400
        assert status(urllib.request.Request(server.url + "/batches")) == 200
        # a form past 8 KiB is refused before it is parsed, even with a good token and confirmation
        form = f"job=clean_dpop_proofs&confirm=yes&csrf={app.csrf}&pad={'x' * MAX_FORM_BYTES}".encode()
        big = urllib.request.Request(server.url + "/actions/disable", data=form, method="POST")
        big.add_header("Cookie", f"{CSRF_COOKIE}={app.csrf}")
        assert status(big) == 413
    finally:
        server.stop()
    events = runtime.session.client("events")
    assert events.describe_rule(Name=runtime.rule_of_job("clean_dpop_proofs"))["State"] == "ENABLED"


def test_an_action_aws_refuses_says_its_error_code_on_the_page(account, runtime):
    # GIVEN a console allowed to act whose view of one rule names a rule AWS does not have
    target, _ = account
    job = "clean_conversations"
    rule = target.topology.job_rules()[job]
    target.topology.rules = {name: (dataclasses.replace(r, name=f"{r.name}-gone") if r is rule else r)
                             for name, r in target.topology.rules.items()}
    audit: list[str] = []
    server = ConsoleServer(ConsoleApp(target, audit=audit.append, access=detect(target, RecordingSimulator()))).start()
    try:
        form = f"job={job}&confirm=yes&csrf={server.app.csrf}".encode()
        request = urllib.request.Request(server.url + "/actions/disable", data=form, method="POST")
        request.add_header("Cookie", f"{CSRF_COOKIE}={server.app.csrf}")
        # WHEN the operator disables it, THEN the page says what AWS answered, and nothing is audited as done
        with pytest.raises(urllib.error.HTTPError) as failed:
            urllib.request.urlopen(request, timeout=30)
        assert failed.value.code == 502
        assert "AWS answered ResourceNotFoundException; the action stopped there" in failed.value.read().decode()
    finally:
        server.stop()
    assert audit == []
    assert runtime.session.client("events").describe_rule(Name=rule.name)["State"] == "ENABLED"
