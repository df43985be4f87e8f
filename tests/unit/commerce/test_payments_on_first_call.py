"""The PayPal jobs' payment port: its grants checked at cold start, PayPal's adapter built on its first call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from aws_lambda_powertools import Logger

from jobfence.clock import FrozenClock
from jobfence.config import Settings, provider_env, secret_env, secret_name, table_env
from jobfence.errors import SettingsError
from jobs.catalog import CATALOG
from jobs.commerce.financial_recovery import build_recover_financial_operations
from jobs.commerce.safety_net import build_capture_abandoned_deferred
from providers.payments import PaymentsOnFirstCall
from providers.payments_fake import FakePayments
from tests.support import CountingSession

BUILDS = {"capture_abandoned_deferred": build_capture_abandoned_deferred,
          "recover_financial_operations": build_recover_financial_operations}
PAYPAL_GRANTS = {provider_env("paypal"): "https://paypal.invalid",
                 secret_env("paypal_credentials"): secret_name("paypal_credentials")}


def deps(job: str, environ: dict[str, str], session: CountingSession) -> SimpleNamespace:
    """What a PayPal job's factory reads of its `JobDeps`: the tables infra grants it, and `environ`."""
    tables = {table_env(name): f"t-{name}" for name in CATALOG.job(job).tables}
    return SimpleNamespace(settings=Settings.from_environ(tables | environ), session=session, clock=FrozenClock(0),
                           logger=Logger(service="unit"), spec=CATALOG.job(job))


@pytest.mark.parametrize("job", sorted(BUILDS))
def test_a_paypal_job_s_cold_start_makes_no_paypal_client_but_checks_its_grants(job):
    # GIVEN a PayPal job's function built with its grants
    session = CountingSession()
    BUILDS[job](deps(job, PAYPAL_GRANTS, session))
    # THEN PayPal's adapter made no Secrets Manager client (a tick that calls PayPal makes it)
    assert session.made == []
    # and a function without PayPal's URL or its credentials' secret still fails at its cold start
    for missing in PAYPAL_GRANTS:
        with pytest.raises(SettingsError, match=missing):
            BUILDS[job](deps(job, {k: v for k, v in PAYPAL_GRANTS.items() if k != missing}, CountingSession()))


def test_the_adapter_is_built_by_the_first_call_and_reused_by_every_later_one():
    built: list[FakePayments] = []
    fake = FakePayments()
    fake.approve("O-1", 1_000)
    fake.approve("O-2", 2_000)
    # GIVEN a port built on first call
    port = PaymentsOnFirstCall(lambda: built.append(fake) or fake)
    assert built == []
    # WHEN it captures twice and refunds
    first = port.capture("O-1", "k1")
    port.capture("O-2", "k2")
    port.refund(first.capture_id, 500, "EUR", "k3")
    # THEN the adapter was built once, by the first call, and every call reached it
    assert len(built) == 1
    assert (fake.captures_of("O-1"), fake.captures_of("O-2"), fake.refunded) == (1, 1, {first.capture_id: 500})


def test_a_failed_build_raises_its_own_error_from_the_call_and_the_next_call_builds_again():
    fake = FakePayments()
    fake.approve("O-1", 1_000)
    attempts: list[int] = []

    def build() -> FakePayments:
        attempts.append(1)
        if len(attempts) == 1:
            raise SettingsError("PROVIDER_PAYPAL_URL is not set: this function calls no provider 'paypal'")
        return fake

    port = PaymentsOnFirstCall(build)
    # WHEN the first build fails THEN the call raises the build's own error, unwrapped (what the cold start
    # raised before: the job handles it as any error of that call)
    with pytest.raises(SettingsError, match="PROVIDER_PAYPAL_URL"):
        port.capture("O-1", "k1")
    # AND the next call builds again, and then uses the adapter
    assert port.capture("O-1", "k1").amount_cents == 1_000
    port.capture("O-1", "k1")
    assert len(attempts) == 2
