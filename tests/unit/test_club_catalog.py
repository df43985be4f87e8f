"""Catalog entries of the club: seven 30-minute jobs, the 5-minute intake, and who may hold the Discord token."""

from __future__ import annotations

from jobfence.scheduled import load_job
from jobs.catalog import CATALOG
from jobs.club.catalog import DISCORD_TOKEN_SECRET, NOTIFICATIONS_QUEUE, SIGNER_EVENTS, signing_secret, verify_secret


def _club_jobs():
    return [j for j in CATALOG.jobs.values() if j.subsystem == "club"]


def test_seven_jobs_every_thirty_minutes_each_its_own_spec():
    thirty = [j for j in _club_jobs() if j.schedule == "cron(0/30 * * * ? *)"]
    assert sorted(j.name for j in thirty) == sorted([
        "expire_memberships", "reconcile_membership_roles", "sweep_darkroom_schedule", "sweep_studio_schedule",
        "sync_darkroom_stats", "send_equipment_reminders", "expire_photographer_requests",
    ])
    assert all(j.interval_s == 1800 for j in thirty)


def test_the_email_intake_retry_has_its_own_five_minute_rule():
    intake = CATALOG.job("retry_email_intake")
    assert (intake.schedule, intake.interval_s) == ("rate(5 minutes)", 300)
    assert NOTIFICATIONS_QUEUE not in intake.queues


def test_no_scheduled_job_can_read_the_discord_token_or_call_discord():
    for job in CATALOG.jobs.values():
        assert DISCORD_TOKEN_SECRET not in job.secrets, job.name
        assert "discord" not in job.providers, job.name


def test_jobs_that_change_discord_send_signed_events_to_the_queue():
    for job in _club_jobs():
        if job.name == "retry_email_intake":
            continue
        # its own signing key only (never another job's, nor any verify key)
        assert job.queues == (NOTIFICATIONS_QUEUE,) and job.secrets == (signing_secret(job.name),), job.name
        # its own outbox rows: a put in each commit, the flush pages and deletes; no get, update or scan
        assert job.tables.get("club_outbox") == "query+put+delete", job.name


def test_only_the_discord_worker_holds_the_token_and_it_can_verify_but_not_sign():
    queue = CATALOG.queues[NOTIFICATIONS_QUEUE]
    assert queue.handler == "handlers.discord.handler"
    assert set(queue.secrets) == {DISCORD_TOKEN_SECRET, *(verify_secret(job) for job in SIGNER_EVENTS)}
    assert not any(name.startswith("club_signing_key_") for name in queue.secrets)
    assert queue.queues == ()  # it sends to no queue (its own URL comes with its event source)
    assert queue.providers == ("discord",)
    assert queue.tables == {"club_event_nonces": "get+put+update+delete"}


def test_every_club_job_entry_imports():
    for job in _club_jobs():
        assert callable(load_job(job))
