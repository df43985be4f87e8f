"""The club scheduler's health endpoint: service name and job count on GET / and /health, nothing else."""

from __future__ import annotations

import json

import pytest

from tests.support import load_event


@pytest.fixture
def health():
    import handlers.health as module

    return module


@pytest.mark.parametrize("name", ["health_get", "health_root"])
def test_health_answers_the_service_name_and_the_seven_jobs(health, lambda_context, name):
    response = health.handler(load_event(name), lambda_context)
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {"service": "club-scheduler", "jobs": 7}


@pytest.mark.parametrize("name", ["malformed_health_post", "malformed_health_other_path"])
def test_other_methods_and_paths_reveal_nothing(health, lambda_context, name):
    response = health.handler(load_event(name), lambda_context)
    assert response["statusCode"] in (404, 405)
    body = response["body"] or ""
    assert "club-scheduler" not in body and "jobs" not in json.loads(body or "{}")


def test_the_count_is_the_club_scheduler_jobs_of_the_catalog(health):
    from jobs.catalog import CATALOG

    club_30_min = [j for j in CATALOG.jobs.values() if j.subsystem == "club" and j.schedule == "cron(0/30 * * * ? *)"]
    assert health.JOB_COUNT == len(club_30_min) == 7
