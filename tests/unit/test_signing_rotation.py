"""The signing keys' rotation function: Secrets Manager's four steps, each retry-safe, public half first; one
function for every job's pair, each rotated alone.

Driven through the real handler (`handlers.rotate_signing_key.build`) against moto's Secrets Manager,
as Secrets Manager's schedule calls it: one token, the four steps in order, any step possibly re-sent.
"""

from __future__ import annotations

import importlib
import os
import uuid

import pytest

from jobfence.config import secret_env
from jobfence.errors import InvalidEvent
from jobs.club.rotation import Step
from jobs.club.catalog import signing_secret, verify_secret
from jobs.club.signing import SigningKey, VerifyKey
from providers.secrets import CURRENT, PREVIOUS
from tests.support import signing_pair

JOB, OTHER = "send_equipment_reminders", "reconcile_membership_roles"
SIGNING, VERIFY = f"jobfence/{signing_secret(JOB)}", f"jobfence/{verify_secret(JOB)}"
OTHER_SIGNING, OTHER_VERIFY = f"jobfence/{signing_secret(OTHER)}", f"jobfence/{verify_secret(OTHER)}"


@pytest.fixture
def sm(aws):
    client = aws.client("secretsmanager")
    old = signing_pair(b"o" * 32)
    client.create_secret(Name=SIGNING, SecretString=old.signing_value)
    client.create_secret(Name=VERIFY, SecretString=old.verify_value)
    other = signing_pair(b"p" * 32)
    client.create_secret(Name=OTHER_SIGNING, SecretString=other.signing_value)
    client.create_secret(Name=OTHER_VERIFY, SecretString=other.verify_value)
    return client


@pytest.fixture
def rotate(sm, clock, monkeypatch):
    for job in (JOB, OTHER):  # the function's environment names every pair it rotates
        monkeypatch.setenv(secret_env(signing_secret(job)), f"jobfence/{signing_secret(job)}")
        monkeypatch.setenv(secret_env(verify_secret(job)), f"jobfence/{verify_secret(job)}")
    module = importlib.import_module("handlers.rotate_signing_key")
    return module.build(os.environ, clock)


def _event(step: Step, token: str, secret: str = SIGNING) -> dict:
    return {"SecretId": secret, "ClientRequestToken": token, "Step": step.value}


def _current(sm, name: str, stage: str = CURRENT) -> str:
    return sm.get_secret_value(SecretId=name, VersionStage=stage)["SecretString"]


def test_the_four_steps_rotate_the_pair_public_half_first_and_each_retry_is_a_no_op(sm, rotate, lambda_context):
    old_kid = SigningKey.from_secret(_current(sm, SIGNING)).kid
    token = str(uuid.uuid4())
    arn = sm.describe_secret(SecretId=SIGNING)["ARN"]
    # GIVEN Secrets Manager running a rotation: the four steps with one token, each re-sent once (a lost reply)
    for step in Step:
        if step is Step.CREATE:
            _create_as_secrets_manager_does(sm, rotate, lambda_context, arn, token)
            continue
        rotate(_event(step, token, arn), lambda_context)
        if step is Step.SET:
            # THEN after setSecret the worker already accepts the new key, and still the old one
            new_kid = SigningKey.from_secret(sm.get_secret_value(SecretId=SIGNING, VersionId=token)["SecretString"]).kid
            assert VerifyKey.from_secret(_current(sm, VERIFY)).kid == new_kid
            assert VerifyKey.from_secret(_current(sm, VERIFY, PREVIOUS)).kid == old_kid
            # while jobs still sign with the old one
            assert SigningKey.from_secret(_current(sm, SIGNING)).kid == old_kid
        rotate(_event(step, token, arn), lambda_context)  # a re-sent step changes nothing
    # THEN jobs sign with the new key, which the verify secret's AWSCURRENT verifies
    signing = SigningKey.from_secret(_current(sm, SIGNING))
    assert signing.kid == new_kid != old_kid
    assert VerifyKey.from_secret(_current(sm, VERIFY)).verify(signing.sign(b"m"), b"m")
    # AND the other job's pair, rotated by the same function, is untouched (rotation per key)
    assert SigningKey.from_secret(_current(sm, OTHER_SIGNING)).kid == signing_pair(b"p" * 32).kid
    assert len(sm.list_secret_version_ids(SecretId=OTHER_VERIFY)["Versions"]) == 1
    # AND a step for a version that is current already is skipped
    assert rotate(_event(Step.FINISH, token, arn), lambda_context) == {"step": "finishSecret", "done": True}


def _create_as_secrets_manager_does(sm, rotate, lambda_context, arn, token):
    # RotateSecret labels the token's version AWSPENDING before calling createSecret; moto's cannot call a
    # rotation function, so the first createSecret runs the step directly (it finds no pending value and
    # stores one), and the re-sent one goes through the handler.
    from jobs.club.rotation import SigningRotation

    rotation = SigningRotation(sm, SIGNING, VERIFY)
    rotation.run(Step.CREATE, token)
    first = sm.get_secret_value(SecretId=SIGNING, VersionId=token)["SecretString"]
    rotate(_event(Step.CREATE, token, arn), lambda_context)  # re-sent: the pending key is kept
    assert sm.get_secret_value(SecretId=SIGNING, VersionId=token)["SecretString"] == first


@pytest.mark.parametrize("event, message", [
    ({"SecretId": VERIFY, "ClientRequestToken": "a" * 36, "Step": "createSecret"}, "only the signing secrets"),
    ({"SecretId": "jobfence/discord_token", "ClientRequestToken": "a" * 36, "Step": "createSecret"},
     "only the signing secrets"),
    ({"SecretId": SIGNING, "ClientRequestToken": "x", "Step": "createSecret"}, "ClientRequestToken"),
    ({"SecretId": SIGNING, "ClientRequestToken": "a" * 36, "Step": "dropSecret"}, "Step 'dropSecret'"),
    ({"SecretId": SIGNING, "ClientRequestToken": "a" * 36, "Step": "setSecret"}, "not a version"),
    ([], "takes Secrets Manager's"),
])
def test_anything_but_a_step_of_the_signing_secret_is_refused(sm, rotate, lambda_context, event, message):
    with pytest.raises(InvalidEvent, match=message):
        rotate(event, lambda_context)
    # AND nothing changed
    assert SigningKey.from_secret(_current(sm, SIGNING)).kid == SigningKey.from_secret(signing_pair(b"o" * 32).signing_value).kid


def test_set_secret_dates_the_new_public_key_and_a_re_sent_step_keeps_the_first_date(sm, clock):
    from jobs.club.rotation import SigningRotation

    rotation = SigningRotation(sm, SIGNING, VERIFY, clock)
    token = str(uuid.uuid4())
    rotation.run(Step.CREATE, token)
    # GIVEN setSecret at t0
    t0 = clock.now_ms()
    rotation.run(Step.SET, token)
    assert VerifyKey.from_secret(_current(sm, VERIFY)).since_ms == t0
    # WHEN Secrets Manager re-sends it a minute later (a lost reply)
    clock.advance(seconds=60)
    rotation.run(Step.SET, token)
    # THEN the stored version (and so the grace window of the old key) is the first one's
    assert VerifyKey.from_secret(_current(sm, VERIFY)).since_ms == t0
    assert len(sm.list_secret_version_ids(SecretId=VERIFY)["Versions"]) == 2


def test_revoke_drops_the_rotated_out_public_key_at_once_and_a_re_run_is_a_no_op(sm, clock):
    from jobs.club.rotation import SigningRotation

    old_kid = VerifyKey.from_secret(_current(sm, VERIFY)).kid
    rotation = SigningRotation(sm, SIGNING, VERIFY, clock)
    new_kid = rotation.rotate(str(uuid.uuid4()))
    assert VerifyKey.from_secret(_current(sm, VERIFY, PREVIOUS)).kid == old_kid
    # WHEN the operator revokes right after the rotation
    assert rotation.revoke() is not None
    # THEN no version of the verify secret is AWSPREVIOUS any more; AWSCURRENT is untouched
    stages = [s for v in sm.describe_secret(SecretId=VERIFY)["VersionIdsToStages"].values() for s in v]
    assert PREVIOUS not in stages
    assert VerifyKey.from_secret(_current(sm, VERIFY)).kid == new_kid
    # AND revoking again finds nothing to drop
    assert rotation.revoke() is None


def test_the_function_rotates_the_pair_whose_signing_secret_secrets_manager_names(sm, rotate, lambda_context):
    from jobs.club.rotation import SigningRotation

    token = str(uuid.uuid4())
    arn = sm.describe_secret(SecretId=OTHER_SIGNING)["ARN"]
    SigningRotation(sm, OTHER_SIGNING, OTHER_VERIFY).run(Step.CREATE, token)  # as RotateSecret stages it
    for step in (Step.SET, Step.TEST, Step.FINISH):
        rotate(_event(step, token, arn), lambda_context)
    # THEN the other job's public key went to its own verify secret, and JOB's pair is untouched
    assert VerifyKey.from_secret(_current(sm, OTHER_VERIFY)).kid == SigningKey.from_secret(_current(sm, OTHER_SIGNING)).kid
    assert SigningKey.from_secret(_current(sm, SIGNING)).kid == signing_pair(b"o" * 32).kid
    assert len(sm.list_secret_version_ids(SecretId=VERIFY)["Versions"]) == 1
