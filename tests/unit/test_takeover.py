"""Takeover after a death (issue 12, part 6): the lease TTL defaults to the function timeout plus the
safety margin, and the benchmark's measurement of the ticks a dead holder costs is the real lease's."""

from __future__ import annotations

import dataclasses

import pytest

from jobfence.registry import LEASE_MARGIN_S, CatalogError, Registry
from jobs.catalog import CATALOG
from ops.bench.takeover import takeovers
from tests.runner_support import spec


def test_the_lease_ttl_defaults_to_the_timeout_plus_the_margin():
    assert spec(timeout_s=120).lease_ttl_s == 120 + LEASE_MARGIN_S
    assert spec(timeout_s=120, lease_ttl_s=1800).lease_ttl_s == 1800


def test_a_ttl_below_the_timeout_plus_the_margin_is_refused_and_the_minimum_is_allowed():
    Registry(tables=(), jobs=[spec(timeout_s=120, lease_ttl_s=180)])
    with pytest.raises(CatalogError, match=r"lease ttl 179s must be at least the function timeout 120s"):
        Registry(tables=(), jobs=[spec(timeout_s=120, lease_ttl_s=179)])


def test_the_commerce_api_jobs_keep_their_sources_30_minutes_and_the_others_take_the_default():
    thirty = {j.name for j in CATALOG.jobs.values() if j.lease_ttl_s == 30 * 60}
    assert thirty == {"clean_conversations", "clean_dpop_proofs", "recover_pending_cancellations",
                      "recover_financial_operations", "expire_agent_invitations"}
    for job in CATALOG.jobs.values():
        if job.name not in thirty:
            assert job.lease_ttl_s == job.timeout_s + LEASE_MARGIN_S, job.name


def test_a_dead_holder_costs_a_five_minute_job_six_ticks_under_a_30_minute_ttl_and_none_under_the_default():
    # GIVEN a 5-minute job with a 120 s timeout, once with the old 30-minute TTL and once with the default
    job = spec(name="every_5", schedule="rate(5 minutes)", interval_s=300, timeout_s=120)
    old, new = dataclasses.replace(job, name="every_5_old", lease_ttl_s=1800), job
    # WHEN its holder dies after taking the lease (measured on the real conditional acquire)
    lost = {t.job: t for t in takeovers([old, new])}
    # THEN the old TTL refuses six ticks the gate would have let run, the default none
    assert lost["every_5_old"].lost == 6 and lost["every_5_old"].ttl_s == 1800
    assert lost["every_5"].lost == 0 and lost["every_5"].ttl_s == 180
    assert lost["every_5"].takeover_after_ms <= 10 * 60_000


def test_a_ttl_equal_to_the_period_loses_the_tick_that_arrives_as_the_term_expires():
    # a 5-minute job whose timeout plus margin is exactly 5 minutes: the on-time tick at the expiry instant
    # still sees the term (a term is live through its expires_at), so a death costs that one tick
    job = spec(name="tight", schedule="rate(5 minutes)", interval_s=300, timeout_s=240)
    (result,) = takeovers([job])
    assert (result.ttl_s, result.lost, result.delay_ms) == (300, 1, 0)
