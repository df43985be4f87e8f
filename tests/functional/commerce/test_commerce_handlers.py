"""Every new job cold-started through `handlers.scheduled` with its sample event; the PayPal
jobs with the real adapter against the loopback PayPal stub and credentials in Secrets Manager."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from jobfence.clock import FrozenClock, SystemClock
from jobfence.config import provider_env, secret_env, secret_name, table_env
from jobfence.errors import InvalidEvent
from jobs.catalog import CATALOG
from jobs.commerce.deferred_payments import DeferredPaymentStore
from ops.stubs.paypal import PayPalStub
from jobfence.testing import rule_arn_of
from tests.support import delivered_now, load_event

NEW_JOBS = (
    "recover_pending_cancellations",
    "recover_financial_operations",
    "expire_agent_invitations",
    "capture_abandoned_deferred",
    "clean_operator_access_ledger",
)


def cold_start(monkeypatch, tables, job, extra=None):
    spec = CATALOG.job(job)
    env = {"JOB_NAME": job, "LEASES_TABLE": tables["leases"], "RUNS_TABLE": tables["runs"], "RULE_ARN": rule_arn_of(job)}
    env.update({table_env(name): tables[name] for name in spec.tables})  # only what infra grants it
    env.update(extra or {})
    for name in list(env):
        monkeypatch.setenv(name, env[name])
    sys.modules.pop("handlers.scheduled", None)
    return importlib.import_module("handlers.scheduled")


@pytest.fixture
def paypal(aws):
    stub = PayPalStub(SystemClock(), client_id="cid", client_secret="csecret")
    stub.start()
    aws.client("secretsmanager").create_secret(
        Name=secret_name("paypal_credentials"), SecretString=json.dumps({"client_id": "cid", "client_secret": "csecret"})
    )
    yield stub
    stub.stop()


def paypal_env(stub):
    return {provider_env("paypal"): stub.base_url, secret_env("paypal_credentials"): secret_name("paypal_credentials")}


def unload_paypal(monkeypatch, job):
    """As in a fresh function: neither PayPal's adapter nor the job's module loaded (restored after the test)."""
    for module in ("providers.paypal", CATALOG.job(job).entry.partition(":")[0]):
        if module in sys.modules:  # its package's attribute too: a re-import rebinds it
            package, _, name = module.rpartition(".")
            monkeypatch.setattr(sys.modules[package], name, sys.modules[module])
            monkeypatch.delitem(sys.modules, module)


@pytest.mark.parametrize("job", NEW_JOBS)
def test_each_new_job_runs_from_its_sample_tick(monkeypatch, tables, lambda_context, paypal, job):
    extra = paypal_env(paypal) if "paypal" in CATALOG.job(job).providers else {}
    handler = cold_start(monkeypatch, tables, job, extra)
    result = handler.handler(delivered_now(load_event(f"scheduled_tick_{job}")), lambda_context)
    assert (result["job"], result["outcome"]) == (job, "ran")


def test_the_safety_net_captures_over_the_real_http_path(monkeypatch, tables, lambda_context, paypal):
    # GIVEN a deferred intent untouched for 30 minutes whose PayPal order the buyer approved
    order = paypal.create_order("25.00")
    seeded_at = SystemClock().now_ms() - 30 * 60_000
    DeferredPaymentStore(tables["payment_intents"], FrozenClock(seeded_at)).create("intent-1", order, 2500)
    handler = cold_start(monkeypatch, tables, "capture_abandoned_deferred", paypal_env(paypal))
    # WHEN its function gets a tick
    result = handler.handler(delivered_now(load_event("scheduled_tick_capture_abandoned_deferred")), lambda_context)
    # THEN the real adapter captured it on the stub with the safety net's key
    assert result["summary"]["captured"] == 1
    assert paypal.orders[order].status == "COMPLETED"
    assert [r[2] for r in paypal.requests if r[1].endswith("/capture")] == ["safetynet:intent-1"]


@pytest.mark.parametrize("job", [job for job in NEW_JOBS if "paypal" in CATALOG.job(job).providers])
def test_a_paypal_job_s_tick_with_no_paypal_work_never_loads_paypal_s_adapter(monkeypatch, tables, lambda_context,
                                                                            paypal, job):
    # GIVEN a function whose process has not loaded PayPal's adapter
    unload_paypal(monkeypatch, job)
    handler = cold_start(monkeypatch, tables, job, paypal_env(paypal))
    # WHEN it gets a tick that finds no row needing PayPal
    result = handler.handler(delivered_now(load_event(f"scheduled_tick_{job}")), lambda_context)
    # THEN the tick ran without loading the adapter's module, nor calling PayPal
    assert (result["job"], result["outcome"]) == (job, "ran")
    assert "providers.paypal" not in sys.modules
    assert paypal.requests == []


def test_the_safety_net_builds_paypal_s_adapter_on_its_first_capture_and_reuses_it(monkeypatch, tables,
                                                                                    lambda_context, paypal):
    # GIVEN two deferred intents untouched for 30 minutes whose PayPal orders the buyers approved
    orders = [paypal.create_order("25.00"), paypal.create_order("30.00")]
    intents = DeferredPaymentStore(tables["payment_intents"], FrozenClock(SystemClock().now_ms() - 30 * 60_000))
    for i, order in enumerate(orders):
        intents.create(f"intent-{i}", order, 2500 + 500 * i)
    unload_paypal(monkeypatch, "capture_abandoned_deferred")
    # WHEN the function cold-starts THEN PayPal's adapter is not loaded yet
    handler = cold_start(monkeypatch, tables, "capture_abandoned_deferred", paypal_env(paypal))
    assert "providers.paypal" not in sys.modules
    # AND a tick captures both
    result = handler.handler(delivered_now(load_event("scheduled_tick_capture_abandoned_deferred")), lambda_context)
    assert result["summary"]["captured"] == 2
    assert [paypal.orders[order].status for order in orders] == ["COMPLETED", "COMPLETED"]
    # through one adapter, built by the first capture: one token for both (a second adapter would fetch its own)
    assert "providers.paypal" in sys.modules
    assert paypal.count("POST", "/v1/oauth2/token") == 1


def test_an_event_cannot_choose_the_job_or_its_parameters(monkeypatch, tables, lambda_context, paypal):
    handler = cold_start(monkeypatch, tables, "expire_agent_invitations")
    result = handler.handler(delivered_now(load_event("scheduled_tick_choosing_a_job")), lambda_context)
    assert result["job"] == "expire_agent_invitations"


def test_a_malformed_tick_is_refused_with_a_clear_error(monkeypatch, tables, lambda_context, paypal):
    handler = cold_start(monkeypatch, tables, "recover_financial_operations", paypal_env(paypal))
    with pytest.raises(InvalidEvent, match="time"):
        handler.handler(load_event("malformed_scheduled_tick_bad_time"), lambda_context)
