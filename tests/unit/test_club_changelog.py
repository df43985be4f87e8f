"""A publishing club job's change log: its grants checked at cold start, its publisher built on its first send."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jobfence.clock import FrozenClock
from jobfence.config import Settings, queue_env, secret_env, table_env
from jobfence.errors import SettingsError
from jobs.club.catalog import NOTIFICATIONS_QUEUE, signing_secret
from jobs.club.changes import PublisherOnFirstSend, build_changelog
from tests.support import CountingSession

JOB = "sync_darkroom_stats"


def deps(environ: dict[str, str], session) -> SimpleNamespace:
    """What `build_changelog` reads of a job's `JobDeps`."""
    return SimpleNamespace(settings=Settings.from_environ(environ), session=session, clock=FrozenClock(0),
                           spec=SimpleNamespace(name=JOB))


GRANTED = {table_env("club_outbox"): "outbox", queue_env(NOTIFICATIONS_QUEUE): "https://sqs.invalid/q",
           secret_env(signing_secret(JOB)): f"jobfence/{signing_secret(JOB)}"}


def test_a_change_log_makes_no_client_at_cold_start_but_checks_its_grants_there():
    # GIVEN a publishing job's cold start
    session = CountingSession()
    build_changelog(deps(GRANTED, session))
    # THEN neither the publisher's Secrets Manager nor its SQS client was made (a tick that sends nothing
    # never needs them)
    assert session.made == []
    # and a function without its queue or its signing key still fails at its cold start
    for missing in (queue_env(NOTIFICATIONS_QUEUE), secret_env(signing_secret(JOB))):
        with pytest.raises(SettingsError, match=missing):
            build_changelog(deps({k: v for k, v in GRANTED.items() if k != missing}, CountingSession()))


def test_the_publisher_is_built_on_the_first_send_and_reused():
    built, sent = [], []
    publisher = SimpleNamespace(publish=sent.append)
    # GIVEN a publisher built on first send
    lazy = PublisherOnFirstSend(lambda: built.append(1) or publisher)
    assert built == []
    # WHEN two events are sent
    lazy.publish("e1")
    lazy.publish("e2")
    # THEN it was built once, by the first, and both went through it
    assert (built, sent) == ([1], ["e1", "e2"])
