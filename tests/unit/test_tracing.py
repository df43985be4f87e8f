"""Powertools Tracer on every handler: AWS calls become subsegments; no payload is recorded.

Tracing patches botocore process-wide, so the traced invocation runs in a child
process (with the Lambda environment and an in-memory X-Ray emitter), never in
the test process itself.
"""

from __future__ import annotations

import json
import re
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

CHILD = r'''
import json, os, sys
sys.path.insert(0, "functions")
from aws_xray_sdk.core import xray_recorder
from moto import mock_aws

class Memory:
    def __init__(self): self.sent = []
    def send_entity(self, entity): self.sent.append(entity.to_dict())
    def set_daemon_address(self, address): pass
    ip, port = "127.0.0.1", 2000

memory = Memory()
xray_recorder.configure(emitter=memory, sampling=False, context_missing="RUNTIME_ERROR")
import boto3
from jobfence.tracing import handler_tracer, traced

tracer = handler_tracer("club")

@traced(tracer)
def handler(event, context):
    boto3.client("sts", region_name="us-east-1").get_caller_identity()
    if event.get("fail"):
        raise RuntimeError("SECRET-IN-ERROR")
    return {"token": "SECRET-IN-RESPONSE"}

class Context:
    function_name, aws_request_id, memory_limit_in_mb, invoked_function_arn = "f", "r", 128, "arn:aws:lambda:x"

with mock_aws():
    handler({"body": "SECRET-IN-EVENT"}, Context())
    try:
        handler({"fail": True}, Context())
    except RuntimeError:
        pass
print(json.dumps(memory.sent))
'''


def _traced_child() -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
    env.update({"LAMBDA_TASK_ROOT": str(ROOT / "functions"), "AWS_DEFAULT_REGION": "us-east-1",
                "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1",
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a traced handler in a subprocess
def test_a_traced_handler_records_its_aws_calls_and_no_payload():
    sent = _traced_child()
    handlers = [e for e in sent if e["name"] == "## handler"]
    # THEN each invocation is a subsegment with only the service and cold-start annotations ...
    assert len(handlers) == 2
    assert all(set(e.get("annotations", {})) == {"ColdStart", "Service"} for e in handlers)
    # ... its boto3 call is a child subsegment (botocore is patched; each is streamed on its own) ...
    children = [e["name"].lower() for e in sent if e.get("parent_id") in {h["id"] for h in handlers}]
    assert children == ["sts", "sts"], children
    # ... and neither the event, the response nor the error text is anywhere in what is sent
    rendered = json.dumps(sent)
    assert "SECRET-IN" not in rendered
    # AND the failed invocation is a fault that names only the exception's class
    failed = handlers[1]
    assert failed.get("fault") is True and failed["metadata"] == {"club": {"error_type": "RuntimeError"}}


def test_every_handler_is_wrapped_by_the_tracer():
    handlers = sorted(p for p in (ROOT / "functions" / "handlers").glob("*.py") if p.name != "__init__.py")
    assert {p.stem for p in handlers} >= {"scheduled", "worker", "discord", "health", "rotate_signing_key"}
    runtime = sorted(p for p in (ROOT / "functions" / "jobfence" / "handler").glob("*.py") if p.name != "__init__.py")
    assert {p.stem for p in runtime} >= {"scheduled", "worker"}
    traced = re.compile(r"@traced\((tracer|handler_tracer\([^)]*\))\)\n\s*def handler\(")
    for path in handlers + runtime:
        text, name = path.read_text(), f"{path.parent.name}/{path.stem}"
        if "def handler(" in text:
            assert traced.search(text), name
        else:  # a thin wrapper over one of the runtime's handlers (checked above)
            assert re.search(r"^from jobfence\.handler import \w+_handler", text, re.M), name


def test_the_tracer_patches_aws_and_http_and_is_off_outside_lambda():
    from jobfence.tracing import AWS_MODULES, HTTP_MODULES, handler_tracer

    assert (AWS_MODULES, HTTP_MODULES) == (("botocore",), ("httplib",))
    assert handler_tracer("club").disabled  # no LAMBDA_TASK_ROOT in the test process


def test_a_function_patches_only_what_it_calls(monkeypatch):
    """AWS calls unless it makes none (health), HTTP only with a provider: patching botocore imports it."""
    from aws_lambda_powertools import Tracer

    from jobfence.tracing import handler_tracer

    patched: list[tuple[str, ...]] = []
    monkeypatch.setattr(Tracer, "patch", lambda self, modules=None: patched.append(tuple(modules or ("all",))))
    monkeypatch.setattr(Tracer, "_is_tracer_disabled", staticmethod(lambda: False))
    Tracer._reset_config()
    try:
        handler_tracer("club")
        handler_tracer("club", http=True)
        handler_tracer("club", aws=False)
    finally:
        Tracer._reset_config()
    assert patched == [("botocore",), ("botocore", "httplib")]  # and nothing at all for a function calling neither
